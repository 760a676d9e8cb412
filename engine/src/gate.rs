//! Gates: the named reasons a component declines an item, in one table.
//!
//! A component records a gate on [`ApplyCx::gate`](crate::pipeline::ApplyCx::gate) each time it leaves
//! an item alone, and `/stats` counts them per component (`components.<name>.gates`). Each
//! gate is a constant here with the line that explains it, so a name cannot be misspelt, and
//! `docs/components.md`'s table of gates is rendered from [`ALL`] (a test checks it).

/// One reason to leave an item alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gate {
    /// The name `/stats` counts it under.
    pub name: &'static str,
    /// What it means, in one line.
    pub doc: &'static str,
}

/// The output has terminal noise, but cleaning it changes nothing.
pub const ALREADY_CLEAN: Gate = Gate {
    name: "already_clean",
    doc: "the output has terminal noise, but cleaning it changes nothing",
};

/// The JSON is already written without whitespace.
pub const ALREADY_COMPACT: Gate = Gate {
    name: "already_compact",
    doc: "the JSON is already written without whitespace",
};

/// The model's cut would save less than the call costs.
pub const BELOW_BREAK_EVEN: Gate = Gate {
    name: "below_break_even",
    doc: "the model's cut would save less than the call costs",
};

/// The request is under the screener's `budget.context_tokens × soft_ratio`.
pub const BELOW_BUDGET_PRESSURE: Gate = Gate {
    name: "below_budget_pressure",
    doc: "the request is under the screener's `budget.context_tokens × soft_ratio`",
};

/// A new cut would save less than the turn's cost floor (the cost guard's learned floor).
pub const BELOW_COST_FLOOR: Gate = Gate {
    name: "below_cost_floor",
    doc: "a new cut would save less than the turn's cost floor (the cost guard's learned floor)",
};

/// The output is within `max_tokens`.
pub const BELOW_MAX_TOKENS: Gate = Gate {
    name: "below_max_tokens",
    doc: "the output is within `max_tokens`",
};

/// The JSON array has fewer than `min_items` items.
pub const BELOW_MIN_ITEMS: Gate = Gate {
    name: "below_min_items",
    doc: "the JSON array has fewer than `min_items` items",
};

/// Everything the screener found would save under `budget.min_savings_tokens`.
pub const BELOW_MIN_SAVINGS: Gate = Gate {
    name: "below_min_savings",
    doc: "everything the screener found would save under `budget.min_savings_tokens`",
};

/// The output is shorter than the component's minimum size.
pub const BELOW_MIN_SIZE: Gate = Gate {
    name: "below_min_size",
    doc: "the output is shorter than the component's minimum size",
};

/// The output is under the component's `min_tokens`.
pub const BELOW_MIN_TOKENS: Gate = Gate {
    name: "below_min_tokens",
    doc: "the output is under the component's `min_tokens`",
};

/// The output is under the extractor's floor (`min_tokens`).
pub const BELOW_OUTPUT_FLOOR: Gate = Gate {
    name: "below_output_floor",
    doc: "the output is under the extractor's floor (`min_tokens`)",
};

/// The transcript has fewer messages than the trigger.
pub const BELOW_TRIGGER_MESSAGES: Gate = Gate {
    name: "below_trigger_messages",
    doc: "the transcript has fewer messages than the trigger",
};

/// The transcript has fewer tokens than the trigger.
pub const BELOW_TRIGGER_TOKENS: Gate = Gate {
    name: "below_trigger_tokens",
    doc: "the transcript has fewer tokens than the trigger",
};

/// The request already has the provider's four `cache_control` breakpoints.
pub const BREAKPOINT_BUDGET_SPENT: Gate = Gate {
    name: "breakpoint_budget_spent",
    doc: "the request already has the provider's four `cache_control` breakpoints",
};

/// The message already carries a `cache_control` breakpoint.
pub const BREAKPOINT_PRESENT: Gate = Gate {
    name: "breakpoint_present",
    doc: "the message already carries a `cache_control` breakpoint",
};

/// A new decision inside the provider's cached prefix on a warm turn would break the cache.
pub const CACHED_PREFIX: Gate = Gate {
    name: "cached_prefix",
    doc: "a new decision inside the provider's cached prefix on a warm turn would break the cache",
};

/// The session's rewrites cost more than they saved, so it backs off.
pub const COST_GUARD: Gate = Gate {
    name: "cost_guard",
    doc: "the session's rewrites cost more than they saved, so it backs off",
};

/// The component does not act on this dialect.
pub const DIALECT_UNSUPPORTED: Gate = Gate {
    name: "dialect_unsupported",
    doc: "the component does not act on this dialect",
};

/// The diff against the earlier output is not much smaller than the output.
pub const DIFF_TOO_LARGE: Gate = Gate {
    name: "diff_too_large",
    doc: "the diff against the earlier output is not much smaller than the output",
};

/// An earlier run of the command passed, so it is not superseded by a failure.
pub const EARLIER_RUN_PASSED: Gate = Gate {
    name: "earlier_run_passed",
    doc: "an earlier run of the command passed, so it is not superseded by a failure",
};

/// The system prompt has no volatile tail after its stable head.
pub const EMPTY_TAIL: Gate = Gate {
    name: "empty_tail",
    doc: "the system prompt has no volatile tail after its stable head",
};

/// The output is empty.
pub const EMPTY: Gate = Gate {
    name: "empty",
    doc: "the output is empty",
};

/// The call is exempt by tool name or file pattern.
pub const EXEMPT: Gate = Gate {
    name: "exempt",
    doc: "the call is exempt by tool name or file pattern",
};

/// The output shows a failure, which is kept whole.
pub const FAILURE_IN_VIEW: Gate = Gate {
    name: "failure_in_view",
    doc: "the output shows a failure, which is kept whole",
};

/// The command ran once, so no run supersedes another.
pub const FEWER_THAN_TWO_RUNS: Gate = Gate {
    name: "fewer_than_two_runs",
    doc: "the command ran once, so no run supersedes another",
};

/// A command filter matched but left the output as it was.
pub const FILTER_MATCHED_NO_CHANGE: Gate = Gate {
    name: "filter_matched_no_change",
    doc: "a command filter matched but left the output as it was",
};

/// A frozen decision's original is gone from the store, so the output stays as sent.
pub const FREEZE_ORIGINAL_UNAVAILABLE: Gate = Gate {
    name: "freeze_original_unavailable",
    doc: "a frozen decision's original is gone from the store, so the output stays as sent",
};

/// A frozen decision could not be read back, so the output stays as sent.
pub const FREEZE_UNREADABLE: Gate = Gate {
    name: "freeze_unreadable",
    doc: "a frozen decision could not be read back, so the output stays as sent",
};

/// The output is in the screener's reserve (the latest `reserve.turns` user turns).
pub const IN_RESERVE: Gate = Gate {
    name: "in_reserve",
    doc: "the output is in the screener's reserve (the latest `reserve.turns` user turns)",
};

/// The output looks like JSON but does not parse.
pub const JSON_PARSE_FAILED: Gate = Gate {
    name: "json_parse_failed",
    doc: "the output looks like JSON but does not parse",
};

/// A model result that arrived after its turn was applied now.
pub const LATE_RESULT_APPLIED: Gate = Gate {
    name: "late_result_applied",
    doc: "a model result that arrived after its turn was applied now",
};

/// The per-request limit on model calls is spent.
pub const LLM_MAX_PER_REQUEST: Gate = Gate {
    name: "llm_max_per_request",
    doc: "the per-request limit on model calls is spent",
};

/// The marker and stub would not be smaller than the original.
pub const MARKER_NO_WIN: Gate = Gate {
    name: "marker_no_win",
    doc: "the marker and stub would not be smaller than the original",
};

/// The content already holds a marker, or is kept verbatim.
pub const MARKER_OR_KEPT_VERBATIM: Gate = Gate {
    name: "marker_or_kept_verbatim",
    doc: "the content already holds a marker, or is kept verbatim",
};

/// The call or its output holds a marker, or is not one text value.
pub const MARKER_OR_NOT_REWRITABLE: Gate = Gate {
    name: "marker_or_not_rewritable",
    doc: "the call or its output holds a marker, or is not one text value",
};

/// The model's program kept nothing.
pub const MODEL_EMPTY_RESULT: Gate = Gate {
    name: "model_empty_result",
    doc: "the model's program kept nothing",
};

/// The model call failed; the output stays whole.
pub const MODEL_FAILED: Gate = Gate {
    name: "model_failed",
    doc: "the model call failed; the output stays whole",
};

/// The model's answer is not back yet; it is used on a later turn.
pub const MODEL_PENDING: Gate = Gate {
    name: "model_pending",
    doc: "the model's answer is not back yet; it is used on a later turn",
};

/// The model's cut is not smaller than the output.
pub const MODEL_RESULT_NOT_SMALLER: Gate = Gate {
    name: "model_result_not_smaller",
    doc: "the model's cut is not smaller than the output",
};

/// The array's objects hold nested objects, which a table cannot show.
pub const NESTED_VALUES: Gate = Gate {
    name: "nested_values",
    doc: "the array's objects hold nested objects, which a table cannot show",
};

/// The newest tool output is never evicted.
pub const NEWEST_OUTPUT: Gate = Gate {
    name: "newest_output",
    doc: "the newest tool output is never evicted",
};

/// The newest read of a file is kept whole.
pub const NEWEST_READ: Gate = Gate {
    name: "newest_read",
    doc: "the newest read of a file is kept whole",
};

/// The read has no code the grammar can outline.
pub const NO_CODE: Gate = Gate {
    name: "no_code",
    doc: "the read has no code the grammar can outline",
};

/// No earlier output is identical.
pub const NO_EARLIER_IDENTICAL_OUTPUT: Gate = Gate {
    name: "no_earlier_identical_output",
    doc: "no earlier output is identical",
};

/// The request has no earlier turn to put a breakpoint on.
pub const NO_EARLIER_TURN: Gate = Gate {
    name: "no_earlier_turn",
    doc: "the request has no earlier turn to put a breakpoint on",
};

/// No command filter matches the call.
pub const NO_FILTER_MATCH: Gate = Gate {
    name: "no_filter_match",
    doc: "no command filter matches the call",
};

/// No command filters are loaded.
pub const NO_FILTERS_LOADED: Gate = Gate {
    name: "no_filters_loaded",
    doc: "no command filters are loaded",
};

/// No function body in the read is large enough to elide.
pub const NO_LARGE_BODIES: Gate = Gate {
    name: "no_large_bodies",
    doc: "no function body in the read is large enough to elide",
};

/// No line is over the cap and none repeats.
pub const NO_LONG_OR_REPEATED_LINES: Gate = Gate {
    name: "no_long_or_repeated_lines",
    doc: "no line is over the cap and none repeats",
};

/// No model is configured for the component.
pub const NO_MODEL: Gate = Gate {
    name: "no_model",
    doc: "no model is configured for the component",
};

/// The deterministic extractor found nothing to cut.
pub const NO_OBVIOUS_NOISE: Gate = Gate {
    name: "no_obvious_noise",
    doc: "the deterministic extractor found nothing to cut",
};

/// The output is not a list of paths.
pub const NO_PATH_SHAPE: Gate = Gate {
    name: "no_path_shape",
    doc: "the output is not a list of paths",
};

/// The paths share no prefix worth folding.
pub const NO_REPEATED_PREFIX: Gate = Gate {
    name: "no_repeated_prefix",
    doc: "the paths share no prefix worth folding",
};

/// No earlier output in the window is similar enough to diff against.
pub const NO_SIMILAR_EARLIER_OUTPUT: Gate = Gate {
    name: "no_similar_earlier_output",
    doc: "no earlier output in the window is similar enough to diff against",
};

/// The system prompt is not an array of blocks.
pub const NO_SYSTEM_ARRAY: Gate = Gate {
    name: "no_system_array",
    doc: "the system prompt is not an array of blocks",
};

/// The output has no terminal control sequences or progress lines.
pub const NO_TERMINAL_NOISE: Gate = Gate {
    name: "no_terminal_noise",
    doc: "the output has no terminal control sequences or progress lines",
};

/// The system prompt has no part that changes between turns.
pub const NO_VOLATILE_TAIL: Gate = Gate {
    name: "no_volatile_tail",
    doc: "the system prompt has no part that changes between turns",
};

/// The output is not one text value (images, documents, several blocks).
pub const NON_TEXT_BLOCKS: Gate = Gate {
    name: "non_text_blocks",
    doc: "the output is not one text value (images, documents, several blocks)",
};

/// The request is not an Anthropic Messages request.
pub const NOT_ANTHROPIC: Gate = Gate {
    name: "not_anthropic",
    doc: "the request is not an Anthropic Messages request",
};

/// The provider's caching does not use explicit breakpoints.
pub const NOT_CACHE_AWARE: Gate = Gate {
    name: "not_cache_aware",
    doc: "the provider's caching does not use explicit breakpoints",
};

/// The model's program did more than delete lines.
pub const NOT_DELETION_ONLY: Gate = Gate {
    name: "not_deletion_only",
    doc: "the model's program did more than delete lines",
};

/// The output is not a JSON array.
pub const NOT_JSON_ARRAY: Gate = Gate {
    name: "not_json_array",
    doc: "the output is not a JSON array",
};

/// The output does not look like JSON.
pub const NOT_JSON_SHAPED: Gate = Gate {
    name: "not_json_shaped",
    doc: "the output does not look like JSON",
};

/// The output does not start like JSON.
pub const NOT_JSON: Gate = Gate {
    name: "not_json",
    doc: "the output does not start like JSON",
};

/// The output is not a test or build run.
pub const NOT_RUN_LIKE: Gate = Gate {
    name: "not_run_like",
    doc: "the output is not a test or build run",
};

/// The rewrite is not smaller than the output.
pub const NOT_SMALLER: Gate = Gate {
    name: "not_smaller",
    doc: "the rewrite is not smaller than the output",
};

/// The JSON is not an array of objects with the same keys.
pub const NOT_UNIFORM_OBJECT_ARRAY: Gate = Gate {
    name: "not_uniform_object_array",
    doc: "the JSON is not an array of objects with the same keys",
};

/// Every item of the array carries information.
pub const NOTHING_TO_DROP: Gate = Gate {
    name: "nothing_to_drop",
    doc: "every item of the array carries information",
};

/// A system block's offset would not fit after the split (not expected to happen).
pub const OFFSET: Gate = Gate {
    name: "offset",
    doc: "a system block's offset would not fit after the split (not expected to happen)",
};

/// The grammar found errors in the code, so nothing is elided.
pub const PARSE_ERRORS: Gate = Gate {
    name: "parse_errors",
    doc: "the grammar found errors in the code, so nothing is elided",
};

/// The call is within the screener's `turns` of the latest step.
pub const RECENT: Gate = Gate {
    name: "recent",
    doc: "the call is within the screener's `turns` of the latest step",
};

/// The model kept expanding this output's marker, so the session put the original back in place.
pub const RESTORED_IN_PLACE: Gate = Gate {
    name: "restored_in_place",
    doc: "the model kept expanding this output's marker, so the session put the original back in place",
};

/// The model expanded this kind of output after a cut, so its outputs stay whole for the session.
pub const RETRIED_AFTER_COMPACTION: Gate = Gate {
    name: "retried_after_compaction",
    doc: "the model expanded this kind of output after a cut, so its outputs stay whole for the session",
};

/// The compact form does not decode back to the same JSON.
pub const ROUND_TRIP_FAILED: Gate = Gate {
    name: "round_trip_failed",
    doc: "the compact form does not decode back to the same JSON",
};

/// The provider signs reasoning blocks, so they are never rewritten.
pub const SIGNED_THINKING: Gate = Gate {
    name: "signed_thinking",
    doc: "the provider signs reasoning blocks, so they are never rewritten",
};

/// There is only one tool output.
pub const SINGLE_OUTPUT: Gate = Gate {
    name: "single_output",
    doc: "there is only one tool output",
};

/// The span to summarize is too short to be worth a summary.
pub const SPAN_TOO_SHORT: Gate = Gate {
    name: "span_too_short",
    doc: "the span to summarize is too short to be worth a summary",
};

/// The system prompt's stable head is too small to cache on its own.
pub const STABLE_HEAD_TOO_SMALL: Gate = Gate {
    name: "stable_head_too_small",
    doc: "the system prompt's stable head is too small to cache on its own",
};

/// Evicting every candidate would still not fit the budget.
pub const STILL_OVER_BUDGET: Gate = Gate {
    name: "still_over_budget",
    doc: "evicting every candidate would still not fit the budget",
};

/// The store refused the stash, so the content stays.
pub const STORE_FULL: Gate = Gate {
    name: "store_full",
    doc: "the store refused the stash, so the content stays",
};

/// The message content is one string, which cannot carry a breakpoint.
pub const STRING_CONTENT: Gate = Gate {
    name: "string_content",
    doc: "the message content is one string, which cannot carry a breakpoint",
};

/// An earlier component rewrote the system prompt.
pub const SYSTEM_REWRITTEN: Gate = Gate {
    name: "system_rewritten",
    doc: "an earlier component rewrote the system prompt",
};

/// The system prompt was split at its volatile tail (counted where it acted).
pub const SYSTEM_SPLIT: Gate = Gate {
    name: "system_split",
    doc: "the system prompt was split at its volatile tail (counted where it acted)",
};

/// The system prompt could not be read.
pub const SYSTEM_UNREAD: Gate = Gate {
    name: "system_unread",
    doc: "the system prompt could not be read",
};

/// The output has too few lines to collapse.
pub const TOO_FEW_LINES: Gate = Gate {
    name: "too_few_lines",
    doc: "the output has too few lines to collapse",
};

/// The output is over the sandbox's input limit.
pub const TOO_LARGE_FOR_SANDBOX: Gate = Gate {
    name: "too_large_for_sandbox",
    doc: "the output is over the sandbox's input limit",
};

/// A code region is over `max_bytes`.
pub const TOO_LARGE: Gate = Gate {
    name: "too_large",
    doc: "a code region is over `max_bytes`",
};

/// The output has too many lines to diff within budget.
pub const TOO_MANY_LINES: Gate = Gate {
    name: "too_many_lines",
    doc: "the output has too many lines to diff within budget",
};

/// A `tools:` rule excludes the call from every component.
pub const TOOL_EXCLUDED: Gate = Gate {
    name: "tool_excluded",
    doc: "a `tools:` rule excludes the call from every component",
};

/// A `tools:` rule does not allow this component on the call.
pub const TOOL_RULE: Gate = Gate {
    name: "tool_rule",
    doc: "a `tools:` rule does not allow this component on the call",
};

/// The output is within `cap_chars`.
pub const UNDER_CAP: Gate = Gate {
    name: "under_cap",
    doc: "the output is within `cap_chars`",
};

/// The body could not be parsed for a restructure.
pub const UNPARSED: Gate = Gate {
    name: "unparsed",
    doc: "the body could not be parsed for a restructure",
};

/// Tool outputs fit within `budget_tokens`.
pub const WITHIN_BUDGET: Gate = Gate {
    name: "within_budget",
    doc: "tool outputs fit within `budget_tokens`",
};

/// The output is among the newest `keep_recent`.
pub const WITHIN_KEEP_RECENT: Gate = Gate {
    name: "within_keep_recent",
    doc: "the output is among the newest `keep_recent`",
};

/// The reasoning is within the latest `keep_turns` user turns.
pub const WITHIN_KEEP_TURNS: Gate = Gate {
    name: "within_keep_turns",
    doc: "the reasoning is within the latest `keep_turns` user turns",
};

/// What the pipeline and the shared helpers record for any component: the cost guard, the
/// `tools:` rules, freeze replay, a model still thinking, and the offload helpers' own checks.
pub const ANY_COMPONENT: &[Gate] = &[
    BELOW_COST_FLOOR,
    COST_GUARD,
    FREEZE_ORIGINAL_UNAVAILABLE,
    FREEZE_UNREADABLE,
    MARKER_NO_WIN,
    MARKER_OR_KEPT_VERBATIM,
    MODEL_PENDING,
    NON_TEXT_BLOCKS,
    RESTORED_IN_PLACE,
    RETRIED_AFTER_COMPACTION,
    STORE_FULL,
    TOOL_EXCLUDED,
    TOOL_RULE,
];

/// Every gate, by name.
pub const ALL: &[Gate] = &[
    ALREADY_CLEAN,
    ALREADY_COMPACT,
    BELOW_BREAK_EVEN,
    BELOW_BUDGET_PRESSURE,
    BELOW_COST_FLOOR,
    BELOW_MAX_TOKENS,
    BELOW_MIN_ITEMS,
    BELOW_MIN_SAVINGS,
    BELOW_MIN_SIZE,
    BELOW_MIN_TOKENS,
    BELOW_OUTPUT_FLOOR,
    BELOW_TRIGGER_MESSAGES,
    BELOW_TRIGGER_TOKENS,
    BREAKPOINT_BUDGET_SPENT,
    BREAKPOINT_PRESENT,
    CACHED_PREFIX,
    COST_GUARD,
    DIALECT_UNSUPPORTED,
    DIFF_TOO_LARGE,
    EARLIER_RUN_PASSED,
    EMPTY,
    EMPTY_TAIL,
    EXEMPT,
    FAILURE_IN_VIEW,
    FEWER_THAN_TWO_RUNS,
    FILTER_MATCHED_NO_CHANGE,
    FREEZE_ORIGINAL_UNAVAILABLE,
    FREEZE_UNREADABLE,
    IN_RESERVE,
    JSON_PARSE_FAILED,
    LATE_RESULT_APPLIED,
    LLM_MAX_PER_REQUEST,
    MARKER_NO_WIN,
    MARKER_OR_KEPT_VERBATIM,
    MARKER_OR_NOT_REWRITABLE,
    MODEL_EMPTY_RESULT,
    MODEL_FAILED,
    MODEL_PENDING,
    MODEL_RESULT_NOT_SMALLER,
    NESTED_VALUES,
    NEWEST_OUTPUT,
    NEWEST_READ,
    NO_CODE,
    NO_EARLIER_IDENTICAL_OUTPUT,
    NO_EARLIER_TURN,
    NO_FILTER_MATCH,
    NO_FILTERS_LOADED,
    NO_LARGE_BODIES,
    NO_LONG_OR_REPEATED_LINES,
    NO_MODEL,
    NO_OBVIOUS_NOISE,
    NO_PATH_SHAPE,
    NO_REPEATED_PREFIX,
    NO_SIMILAR_EARLIER_OUTPUT,
    NO_SYSTEM_ARRAY,
    NO_TERMINAL_NOISE,
    NO_VOLATILE_TAIL,
    NON_TEXT_BLOCKS,
    NOT_ANTHROPIC,
    NOT_CACHE_AWARE,
    NOT_DELETION_ONLY,
    NOT_JSON,
    NOT_JSON_ARRAY,
    NOT_JSON_SHAPED,
    NOT_RUN_LIKE,
    NOT_SMALLER,
    NOT_UNIFORM_OBJECT_ARRAY,
    NOTHING_TO_DROP,
    OFFSET,
    PARSE_ERRORS,
    RECENT,
    RESTORED_IN_PLACE,
    RETRIED_AFTER_COMPACTION,
    ROUND_TRIP_FAILED,
    SIGNED_THINKING,
    SINGLE_OUTPUT,
    SPAN_TOO_SHORT,
    STABLE_HEAD_TOO_SMALL,
    STILL_OVER_BUDGET,
    STORE_FULL,
    STRING_CONTENT,
    SYSTEM_REWRITTEN,
    SYSTEM_SPLIT,
    SYSTEM_UNREAD,
    TOO_FEW_LINES,
    TOO_LARGE,
    TOO_LARGE_FOR_SANDBOX,
    TOO_MANY_LINES,
    TOOL_EXCLUDED,
    TOOL_RULE,
    UNDER_CAP,
    UNPARSED,
    WITHIN_BUDGET,
    WITHIN_KEEP_RECENT,
    WITHIN_KEEP_TURNS,
];

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_unique_and_sorted_and_every_gate_says_what_it_means() {
        for pair in super::ALL.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} then {}",
                pair[0].name,
                pair[1].name
            );
        }
        for gate in super::ALL {
            assert!(
                !gate.doc.is_empty() && !gate.doc.ends_with('.'),
                "{}",
                gate.name
            );
        }
    }

    #[test]
    fn every_gate_is_in_the_table_and_every_list_names_only_its_gates() {
        // A constant left out of `ALL` would drop out of the docs' table unnoticed.
        let declared = include_str!("gate.rs")
            .lines()
            .filter(|l| l.starts_with("pub const ") && l.ends_with(": Gate = Gate {"))
            .count();
        assert_eq!(declared, super::ALL.len());
        let lists = crate::components::ALL.iter().flat_map(|f| f.gates());
        for gate in lists.chain(super::ANY_COMPONENT) {
            assert!(super::ALL.contains(gate), "{}", gate.name);
        }
    }
}
