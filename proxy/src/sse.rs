//! Server-sent events: frame splitting, the peek that decides whether a stream opens with an
//! expand call, and aggregation of a held stream into a non-streamed response shape.
//!
//! Upstream chunks arrive at TCP boundaries, not event boundaries, so frames are cut at the
//! blank line. A marker-free stream never comes through here: it is piped as is.

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

/// What the first meaningful event of a stream says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Not decided yet: keep peeking.
    Undecided,
    /// The response opens with an expand call: hold it.
    Expand,
    /// Anything else: stream it.
    Other,
}

/// Classifies one frame for the peek.
pub fn opening(dialect: Dialect, data: &Value) -> Opening {
    match dialect {
        Dialect::Anthropic => {
            if data["type"] != "content_block_start" {
                return if data["type"] == "error" {
                    Opening::Other
                } else {
                    Opening::Undecided
                };
            }
            let block = &data["content_block"];
            if block["type"] == "tool_use" && block["name"] == EXPAND_TOOL_NAME {
                Opening::Expand
            } else {
                Opening::Other
            }
        }
        Dialect::OpenAi => {
            let delta = &data["choices"][0]["delta"];
            if let Some(call) = delta["tool_calls"].get(0) {
                return match call["function"]["name"].as_str() {
                    Some(EXPAND_TOOL_NAME) => Opening::Expand,
                    Some(_) => Opening::Other,
                    None => Opening::Undecided,
                };
            }
            let has_text = delta["content"].as_str().is_some_and(|c| !c.is_empty())
                || delta["reasoning_content"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty());
            if has_text || !data["choices"][0]["finish_reason"].is_null() {
                Opening::Other
            } else {
                Opening::Undecided
            }
        }
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
        assert_eq!(opening(Dialect::Anthropic, &frames[0]), Opening::Undecided);
        assert_eq!(opening(Dialect::Anthropic, &frames[1]), Opening::Expand);
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
        assert_eq!(opening(Dialect::OpenAi, &frames[0]), Opening::Undecided);
        assert_eq!(opening(Dialect::OpenAi, &frames[1]), Opening::Expand);
        let response = aggregate(Dialect::OpenAi, &frames);
        assert_eq!(
            response["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"id\":\"abc\"}"
        );
        let text: Value =
            serde_json::from_str(r#"{"choices":[{"delta":{"content":"Hi"}}]}"#).unwrap();
        assert_eq!(opening(Dialect::OpenAi, &text), Opening::Other);
    }
}
