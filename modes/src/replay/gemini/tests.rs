//! The reader on a real chat log (gemini-cli 0.61.0 against the scripted model of
//! `tests/agents`, `tests/corpus/transcripts/gemini`), the same session in the JSON layout,
//! and bad input.

use super::*;

const JSONL: &[u8] = include_bytes!(
    "../../../../tests/corpus/transcripts/gemini/tmp/repo/chats/session-2026-12-07T05-21-7dc97c60.jsonl"
);
const JSON: &[u8] = include_bytes!(
    "../../../../tests/corpus/transcripts/gemini/tmp/91e33851190acf1a1ac42c0b9326c429debcb78fe8e1fa8c5aa0f49a2c775ebb/chats/session-2026-12-07T05-21-7dc97c60.json"
);

fn contents(call: &Call) -> Vec<Value> {
    let body: Value = serde_json::from_slice(&call.body).unwrap();
    body["contents"].as_array().unwrap().clone()
}

#[test]
fn a_real_chat_is_one_call_per_model_message_with_its_usage_once() {
    let log = read("chat.jsonl", JSONL);
    assert!(
        log.malformed.is_empty() && log.half_written_line.is_none(),
        "{log:?}"
    );
    assert!(log.unknown.is_empty(), "{:?}", log.unknown);
    assert_eq!(
        log.session_id.as_deref(),
        Some("7dc97c60-4778-48e8-8f84-4f7cf375ef4e")
    );
    let calls: Vec<&Call> = log.calls().collect();
    assert_eq!(
        calls.len(),
        4,
        "a message written twice (before and after its tool ran) is one call"
    );
    let prompt: Vec<u64> = calls.iter().map(|c| c.prompt_tokens()).collect();
    assert_eq!(prompt, [12048, 19539, 19683, 19882]);
    assert_eq!(calls[0].usage.unwrap().cached_input_tokens, 7228);
    assert!(calls.iter().all(|c| c.model == "gemini-3.8-flash"));
    // The session context and the task, merged into one user turn as gemini-cli sends them.
    let first = contents(calls[0]);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["parts"].as_array().unwrap().len(), 2);
    let second = contents(calls[1]);
    assert_eq!(second.len(), 3);
    assert_eq!(second[1]["role"], "model");
    assert_eq!(
        second[1]["parts"][0]["text"],
        "I'll run the generator first."
    );
    assert_eq!(
        second[1]["parts"][1]["functionCall"]["name"],
        "run_shell_command"
    );
    assert!(second[2]["parts"][0]["functionResponse"].is_object());
    assert_eq!(contents(calls[3]).len(), 7);
    assert_eq!(
        calls[1].timestamp, "2026-12-07T05:21:22.140Z",
        "the tool result's time"
    );
    let record: Value = serde_json::from_slice(log.segments[0].record.as_ref().unwrap()).unwrap();
    assert_eq!(record["contents"].as_array().unwrap().len(), 8);
}

#[test]
fn the_json_layout_reads_as_the_jsonl_does() {
    let (jsonl, json) = (read("a.jsonl", JSONL), read("a.json", JSON));
    assert!(json.malformed.is_empty(), "{:?}", json.malformed);
    let bodies = |log: &Log| log.calls().map(|c| c.body.clone()).collect::<Vec<_>>();
    assert_eq!(bodies(&json), bodies(&jsonl), "results read from toolCalls");
    assert_eq!(json.segments[0].record, jsonl.segments[0].record);
}

#[test]
fn bad_lines_are_noted_and_the_rest_reads() {
    let text = String::from_utf8(JSONL.to_vec()).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(2, "{\"id\": \"x\", \"type\": \"us");
    lines.insert(3, "{\"id\":\"n1\",\"type\":\"info\",\"content\":\"note\"}");
    lines.insert(4, "{\"id\":\"n2\",\"type\":\"hologram\",\"content\":\"?\"}");
    lines.insert(5, "[1, 2]");
    let mut bytes = lines.join("\n");
    bytes.push_str("\n{\"id\": \"late\", \"type\": \"gem");
    let log = read("bad.jsonl", bytes.as_bytes());
    let at: Vec<usize> = log.malformed.iter().map(|m| m.line).collect();
    assert_eq!(at, [3, 6]);
    assert_eq!(log.half_written_line, Some(lines.len() + 1));
    assert_eq!(log.unknown.get("hologram"), Some(&1));
    assert!(!log.unknown.contains_key("info"), "a note is known");
    assert_eq!(log.calls().count(), 4);
}

/// A note gemini-cli shows between a reply and the message carrying its tool results is never
/// sent: the results are counted once, from that message, not a second time from the reply.
#[test]
fn a_note_between_a_reply_and_its_results_does_not_add_them_twice() {
    let result =
        serde_json::json!({"functionResponse": {"name": "ls", "response": {"output": "a.txt"}}});
    let chat = serde_json::json!({"messages": [
        {"id": "1", "type": "user", "timestamp": "2026-01-01T10:00:00Z", "content": "list"},
        {"id": "2", "type": "gemini", "timestamp": "2026-01-01T10:00:01Z", "content": "",
         "model": "gemini-2.5-pro", "tokens": {"input": 100, "output": 5, "cached": 0, "thoughts": 0, "tool": 0, "total": 105},
         "toolCalls": [{"name": "ls", "args": {}, "result": [result.clone()]}]},
        {"id": "3", "type": "info", "timestamp": "2026-01-01T10:00:02Z", "content": "ran ls"},
        {"id": "4", "type": "user", "timestamp": "2026-01-01T10:00:03Z", "content": [result]},
        {"id": "5", "type": "gemini", "timestamp": "2026-01-01T10:00:04Z", "content": "a.txt",
         "model": "gemini-2.5-pro", "tokens": {"input": 120, "output": 3, "cached": 0, "thoughts": 0, "tool": 0, "total": 123}}
    ]});
    let log = read("chat.json", chat.to_string().as_bytes());
    let calls: Vec<&Call> = log.calls().collect();
    assert_eq!(calls.len(), 2);
    let second = contents(calls[1]);
    let responses = second
        .iter()
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .filter(|p| p.get("functionResponse").is_some())
        .count();
    assert_eq!(responses, 1, "{second:?}");
    assert_eq!(calls[1].model, "gemini-2.5-pro");
}
