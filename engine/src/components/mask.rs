//! `mask`: age-based garbage collection of tool outputs (Offload, frozen).
//!
//! The newest `keep_recent` tool outputs stay whole; an older one of at least `min_tokens`
//! becomes a one-line stub that says how it started and where the rest is.
//!
//! Before (the fifth-newest output, a 3,000-token `pytest` run):
//! ```text
//! ============================= test session starts ==============================
//! platform linux -- Python 3.11.4, pytest-7.4.0 ...
//! ```
//! After:
//! ```text
//! [older tool output masked; starts: ===== test session starts ===== platform linux -- Python 3.11.4, pytest-7.4.0 ...] <<cg:1f0c…>> [full output: call context_guru_expand]
//! ```
//!
//! Whether an output is "older" depends on what came after it, so a decision is made once and
//! frozen: every later turn replays the same bytes (see [`Freeze::Rederivable`]). New decisions
//! happen only beyond the cached prefix, or at depth on a provably cold turn with `cold_cache`
//! (the default), because the replacement is a pure function of the content and the config.
//! If the store refuses the stash the output is left alone.

use crate::gate;
use serde::Deserialize;

use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate, offload_with,
    peek,
};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_OUTPUT;
use crate::pipeline::{ApplyCx, Component, Offload, Policy, Stashed, Transcript};

/// `components.mask`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MaskConfig {
    /// Defaults to `3`. The newest this many tool outputs are never masked.
    pub keep_recent: usize,
    /// Defaults to `100`. Outputs under this many tokens are not worth a marker.
    pub min_tokens: usize,
    /// Defaults to `96`. Characters of the output's start kept in the stub (0: none).
    pub keep_head_chars: usize,
    /// Defaults to `true`. May act at depth on a provably cold turn.
    pub cold_cache: bool,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
}

impl Default for MaskConfig {
    fn default() -> MaskConfig {
        MaskConfig {
            keep_recent: 3,
            min_tokens: 100,
            keep_head_chars: 96,
            cold_cache: true,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "mask",
    summary: "masks tool outputs older than the newest keep_recent (frozen, recoverable)",
    gates: &[
        gate::BELOW_MIN_TOKENS,
        gate::CACHED_PREFIX,
        gate::WITHIN_KEEP_RECENT,
    ],
    defaults: defaults::<MaskConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: MaskConfig = decode(source)?;
    Ok(Component::Offload(Box::new(Mask { config })))
}

struct Mask {
    config: MaskConfig,
}

impl Offload for Mask {
    fn policy(&self) -> Policy {
        Policy::rederivable(self.config.cold_cache)
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let outputs: Vec<usize> = (0..messages.len())
            .filter(|&i| messages[i].is_tool())
            .collect();
        let older = outputs.len().saturating_sub(self.config.keep_recent);
        for _ in &outputs[older..] {
            cx.gate(gate::WITHIN_KEEP_RECENT);
        }
        let mut keys = Vec::new();
        for &index in &outputs[..older] {
            if !offload_candidate(&messages[index], index, cx) {
                continue;
            }
            if cx.tokens_below(index, self.config.min_tokens) {
                cx.gate(gate::BELOW_MIN_TOKENS);
                continue;
            }
            if !cx.may_mutate(index) {
                cx.gate(gate::CACHED_PREFIX);
                continue;
            }
            let head = match self.config.keep_head_chars {
                0 => String::new(),
                n => peek(&messages[index].content, n),
            };
            let key = offload_with(messages, index, cx, |_, marker| {
                if head.is_empty() {
                    format!("[older tool output masked] {marker}{HINT_FULL_OUTPUT}")
                } else {
                    format!("[older tool output masked; starts: {head}] {marker}{HINT_FULL_OUTPUT}")
                }
            });
            keys.extend(key);
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use crate::components::peek;
    use crate::components::testing::{check, check_with, tool_messages};

    fn pytest_run(n: usize) -> String {
        let mut out = String::from(
            "============================= test session starts ==============================\n\
             platform linux -- Python 3.11.4, pytest-7.4.0, pluggy-1.2.0\nrootdir: /repo\n",
        );
        for i in 0..n {
            out.push_str(&format!(
                "tests/test_api_{i}.py::test_roundtrip PASSED [{i:>3}%]\n"
            ));
        }
        out.push_str(&format!("===== {n} passed in 4.21s =====\n"));
        out
    }

    #[test]
    fn masks_older_outputs_and_keeps_the_newest() {
        let runs: Vec<String> = (0..5).map(|i| pytest_run(40 + i)).collect();
        let refs: Vec<&str> = runs.iter().map(String::as_str).collect();
        let out = check("mask", "", tool_messages(&refs));
        for i in 1..=2 {
            let c = &out.messages[i].content;
            assert!(
                c.starts_with("[older tool output masked; starts: =====")
                    && c.contains("test session starts")
                    && c.contains("platform linux ...] <<cg:"),
                "{c}"
            );
            assert!(c.ends_with("[full output: call context_guru_expand]"));
        }
        for i in 3..=5 {
            assert_eq!(out.messages[i], out.before[i], "newest three stay whole");
        }
        let report = &out.report.components[0];
        assert_eq!(report.gates.get("within_keep_recent"), Some(&3));
        assert_eq!(report.stashed.len(), 2);
        out.assert_stashes_resolve();
    }

    #[test]
    fn inert_on_small_outputs_and_in_the_cached_prefix() {
        let big = pytest_run(60);
        let out = check(
            "mask",
            "",
            tool_messages(&["ok", &big, &big, "a", "b", "c"]),
        );
        let gates = &out.report.components[0].gates;
        assert_eq!(gates.get("below_min_tokens"), Some(&1));
        assert_eq!(out.report.components[0].changed, vec![2, 3]);
        let warm = check_with(
            "mask",
            "",
            tool_messages(&[&big, &big, "a", "b", "c"]),
            |cx| {
                cx.mutable_from = 2;
            },
        );
        assert_eq!(warm.report.components[0].changed, vec![2]);
        assert_eq!(
            warm.report.components[0].gates.get("cached_prefix"),
            Some(&1)
        );
    }

    #[test]
    fn keep_head_chars_zero_and_marker_defanging() {
        let big = pytest_run(60);
        let out = check(
            "mask",
            "keep_recent: 0\nkeep_head_chars: 0",
            tool_messages(&[&big]),
        );
        assert!(
            out.messages[1]
                .content
                .starts_with("[older tool output masked] <<cg:")
        );
        assert_eq!(peek("a\n\n  b <<cg:x>>", 96), "a b << cg:x>>");
        assert_eq!(peek("abcdef", 3), "abc ...");
    }
}
