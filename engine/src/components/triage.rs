//! What the five triage screeners share: the reserve, exemptions, call pairs, budget pressure.
//!
//! The screeners (`stale_output`, `repeated_call`, `failed_call`, `oversized_block`,
//! `stale_reasoning`) bring the triage spec's behaviour into the pipeline as components, with its
//! config names in snake_case. Every one of them:
//!
//! - leaves the **reserve** alone: everything from the `reserve.turns`-th latest user message on;
//! - skips **exempt** calls: by tool name (`exempt.tools`, case-insensitive) and by a glob on
//!   the call's `path` / `filePath` / `file_path` argument (`exempt.file_patterns`);
//! - adopts a rewrite only when strictly smaller, and stashes everything it removes;
//! - when `budget` is configured, stays quiet while the request is under
//!   `context_tokens × soft_ratio`, or when its findings would save under `min_savings_tokens`;
//! - is frozen like every history-rewriting component: new decisions only beyond the cached
//!   prefix or on a provably cold turn, replayed byte-identically afterwards.

use crate::gate;
use regex::Regex;
use serde::Deserialize;

use super::{BuildError, offload_with};
use crate::message::{Message, Role};
use crate::pipeline::{
    ApplyCx, Component, ComponentError, Offload, Policy, StashKey, Stashed, Transcript,
};

/// Declares a screener's config: its own fields, each with its default, then the fields every
/// screener shares (`reserve`, `exempt`, `budget`, `cold_cache`, `marker_mode`), and
/// `screener`, which builds the component from it. A macro because serde cannot flatten a
/// shared struct into one that denies unknown fields, and a misspelt key must stay an error.
macro_rules! screener_config {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty = $default:expr,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
            pub reserve: $crate::components::triage::Reserve,
            pub exempt: $crate::components::triage::Exempt,
            /// Defaults to none (act on every request). See `triage`.
            pub budget: Option<$crate::components::triage::Budget>,
            /// Defaults to `true`.
            pub cold_cache: bool,
            pub marker_mode: $crate::components::MarkerMode,
        }

        impl Default for $name {
            fn default() -> $name {
                $name {
                    $($field: $default,)*
                    reserve: Default::default(),
                    exempt: Default::default(),
                    budget: None,
                    cold_cache: true,
                    marker_mode: Default::default(),
                }
            }
        }

        impl $name {
            /// The screener `screen` makes of this config, under the rules it states.
            fn screener<S: $crate::components::triage::Screen + 'static>(
                self,
                screen: impl FnOnce(Self) -> S,
            ) -> Result<$crate::pipeline::Component, $crate::components::BuildError> {
                let rules = $crate::components::triage::Rules::new(
                    &self.reserve,
                    &self.exempt,
                    &self.budget,
                )?;
                let cold_cache = self.cold_cache;
                Ok($crate::components::triage::Triage::component(
                    rules,
                    cold_cache,
                    screen(self),
                ))
            }
        }
    };
}
pub(crate) use screener_config;

/// The part of a screener that is its own: what it cuts, given the shared rules. [`Triage`]
/// owns the freeze, budget pressure and the reserve, so the five cannot drift apart on those.
/// What a screener selects goes through [`Rules::cut`] (exemptions, `min_savings_tokens`) when
/// it cuts single outputs; `failed_call` (call pairs) and `stale_reasoning` (reasoning blocks)
/// cut something else and apply neither `min_savings_tokens` nor, for reasoning, `exempt`.
pub(crate) trait Screen: Send + Sync {
    /// The screener's policy, given the shared one: frozen and re-derivable, at depth on a
    /// cold turn when `cold_cache` is set.
    fn policy(&self, shared: Policy) -> Policy {
        shared
    }

    /// Declines the whole request before budget pressure is looked at, recording why.
    fn declines(&self, cx: &mut ApplyCx<'_>) -> bool {
        let _ = cx;
        false
    }

    /// Cuts what the screener finds before `reserve`, the first index of the reserve.
    ///
    /// # Errors
    /// Any error reverts the screener for this request.
    fn screen(
        &self,
        messages: &mut Transcript<'_, '_>,
        reserve: usize,
        rules: &Rules,
        cx: &mut ApplyCx<'_>,
    ) -> Result<Vec<StashKey>, ComponentError>;
}

/// A screener as a component: the shared rules and freeze around its [`Screen`].
pub(crate) struct Triage<S> {
    rules: Rules,
    cold_cache: bool,
    screen: S,
}

impl<S: Screen + 'static> Triage<S> {
    pub fn component(rules: Rules, cold_cache: bool, screen: S) -> Component {
        Component::Offload(Box::new(Triage {
            rules,
            cold_cache,
            screen,
        }))
    }
}

impl<S: Screen> Offload for Triage<S> {
    fn policy(&self) -> Policy {
        self.screen.policy(Policy::rederivable(self.cold_cache))
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        if self.screen.declines(cx) || self.rules.quiet(cx, messages) {
            return Ok(Vec::new());
        }
        let reserve = self.rules.reserve_start(messages);
        self.screen.screen(messages, reserve, &self.rules, cx)
    }
}

/// `reserve:` — the latest user turns no screener touches.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Reserve {
    /// Defaults to `3`.
    pub turns: usize,
}

impl Default for Reserve {
    fn default() -> Reserve {
        Reserve { turns: 3 }
    }
}

/// `exempt:` — calls no screener touches.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Exempt {
    /// Defaults to the stateful tools: task, skill, todowrite, todoread, write, edit, batch.
    pub tools: Vec<String>,
    /// Defaults to none. Globs on the call's path argument (`**` any depth, `*` within a name).
    pub file_patterns: Vec<String>,
}

impl Default for Exempt {
    fn default() -> Exempt {
        Exempt {
            tools: [
                "task",
                "skill",
                "todowrite",
                "todoread",
                "write",
                "edit",
                "batch",
            ]
            .map(str::to_owned)
            .to_vec(),
            file_patterns: Vec::new(),
        }
    }
}

/// `budget:` — opt-in pressure gate.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budget {
    /// Defaults to `1000000`. The model's context window, in tokens.
    pub context_tokens: usize,
    /// Defaults to `0.7`. Below this share of the window, screeners stay quiet.
    pub soft_ratio: f64,
    /// Defaults to `0.9`. Accepted; above it the pressure is "hard" (reported, not acted on).
    pub hard_ratio: f64,
    /// Defaults to `2000`. Findings saving less than this are not applied.
    pub min_savings_tokens: usize,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            context_tokens: 1_000_000,
            soft_ratio: 0.7,
            hard_ratio: 0.9,
            min_savings_tokens: 2000,
        }
    }
}

/// The shared part of every screener's config.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    pub reserve: Reserve,
    pub exempt: Exempt,
    pub budget: Option<Budget>,
    patterns: Vec<Regex>,
}

impl Rules {
    pub fn new(
        reserve: &Reserve,
        exempt: &Exempt,
        budget: &Option<Budget>,
    ) -> Result<Rules, BuildError> {
        if let Some(b) = &budget
            && !(0.0 < b.soft_ratio && b.soft_ratio <= b.hard_ratio && b.hard_ratio <= 1.0)
        {
            return Err(BuildError::invalid(
                "budget",
                "ratios must satisfy 0 < soft_ratio <= hard_ratio <= 1",
            ));
        }
        let patterns = exempt
            .file_patterns
            .iter()
            .map(|g| {
                glob(g).map_err(|error| BuildError::Pattern {
                    pattern: g.clone(),
                    error,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Rules {
            reserve: reserve.clone(),
            exempt: exempt.clone(),
            budget: budget.clone(),
            patterns,
        })
    }

    /// The first index of the reserve: the `reserve.turns`-th latest user message (everything
    /// is reserved when there are that few).
    pub fn reserve_start(&self, messages: &Transcript<'_, '_>) -> usize {
        if self.reserve.turns == 0 {
            return messages.len();
        }
        (0..messages.len())
            .rev()
            .filter(|&i| messages[i].role == Role::User)
            .nth(self.reserve.turns - 1)
            .unwrap_or(0)
    }

    /// Whether the call behind a tool output is exempt.
    pub fn exempt(&self, output: &Message) -> bool {
        let tool = output.tool_name.as_deref().unwrap_or("");
        if self
            .exempt
            .tools
            .iter()
            .any(|t| t.eq_ignore_ascii_case(tool))
        {
            return true;
        }
        if self.patterns.is_empty() {
            return false;
        }
        let args: Option<serde_json::Value> = output
            .tool_arguments
            .as_deref()
            .and_then(|a| serde_json::from_str(a).ok());
        let path = args.as_ref().and_then(|a| {
            ["path", "filePath", "file_path"]
                .iter()
                .find_map(|k| a.get(*k).and_then(|v| v.as_str()))
        });
        path.is_some_and(|p| self.patterns.iter().any(|re| re.is_match(p)))
    }

    /// Whether budget pressure keeps the screeners quiet on this request.
    pub fn quiet(&self, cx: &mut ApplyCx<'_>, messages: &Transcript<'_, '_>) -> bool {
        let Some(budget) = &self.budget else {
            return false;
        };
        let total: usize = (0..messages.len()).map(|i| cx.tokens(i)).sum();
        if (total as f64) < budget.context_tokens as f64 * budget.soft_ratio {
            cx.gate(gate::BELOW_BUDGET_PRESSURE);
            return true;
        }
        false
    }

    /// Whether output `index` may be offloaded: not exempt, one text value with no marker yet,
    /// and changeable on this turn. Records the gate that says why not.
    pub fn admits(
        &self,
        messages: &Transcript<'_, '_>,
        index: usize,
        cx: &mut ApplyCx<'_>,
    ) -> bool {
        let output = &messages[index];
        if self.exempt(output) {
            cx.gate(gate::EXEMPT);
            return false;
        }
        if !super::offload_candidate(output, index, cx) {
            return false;
        }
        if !cx.may_mutate(index) {
            cx.gate(gate::CACHED_PREFIX);
            return false;
        }
        true
    }

    /// Whether the outputs at `targets` together save enough to apply under the budget.
    /// Records `below_min_savings` when not.
    pub fn worth(&self, targets: impl Iterator<Item = usize>, cx: &mut ApplyCx<'_>) -> bool {
        let tokens: usize = targets.map(|i| cx.tokens(i)).sum();
        let worth = self
            .budget
            .as_ref()
            .is_none_or(|b| tokens >= b.min_savings_tokens);
        if !worth {
            cx.gate(gate::BELOW_MIN_SAVINGS);
        }
        worth
    }

    /// Offloads the outputs at `targets` when together they are [`worth`](Rules::worth) it,
    /// each with the stub `stub` writes from the output, the target's note and the marker.
    pub fn cut<T>(
        &self,
        messages: &mut Transcript<'_, '_>,
        targets: Vec<(usize, T)>,
        cx: &mut ApplyCx<'_>,
        stub: impl Fn(&Message, T, &str) -> String,
    ) -> Vec<StashKey> {
        if !self.worth(targets.iter().map(|(i, _)| *i), cx) {
            return Vec::new();
        }
        let mut keys = Vec::new();
        for (index, note) in targets {
            keys.extend(offload_with(messages, index, cx, |output, marker| {
                stub(output, note, marker)
            }));
        }
        keys
    }
}

/// A glob as a regex: `**` any characters, `*` any but `/`, `?` one character.
fn glob(pattern: &str) -> Result<Regex, regex::Error> {
    let mut re = String::from("^");
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                if chars.peek() == Some(&'/') {
                    chars.next();
                    re.push_str("(?:.*/)?");
                } else {
                    re.push_str(".*");
                }
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    Regex::new(&re)
}

/// One tool call and its output: the assistant message, the call's position in it, and the
/// output message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallPair {
    pub call_message: usize,
    pub call: usize,
    pub output: usize,
}

/// Every call whose output is in the transcript, oldest first.
pub(crate) fn call_pairs(messages: &Transcript<'_, '_>) -> Vec<CallPair> {
    let mut pairs = Vec::new();
    for output in 0..messages.len() {
        let Some(id) = messages[output].tool_call_id.as_deref() else {
            continue;
        };
        let found = (0..output).rev().find_map(|m| {
            messages[m]
                .tool_calls
                .iter()
                .position(|c| c.id == id)
                .map(|call| (m, call))
        });
        if let Some((call_message, call)) = found {
            pairs.push(CallPair {
                call_message,
                call,
                output,
            });
        }
    }
    pairs
}

/// How many assistant messages came after `index`: a call pair's age in steps.
pub(crate) fn steps_after(messages: &Transcript<'_, '_>, index: usize) -> usize {
    (index + 1..messages.len())
        .filter(|&i| messages[i].role == Role::Assistant)
        .count()
}

/// The first `n` characters of `text`.
pub(crate) fn head_chars(text: &str, n: usize) -> &str {
    text.char_indices()
        .nth(n)
        .map_or(text, |(at, _)| &text[..at])
}

/// The last `n` characters of `text`.
pub(crate) fn tail_chars(text: &str, n: usize) -> &str {
    let count = text.chars().count();
    if count <= n {
        return text;
    }
    text.char_indices()
        .nth(count - n)
        .map_or(text, |(at, _)| &text[at..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::testing::{check, check_with};
    use crate::message::ToolCall;
    use crate::pipeline::message_tokens;

    /// A session: a task, then `n` steps of (assistant call, output), then `user_turns` short
    /// user follow-ups at the end, each followed by one more step.
    fn session(outputs: &[(&str, &str, &str, bool)], tail_user_turns: usize) -> Vec<Message> {
        let mut m = vec![Message::text(
            Role::User,
            "make the importer handle UTF-16 files",
        )];
        let step =
            |m: &mut Vec<Message>, i: usize, tool: &str, args: &str, out: &str, err: bool| {
                let mut a = Message::text(Role::Assistant, "");
                a.tool_calls = vec![ToolCall {
                    id: format!("c{i}"),
                    name: tool.into(),
                    arguments: args.into(),
                }];
                m.push(a);
                let mut t = Message::tool(&format!("c{i}"), tool, out);
                t.tool_arguments = Some(args.into());
                t.is_error = err;
                m.push(t);
            };
        for (i, (tool, args, out, err)) in outputs.iter().enumerate() {
            step(&mut m, i, tool, args, out, *err);
        }
        for j in 0..tail_user_turns {
            m.push(Message::text(Role::User, format!("and now step {j}")));
            step(
                &mut m,
                100 + j,
                "bash",
                r#"{"command":"true"}"#,
                "ok",
                false,
            );
        }
        m
    }

    fn log(tag: &str, lines: usize) -> String {
        (0..lines)
            .map(|i| format!("{tag}: importer.py processed record {i} in 3ms\n"))
            .collect()
    }

    #[test]
    fn stale_output_archives_old_pairs_outside_the_reserve_and_spares_exempt_tools() {
        let big = log("run", 80);
        let mut steps: Vec<(&str, &str, &str, bool)> =
            vec![("bash", r#"{"command":"python importer.py"}"#, &big, false); 10];
        steps[1] = ("edit", r#"{"path":"importer.py"}"#, &big, false);
        let out = check("stale_output", "turns: 2", session(&steps, 3));
        let archived: Vec<usize> = (0..out.messages.len())
            .filter(|&i| {
                out.messages[i]
                    .content
                    .starts_with("[archived: bash output from")
            })
            .collect();
        assert!(!archived.is_empty());
        assert!(!archived.contains(&4), "edit is exempt");
        let reserve_start = out
            .messages
            .iter()
            .rposition(|m| m.role == Role::User && m.content.contains("step 0"))
            .unwrap();
        assert!(
            archived.iter().all(|&i| i < reserve_start),
            "the reserve is untouched"
        );
        assert_eq!(out.report.components[0].gates.get("exempt"), Some(&1));
        out.assert_stashes_resolve();
    }

    #[test]
    fn repeated_call_keeps_the_latest_with_key_order_ignored() {
        let a = log("ls", 40);
        let steps = [
            (
                "bash",
                r#"{"command":"ls -R","cwd":"/repo"}"#,
                a.as_str(),
                false,
            ),
            ("bash", r#"{"command":"cat importer.py"}"#, "x", false),
            (
                "bash",
                r#"{"cwd":"/repo","command":"ls -R"}"#,
                a.as_str(),
                false,
            ),
        ];
        let out = check("repeated_call", "reserve: {turns: 1}", session(&steps, 1));
        assert!(
            out.messages[2]
                .content
                .starts_with("[repeated call: bash was called again later")
        );
        assert_eq!(out.messages[6], out.before[6], "the latest stays");
        out.assert_stashes_resolve();
    }

    #[test]
    fn failed_call_changes_call_and_result_together() {
        let error = format!(
            "Traceback (most recent call last):\n{}UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff",
            "  File \"importer.py\", line 12, in read\n".repeat(40)
        );
        let args = r#"{"command":"python importer.py --input data/utf16.csv --verbose --strict --log-level debug"}"#;
        let mut steps = vec![("bash", args, error.as_str(), true)];
        steps.extend(std::iter::repeat_n(
            ("bash", r#"{"command":"true"}"#, "ok", false),
            6,
        ));
        let out = check("failed_call", "reserve: {turns: 1}", session(&steps, 1));
        let call = &out.messages[1].tool_calls[0].arguments;
        assert!(
            call.starts_with(r#"{"failed_call":"arguments stashed <<cg:"#),
            "{call}"
        );
        assert!(
            out.messages[2]
                .content
                .starts_with("Traceback (most recent call last):")
        );
        assert!(
            out.messages[2]
                .content
                .contains("[full output: call context_guru_expand]")
        );
        assert!(out.messages[2].content.chars().count() < 520);
        let c = &out.report.components[0];
        assert_eq!(c.changed, vec![1, 2], "the pair changed together");
        assert_eq!(c.stashed.len(), 2);
        for id in &c.stashed {
            assert!(crate::store::Store::resolve(out.store.as_ref(), "test", id).is_some());
        }
        // Within `turns` steps: untouched, both halves.
        let recent = check(
            "failed_call",
            "turns: 20\nreserve: {turns: 1}",
            session(&steps, 1),
        );
        assert_eq!(recent.messages, recent.before);
    }

    #[test]
    fn oversized_block_keeps_head_and_tail() {
        let huge = log("bulk", 400);
        let out = check(
            "oversized_block",
            "reserve: {turns: 1}",
            session(
                &[("bash", r#"{"command":"cat dump.log"}"#, &huge, false)],
                1,
            ),
        );
        let after = &out.messages[2].content;
        assert!(after.starts_with(&huge[..800]));
        assert!(after.ends_with(tail_chars(&huge, 400)));
        assert!(after.contains("characters omitted <<cg:"));
        out.assert_stashes_resolve();
    }

    #[test]
    fn stale_reasoning_removes_old_blocks_trims_kept_ones_and_leaves_signed_thinking_alone() {
        let mut messages = session(&[("bash", r#"{"command":"true"}"#, "ok", false)], 4);
        messages[1].reasoning = vec!["I should check the encoding detection first. ".repeat(30)];
        let last_assistant = messages
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .unwrap();
        messages[last_assistant].reasoning = vec!["long thought ".repeat(400)];
        let out = check("stale_reasoning", "", messages.clone());
        assert!(out.messages[1].reasoning[0].starts_with("[reasoning removed <<cg:"));
        assert!(out.messages[last_assistant].reasoning[0].ends_with(">>"));
        assert!(
            out.messages[last_assistant].reasoning[0].chars().count() < 2100,
            "trimmed, kept"
        );
        assert!(message_tokens(&out.messages[1]) < message_tokens(&messages[1]));
        let signed = check_with("stale_reasoning", "", messages, |cx| {
            cx.dialect = crate::wire::Dialect::Anthropic
        });
        assert_eq!(signed.messages, signed.before);
        assert_eq!(
            signed.report.components[0].gates.get("signed_thinking"),
            Some(&1)
        );
    }

    #[test]
    fn budget_pressure_keeps_screeners_quiet_below_the_soft_ratio() {
        let huge = log("bulk", 400);
        let steps = [(
            "bash",
            r#"{"command":"cat dump.log"}"#,
            huge.as_str(),
            false,
        )];
        let quiet = check(
            "oversized_block",
            "reserve: {turns: 1}\nbudget: {context_tokens: 200000}",
            session(&steps, 1),
        );
        assert_eq!(quiet.messages, quiet.before);
        assert_eq!(
            quiet.report.components[0]
                .gates
                .get("below_budget_pressure"),
            Some(&1)
        );
        let pressed = check(
            "oversized_block",
            "reserve: {turns: 1}\nbudget: {context_tokens: 4000, soft_ratio: 0.5, min_savings_tokens: 100}",
            session(&steps, 1),
        );
        assert!(pressed.messages[2].content.contains("characters omitted"));
    }

    #[test]
    fn globs_match_like_a_shell() {
        let lock = glob("**/*.lock").unwrap();
        assert!(lock.is_match("Cargo.lock") && lock.is_match("web/yarn.lock"));
        assert!(!lock.is_match("src/lock.rs"));
        let one = glob("src/*.rs").unwrap();
        assert!(one.is_match("src/main.rs") && !one.is_match("src/a/b.rs"));
        assert_eq!(head_chars("héllo", 2), "hé");
        assert_eq!(tail_chars("héllo", 3), "llo");
    }

    #[test]
    fn the_first_screener_in_the_pipeline_wins_an_item_two_would_claim() {
        use crate::config::Config;
        use std::sync::Arc;
        let huge = log("bulk", 400);
        let steps = vec![
            (
                "bash",
                r#"{"command":"cat dump.log"}"#,
                huge.as_str(),
                false
            );
            12
        ];
        let run = |pipeline: &str| {
            let p = Config::parse(&format!("pipeline: [{pipeline}]\ncomponents:\n  stale_output: {{turns: 2, reserve: {{turns: 1}}}}\n  oversized_block: {{reserve: {{turns: 1}}}}\n")).unwrap().build_pipeline().unwrap();
            let clock = Arc::new(crate::clock::ManualClock::new());
            let store = Arc::new(crate::store::MemoryStore::new(
                crate::store::MemoryStoreLimits::DEFAULT,
                clock.clone(),
            ));
            let cx = crate::pipeline::RunCx::new(crate::wire::Dialect::OpenAi, "s", store, clock);
            let mut messages = session(&steps, 1);
            let report = p.run(&mut messages, &cx);
            (messages, report)
        };
        let (messages, report) = run("stale_output, oversized_block");
        assert!(messages[2].content.starts_with("[archived:"));
        assert!(
            report.components[1]
                .changed
                .iter()
                .all(|i| !report.components[0].changed.contains(i)),
            "no item claimed twice"
        );
        assert!(
            !report.components[1].changed.contains(&2),
            "the archived output is left alone"
        );
        let (messages, _) = run("oversized_block, stale_output");
        assert!(
            messages[2].content.contains("characters omitted"),
            "order decides"
        );
    }
}
