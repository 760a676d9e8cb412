//! `phi_evict`: evicts the least useful tool outputs until the transcript fits a token budget
//! (Offload, frozen).
//!
//! Each tool output gets a score
//!
//! ```text
//! Φ = w_R·relevance + w_H·recency − w_C·cost − w_D·redundancy
//! ```
//!
//! relevance is the share of the latest user message's keywords the output contains, recency its
//! position among the outputs (newest = 1), cost its share of all tool-output tokens, and
//! redundancy 1 when an identical output came earlier. Outputs are evicted lowest Φ first,
//! oldest first on ties, until tool outputs total at most `budget_tokens`. The newest output is
//! never evicted. An evicted output becomes a stub:
//!
//! ```text
//! [evicted to fit the context budget; starts: <first 96 characters>] <<cg:…>> [full output: call context_guru_expand]
//! ```
//!
//! Whether an output is evicted depends on the whole transcript, so decisions are frozen and
//! replayed, and new ones are made only beyond the cached prefix or on a cold turn (`cold_cache`,
//! off by default here: eviction at depth is a large cache write). The stub depends only on the
//! content, so a lost freeze is re-derived. Inert when tool outputs already fit, or with one.

use crate::gate;
use std::collections::HashSet;

use serde::Deserialize;

use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, keywords, offload_candidate,
    offload_with, peek,
};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_OUTPUT;
use crate::message::Role;
use crate::pipeline::{ApplyCx, Component, Offload, Policy, Stashed, Transcript};
use crate::tokens;

/// The four weights of Φ.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Weights {
    pub relevance: f64,
    pub recency: f64,
    pub cost: f64,
    pub redundancy: f64,
}

/// `weights:` — a named profile or four explicit numbers.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
#[serde(untagged)]
pub enum WeightsConfig {
    Profile(Profile),
    Custom(Weights),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    Balanced,
    Aggressive,
    Conservative,
}

impl WeightsConfig {
    pub fn weights(self) -> Weights {
        let w = |relevance, recency, cost, redundancy| Weights {
            relevance,
            recency,
            cost,
            redundancy,
        };
        match self {
            WeightsConfig::Profile(Profile::Balanced) => w(0.40, 0.20, 0.30, 0.10),
            WeightsConfig::Profile(Profile::Aggressive) => w(0.30, 0.10, 0.45, 0.15),
            WeightsConfig::Profile(Profile::Conservative) => w(0.45, 0.20, 0.05, 0.05),
            WeightsConfig::Custom(weights) => weights,
        }
    }
}

/// `components.phi_evict`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PhiEvictConfig {
    /// Defaults to `120000`. Tool-output tokens the transcript may keep.
    pub budget_tokens: usize,
    /// Defaults to `balanced`; also `aggressive`, `conservative`, or
    /// `{relevance, recency, cost, redundancy}`.
    pub weights: WeightsConfig,
    /// Defaults to `false`. May evict inside the cached prefix on a provably cold turn.
    pub cold_cache: bool,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
}

impl Default for PhiEvictConfig {
    fn default() -> PhiEvictConfig {
        PhiEvictConfig {
            budget_tokens: 120_000,
            weights: WeightsConfig::Profile(Profile::Balanced),
            cold_cache: false,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "phi_evict",
    summary: "evicts the lowest-scoring tool outputs until the transcript fits budget_tokens (frozen)",
    gates: &[
        gate::CACHED_PREFIX,
        gate::NEWEST_OUTPUT,
        gate::SINGLE_OUTPUT,
        gate::STILL_OVER_BUDGET,
        gate::WITHIN_BUDGET,
    ],
    defaults: defaults::<PhiEvictConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: PhiEvictConfig = decode(source)?;
    let w = config.weights.weights();
    if [w.relevance, w.recency, w.cost, w.redundancy]
        .iter()
        .any(|x| !x.is_finite() || *x < 0.0)
    {
        return Err(BuildError::invalid(
            "weights",
            "must be finite and not negative",
        ));
    }
    Ok(Component::Offload(Box::new(PhiEvict { config })))
}

struct PhiEvict {
    config: PhiEvictConfig,
}

impl Offload for PhiEvict {
    fn policy(&self) -> Policy {
        Policy::rederivable(self.config.cold_cache)
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let outputs: Vec<usize> = (0..messages.len())
            .filter(|&i| messages[i].is_tool())
            .collect();
        if outputs.len() <= 1 {
            cx.gate(gate::SINGLE_OUTPUT);
            return Ok(Vec::new());
        }
        let mut total: usize = outputs.iter().map(|&i| cx.tokens(i)).sum();
        if total <= self.config.budget_tokens {
            cx.gate(gate::WITHIN_BUDGET);
            return Ok(Vec::new());
        }
        let query = (0..messages.len())
            .rev()
            .find(|&i| messages[i].role == Role::User && !messages[i].content.trim().is_empty())
            .map(|i| keywords(&messages[i].content))
            .unwrap_or_default();
        let w = self.config.weights.weights();
        let mut seen = HashSet::new();
        let n = outputs.len() as f64;
        let mut scored: Vec<(f64, usize)> = outputs
            .iter()
            .enumerate()
            .map(|(rank, &i)| {
                let content = &messages[i].content;
                let relevance = if query.is_empty() {
                    0.0
                } else {
                    let words = keywords(content);
                    query.intersection(&words).count() as f64 / query.len() as f64
                };
                let recency = (rank + 1) as f64 / n;
                let cost = cx.tokens(i) as f64 / total as f64;
                let redundant = !seen.insert(tokens::content_hash(content));
                let phi = w.relevance * relevance + w.recency * recency
                    - w.cost * cost
                    - w.redundancy * f64::from(u8::from(redundant));
                (phi, i)
            })
            .collect();
        let newest = *outputs.last().unwrap_or(&0);
        scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut keys = Vec::new();
        for (_, index) in scored {
            if total <= self.config.budget_tokens {
                break;
            }
            if index == newest {
                cx.gate(gate::NEWEST_OUTPUT);
                continue;
            }
            if !offload_candidate(&messages[index], index, cx) {
                continue;
            }
            if !cx.may_mutate(index) {
                cx.gate(gate::CACHED_PREFIX);
                continue;
            }
            let before = cx.tokens(index);
            let head = peek(&messages[index].content, 96);
            let key = offload_with(messages, index, cx, |_, marker| {
                format!(
                    "[evicted to fit the context budget; starts: {head}] {marker}{HINT_FULL_OUTPUT}"
                )
            });
            if let Some(key) = key {
                total = total - before + tokens::count(&messages[index].content);
                keys.push(key);
            }
        }
        if total > self.config.budget_tokens {
            cx.gate(gate::STILL_OVER_BUDGET);
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use crate::components::testing::{check, check_with};
    use crate::message::{Message, Role};

    fn transcript() -> Vec<Message> {
        let relevant =
            "src/serializer.py: def dump(obj): return json.dumps(obj, default=encode_datetime)\n"
                .repeat(30);
        let noise = "npm WARN deprecated inflight@1.0.6: This module is not supported\n".repeat(60);
        let listing = "drwxr-xr-x  2 user staff  64 Nov 29 10:00 node_modules/.cache\n".repeat(40);
        vec![
            Message::text(
                Role::User,
                "the serializer drops timezone info from datetime fields",
            ),
            Message::tool("a", "bash", listing.clone()),
            Message::tool("b", "bash", relevant),
            Message::tool("c", "bash", noise),
            Message::tool("d", "bash", listing),
            Message::text(
                Role::User,
                "fix the serializer so datetime fields keep their timezone",
            ),
            Message::tool("e", "bash", "ok\n".repeat(40)),
        ]
    }

    #[test]
    fn evicts_the_lowest_scores_until_under_budget_and_never_the_newest() {
        let out = check("phi_evict", "budget_tokens: 900", transcript());
        let evicted: Vec<usize> = (0..out.messages.len())
            .filter(|&i| out.messages[i].content.starts_with("[evicted"))
            .collect();
        assert!(!evicted.is_empty());
        assert!(
            !evicted.contains(&2),
            "the output relevant to the question stays"
        );
        assert!(!evicted.contains(&6), "the newest output stays");
        let kept: usize = out
            .messages
            .iter()
            .filter(|m| m.is_tool())
            .map(|m| crate::tokens::count(&m.content))
            .sum();
        assert!(kept <= 900, "{kept}");
        out.assert_stashes_resolve();
    }

    #[test]
    fn inert_within_budget_and_respects_the_cached_prefix() {
        let out = check("phi_evict", "", transcript());
        assert_eq!(out.messages, out.before);
        assert_eq!(
            out.report.components[0].gates.get("within_budget"),
            Some(&1)
        );
        let warm = check_with("phi_evict", "budget_tokens: 900", transcript(), |cx| {
            cx.mutable_from = 6
        });
        assert_eq!(warm.messages, warm.before);
        assert!(
            warm.report.components[0]
                .gates
                .contains_key("cached_prefix")
        );
    }

    #[test]
    fn weight_profiles_and_custom_weights_build() {
        for block in [
            "weights: aggressive",
            "weights: conservative",
            "weights: {relevance: 1, recency: 0, cost: 0, redundancy: 0}",
        ] {
            check("phi_evict", block, transcript());
        }
        let bad = crate::config::Config::parse(
            "pipeline: [phi_evict]\ncomponents:\n  phi_evict: {weights: {relevance: -1, recency: 0, cost: 0, redundancy: 0}}\n",
        );
        assert!(bad.is_err());
    }
}
