//! The deterministic projection `extract` makes of a large tool output, and `extract_llm`
//! falls back to: noise out (terminal redraws, progress lines, blank runs, repeated blocks), then,
//! when the conversation has a query, only the lines that bear on it (see `extract`'s docs).

use std::sync::OnceLock;

use regex::Regex;

use super::{keywords, offload_with};
use crate::gate;
use crate::marker::HINT_FULL_OUTPUT;
use crate::message::Role;
use crate::pipeline::{ApplyCx, StashKey, Transcript};

fn progress_line() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"^\s*(?:[\[(|]?\s*[#=>\-.█━▏▎▍▌▋▊▉►░▒▓■□ ]{6,}\s*[\])|]?\s*[\d.]+\s*%.*|[\d.]+\s*%\s*[\[|][#=>\-.█━▏▎▍▌▋▊▉►░▒▓■□ ]*[\]|].*|[█━▏▎▍▌▋▊▉►░▒▓■□╸╺]{6,}.*|.*\beta \d+:\d\d(?::\d\d)?\s*|[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏|/\\-]\s.*\.\.\.\s*)$",
        )
        .expect("progress regex is valid")
    })
}

fn error_line() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i-u)\b(?:error|errors|exception|fail|failed|failure|fatal|panic|traceback|warning|denied|cannot|undefined|not found)\b")
            .expect("error regex is valid")
    })
}

/// Step 1: the lines of an output (already terminal-rendered) without progress lines, blank
/// runs and repeated blocks.
fn denoise(rendered: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = Vec::new();
    for line in rendered.split('\n') {
        // Every progress shape holds a `%`, an `eta`, a non-ASCII glyph or a spinner character;
        // most lines hold none, and skip the regex.
        let maybe_progress = !line.is_ascii()
            || line.contains('%')
            || line.contains("eta ")
            || line
                .trim_start()
                .starts_with(['|', '/', '\\', '-', '[', '(', '#', '=', '>']);
        if maybe_progress && progress_line().is_match(line) {
            continue;
        }
        if line.trim().is_empty() && lines.last().is_some_and(|l| l.trim().is_empty()) {
            continue;
        }
        lines.push(line);
        // A block of 1..=12 lines that just repeated the block before it goes.
        for size in 1..=12.min(lines.len() / 2) {
            let n = lines.len();
            // The newest line must repeat first; checking it alone rules out almost every size.
            if lines[n - 1] == lines[n - 1 - size]
                && lines[n - size..] == lines[n - 2 * size..n - size]
            {
                lines.truncate(n - size);
                break;
            }
        }
    }
    lines
}

/// The query: keywords of the task (first user message) and of the latest user and assistant
/// messages.
/// Bytes of each message the query is read from.
const QUERY_CHARS: usize = 2000;

fn query(messages: &Transcript<'_, '_>) -> std::collections::HashSet<String> {
    let first_user = (0..messages.len()).find(|&i| messages[i].role == Role::User);
    let latest = |role| {
        (0..messages.len())
            .rev()
            .find(|&i| messages[i].role == role)
    };
    let mut words = std::collections::HashSet::new();
    for i in [first_user, latest(Role::User), latest(Role::Assistant)]
        .into_iter()
        .flatten()
    {
        // The words of a question, not of a pasted log: agents that send observations as user
        // messages would otherwise make every word of the last output a query word.
        let content = &messages[i].content;
        let mut end = content.len().min(QUERY_CHARS);
        while !content.is_char_boundary(end) {
            end -= 1;
        }
        words.extend(keywords(&content[..end]));
    }
    words
}

/// The deterministic projection, with the conversation's query computed once per run.
pub(super) struct Projector {
    query: std::collections::HashSet<String>,
    word: String,
    head: usize,
    tail: usize,
}

impl Projector {
    pub(super) fn new(messages: &Transcript<'_, '_>, head: usize, tail: usize) -> Projector {
        Projector {
            query: query(messages),
            word: String::new(),
            head,
            tail,
        }
    }

    /// A line is relevant when one of its words, lowercased, is a query keyword. One reused
    /// buffer: building a word set per line was most of this component's time.
    fn relevant(&mut self, line: &str) -> bool {
        let (word, query) = (&mut self.word, &self.query);
        line.split(|c: char| !c.is_alphanumeric() && c != '_')
            .filter(|w| w.len() >= 3)
            .any(|w| {
                word.clear();
                word.extend(w.chars().flat_map(char::to_lowercase));
                query.contains(word.as_str())
            })
    }

    /// Replaces `messages[index]` with its projection (stashing the original) where it may
    /// change and the projection changes something; records the gate otherwise.
    pub(super) fn offload(
        &mut self,
        messages: &mut Transcript<'_, '_>,
        index: usize,
        cx: &mut ApplyCx<'_>,
    ) -> Option<StashKey> {
        if !cx.may_mutate(index) {
            cx.gate(gate::CACHED_PREFIX);
            return None;
        }
        let Some(projected) = self.project(&messages[index].content) else {
            cx.gate(gate::NO_OBVIOUS_NOISE);
            return None;
        };
        offload_with(messages, index, cx, |_, marker| {
            format!("{projected}{marker}{HINT_FULL_OUTPUT}")
        })
    }

    /// `original` denoised and, with a query, projected onto it; `None` when that changes
    /// nothing.
    pub(super) fn project(&mut self, original: &str) -> Option<String> {
        // Most outputs hold no escape or redraw: render only those that do.
        let rendered: std::borrow::Cow<'_, str> = if original.contains(['\x1b', '\r']) {
            crate::terminal::clean(original).into()
        } else {
            original.into()
        };
        let lines = denoise(&rendered);
        let n = lines.len();
        let mut projected = String::with_capacity(original.len() / 2);
        let mut gap = 0;
        for (i, line) in lines.iter().enumerate() {
            let keep = self.query.is_empty()
                || i < self.head
                || i + self.tail >= n
                || error_line().is_match(line)
                || self.relevant(line);
            if keep {
                if gap > 0 {
                    projected.push_str(&format!("… ({gap} lines)\n"));
                    gap = 0;
                }
                projected.push_str(line);
                projected.push('\n');
            } else {
                gap += 1;
            }
        }
        if gap > 0 {
            projected.push_str(&format!("… ({gap} lines)\n"));
        }
        (projected.trim_end() != original.trim_end()).then_some(projected)
    }
}

#[cfg(test)]
mod tests {
    use super::denoise;

    #[test]
    fn denoise_collapses_repeats_and_blank_runs() {
        let text = "a\n\n\n\nb\nx\ny\nx\ny\nx\ny\nc\n  45% [#########           ] 1.2MB\nd";
        assert_eq!(denoise(text), ["a", "", "b", "x", "y", "c", "d"]);
        let rendered = crate::components::terminal_render("50%\r100% done\nok");
        assert_eq!(denoise(&rendered), ["100% done", "ok"]);
    }
}
