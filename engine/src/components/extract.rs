//! `extract`: projects a large tool output onto what the conversation is about (Offload, frozen).
//!
//! The deterministic strategy, in two steps:
//!
//! 1. Noise goes: terminal escapes and `\r` redraws, progress-bar and spinner lines, runs of
//!    blank lines (to one), and consecutively repeated blocks of 1 to 12 lines (to one copy).
//! 2. When the conversation has a query (keywords of the task in the first user message and of
//!    the latest user and assistant messages), only the first and last `head_lines`/`tail_lines`
//!    lines, lines sharing a keyword with the query, and lines carrying an error word stay; each
//!    gap becomes `… (N lines)`.
//!
//! Before: a 600-line `pip install` log; the agent asked about `numpy`.
//! After:
//! ```text
//! Collecting requests
//! …
//! Collecting numpy>=1.26
//! … (212 lines)
//! ERROR: Could not build wheels for numpy
//! Successfully installed ...
//! <<cg:4b1d…>> [full output: call context_guru_expand]
//! ```
//!
//! What it keeps depends on the query at the time, so a decision is made once, on a new output,
//! and frozen; like a sampled result it is never re-derived after a loss (a different query
//! would keep different lines). `strategy: code` (and `rlm`, which maps to it) asks the host's
//! cheap model for a filter first, exactly as `extract_llm` does (see that module), and falls
//! back to this projection when there is no model or the filter fails its checks. If the store
//! refuses the stash the output is left alone.

use crate::gate;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::extract_llm::{Llm, Outcome, default_break_even};
use super::projection::Projector;
use super::{BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate};
use crate::components::ComponentSource;
use crate::model::ModelConfig;
use crate::pipeline::{ApplyCx, Component, Offload, Policy, Stashed, Transcript};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    #[default]
    Deterministic,
    Code,
    Rlm,
}

/// `components.extract`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExtractConfig {
    /// Defaults to `300`. Outputs under this many tokens are left alone.
    pub min_tokens: usize,
    /// Defaults to `0`. The newest this many tool outputs are left byte-identical.
    pub keep_recent: usize,
    /// Defaults to `5`. Lines always kept from the start.
    pub head_lines: usize,
    /// Defaults to `5`. Lines always kept from the end.
    pub tail_lines: usize,
    /// Defaults to `deterministic`.
    pub strategy: Strategy,
    /// The cheap model for `code`/`rlm` (`source: incoming | config`).
    pub model: ModelConfig,
    /// When to spend a model call (`min_output_tokens`, `min_request_tokens`, `min_messages`).
    #[serde(skip_serializing)]
    pub trigger: Option<IgnoredAny>,
    /// Defaults to `false`. Lets a model-written filter reword (no deletion-only proof).
    pub rewrite: bool,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
}

impl Default for ExtractConfig {
    fn default() -> ExtractConfig {
        ExtractConfig {
            min_tokens: 300,
            keep_recent: 0,
            head_lines: 5,
            tail_lines: 5,
            strategy: Strategy::Deterministic,
            model: ModelConfig::default(),
            trigger: None,
            rewrite: false,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "extract",
    summary: "projects a large output onto the conversation's query and drops noise (frozen)",
    gates: &[
        gate::BELOW_OUTPUT_FLOOR,
        gate::CACHED_PREFIX,
        gate::NO_OBVIOUS_NOISE,
        gate::WITHIN_KEEP_RECENT,
    ],
    defaults: defaults::<ExtractConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: ExtractConfig = decode(source)?;
    Ok(Component::Offload(Box::new(Extract { config })))
}

struct Extract {
    config: ExtractConfig,
}

impl Offload for Extract {
    fn policy(&self) -> Policy {
        Policy::SAMPLED
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let mut projector =
            Projector::new(messages, self.config.head_lines, self.config.tail_lines);
        let mut keys = Vec::new();
        let recent = super::recent_outputs(messages, self.config.keep_recent);
        for index in 0..messages.len() {
            if recent.contains(&index) {
                cx.gate(gate::WITHIN_KEEP_RECENT);
                continue;
            }
            if !offload_candidate(&messages[index], index, cx) {
                continue;
            }
            if cx.tokens_below(index, self.config.min_tokens) {
                cx.gate(gate::BELOW_OUTPUT_FLOOR);
                continue;
            }
            if self.config.strategy != Strategy::Deterministic {
                let llm = Llm {
                    model: &self.config.model,
                    rewrite: self.config.rewrite,
                    break_even_tokens: default_break_even(&self.config.model),
                };
                match llm.extract(messages, index, cx) {
                    Outcome::Applied(key) => {
                        keys.push(key);
                        continue;
                    }
                    Outcome::Leave => continue,
                    Outcome::Fallback => {}
                }
            }
            keys.extend(projector.offload(messages, index, cx));
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use crate::components::testing::{check, check_with};
    use crate::message::{Message, Role};

    fn pip_log() -> String {
        let mut out = String::new();
        for pkg in [
            "requests",
            "urllib3",
            "idna",
            "certifi",
            "charset-normalizer",
        ] {
            out.push_str(&format!(
                "Collecting {pkg}\n  Downloading {pkg}-2.31.0-py3-none-any.whl (62 kB)\n"
            ));
            out.push_str(
                "     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 62.6/62.6 kB 4.1 MB/s eta 0:00:00\n",
            );
        }
        out.push_str("Collecting numpy>=1.26\n  Using cached numpy-1.26.4.tar.gz (15.8 MB)\n");
        for i in 0..120 {
            out.push_str(&format!("  gcc -pthread -fno-strict-overflow -O3 -c src/multiarray/file_{i}.c -o tmp/file_{i}.o\n"));
        }
        out.push_str("  error: command '/usr/bin/gcc' failed with exit code 1\nERROR: Could not build wheels for numpy, which is required to install pyproject.toml-based projects\n");
        out
    }

    fn conversation(output: &str) -> Vec<Message> {
        vec![
            Message::text(
                Role::User,
                "install the project dependencies; numpy fails to build",
            ),
            Message::tool("a", "bash", output),
        ]
    }

    #[test]
    fn keeps_query_lines_errors_and_ends_and_stashes_the_rest() {
        let log = pip_log();
        let out = check("extract", "", conversation(&log));
        let after = &out.messages[1].content;
        assert!(after.contains("Collecting numpy>=1.26"));
        assert!(after.contains("ERROR: Could not build wheels for numpy"));
        assert!(after.contains("error: command '/usr/bin/gcc' failed"));
        assert!(after.contains("… ("), "gaps are marked");
        assert!(!after.contains("━━━━"), "progress bars go");
        assert!(after.ends_with("[full output: call context_guru_expand]"));
        assert!(out.report.components[0].saved_tokens > 1000);
        out.assert_stashes_resolve();
    }

    #[test]
    fn small_outputs_and_the_cached_prefix_are_left_alone() {
        let out = check("extract", "", conversation("Collecting numpy\nok"));
        assert_eq!(
            out.report.components[0].gates.get("below_output_floor"),
            Some(&1)
        );
        let warm = check_with("extract", "", conversation(&pip_log()), |cx| {
            cx.mutable_from = 2
        });
        assert_eq!(warm.messages, warm.before);
        let code = check(
            "extract",
            "strategy: code\nmodel: {source: config}",
            conversation(&pip_log()),
        );
        assert_eq!(code.report.components[0].gates.get("no_model"), Some(&1));
        assert!(
            code.report.components[0].acted,
            "degrades to the deterministic projection"
        );
    }
}
