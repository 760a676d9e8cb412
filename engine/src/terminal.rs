//! What a terminal shows of a captured output: escapes removed, `\r` redraws rendered. Shared
//! by `textclean` (which rewrites outputs with it) and the filter DSL (which matches on what a
//! person would have seen), so neither depends on the other.

use std::sync::OnceLock;

use regex::Regex;

fn escapes() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // CSI (colours, cursor moves), OSC (titles, hyperlinks; ended by BEL or ST), and the
        // two-byte Fe escapes.
        Regex::new(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
            .expect("escape regex is valid")
    })
}

/// Whether a text has anything for `clean` to do: an escape, or a `\r` that does not
/// end a CRLF. Two byte searches, not a walk over every line (this runs on every tool output).
pub fn has_noise(text: &str) -> bool {
    let bytes = text.as_bytes();
    memchr::memchr(0x1b, bytes).is_some()
        || memchr::memchr_iter(b'\r', bytes).any(|i| bytes.get(i + 1) != Some(&b'\n'))
}

/// The text as a terminal would show it: escapes removed, `\r` redraws rendered.
pub fn clean(text: &str) -> String {
    let stripped = escapes().replace_all(text, "");
    let mut out = String::with_capacity(stripped.len());
    for (i, line) in stripped.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let (body, crlf) = match line.strip_suffix('\r') {
            Some(body) => (body, true),
            None => (line, false),
        };
        if body.contains('\r') {
            out.push_str(&overlay(body));
        } else {
            out.push_str(body);
        }
        if crlf {
            out.push('\r');
        }
    }
    out
}

/// Renders carriage-return segments onto one line, each from column 0.
fn overlay(line: &str) -> String {
    let mut screen: Vec<char> = Vec::new();
    for segment in line.split('\r') {
        for (col, ch) in segment.chars().enumerate() {
            if col < screen.len() {
                screen[col] = ch;
            } else {
                screen.push(ch);
            }
        }
    }
    // Trailing spaces a redraw left behind carry nothing.
    let rendered: String = screen.into_iter().collect();
    rendered.trim_end().to_owned()
}
