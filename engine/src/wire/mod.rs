//! Wire layer: parse a provider request body into normalized messages, and splice changes back.
//!
//! The promise this module keeps is byte-losslessness: `write_back` copies the original body and
//! replaces only the JSON values of fields a component changed. Unchanged messages, unknown fields,
//! images, `cache_control`, number formats, key order and whitespace all leave byte-identical, and a
//! run that changes nothing returns the input bytes themselves (`Cow::Borrowed`).
//!
//! A change the slot map cannot express (a rewritten multi-part content, a changed role, a new
//! message) is discarded per message and reported, so the caller can charge it to the component
//! that made it. Correctness beats the marginal saving.

mod anthropic;
mod gemini;
pub mod json;
mod mentions;
mod openai;
pub mod prefix;
mod responses;
mod resume;
mod write_back;

use std::borrow::Cow;

use crate::message::{Message, Role};
use json::Span;
pub use mentions::Mention;
pub use resume::{Continuation, Resumed, parse_continuing, resumes};
#[cfg(test)]
pub(crate) use write_back::DECLARATION_ROOM;
pub use write_back::{Discard, WriteBack};

/// The provider API a body speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// OpenAI chat-completions (also LiteLLM, vLLM, OpenRouter and friends).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// The OpenAI Responses API (`input` items, `instructions`): Codex, the Agents SDK.
    Responses,
    /// Google's `generateContent` (`contents`, `systemInstruction`): gemini-cli, the Gemini
    /// SDKs, Gemini on Vertex AI.
    Gemini,
}

impl Dialect {
    /// Guesses the dialect of a body for offline use, where no route says it: `contents` without
    /// `messages` means Gemini, an `input` without `messages` means Responses, a top-level `system` or any `tool_use`/`tool_result` block
    /// means Anthropic, anything else OpenAI chat completions.
    pub fn detect(body: &[u8]) -> Dialect {
        let Ok(text) = std::str::from_utf8(body) else {
            return Dialect::OpenAi;
        };
        let Ok(root) = json::parse_document(text) else {
            return Dialect::OpenAi;
        };
        if json::get(text, root, "messages").is_none() {
            if json::get(text, root, "contents").is_some() {
                return Dialect::Gemini;
            }
            if json::get(text, root, "input").is_some() {
                return Dialect::Responses;
            }
        }
        if json::get(text, root, "system").is_some() {
            return Dialect::Anthropic;
        }
        if text.contains("\"tool_result\"") || text.contains("\"tool_use\"") {
            return Dialect::Anthropic;
        }
        Dialect::OpenAi
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
            Dialect::Responses => "responses",
            Dialect::Gemini => "gemini",
        }
    }

    /// Every dialect, in the order `/stats` lists them.
    pub const ALL: [Dialect; 4] = [
        Dialect::OpenAi,
        Dialect::Anthropic,
        Dialect::Responses,
        Dialect::Gemini,
    ];

    /// The key of the transcript array: `messages`, the Responses API's `input`, or Gemini's
    /// `contents`.
    pub fn transcript_key(self) -> &'static str {
        match self {
            Dialect::Responses => "input",
            Dialect::Gemini => "contents",
            Dialect::OpenAi | Dialect::Anthropic => "messages",
        }
    }

    /// The key of the top-level system prompt, where the dialect has one.
    fn system_key(self) -> Option<&'static str> {
        match self {
            Dialect::Anthropic => Some("system"),
            Dialect::Responses => Some("instructions"),
            Dialect::Gemini => Some("systemInstruction"),
            Dialect::OpenAi => None,
        }
    }
}

/// A dialect name sluice does not speak.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dialect `{0}` (expected `openai`, `anthropic`, `responses` or `gemini`)")]
pub struct UnknownDialect(pub String);

impl std::str::FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(s: &str) -> Result<Dialect, UnknownDialect> {
        match s {
            "openai" => Ok(Dialect::OpenAi),
            "anthropic" => Ok(Dialect::Anthropic),
            "responses" => Ok(Dialect::Responses),
            "gemini" => Ok(Dialect::Gemini),
            other => Err(UnknownDialect(other.to_owned())),
        }
    }
}

/// Why a body could not be normalized. The caller forwards such a body untouched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The body is not UTF-8 text.
    #[error("body is not valid UTF-8")]
    NotUtf8,
    /// The body is not a single valid JSON document.
    #[error("body is not JSON: {0}")]
    NotJson(json::JsonError),
    /// The top-level value is not an object.
    #[error("body is not a JSON object")]
    NotObject,
    /// There is no `messages` field (`input` for the Responses API, `contents` for Gemini).
    #[error("body has no `messages` (or `input`, `contents`) field")]
    NoMessages,
    /// `messages` (or `input`, `contents`) is not an array. A Responses `input` that is one
    /// string lands here: there is nothing in it to compact.
    #[error("`messages` (or `input`, `contents`) is not an array")]
    MessagesNotArray,
    /// A message that cannot be read, with its index and what is wrong. [`parse`] keeps such a
    /// message as an opaque entry ([`ParsedBody::opaque_entries`]) and reads the rest; only
    /// the per-dialect readers return it.
    #[error("messages[{index}] is malformed: {reason}")]
    MalformedMessage { index: usize, reason: String },
}

impl WireError {
    /// How `/stats`, `/metrics` and the warn log name it: a fixed set, never content.
    pub fn label(&self) -> &'static str {
        match self {
            WireError::NotUtf8 => "not_utf8",
            WireError::NotJson(_) => "not_json",
            WireError::NotObject => "not_object",
            WireError::NoMessages => "no_messages",
            WireError::MessagesNotArray => "messages_not_array",
            WireError::MalformedMessage { .. } => "malformed_message",
        }
    }

    /// The JSON path that failed, for a log line (a path, never a value).
    pub fn path(&self, dialect: Dialect) -> String {
        match self {
            WireError::NotUtf8 | WireError::NotJson(_) | WireError::NotObject => "$".to_owned(),
            WireError::NoMessages | WireError::MessagesNotArray => {
                format!("$.{}", dialect.transcript_key())
            }
            WireError::MalformedMessage { index, .. } => {
                format!("$.{}[{index}]", dialect.transcript_key())
            }
        }
    }

    /// Every label, in order: the counters' table.
    pub const LABELS: [&'static str; 6] = [
        "not_utf8",
        "not_json",
        "not_object",
        "no_messages",
        "messages_not_array",
        "malformed_message",
    ];
}

/// How a tool call's arguments are stored on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArgsEncoding {
    /// OpenAI: a JSON string whose content is JSON text.
    JsonString,
    /// Anthropic: a JSON object (`input`), spliced as raw JSON.
    RawObject,
}

/// Where one normalized message lives in the original bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Slot {
    /// The string literal (quotes included) that holds the whole of `content`, when there is one.
    content: Option<Span>,
    /// The offset of the `}` that closes the block a `cache_control` would be added to.
    block_close: Option<usize>,
    /// One span per tool call: its arguments value.
    args: Vec<(Span, ArgsEncoding)>,
    /// One string-literal span per reasoning entry, when reasoning may be rewritten in place.
    /// Anthropic thinking blocks are signed, so they never get a span.
    reasoning: Vec<Span>,
}

/// A parsed request body: normalized messages plus the slot map back to the original bytes.
/// Two are equal when they read the same bytes the same way (the resumed parse's promise).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedBody<'a> {
    text: &'a str,
    dialect: Dialect,
    messages: Vec<Message>,
    slots: Vec<Slot>,
    /// `cache_control` breakpoints already on the wire, across system, tools and messages.
    existing_breakpoints: usize,
    /// Spans of the top-level `messages` array and, when present, `system` and `tools`.
    messages_span: Span,
    system_span: Option<Span>,
    tools_span: Option<Span>,
    root: Span,
    /// Every top-level member, read once, so hosts look fields up without rescanning the body.
    top_level: Vec<json::Entry>,
    /// Wire entries kept as they came because they could not be read (see [`Opaque`]).
    opaque: Vec<Opaque>,
    /// Each transcript entry as read: where it is and what the parse had before it, so the
    /// next body of the conversation resumes after the entries it shares (see `resume`).
    entries: Vec<EntryMark>,
    /// The parse's state once the transcript was read (before `tools`).
    read: Mark,
    /// What every turn computes of each message, once asked for (see [`ParsedBody::digests`]).
    digests: Digests,
    /// The last turn's pipeline records for the messages this body shares with it, and this
    /// turn's, once a run leaves them (see [`ParsedBody::run_carry`]).
    run_carry: RunCarries,
    /// Where the strings hosts look for occur, once looked for (see [`ParsedBody::mentions`]).
    mentions: mentions::Mentions,
}

/// A pipeline run's records carried in and left (`crate::carry`). Like [`Digests`], a function
/// of the conversation, not of the bytes: no part of equality.
#[derive(Debug, Clone, Default)]
struct RunCarries {
    carried: Option<crate::carry::RunCarry>,
    left: std::sync::OnceLock<crate::carry::RunCarry>,
}

impl PartialEq for RunCarries {
    fn eq(&self, _: &RunCarries) -> bool {
        true
    }
}

/// Caches of what every turn computes over a body's messages: `tokens::content_hash` of each
/// content, each message's token count, whether its content carries a marker, and the session
/// tracker's fingerprint of each message. Filled on first use, or carried over for the messages
/// a resumed parse shares. Functions of the messages, so they take no part in equality: two
/// bodies with equal messages have equal digests.
#[derive(Debug, Clone, Default)]
struct Digests {
    hashes: std::sync::OnceLock<Vec<u64>>,
    tokens: std::sync::OnceLock<Vec<usize>>,
    marked: std::sync::OnceLock<Vec<bool>>,
    fingerprints: std::sync::OnceLock<Vec<u64>>,
    /// What this body's run counted late of the messages the parse left uncounted.
    late: crate::digests::LateCounts,
}

impl PartialEq for Digests {
    fn eq(&self, _: &Digests) -> bool {
        true
    }
}

/// One wire entry of the transcript array and the parse's state just before it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EntryMark {
    /// The entry's value span.
    span: Span,
    before: Mark,
}

/// How far a parse had read: how many normalized messages, `cache_control` breakpoints (outside
/// `tools`, which are counted last) and opaque entries it had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Mark {
    messages: usize,
    breakpoints: usize,
    opaque: usize,
}

/// A wire entry (a message, an `input` item, the top-level `system`) sluice could not read. It is
/// kept as one opaque message: in its place, never rewritten, so it leaves byte-identical while
/// the rest of the body is compacted. One part sluice does not know never costs the whole body
/// (an agent that adds a role or a block type next month still gets its tool outputs cut).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opaque {
    /// Index of the entry in the wire array (`None`: the top-level system prompt).
    pub index: Option<usize>,
    /// Why it could not be read (a shape, never content).
    pub reason: String,
}

/// Parses a request body of the given dialect.
///
/// # Errors
/// Any [`WireError`]; the body is then to be forwarded untouched.
pub fn parse(body: &[u8], dialect: Dialect) -> Result<ParsedBody<'_>, WireError> {
    parse_text(utf8(body)?, dialect)
}

/// `body` as text, or `NotUtf8`: the check every request body takes before it is read.
///
/// `simdutf8`'s check, not std's: the same answer (both validate fully), at several times the
/// speed on a long body. On a resumed turn, std's took a tenth of the turn (issue #34).
///
/// # Errors
/// `NotUtf8` when the body is not UTF-8.
pub fn utf8(body: &[u8]) -> Result<&str, WireError> {
    simdutf8::basic::from_utf8(body).map_err(|_| WireError::NotUtf8)
}

/// [`parse`] of a body already known to be UTF-8.
///
/// # Errors
/// Any [`WireError`] but `NotUtf8`.
pub fn parse_text(text: &str, dialect: Dialect) -> Result<ParsedBody<'_>, WireError> {
    let (root, index) = json::parse_indexed(text).map_err(WireError::NotJson)?;
    let mut parsed = ParsedBody::framed(text, dialect, root, &index)?;
    match dialect {
        Dialect::OpenAi => openai::normalize(&mut parsed, &index)?,
        Dialect::Anthropic => anthropic::normalize(&mut parsed, &index)?,
        Dialect::Responses => responses::normalize(&mut parsed, &index)?,
        Dialect::Gemini => gemini::normalize(&mut parsed, &index)?,
    }
    parsed.finish(&index, 0);
    Ok(parsed)
}

/// Copies each tool call's name and arguments onto the tool message that answers it, so components
/// can tell a `pytest` output from a file read without walking back through the transcript.
/// Messages before `from` were resolved by an earlier parse of the same bytes: they are read for
/// their calls, not written.
fn resolve_tool_names(messages: &mut [Message], from: usize) {
    let (before, after) = messages.split_at_mut(from.min(messages.len()));
    // The last call with an id wins, as when the whole transcript is walked in order.
    let mut earlier = EarlierCalls {
        before,
        index: None,
    };
    let mut calls: std::collections::HashMap<String, (String, String)> =
        std::collections::HashMap::new();
    for msg in after.iter_mut() {
        for call in &msg.tool_calls {
            calls.insert(call.id.clone(), (call.name.clone(), call.arguments.clone()));
        }
        if msg.role != Role::Tool {
            continue;
        }
        let Some(id) = &msg.tool_call_id else {
            continue;
        };
        let found = calls
            .get(id)
            .map(|(name, args)| (name.as_str(), args.as_str()))
            .or_else(|| earlier.find(id));
        if let Some((name, args)) = found {
            if msg.tool_name.is_none() {
                msg.tool_name = Some(name.to_owned());
            }
            msg.tool_arguments = Some(args.to_owned());
        }
    }
}

/// The calls of the messages an earlier parse resolved, looked up by id: the last call with
/// the id wins. The answer to a new output is nearly always among the last few messages (the
/// call a resumed turn's new output answers was the last turn's last message), so they are
/// searched from the end first; an index of every call is built only when that fails, which
/// keeps a body of orphan outputs linear.
struct EarlierCalls<'m> {
    before: &'m [Message],
    index: Option<std::collections::HashMap<&'m str, (&'m str, &'m str)>>,
}

impl<'m> EarlierCalls<'m> {
    /// Messages searched from the end before the index is built.
    const NEAREST: usize = 16;

    fn find(&mut self, id: &str) -> Option<(&'m str, &'m str)> {
        let before = self.before;
        let nearest = before.iter().rev().take(Self::NEAREST);
        for msg in nearest {
            if let Some(call) = msg.tool_calls.iter().rev().find(|c| c.id == id) {
                return Some((&call.name, &call.arguments));
            }
        }
        if before.len() <= Self::NEAREST {
            return None;
        }
        let index = self.index.get_or_insert_with(|| {
            let mut index = std::collections::HashMap::new();
            for msg in before {
                for call in &msg.tool_calls {
                    index.insert(
                        call.id.as_str(),
                        (call.name.as_str(), call.arguments.as_str()),
                    );
                }
            }
            index
        });
        index.get(id).copied()
    }
}

impl<'a> ParsedBody<'a> {
    /// A body whose top level is read and whose transcript is not yet: the spans every dialect
    /// needs, or why the body is not a request.
    fn framed(
        text: &'a str,
        dialect: Dialect,
        root: Span,
        index: &json::Index,
    ) -> Result<ParsedBody<'a>, WireError> {
        if json::kind_of(text, root) != json::Kind::Object {
            return Err(WireError::NotObject);
        }
        // Duplicate keys: the last wins, as in the providers' parsers (see `json::lookup`).
        let top_level = index.members(root).to_vec();
        let system_span = dialect
            .system_key()
            .and_then(|key| json::lookup(text, &top_level, key));
        let tools_span = json::lookup(text, &top_level, "tools");
        let messages_span = json::lookup(text, &top_level, dialect.transcript_key())
            .ok_or(WireError::NoMessages)?;
        if json::kind_of(text, messages_span) != json::Kind::Array {
            return Err(WireError::MessagesNotArray);
        }
        Ok(ParsedBody {
            text,
            dialect,
            messages: Vec::new(),
            slots: Vec::new(),
            existing_breakpoints: 0,
            messages_span,
            system_span,
            tools_span,
            root,
            top_level,
            opaque: Vec::new(),
            entries: Vec::new(),
            read: Mark::default(),
            digests: Digests::default(),
            run_carry: RunCarries::default(),
            mentions: mentions::Mentions::default(),
        })
    }

    /// What every parse ends with once the transcript is read: the breakpoints spent in
    /// `tools`, and tool names on the outputs from message `from` on.
    fn finish(&mut self, index: &json::Index, from: usize) {
        self.read = self.mark();
        if let Some(tools) = self.tools_span {
            let text = self.text;
            self.existing_breakpoints += index
                .elements(tools)
                .filter(|tool| json::lookup(text, index.members(*tool), "cache_control").is_some())
                .count();
        }
        resolve_tool_names(&mut self.messages, from);
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Entries kept opaque because they could not be read, in wire order.
    pub fn opaque_entries(&self) -> &[Opaque] {
        &self.opaque
    }

    /// Reads every entry of the transcript array with `read`, each behind
    /// [`ParsedBody::read_entry`].
    fn read_transcript(
        &mut self,
        doc: &json::Index,
        read: impl FnMut(&mut ParsedBody<'a>, &json::Index, usize, Span) -> Result<(), WireError>,
    ) {
        self.read_transcript_from(doc, 0, read);
    }

    /// [`ParsedBody::read_transcript`] from entry `from` on (the entries before it were read by
    /// an earlier parse of the same bytes), marking where each entry starts.
    fn read_transcript_from(
        &mut self,
        doc: &json::Index,
        from: usize,
        mut read: impl FnMut(&mut ParsedBody<'a>, &json::Index, usize, Span) -> Result<(), WireError>,
    ) {
        for (index, span) in doc.elements(self.messages_span).enumerate().skip(from) {
            let before = self.mark();
            self.entries.push(EntryMark { span, before });
            self.read_entry(Some(index), span, |parsed| read(parsed, doc, index, span));
        }
    }

    fn mark(&self) -> Mark {
        Mark {
            messages: self.messages.len(),
            breakpoints: self.existing_breakpoints,
            opaque: self.opaque.len(),
        }
    }

    /// Reads one wire entry spanning `span` with `read`. When `read` fails, whatever it pushed is
    /// taken back and the entry becomes one opaque message, so it keeps its place in the
    /// transcript and its bytes on the wire.
    fn read_entry(
        &mut self,
        index: Option<usize>,
        span: Span,
        read: impl FnOnce(&mut ParsedBody<'a>) -> Result<(), WireError>,
    ) {
        let (count, breakpoints) = (self.messages.len(), self.existing_breakpoints);
        let Err(err) = read(self) else {
            return;
        };
        self.messages.truncate(count);
        self.slots.truncate(count);
        // A breakpoint inside the entry is still spent on the wire; counted by its key, which
        // can only over-count (and so leave cacheinject fewer to add, never too many).
        let inside =
            memchr::memmem::find_iter(span.of(self.text).as_bytes(), "\"cache_control\"").count();
        self.existing_breakpoints = breakpoints + inside;
        self.messages.push(opaque_message());
        self.slots.push(Slot::default());
        let reason = match err {
            WireError::MalformedMessage { reason, .. } => reason,
            other => other.to_string(),
        };
        self.opaque.push(Opaque { index, reason });
    }

    /// The normalized messages, as parsed.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// `tokens::content_hash` of each message's content, in order: computed once per body and
    /// shared by the tracker and the pipeline; a resumed parse carries the shared messages'
    /// over from the last turn, so a turn hashes only what is new.
    pub fn content_hashes(&self) -> &[u64] {
        self.digests.hashes.get_or_init(|| {
            self.messages
                .iter()
                .map(crate::digests::content_hash)
                .collect()
        })
    }

    /// Each message's `digests::fingerprint_hashed`, what the session tracker matches turns by.
    /// A resumed parse carries the shared messages' over, like the content hashes.
    pub fn fingerprints(&self) -> &[u64] {
        self.digests.fingerprints.get_or_init(|| {
            self.messages
                .iter()
                .zip(self.content_hashes())
                .map(|(m, &hash)| crate::digests::fingerprint_hashed(m, hash))
                .collect()
        })
    }

    /// What the pipeline computes of each message before it runs: the content hashes, each
    /// message's `pipeline::message_tokens` (where the guards start from) and whether its
    /// content carries a marker (which every offload asks of every output). Like the content
    /// hashes, a resumed parse carries the shared messages' over, so a turn counts and scans
    /// only what is new (a count is a memo lookup per text at best, a tokenizer pass at worst).
    pub fn digests(&self) -> crate::digests::Digests<'_> {
        let content = self.content_hashes();
        let tokens = self.digests.tokens.get_or_init(|| {
            self.messages
                .iter()
                .zip(content)
                .map(|(m, &hash)| crate::digests::message_tokens_hashed(m, hash))
                .collect()
        });
        let marked = self
            .digests
            .marked
            .get_or_init(|| self.messages.iter().map(crate::digests::marked).collect());
        crate::digests::Digests {
            content,
            tokens,
            marked,
            late: Some(&self.digests.late),
        }
    }

    /// What the last turn's pipeline run did to the messages this body shares with it (a
    /// resumed parse carries it, truncated to them), for the pipeline to forward as it did.
    pub fn run_carry(&self) -> Option<&crate::carry::RunCarry> {
        self.run_carry.carried.as_ref()
    }

    /// Keeps what this turn's run did, for the next body of the conversation. The first run
    /// of a turn to leave one is kept: any other ran under the same stamp (and did the same)
    /// or under another, which the next turn tells apart.
    pub fn leave_run_carry(&self, carry: crate::carry::RunCarry) {
        let _ = self.run_carry.left.set(carry);
    }

    /// The original body text.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// Whether the body says `mention` anywhere (a text included): searched once, and in a
    /// resumed body only past the bytes it shares with the last one.
    pub fn mentions(&self, mention: Mention) -> bool {
        self.mentions.first(self.text.as_bytes(), mention).is_some()
    }

    /// `cache_control` breakpoints the caller already spent (system + tools + messages).
    pub fn existing_breakpoints(&self) -> usize {
        self.existing_breakpoints
    }

    /// Span of the top-level object.
    pub fn root(&self) -> Span {
        self.root
    }

    /// The value of a top-level field (`stream`, `tool_choice`, ...), without rescanning.
    pub fn field(&self, key: &str) -> Option<Span> {
        json::lookup(self.text, &self.top_level, key)
    }

    /// Where a byte offset of the original body lands in a rewrite of it, for an offset outside
    /// every rewritten value. Write-back only edits inside `messages` and `system`, so an offset
    /// past both moves by the whole length change and one before both does not move; anything
    /// else has no answer here.
    pub fn map_offset(&self, offset: usize, rewritten_len: usize) -> Option<usize> {
        let edited_start = self.system_span.map_or(self.messages_span.start, |s| {
            s.start.min(self.messages_span.start)
        });
        let edited_end = self.system_span.map_or(self.messages_span.end, |s| {
            s.end.max(self.messages_span.end)
        });
        if offset >= edited_end {
            (offset + rewritten_len).checked_sub(self.text.len())
        } else if offset < edited_start {
            Some(offset)
        } else {
            None
        }
    }

    /// Span of the `messages` array (`input` for the Responses API).
    pub fn messages_span(&self) -> Span {
        self.messages_span
    }

    /// Span of the top-level `system` value (Anthropic) or `instructions` (Responses), if any.
    pub fn system_span(&self) -> Option<Span> {
        self.system_span
    }

    /// Span of the top-level `tools` array, if any.
    pub fn tools_span(&self) -> Option<Span> {
        self.tools_span
    }
}

/// A wire entry sluice does not read: kept in order, never rewritten. It is an assistant
/// message with no text and no calls, which every component passes over.
fn opaque_message() -> Message {
    Message {
        rewritable: false,
        ..Message::text(Role::Assistant, String::new())
    }
}

/// Joined text of text blocks/parts: the model-visible text of block content.
/// Takes the parts by value so a single part (the common case) moves instead of being copied.
fn join_texts<S: std::borrow::Borrow<str> + Into<String>>(mut parts: Vec<S>) -> String {
    if parts.len() == 1 {
        return parts.pop().map(Into::into).unwrap_or_default();
    }
    parts.join("\n")
}

/// Reads an optional string field, with a clear reason when present but not a string.
fn string_field<'t>(
    text: &'t str,
    doc: &json::Index,
    fields: &[json::Entry],
    key: &str,
    index: usize,
) -> Result<Option<(Cow<'t, str>, Span)>, WireError> {
    let Some(span) = json::lookup(text, fields, key) else {
        return Ok(None);
    };
    match json::kind_of(text, span) {
        json::Kind::String => {
            let value = doc
                .string(text, span)
                .map_err(|e| malformed(index, e.to_string()))?;
            Ok(Some((value, span)))
        }
        json::Kind::Null => Ok(None),
        _ => Err(malformed(index, format!("`{key}` is not a string"))),
    }
}

/// The fields of message `index` and its `role`, or why it is not a readable message.
fn message_head<'i, 't>(
    text: &'t str,
    doc: &'i json::Index,
    span: Span,
    index: usize,
) -> Result<(&'i [json::Entry], Cow<'t, str>), WireError> {
    if json::kind_of(text, span) != json::Kind::Object {
        return Err(malformed(index, "not an object"));
    }
    let fields = doc.members(span);
    let (role, _) = string_field(text, doc, fields, "role", index)?
        .ok_or_else(|| malformed(index, "no `role`"))?;
    Ok((fields, role))
}

fn malformed(index: usize, reason: impl Into<String>) -> WireError {
    WireError::MalformedMessage {
        index,
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests;
