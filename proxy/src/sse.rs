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

/// Splits complete frames (ending in a blank line) off the front of `buf`.
pub fn take_frames(buf: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    loop {
        let end = find_blank_line(buf);
        let Some((at, sep)) = end else { break };
        let rest = buf.split_off(at + sep);
        frames.push(std::mem::replace(buf, rest));
    }
    frames
}

fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|p| (p, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| (p, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
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

fn aggregate_anthropic(frames: &[Value]) -> Value {
    // index → (block, accumulated partial JSON for tool_use input)
    let mut blocks: Vec<(Value, String)> = Vec::new();
    for data in frames {
        let index = data["index"].as_u64().unwrap_or(0) as usize;
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
                match delta["type"].as_str() {
                    Some("text_delta") => append(&mut block["text"], &delta["text"]),
                    Some("thinking_delta") => append(&mut block["thinking"], &delta["thinking"]),
                    Some("signature_delta") => append(&mut block["signature"], &delta["signature"]),
                    Some("input_json_delta") => {
                        partial.push_str(delta["partial_json"].as_str().unwrap_or(""))
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let content: Vec<Value> = blocks
        .into_iter()
        .filter(|(block, _)| !block.is_null())
        .map(|(mut block, partial)| {
            if block["type"] == "tool_use" && !partial.is_empty() {
                block["input"] = serde_json::from_str(&partial).unwrap_or_else(|_| json!({}));
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
