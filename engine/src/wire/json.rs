//! A strict, zero-copy JSON scanner that reports byte spans instead of building values.
//!
//! The wire layer needs two things serde's value model cannot give: the exact byte span of every
//! value it may rewrite, and the guarantee that everything else stays untouched. So this module
//! validates JSON (RFC 8259, UTF-8 input) and hands out `Span`s into the original text; callers
//! decode only the handful of strings they actually read. String bodies are skipped with `memchr`,
//! which is what keeps parse + no-op write-back well above 500 MB/s (see `benches/engine.rs`).

use std::borrow::Cow;

use std::fmt;

/// A half-open byte range `[start, end)` into the scanned text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    pub fn len(self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    pub fn of(self, text: &str) -> &str {
        &text[self.start..self.end]
    }
}

/// Why a document is not valid JSON, with the byte offset where scanning stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    pub offset: usize,
    pub reason: &'static str,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for JsonError {}

/// The JSON type of a value, read from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

/// Kind of the value that starts at `span.start` (the span must come from this scanner).
pub fn kind_of(text: &str, span: Span) -> Kind {
    match text.as_bytes()[span.start] {
        b'{' => Kind::Object,
        b'[' => Kind::Array,
        b'"' => Kind::String,
        b't' | b'f' => Kind::Bool,
        b'n' => Kind::Null,
        _ => Kind::Number,
    }
}

type Result<T> = std::result::Result<T, JsonError>;

fn err<T>(offset: usize, reason: &'static str) -> Result<T> {
    Err(JsonError { offset, reason })
}

fn skip_ws(bytes: &[u8], mut pos: usize) -> usize {
    while let Some(&b) = bytes.get(pos) {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            pos += 1;
        } else {
            break;
        }
    }
    pos
}

/// Validates a whole document and returns the span of its single top-level value.
pub fn parse_document(text: &str) -> Result<Span> {
    let bytes = text.as_bytes();
    let start = skip_ws(bytes, 0);
    let end = scan_value(bytes, start, 0)?;
    let rest = skip_ws(bytes, end);
    if rest != bytes.len() {
        return err(rest, "trailing characters after the top-level value");
    }
    Ok(Span::new(start, end))
}

/// Nesting deeper than this is refused instead of risking the stack on hostile input.
const MAX_DEPTH: usize = 512;

/// Scans one value starting at `pos` (no leading whitespace) and returns the offset just past it.
fn scan_value(bytes: &[u8], pos: usize, depth: usize) -> Result<usize> {
    match bytes.get(pos) {
        None => err(pos, "unexpected end of input, expected a value"),
        Some(b'"') => scan_string(bytes, pos),
        Some(b'{') => scan_object(bytes, pos, depth + 1),
        Some(b'[') => scan_array(bytes, pos, depth + 1),
        Some(b't') => scan_literal(bytes, pos, b"true"),
        Some(b'f') => scan_literal(bytes, pos, b"false"),
        Some(b'n') => scan_literal(bytes, pos, b"null"),
        Some(b'-' | b'0'..=b'9') => scan_number(bytes, pos),
        Some(_) => err(pos, "expected a value"),
    }
}

fn scan_literal(bytes: &[u8], pos: usize, word: &[u8]) -> Result<usize> {
    if bytes.get(pos..pos + word.len()) == Some(word) {
        Ok(pos + word.len())
    } else {
        err(pos, "invalid literal")
    }
}

fn scan_number(bytes: &[u8], mut pos: usize) -> Result<usize> {
    let start = pos;
    if bytes.get(pos) == Some(&b'-') {
        pos += 1;
    }
    match bytes.get(pos) {
        Some(b'0') => pos += 1,
        Some(b'1'..=b'9') => {
            while matches!(bytes.get(pos), Some(b'0'..=b'9')) {
                pos += 1;
            }
        }
        _ => return err(start, "invalid number"),
    }
    if bytes.get(pos) == Some(&b'.') {
        pos += 1;
        if !matches!(bytes.get(pos), Some(b'0'..=b'9')) {
            return err(pos, "invalid number: no digit after the decimal point");
        }
        while matches!(bytes.get(pos), Some(b'0'..=b'9')) {
            pos += 1;
        }
    }
    if matches!(bytes.get(pos), Some(b'e' | b'E')) {
        pos += 1;
        if matches!(bytes.get(pos), Some(b'+' | b'-')) {
            pos += 1;
        }
        if !matches!(bytes.get(pos), Some(b'0'..=b'9')) {
            return err(pos, "invalid number: no digit in the exponent");
        }
        while matches!(bytes.get(pos), Some(b'0'..=b'9')) {
            pos += 1;
        }
    }
    Ok(pos)
}

/// The next backslash at or after `from`.
///
/// Tool outputs carry an escape (`\\n`) on nearly every line, so the next backslash is usually a
/// few dozen bytes away. Calling `memchr` per escape paid its vector setup every time (a quarter
/// of the parse profile); this looks eight bytes at a time with plain integer arithmetic first,
/// and hands long runs to `memchr`.
#[inline]
fn find_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const NEEDLE: u64 = 0x5c5c_5c5c_5c5c_5c5c; // b'\\' in every byte
    const SWAR_WORDS: usize = 8;
    let mut at = from;
    for _ in 0..SWAR_WORDS {
        let Some(chunk) = bytes.get(at..at + 8) else {
            break;
        };
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])) ^ NEEDLE;
        // Classic "has zero byte": the lowest flagged byte is exact (borrows only run upwards).
        let zeros = word.wrapping_sub(ONES) & !word & HIGHS;
        if zeros != 0 {
            return Some(at + (zeros.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    memchr::memchr(b'\\', bytes.get(at..)?).map(|p| at + p)
}

/// Finds the closing quote of an already-validated string literal opening at `pos`: the next
/// `"` not escaped by an odd run of backslashes. Quotes are sparse, so `memchr` for them alone
/// skips escapes (a `\n` on every line) without stopping at each.
fn closing_quote(bytes: &[u8], pos: usize) -> Option<usize> {
    let mut cur = pos + 1;
    loop {
        let quote = cur + memchr::memchr(b'"', &bytes[cur..])?;
        let backslashes = bytes[pos + 1..quote]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(quote);
        }
        cur = quote + 1;
    }
}

/// The next byte at or after `from` that matters inside a string literal: a quote, a backslash
/// or a raw control character. Eight bytes at a time with integer arithmetic (the same
/// zero-byte trick as [`find_backslash`], for three predicates at once), so validating a string
/// is one pass instead of a quote search, a control-character pass and an escape search.
#[inline]
fn find_special(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        // Lowest flagged byte of each term is exact, so the lowest of their union is too.
        let flags = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (word.wrapping_sub(ONES * 0x20) & !word);
        let flags = flags & HIGHS;
        if flags != 0 {
            return Some(at + (flags.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    bytes
        .get(at..)?
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|p| at + p)
}

/// Scans a string literal at `pos` (the opening quote) and returns the offset past its closing
/// quote, validating escapes and rejecting raw control characters, in one pass.
fn scan_string(bytes: &[u8], pos: usize) -> Result<usize> {
    let mut cur = pos + 1;
    loop {
        let Some(at) = find_special(bytes, cur) else {
            return err(pos, "unterminated string");
        };
        match bytes[at] {
            b'"' => return Ok(at + 1),
            b'\\' => match bytes.get(at + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => cur = at + 2,
                Some(b'u') => {
                    let hex = bytes.get(at + 2..at + 6);
                    if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                        return err(at, "invalid \\u escape");
                    }
                    cur = at + 6;
                }
                _ => return err(at, "invalid escape"),
            },
            _ => return err(at, "control character inside a string"),
        }
    }
}

/// Skips one value of already-validated JSON starting at `pos`, without validating it again.
fn skip_value(bytes: &[u8], pos: usize) -> Option<usize> {
    match *bytes.get(pos)? {
        b'"' => closing_quote(bytes, pos).map(|q| q + 1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut cur = pos;
            loop {
                match *bytes.get(cur)? {
                    b'"' => cur = closing_quote(bytes, cur)? + 1,
                    b'{' | b'[' => {
                        depth += 1;
                        cur += 1;
                    }
                    b'}' | b']' => {
                        depth -= 1;
                        cur += 1;
                        if depth == 0 {
                            return Some(cur);
                        }
                    }
                    _ => cur += 1,
                }
            }
        }
        _ => {
            let mut cur = pos;
            while let Some(&b) = bytes.get(cur) {
                if matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                    break;
                }
                cur += 1;
            }
            Some(cur)
        }
    }
}

fn scan_object(bytes: &[u8], pos: usize, depth: usize) -> Result<usize> {
    if depth > MAX_DEPTH {
        return err(pos, "nesting too deep");
    }
    let mut cur = skip_ws(bytes, pos + 1);
    if bytes.get(cur) == Some(&b'}') {
        return Ok(cur + 1);
    }
    loop {
        if bytes.get(cur) != Some(&b'"') {
            return err(cur, "expected an object key");
        }
        cur = skip_ws(bytes, scan_string(bytes, cur)?);
        if bytes.get(cur) != Some(&b':') {
            return err(cur, "expected ':' after an object key");
        }
        cur = skip_ws(bytes, cur + 1);
        cur = skip_ws(bytes, scan_value(bytes, cur, depth)?);
        match bytes.get(cur) {
            Some(b',') => cur = skip_ws(bytes, cur + 1),
            Some(b'}') => return Ok(cur + 1),
            _ => return err(cur, "expected ',' or '}' in an object"),
        }
    }
}

fn scan_array(bytes: &[u8], pos: usize, depth: usize) -> Result<usize> {
    if depth > MAX_DEPTH {
        return err(pos, "nesting too deep");
    }
    let mut cur = skip_ws(bytes, pos + 1);
    if bytes.get(cur) == Some(&b']') {
        return Ok(cur + 1);
    }
    loop {
        cur = skip_ws(bytes, scan_value(bytes, cur, depth)?);
        match bytes.get(cur) {
            Some(b',') => cur = skip_ws(bytes, cur + 1),
            Some(b']') => return Ok(cur + 1),
            _ => return err(cur, "expected ',' or ']' in an array"),
        }
    }
}

/// One `"key": value` entry of an object: the key's literal span (with quotes) and the value's span.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub key: Span,
    pub value: Span,
}

/// Iterates the entries of an already-validated object (a span from [`parse_document`] or from
/// these iterators: they skip without re-validating). Yields nothing for a non-object span.
pub fn entries(text: &str, object: Span) -> Entries<'_> {
    let bytes = text.as_bytes();
    let pos = if bytes.get(object.start) == Some(&b'{') {
        skip_ws(bytes, object.start + 1)
    } else {
        object.end
    };
    Entries {
        bytes,
        pos,
        end: object.end,
    }
}

pub struct Entries<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let bytes = self.bytes;
        if self.pos >= self.end || bytes[self.pos] == b'}' {
            return None;
        }
        // The span was validated, so the scans below cannot fail; a failure would mean a span
        // from elsewhere, and stopping the iteration is the safe answer.
        let key_end = skip_value(bytes, self.pos)?;
        let key = Span::new(self.pos, key_end);
        let value_start = skip_ws(bytes, skip_ws(bytes, key_end) + 1);
        let value_end = skip_value(bytes, value_start)?;
        let mut cur = skip_ws(bytes, value_end);
        if bytes.get(cur) == Some(&b',') {
            cur = skip_ws(bytes, cur + 1);
        }
        self.pos = cur;
        Some(Entry {
            key,
            value: Span::new(value_start, value_end),
        })
    }
}

/// Iterates the element spans of an already-validated array. Yields nothing for a non-array span.
pub fn elements(text: &str, array: Span) -> Elements<'_> {
    let bytes = text.as_bytes();
    let pos = if bytes.get(array.start) == Some(&b'[') {
        skip_ws(bytes, array.start + 1)
    } else {
        array.end
    };
    Elements {
        bytes,
        pos,
        end: array.end,
    }
}

pub struct Elements<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
}

impl Iterator for Elements<'_> {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        let bytes = self.bytes;
        if self.pos >= self.end || bytes[self.pos] == b']' {
            return None;
        }
        let start = self.pos;
        let end = skip_value(bytes, start)?;
        let mut cur = skip_ws(bytes, end);
        if bytes.get(cur) == Some(&b',') {
            cur = skip_ws(bytes, cur + 1);
        }
        self.pos = cur;
        Some(Span::new(start, end))
    }
}

/// Collects the entries of an object once, for objects whose fields are read several times:
/// each lookup then costs a key comparison, not a rescan of every value.
pub fn fields(text: &str, object: Span) -> Vec<Entry> {
    entries(text, object).collect()
}

/// Finds `key` among collected fields. With duplicate keys the last one wins, as in the
/// parsers providers and SDKs use (Python, JavaScript, Go): we must read what the model reads.
pub fn lookup(text: &str, fields: &[Entry], key: &str) -> Option<Span> {
    fields
        .iter()
        .rev()
        .find(|e| key_is(text, e.key, key))
        .map(|e| e.value)
}

/// Finds the value of `key` in an object span (last occurrence, see [`lookup`]).
pub fn get(text: &str, object: Span, key: &str) -> Option<Span> {
    entries(text, object)
        .filter(|e| key_is(text, e.key, key))
        .last()
        .map(|e| e.value)
}

/// Whether the key literal at `span` decodes to `expected`. Keys with escapes are decoded; plain
/// keys are compared in place without allocating.
pub fn key_is(text: &str, span: Span, expected: &str) -> bool {
    let inner = &text[span.start + 1..span.end - 1];
    if !inner.contains('\\') {
        return inner == expected;
    }
    decode_string(text, span).is_ok_and(|k| k == expected)
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
    let mut out: Vec<u8> = Vec::with_capacity(inner.len());
    let mut next = 0;
    while let Some(at) = find_backslash(bytes, next) {
        out.extend_from_slice(&bytes[next..at]);
        let simple = match bytes.get(at + 1) {
            Some(b'"') => Some(b'"'),
            Some(b'\\') => Some(b'\\'),
            Some(b'/') => Some(b'/'),
            Some(b'b') => Some(0x08),
            Some(b'f') => Some(0x0c),
            Some(b'n') => Some(b'\n'),
            Some(b'r') => Some(b'\r'),
            Some(b't') => Some(b'\t'),
            Some(b'u') => None,
            _ => return err(span.start + 1 + at, "invalid escape"),
        };
        if let Some(byte) = simple {
            out.push(byte);
            next = at + 2;
            continue;
        }
        let first = hex4(bytes, at + 2).ok_or(JsonError {
            offset: span.start + 1 + at,
            reason: "invalid \\u escape",
        })?;
        next = at + 6;
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
        let mut buf = [0u8; 4];
        out.extend_from_slice(ch.unwrap_or('\u{FFFD}').encode_utf8(&mut buf).as_bytes());
    }
    out.extend_from_slice(&bytes[next.min(bytes.len())..]);
    // Escapes only ever produce whole characters, and the runs between them are slices of a
    // `str` cut at ASCII backslashes, so this cannot fail; stay total anyway.
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| JsonError {
            offset: span.start,
            reason: "invalid UTF-8 after unescaping",
        })
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
    out.reserve(value.len() + 2);
    out.push('"');
    let bytes = value.as_bytes();
    let mut run_start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escaped: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.push_str(&value[run_start..i]);
        match escaped {
            Some(esc) => out.push_str(esc),
            None => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{b:04x}");
            }
        }
        run_start = i + 1;
    }
    out.push_str(&value[run_start..]);
    out.push('"');
}

/// Convenience wrapper around [`encode_string`].
pub fn to_literal(value: &str) -> String {
    let mut out = String::new();
    encode_string(value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_documents_and_reports_spans() {
        let text = r#" {"a": [1, -2.5e3, true, null], "b\"": {"c": "x\u00e9\ud83d\ude00"}} "#;
        let root = parse_document(text).unwrap();
        assert_eq!(root.of(text).chars().next(), Some('{'));
        let keys: Vec<_> = entries(text, root)
            .map(|e| decode_string(text, e.key).unwrap().into_owned())
            .collect();
        assert_eq!(keys, ["a", "b\""]);
        let a = get(text, root, "a").unwrap();
        let items: Vec<_> = elements(text, a).map(|s| s.of(text)).collect();
        assert_eq!(items, ["1", "-2.5e3", "true", "null"]);
        let c = get(text, get(text, root, "b\"").unwrap(), "c").unwrap();
        assert_eq!(decode_string(text, c).unwrap(), "xé😀");
    }

    #[test]
    fn rejects_invalid_documents_with_an_offset() {
        for bad in [
            "",
            "{",
            "{\"a\" 1}",
            "[1,]",
            "01",
            "\"\u{1}\"",
            "\"\\x\"",
            "{} {}",
            "[1 2]",
            "-",
            "1.",
            "tru",
        ] {
            let res = parse_document(bad);
            assert!(res.is_err(), "accepted {bad:?}");
        }
        let deep = "[".repeat(10_000);
        assert_eq!(
            parse_document(&deep).unwrap_err().reason,
            "nesting too deep"
        );
    }

    #[test]
    fn string_round_trip_matches_serde_json() {
        for s in [
            "plain",
            "quote \" back \\ slash",
            "ctl \u{1} \u{1f} tab\t nl\n",
            "é 😀 \u{2028}",
            "",
        ] {
            let lit = to_literal(s);
            assert_eq!(serde_json::from_str::<String>(&lit).unwrap(), s);
            let span = Span::new(0, lit.len());
            assert_eq!(decode_string(&lit, span).unwrap(), s);
        }
    }

    #[test]
    fn word_at_a_time_scans_agree_with_serde_json_at_every_alignment() {
        // Escapes, quotes, control bytes and multi-byte UTF-8 at every offset of an 8-byte word.
        let pieces = [
            "\\n", "\\\"", "\\\\", "\\u00e9", "é", "😀", "\u{1}", "\u{7f}", "abc", "\\x",
        ];
        for pad in 0..9 {
            for a in pieces {
                for b in pieces {
                    let literal = format!("\"{}{a}{b}{}\"", "p".repeat(pad), "q".repeat(pad));
                    let ours = parse_document(&literal).is_ok();
                    let theirs = serde_json::from_str::<String>(&literal);
                    assert_eq!(ours, theirs.is_ok(), "{literal:?}");
                    if let Ok(expected) = theirs {
                        assert_eq!(
                            decode_string(&literal, Span::new(0, literal.len())).unwrap(),
                            expected
                        );
                        assert_eq!(
                            closing_quote(literal.as_bytes(), 0),
                            Some(literal.len() - 1)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn lone_surrogates_decode_to_replacement() {
        let lit = r#""a\ud800b""#;
        assert_eq!(
            decode_string(lit, Span::new(0, lit.len())).unwrap(),
            "a\u{FFFD}b"
        );
    }
}
