//! `repeated_call` (triage): keeps only the latest of calls repeated with the same arguments
//! (Offload, frozen).
//!
//! Two calls match when the tool is the same and the arguments are the same JSON value, key
//! order aside. Every earlier output of a repeated call, outside the reserve and not exempt,
//! becomes:
//! ```text
//! [repeated call: bash was called again later with the same arguments] <<cg:…>>
//! ```

use std::collections::HashMap;

use serde::Deserialize;

use super::triage::{Budget, Exempt, Reserve, Rules, call_pairs};
use super::{BuildError, ComponentFactory, MarkerMode, decode, offload_with};
use crate::components::ComponentSource;
use crate::pipeline::{ApplyCx, Component, ComponentError, Offload, Policy, StashKey, Transcript};

/// `components.repeated_call`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RepeatedCallConfig {
    pub reserve: Reserve,
    pub exempt: Exempt,
    /// Defaults to none (act on every request). See `triage`.
    pub budget: Option<Budget>,
    /// Defaults to `true`.
    pub cold_cache: bool,
    pub marker_mode: MarkerMode,
}

impl Default for RepeatedCallConfig {
    fn default() -> RepeatedCallConfig {
        RepeatedCallConfig {
            reserve: Reserve::default(),
            exempt: Exempt::default(),
            budget: None,
            cold_cache: true,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "repeated_call",
    summary: "triage: keeps only the latest of calls repeated with the same arguments (frozen)",
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let c: RepeatedCallConfig = decode(source)?;
    let rules = Rules::new(c.reserve.clone(), c.exempt.clone(), c.budget.clone())?;
    Ok(Component::Offload(Box::new(RepeatedCall {
        config: c,
        rules,
    })))
}

struct RepeatedCall {
    config: RepeatedCallConfig,
    rules: Rules,
}

/// Arguments as one canonical text: object keys sorted (serde_json's map is ordered).
fn canonical(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .map_or_else(|_| arguments.to_owned(), |v| v.to_string())
}

impl Offload for RepeatedCall {
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
                cx.gate("in_reserve");
            } else if self.rules.admits(messages, p.output, cx) {
                targets.push((p.output, call.name.clone()));
            }
        }
        if !self.rules.worth(targets.iter().map(|(i, _)| *i), cx) {
            return Ok(Vec::new());
        }
        let mut keys = Vec::new();
        for (index, tool) in targets {
            keys.extend(offload_with(messages, index, cx, |marker| {
                format!("[repeated call: {tool} was called again later with the same arguments] {marker}")
            }));
        }
        Ok(keys)
    }
}
