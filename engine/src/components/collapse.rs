//! `collapse`: keeps the head and tail lines of an oversized tool output (Offload, fallback).
//!
//! Before: a 3,000-line job log with one failure in its middle, after the question "tell me why
//! it failed".
//! After:
//! ```text
//! <first 20 lines>
//! ... (2960 lines omitted, 3 of them kept below) <<cg:44ab…>> [full output: call context_guru_expand]
//! [line 2499] 10:41:39Z INFO  batch 2499 committed: 500 rows into orders
//! [line 2500] 10:41:40Z ERROR batch 2500 failed: duplicate key value violates "orders_pkey"
//! [line 2501] DETAIL:  Key (id)=(90210) already exists.
//! <last 20 lines>
//! ```
//!
//! Content-agnostic and late in a pipeline: it catches what nothing more specific handled, and
//! skips anything already carrying a marker. If the store refuses the stash the output is left
//! alone. The whole original stays one expand away, kept lines or not.
//!
//! The lines the next turn most likely needs stay in view below the marker, in order and
//! numbered: a line of the cut middle that reports a failure (`components/failure.rs`,
//! the one table of them: `ERROR`, `Traceback (most recent call last)`, `panicked at`, a
//! non-zero exit status, ...; not in a read of a source file, where `raise ValueError` is code)
//! or that names a distinctive term of the user's latest question before the output (a word few
//! lines of the middle name: `orders_pkey`, `2500`), each with `failure_context` lines around
//! it, within `failure_lines` lines and `failure_tokens` tokens. A failure alike but for its
//! numbers to one already kept, or to one in the head or tail, is not kept again: a log of 3,000
//! `ERROR request N timed out` lines keeps the first, with a count of the rest.
//!
//! `keep_lines` (off by default) keeps, besides, up to that many lines that read as a failure
//! or name a term of the call that produced the output (a searched pattern, a path, a test
//! name: words of four or more characters in its arguments).
//!
//! A failing call's output stays whole up to `keep_failures` tokens (8,000): the model is about
//! to debug it, and the identifiers it needs are usually in the middle collapse would cut.
//!
//! Cache safety: whether and how it collapses a message depends on that message and the user
//! message before it alone (the question a later turn asks never reaches an earlier output), so
//! every turn re-derives the same bytes at any depth ([`Freeze::Stateless`]). The reference
//! tail-gates and freezes it because its threshold could follow the model's context window
//! (`max_frac`); sluice does not know windows, so that cannot happen here, and a tail gate
//! would only cost the first turn a proxy sees of a long session its whole saving.
//! `cold_cache` is accepted for config compatibility and has nothing to lift.

use crate::gate;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, failure, offload_candidate,
    offload_with,
};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_OUTPUT;
use crate::message::{Message, Role};
#[cfg(doc)]
use crate::pipeline::Freeze;
use crate::pipeline::{ApplyCx, Component, Offload, Stashed, Transcript};
use crate::tokens;
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
    /// failure or name a term of the call that produced the output, besides those
    /// `failure_lines` keeps. Off by default: on the public corpus every setting tried raised
    /// visible recall a little and cost more net than the expand rounds it saved
    /// (`docs/performance.md`).
    pub keep_lines: usize,
    /// Defaults to `12`; `0` turns it off. Most lines of the omitted middle kept in view because
    /// they report a failure or name a distinctive term of the user's latest question before
    /// the output, context lines included.
    pub failure_lines: usize,
    /// Defaults to `0`: a line of context on each side cost 0.11 points (agent runs) and 0.15
    /// (Claude Code) of billed input, saving 2 rounds on the agent runs and adding 2 on Claude
    /// Code (docs/performance.md). Lines kept before and after each such line.
    pub failure_context: usize,
    /// Defaults to `400`. Most tokens those lines take in all.
    pub failure_tokens: usize,
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
            failure_lines: 12,
            failure_context: 0,
            failure_tokens: 400,
            marker_mode: MarkerMode::Full,
            keep_failures: 8000,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "collapse",
    summary: "keeps head, tail and failure lines of an oversized output (recoverable fallback)",
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

    /// The lines of the cut middle kept in view, numbered from 1 in the cut text: what the
    /// failure budget keeps, then `keep_lines`' own picks.
    fn kept_lines(
        &self,
        message: &Message,
        cut: &Cut<'_>,
        question: &[String],
    ) -> Vec<(usize, String)> {
        let mut kept: BTreeMap<usize, String> = BTreeMap::new();
        if self.config.failure_lines > 0 {
            // A read of a source file shows code: its `raise ValueError(...)` is no report.
            let failures = !reads_source(message);
            kept.extend(self.in_view(cut, question, failures));
        }
        if self.config.keep_lines > 0 {
            let terms = call_terms(message.tool_arguments.as_deref().unwrap_or(""));
            let picked = salient_lines(
                cut.text,
                cut.head_lines,
                cut.omitted,
                &terms,
                self.config.keep_lines,
            );
            for (number, line) in picked {
                kept.entry(number).or_insert(line);
            }
        }
        kept.into_iter().collect()
    }

    /// What the failure budget keeps of the middle: the lines that name a distinctive term of
    /// the question, then (with `failures`) the lines that report a failure, in order, each
    /// with `failure_context` lines around it while `failure_lines` and `failure_tokens` last
    /// (a line whose context does not fit goes alone). Numbered from 1 in the cut text.
    fn in_view(&self, cut: &Cut<'_>, question: &[String], failures: bool) -> Vec<(usize, String)> {
        let failing = if failures {
            failure::failure_lines(cut.middle)
        } else {
            Vec::new()
        };
        if failing.is_empty() && question.is_empty() {
            return Vec::new();
        }
        let lines = super::linecap::split_lines(cut.middle);
        let groups = anchors(cut, &lines, question, &failing);
        let context = self.config.failure_context;
        let (mut lines_left, mut tokens_left) =
            (self.config.failure_lines, self.config.failure_tokens);
        let mut kept: BTreeMap<usize, String> = BTreeMap::new();
        let number = |at: usize| cut.head_lines + at + 1;
        let cost = |chosen: &[(usize, String)]| -> usize {
            chosen
                .iter()
                .map(|(at, text)| tokens::count(&format!("\n[line {}] {text}", number(*at))))
                .sum()
        };
        for group in &groups {
            if lines_left == 0 {
                break;
            }
            let last = group
                .at
                .saturating_add(context)
                .min(lines.len().saturating_sub(1));
            let mut chosen: Vec<(usize, String)> = (group.at.saturating_sub(context)..=last)
                .filter(|at| !kept.contains_key(at))
                .filter(|&at| at == group.at || !lines[at].trim().is_empty())
                .map(|at| {
                    let similar = if at == group.at { group.similar } else { 0 };
                    (at, kept_text(lines[at], similar))
                })
                .collect();
            let mut spent = cost(&chosen[..]);
            if chosen.len() > lines_left || spent > tokens_left {
                // The line alone, without its context, when that fits; the budget is spent
                // when it does not.
                chosen.retain(|(at, _)| *at == group.at);
                spent = cost(&chosen[..]);
                if chosen.len() > lines_left || spent > tokens_left {
                    break;
                }
            }
            lines_left -= chosen.len();
            tokens_left -= spent;
            kept.extend(chosen);
        }
        kept.into_iter()
            .map(|(at, text)| (number(at), text))
            .collect()
    }
}

impl Offload for Collapse {
    /// Decides each output alone: carried-over ones are skipped by the candidate helper.
    fn carries_over(&self) -> bool {
        true
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let mut keys = Vec::new();
        // The terms of the latest user message with words of the person's own, as the loop
        // reaches each output: it precedes the output, so the cut is still a function of the
        // output and what precedes it. Read only when lines are kept for it.
        let mut question: Vec<String> = Vec::new();
        for index in 0..messages.len() {
            let message = &messages[index];
            if self.config.failure_lines > 0
                && message.role == Role::User
                && let Some(terms) = question_terms(&message.content)
            {
                question = terms;
            }
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
            let cut = Cut::new(
                text,
                (head, self.config.head_lines),
                omitted,
                (tail, self.config.tail_lines),
            );
            let kept = self.kept_lines(message, &cut, &question);
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
                let out = render(&head, omitted, &kept, &tail, marker);
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

/// The collapsed text: the head, the marker's line, the kept lines, the tail.
fn render(
    head: &str,
    omitted: usize,
    kept: &[(usize, String)],
    tail: &str,
    marker: &str,
) -> String {
    let mut out = String::with_capacity(head.len() + tail.len() + 96);
    if !head.is_empty() {
        out.push_str(head);
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
    for (number, line) in kept {
        out.push_str(&format!("\n[line {number}] {line}"));
    }
    if !tail.is_empty() {
        out.push('\n');
        out.push_str(tail);
    }
    out
}

/// An output's text as collapse cuts it: the lines it keeps at each end, and the middle it cuts.
struct Cut<'t> {
    text: &'t str,
    head: &'t str,
    /// The omitted lines, `\n`-separated.
    middle: &'t str,
    tail: &'t str,
    /// Lines in `head`: the middle's first line is line `head_lines + 1` of the text.
    head_lines: usize,
    omitted: usize,
}

impl<'t> Cut<'t> {
    /// `text` cut as [`head_and_tail`] cut it: `head` (its first `head_lines` lines), `omitted`
    /// lines, then `tail` (its last `tail_lines`), each a slice of `text`.
    fn new(
        text: &'t str,
        (head, head_lines): (&'t str, usize),
        omitted: usize,
        (tail, tail_lines): (&'t str, usize),
    ) -> Cut<'t> {
        // Each end is cut at a newline, which the middle does not hold.
        let start = if head_lines == 0 { 0 } else { head.len() + 1 };
        let end = if tail_lines == 0 {
            text.len()
        } else {
            text.len() - tail.len() - 1
        };
        Cut {
            text,
            head,
            middle: text.get(start..end).unwrap_or_default(),
            tail,
            head_lines,
            omitted,
        }
    }
}

/// A line chosen to anchor a group of kept lines, and how many more lines of the middle are
/// alike to it (a failure alike but for its numbers).
struct Anchor {
    at: usize,
    similar: usize,
}

/// The lines of the middle worth keeping, most wanted first: those naming a distinctive term
/// of the question, then each failure whose shape (the line with its numbers made `#`) neither
/// the head, the tail nor an earlier failure shows, with a count of the alike ones after it.
fn anchors(cut: &Cut<'_>, lines: &[&str], question: &[String], failing: &[usize]) -> Vec<Anchor> {
    let mut anchors: Vec<Anchor> = distinctive_lines(lines, question)
        .into_iter()
        .map(|at| Anchor { at, similar: 0 })
        .collect();
    // Each shape seen, with the anchor it belongs to (`None`: in view already).
    let mut shapes: HashMap<String, Option<usize>> = HashMap::new();
    for end in [cut.head, cut.tail] {
        let visible: Vec<&str> = end.split('\n').collect();
        for at in failure::failure_lines(end) {
            shapes.insert(shape(visible[at]), None);
        }
    }
    let asked = anchors.len();
    for &at in failing {
        let alike = shape(lines[at]);
        // A failure the question already chose anchors its shape there.
        if let Some(chosen) = anchors[..asked].iter().position(|a| a.at == at) {
            shapes.entry(alike).or_insert(Some(chosen));
            continue;
        }
        match shapes.get(&alike) {
            Some(Some(first)) => anchors[*first].similar += 1,
            Some(None) => {}
            None => {
                shapes.insert(alike, Some(anchors.len()));
                anchors.push(Anchor { at, similar: 0 });
            }
        }
    }
    anchors
}

/// Lines of the middle at most this many of which name a term of the question: a term on more
/// lines says nothing about which of them matters.
const DISTINCTIVE_LINES: usize = 3;

/// The lines of the middle, ascending, that name (as a whole word, ASCII case aside) a term of
/// the question that at most [`DISTINCTIVE_LINES`] lines name.
fn distinctive_lines(lines: &[&str], question: &[String]) -> Vec<usize> {
    if question.is_empty() {
        return Vec::new();
    }
    let mut hits: Vec<Vec<usize>> = vec![Vec::new(); question.len()];
    for (at, line) in lines.iter().enumerate() {
        for word in line.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if word.len() < 3 {
                continue;
            }
            for (term, found) in question.iter().zip(hits.iter_mut()) {
                if found.len() <= DISTINCTIVE_LINES
                    && found.last() != Some(&at)
                    && word.eq_ignore_ascii_case(term)
                {
                    found.push(at);
                }
            }
        }
    }
    let mut distinctive: Vec<usize> = hits
        .into_iter()
        .filter(|found| found.len() <= DISTINCTIVE_LINES)
        .flatten()
        .collect();
    distinctive.sort_unstable();
    distinctive.dedup();
    distinctive
}

/// `line` with every word that holds a digit (a count, an id, a timestamp, a hash) made `#`,
/// read as far as a kept line is shown: lines alike but for their numbers share it.
fn shape(line: &str) -> String {
    let mut rest = prefix(line);
    let mut out = String::with_capacity(rest.len());
    while let Some(c) = rest.chars().next() {
        let word = rest
            .find(|ch: char| !ch.is_alphanumeric())
            .unwrap_or(rest.len());
        if word == 0 {
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if rest[..word].bytes().any(|b| b.is_ascii_digit()) {
            out.push('#');
        } else {
            out.push_str(&rest[..word]);
        }
        rest = &rest[word..];
    }
    out
}

/// Bytes of a user message its terms are read from: the words of a question, not of a pasted
/// log (agents that send observations as user messages would make every word of one a term).
const QUESTION_BYTES: usize = 2000;
/// Terms read from one question, at most.
const QUESTION_TERMS: usize = 12;

/// Words that ask rather than name, and words too common to point at a line.
const ASKING: &[&str] = &[
    "about", "again", "also", "anything", "before", "could", "does", "doesn", "done", "explain",
    "going", "happen", "happened", "have", "help", "here", "into", "just", "know", "look", "make",
    "need", "please", "should", "show", "some", "still", "sure", "tell", "then", "there", "they",
    "what", "when", "where", "which", "while", "will", "work", "would", "wrong", "your",
];

/// The terms of a user message, or `None` when it has no words of the person's own (a turn of
/// only `<system-reminder>` blocks is the agent's, not a question): words of four or more
/// characters, or three with a digit, lower-cased, first seen first, common ones left out.
fn question_terms(content: &str) -> Option<Vec<String>> {
    let text = without_reminders(content);
    if text.trim().is_empty() {
        return None;
    }
    let mut end = text.len().min(QUESTION_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut terms: Vec<String> = Vec::new();
    for word in text[..end].split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        let digits = word.bytes().any(|b| b.is_ascii_digit());
        if word.chars().count() < 4 && !(digits && word.len() >= 3) {
            continue;
        }
        let lower = word.to_lowercase();
        if ASKING.contains(&lower.as_str())
            || COMMON_TERMS.contains(&lower.as_str())
            || terms.contains(&lower)
        {
            continue;
        }
        terms.push(lower);
        if terms.len() == QUESTION_TERMS {
            break;
        }
    }
    Some(terms)
}

/// `content` without the `<system-reminder>` blocks an agent adds to a user turn (Claude Code).
fn without_reminders(content: &str) -> Cow<'_, str> {
    const OPEN: &str = "<system-reminder>";
    const CLOSE: &str = "</system-reminder>";
    if !content.contains(OPEN) {
        return Cow::Borrowed(content);
    }
    let mut out = String::with_capacity(content.len());
    let mut rest = content;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        // An unclosed block runs to the end.
        rest = match rest[start..].find(CLOSE) {
            Some(end) => &rest[start + end + CLOSE.len()..],
            None => "",
        };
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Whether the output is a read of a source file (a path in one of the languages `skeleton`
/// knows): code, whose error names are not reports.
fn reads_source(message: &Message) -> bool {
    super::skeleton::read_path(message)
        .is_some_and(|path| crate::code::Lang::from_path(&path).is_some())
}

/// Longest kept line, in bytes (cut on a character boundary): a kept line is a pointer into
/// the output, not a copy of a minified blob.
const KEPT_LINE_BYTES: usize = 240;

/// The first [`KEPT_LINE_BYTES`] of `line`, cut on a character boundary.
fn prefix(line: &str) -> &str {
    let mut end = line.len().min(KEPT_LINE_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// A kept line as shown: its [`prefix`], ` …` when cut, and how many alike lines it stands for.
fn kept_text(line: &str, similar: usize) -> String {
    let shown = prefix(line);
    let cut = if shown.len() < line.len() { " …" } else { "" };
    match similar {
        0 => format!("{shown}{cut}"),
        n => format!("{shown}{cut}  (+{n} similar)"),
    }
}

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
        failure::EXIT_LABELS
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

/// Up to `limit` lines of the `omitted` lines after the first `head`, with their 1-based
/// numbers, that read as a failure or name one of `terms` (`keep_lines`).
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
                && (failure::reads_as_failure(line)
                    || terms.iter().any(|t| line.contains(t.as_str())))
        })
        .take(limit)
        .map(|(i, line)| (i + 1, kept_text(line, 0)))
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
    use crate::message::{Message, Role};

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
        // `keep_lines` alone: the failure and the call's term, no context.
        let out = check(
            "collapse",
            "keep_lines: 12\nfailure_lines: 0",
            messages.clone(),
        );
        let after = &out.messages[1].content;
        assert!(
            after.contains("(560 lines omitted, 2 of them kept below) <<cg:"),
            "{after}"
        );
        assert!(after.contains("\n[line 301] tests/test_config.py::test_parse_config FAILED\n"));
        assert!(after.contains("\n[line 401] src/loader.py:88: parse_config(path)\n"));
        assert!(!after.contains("plain line"));
        out.assert_stashes_resolve();
        let none = check("collapse", "failure_lines: 0", tool_messages(&[&log]));
        assert!(!none.messages[1].content.contains("[line "));
        // With a line of context, the failure with a line on each side, and not the call's term.
        let default = check("collapse", "failure_context: 1", messages);
        let after = &default.messages[1].content;
        assert!(
            after.contains("(560 lines omitted, 3 of them kept below) <<cg:"),
            "{after}"
        );
        assert!(after.contains(
            "\n[line 300] ok line 299\n[line 301] tests/test_config.py::test_parse_config FAILED\n[line 302] ok line 301\n"
        ));
        assert!(!after.contains("parse_config(path)"));
        default.assert_stashes_resolve();
    }

    /// A nightly import job's log: 3,000 lines, one batch failing in the middle with the
    /// database's detail after it, and lines that name errors without reporting one. The
    /// failing line is returned too.
    fn job_log() -> (String, String) {
        let error = r#"2026-03-02T10:41:40Z ERROR batch 2500 failed: duplicate key value violates unique constraint "orders_pkey""#;
        let lines: Vec<String> = (1..=3000)
            .map(|i| match i {
                2500 => error.to_owned(),
                2501 => "DETAIL:  Key (id)=(90210) already exists.".to_owned(),
                i if i % 100 == 50 => format!(
                    "2026-03-02T10:{:02}:{:02}Z INFO  retry policy from error_handler.py: 0 errors so far",
                    (i / 60) % 60,
                    i % 60
                ),
                i => format!(
                    "2026-03-02T10:{:02}:{:02}Z INFO  batch {i} committed: 500 rows into orders in {}ms",
                    (i / 60) % 60,
                    i % 60,
                    10 + i % 7
                ),
            })
            .collect();
        (lines.join("\n"), error.to_owned())
    }

    /// `question`, then the log as the output of a `cat`.
    fn asked(question: &str, log: &str) -> Vec<Message> {
        let mut output = Message::tool("call_0", "bash", log);
        output.tool_arguments = Some(r#"{"command":"cat /var/log/import/job-4411.log"}"#.into());
        vec![Message::text(Role::User, question), output]
    }

    #[test]
    fn a_failure_in_the_middle_of_a_long_log_stays_in_view() {
        let (log, error) = job_log();
        let out = check(
            "collapse",
            "failure_context: 1",
            asked("tell me why it failed", &log),
        );
        let after = &out.messages[1].content;
        assert!(
            after.contains("(2960 lines omitted, 3 of them kept below) <<cg:"),
            "{after}"
        );
        assert!(after.contains("\n[line 2499] 2026-03-02T10:41:39Z INFO  batch 2499 committed"));
        assert!(
            after.contains(&format!("\n[line 2500] {error}\n")),
            "{after}"
        );
        assert!(after.contains("\n[line 2501] DETAIL:  Key (id)=(90210) already exists.\n"));
        assert!(
            !after.contains("error_handler.py"),
            "`0 errors` and `error_handler` report nothing"
        );
        assert!(
            after.len() * 20 < log.len(),
            "still cut: {} bytes",
            after.len()
        );
        // The whole log is one expand away.
        out.assert_stashes_resolve();
        // Without the question's word, the failure alone keeps the same lines.
        let unasked = check(
            "collapse",
            "failure_context: 1",
            asked("run the nightly import", &log),
        );
        assert_eq!(unasked.messages[1].content, out.messages[1].content);
        // The default keeps the failing line alone, with no context around it.
        let default = check("collapse", "", asked("tell me why it failed", &log));
        let after = &default.messages[1].content;
        assert!(
            after.contains(&format!("\n[line 2500] {error}\n")),
            "{after}"
        );
        assert!(!after.contains("[line 2499]") && !after.contains("[line 2501]"));
        default.assert_stashes_resolve();
        // Switched off: head and tail only.
        let off = check(
            "collapse",
            "failure_lines: 0",
            asked("tell me why it failed", &log),
        );
        assert!(
            off.messages[1]
                .content
                .contains("(2960 lines omitted) <<cg:")
        );
        assert!(!off.messages[1].content.contains("orders_pkey"));
    }

    #[test]
    fn failures_alike_but_for_their_numbers_are_kept_once_with_a_count() {
        // 2,797 timeouts between a quiet start and a quiet end, and a traceback among them.
        let lines: Vec<String> = (0..3000)
            .map(|i| match i {
                0..100 | 2900.. => format!("INFO  poll {i}: queue empty"),
                1800 => "Traceback (most recent call last):".to_owned(),
                1801 => r#"  File "/app/worker.py", line 88, in run"#.to_owned(),
                1802 => "ConnectionResetError: [Errno 104] Connection reset by peer".to_owned(),
                i => format!(
                    "ERROR request {i} timed out after 30s (attempt {})",
                    i % 3 + 1
                ),
            })
            .collect();
        let log = lines.join("\n");
        let out = check("collapse", "failure_context: 1", tool_messages(&[&log]));
        let after = &out.messages[1].content;
        assert!(
            after.contains("(2960 lines omitted, 8 of them kept below) <<cg:"),
            "{after}"
        );
        assert_eq!(after.matches("\n[line ").count(), 8);
        assert!(after.contains("\n[line 100] INFO  poll 99: queue empty\n"));
        assert!(after.contains(
            "\n[line 101] ERROR request 100 timed out after 30s (attempt 2)  (+2796 similar)\n"
        ));
        assert!(after.contains("\n[line 1801] Traceback (most recent call last):\n"));
        assert!(after.contains(
            "\n[line 1803] ConnectionResetError: [Errno 104] Connection reset by peer\n"
        ));
        out.assert_stashes_resolve();
        // The budget: two lines without context keep the first two failures alone.
        let tight = check(
            "collapse",
            "failure_lines: 2\nfailure_context: 0",
            tool_messages(&[&log]),
        );
        let after = &tight.messages[1].content;
        assert!(after.contains("(2960 lines omitted, 2 of them kept below) <<cg:"));
        assert!(after.contains("\n[line 101] ERROR request 100"));
        assert!(after.contains("\n[line 1801] Traceback"));
        // A token budget no line fits keeps none.
        let starved = check("collapse", "failure_tokens: 5", tool_messages(&[&log]));
        assert!(
            starved.messages[1]
                .content
                .contains("(2960 lines omitted) <<cg:")
        );
        // A log of 3,000 identical errors: the head shows one, so the middle keeps none.
        let same = vec!["ERROR: disk quota exceeded on /data"; 3000].join("\n");
        let out = check("collapse", "failure_context: 1", tool_messages(&[&same]));
        assert!(
            out.messages[1]
                .content
                .contains("(2960 lines omitted) <<cg:")
        );
    }

    #[test]
    fn a_rare_term_of_the_latest_question_before_the_output_stays_in_view() {
        let mut lines: Vec<String> = (0..3000)
            .map(|i| format!("INFO  order {i} accepted by the validator in 3ms"))
            .collect();
        lines[1234] = "WARN  order 90210 held: shipping address incomplete".into();
        let log = lines.join("\n");
        let question = "why was order 90210 held back?";
        let out = check("collapse", "failure_context: 1", asked(question, &log));
        let after = &out.messages[1].content;
        // `order` is on every line and names none; `90210` and `held` are on one.
        assert!(
            after.contains("(2960 lines omitted, 3 of them kept below) <<cg:"),
            "{after}"
        );
        assert!(
            after.contains("\n[line 1235] WARN  order 90210 held: shipping address incomplete\n")
        );
        out.assert_stashes_resolve();
        // A turn of only the agent's reminders is no question: the one before still counts.
        let mut messages = asked(question, "ok");
        messages.push(Message::text(
            Role::User,
            "<system-reminder>Today is 2026-03-02.</system-reminder>",
        ));
        messages.push(asked(question, &log).remove(1));
        let reminded = check("collapse", "failure_context: 1", messages);
        assert_eq!(reminded.messages[3].content, out.messages[1].content);
        // A question asked after the output never reaches it: every later turn forwards the
        // same bytes for it (the cached prefix stays put).
        let mut messages = asked("run the nightly import", &log);
        messages.push(Message::text(Role::User, question));
        let later = check("collapse", "failure_context: 1", messages);
        assert!(
            later.messages[1]
                .content
                .contains("(2960 lines omitted) <<cg:")
        );
    }

    #[test]
    fn a_source_files_error_names_are_code_not_reports() {
        let source: String = (0..3000)
            .map(|i| match i % 250 {
                125 => format!("        raise ValueError(\"bad row {i}\")\n"),
                200 => format!("        raise KeyError(name_{i})\n"),
                _ => format!("    total_{i} = compute(row, {i})\n"),
            })
            .collect();
        let read = |command: &str| {
            let mut messages = tool_messages(&[&source]);
            messages[1].tool_arguments = Some(format!(r#"{{"command":"{command}"}}"#));
            check("collapse", "", messages).messages[1].content.clone()
        };
        let code = read("cat src/app/rows.py");
        assert!(code.contains("lines omitted) <<cg:"), "{code:.200}");
        assert!(!code.contains("[line "));
        let text = read("cat /tmp/rows.txt");
        assert!(text.contains("of them kept below) <<cg:"));
        assert!(text.contains("ValueError") && text.contains("KeyError"));
    }

    #[test]
    fn a_questions_terms_leave_out_asking_words_and_the_agents_reminders() {
        use super::question_terms;
        assert_eq!(question_terms("tell me why it failed").unwrap(), ["failed"]);
        assert_eq!(
            question_terms("Why did batch 2500 hit orders_pkey?").unwrap(),
            ["batch", "2500", "orders_pkey"]
        );
        assert_eq!(
            question_terms("<system-reminder>Today is 2026-03-02.</system-reminder>\n"),
            None
        );
        assert_eq!(
            question_terms("<system-reminder>x</system-reminder>why is Redis slow").unwrap(),
            ["redis", "slow"]
        );
        assert_eq!(
            super::shape(
                "2026-03-02T10:41:40Z ERROR request 4411 timed out after 30s (id 3fa85f64)"
            ),
            "#-#-#:#:# ERROR request # timed out after # (id #)"
        );
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
