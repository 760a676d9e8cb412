//! Codex's own session logs (`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`, and
//! `archived_sessions/`) read back as the requests Codex sent: one OpenAI Responses body per
//! model call, with the call's recorded time and the usage the provider reported for it. Pure:
//! bytes in (the proxy finds the files and unpacks a `.jsonl.zst`).
//!
//! Each line is `{"timestamp", "type", "payload"}`. A `response_item` is an item of the
//! conversation, as Codex sends it back in `input`: the model's own (an assistant `message`,
//! `function_call`, `custom_tool_call`, `local_shell_call`, `reasoning`, kept opaque with its
//! encrypted content) and the rest (user and developer messages, tool outputs, the
//! `additional_tools` item). A call's request is every item before its first output item; the
//! call ends where an `event_msg` `token_count` reports its usage (`info.last_token_usage`,
//! counted once: a report with no call open is a repeat). A `compacted` record's
//! `replacement_history` replaces the items so far and starts a new segment (replayed as a
//! session of its own, as a Claude Code compaction is).
//!
//! The rebuilt body carries `model` (from `turn_context`) and `input`; the tools of a
//! `gpt-5-codex` session (a top-level `tools`) are not in the log, so replay reads their size
//! from the recorded usage (`agent_log::preamble`). Nothing of a log's content reaches an
//! error or a count.

use serde_json::{Value, json};

use super::agent_log::{self, Call, Log, Segment, Usage, count, parse_timestamp};

/// Record types Codex writes.
const KNOWN: &[&str] = &[
    "session_meta",
    "response_item",
    "event_msg",
    "turn_context",
    "compacted",
    "world_state",
    "token_usage_record",
];

/// Items the model wrote: one of these after the input starts a call.
const OUTPUT: &[&str] = &[
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "reasoning",
    "web_search_call",
    "image_generation_call",
    "tool_search_call",
];

/// Items sent back as input.
const INPUT: &[&str] = &[
    "message",
    "function_call_output",
    "custom_tool_call_output",
    "tool_search_output",
    "additional_tools",
    "compaction",
];

/// Items Codex logs but never sends (its undo snapshots).
const NOT_SENT: &[&str] = &["ghost_snapshot"];

/// Fields Codex keeps on an item in its log that the request does not carry.
const LOG_ONLY: &[&str] = &["internal_chat_message_metadata_passthrough"];

/// Reads one rollout's bytes; `file` names it in errors.
pub fn read(file: &str, bytes: &[u8]) -> Log {
    let mut log = Log::default();
    let records = agent_log::jsonl(file, bytes, &mut log.malformed, &mut log.half_written_line);
    let mut b = Builder::default();
    for r in &records {
        let kind = r["type"].as_str().unwrap_or("(none)");
        let payload = &r["payload"];
        let at = r["timestamp"].as_str();
        match kind {
            "response_item" => {
                let item = payload["type"].as_str().unwrap_or("(none)");
                if OUTPUT.contains(&item) || (item == "message" && payload["role"] == "assistant") {
                    b.output(payload);
                } else if INPUT.contains(&item) {
                    // The user speaks only once the model has finished: a call still open
                    // (its stream aborted, no usage reported) ends here, and the next
                    // outputs start a call of their own.
                    if item == "message" && payload["role"] == "user" {
                        b.open = None;
                    }
                    b.items.push(sent(payload));
                } else if NOT_SENT.contains(&item) {
                    count(&mut log.skipped, format!("response_item/{item}"));
                } else {
                    count(&mut log.unknown, format!("response_item/{item}"));
                }
            }
            "compacted" => b.compacted(payload),
            "event_msg" if payload["type"] == "token_count" => b.usage(&payload["info"]),
            _ => {
                let label = match payload["type"].as_str() {
                    Some(sub) if kind == "event_msg" => format!("event_msg/{sub}"),
                    _ => kind.to_owned(),
                };
                count(&mut log.skipped, label);
                if !KNOWN.contains(&kind) {
                    count(&mut log.unknown, kind);
                }
                // A turn that starts or aborts ends any call still open, as a user message does.
                if kind == "event_msg"
                    && matches!(
                        payload["type"].as_str(),
                        Some("task_started" | "turn_aborted")
                    )
                {
                    b.open = None;
                }
                match kind {
                    "session_meta" if log.session_id.is_none() => {
                        log.session_id = payload["id"].as_str().map(str::to_owned);
                        log.cwd = payload["cwd"].as_str().map(str::to_owned);
                    }
                    "turn_context" => {
                        if let Some(model) = payload["model"].as_str() {
                            b.model = model.to_owned();
                        }
                        if log.cwd.is_none() {
                            log.cwd = payload["cwd"].as_str().map(str::to_owned);
                        }
                    }
                    _ => {}
                }
            }
        }
        // Events other than usage are written as a reply streams in (`item_completed` before
        // the item itself): not the time the request went out.
        if kind != "event_msg" || payload["type"] == "token_count" {
            b.last_at = at.map(str::to_owned).or(b.last_at.take());
        }
    }
    log.segments = b.finish();
    log
}

/// An item as the request carries it: the log's own fields left out.
fn sent(item: &Value) -> Value {
    let mut item = item.clone();
    if let Some(object) = item.as_object_mut() {
        for key in LOG_ONLY {
            object.remove(*key);
        }
    }
    item
}

#[derive(Default)]
struct Builder {
    items: Vec<Value>,
    model: String,
    /// The time of the last record read.
    last_at: Option<String>,
    /// The call whose usage is not reported yet (its index in `calls`).
    open: Option<usize>,
    segment: usize,
    calls: Vec<Call>,
    done: Vec<Segment>,
}

impl Builder {
    /// An item the model wrote: the first after the input starts a call.
    fn output(&mut self, item: &Value) {
        if self.open.is_none() {
            let timestamp = self.last_at.clone().unwrap_or_default();
            self.calls.push(Call {
                model: self.model.clone(),
                segment: self.segment,
                at_ms: parse_timestamp(&timestamp),
                timestamp,
                usage: None,
                body: self.body(),
                items: self.items.len(),
            });
            self.open = Some(self.calls.len() - 1);
        }
        self.items.push(sent(item));
    }

    /// A `token_count` event: the open call's usage, which ends it.
    fn usage(&mut self, info: &Value) {
        let last = &info["last_token_usage"];
        if !last.is_object() {
            return;
        }
        let Some(open) = self.open.take() else {
            return;
        };
        let n = |key: &str| last[key].as_u64().unwrap_or(0);
        self.calls[open].usage = Some(Usage {
            input_tokens: n("input_tokens"),
            cached_input_tokens: n("cached_input_tokens"),
            output_tokens: n("output_tokens"),
            reasoning_tokens: n("reasoning_output_tokens"),
            total_tokens: n("total_tokens"),
        });
    }

    /// A compaction: its replacement history is the input from here on (an older log that
    /// kept only the summary `message` leaves it as one user message).
    fn compacted(&mut self, payload: &Value) {
        self.close_segment();
        self.items = match payload["replacement_history"].as_array() {
            Some(history) => history.iter().map(sent).collect(),
            None => match payload["message"].as_str().filter(|m| !m.is_empty()) {
                Some(summary) => vec![json!({
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": summary}],
                })],
                None => Vec::new(),
            },
        };
    }

    fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({"model": self.model, "input": self.items})).unwrap_or_default()
    }

    fn close_segment(&mut self) {
        let ends_in_reply = self.items.last().is_some_and(|i| {
            i["role"] == "assistant" || i["type"].as_str().is_some_and(|t| OUTPUT.contains(&t))
        });
        let record = (ends_in_reply && !self.calls.is_empty()).then(|| self.body());
        let calls = std::mem::take(&mut self.calls);
        if !calls.is_empty() {
            self.done.push(Segment { calls, record });
        }
        self.items.clear();
        self.open = None;
        self.segment += 1;
    }

    fn finish(mut self) -> Vec<Segment> {
        self.close_segment();
        self.done
    }
}

#[cfg(test)]
mod tests;
