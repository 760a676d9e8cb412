//! JSON string literals: decoding one the scanner found (borrowed when it has no escape), and
//! encoding text as one.

use std::borrow::Cow;

use super::{BLOCK, JsonError, Result, Span, block_mask, err, escape_end, is_special};

/// What each simple escape (`\n`, `\"`, ...) decodes to, indexed by the byte after the
/// backslash; 0 for `u` and for bytes that are no escape. A table keeps the common case (a `\n`
/// per line of tool output) to one load on the hot paths.
pub(super) const SIMPLE_ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'/' as usize] = b'/';
    table[b'b' as usize] = 0x08;
    table[b'f' as usize] = 0x0c;
    table[b'n' as usize] = b'\n';
    table[b'r' as usize] = b'\r';
    table[b't' as usize] = b'\t';
    table
};

/// Copies the literal run before the (validated) escape at `at` and the escape's value to `out`,
/// and returns the offset past the escape: `next`, or past both halves of a surrogate pair.
#[inline(always)]
pub(super) fn decode_escape_at(
    text: &str,
    run: usize,
    at: usize,
    next: usize,
    out: &mut String,
) -> usize {
    let bytes = text.as_bytes();
    copy_run(out, text, run, at);
    match SIMPLE_ESCAPES[usize::from(bytes[at + 1])] {
        // Validated already, so this finds a character; `next` keeps the scan in step regardless.
        0 => match decode_unicode(bytes, at) {
            Some((ch, end)) => {
                out.push(ch);
                end
            }
            None => next,
        },
        byte => {
            out.push(char::from(byte));
            next
        }
    }
}

/// Decodes the string literal at `span` (quotes included). Borrows when there are no escapes.
pub fn decode_string(text: &str, span: Span) -> Result<Cow<'_, str>> {
    let raw = span.of(text);
    if raw.len() < 2 || !raw.starts_with('"') || !raw.ends_with('"') {
        return err(span.start, "expected a string");
    }
    let inner = &raw[1..raw.len() - 1];
    if !inner.contains('\\') {
        return Ok(Cow::Borrowed(inner));
    }
    let bytes = inner.as_bytes();
    let base = span.start + 1;
    let mut out = String::with_capacity(inner.len());
    let mut run = 0;
    while let Some(found) = memchr::memchr(b'\\', bytes.get(run..).unwrap_or_default()) {
        let at = run + found;
        let next = escape_end(bytes, at).map_err(|e| JsonError {
            offset: base + e.offset,
            reason: e.reason,
        })?;
        run = decode_escape_at(inner, run, at, next, &mut out);
    }
    out.push_str(inner.get(run..).unwrap_or_default());
    Ok(Cow::Owned(out))
}

/// Appends `text[from..to]` (both ASCII positions) to `out`.
///
/// The runs between escapes are short (28 bytes on average in tool output), and a `memcpy` call
/// per run was a tenth of the parse. A run of up to 32 bytes is copied as a fixed 32-byte move,
/// which compiles to two vector moves, and the excess is cut off again.
#[inline(always)]
fn copy_run(out: &mut String, text: &str, from: usize, to: usize) {
    const CHUNK: usize = 32;
    match text.get(from..from + CHUNK) {
        Some(chunk) if to - from <= CHUNK => {
            let keep = out.len() + (to - from);
            out.push_str(chunk);
            out.truncate(keep);
        }
        _ => out.push_str(text.get(from..to).unwrap_or_default()),
    }
}

/// Decodes the `\\u` escape whose backslash is at `at`: the character and the offset past it
/// (past both halves of a surrogate pair). `None` when the four hex digits are not there.
fn decode_unicode(bytes: &[u8], at: usize) -> Option<(char, usize)> {
    let first = hex4(bytes, at + 2)?;
    let mut next = at + 6;
    let ch = if (0xD800..0xDC00).contains(&first) {
        // A high surrogate must be followed by an escaped low surrogate.
        let low = (bytes.get(next) == Some(&b'\\') && bytes.get(next + 1) == Some(&b'u'))
            .then(|| hex4(bytes, next + 2))
            .flatten()
            .filter(|low| (0xDC00..0xE000).contains(low));
        match low {
            Some(low) => {
                next += 6;
                char::from_u32(0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00))
            }
            // A lone surrogate cannot be represented in a Rust string; JSON parsers
            // disagree on it anyway, so the replacement character is the honest value.
            None => Some('\u{FFFD}'),
        }
    } else if (0xDC00..0xE000).contains(&first) {
        Some('\u{FFFD}')
    } else {
        char::from_u32(first)
    };
    Some((ch.unwrap_or('\u{FFFD}'), next))
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    // from_str_radix would accept a sign; JSON does not.
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16).ok()
}

/// Encodes `value` as a JSON string literal, escaping only what JSON requires (non-ASCII stays
/// UTF-8, as every provider SDK sends it).
pub fn encode_string(value: &str, out: &mut String) {
    // Room for the quotes and about one escape per line of a tool output.
    out.reserve(value.len() + value.len() / 16 + 2);
    out.push('"');
    let bytes = value.as_bytes();
    // `run` starts the bytes not yet copied. Flagged bytes are ASCII, so every cut lands on a
    // character boundary.
    let mut run = 0;
    let mut cur = 0;
    // 64 bytes tested at once, as the parser's scans do: the runs between escapes are copied
    // whole instead of being looked at one byte at a time.
    while let Some(block) = bytes.get(cur..cur + BLOCK) {
        let block: &[u8; BLOCK] = block.try_into().unwrap_or(&[0; BLOCK]);
        let mut mask = block_mask(block, is_special);
        while mask != 0 {
            let at = cur + mask.trailing_zeros() as usize;
            mask &= mask - 1;
            out.push_str(value.get(run..at).unwrap_or_default());
            push_escape(bytes[at], out);
            run = at + 1;
        }
        cur += BLOCK;
    }
    for (at, &byte) in bytes.iter().enumerate().skip(cur) {
        if is_special(byte) {
            out.push_str(value.get(run..at).unwrap_or_default());
            push_escape(byte, out);
            run = at + 1;
        }
    }
    out.push_str(value.get(run..).unwrap_or_default());
    out.push('"');
}

/// Appends the JSON escape of `byte`, a quote, backslash or control character.
fn push_escape(byte: u8, out: &mut String) {
    let short = match byte {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        b'\n' => "\\n",
        b'\r' => "\\r",
        b'\t' => "\\t",
        0x08 => "\\b",
        0x0c => "\\f",
        _ => {
            use std::fmt::Write as _;
            let _ = write!(out, "\\u{byte:04x}");
            return;
        }
    };
    out.push_str(short);
}

/// Convenience wrapper around [`encode_string`].
pub fn to_literal(value: &str) -> String {
    let mut out = String::new();
    encode_string(value, &mut out);
    out
}
