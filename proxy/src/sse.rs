//! Server-sent events: frame splitting, the relay that streams until an expand call starts and
//! renumbers a continuation into the same stream, and folding a held turn into the non-streamed
//! response shape.
//!
//! Upstream chunks arrive at TCP boundaries, not event boundaries, so frames are cut at the
//! blank line. A marker-free stream never comes through here: it is piped as is.

use bytes::Bytes;
use engine::marker::EXPAND_TOOL_NAME;
use engine::wire::Dialect;
use engine::wire::json::{self as wire_json, Kind, Span};
use serde_json::{Value, json};

use crate::usage_sum::UsageSum;

/// The most one frame, or the held part of a turn, may grow to. Past it the expand loop stops
/// reading the stream and relays the rest untouched: memory stays bounded whatever an upstream
/// sends, and a well-formed expand turn is a few kilobytes.
pub const MAX_HELD_BYTES: usize = 16 << 20;

/// Cuts a byte stream into frames at blank lines (`\n\n` or `\r\n\r\n`), in one pass: every
/// byte is scanned once however the stream is chunked, and consumed bytes are dropped once per
/// chunk, so a huge frame costs linear time, not a rescan per chunk.
#[derive(Debug, Default)]
pub struct Frames {
    buf: Vec<u8>,
    /// Bytes of `buf` already scanned without finding a boundary.
    scanned: usize,
}

impl Frames {
    /// Adds a chunk and returns the frames it completed (see [`Frames::over_bound`] for the
    /// unfinished one).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        self.buf.extend_from_slice(chunk);
        let mut frames = Vec::new();
        let mut start = 0;
        // A separator may straddle the last scan's end: look back three bytes.
        let mut from = self.scanned.saturating_sub(3);
        while let Some(end) = frame_end(&self.buf, from) {
            frames.push(self.buf[start..end].to_vec());
            start = end;
            from = end;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        frames
    }

    /// The unfinished frame is over [`MAX_HELD_BYTES`]: the caller stops splitting and relays
    /// the rest (its bytes stay readable through [`Frames::into_rest`]).
    pub fn over_bound(&self) -> bool {
        self.buf.len() > MAX_HELD_BYTES
    }

    /// The bytes after the last complete frame.
    pub fn into_rest(self) -> Vec<u8> {
        self.buf
    }
}

/// The end (past the separator) of the first frame whose blank line starts at or after `from`'s
/// newline scan: each `\n` is a candidate for `\n\n` or the second half of `\r\n\r\n`.
pub(crate) fn frame_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(offset) = memchr::memchr(b'\n', &buf[at.min(buf.len())..]) {
        let p = at + offset;
        if buf.get(p + 1) == Some(&b'\n') {
            return Some(p + 2);
        }
        if p >= 1 && buf[p - 1] == b'\r' && buf.get(p + 1..p + 3) == Some(b"\r\n") {
            return Some(p + 3);
        }
        at = p + 1;
    }
    None
}

/// Splits complete frames off the front of `buf` (the one-shot form of [`Frames`]).
pub fn take_frames(buf: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut frames = Frames::default();
    let out = frames.push(&std::mem::take(buf));
    *buf = frames.into_rest();
    out
}

/// The JSON of a frame's `data:` lines, if any (and not `[DONE]`).
pub fn frame_data(frame: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(frame).ok()?;
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() || data == ["[DONE]"] {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
}

/// Whether an event starts an expand call.
fn starts_expand(dialect: Dialect, data: &Value) -> bool {
    match dialect {
        Dialect::Anthropic => {
            data["type"] == "content_block_start"
                && data["content_block"]["type"] == "tool_use"
                && data["content_block"]["name"] == EXPAND_TOOL_NAME
        }
        Dialect::OpenAi => data["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .is_some_and(|calls| {
                calls
                    .iter()
                    .any(|c| c["function"]["name"] == EXPAND_TOOL_NAME)
            }),
        Dialect::Responses => {
            data["type"] == "response.output_item.added"
                && data["item"]["type"] == "function_call"
                && data["item"]["name"] == EXPAND_TOOL_NAME
        }
        // A Gemini chunk carries whole parts: a call arrives complete in one.
        Dialect::Gemini => data["candidates"][0]["content"]["parts"]
            .as_array()
            .is_some_and(|parts| {
                parts
                    .iter()
                    .any(|p| p["functionCall"]["name"] == EXPAND_TOOL_NAME)
            }),
    }
}

/// Whether an event opens one more unit the client indexes: an Anthropic content block or a
/// Responses output item (OpenAI chat chunks carry no such index across rounds).
fn opens_unit(dialect: Dialect, data: &Value) -> bool {
    match dialect {
        Dialect::Anthropic => data["type"] == "content_block_start",
        Dialect::Responses => data["type"] == "response.output_item.added",
        Dialect::OpenAi | Dialect::Gemini => false,
    }
}

/// The state of one streamed response across expand rounds: what has gone to the client, what
/// is held, and how a continuation's events are renumbered to read as one stream.
#[derive(Debug)]
pub struct Relay {
    dialect: Dialect,
    /// This round continues an earlier one: its opening event is dropped and its content block
    /// indices shifted past the blocks the client already has.
    continuing: bool,
    /// Anthropic content blocks or Responses output items the client has seen start, across
    /// rounds.
    blocks_sent: u64,
    offset: u64,
    /// Responses: the next `sequence_number` the client expects, and the shift that gives a
    /// continuation's events their place after it.
    next_sequence: u64,
    sequence_offset: u64,
    /// Responses: the output items the client has seen finished, so the closing
    /// `response.completed` of a continuation lists the whole turn, not only its last round.
    items_sent: Vec<Value>,
    /// How many of `items_sent` earlier rounds sent (this round's are in its own output).
    items_before: usize,
    /// Responses: the id the first round's `response.created` gave the client. Every later
    /// lifecycle event carries it too: the SDKs refuse a stream whose response id changes.
    response_id: Option<Value>,
    holding: bool,
    held: Vec<u8>,
    /// Every data event of this round, for folding the turn into a response.
    events: Vec<Value>,
    /// Bytes of the frames behind `events`, and of `items_sent`: both are bounded by
    /// [`MAX_HELD_BYTES`] like the held part. A round past it is not folded (no expand round
    /// for it: the agent gets it as it came) and later items are not copied.
    events_bytes: usize,
    items_bytes: usize,
    /// This round's token counts, as its events state them.
    round_usage: UsageSum,
    /// A content block of this round has started (a `ping` before it belongs to the opening).
    opened_round: bool,
    /// The counts of the rounds already answered, which the agent never saw: added into the
    /// usage the last round reports (`usage_sum`).
    carried: UsageSum,
}

impl Relay {
    pub fn new(dialect: Dialect) -> Relay {
        Relay {
            dialect,
            continuing: false,
            blocks_sent: 0,
            offset: 0,
            next_sequence: 0,
            sequence_offset: 0,
            items_sent: Vec::new(),
            items_before: 0,
            response_id: None,
            events_bytes: 0,
            items_bytes: 0,
            holding: false,
            held: Vec::new(),
            events: Vec::new(),
            round_usage: UsageSum::default(),
            opened_round: false,
            carried: UsageSum::default(),
        }
    }

    /// Bytes held back in this round.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Whether an expand call started in this round (and the rest of it is held).
    pub fn holding(&self) -> bool {
        self.holding
    }

    /// Takes complete frames from upstream and returns the bytes to send the client now.
    pub fn push_frames(&mut self, frames: Vec<Vec<u8>>) -> Bytes {
        let mut out = Vec::new();
        let frames = if self.dialect == Dialect::Gemini && !self.holding {
            frames.into_iter().flat_map(split_gemini_chunk).collect()
        } else {
            frames
        };
        for frame in frames {
            let data = frame_data(&frame);
            let frame_len = frame.len();
            if let Some(data) = &data
                && !self.holding
                && starts_expand(self.dialect, data)
            {
                self.holding = true;
            }
            let carries_usage = data.as_ref().is_some_and(|data| self.note_usage(data));
            if data
                .as_ref()
                .is_some_and(|data| opens_unit(self.dialect, data))
            {
                self.opened_round = true;
            }
            let Some(mut frame) = self.renumber(frame, data.as_ref()) else {
                continue;
            };
            // Held frames too: a held round that is released as it came (not all expand
            // calls, out of rounds, a failed continuation) is what the agent reads.
            if carries_usage && !self.carried.is_empty() {
                frame = self.with_total_usage(frame);
            }
            if self.holding {
                self.held.extend_from_slice(&frame);
            } else {
                if let Some(data) = &data {
                    self.note_sent(data);
                }
                out.extend_from_slice(&frame);
            }
            if let Some(data) = data {
                self.events_bytes = self.events_bytes.saturating_add(frame_len);
                if self.events_bytes <= MAX_HELD_BYTES {
                    self.events.push(data);
                }
            }
        }
        Bytes::from(out)
    }

    /// Lays an event's usage over this round's counts; whether the event carries usage.
    fn note_usage(&mut self, data: &Value) -> bool {
        let usage = match (self.dialect, data["type"].as_str()) {
            (Dialect::Anthropic, Some("message_start")) => &data["message"]["usage"],
            (Dialect::Responses, Some(kind)) if kind.starts_with("response.") => {
                &data["response"]["usage"]
            }
            (Dialect::Gemini, _) => &data["usageMetadata"],
            _ => &data["usage"],
        };
        if !usage.is_object() {
            return false;
        }
        self.round_usage.overlay(usage);
        // Anthropic's `message_start` is the first round's alone (a continuation's is dropped):
        // the total goes where every round restates its counts, `message_delta`.
        !(self.dialect == Dialect::Anthropic && data["type"] == "message_start")
    }

    /// A frame whose usage now reads the whole turn: the rounds answered plus this one.
    fn with_total_usage(&self, frame: Vec<u8>) -> Vec<u8> {
        let total = self.carried.plus(&self.round_usage);
        let path: &[&str] = match self.dialect {
            Dialect::Responses => &["response", "usage"],
            Dialect::Anthropic | Dialect::OpenAi => &["usage"],
            Dialect::Gemini => &["usageMetadata"],
        };
        splice_frame(&frame, |text, root| {
            let usage = at_path(text, root, path)?;
            Some(vec![(usage, total.write_into(text, usage))])
        })
        .unwrap_or(frame)
    }

    /// Keeps count of what the client has been sent (as the first round numbered it).
    fn note_sent(&mut self, data: &Value) {
        if opens_unit(self.dialect, data) {
            self.blocks_sent += 1;
        }
        if self.dialect != Dialect::Responses {
            return;
        }
        // `data` is the event as upstream numbered it; the client saw it shifted.
        if let Some(sequence) = data["sequence_number"].as_u64() {
            let shift = if self.continuing {
                self.sequence_offset
            } else {
                0
            };
            self.next_sequence = self
                .next_sequence
                .max(sequence.saturating_add(shift).saturating_add(1));
        }
        if data["type"] == "response.created"
            && self.response_id.is_none()
            && data["response"]["id"].is_string()
        {
            self.response_id = Some(data["response"]["id"].clone());
        }
        if data["type"] == "response.output_item.done" && self.items_sent.len() < MAX_INDEX {
            let item = data["item"].clone();
            self.items_bytes = self.items_bytes.saturating_add(item.to_string().len());
            if self.items_bytes <= MAX_HELD_BYTES {
                self.items_sent.push(item);
            }
        }
    }

    /// A continuation's frame as it must read inside the first stream. The first round passes
    /// bytes as they are.
    fn renumber(&self, frame: Vec<u8>, data: Option<&Value>) -> Option<Vec<u8>> {
        if !self.continuing {
            return Some(frame);
        }
        match self.dialect {
            Dialect::Anthropic => self.renumber_anthropic(frame, data),
            Dialect::Responses => self.renumber_responses(frame, data),
            // Neither numbers anything across a stream: a continuation's chunks read as more
            // chunks of the same reply.
            Dialect::OpenAi | Dialect::Gemini => Some(frame),
        }
    }

    /// Anthropic drops the second `message_start` and shifts block indices.
    fn renumber_anthropic(&self, frame: Vec<u8>, data: Option<&Value>) -> Option<Vec<u8>> {
        let Some(data) = data else { return Some(frame) };
        // A continuation's opening (`message_start` and the `ping` upstream sends right after
        // it) would read as a second message inside the first.
        if data["type"] == "message_start" || (data["type"] == "ping" && !self.opened_round) {
            return None;
        }
        let Some(index) = data["index"].as_u64() else {
            return Some(frame);
        };
        let shifted = index.saturating_add(self.offset);
        // The upstream's bytes with the one number changed; re-serialized only when the frame
        // is not one line of JSON.
        if let Some(spliced) = splice_frame(&frame, |text, root| {
            Some(vec![(
                wire_json::get(text, root, "index")?,
                shifted.to_string(),
            )])
        }) {
            return Some(spliced);
        }
        let mut data = data.clone();
        data["index"] = Value::from(index.saturating_add(self.offset));
        let kind = data["type"].as_str().unwrap_or("message").to_owned();
        Some(format!("event: {kind}\ndata: {data}\n\n").into_bytes())
    }

    /// Responses drops the continuation's `response.created` and `response.in_progress`, shifts
    /// `output_index` past the items the client has and `sequence_number` past the events it
    /// has, gives the closing response the first round's id, and puts the earlier rounds' items
    /// in front of its `output`.
    fn renumber_responses(&self, frame: Vec<u8>, data: Option<&Value>) -> Option<Vec<u8>> {
        let Some(data) = data else { return Some(frame) };
        let kind = data["type"].as_str().unwrap_or("").to_owned();
        if matches!(kind.as_str(), "response.created" | "response.in_progress") {
            return None;
        }
        if let Some(spliced) = splice_frame(&frame, |text, root| self.responses_edits(text, root)) {
            return Some(spliced);
        }
        let mut data = data.clone();
        if let Some(index) = data["output_index"].as_u64() {
            data["output_index"] = Value::from(index.saturating_add(self.offset));
        }
        if let Some(sequence) = data["sequence_number"].as_u64() {
            data["sequence_number"] = Value::from(sequence.saturating_add(self.sequence_offset));
        }
        if let (Some(response), Some(id)) = (
            data.get_mut("response").and_then(Value::as_object_mut),
            &self.response_id,
        ) {
            response.insert("id".into(), id.clone());
        }
        if let Some(output) = data
            .get_mut("response")
            .and_then(|r| r.get_mut("output"))
            .and_then(Value::as_array_mut)
        {
            let mut whole = self.items_sent[..self.items_before].to_vec();
            whole.append(output);
            *output = whole;
        }
        Some(format!("event: {kind}\ndata: {data}\n\n").into_bytes())
    }

    /// The splices [`Relay::renumber_responses`] makes, on the upstream's bytes: the indices
    /// shifted, the first round's id, the earlier rounds' items in front of `output`.
    fn responses_edits(&self, text: &str, root: Span) -> Option<Vec<(Span, String)>> {
        let mut edits = Vec::new();
        let number = |key: &str, shift: u64| -> Option<Option<(Span, String)>> {
            let Some(span) = wire_json::get(text, root, key) else {
                return Some(None);
            };
            let value: u64 = span.of(text).parse().ok()?;
            Some(Some((span, value.saturating_add(shift).to_string())))
        };
        edits.extend(number("output_index", self.offset)?);
        edits.extend(number("sequence_number", self.sequence_offset)?);
        if let Some(response) = wire_json::get(text, root, "response") {
            if wire_json::kind_of(text, response) != Kind::Object {
                return None;
            }
            if let Some(id) = &self.response_id {
                match wire_json::get(text, response, "id") {
                    Some(span) => edits.push((span, id.to_string())),
                    // No id of its own: the fallback path inserts one.
                    None => return None,
                }
            }
            if let Some(output) = wire_json::get(text, response, "output")
                && self.items_before > 0
            {
                if wire_json::kind_of(text, output) != Kind::Array {
                    return None;
                }
                let earlier: Vec<String> = self.items_sent[..self.items_before]
                    .iter()
                    .map(Value::to_string)
                    .collect();
                let inner = output.of(text)[1..output.len() - 1].trim();
                let joined = if inner.is_empty() {
                    format!("[{}]", earlier.join(","))
                } else {
                    format!("[{},{inner}]", earlier.join(","))
                };
                edits.push((output, joined));
            }
        }
        Some(edits)
    }

    /// The held part, to release verbatim (the turn was not all expand calls, or the
    /// continuation failed).
    pub fn release_held(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.held))
    }

    /// This round's whole assistant turn, in the shape of a non-streamed response.
    pub fn take_turn(&mut self) -> Value {
        let events = std::mem::take(&mut self.events);
        if std::mem::take(&mut self.events_bytes) > MAX_HELD_BYTES {
            // Not all of the round was kept: folding part of it would misstate the turn.
            return Value::Null;
        }
        aggregate(self.dialect, &events)
    }

    /// The held turn was answered; the next upstream response continues this stream.
    pub fn continue_in_place(&mut self) {
        self.continuing = true;
        self.holding = false;
        self.held.clear();
        self.events.clear();
        self.events_bytes = 0;
        self.offset = self.blocks_sent;
        self.sequence_offset = self.next_sequence;
        self.items_before = self.items_sent.len();
        self.carried = self.carried.plus(&std::mem::take(&mut self.round_usage));
        self.opened_round = false;
    }
}

/// The value at `path` (object keys) under `root`.
fn at_path(text: &str, root: Span, path: &[&str]) -> Option<Span> {
    path.iter()
        .try_fold(root, |span, key| wire_json::get(text, span, key))
}

/// `frame` with edits made inside the JSON of its one `data:` line, every other byte kept
/// (the event line, the spacing, the key order). `edits` gets the JSON text and its root and
/// returns spans of it to replace; `None` from it, or a frame whose data is not one line of
/// JSON, gives `None`.
fn splice_frame(
    frame: &[u8],
    edits: impl FnOnce(&str, Span) -> Option<Vec<(Span, String)>>,
) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(frame).ok()?;
    let mut data_lines = text
        .match_indices("data:")
        .filter(|(at, _)| *at == 0 || text.as_bytes()[at - 1] == b'\n');
    let (at, _) = data_lines.next()?;
    if data_lines.next().is_some() {
        return None;
    }
    let start = at + "data:".len() + usize::from(text[at + 5..].starts_with(' '));
    let end = text[start..].find('\n').map_or(text.len(), |n| start + n);
    let end = if text[..end].ends_with('\r') {
        end - 1
    } else {
        end
    };
    let json_text = &text[start..end];
    let root = wire_json::parse_document(json_text).ok()?;
    if wire_json::kind_of(json_text, root) != Kind::Object {
        return None;
    }
    let mut edits = edits(json_text, root)?;
    edits.sort_by_key(|(span, _)| span.start);
    let mut out = String::with_capacity(frame.len() + 64);
    out.push_str(&text[..start]);
    let mut cursor = 0;
    for (span, replacement) in edits {
        if span.start < cursor {
            return None;
        }
        out.push_str(&json_text[cursor..span.start]);
        out.push_str(&replacement);
        cursor = span.end;
    }
    out.push_str(&json_text[cursor..]);
    out.push_str(&text[end..]);
    Some(out.into_bytes())
}

/// Folds a whole held stream into the shape of a non-streamed response, so the non-stream
/// expand machinery (`expand::expand_calls`, `expand::continuation`) serves both.
pub fn aggregate(dialect: Dialect, frames: &[Value]) -> Value {
    match dialect {
        Dialect::Anthropic => aggregate_anthropic(frames),
        Dialect::OpenAi => aggregate_openai(frames),
        Dialect::Responses => aggregate_responses(frames),
        Dialect::Gemini => aggregate_gemini(frames),
    }
}

/// Content blocks (Anthropic) or tool calls (OpenAI) one held turn may index. A provider's turn
/// has a handful; an index past this is a malformed stream, and its event is skipped rather than
/// allocated for (an index of 10^18 must not reserve memory).
const MAX_INDEX: usize = 1024;

/// `object[key]` for writing, when `object` is an object: a stream whose block is a string or a
/// number is malformed, and is left as it is rather than indexed (serde_json panics there).
fn field_mut<'v>(object: &'v mut Value, key: &str) -> Option<&'v mut Value> {
    Some(
        object
            .as_object_mut()?
            .entry(key.to_owned())
            .or_insert(Value::Null),
    )
}

fn aggregate_anthropic(frames: &[Value]) -> Value {
    // index → (block, accumulated partial JSON for tool_use input)
    let mut blocks: Vec<(Value, String)> = Vec::new();
    for data in frames {
        let index = data["index"].as_u64().unwrap_or(0) as usize;
        if index >= MAX_INDEX {
            continue;
        }
        match data["type"].as_str() {
            Some("content_block_start") => {
                if blocks.len() <= index {
                    blocks.resize(index + 1, (Value::Null, String::new()));
                }
                blocks[index] = (data["content_block"].clone(), String::new());
            }
            Some("content_block_delta") => {
                let Some((block, partial)) = blocks.get_mut(index) else {
                    continue;
                };
                let delta = &data["delta"];
                let field = match delta["type"].as_str() {
                    Some("text_delta") => "text",
                    Some("thinking_delta") => "thinking",
                    Some("signature_delta") => "signature",
                    Some("input_json_delta") => {
                        partial.push_str(delta["partial_json"].as_str().unwrap_or(""));
                        continue;
                    }
                    _ => continue,
                };
                if let Some(target) = field_mut(block, field) {
                    append(target, &delta[field]);
                }
            }
            _ => {}
        }
    }
    let content: Vec<Value> = blocks
        .into_iter()
        .filter(|(block, _)| !block.is_null())
        .map(|(mut block, partial)| {
            if block["type"] == "tool_use"
                && !partial.is_empty()
                && let Some(input) = field_mut(&mut block, "input")
            {
                *input = serde_json::from_str(&partial).unwrap_or_else(|_| json!({}));
            }
            block
        })
        .collect();
    json!({ "content": content })
}

fn append(target: &mut Value, piece: &Value) {
    let piece = piece.as_str().unwrap_or("");
    match target {
        Value::String(s) => s.push_str(piece),
        other => *other = Value::String(piece.to_owned()),
    }
}

fn aggregate_openai(frames: &[Value]) -> Value {
    let mut content = String::new();
    let mut calls: Vec<Value> = Vec::new();
    for data in frames {
        let delta = &data["choices"][0]["delta"];
        if let Some(text) = delta["content"].as_str() {
            content.push_str(text);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(0) as usize;
            if index >= MAX_INDEX {
                continue;
            }
            if calls.len() <= index {
                calls.resize(index + 1, json!({"id": "", "type": "function", "function": {"name": "", "arguments": ""}}));
            }
            let slot = &mut calls[index];
            if let Some(id) = call["id"].as_str() {
                slot["id"] = Value::String(id.to_owned());
            }
            append(&mut slot["function"]["name"], &call["function"]["name"]);
            append(
                &mut slot["function"]["arguments"],
                &call["function"]["arguments"],
            );
        }
    }
    let content = if content.is_empty() {
        Value::Null
    } else {
        Value::String(content)
    };
    json!({ "choices": [{ "message": { "role": "assistant", "content": content, "tool_calls": calls } }] })
}

/// A Responses stream folded into `{"output": [...]}`: the closing response's own `output` when
/// the stream got that far, else the items pieced together from their events.
fn aggregate_responses(frames: &[Value]) -> Value {
    let mut items: Vec<Value> = Vec::new();
    for data in frames {
        let kind = data["type"].as_str().unwrap_or("");
        if matches!(kind, "response.completed" | "response.incomplete")
            && let Some(output) = data["response"]["output"].as_array()
        {
            return json!({ "output": output });
        }
        let index = data["output_index"].as_u64().unwrap_or(0) as usize;
        if index >= MAX_INDEX {
            continue;
        }
        match kind {
            "response.output_item.added" | "response.output_item.done" => {
                if items.len() <= index {
                    items.resize(index + 1, Value::Null);
                }
                items[index] = data["item"].clone();
            }
            "response.function_call_arguments.delta" => {
                if let Some(target) = items.get_mut(index).and_then(|i| field_mut(i, "arguments")) {
                    append(target, &data["delta"]);
                }
            }
            _ => {}
        }
    }
    items.retain(|item| !item.is_null());
    json!({ "output": items })
}

/// A Gemini chunk that carries an expand call beside other parts (text said before the call),
/// as two chunks: the other parts first, which the client gets, then the calls with the rest
/// of the chunk (its finish reason, usage), which the relay holds. Held whole, the text would
/// reach the model in the continuation and never the agent. Any other frame stays as it came.
fn split_gemini_chunk(frame: Vec<u8>) -> Vec<Vec<u8>> {
    let Some(data) = frame_data(&frame) else {
        return vec![frame];
    };
    let Some(parts) = data["candidates"][0]["content"]["parts"].as_array() else {
        return vec![frame];
    };
    let is_call = |p: &Value| p.get("functionCall").is_some();
    if !starts_expand(Dialect::Gemini, &data) || parts.iter().all(is_call) {
        return vec![frame];
    }
    let (calls, said): (Vec<Value>, Vec<Value>) = parts.iter().cloned().partition(is_call);
    let end = if frame.ends_with(b"\r\n\r\n") {
        "\r\n\r\n"
    } else {
        "\n\n"
    };
    let mut first = data.clone();
    if let Some(object) = first.as_object_mut() {
        object.remove("usageMetadata");
    }
    first["candidates"][0]["content"]["parts"] = Value::Array(said);
    if let Some(candidate) = first["candidates"][0].as_object_mut() {
        candidate.remove("finishReason");
    }
    let mut second = data;
    second["candidates"][0]["content"]["parts"] = Value::Array(calls);
    vec![
        format!("data: {first}{end}").into_bytes(),
        format!("data: {second}{end}").into_bytes(),
    ]
}

/// A Gemini stream folded into one response: every chunk's parts of the first candidate, in
/// order. A text part that is only text joins the one before it when that is only text too
/// (a reply streams its text a few words per chunk); every other part stays as it came, so a
/// `thoughtSignature` stays on the part that carried it.
fn aggregate_gemini(frames: &[Value]) -> Value {
    // (`Map`'s index panics on a missing key: the fuzzer found it.)
    let plain = |part: &Value| {
        part.as_object()
            .is_some_and(|p| p.len() == 1 && p.get("text").is_some_and(Value::is_string))
    };
    let mut parts: Vec<Value> = Vec::new();
    for part in frames
        .iter()
        .filter_map(|data| data["candidates"][0]["content"]["parts"].as_array())
        .flatten()
    {
        match parts.last_mut() {
            Some(last) if plain(last) && plain(part) => {
                append(&mut last["text"], &part["text"]);
            }
            _ => parts.push(part.clone()),
        }
    }
    json!({ "candidates": [{ "content": { "role": "model", "parts": parts } }] })
}

#[cfg(test)]
mod tests;
