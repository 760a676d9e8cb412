//! `collapse`: keeps the head and tail lines of an oversized tool output (Offload, fallback).
//!
//! Before: a 2,000-line log.
//! After:
//! ```text
//! <first 20 lines>
//! ... (1960 lines omitted) <<cg:44ab…>> [full output: call context_guru_expand]
//! <last 20 lines>
//! ```
//!
//! Content-agnostic and late in a pipeline: it catches what nothing more specific handled, and
//! skips anything already carrying a marker. If the store refuses the stash the output is left
//! alone.
//!
//! What the next turn is likely to need can stay in view (issue #22): up to `keep_lines` lines
//! (off by default) from the omitted middle, in order and numbered, are kept below the marker. A line is kept
//! when it reads as a failure (`error`, `failed`, `traceback`, `exception`, `panicked`,
//! `assert`, `fatal`) or names a term of the call that produced the output (a searched pattern,
//! a path, a test name: words of four or more characters in its arguments). Both come from the
//! message itself, so the cut is still a function of the message alone.
//!
//! A failing call's output stays whole up to `keep_failures` tokens (8,000): the model is about
//! to debug it, and the identifiers it needs are usually in the middle collapse would cut.
//!
//! Cache safety: whether and how it collapses a message depends on that message alone, so every
//! turn re-derives the same bytes at any depth ([`Freeze::Stateless`]). The reference tail-gates
//! and freezes it because its threshold could follow the model's context window (`max_frac`);
//! sluice does not know windows, so that cannot happen here, and a tail gate would only cost the
//! first turn a proxy sees of a long session its whole saving. `cold_cache` is accepted for
//! config compatibility and has nothing to lift.

use crate::gate;

use serde::Deserialize;

use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate, offload_with,
};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_OUTPUT;
use crate::message::Message;
#[cfg(doc)]
use crate::pipeline::Freeze;
use crate::pipeline::{ApplyCx, Component, Offload, Stashed, Transcript};
use crate::wire::json;

/// `components.collapse`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CollapseConfig {
    /// Defaults to `2000`. Outputs at or below this many tokens are left alone.
    pub max_tokens: usize,
    /// Defaults to `0` (off). A share of the model's context window that replaces `max_tokens`
    /// when the window is known; sluice does not know windows yet, so this is accepted for
    /// compatibility and has no effect.
    pub max_frac: f64,
    /// Defaults to `20`. Lines kept from the start.
    pub head_lines: usize,
    /// Defaults to `20`. Lines kept from the end.
    pub tail_lines: usize,
    /// Defaults to `true`. Accepted for compatibility: collapse acts at any depth already.
    pub cold_cache: bool,
    /// Defaults to `0` (none). Lines of the omitted middle kept in view when they read as a
    /// failure or name a term of the call that produced the output. Off by default: on the
    /// public corpus every setting tried raised visible recall a little and cost more net than
    /// the expand rounds it saved (`docs/performance.md`).
    pub keep_lines: usize,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
    /// Defaults to `8000`; `0` turns it off. An output that reports a failure (the tool result
    /// is marked as an error, or its first line is a non-zero exit status) and is at most this
    /// many tokens is left whole: it is what the model reads next, and on the public corpus
    /// cutting one cost more in expand rounds than it saved (`docs/performance.md`, "Choosing
    /// the presets"). Longer failing outputs are still collapsed, since re-sending a build log
    /// of tens of thousands of tokens every turn costs more than a round.
    pub keep_failures: usize,
}

impl Default for CollapseConfig {
    fn default() -> CollapseConfig {
        CollapseConfig {
            max_tokens: 2000,
            max_frac: 0.0,
            head_lines: 20,
            tail_lines: 20,
            cold_cache: true,
            keep_lines: 0,
            marker_mode: MarkerMode::Full,
            keep_failures: 8000,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "collapse",
    summary: "keeps head and tail lines of an oversized output (recoverable fallback)",
    gates: &[
        gate::BELOW_MAX_TOKENS,
        gate::FAILURE_IN_VIEW,
        gate::TOO_FEW_LINES,
    ],
    defaults: defaults::<CollapseConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: CollapseConfig = decode(source)?;
    if !(0.0..=1.0).contains(&config.max_frac) {
        return Err(BuildError::invalid(
            "max_frac",
            format!("must be between 0 and 1, got {}", config.max_frac),
        ));
    }
    Ok(Component::Offload(Box::new(Collapse { config })))
}

struct Collapse {
    config: CollapseConfig,
}

impl Collapse {
    /// Why output `index` is kept whole for its size: short enough to read, or a failure short
    /// enough to keep in view.
    fn kept_whole(&self, message: &Message, index: usize, cx: &ApplyCx<'_>) -> Option<gate::Gate> {
        if cx.tokens_below(index, self.config.max_tokens.saturating_add(1)) {
            return Some(gate::BELOW_MAX_TOKENS);
        }
        // The failure first: it reads the first line, the count up to 8,000 tokens.
        let keep = self.config.keep_failures.saturating_add(1);
        (reports_failure(message) && cx.tokens_below(index, keep)).then_some(gate::FAILURE_IN_VIEW)
    }
}

impl Offload for Collapse {
    /// Decides each output alone: carried-over ones are skipped by the candidate helper.
    fn carries_over(&self) -> bool {
        true
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let mut keys = Vec::new();
        for index in 0..messages.len() {
            let message = &messages[index];
            if !offload_candidate(message, index, cx) {
                continue;
            }
            if let Some(small) = self.kept_whole(message, index, cx) {
                cx.gate(small);
                continue;
            }
            // The text to cut: the output itself, or, when the output is JSON whose lines all sit
            // inside one string (mini-swe-agent's `{"returncode":0,"output":"..."}`, many MCP
            // tools), that string; the JSON around it stays as it is, and valid. An output with
            // lines enough is cut as it is, from the one count of its lines.
            let direct = head_and_tail(
                &message.content,
                self.config.head_lines,
                self.config.tail_lines,
            );
            let json_text = match direct {
                Some(_) => None,
                None => match super::longest_json_text(&message.content) {
                    Some(found) => Some(found),
                    None => {
                        cx.gate(gate::TOO_FEW_LINES);
                        continue;
                    }
                },
            };
            let (text, parts) = match &json_text {
                None => (message.content.as_str(), direct),
                Some((_, text)) => (
                    text.as_str(),
                    head_and_tail(text, self.config.head_lines, self.config.tail_lines),
                ),
            };
            let json_string = json_text.as_ref().map(|(span, _)| *span);
            let Some((head, omitted, tail)) = parts else {
                cx.gate(gate::TOO_FEW_LINES);
                continue;
            };
            // The call's terms only when lines are kept for them (off by default).
            let terms = if self.config.keep_lines > 0 {
                call_terms(message.tool_arguments.as_deref().unwrap_or(""))
            } else {
                Vec::new()
            };
            let kept = salient_lines(
                text,
                self.config.head_lines,
                omitted,
                &terms,
                self.config.keep_lines,
            );
            // Owned: the message is written below. Both ends are a few dozen lines.
            let (head, tail) = (head.to_owned(), tail.to_owned());
            let around = json_string.map(|span| {
                let content = &message.content;
                (
                    content[..span.start].to_owned(),
                    content[span.end..].to_owned(),
                )
            });
            let key = offload_with(messages, index, cx, |_, marker| {
                let mut out = String::with_capacity(head.len() + tail.len() + 96);
                if !head.is_empty() {
                    out.push_str(&head);
                    out.push('\n');
                }
                match kept.len() {
                    0 => out.push_str(&format!(
                        "... ({omitted} lines omitted) {marker}{HINT_FULL_OUTPUT}"
                    )),
                    n => out.push_str(&format!(
                        "... ({omitted} lines omitted, {n} of them kept below) {marker}{HINT_FULL_OUTPUT}"
                    )),
                }
                for (number, line) in &kept {
                    out.push_str(&format!("\n[line {number}] {line}"));
                }
                if !tail.is_empty() {
                    out.push('\n');
                    out.push_str(&tail);
                }
                match &around {
                    // The cut text goes back into its string: the marker sits inside it.
                    Some((before, after)) => format!("{before}{}{after}", json::to_literal(&out)),
                    None => out,
                }
            });
            keys.extend(key);
        }
        Ok(keys)
    }
}

/// Longest kept line, in bytes (cut on a character boundary): a kept line is a pointer into
/// the output, not a copy of a minified blob.
const KEPT_LINE_BYTES: usize = 240;

/// Words that name nothing in particular (commands and flags every call has).
const COMMON_TERMS: &[&str] = &[
    "bash", "command", "grep", "find", "python", "python3", "pytest", "true", "false", "null",
    "echo", "head", "tail", "sed", "awk", "xargs", "sort", "path", "file", "name", "args", "input",
    "type", "text", "view", "with", "from", "this", "that", "cd", "home", "root", "testbed", "usr",
];

/// The terms of a call's arguments worth finding in its output: words of four or more
/// characters (identifiers, path parts, test names), common ones left out, at most 16.
fn call_terms(arguments: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in arguments.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if word.len() >= 4
            && !word.bytes().all(|b| b.is_ascii_digit())
            && !COMMON_TERMS.contains(&word.to_ascii_lowercase().as_str())
            && !terms.iter().any(|t| t == word)
        {
            terms.push(word.to_owned());
        }
        if terms.len() == 16 {
            break;
        }
    }
    terms
}

/// Whether a tool output reports that its call failed: the dialect's error flag (Anthropic's
/// `is_error`, which Claude Code sets on a failing command), or a first line that is a non-zero
/// exit status as agents write it (`<returncode>1</returncode>`, `Exit code 2`,
/// `exit status: 1`). Only the first line: a log that mentions an exit code in passing is not
/// a failed call.
fn reports_failure(message: &Message) -> bool {
    if message.is_error {
        return true;
    }
    if let Some(code) = json_returncode(&message.content) {
        return code != "0";
    }
    let first = message.content.lines().next().unwrap_or("").trim();
    let status = if let Some(rest) = first.strip_prefix("<returncode>") {
        rest.strip_suffix("</returncode>")
    } else {
        let lower = first.to_ascii_lowercase();
        ["exit code", "exit status", "exited with code"]
            .iter()
            .find_map(|label| lower.strip_prefix(label))
            // An ASCII label keeps its byte length when lowered, so `first` splits at the
            // same place.
            .map(|rest| first[lower.len() - rest.len()..].trim_start_matches([':', ' ']))
    };
    status.is_some_and(|code| {
        !code.is_empty()
            && code.bytes().all(|b| b.is_ascii_digit())
            && code.bytes().any(|b| b != b'0')
    })
}

/// The top-level `returncode` of an output that is a JSON object (mini-swe-agent's), as written.
fn json_returncode(content: &str) -> Option<&str> {
    if !content.trim_start().starts_with('{') {
        return None;
    }
    let root = json::parse_document(content).ok()?;
    let code = json::get(content, root, "returncode")?;
    (json::kind_of(content, code) == json::Kind::Number).then(|| code.of(content))
}

/// Whether a line reads as a failure.
fn reads_as_failure(line: &str) -> bool {
    const MARKS: [&str; 8] = [
        "error",
        "failed",
        "failure",
        "traceback",
        "exception",
        "panicked",
        "assert",
        "fatal",
    ];
    let lower = line.to_ascii_lowercase();
    MARKS.iter().any(|mark| lower.contains(mark))
}

/// Up to `limit` lines of the `omitted` lines after the first `head`, with their 1-based
/// numbers, that read as a failure or name one of `terms`.
fn salient_lines(
    text: &str,
    head: usize,
    omitted: usize,
    terms: &[String],
    limit: usize,
) -> Vec<(usize, String)> {
    if limit == 0 {
        return Vec::new();
    }
    text.split('\n')
        .enumerate()
        .skip(head)
        .take(omitted)
        .filter(|(_, line)| {
            !line.trim().is_empty()
                && (reads_as_failure(line) || terms.iter().any(|t| line.contains(t.as_str())))
        })
        .take(limit)
        .map(|(i, line)| {
            let mut end = line.len().min(KEPT_LINE_BYTES);
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            let cut = if end < line.len() { " …" } else { "" };
            (i + 1, format!("{}{cut}", &line[..end]))
        })
        .collect()
}

/// The first `head` and last `tail` lines of `text` (`'\n'`-separated, as `str::split` cuts
/// them, each without its newline) and the count of lines between, or `None` when fewer than
/// `head + tail + 2` lines leave nothing worth omitting. Finds only the newlines it needs from
/// each end plus one count: the outputs this runs on are the largest in the transcript, and
/// every turn re-sends them.
fn head_and_tail(text: &str, head: usize, tail: usize) -> Option<(&str, usize, &str)> {
    let bytes = text.as_bytes();
    let lines = memchr::memchr_iter(b'\n', bytes).count() + 1;
    if lines <= head + tail + 1 {
        return None;
    }
    // The head ends at the `head`-th newline from the start; the tail begins after the
    // `tail`-th newline from the end.
    let head_text = match head {
        0 => "",
        n => {
            let newline = memchr::memchr_iter(b'\n', bytes).nth(n - 1)?;
            text.get(..newline)?
        }
    };
    let tail_text = match tail {
        0 => "",
        n => {
            let newline = memchr::memrchr_iter(b'\n', bytes).nth(n - 1)?;
            text.get(newline + 1..)?
        }
    };
    Some((head_text, lines - head - tail, tail_text))
}

#[cfg(test)]
mod tests {
    use crate::components::testing::{check, check_with, tool_messages};

    fn big_log(lines: usize) -> String {
        (0..lines)
            .map(|i| format!("2026-11-29T10:00:{i:05} INFO worker {i} processed batch {i} in 12ms"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn head_and_tail_cuts_where_splitting_every_line_would() {
        let by_split = |text: &str, head: usize, tail: usize| {
            let lines: Vec<&str> = text.split('\n').collect();
            (lines.len() > head + tail + 1).then(|| {
                (
                    lines[..head].join("\n"),
                    lines.len() - head - tail,
                    lines[lines.len() - tail..].join("\n"),
                )
            })
        };
        let texts = [
            String::new(),
            "\n".repeat(9),
            "a\n\nb\nc\n".repeat(4),
            "\nx\ny\n\n".repeat(3),
            (0..50)
                .map(|i| format!("línea {i} ✓"))
                .collect::<Vec<_>>()
                .join("\n"),
        ];
        for text in &texts {
            for (head, tail) in [(0, 0), (0, 3), (3, 0), (2, 2), (4, 5), (20, 20)] {
                let fast = super::head_and_tail(text, head, tail)
                    .map(|(h, n, t)| (h.to_owned(), n, t.to_owned()));
                assert_eq!(fast, by_split(text, head, tail), "{text:?} {head} {tail}");
            }
        }
    }

    #[test]
    fn keeps_head_and_tail_and_stashes_the_rest() {
        let log = big_log(600);
        let out = check("collapse", "", tool_messages(&[&log]));
        let after = &out.messages[1].content;
        let lines: Vec<_> = after.lines().collect();
        assert_eq!(lines.len(), 41);
        assert_eq!(lines[..20], log.lines().take(20).collect::<Vec<_>>()[..]);
        assert!(lines[20].starts_with("... (560 lines omitted) <<cg:"));
        assert!(lines[20].ends_with("[full output: call context_guru_expand]"));
        assert_eq!(lines[21..], log.lines().skip(580).collect::<Vec<_>>()[..]);
        out.assert_stashes_resolve();
    }

    #[test]
    fn failures_and_the_calls_terms_stay_in_view() {
        let mut lines: Vec<String> = (0..600).map(|i| format!("ok line {i}")).collect();
        lines[300] = "tests/test_config.py::test_parse_config FAILED".into();
        lines[400] = "src/loader.py:88: parse_config(path)".into();
        lines[450] = "plain line".into();
        let log = lines.join("\n");
        let mut messages = tool_messages(&[&log]);
        messages[1].tool_arguments = Some(r#"{"command":"pytest -k parse_config"}"#.into());
        let out = check("collapse", "keep_lines: 12", messages);
        let after = &out.messages[1].content;
        assert!(
            after.contains("(560 lines omitted, 2 of them kept below) <<cg:"),
            "{after}"
        );
        assert!(after.contains("\n[line 301] tests/test_config.py::test_parse_config FAILED\n"));
        assert!(after.contains("\n[line 401] src/loader.py:88: parse_config(path)\n"));
        assert!(!after.contains("plain line"));
        out.assert_stashes_resolve();
        let none = check("collapse", "", tool_messages(&[&log]));
        assert!(!none.messages[1].content.contains("[line "));
    }

    #[test]
    fn a_failing_calls_output_stays_whole_up_to_keep_failures() {
        // mini-swe-agent's status line, Claude Code's error flag and a plain `Exit code`.
        let returncode = format!("<returncode>1</returncode>\n{}", big_log(200));
        let exit_code = format!("Exit code 2\n{}", big_log(200));
        let exit_status = format!("exit status: 1\n{}", big_log(200));
        let exited = format!("EXITED WITH CODE 127\n{}", big_log(200));
        let mut flagged = tool_messages(&[&big_log(200)]);
        flagged[1].is_error = true;
        for messages in [
            tool_messages(&[&returncode]),
            tool_messages(&[&exit_code]),
            tool_messages(&[&exit_status]),
            tool_messages(&[&exited]),
            flagged,
        ] {
            let before = messages[1].content.clone();
            let out = check("collapse", "", messages);
            assert!(out.messages[1].content == before, "left whole");
            assert_eq!(
                out.report.components[0].gates.get("failure_in_view"),
                Some(&1)
            );
        }
        // A passing call, a log that only mentions an exit code, and the switch off: collapsed.
        let passing = format!("<returncode>0</returncode>\n{}", big_log(200));
        let mention = format!("{}\nexit code 1", big_log(200));
        let zero = format!("Exit code 0\n{}", big_log(200));
        let not_a_number = format!("exit code: née 1\n{}", big_log(200));
        for (config, text) in [
            ("", &passing),
            ("", &mention),
            ("", &zero),
            ("", &not_a_number),
            ("keep_failures: 0", &returncode),
        ] {
            let out = check("collapse", config, tool_messages(&[text]));
            assert!(
                out.messages[1].content.contains("lines omitted) <<cg:"),
                "{config} {text:.40}"
            );
        }
        // Past the limit a failing output is collapsed too.
        let out = check(
            "collapse",
            "keep_failures: 2100",
            tool_messages(&[&returncode]),
        );
        assert!(out.messages[1].content.contains("lines omitted) <<cg:"));
    }

    #[test]
    fn inert_below_threshold_or_with_too_few_lines() {
        let one_long_line = "x".repeat(40_000);
        let out = check(
            "collapse",
            "",
            tool_messages(&[&big_log(30), &one_long_line]),
        );
        let gates = &out.report.components[0].gates;
        assert_eq!(gates.get("below_max_tokens"), Some(&1));
        assert_eq!(gates.get("too_few_lines"), Some(&1));
    }

    /// mini-swe-agent's observation: one line of JSON whose `output` string holds the log.
    fn mini_swe_output(returncode: i32, lines: usize) -> String {
        let output: String = (1..=lines).map(|i| format!("{i}\n")).collect();
        serde_json::json!({"returncode": returncode, "output": output}).to_string()
    }

    #[test]
    fn the_text_inside_a_json_output_is_collapsed_and_the_json_stays_valid() {
        let content = mini_swe_output(0, 3000);
        let out = check("collapse", "", tool_messages(&[&content]));
        let cut = &out.messages[1].content;
        let value: serde_json::Value = serde_json::from_str(cut).expect("still JSON");
        assert_eq!(value["returncode"], 0);
        let text = value["output"].as_str().unwrap();
        assert!(text.starts_with("1\n2\n"), "{text:.40}");
        assert!(
            text.contains("lines omitted) <<cg:"),
            "the marker sits inside the string"
        );
        assert!(text.trim_end().ends_with("3000"));
        assert!(cut.len() * 10 < content.len());
        let stashed = out.report.components[0].stashed.len();
        assert_eq!(stashed, 1);
    }

    #[test]
    fn a_json_output_that_reports_a_failure_stays_whole_up_to_keep_failures() {
        let failing = mini_swe_output(1, 1500);
        let out = check("collapse", "", tool_messages(&[&failing]));
        assert_eq!(out.messages[1].content, failing);
        assert_eq!(
            out.report.components[0].gates.get("failure_in_view"),
            Some(&1)
        );
    }

    #[test]
    fn acts_at_any_depth_because_every_turn_re_derives_the_same_bytes() {
        let log = big_log(600);
        let first = check("collapse", "", tool_messages(&[&log]));
        let warm = check_with("collapse", "", tool_messages(&[&log, &log]), |cx| {
            cx.mutable_from = 3;
        });
        assert_eq!(
            warm.messages[1], first.messages[1],
            "same bytes, deep or not"
        );
        assert!(warm.report.components[0].reverted.is_none());
    }
}
