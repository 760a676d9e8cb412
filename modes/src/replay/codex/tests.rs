//! The reader on real rollouts (Codex 0.171.0 against the scripted model of `tests/agents`,
//! `tests/corpus/transcripts/codex`), a hand-made one with a compaction, and bad input.

use super::*;
use crate::replay::agent_log::times;
use std::time::Duration;

const DEFAULT_MODEL: &[u8] = include_bytes!(
    "../../../../tests/corpus/transcripts/codex/sessions/2026/12/07/rollout-2026-12-07T05-21-11-01a24ef2-e61b-7fb1-a193-18b6e8992bc7.jsonl"
);
const GPT5: &[u8] = include_bytes!(
    "../../../../tests/corpus/transcripts/codex/sessions/2026/12/07/rollout-2026-12-07T05-21-14-01a24ef2-f1ef-7a22-95bd-2fa5caed9066.jsonl"
);
const COMPACTED: &[u8] = include_bytes!(
    "../../../../tests/corpus/transcripts/codex/archived_sessions/rollout-2026-01-02T10-00-00-00000000-0000-4000-8000-00000000c0de.jsonl"
);

fn input(call: &Call) -> Vec<Value> {
    let body: Value = serde_json::from_slice(&call.body).unwrap();
    body["input"].as_array().unwrap().clone()
}

#[test]
fn a_real_rollout_is_one_call_per_model_response_with_its_usage_once() {
    let log = read("default.jsonl", DEFAULT_MODEL);
    assert!(
        log.malformed.is_empty() && log.half_written_line.is_none(),
        "{log:?}"
    );
    assert!(log.unknown.is_empty(), "{:?}", log.unknown);
    assert_eq!(
        log.session_id.as_deref(),
        Some("01a24ef2-e61b-7fb1-a193-18b6e8992bc7")
    );
    assert_eq!(log.cwd.as_deref(), Some("/tmp/agents-out/work/repo"));
    assert_eq!(log.segments.len(), 1);
    let calls: Vec<&Call> = log.calls().collect();
    assert_eq!(calls.len(), 4, "the 4 requests the scripted model answered");
    let prompt: Vec<u64> = calls.iter().map(|c| c.prompt_tokens()).collect();
    assert_eq!(prompt, [15407, 22876, 23039, 23180]);
    // Each once: the session's running total is their sum.
    assert_eq!(prompt.iter().sum::<u64>(), 84502);
    assert!(
        calls.iter().all(|c| c.model == "gpt-6.2-sol"),
        "{:?}",
        calls[0].model
    );
    // The first request: the tools item, the developer messages, the context, the task.
    let first = input(calls[0]);
    assert_eq!(first[0]["type"], "additional_tools");
    assert_eq!(first.last().unwrap()["role"], "user");
    // Each later one: the one before, the model's call and its output.
    for pair in calls.windows(2) {
        let (before, after) = (input(pair[0]), input(pair[1]));
        assert_eq!(after[..before.len()], before[..]);
        assert_eq!(after.len(), before.len() + 2);
        assert_eq!(after.last().unwrap()["type"], "custom_tool_call_output");
    }
    let last = input(calls[3]);
    assert!(
        last.iter().all(|i| i
            .get("internal_chat_message_metadata_passthrough")
            .is_none()),
        "the log's own fields are left out"
    );
    // The record ends with the final answer.
    let record: Value = serde_json::from_slice(log.segments[0].record.as_ref().unwrap()).unwrap();
    let items = record["input"].as_array().unwrap();
    assert_eq!(items.len(), last.len() + 1);
    assert_eq!(items.last().unwrap()["role"], "assistant");
    let times = times(&log.segments[0].calls).unwrap();
    assert_eq!(times[0], Duration::ZERO);
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

#[test]
fn a_gpt5_codex_rollout_reads_its_function_calls() {
    let log = read("gpt5.jsonl", GPT5);
    let calls: Vec<&Call> = log.calls().collect();
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|c| c.model == "gpt-5-codex"));
    let sum: u64 = calls.iter().map(|c| c.prompt_tokens()).sum();
    assert_eq!(sum, 49171);
    let last = input(calls[3]);
    let kinds = |t: &str| last.iter().filter(|i| i["type"] == t).count();
    assert_eq!(
        (kinds("function_call"), kinds("function_call_output")),
        (3, 3)
    );
}

#[test]
fn a_compaction_replaces_the_history_and_starts_a_segment() {
    let log = read("compacted.jsonl", COMPACTED);
    assert_eq!(log.cwd.as_deref(), Some("/work/hand-made"));
    assert_eq!(log.segments.len(), 2);
    let (before, after) = (&log.segments[0].calls, &log.segments[1].calls);
    assert_eq!((before.len(), after.len()), (2, 2));
    assert_eq!(before[0].timestamp, "2026-01-02T10:00:00.300Z");
    assert_eq!(before[0].usage.unwrap().input_tokens, 1000);
    assert_eq!(before[0].usage.unwrap().cached_input_tokens, 500);
    // The reasoning item goes back as it was logged, opaque.
    let second = input(&before[1]);
    assert_eq!(second[1]["type"], "reasoning");
    assert_eq!(second[1]["encrypted_content"], "opaque-1");
    assert_eq!(second.len(), 4);
    // After the compaction: the replacement history, then the new prompt.
    let first = input(&after[0]);
    assert_eq!(first.len(), 3);
    assert_eq!(
        first[1]["content"][0]["text"],
        "Summary: the repository holds a.rs and b.rs."
    );
    assert_eq!(after[0].timestamp, "2026-01-02T10:05:01.000Z");
    assert_eq!(after[0].segment, 1);
    assert_eq!(after[0].prompt_tokens(), 300);
    assert_eq!(input(&after[1])[3]["type"], "local_shell_call");
    assert!(log.segments.iter().all(|s| s.record.is_some()));
}

#[test]
fn bad_lines_are_noted_and_the_rest_reads() {
    let text = String::from_utf8(COMPACTED.to_vec()).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(
        3,
        "{\"timestamp\": \"x\", \"type\": \"response_item\", \"payl",
    );
    lines.insert(
        4,
        "{\"timestamp\":\"2026-01-02T10:00:00.350Z\",\"type\":\"mystery\",\"payload\":{}}",
    );
    lines.insert(5, "{\"timestamp\":\"2026-01-02T10:00:00.360Z\",\"type\":\"response_item\",\"payload\":{\"type\":\"hologram\"}}");
    let mut bytes = lines.join("\n");
    bytes.push_str("\n{\"timestamp\":\"2026-01-02T10:06:00.000Z\",\"type\":\"resp");
    let log = read("bad.jsonl", bytes.as_bytes());
    assert_eq!(log.malformed.len(), 1, "{:?}", log.malformed);
    assert_eq!(log.malformed[0].line, 4);
    assert!(
        !log.malformed[0].to_string().contains("payl"),
        "no log text in the error"
    );
    assert_eq!(log.half_written_line, Some(lines.len() + 1));
    assert_eq!(log.unknown.get("mystery"), Some(&1));
    assert_eq!(log.unknown.get("response_item/hologram"), Some(&1));
    assert_eq!(log.calls().count(), 4, "the rest reads as before");
    assert_eq!(
        input(&log.segments[0].calls[0]).len(),
        1,
        "an unknown item is not sent"
    );
}

/// A turn whose stream broke off reports no usage: its call ends when the user speaks again,
/// and the next turn's outputs are a call of their own, with their own usage.
#[test]
fn an_aborted_turn_does_not_take_the_next_turns_call() {
    let lines = [
        r#"{"timestamp":"2026-01-01T10:00:00Z","type":"session_meta","payload":{"id":"s","cwd":"/w"}}"#,
        r#"{"timestamp":"2026-01-01T10:00:01Z","type":"turn_context","payload":{"model":"gpt-5","cwd":"/w"}}"#,
        r#"{"timestamp":"2026-01-01T10:00:02Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"one"}]}}"#,
        r#"{"timestamp":"2026-01-01T10:00:03Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"half"}]}}"#,
        r#"{"timestamp":"2026-01-01T10:00:04Z","type":"event_msg","payload":{"type":"turn_aborted","reason":"interrupted"}}"#,
        r#"{"timestamp":"2026-01-01T10:00:05Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"two"}]}}"#,
        r#"{"timestamp":"2026-01-01T10:00:06Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}}"#,
        r#"{"timestamp":"2026-01-01T10:00:07Z","type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{"input_tokens":900,"cached_input_tokens":0,"output_tokens":5,"reasoning_output_tokens":0,"total_tokens":905}}}}"#,
    ];
    let log = read("aborted.jsonl", (lines.join("\n") + "\n").as_bytes());
    let calls: Vec<&Call> = log.calls().collect();
    assert_eq!(calls.len(), 2, "the aborted call and the next one");
    assert!(
        calls[0].usage.is_none(),
        "the aborted call reported nothing"
    );
    assert_eq!(calls[1].usage.as_ref().map(|u| u.input_tokens), Some(900));
    // The second call's request holds the first turn, its partial reply and the new question.
    let second = input(calls[1]);
    assert_eq!(second.len(), 3, "{second:?}");
    assert_eq!(second[2]["content"][0]["text"], "two");
}
