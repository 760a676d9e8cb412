//! A strict, zero-copy JSON scanner that reports byte spans instead of building values.
//!
//! The wire layer needs two things serde's value model cannot give: the exact byte span of every
//! value it may rewrite, and the guarantee that everything else stays untouched. So this module
//! validates JSON (RFC 8259, UTF-8 input) and hands out `Span`s into the original text; callers
//! decode only the handful of strings they actually read. String bodies are skipped with `memchr`,
//! which is what keeps parse + no-op write-back well above 500 MB/s (see `benches/engine.rs`).

use std::borrow::Cow;
use std::cell::RefCell;

mod opening;
mod strings;

pub use opening::opening_end;
use strings::{SIMPLE_ESCAPES, decode_escape_at};
pub use strings::{decode_string, encode_string, to_literal};

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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON at byte {offset}: {reason}")]
pub struct JsonError {
    pub offset: usize,
    pub reason: &'static str,
}

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
    scan_document(text, &mut NoRecord(String::new()))
}

/// Validates a whole document like [`parse_document`] and, in the same pass, records the members
/// of every object and array, so a caller walks the structure without scanning it again.
///
/// The wire layer used to validate first and then re-find every value's end while walking the
/// messages: each tool output was scanned three times before it was decoded once. Recording the
/// spans while validating leaves one scan and the decode.
pub fn parse_indexed(text: &str) -> Result<(Span, Index)> {
    let mut index = Index::default();
    let root = scan_document(text, &mut index)?;
    debug_assert!(index.open.is_empty());
    Ok((root, index))
}

/// [`parse_indexed`] for a document whose array opening at `array_start` begins with elements
/// an earlier scan validated, byte for byte at the same offsets (`known`, in order, each a
/// value span). The scan steps over them: they are the array's first members in the index,
/// without their insides, and scanning resumes after the last of them. Everything else is
/// validated and indexed as usual, so the document is valid JSON exactly when the earlier one
/// was and these bytes are; a caller must have proven the known bytes unchanged.
pub fn parse_indexed_resuming(
    text: &str,
    array_start: usize,
    known: Vec<Span>,
) -> Result<(Span, Index)> {
    let mut index = Index {
        known: Some((array_start, known)),
        ..Index::default()
    };
    let root = scan_document(text, &mut index)?;
    if index.known.is_some() {
        // The array was not where the earlier scan found it: nothing was stepped over, and
        // the whole document was validated.
        index.known = None;
    }
    Ok((root, index))
}

fn scan_document<R: Recorder>(text: &str, recorder: &mut R) -> Result<Span> {
    let bytes = text.as_bytes();
    let start = skip_ws(bytes, 0);
    let end = scan_value(text, start, 0, recorder)?;
    let rest = skip_ws(bytes, end);
    if rest != bytes.len() {
        return err(rest, "trailing characters after the top-level value");
    }
    Ok(Span::new(start, end))
}

/// What the validator tells about the structure it walks: nothing ([`NoRecord`]) or every
/// container's members ([`Index`]). Monomorphized, so plain validation pays nothing for it.
trait Recorder {
    /// Whether string literals with escapes are decoded while they are scanned.
    const DECODES: bool;
    /// A container opens at `start`; returns a token for [`Recorder::close`].
    fn open(&mut self, start: usize) -> usize;
    /// A member of the innermost open container.
    fn member(&mut self, entry: Entry);
    fn close(&mut self, token: usize);
    /// Where a string being scanned is decoded (only used when `DECODES`).
    fn scratch(&mut self) -> &mut String;
    /// The decoded value of the string literal opening at `start`, which had escapes.
    fn decoded(&mut self, start: usize, value: String);
    /// For the array opening at `start`, the end of the leading elements already validated
    /// (see [`parse_indexed_resuming`]), once they are recorded as its members.
    fn known_elements(&mut self, _start: usize) -> Option<usize> {
        None
    }
}

struct NoRecord(String);

impl Recorder for NoRecord {
    const DECODES: bool = false;
    fn open(&mut self, _: usize) -> usize {
        0
    }
    fn member(&mut self, _: Entry) {}
    fn close(&mut self, _: usize) {}
    fn scratch(&mut self) -> &mut String {
        &mut self.0
    }
    fn decoded(&mut self, _: usize, _: String) {}
}

/// The members of every object and array of a validated document, by container, and the
/// decoded value of every string literal that has escapes.
///
/// Containers are kept in document order (they are recorded when they open), so one is found by
/// a binary search on its start. Members of a container are contiguous; array elements have an
/// empty key span. Strings are decoded in the validating scan itself: tool outputs are nearly all
/// of a body's bytes and all of them are read, so scanning them once to validate and once more to
/// decode was the largest cost of a parse.
#[derive(Debug, Default)]
pub struct Index {
    containers: Vec<Container>,
    members: Vec<Entry>,
    /// Members of the containers still open, innermost last; moved to `members` on close.
    pending: Vec<Entry>,
    /// For each open container: its slot in `containers` and where its members start in `pending`.
    open: Vec<(usize, usize)>,
    /// Decoded strings by the offset of their opening quote, in document order. Each is handed
    /// out once by [`Index::string`] (moved, not copied); a second read decodes again.
    decoded: Vec<(usize, RefCell<Option<String>>)>,
    scratch: String,
    /// The array to resume and its leading elements' spans, until the scan reaches it.
    known: Option<(usize, Vec<Span>)>,
}

#[derive(Debug, Clone, Copy)]
struct Container {
    start: usize,
    first: usize,
    len: usize,
}

impl Recorder for Index {
    const DECODES: bool = true;

    fn scratch(&mut self) -> &mut String {
        &mut self.scratch
    }

    fn decoded(&mut self, start: usize, value: String) {
        self.decoded.push((start, RefCell::new(Some(value))));
    }

    fn open(&mut self, start: usize) -> usize {
        let slot = self.containers.len();
        self.containers.push(Container {
            start,
            first: 0,
            len: 0,
        });
        self.open.push((slot, self.pending.len()));
        slot
    }

    fn member(&mut self, entry: Entry) {
        self.pending.push(entry);
    }

    fn close(&mut self, token: usize) {
        let Some((slot, mark)) = self.open.pop() else {
            return;
        };
        debug_assert_eq!(slot, token);
        let first = self.members.len();
        self.members.extend(self.pending.drain(mark..));
        self.containers[slot].first = first;
        self.containers[slot].len = self.members.len() - first;
    }

    fn known_elements(&mut self, start: usize) -> Option<usize> {
        if self.known.as_ref()?.0 != start {
            return None;
        }
        let (_, spans) = self.known.take()?;
        let end = spans.last()?.end;
        self.pending.extend(spans.into_iter().map(|value| Entry {
            key: Span::new(value.start, value.start),
            value,
        }));
        Some(end)
    }
}

impl Index {
    /// The members of the object or array at `container` (entries of an object, elements of an
    /// array with empty keys). Empty for a span that is not a container of this document.
    pub fn members(&self, container: Span) -> &[Entry] {
        match self
            .containers
            .binary_search_by_key(&container.start, |c| c.start)
        {
            Ok(i) => {
                let c = self.containers[i];
                &self.members[c.first..c.first + c.len]
            }
            Err(_) => &[],
        }
    }

    /// The element spans of the array at `array`.
    pub fn elements(&self, array: Span) -> impl Iterator<Item = Span> + '_ {
        self.members(array).iter().map(|e| e.value)
    }

    /// The decoded value of the string literal at `span` (quotes included): borrowed from `text`
    /// when it has no escapes, else the value decoded during the scan, moved out on the first
    /// read. `text` must be the indexed document.
    ///
    /// # Errors
    /// When `span` is not a valid string literal.
    pub fn string<'t>(&self, text: &'t str, span: Span) -> Result<Cow<'t, str>> {
        if let Ok(i) = self
            .decoded
            .binary_search_by_key(&span.start, |(start, _)| *start)
            && let Some(value) = self.decoded[i].1.borrow_mut().take()
        {
            return Ok(Cow::Owned(value));
        }
        decode_string(text, span)
    }
}

/// Nesting deeper than this is refused instead of risking the stack on hostile input.
const MAX_DEPTH: usize = 512;

/// Scans one value starting at `pos` (no leading whitespace) and returns the offset just past it.
fn scan_value<R: Recorder>(text: &str, pos: usize, depth: usize, r: &mut R) -> Result<usize> {
    let bytes = text.as_bytes();
    match bytes.get(pos) {
        None => err(pos, "unexpected end of input, expected a value"),
        Some(b'"') => scan_string(text, pos, r),
        Some(b'{') => scan_object(text, pos, depth + 1, r),
        Some(b'[') => scan_array(text, pos, depth + 1, r),
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

/// Bytes looked at per step by the block scans below.
const BLOCK: usize = 64;

/// One bit per byte of `block`, set where `hit` holds.
///
/// Written so the compiler vectorizes the byte tests (one flag byte per input byte), then packs
/// eight flag bytes into eight bits with one multiply each: byte `i` of `0x0102_0408_1020_4080`
/// is `0x80 >> i`, so flag `i` lands on bit `56 + i` of the product and nothing carries.
#[inline(always)]
fn block_mask(block: &[u8; BLOCK], hit: impl Fn(u8) -> bool) -> u64 {
    let mut flags = [0u8; BLOCK];
    for (flag, &byte) in flags.iter_mut().zip(block) {
        *flag = u8::from(hit(byte));
    }
    let mut mask = 0u64;
    for (k, chunk) in flags.chunks_exact(8).enumerate() {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        mask |= (word.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * k);
    }
    mask
}

/// What matters inside a string literal: a quote, a backslash or a raw control character.
#[inline(always)]
fn is_special(byte: u8) -> bool {
    (byte == b'"') | (byte == b'\\') | (byte < 0x20)
}

/// Validates the escape whose backslash is at `at` and returns the offset just past it.
#[inline(always)]
fn escape_end(bytes: &[u8], at: usize) -> Result<usize> {
    match bytes.get(at + 1) {
        Some(&byte) if SIMPLE_ESCAPES[usize::from(byte)] != 0 => Ok(at + 2),
        _ => unicode_escape_end(bytes, at),
    }
}

#[cold]
fn unicode_escape_end(bytes: &[u8], at: usize) -> Result<usize> {
    match bytes.get(at + 1) {
        Some(b'u') => {
            let hex = bytes.get(at + 2..at + 6);
            if hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                Ok(at + 6)
            } else {
                err(at, "invalid \\u escape")
            }
        }
        _ => err(at, "invalid escape"),
    }
}

/// Scans a string literal at `pos` (the opening quote) and returns the offset past its closing
/// quote, validating escapes and rejecting raw control characters, in one pass.
///
/// Tool outputs carry an escape on nearly every line (one per 28 bytes on the corpus), so
/// stopping the scan at each escape was most of the cost. This tests 64 bytes at once into a bit
/// mask and walks the set bits, so an escape costs a few instructions and the bytes between
/// escapes are never looked at twice (13% faster over the whole parse than eight bytes at a
/// time with integer tricks).
fn scan_string<R: Recorder>(text: &str, pos: usize, r: &mut R) -> Result<usize> {
    let bytes = text.as_bytes();
    let mut cur = pos + 1;
    let mut state = StringScan {
        open: pos,
        run: pos + 1,
        escaped: false,
    };
    'blocks: while let Some(block) = bytes.get(cur..cur + BLOCK) {
        let block: &[u8; BLOCK] = block.try_into().unwrap_or(&[0; BLOCK]);
        let mut mask = block_mask(block, is_special);
        while mask != 0 {
            let at = cur + mask.trailing_zeros() as usize;
            match bytes[at] {
                b'"' => return state.finish(text, at, r),
                b'\\' => {
                    let next = state.escape(text, at, r)?;
                    let consumed = next - cur;
                    if consumed >= BLOCK {
                        cur = next;
                        continue 'blocks;
                    }
                    // The escaped character may itself be a flagged quote or backslash.
                    mask &= u64::MAX << consumed;
                }
                _ => return err(at, "control character inside a string"),
            }
        }
        cur += BLOCK;
    }
    // Fewer than 64 bytes left: one byte at a time.
    while let Some(&byte) = bytes.get(cur) {
        match byte {
            b'"' => return state.finish(text, cur, r),
            b'\\' => cur = state.escape(text, cur, r)?,
            0x00..=0x1f => return err(cur, "control character inside a string"),
            _ => cur += 1,
        }
    }
    err(pos, "unterminated string")
}

/// A string literal being scanned, and decoded when the recorder wants it.
struct StringScan {
    /// Offset of the opening quote.
    open: usize,
    /// Literal bytes from here on are still to be copied to the decoded value.
    run: usize,
    /// Whether an escape was seen (the value then differs from the literal's inside).
    escaped: bool,
}

impl StringScan {
    /// Validates the escape whose backslash is at `at`, decodes it when the recorder decodes,
    /// and returns the offset past it.
    #[inline(always)]
    fn escape<R: Recorder>(&mut self, text: &str, at: usize, r: &mut R) -> Result<usize> {
        let next = escape_end(text.as_bytes(), at)?;
        if !R::DECODES {
            return Ok(next);
        }
        let out = r.scratch();
        if !self.escaped {
            out.clear();
            self.escaped = true;
        }
        // A surrogate pair decodes as one character from two escapes.
        self.run = decode_escape_at(text, self.run, at, next, out);
        Ok(self.run)
    }

    /// The closing quote is at `quote`: hands the decoded value to the recorder when the string
    /// had escapes, and returns the offset past the quote.
    #[inline(always)]
    fn finish<R: Recorder>(&self, text: &str, quote: usize, r: &mut R) -> Result<usize> {
        if R::DECODES && self.escaped {
            let out = r.scratch();
            out.push_str(text.get(self.run..quote).unwrap_or_default());
            // An exact-size copy: the scratch buffer keeps its capacity for the next string.
            let value = out.clone();
            r.decoded(self.open, value);
        }
        Ok(quote + 1)
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

fn scan_object<R: Recorder>(text: &str, pos: usize, depth: usize, r: &mut R) -> Result<usize> {
    let bytes = text.as_bytes();
    if depth > MAX_DEPTH {
        return err(pos, "nesting too deep");
    }
    let token = r.open(pos);
    let mut cur = skip_ws(bytes, pos + 1);
    if bytes.get(cur) == Some(&b'}') {
        r.close(token);
        return Ok(cur + 1);
    }
    loop {
        if bytes.get(cur) != Some(&b'"') {
            return err(cur, "expected an object key");
        }
        let key_start = cur;
        let key_end = scan_string(text, cur, r)?;
        cur = skip_ws(bytes, key_end);
        if bytes.get(cur) != Some(&b':') {
            return err(cur, "expected ':' after an object key");
        }
        let value_start = skip_ws(bytes, cur + 1);
        let value_end = scan_value(text, value_start, depth, r)?;
        r.member(Entry {
            key: Span::new(key_start, key_end),
            value: Span::new(value_start, value_end),
        });
        cur = skip_ws(bytes, value_end);
        match bytes.get(cur) {
            Some(b',') => cur = skip_ws(bytes, cur + 1),
            Some(b'}') => {
                r.close(token);
                return Ok(cur + 1);
            }
            _ => return err(cur, "expected ',' or '}' in an object"),
        }
    }
}

fn scan_array<R: Recorder>(text: &str, pos: usize, depth: usize, r: &mut R) -> Result<usize> {
    let bytes = text.as_bytes();
    if depth > MAX_DEPTH {
        return err(pos, "nesting too deep");
    }
    let token = r.open(pos);
    let first = skip_ws(bytes, pos + 1);
    // Resuming, the known elements are already members: what follows the last of them is a
    // separator, as after any element.
    let mut value_end = match r.known_elements(pos) {
        Some(known_end) => known_end,
        None if bytes.get(first) == Some(&b']') => {
            r.close(token);
            return Ok(first + 1);
        }
        None => scan_element(text, first, depth, r)?,
    };
    loop {
        let mut cur = skip_ws(bytes, value_end);
        match bytes.get(cur) {
            Some(b',') => cur = skip_ws(bytes, cur + 1),
            Some(b']') => {
                r.close(token);
                return Ok(cur + 1);
            }
            _ => return err(cur, "expected ',' or ']' in an array"),
        }
        value_end = scan_element(text, cur, depth, r)?;
    }
}

/// One array element at `at`, recorded as a member with an empty key; the offset past it.
fn scan_element<R: Recorder>(text: &str, at: usize, depth: usize, r: &mut R) -> Result<usize> {
    let end = scan_value(text, at, depth, r)?;
    r.member(Entry {
        key: Span::new(at, at),
        value: Span::new(at, end),
    });
    Ok(end)
}

/// One `"key": value` entry of an object: the key's literal span (with quotes) and the value's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    // An array's members have empty keys (see `Index::members`): a lookup in an array, where a
    // body put one where an object belongs, finds nothing.
    let Some(inner) = text.get(span.start + 1..span.end.saturating_sub(1)) else {
        return false;
    };
    if span.end < span.start + 2 {
        return false;
    }
    // An escape makes a literal longer than its value, so only a longer key needs decoding.
    if inner.len() <= expected.len() {
        return inner == expected;
    }
    inner.contains('\\') && decode_string(text, span).is_ok_and(|k| k == expected)
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
    fn block_scans_agree_with_serde_json_at_every_alignment() {
        // Escapes, quotes, control bytes and multi-byte UTF-8 at every offset of a 64-byte block
        // (the scans test 64 bytes at once), including escapes split across two blocks.
        let pieces = [
            "\\n",
            "\\\"",
            "\\\\",
            "\\u00e9",
            "\\ud83d\\ude00",
            "é",
            "😀",
            "\u{1}",
            "\u{7f}",
            "abc",
            "\\x",
            "\\u12",
        ];
        for pad in (0..9).chain(52..72).chain(118..136) {
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
                            to_literal(&expected),
                            serde_json::to_string(&expected).unwrap()
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
    fn encoding_agrees_with_serde_json_at_every_alignment() {
        let specials = [
            "\"", "\\", "\n", "\r\n", "\t", "\u{1}", "\u{8}", "\u{c}", "\u{1f}", "é", "😀",
            "\u{7f}",
        ];
        for pad in (0..9).chain(52..72).chain(118..136) {
            for a in specials {
                for b in specials {
                    let value = format!("{}{a}{}{b}", "p".repeat(pad), "q".repeat(pad % 5));
                    assert_eq!(to_literal(&value), serde_json::to_string(&value).unwrap());
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
