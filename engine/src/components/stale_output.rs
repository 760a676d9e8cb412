//! `stale_output` (triage): archives call outputs that are many steps old (Offload, frozen).
//!
//! An output more than `turns` assistant steps old, outside the reserve, not exempt, becomes:
//! ```text
//! [archived: bash output from 12 steps ago; starts: <first 96 characters>] <<cg:…>> [full output: call context_guru_expand]
//! ```
//! The call itself stays as it was, so the pair remains valid for every provider. Whether an
//! output is stale depends on later history, so decisions are frozen (see `triage`).

use serde::Deserialize;

use super::triage::{Budget, Exempt, Reserve, Rules, call_pairs, steps_after};
use super::{BuildError, ComponentFactory, MarkerMode, decode, offload_with, peek};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_OUTPUT;
use crate::pipeline::{ApplyCx, Component, ComponentError, Offload, Policy, StashKey, Transcript};

/// `components.stale_output`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StaleOutputConfig {
    /// Defaults to `8`. Outputs more than this many assistant steps old are archived.
    pub turns: usize,
    pub reserve: Reserve,
    pub exempt: Exempt,
    /// Defaults to none (act on every request). See `triage`.
    pub budget: Option<Budget>,
    /// Defaults to `true`.
    pub cold_cache: bool,
    pub marker_mode: MarkerMode,
}

impl Default for StaleOutputConfig {
    fn default() -> StaleOutputConfig {
        StaleOutputConfig {
            turns: 8,
            reserve: Reserve::default(),
            exempt: Exempt::default(),
            budget: None,
            cold_cache: true,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "stale_output",
    summary: "triage: archives call outputs many steps old (frozen, recoverable)",
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let c: StaleOutputConfig = decode(source)?;
    let rules = Rules::new(c.reserve.clone(), c.exempt.clone(), c.budget.clone())?;
    Ok(Component::Offload(Box::new(StaleOutput {
        config: c,
        rules,
    })))
}

struct StaleOutput {
    config: StaleOutputConfig,
    rules: Rules,
}

impl Offload for StaleOutput {
    fn policy(&self) -> Policy {
        Policy::rederivable(self.config.cold_cache)
    }

    fn offload(
        &self,
        messages: &mut Transcript<'_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<Vec<StashKey>, ComponentError> {
        if self.rules.quiet(cx, messages) {
            return Ok(Vec::new());
        }
        let reserve = self.rules.reserve_start(messages);
        let mut targets = Vec::new();
        for pair in call_pairs(messages) {
            let age = steps_after(messages, pair.call_message);
            if pair.output >= reserve {
                cx.gate("in_reserve");
            } else if age <= self.config.turns {
                cx.gate("recent");
            } else if self.rules.admits(messages, pair.output, cx) {
                targets.push((pair.output, age));
            }
        }
        if !self.rules.worth(targets.iter().map(|(i, _)| *i), cx) {
            return Ok(Vec::new());
        }
        let mut keys = Vec::new();
        for (index, age) in targets {
            let tool = messages[index]
                .tool_name
                .clone()
                .unwrap_or_else(|| "tool".into());
            let head = peek(&messages[index].content, 96);
            keys.extend(offload_with(messages, index, cx, |marker| {
                format!("[archived: {tool} output from {age} steps ago; starts: {head}] {marker}{HINT_FULL_OUTPUT}")
            }));
        }
        Ok(keys)
    }
}
