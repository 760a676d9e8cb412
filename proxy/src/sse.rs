//! Server-sent events: frame splitting, the relay that streams until an expand call starts and
//! renumbers a continuation into the same stream, and folding a held turn into the non-streamed
//! response shape.
//!
//! Upstream chunks arrive at TCP boundaries, not event boundaries, so frames are cut at the
//! blank line. A marker-free stream never comes through here: it is piped as is.

use bytes::Bytes;
use engine::marker::EXPAND_TOOL_NAME;
use engine::wire::Dialect;
use serde_json::{Value, json};

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
fn frame_end(buf: &[u8], from: usize) -> Option<usize> {
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
    /// Anthropic content blocks the client has seen start, across rounds.
    blocks_sent: u64,
    offset: u64,
    holding: bool,
    held: Vec<u8>,
    /// Every data event of this round, for folding the turn into a response.
    events: Vec<Value>,
}

impl Relay {
    pub fn new(dialect: Dialect) -> Relay {
        Relay {
            dialect,
            continuing: false,
            blocks_sent: 0,
            offset: 0,
            holding: false,
            held: Vec::new(),
            events: Vec::new(),
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
        for frame in frames {
            let data = frame_data(&frame);
            if let Some(data) = &data
                && !self.holding
                && starts_expand(self.dialect, data)
            {
                self.holding = true;
            }
            let Some(frame) = self.renumber(frame, data.as_ref()) else {
                continue;
            };
            if self.holding {
                self.held.extend_from_slice(&frame);
            } else {
                if self.dialect == Dialect::Anthropic
                    && data
                        .as_ref()
                        .is_some_and(|d| d["type"] == "content_block_start")
                {
                    self.blocks_sent += 1;
                }
                out.extend_from_slice(&frame);
            }
            if let Some(data) = data {
                self.events.push(data);
            }
        }
        Bytes::from(out)
    }

    /// A continuation's frame as it must read inside the first stream: Anthropic drops the
    /// second `message_start` and shifts block indices. The first round passes bytes as they are.
    fn renumber(&self, frame: Vec<u8>, data: Option<&Value>) -> Option<Vec<u8>> {
        if !self.continuing || self.dialect != Dialect::Anthropic {
            return Some(frame);
        }
        let Some(data) = data else { return Some(frame) };
        if data["type"] == "message_start" {
            return None;
        }
        let Some(index) = data["index"].as_u64() else {
            return Some(frame);
        };
        let mut data = data.clone();
        data["index"] = Value::from(index + self.offset);
        let kind = data["type"].as_str().unwrap_or("message").to_owned();
        Some(format!("event: {kind}\ndata: {data}\n\n").into_bytes())
    }

    /// The held part, to release verbatim (the turn was not all expand calls, or the
    /// continuation failed).
    pub fn release_held(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.held))
    }

    /// This round's whole assistant turn, in the shape of a non-streamed response.
    pub fn take_turn(&mut self) -> Value {
        aggregate(self.dialect, &std::mem::take(&mut self.events))
    }

    /// The held turn was answered; the next upstream response continues this stream.
    pub fn continue_in_place(&mut self) {
        self.continuing = true;
        self.holding = false;
        self.held.clear();
        self.events.clear();
        self.offset = self.blocks_sent;
    }
}

/// Folds a whole held stream into the shape of a non-streamed response, so the non-stream
/// expand machinery (`expand::expand_calls`, `expand::continuation`) serves both.
pub fn aggregate(dialect: Dialect, frames: &[Value]) -> Value {
    match dialect {
        Dialect::Anthropic => aggregate_anthropic(frames),
        Dialect::OpenAi => aggregate_openai(frames),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the fuzzer (`tests/it/fuzz.rs`, target `sse`): a held turn whose block is not an
    /// object, or whose index is absurd, folds without panicking or allocating for the index.
    #[test]
    fn malformed_held_turns_fold_without_panicking() {
        let frames = [
            json!({"type": "content_block_start", "index": 0, "content_block": "a string"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "name": 5}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
            json!({"type": "content_block_start", "index": 1_000_000_000_000u64, "content_block": {}}),
        ];
        let turn = aggregate(Dialect::Anthropic, &frames);
        assert_eq!(turn["content"][0], "a string");
        assert_eq!(turn["content"][1]["input"], json!({}));
        let calls =
            [json!({"choices": [{"delta": {"tool_calls": [{"index": 1_000_000_000_000u64}]}}]})];
        let turn = aggregate(Dialect::OpenAi, &calls);
        assert_eq!(turn["choices"][0]["message"]["tool_calls"], json!([]));
    }

    #[test]
    fn frames_are_cut_at_blank_lines_across_chunks() {
        let mut buf = b"event: a\ndata: {\"x\":1}\n\nevent: b\ndata: {\"x\"".to_vec();
        let frames = take_frames(&mut buf);
        assert_eq!(frames.len(), 1);
        assert_eq!(frame_data(&frames[0]).unwrap()["x"], 1);
        buf.extend_from_slice(b":2}\r\n\r\n");
        let frames = take_frames(&mut buf);
        assert_eq!(frame_data(&frames[0]).unwrap()["x"], 2);
        assert!(buf.is_empty());
        assert_eq!(frame_data(b"data: [DONE]\n\n"), None);
    }

    /// However a stream is chunked, the frames are the same (the separators included, which a
    /// naive split loses when `\r\n\r\n` straddles two chunks).
    #[test]
    fn frames_do_not_depend_on_chunking() {
        let stream =
            b"event: a\ndata: {\"x\":1}\n\nevent: b\r\ndata: {\"x\":2}\r\n\r\ndata: [DONE]\n\ntail";
        let mut whole = stream.to_vec();
        let expected = take_frames(&mut whole);
        assert_eq!(expected.len(), 3);
        assert_eq!(whole, b"tail");
        for size in 1..stream.len() {
            let mut frames = Frames::default();
            let mut got = Vec::new();
            for chunk in stream.chunks(size) {
                got.extend(frames.push(chunk));
            }
            assert_eq!(got, expected, "chunks of {size}");
            assert_eq!(frames.into_rest(), b"tail");
        }
    }

    #[test]
    fn an_unending_frame_overflows_instead_of_growing() {
        let mut frames = Frames::default();
        // A chunk that completes a frame and starts an endless one: the frame is not lost.
        let mut first = b"data: {\"x\":1}\n\n".to_vec();
        first.extend(vec![b'x'; 1 << 20]);
        assert_eq!(frames.push(&first).len(), 1);
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..(MAX_HELD_BYTES >> 20) {
            assert!(frames.push(&chunk).is_empty());
        }
        assert!(frames.over_bound());
        assert_eq!(frames.into_rest().len(), MAX_HELD_BYTES + (1 << 20));
    }

    #[test]
    fn anthropic_stream_aggregates_to_the_response_shape() {
        let frames: Vec<Value> = [
            r#"{"type":"message_start","message":{}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"tu1","name":"context_guru_expand","input":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"id\":"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"abc\"}"}}"#,
        ]
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
        assert!(!starts_expand(Dialect::Anthropic, &frames[0]));
        assert!(starts_expand(Dialect::Anthropic, &frames[1]));
        let response = aggregate(Dialect::Anthropic, &frames);
        assert_eq!(response["content"][0]["input"]["id"], "abc");
    }

    #[test]
    fn openai_stream_aggregates_tool_call_pieces() {
        let frames: Vec<Value> = [
            r#"{"choices":[{"delta":{"role":"assistant"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"context_guru_expand","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"id\":\"abc\"}"}}]}}]}"#,
        ]
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
        assert!(!starts_expand(Dialect::OpenAi, &frames[0]));
        assert!(starts_expand(Dialect::OpenAi, &frames[1]));
        let response = aggregate(Dialect::OpenAi, &frames);
        assert_eq!(
            response["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"id\":\"abc\"}"
        );
        let text: Value =
            serde_json::from_str(r#"{"choices":[{"delta":{"content":"Hi"}}]}"#).unwrap();
        assert!(!starts_expand(Dialect::OpenAi, &text));
    }
}
