//! `smartcrush`: keeps the ends of a long JSON array and every item that reports a problem
//! (Offload).
//!
//! Before: `[{"id":1,...}, {"id":2,...}, ... 200 items ...]`
//! After:  `[{"id":1,...},{"id":2,...},{"id":3,...},{"id":199,...},{"id":200,...}] [5 of 200 items shown] <<cg:…>> [full array: call context_guru_expand]`
//!
//! Items are kept verbatim (minus layout whitespace), so the schema the agent sees is the real
//! one; any item whose JSON mentions an error, a failure, an exception, a panic, a fatal
//! condition or a traceback is kept wherever it sits. A pure function of the content, so it needs
//! no freeze. If the store refuses the stash the output is left alone.

use std::sync::OnceLock;

use regex::Regex;
use serde::Deserialize;

use super::format::minify;
use super::{ComponentFactory, MarkerMode, decode, offload_candidate, offload_with};
use crate::config::ComponentSource;
use crate::marker::HINT_FULL_ARRAY;
use crate::pipeline::{ApplyCx, ComponentError, Offload, Stage, StashKey, Transcript};
use crate::wire::json::{self, Kind};

/// `components.smartcrush`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmartcrushConfig {
    /// Defaults to `5`. Shorter arrays are left alone.
    pub min_items: usize,
    /// Defaults to `200`. Smaller outputs are left alone.
    pub min_tokens: usize,
    /// Defaults to `3`. Items kept from the start.
    pub keep_first: usize,
    /// Defaults to `2`. Items kept from the end.
    pub keep_last: usize,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
}

impl Default for SmartcrushConfig {
    fn default() -> SmartcrushConfig {
        SmartcrushConfig {
            min_items: 5,
            min_tokens: 200,
            keep_first: 3,
            keep_last: 2,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) struct Factory;

impl ComponentFactory for Factory {
    fn name(&self) -> &'static str {
        "smartcrush"
    }

    fn summary(&self) -> &'static str {
        "keeps the ends of a long JSON array and every item reporting a problem (recoverable)"
    }

    fn build(&self, source: &ComponentSource<'_>) -> Result<Stage, String> {
        let config: SmartcrushConfig = decode(source)?;
        Ok(Stage::Offload(Box::new(Smartcrush { config })))
    }
}

struct Smartcrush {
    config: SmartcrushConfig,
}

fn problem_signal() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)error|fail|exception|panic|fatal|traceback")
            .expect("signal regex is valid")
    })
}

impl Offload for Smartcrush {
    fn name(&self) -> &'static str {
        "smartcrush"
    }

    fn offload(
        &self,
        messages: &mut Transcript<'_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<Vec<StashKey>, ComponentError> {
        let mut keys = Vec::new();
        for index in 0..messages.len() {
            let message = &messages[index];
            if !offload_candidate(message, cx) {
                continue;
            }
            let text = message.content.as_str();
            let root = match json::parse_document(text) {
                Ok(root) if json::kind_of(text, root) == Kind::Array => root,
                _ => {
                    cx.gate("not_json_array");
                    continue;
                }
            };
            let items: Vec<&str> = json::elements(text, root)
                .map(|span| span.of(text))
                .collect();
            if items.len() < self.config.min_items {
                cx.gate("below_min_items");
                continue;
            }
            if cx.tokens(index) < self.config.min_tokens {
                cx.gate("below_min_tokens");
                continue;
            }
            let n = items.len();
            let kept: Vec<String> = items
                .iter()
                .enumerate()
                .filter(|(i, item)| {
                    *i < self.config.keep_first
                        || *i + self.config.keep_last >= n
                        || problem_signal().is_match(item)
                })
                .map(|(_, item)| minify(item))
                .collect();
            if kept.len() == n {
                cx.gate("nothing_to_drop");
                continue;
            }
            let shown = format!("[{}] [{} of {n} items shown]", kept.join(","), kept.len());
            keys.extend(offload_with(messages, index, cx, |marker| {
                format!("{shown} {marker}{HINT_FULL_ARRAY}")
            }));
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use crate::components::testing::{check, tool_messages};

    fn flights(n: usize, failing: Option<usize>) -> String {
        let items: Vec<String> = (0..n)
            .map(|i| {
                let status = if Some(i) == failing { "error: flight cancelled" } else { "available" };
                format!(
                    "{{\"flight_number\": \"HAT{i:03}\", \"origin\": \"SFO\", \"destination\": \"IAH\", \"scheduled_departure_time_est\": \"23:00:00\", \"status\": \"{status}\", \"prices\": {{\"basic_economy\": 72, \"economy\": 141}}}}"
                )
            })
            .collect();
        format!("[{}]", items.join(", "))
    }

    #[test]
    fn keeps_the_ends_and_the_problem_items() {
        // Shape taken from tau-bench's airline search results in the public corpus.
        let output = flights(12, Some(6));
        let out = check("smartcrush", "", tool_messages(&[&output]));
        let after = &out.messages[1].content;
        assert!(after.contains("[6 of 12 items shown] <<cg:"), "{after}");
        assert!(after.ends_with("[full array: call context_guru_expand]"));
        for kept in ["HAT000", "HAT001", "HAT002", "HAT006", "HAT010", "HAT011"] {
            assert!(after.contains(kept), "{kept} kept");
        }
        assert!(!after.contains("HAT004"));
        let shown = &after[..after.find(" [6 of").unwrap()];
        let value: serde_json::Value = serde_json::from_str(shown).unwrap();
        assert_eq!(
            value.as_array().unwrap().len(),
            6,
            "the kept items are valid JSON, verbatim"
        );
        out.assert_stashes_resolve();
    }

    #[test]
    fn inert_on_short_arrays_objects_and_text() {
        let out = check(
            "smartcrush",
            "",
            tool_messages(&[&flights(4, None), "{\"a\": [1,2,3,4,5,6]}", "plain text"]),
        );
        let gates = &out.report.components[0].gates;
        assert_eq!(gates.get("below_min_items"), Some(&1));
        assert_eq!(gates.get("not_json_array"), Some(&2));
        assert!(!out.report.components[0].mutated);
    }

    #[test]
    fn keep_counts_are_configurable() {
        let out = check(
            "smartcrush",
            "keep_first: 1\nkeep_last: 1",
            tool_messages(&[&flights(12, None)]),
        );
        assert!(out.messages[1].content.contains("[2 of 12 items shown]"));
    }
}
