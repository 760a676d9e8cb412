//! `agentdiet` as this build has it: without a model.
//!
//! `extract_llm` and `summarize` have their model now (`llm`); `agentdiet` does not yet, so it
//! does what the spec says an LLM component does when no model is available: nothing, recorded
//! as the gate `no_model` on every request, and a warning when the config loads. Its config block
//! is checked against the spec's keys, so a config written for the reference loads and a typo is
//! still an error. Presets that name it (agentdiet) build, run, and save exactly what their other
//! components save. Neither it nor those presets are offered in listings (`sluice presets`, the
//! names an error suggests): see `components::is_listed` for why it loads but is not listed.

use crate::gate;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::{BuildError, ComponentFactory, decode, defaults};
use crate::components::ComponentSource;
use crate::pipeline::{ApplyCx, Component, Offload, Policy, Stashed, Transcript};

/// Names of the components in this file, for the config warning.
pub const WITHOUT_MODEL: [&str; 1] = ["agentdiet"];

/// `components.agentdiet`: the reference's keys.
#[derive(Debug, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct AgentdietConfig {
    #[serde(skip_serializing)]
    delay_steps: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    context_steps: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    min_step_tokens: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    min_saved_tokens: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    max_keep_ratio: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    cache_tail_only: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    trigger: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    marker_mode: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    model: Option<IgnoredAny>,
}

pub(super) const AGENTDIET: ComponentFactory = ComponentFactory {
    name: "agentdiet",
    summary: "the AgentDiet trajectory reducer (no model in this build: no-op)",
    gates: &[gate::NO_MODEL],
    defaults: defaults::<AgentdietConfig>,
    build: build_agentdiet,
};

fn build_agentdiet(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let _: AgentdietConfig = decode(source)?;
    Ok(Component::Offload(Box::new(NoModel)))
}

/// An LLM component with no model: records why it did nothing.
struct NoModel;

impl Offload for NoModel {
    /// Sampled, so whatever a model-backed build froze is never re-derived by this one.
    fn policy(&self) -> Policy {
        Policy::SAMPLED
    }

    fn offload(&self, _: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        cx.gate(gate::NO_MODEL);
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use crate::components::testing::{check, tool_messages};
    use crate::config::Config;

    #[test]
    fn no_model_means_no_op_reported_and_warned() {
        for name in super::WITHOUT_MODEL {
            let out = check(
                name,
                "model: {source: config}",
                tool_messages(&["x".repeat(5000).as_str()]),
            );
            assert_eq!(out.messages, out.before);
            assert_eq!(out.report.components[0].gates.get("no_model"), Some(&1));
            let config = Config::parse(&format!("pipeline: [{name}]")).unwrap();
            assert!(
                config
                    .warnings
                    .iter()
                    .any(|w| w.contains(name) && w.contains("no model"))
            );
        }
        let typo =
            Config::parse("pipeline: [summarize]\ncomponents:\n  summarize: {keep_lsat: 3}\n");
        assert!(typo.is_err());
    }
}
