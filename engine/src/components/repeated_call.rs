//! `repeated_call` (triage): keeps only the latest of calls repeated with the same arguments
//! (Offload, frozen).
//!
//! Two calls match when the tool is the same and the arguments are the same JSON value, key
//! order aside. Every earlier output of a repeated call, outside the reserve and not exempt,
//! becomes:
//! ```text
//! [repeated call: bash was called again later with the same arguments] <<cg:…>>
//! ```

use crate::gate;
use std::collections::HashMap;

use super::triage::{Rules, Screen, call_pairs, screener_config};
use super::{BuildError, ComponentFactory, decode, defaults};
use crate::components::ComponentSource;
use crate::pipeline::{ApplyCx, Component, Stashed, Transcript};

screener_config! {
    /// `components.repeated_call`.
    pub struct RepeatedCallConfig {}
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "repeated_call",
    summary: "triage: keeps only the latest of calls repeated with the same arguments (frozen)",
    gates: &[
        gate::BELOW_BUDGET_PRESSURE,
        gate::BELOW_MIN_SAVINGS,
        gate::CACHED_PREFIX,
        gate::EXEMPT,
        gate::IN_RESERVE,
    ],
    defaults: defaults::<RepeatedCallConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let c: RepeatedCallConfig = decode(source)?;
    c.screener(|_| RepeatedCall)
}

struct RepeatedCall;

/// Arguments as one canonical text: object keys sorted (serde_json's map is ordered).
fn canonical(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .map_or_else(|_| arguments.to_owned(), |v| v.to_string())
}

impl Screen for RepeatedCall {
    fn screen(
        &self,
        messages: &mut Transcript<'_, '_>,
        reserve: usize,
        rules: &Rules,
        cx: &mut ApplyCx<'_>,
    ) -> Stashed {
        let pairs = call_pairs(messages);
        let mut latest: HashMap<(String, String), usize> = HashMap::new();
        for p in &pairs {
            let call = &messages[p.call_message].tool_calls[p.call];
            latest.insert((call.name.clone(), canonical(&call.arguments)), p.output);
        }
        let mut targets = Vec::new();
        for p in &pairs {
            let call = &messages[p.call_message].tool_calls[p.call];
            let newest = latest[&(call.name.clone(), canonical(&call.arguments))];
            if newest == p.output {
                continue;
            }
            if p.output >= reserve {
                cx.gate(gate::IN_RESERVE);
            } else if rules.admits(messages, p.output, cx) {
                targets.push((p.output, call.name.clone()));
            }
        }
        Ok(rules.cut(messages, targets, cx, |_, tool, marker| {
            format!(
                "[repeated call: {tool} was called again later with the same arguments] {marker}"
            )
        }))
    }
}
