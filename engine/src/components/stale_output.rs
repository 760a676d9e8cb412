//! `stale_output` (triage): archives call outputs that are many steps old (Offload, frozen).
//!
//! An output more than `turns` assistant steps old, outside the reserve, not exempt, becomes:
//! ```text
//! [archived: bash output from 12 steps ago; starts: <first 96 characters>] <<cg:…>> [full output: call context_guru_expand]
//! ```
//! The call itself stays as it was, so the pair remains valid for every provider. Whether an
//! output is stale depends on later history, so decisions are frozen (see `triage`).

use super::triage::{Rules, Screen, call_pairs, screener_config, steps_after};
use super::{BuildError, ComponentFactory, decode, defaults, peek};
use crate::components::ComponentSource;
use crate::gate;
use crate::marker::HINT_FULL_OUTPUT;
use crate::pipeline::{ApplyCx, Component, Stashed, Transcript};

screener_config! {
    /// `components.stale_output`.
    pub struct StaleOutputConfig {
        /// Defaults to `8`. Outputs more than this many assistant steps old are archived.
        pub turns: usize = 8,
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "stale_output",
    summary: "triage: archives call outputs many steps old (frozen, recoverable)",
    gates: &[
        gate::BELOW_BUDGET_PRESSURE,
        gate::BELOW_MIN_SAVINGS,
        gate::CACHED_PREFIX,
        gate::EXEMPT,
        gate::IN_RESERVE,
        gate::RECENT,
    ],
    defaults: defaults::<StaleOutputConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let c: StaleOutputConfig = decode(source)?;
    c.screener(|c| StaleOutput { turns: c.turns })
}

struct StaleOutput {
    turns: usize,
}

impl Screen for StaleOutput {
    fn screen(
        &self,
        messages: &mut Transcript<'_, '_>,
        reserve: usize,
        rules: &Rules,
        cx: &mut ApplyCx<'_>,
    ) -> Stashed {
        let mut targets = Vec::new();
        for pair in call_pairs(messages) {
            let age = steps_after(messages, pair.call_message);
            if pair.output >= reserve {
                cx.gate(gate::IN_RESERVE);
            } else if age <= self.turns {
                cx.gate(gate::RECENT);
            } else if rules.admits(messages, pair.output, cx) {
                targets.push((pair.output, age));
            }
        }
        Ok(rules.cut(messages, targets, cx, |output, age, marker| {
            let tool = output.tool_name.as_deref().unwrap_or("tool");
            let head = peek(&output.content, 96);
            format!("[archived: {tool} output from {age} steps ago; starts: {head}] {marker}{HINT_FULL_OUTPUT}")
        }))
    }
}
