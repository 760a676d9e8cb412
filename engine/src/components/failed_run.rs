//! `failed_run`: collapses test and build runs that a later run of the same tool superseded
//! (Offload, frozen).
//!
//! Agents fix-and-rerun: `pytest` fails, the agent edits, `pytest` runs again. Once a later run
//! exists, the full text of an earlier *failing* one is history. It becomes one line:
//!
//! ```text
//! [superseded by a later failed→re-run] <<cg:7a1e…>> [full output: call context_guru_expand]
//! ```
//!
//! A run is recognized by line-anchored markers only (a pytest banner or summary, `test result:`,
//! `--- FAIL:`, `BUILD FAILURE`, a traceback header, `npm ERR!`, ...), so prose that mentions
//! "FAILED" is not a run. A run fails when one of its lines reports a failure, as the one
//! table of them (`failure.rs`) reads it. Earlier *passing* runs stay, and so does the newest
//! run of each command (the program a `command` argument starts with, when the call says;
//! otherwise all runs count as one family). Whether a run is superseded depends on what came
//! after it, so decisions are frozen and replayed; the replacement depends only on the content,
//! so a lost freeze is re-derived. If the store refuses the stash the output is left alone.

use crate::gate;
use std::sync::OnceLock;

use regex::Regex;
use serde::Deserialize;

use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, failure, offload_candidate,
    offload_with,
};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_OUTPUT;
use crate::message::Message;
use crate::pipeline::{ApplyCx, Component, Offload, Policy, Stashed, Transcript};

/// `components.failed_run`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FailedRunConfig {
    /// Defaults to `100`. Runs under this many tokens are left alone.
    pub min_tokens: usize,
    /// Defaults to `0`. The newest this many tool outputs are left byte-identical.
    pub keep_recent: usize,
    /// Defaults to `true`. May act at depth on a provably cold turn.
    pub cold_cache: bool,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
}

impl Default for FailedRunConfig {
    fn default() -> FailedRunConfig {
        FailedRunConfig {
            min_tokens: 100,
            keep_recent: 0,
            cold_cache: true,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "failed_run",
    summary: "collapses failing test/build runs that a later run superseded (frozen, recoverable)",
    gates: &[
        gate::BELOW_MIN_TOKENS,
        gate::CACHED_PREFIX,
        gate::EARLIER_RUN_PASSED,
        gate::FEWER_THAN_TWO_RUNS,
        gate::NOT_RUN_LIKE,
        gate::WITHIN_KEEP_RECENT,
    ],
    defaults: defaults::<FailedRunConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: FailedRunConfig = decode(source)?;
    Ok(Component::Offload(Box::new(FailedRun { config })))
}

struct FailedRun {
    config: FailedRunConfig,
}

/// A line that only a test or build tool prints.
fn run_like() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?m)^(?:\s*=+ .*(?:test session starts|FAILURES|ERRORS|\d+ (?:passed|failed|errors?))|test result: (?:ok|FAILED)\.|--- (?:FAIL|PASS): |(?:ok|FAIL)\s+\S+\s+[\d.]+s$|PASS\s|FAIL\s|\s*Tests?:\s+\d+ (?:failed|passed)|BUILD (?:SUCCESS|FAIL)|Traceback \(most recent call last\)|\s*FAILED\b|panic: |npm ERR!|Ran \d+ tests? in |error(?:\[E\d+\])?: |\s*\d+ (?:passing|failing)\b)",
        )
        .expect("run-like regex is valid")
    })
}

/// The program a run's call started (`pytest` for `cd repo && python -m pytest -x`), when the
/// call's arguments say.
fn family(message: &Message) -> Option<String> {
    let args: serde_json::Value = serde_json::from_str(message.tool_arguments.as_deref()?).ok()?;
    let command = args.get("command").or_else(|| args.get("cmd"))?.as_str()?;
    // The last segment of a `&&` / `;` chain is the one that produced the verdict.
    let segment = command
        .rsplit(['&', ';', '|'])
        .find(|s| !s.trim().is_empty())?;
    let mut words = segment
        .split_whitespace()
        .filter(|w| !w.contains('=') && !matches!(*w, "sudo" | "env" | "time" | "timeout"));
    let first = words.next()?;
    let program = first.rsplit('/').next().unwrap_or(first);
    // `python -m pytest`, `npx jest`, `uv run pytest`: the module or tool is the family.
    if matches!(
        program,
        "python" | "python3" | "npx" | "uv" | "poetry" | "pnpm" | "yarn"
    ) {
        let tool = words.find(|w| !w.starts_with('-') && *w != "run")?;
        return Some(tool.to_owned());
    }
    Some(program.to_owned())
}

impl Offload for FailedRun {
    fn policy(&self) -> Policy {
        Policy::rederivable(self.config.cold_cache)
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        // Every run, oldest first, with its family.
        let mut runs: Vec<(usize, Option<String>)> = Vec::new();
        for index in 0..messages.len() {
            let message = &messages[index];
            if !offload_candidate(message, index, cx) {
                continue;
            }
            if !run_like().is_match(&message.content) {
                cx.gate(gate::NOT_RUN_LIKE);
                continue;
            }
            runs.push((index, family(message)));
        }
        if runs.len() < 2 {
            if !runs.is_empty() {
                cx.gate(gate::FEWER_THAN_TWO_RUNS);
            }
            return Ok(Vec::new());
        }
        let recent = super::recent_outputs(messages, self.config.keep_recent);
        let mut keys = Vec::new();
        for (at, (index, fam)) in runs.iter().enumerate() {
            if recent.contains(index) {
                cx.gate(gate::WITHIN_KEEP_RECENT);
                continue;
            }
            let superseded = runs[at + 1..]
                .iter()
                .any(|(_, later)| fam.is_none() || later.is_none() || later == fam);
            if !superseded {
                continue;
            }
            let index = *index;
            if cx.tokens_below(index, self.config.min_tokens) {
                cx.gate(gate::BELOW_MIN_TOKENS);
                continue;
            }
            // A run fails when a line of it reports a failure (the one table, `failure.rs`).
            if !failure::reads_as_failure(&messages[index].content) {
                cx.gate(gate::EARLIER_RUN_PASSED);
                continue;
            }
            if !cx.may_mutate(index) {
                cx.gate(gate::CACHED_PREFIX);
                continue;
            }
            keys.extend(offload_with(messages, index, cx, |_, marker| {
                format!("[superseded by a later failed→re-run] {marker}{HINT_FULL_OUTPUT}")
            }));
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::testing::{check, check_with};
    use crate::message::Role;

    fn pytest(failed: usize) -> String {
        let mut out = String::from(
            "============================= test session starts ==============================\nplatform linux -- Python 3.11.4, pytest-7.4.0\ncollected 42 items\n\n",
        );
        for i in 0..40 {
            out.push_str(&format!("tests/test_models.py::test_field_{i} PASSED\n"));
        }
        if failed > 0 {
            out.push_str("=================================== FAILURES ===================================\n___ test_roundtrip ___\n    assert dumped == original\nE   AssertionError\n");
            out.push_str(&format!("FAILED tests/test_models.py::test_roundtrip - AssertionError\n========================= {failed} failed, 41 passed in 2.31s =========================\n"));
        } else {
            out.push_str("============================== 42 passed in 2.12s ==============================\n");
        }
        out
    }

    fn call(id: &str, command: &str, output: String) -> Message {
        let mut m = Message::tool(id, "bash", output);
        m.tool_arguments = Some(serde_json::json!({ "command": command }).to_string());
        m
    }

    fn session(outputs: Vec<Message>) -> Vec<Message> {
        let mut m = vec![Message::text(Role::User, "fix the serializer")];
        m.extend(outputs);
        m
    }

    #[test]
    fn collapses_earlier_failing_runs_and_keeps_the_newest_and_passing_ones() {
        let out = check(
            "failed_run",
            "",
            session(vec![
                call("a", "cd /repo && python -m pytest tests", pytest(2)),
                call("b", "python -m pytest tests", pytest(0)),
                call("c", "pytest tests -x", pytest(1)),
                call("d", "pytest tests -x", pytest(1)),
            ]),
        );
        assert!(
            out.messages[1]
                .content
                .starts_with("[superseded by a later failed→re-run] <<cg:")
        );
        assert_eq!(
            out.messages[2], out.before[2],
            "an earlier passing run stays"
        );
        assert!(out.messages[3].content.starts_with("[superseded"));
        assert_eq!(out.messages[4], out.before[4], "the newest run stays whole");
        assert_eq!(
            out.report.components[0].gates.get("earlier_run_passed"),
            Some(&1)
        );
        out.assert_stashes_resolve();
    }

    #[test]
    fn prose_is_not_a_run_and_other_commands_do_not_supersede() {
        let prose = "The CI log said FAILED twice, and 3 passed; I will look into it. ".repeat(20);
        let out = check(
            "failed_run",
            "",
            session(vec![
                call("a", "cat notes.md", prose.clone()),
                call("b", "pytest", pytest(1)),
                call(
                    "c",
                    "cargo build",
                    "error[E0308]: mismatched types\n  --> src/main.rs:4:5\n".repeat(30),
                ),
            ]),
        );
        assert_eq!(
            out.messages, out.before,
            "pytest's newest run and cargo's stay"
        );
        assert_eq!(out.report.components[0].gates.get("not_run_like"), Some(&1));
    }

    #[test]
    fn respects_the_cached_prefix_on_warm_turns() {
        let runs = session(vec![
            call("a", "pytest", pytest(1)),
            call("b", "pytest", pytest(1)),
        ]);
        let warm = check_with("failed_run", "", runs.clone(), |cx| cx.mutable_from = 3);
        assert_eq!(warm.messages, warm.before);
        assert_eq!(
            warm.report.components[0].gates.get("cached_prefix"),
            Some(&1)
        );
        let cold = check_with("failed_run", "", runs, |cx| {
            cx.mutable_from = 3;
            cx.cold = true;
        });
        assert!(cold.messages[1].content.starts_with("[superseded"));
    }

    #[test]
    fn families_come_from_the_last_command_of_a_chain() {
        let f = |c: &str| family(&call("x", c, String::new()));
        assert_eq!(
            f("cd /repo && python -m pytest -x").as_deref(),
            Some("pytest")
        );
        assert_eq!(f("FOO=1 /usr/bin/cargo test").as_deref(), Some("cargo"));
        assert_eq!(f("npx jest src").as_deref(), Some("jest"));
        assert_eq!(family(&Message::tool("x", "bash", "")), None);
    }
}
