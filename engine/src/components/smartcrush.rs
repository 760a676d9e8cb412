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
//!
//! With `adaptive: true` (off by default) it also keeps the items that bring the most new
//! information: each item's novelty is how rare its words are across the array; sorted from
//! most to least novel, the curve's knee (Kneedle: the point farthest below the chord from first
//! to last) says how many are worth keeping, capped at `max_adaptive`. A list of near-identical
//! rows keeps only its anchors; a list where a few rows differ keeps those few.

use crate::gate;
use std::sync::OnceLock;

use regex::Regex;
use serde::Deserialize;

use super::format::minify;
use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate, offload_with,
};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_ARRAY;
use crate::pipeline::{ApplyCx, Component, Offload, Stashed, Transcript};
use crate::wire::json::{self, Kind};

/// `components.smartcrush`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
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
    /// Defaults to `false`. Also keep the most novel items, as many as the novelty knee says.
    pub adaptive: bool,
    /// Defaults to `20`. At most this many items kept for novelty.
    pub max_adaptive: usize,
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
            adaptive: false,
            max_adaptive: 20,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "smartcrush",
    summary: "keeps the ends of a long JSON array and every item reporting a problem (recoverable)",
    gates: &[
        gate::BELOW_MIN_ITEMS,
        gate::BELOW_MIN_TOKENS,
        gate::NOTHING_TO_DROP,
        gate::NOT_JSON_ARRAY,
    ],
    defaults: defaults::<SmartcrushConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: SmartcrushConfig = decode(source)?;
    Ok(Component::Offload(Box::new(Smartcrush { config })))
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

/// Per item, how rare its words are across the array: the mean over its words of the share of
/// items that do *not* use that word. Order-free, so a row that differs scores high wherever it
/// sits, and an id every row has once (`HAT007`) weighs little beside whole fields only a few
/// rows carry.
fn novelty(items: &[&str]) -> Vec<f64> {
    let words_of = |item: &&str| -> std::collections::BTreeSet<String> {
        item.split(|c: char| !c.is_alphanumeric() && c != '_')
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let sets: Vec<_> = items.iter().map(words_of).collect();
    let mut df: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for set in &sets {
        for w in set {
            *df.entry(w.as_str()).or_default() += 1;
        }
    }
    let n = items.len() as f64;
    sets.iter()
        .map(|set| {
            let rarity: f64 = set.iter().map(|w| 1.0 - df[w.as_str()] as f64 / n).sum();
            rarity / set.len().max(1) as f64
        })
        .collect()
}

/// How many of `scores` (any order) lie before the knee of their descending curve: the point
/// farthest below the straight line from the highest to the lowest. 0 for a flat curve.
fn knee(scores: &[f64]) -> usize {
    let mut sorted = scores.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let (Some(&hi), Some(&lo)) = (sorted.first(), sorted.last()) else {
        return 0;
    };
    if sorted.len() < 3 || hi - lo < 1e-9 {
        return 0;
    }
    let last = (sorted.len() - 1) as f64;
    sorted
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let x = i as f64 / last;
            let y = (v - lo) / (hi - lo);
            (i, (1.0 - x) - y)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map_or(0, |(i, _)| i)
}

impl Offload for Smartcrush {
    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let mut keys = Vec::new();
        for index in 0..messages.len() {
            let message = &messages[index];
            if !offload_candidate(message, index, cx) {
                continue;
            }
            let text = message.content.as_str();
            let root = match json::parse_document(text) {
                Ok(root) if json::kind_of(text, root) == Kind::Array => root,
                _ => {
                    cx.gate(gate::NOT_JSON_ARRAY);
                    continue;
                }
            };
            let items: Vec<&str> = json::elements(text, root)
                .map(|span| span.of(text))
                .collect();
            if items.len() < self.config.min_items {
                cx.gate(gate::BELOW_MIN_ITEMS);
                continue;
            }
            if cx.tokens_below(index, self.config.min_tokens) {
                cx.gate(gate::BELOW_MIN_TOKENS);
                continue;
            }
            let n = items.len();
            let novel: Vec<usize> = if self.config.adaptive {
                let scores = novelty(&items);
                let k = knee(&scores).min(self.config.max_adaptive);
                let mut ranked: Vec<usize> = (0..n).collect();
                ranked.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
                ranked.truncate(k);
                ranked
            } else {
                Vec::new()
            };
            let kept: Vec<String> = items
                .iter()
                .enumerate()
                .filter(|(i, item)| {
                    *i < self.config.keep_first
                        || *i + self.config.keep_last >= n
                        || novel.contains(i)
                        || problem_signal().is_match(item)
                })
                .map(|(_, item)| minify(item))
                .collect();
            if kept.len() == n {
                cx.gate(gate::NOTHING_TO_DROP);
                continue;
            }
            let shown = format!("[{}] [{} of {n} items shown]", kept.join(","), kept.len());
            keys.extend(offload_with(messages, index, cx, |_, marker| {
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

    #[test]
    fn adaptive_keeps_the_few_items_that_differ() {
        // Twenty identical-shaped rows, three of which carry fields and values no other has.
        let mut rows: Vec<String> = (0..20)
            .map(|i| format!(r#"{{"flight_number": "HAT{i:03}", "origin": "SFO", "destination": "IAH", "status": "available"}}"#))
            .collect();
        for i in [7, 11, 15] {
            rows[i] = format!(
                r#"{{"flight_number": "HAT{i:03}", "origin": "SFO", "destination": "IAH", "status": "delayed", "delay_reason": "crew rest requirement at hub airport", "rebooked_to": "HAT{:03}"}}"#,
                i + 100
            );
        }
        let output = format!("[{}]", rows.join(", "));
        let fixed = check("smartcrush", "", tool_messages(&[&output]));
        let adaptive = check("smartcrush", "adaptive: true", tool_messages(&[&output]));
        let after = &adaptive.messages[1].content;
        for kept in ["HAT007", "HAT011", "HAT015"] {
            assert!(after.contains(kept), "{kept} kept for novelty: {after}");
            assert!(
                !fixed.messages[1].content.contains(kept),
                "fixed anchors drop {kept}"
            );
        }
        assert!(!after.contains("HAT009"), "an ordinary row still goes");
        let flat = check(
            "smartcrush",
            "adaptive: true",
            tool_messages(&[&flights(12, None)]),
        );
        assert_eq!(flat.messages[1], fixed_anchors_only(&flights(12, None)));
    }

    fn fixed_anchors_only(output: &str) -> crate::message::Message {
        check("smartcrush", "", tool_messages(&[output])).messages[1].clone()
    }

    #[test]
    fn the_knee_of_a_novelty_curve() {
        assert_eq!(super::knee(&[1.0, 0.1, 0.1, 0.1, 0.1, 0.1]), 1);
        assert_eq!(super::knee(&[0.5, 0.5, 0.5]), 0);
        assert_eq!(super::knee(&[1.0, 0.9, 0.8, 0.1, 0.05, 0.0]), 3);
    }
}
