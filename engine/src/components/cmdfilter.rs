//! `cmdfilter`: applies the matching DSL filter to a command's output (Offload).
//!
//! Before (`$ pip install -e .`, 40 lines of download chatter and one error):
//! ```text
//! Obtaining file:///testbed
//!   Downloading pyerfa-2.0.1.1-cp39-abi3-manylinux_2_17_x86_64.whl (738 kB)
//! ...
//! ERROR: Could not build wheels for numpy
//! ```
//! After:
//! ```text
//! ERROR: Could not build wheels for numpy
//! <<cg:5e0c…>> [full output: call context_guru_expand]
//! ```
//!
//! The filter is chosen by [`crate::dsl`]'s selector: the command from the call's arguments
//! (`command`, else `cmd`) and the first lines of the output. The original is always stashed and
//! its marker always written; the recovery hint is appended only when the filter was lossy.
//! Enabled only when at least one filter is loaded (the builtins, unless `disable_builtins`, plus
//! the inline documents in `filters`); inline documents are checked, tests included, when the
//! config loads. A pure function of the output and its command, so every turn re-derives the
//! same bytes: nothing to freeze.

use crate::gate;
use serde::Deserialize;

use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate, offload_with,
};
use crate::components::ComponentSource;
use crate::dsl::{self, FilterSet, Lossiness};
use crate::marker::HINT_FULL_OUTPUT;
use crate::message::Message;
use crate::pipeline::{ApplyCx, Component, Offload, Stashed, Transcript};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentFilters {
    /// The only value this build supports; the reference's `safe`/`lossy` agent-command sets
    /// are builtins here or user filters.
    #[default]
    Off,
}

/// `components.cmdfilter`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CmdfilterConfig {
    /// Defaults to none. Filter documents (YAML text, `schema_version: 1`) added to the builtins.
    pub filters: Vec<String>,
    /// Defaults to `false`. Load only the documents in `filters`.
    pub disable_builtins: bool,
    /// Defaults to `400`. Outputs shorter than this many bytes are left alone.
    pub min_size: usize,
    /// Defaults to `off`.
    pub agent_filters: AgentFilters,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
}

impl Default for CmdfilterConfig {
    fn default() -> CmdfilterConfig {
        CmdfilterConfig {
            filters: Vec::new(),
            disable_builtins: false,
            min_size: 400,
            agent_filters: AgentFilters::Off,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "cmdfilter",
    summary: "filters command output with the matching DSL filter (builtins + your own, recoverable)",
    gates: &[
        gate::BELOW_MIN_SIZE,
        gate::EMPTY,
        gate::FILTER_MATCHED_NO_CHANGE,
        gate::NO_FILTERS_LOADED,
        gate::NO_FILTER_MATCH,
    ],
    defaults: defaults::<CmdfilterConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: CmdfilterConfig = decode(source)?;
    let names: Vec<String> = (1..=config.filters.len())
        .map(|i| format!("filters[{}]", i - 1))
        .collect();
    let documents: Vec<(&str, &str)> = names
        .iter()
        .map(String::as_str)
        .zip(config.filters.iter().map(String::as_str))
        .collect();
    let base = if config.disable_builtins {
        Ok(FilterSet::default())
    } else {
        FilterSet::builtins()
    };
    let set = base
        .and_then(|base| base.extend(&documents))
        .map_err(BuildError::Filters)?;
    Ok(Component::Offload(Box::new(Cmdfilter { config, set })))
}

struct Cmdfilter {
    config: CmdfilterConfig,
    set: FilterSet,
}

/// The command that produced a tool output, from its call's arguments.
pub fn command_of(message: &Message) -> Option<String> {
    let args: serde_json::Value = serde_json::from_str(message.tool_arguments.as_deref()?).ok()?;
    let command = args.get("command").or_else(|| args.get("cmd"))?;
    match command {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(serde_json::Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

impl Offload for Cmdfilter {
    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        if self.set.is_empty() {
            cx.gate(gate::NO_FILTERS_LOADED);
            return Ok(Vec::new());
        }
        let mut keys = Vec::new();
        for index in 0..messages.len() {
            let message = &messages[index];
            if !offload_candidate(message, index, cx) {
                continue;
            }
            if message.content.trim().is_empty() {
                cx.gate(gate::EMPTY);
                continue;
            }
            if message.content.len() < self.config.min_size {
                cx.gate(gate::BELOW_MIN_SIZE);
                continue;
            }
            let command = command_of(message);
            let selector = dsl::selector(command.as_deref(), &message.content);
            let Some(filter) = self.set.select(&selector) else {
                cx.gate(gate::NO_FILTER_MATCH);
                continue;
            };
            let filtered = filter.apply(&message.content);
            if filtered.text == message.content {
                cx.gate(gate::FILTER_MATCHED_NO_CHANGE);
                continue;
            }
            let hint = if filtered.loss == Lossiness::None {
                ""
            } else {
                HINT_FULL_OUTPUT
            };
            keys.extend(offload_with(messages, index, cx, |_, marker| {
                format!("{}\n{marker}{hint}", filtered.text)
            }));
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use crate::components::testing::check;
    use crate::message::{Message, Role};

    fn pip_output() -> String {
        let mut out =
            String::from("Obtaining file:///testbed\n  Installing build dependencies: started\n");
        for pkg in [
            "numpy",
            "pyerfa",
            "packaging",
            "pyyaml",
            "astropy-iers-data",
        ] {
            out.push_str(&format!("Collecting {pkg}\n  Downloading {pkg}-1.0.0-cp311-cp311-manylinux_2_17_x86_64.whl (2.1 MB)\n     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 2.1/2.1 MB 31.0 MB/s eta 0:00:00\n"));
        }
        out.push_str("ERROR: Could not build wheels for numpy, which is required to install pyproject.toml-based projects\n");
        out
    }

    fn call(command: &str, output: &str) -> Vec<Message> {
        let mut tool = Message::tool("c1", "bash", output);
        tool.tool_arguments = Some(serde_json::json!({ "command": command }).to_string());
        vec![Message::text(Role::User, "install it"), tool]
    }

    #[test]
    fn filters_by_command_keeps_the_error_and_stashes_the_original() {
        let out = check("cmdfilter", "", call("pip install -e .", &pip_output()));
        let after = &out.messages[1].content;
        assert!(
            after.starts_with("ERROR: Could not build wheels for numpy"),
            "{after}"
        );
        assert!(
            after.ends_with("[full output: call context_guru_expand]"),
            "lossy, so hinted"
        );
        out.assert_stashes_resolve();
    }

    #[test]
    fn unknown_output_small_output_and_user_filters() {
        let prose =
            "The build instructions mention pip but this is a README paragraph. ".repeat(10);
        let out = check("cmdfilter", "", call("cat README.md", &prose));
        assert_eq!(out.messages, out.before);
        assert_eq!(
            out.report.components[0].gates.get("no_filter_match"),
            Some(&1)
        );
        let small = check("cmdfilter", "", call("pip install x", "Collecting x"));
        assert_eq!(
            small.report.components[0].gates.get("below_min_size"),
            Some(&1)
        );

        let mine = "disable_builtins: true\nfilters:\n  - |\n    schema_version: 1\n    filters:\n      readme:\n        match: '^\\$ cat README'\n        head_lines: 1\n";
        let out = check(
            "cmdfilter",
            mine,
            call("cat README.md", &prose.replace(". ", ".\n")),
        );
        assert!(
            out.messages[1].content.contains("... (10 lines omitted)"),
            "{}",
            out.messages[1].content
        );

        let none = check(
            "cmdfilter",
            "disable_builtins: true",
            call("pip install -e .", &pip_output()),
        );
        assert_eq!(
            none.report.components[0].gates.get("no_filters_loaded"),
            Some(&1)
        );
        let broken = crate::config::Config::parse(
            "pipeline: [cmdfilter]\ncomponents:\n  cmdfilter:\n    filters: ['schema_version: 1\n      filters: {x: {match: \"(\"}}']\n",
        );
        assert!(broken.is_err());
    }
}
