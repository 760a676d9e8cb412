//! gemini-cli's own chat logs (`~/.gemini/tmp/<project>/chats/session-*.json` or `.jsonl`)
//! read back as the requests gemini-cli sent: one Gemini `generateContent` body per model
//! message, with its recorded time and the usage the provider reported for it. Pure: bytes in.
//!
//! Two layouts: the JSON file (`{"sessionId", "projectHash", "messages": [...]}`), and the
//! JSONL gemini-cli 0.61 writes: a first line of metadata, then each message as written (a
//! message written again under the same `id` replaces it) and `{"$set": {...}}` updates (a
//! `messages` array replaces the list). A message is `user` (`content`: a string or parts;
//! in the JSONL a tool's `functionResponse` parts come back as a user message of their own),
//! `gemini` (`content` text, `toolCalls` each with its `result` parts, `tokens` {input, output,
//! cached, thoughts, tool, total}, `model`), or a note gemini-cli shows and never sends (`info`,
//! `error`, `warning`). Each `gemini` message is one call: its request is the contents before
//! it (roles `user` and `model`, consecutive turns of one role merged as gemini-cli sends
//! them), its model turn the text and a `functionCall` per tool call, followed, when no user
//! message carries them, by the calls' results.
//!
//! The system instruction and tools are not in the log: replay reads their size from the
//! recorded usage (`agent_log::preamble`). Thought signatures are not kept either. Nothing of a
//! log's content reaches an error or a count.

use serde_json::{Map, Value, json};

use super::agent_log::{self, Call, Log, MalformedLine, Segment, Usage, count, parse_timestamp};

/// Message types gemini-cli shows the user but does not send to the model.
const NOTES: &[&str] = &["info", "error", "warning"];

/// Reads one chat file's bytes; `file` names it in errors.
pub fn read(file: &str, bytes: &[u8]) -> Log {
    let mut log = Log::default();
    let messages = match serde_json::from_slice::<Value>(bytes) {
        // The JSON layout: one document with its messages.
        Ok(Value::Object(doc)) if doc.get("messages").is_some_and(Value::is_array) => {
            log.session_id = doc
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_owned);
            doc.get("messages")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        }
        Ok(Value::Object(_)) | Err(_) => jsonl_messages(file, bytes, &mut log),
        Ok(_) => {
            log.malformed.push(MalformedLine {
                file: file.to_owned(),
                line: 1,
                why: "not an object".to_owned(),
            });
            Vec::new()
        }
    };
    let mut b = Builder::default();
    for (i, m) in messages.iter().enumerate() {
        let kind = m["type"].as_str().unwrap_or("(none)");
        match kind {
            "user" => b.user(m),
            "gemini" => {
                // The next message that is sent (a note gemini-cli only shows is skipped), so
                // results it carries are not added a second time from the reply.
                let answered = messages[i + 1..]
                    .iter()
                    .find(|next| !next["type"].as_str().is_some_and(|t| NOTES.contains(&t)))
                    .is_some_and(carries_results);
                b.reply(m, answered);
            }
            _ => {
                count(&mut log.skipped, kind);
                if !NOTES.contains(&kind) {
                    count(&mut log.unknown, kind);
                }
            }
        }
        if let Some(at) = m["timestamp"].as_str() {
            b.last_at = Some(at.to_owned());
        }
    }
    let ends_in_reply = b.contents.last().is_some_and(|c| c["role"] == "model");
    let record = (ends_in_reply && !b.calls.is_empty()).then(|| b.body());
    if !b.calls.is_empty() {
        log.segments.push(Segment {
            calls: b.calls,
            record,
        });
    }
    log
}

/// The messages of the JSONL layout, as its updates leave them.
fn jsonl_messages(file: &str, bytes: &[u8], log: &mut Log) -> Vec<Value> {
    let records = agent_log::jsonl(file, bytes, &mut log.malformed, &mut log.half_written_line);
    let mut messages: Vec<Value> = Vec::new();
    for r in records {
        if let Some(set) = r.get("$set") {
            count(&mut log.skipped, "$set");
            if let Some(list) = set.get("messages").and_then(Value::as_array) {
                messages.clone_from(list);
            }
            continue;
        }
        if r.get("type").is_some_and(Value::is_string) && r.get("id").is_some() {
            match messages.iter_mut().find(|m| m.get("id") == r.get("id")) {
                Some(written) => *written = r,
                None => messages.push(r),
            }
            continue;
        }
        if r.get("sessionId").is_some() {
            count(&mut log.skipped, "(metadata)");
            if log.session_id.is_none() {
                log.session_id = r["sessionId"].as_str().map(str::to_owned);
            }
            continue;
        }
        count(&mut log.skipped, "(none)");
        count(&mut log.unknown, "(none)");
    }
    messages
}

/// A user message that holds tool results (`functionResponse` parts).
fn carries_results(m: &Value) -> bool {
    m["type"] == "user"
        && m["content"]
            .as_array()
            .is_some_and(|parts| parts.iter().any(|p| p.get("functionResponse").is_some()))
}

/// A message's `content` as parts: a string as one text part (none when empty).
fn parts(content: &Value) -> Vec<Value> {
    match content {
        Value::String(text) if !text.is_empty() => vec![json!({"text": text})],
        Value::Array(parts) => parts
            .iter()
            .filter(|p| {
                !(p["text"].as_str() == Some("") && p.as_object().is_some_and(|o| o.len() == 1))
            })
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

#[derive(Default)]
struct Builder {
    contents: Vec<Value>,
    last_at: Option<String>,
    calls: Vec<Call>,
}

impl Builder {
    fn user(&mut self, m: &Value) {
        self.push("user", parts(&m["content"]));
    }

    fn reply(&mut self, m: &Value, answered: bool) {
        let timestamp = self
            .last_at
            .clone()
            .or_else(|| m["timestamp"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let tokens = &m["tokens"];
        let usage = tokens.is_object().then(|| {
            let n = |key: &str| tokens[key].as_u64().unwrap_or(0);
            Usage {
                input_tokens: n("input"),
                cached_input_tokens: n("cached"),
                output_tokens: n("output"),
                reasoning_tokens: n("thoughts"),
                total_tokens: n("total"),
            }
        });
        self.calls.push(Call {
            model: m["model"].as_str().unwrap_or_default().to_owned(),
            segment: 0,
            at_ms: parse_timestamp(&timestamp),
            timestamp,
            usage,
            body: self.body(),
            items: self.contents.len(),
        });
        let calls = m["toolCalls"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut model = parts(&m["content"]);
        for call in calls {
            let mut function_call = Map::new();
            function_call.insert("name".into(), call["name"].clone());
            function_call.insert(
                "args".into(),
                call.get("args").cloned().unwrap_or_else(|| json!({})),
            );
            model.push(json!({"functionCall": function_call}));
        }
        self.push("model", model);
        if !answered {
            let results: Vec<Value> = calls
                .iter()
                .flat_map(|c| c["result"].as_array().cloned().unwrap_or_default())
                .filter(|p| p.get("functionResponse").is_some())
                .collect();
            self.push("user", results);
        }
    }

    /// Adds a turn, merged into the last when it has the same role.
    fn push(&mut self, role: &str, parts: Vec<Value>) {
        if parts.is_empty() {
            return;
        }
        match self.contents.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(existing) = last["parts"].as_array_mut() {
                    existing.extend(parts);
                }
            }
            _ => self.contents.push(json!({"role": role, "parts": parts})),
        }
    }

    fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({"contents": self.contents})).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
