//! `linecap`: collapses repeated lines and clips overlong ones (Offload; last among offloaders).
//!
//! Before:
//! ```text
//! WARNING: deprecated call in module a.py
//! ...
//! WARNING: deprecated call in module a.py
//! <a 3,000-character minified line>
//! ```
//! After:
//! ```text
//! WARNING: deprecated call in module a.py  (x2)
//! ...
//! <first 333 chars>...[cut]...<last 166 chars>
//! <<cg:91ab…>> [full output: call context_guru_expand]
//! ```
//!
//! Two steps, duplicates first. (1) A line repeated further down (not adjacent: adjacent runs are
//! left alone) is kept once and annotated with its count; the first and last three lines and
//! lines shorter than eight characters are never touched, and diff-shaped outputs are skipped,
//! because there a repeated line is content. (2) A line over `max_line_chars` keeps its head
//! and tail, unless it is a line an agent needs whole: a `path:line` reference, a stack frame,
//! an error, a test verdict, an exit status, a diff line or a URL. The decision is a pure
//! function of the content, so it needs no freeze. If the store refuses the stash the output is
//! left alone.

use crate::gate;
use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;
use serde::Deserialize;

use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate, offload_with,
};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_OUTPUT;
use crate::memo::PureMemo;
use crate::pipeline::{ApplyCx, Component, Offload, Stashed, Transcript};
use crate::tokens;

/// `components.linecap`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinecapConfig {
    /// Defaults to `400`. Outputs shorter than this many bytes are left alone.
    pub min_size: usize,
    /// Defaults to `500`; `0` disables the cap. Longer lines keep 2/3 head and 1/3 tail.
    pub max_line_chars: usize,
    /// Defaults to `true`. Collapse non-adjacent repeats of a line into its first occurrence.
    pub collapse_duplicate_lines: bool,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
}

impl Default for LinecapConfig {
    fn default() -> LinecapConfig {
        LinecapConfig {
            min_size: 400,
            max_line_chars: 500,
            collapse_duplicate_lines: true,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "linecap",
    summary: "collapses repeated lines and clips overlong ones (recoverable)",
    gates: &[gate::BELOW_MIN_SIZE, gate::NO_LONG_OR_REPEATED_LINES],
    defaults: defaults::<LinecapConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: LinecapConfig = decode(source)?;
    if config.max_line_chars != 0 && config.max_line_chars < 30 {
        return Err(BuildError::invalid(
            "max_line_chars",
            format!(
                "must be 0 (off) or at least 30, got {}",
                config.max_line_chars
            ),
        ));
    }
    Ok(Component::Offload(Box::new(Linecap {
        config,
        memo: PureMemo::default(),
    })))
}

struct Linecap {
    config: LinecapConfig,
    /// `linecap` is a pure function of the text, run on every output of every turn.
    memo: PureMemo,
}

/// `text.split('\n')`, with the newlines found by a vectorized search (the standard library's
/// char search was a visible cost on megabyte bodies). `collapse` splits the middle it cuts
/// with it too.
pub(super) fn split_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    for newline in memchr::memchr_iter(b'\n', text.as_bytes()) {
        lines.push(text.get(start..newline).unwrap_or_default());
        start = newline + 1;
    }
    lines.push(text.get(start..).unwrap_or_default());
    lines
}

/// Lines never clipped: what an agent acts on.
fn never_truncate() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r#"(?i)^\S+:\d+|^\s*File "|^\s*at |error|exception|traceback|assertionerror|panic:|fatal|(?-u:\b)(passed|failed|ok|fail)(?-u:\b)|exit (code|status)|^[+-]|^@@ |https?://"#,
        )
        .expect("allow-list regex is valid")
    })
}

fn is_diff_shaped(lines: &[&str]) -> bool {
    lines.iter().any(|l| {
        l.starts_with("diff --git")
            || l.starts_with("@@ ")
            || l.starts_with("Index: ")
            || l.starts_with("--- ")
            || l.starts_with("+++ ")
    })
}

/// Lines at each end that are never collapsed: where an output says what it is and how it ended.
const PROTECTED_EDGE_LINES: usize = 3;
/// Shorter lines (trimmed) repeat by nature (`}`, `----`) and are never collapsed.
const MIN_DUPLICATE_CHARS: usize = 8;

fn collapse_duplicates(lines: &[&str]) -> Option<Vec<String>> {
    let n = lines.len();
    if n <= 2 * PROTECTED_EDGE_LINES {
        return None;
    }
    let middle = PROTECTED_EDGE_LINES..n - PROTECTED_EDGE_LINES;
    // Keyed by the fast content hash (SipHash over every line was a visible cost on the request
    // path); a hit is confirmed by comparing the lines, so a collision only misses a repeat.
    let mut first_at: HashMap<u64, usize, tokens::IdentityBuild> =
        HashMap::with_capacity_and_hasher(n, tokens::IdentityBuild::default());
    let mut count = vec![1usize; n];
    let mut dropped = vec![false; n];
    let mut any = false;
    for i in middle {
        let line = lines[i];
        let trimmed = line.trim();
        // Bytes bound characters from above (and from below, at four per character): count
        // characters only when the byte length cannot decide.
        let too_short = trimmed.len() < MIN_DUPLICATE_CHARS
            || (trimmed.len() < 4 * MIN_DUPLICATE_CHARS
                && trimmed.chars().count() < MIN_DUPLICATE_CHARS);
        if too_short || (i > 0 && lines[i - 1] == line) {
            continue;
        }
        let key = tokens::content_hash(line);
        match first_at.get(&key) {
            Some(&first) if lines[first] == line => {
                dropped[i] = true;
                count[first] += 1;
                any = true;
            }
            Some(_) => {}
            None => {
                first_at.insert(key, i);
            }
        }
    }
    if !any {
        return None;
    }
    let out = (0..n)
        .filter(|&i| !dropped[i])
        .map(|i| match count[i] {
            1 => lines[i].to_owned(),
            repeats => format!("{}  (x{repeats})", lines[i]),
        })
        .collect();
    Some(out)
}

/// Middle-clips `line` to `budget` characters: 2/3 head, `...[cut]...`, 1/3 tail.
fn clip(line: &str, budget: usize) -> String {
    const CUT: &str = "...[cut]...";
    let chars: Vec<char> = line.chars().collect();
    let keep = budget.saturating_sub(CUT.len());
    let head = keep * 2 / 3;
    let tail = keep - head;
    let mut out: String = chars[..head].iter().collect();
    out.push_str(CUT);
    out.extend(&chars[chars.len() - tail..]);
    out
}

impl Linecap {
    /// The reduced text, or `None` when there is nothing to reduce.
    fn reduce(&self, text: &str) -> Option<String> {
        let lines = split_lines(text);
        let cap = self.config.max_line_chars;
        let clippable = |line: &str| {
            line.len() > cap && line.chars().count() > cap && !never_truncate().is_match(line)
        };
        let collapsed = (self.config.collapse_duplicate_lines && !is_diff_shaped(&lines))
            .then(|| collapse_duplicates(&lines))
            .flatten();
        // Most outputs have neither: answer that without allocating a string per line.
        if collapsed.is_none() && (cap == 0 || !lines.iter().any(|l| clippable(l))) {
            return None;
        }
        let mut current =
            collapsed.unwrap_or_else(|| lines.iter().map(|l| (*l).to_owned()).collect());
        if cap > 0 {
            for line in &mut current {
                if clippable(line) {
                    *line = clip(line, cap);
                }
            }
        }
        Some(current.join("\n"))
    }
}

impl Offload for Linecap {
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
            if message.content.len() < self.config.min_size {
                cx.gate(gate::BELOW_MIN_SIZE);
                continue;
            }
            let hash = cx.content_hash(index, &message.content);
            let Some(reduced) = self
                .memo
                .reduce(&message.content, hash, |text| self.reduce(text))
            else {
                cx.gate(gate::NO_LONG_OR_REPEATED_LINES);
                continue;
            };
            keys.extend(offload_with(messages, index, cx, |_, marker| {
                format!("{reduced}\n{marker}{HINT_FULL_OUTPUT}")
            }));
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use crate::components::testing::{check, tool_messages};

    /// A pytest run whose deprecation warning repeats twelve times between other lines.
    fn warning_twelve_times() -> String {
        let mut lines = vec!["$ pytest -q", "collected 40 items", "============"];
        for i in 0..12 {
            lines.push("DeprecationWarning: pkg_resources is deprecated as an API");
            lines.push(if i % 2 == 0 {
                "  warnings.warn(msg)"
            } else {
                "tests/test_io.py::test_read_chunk"
            });
        }
        lines.extend(["", "40 passed, 12 warnings in 3.21s", "$ "]);
        lines.join("\n")
    }

    #[test]
    fn collapses_non_adjacent_repeats_and_keeps_the_first_with_a_count() {
        let text = warning_twelve_times();
        let out = check("linecap", "", tool_messages(&[&text]));
        let after = &out.messages[1].content;
        assert_eq!(after.matches("DeprecationWarning").count(), 1);
        assert!(after.contains("DeprecationWarning: pkg_resources is deprecated as an API  (x12)"));
        assert!(
            after.contains("40 passed, 12 warnings in 3.21s"),
            "the ending survives"
        );
        assert!(after.ends_with("[full output: call context_guru_expand]"));
        out.assert_stashes_resolve();
    }

    #[test]
    fn a_remembered_reduction_is_the_same_bytes_and_still_stashed_in_each_session() {
        use crate::components::testing::run_cx;
        use crate::config::Config;
        use crate::marker;
        use crate::store::Store;

        let noisy = warning_twelve_times();
        let clean = (0..80)
            .map(|i| format!("row {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let pipeline = Config::parse("pipeline: [linecap]")
            .unwrap()
            .build_pipeline()
            .unwrap();
        let turn = |session: &str| {
            let (cx, store) = run_cx(session);
            let mut messages = tool_messages(&[&noisy, &clean]);
            pipeline.run(&mut messages, &cx);
            (messages, store)
        };
        let (first, _) = turn("one");
        let (second, store) = turn("two");
        assert_eq!(first, second, "the memo replays the same reduction");
        assert!(second[1].content.contains("deprecated as an API  (x12)"));
        assert_eq!(
            second[2].content, clean,
            "nothing to reduce, remembered or not"
        );
        let id = marker::marker_ids(&second[1].content).next().unwrap();
        assert_eq!(store.resolve("two", id).as_deref(), Some(noisy.as_str()));
    }

    #[test]
    fn clips_long_lines_but_never_the_ones_an_agent_needs() {
        let minified = format!("var a={};", "x".repeat(3000));
        let trace = format!("File \"/app/{}.py\", line 3", "m".repeat(900));
        let error = format!("ValueError: {}", "bad input ".repeat(100));
        let text =
            format!("header line\n{minified}\n{trace}\n{error}\nfooter line one\nfooter two\nend");
        let out = check("linecap", "", tool_messages(&[&text]));
        let after = &out.messages[1].content;
        let clipped = after.lines().nth(1).unwrap();
        assert_eq!(clipped.chars().count(), 500);
        assert!(
            clipped.starts_with("var a=xxx")
                && clipped.contains("...[cut]...")
                && clipped.ends_with("xx;")
        );
        assert!(after.contains(&trace) && after.contains(&error));
        out.assert_stashes_resolve();
    }

    #[test]
    fn leaves_diffs_short_outputs_and_clean_outputs_alone() {
        let diff = format!(
            "diff --git a/x b/x\n--- a/x\n+++ b/x\n{}",
            "@@ -1 +1 @@\n-old line here\n+new line here\n".repeat(20)
        );
        let clean: String = (0..40)
            .map(|i| format!("src/module_{i}.rs: 120 lines\n"))
            .collect();
        let out = check("linecap", "", tool_messages(&[&diff, &clean, "short"]));
        let gates = &out.report.components[0].gates;
        assert_eq!(gates.get("no_long_or_repeated_lines"), Some(&2));
        assert_eq!(gates.get("below_min_size"), Some(&1));
        assert!(!out.report.components[0].mutated);
    }
}
