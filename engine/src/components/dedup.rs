//! `dedup`: replaces a tool output byte-identical to an earlier one with a pointer (Offload).
//!
//! Before: `<config dump>` … later, the same `<config dump>`
//! After:  `<config dump>` … `[identical to an earlier tool output] <<cg:1c8e…>>`
//!
//! Exact match only: a near-duplicate would make the "identical" label lie. The earlier copy
//! stays verbatim, so the model still sees the content once. The decision is a pure function of
//! the request (the later copy is deduplicated on the turn it first appears and on every turn
//! after), so it needs no freeze. If the store refuses the stash the output is left alone.

use crate::gate;
use std::collections::HashMap;

use serde::Deserialize;

use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate, offload_with,
};
use crate::components::ComponentSource;
use crate::pipeline::{ApplyCx, Component, Offload, Policy, Stashed, Transcript};

/// `components.dedup`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DedupConfig {
    /// Defaults to `100`. Smaller repeats cost less than the pointer is worth.
    pub min_tokens: usize,
    /// Defaults to `0`. The newest this many tool outputs are left byte-identical.
    pub keep_recent: usize,
    /// Defaults to `full` (the only mode: a marker plus a stash).
    pub marker_mode: MarkerMode,
}

impl Default for DedupConfig {
    fn default() -> DedupConfig {
        DedupConfig {
            min_tokens: 100,
            keep_recent: 0,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "dedup",
    summary: "points a repeated identical tool output at its first copy (recoverable)",
    gates: &[
        gate::BELOW_MIN_TOKENS,
        gate::CACHED_PREFIX,
        gate::NO_EARLIER_IDENTICAL_OUTPUT,
        gate::WITHIN_KEEP_RECENT,
    ],
    defaults: defaults::<DedupConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: DedupConfig = decode(source)?;
    Ok(Component::Offload(Box::new(Dedup { config })))
}

struct Dedup {
    config: DedupConfig,
}

const POINTER: &str = "[identical to an earlier tool output] ";

impl Offload for Dedup {
    /// A `keep_recent` window makes whether it acts depend on later outputs: frozen then.
    fn policy(&self) -> Policy {
        Policy::keep_recent(self.config.keep_recent)
    }

    /// Carried-over outputs rebuild which texts were seen first from their notes.
    fn carries_over(&self) -> bool {
        true
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        // Keyed by the fast content hash (SipHash over every output cost more than the rest of
        // the component); a hit is confirmed by comparing the texts, so a collision can only
        // miss a duplicate, never invent one.
        let mut first_seen: HashMap<u64, &str> = HashMap::new();
        let mut duplicates = Vec::new();
        for (index, message) in messages.iter().enumerate() {
            if cx.carried_over(index) {
                // Decided last turn as now; an output seen first then is seen first now.
                if cx.noted(index) {
                    let key = cx.content_hash(index, &message.content);
                    first_seen.entry(key).or_insert(&message.content);
                }
                continue;
            }
            if !offload_candidate(message, index, cx) {
                continue;
            }
            if cx.tokens_below(index, self.config.min_tokens) {
                cx.gate(gate::BELOW_MIN_TOKENS);
                continue;
            }
            let key = cx.content_hash(index, &message.content);
            match first_seen.get(&key) {
                Some(earlier) if *earlier == message.content => duplicates.push(index),
                _ => {
                    cx.note(index);
                    first_seen.entry(key).or_insert(&message.content);
                    cx.gate(gate::NO_EARLIER_IDENTICAL_OUTPUT);
                }
            }
        }
        let recent = super::recent_outputs(messages, self.config.keep_recent);
        let mut keys = Vec::new();
        for index in duplicates {
            if super::held_back(&recent, self.config.keep_recent, index, cx) {
                continue;
            }
            if let Some(key) = offload_with(messages, index, cx, |_, marker| {
                format!("{POINTER}{marker}")
            }) {
                keys.push(key);
            }
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use crate::components::testing::{check, tool_messages};

    #[test]
    fn replaces_only_later_exact_copies() {
        let dump = "key_{}: some configuration value that is long enough\n".repeat(30);
        let near = dump.replacen("key_", "KEY_", 1);
        let out = check("dedup", "", tool_messages(&[&dump, &near, &dump, &dump]));
        let contents: Vec<_> = out.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents[1], dump, "the first copy stays verbatim");
        assert_eq!(contents[2], near, "a near-duplicate is not identical");
        assert!(contents[3].starts_with("[identical to an earlier tool output] <<cg:"));
        assert_eq!(
            contents[3], contents[4],
            "both later copies point at the same stash"
        );
        out.assert_stashes_resolve();
    }

    #[test]
    fn small_outputs_are_left_alone() {
        let out = check("dedup", "", tool_messages(&["ok", "ok"]));
        assert_eq!(
            out.report.components[0].gates.get("below_min_tokens"),
            Some(&2)
        );
        assert!(!out.report.components[0].mutated);
    }

    #[test]
    fn threshold_is_configurable() {
        let line =
            "error: could not compile `sluice` due to 3 previous errors; see the log above\n"
                .repeat(3);
        let default = check("dedup", "", tool_messages(&[&line, &line]));
        assert!(
            !default.report.components[0].mutated,
            "below the default of 100 tokens"
        );
        let out = check("dedup", "min_tokens: 10", tool_messages(&[&line, &line]));
        assert!(
            out.messages[2].content.contains("<<cg:"),
            "{:?}",
            out.report
        );
    }
}
