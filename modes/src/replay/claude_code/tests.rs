//! The reader on small hand-written transcripts: branches, split responses, sub-agents,
//! compaction, and bad input. The real logs are read in `tests/it/claude_code.rs`.

use super::*;
use serde_json::json;

fn line(v: Value) -> String {
    v.to_string() + "\n"
}

fn user(uuid: &str, parent: Option<&str>, content: Value, ts: &str) -> String {
    line(
        json!({"type": "user", "uuid": uuid, "parentUuid": parent, "isSidechain": false,
                "sessionId": "s1", "timestamp": ts, "message": {"role": "user", "content": content}}),
    )
}

fn reply(uuid: &str, parent: &str, id: &str, blocks: Value, output: u64, ts: &str) -> String {
    line(
        json!({"type": "assistant", "uuid": uuid, "parentUuid": parent, "isSidechain": false,
                "sessionId": "s1", "timestamp": ts, "requestId": format!("req_{id}"),
                "message": {"id": id, "role": "assistant", "model": "claude-sonnet-4-5", "content": blocks,
                            "usage": {"input_tokens": 3, "cache_read_input_tokens": 100,
                                      "cache_creation_input_tokens": 20, "output_tokens": output}}}),
    )
}

fn body(call: &Call) -> Value {
    serde_json::from_slice(&call.body).unwrap()
}

/// A prompt, a response split over two records (a tool call and its result interleaved), the
/// answer, and an abandoned retry of the first prompt.
fn session() -> String {
    let mut s = String::new();
    s += &user(
        "u1",
        None,
        json!("list the files"),
        "2025-06-01T10:00:00.000Z",
    );
    s += &reply(
        "a1",
        "u1",
        "m1",
        json!([{"type": "thinking", "thinking": "hm", "signature": "sig"}]),
        1,
        "2025-06-01T10:00:02.000Z",
    );
    s += &reply(
        "a2",
        "a1",
        "m1",
        json!([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}, "caller": {"type": "direct"}}]),
        40,
        "2025-06-01T10:00:03.000Z",
    );
    s += &user(
        "u2",
        Some("a2"),
        json!([{"type": "tool_result", "tool_use_id": "t1", "content": "a.rs", "is_error": false}]),
        "2025-06-01T10:00:04.000Z",
    );
    s += &reply(
        "a3",
        "u2",
        "m2",
        json!([{"type": "text", "text": "\n\n"}, {"type": "text", "text": "one file"}]),
        9,
        "2025-06-01T10:00:09.000Z",
    );
    // Abandoned: a sibling of u2's branch written earlier would not be last; this one is off
    // the chain because the leaf is a3's descendant below.
    s += &user(
        "x1",
        Some("u1"),
        json!("abandoned"),
        "2025-06-01T10:00:05.000Z",
    );
    s += &user(
        "u3",
        Some("a3"),
        json!("thanks"),
        "2025-06-01T10:01:00.000Z",
    );
    s += &reply(
        "a4",
        "u3",
        "m3",
        json!([{"type": "text", "text": "welcome"}]),
        2,
        "2025-06-01T10:01:01.000Z",
    );
    s
}

#[test]
fn one_call_per_response_with_its_usage_counted_once() {
    let t = read("s.jsonl", session().as_bytes());
    let calls: Vec<&Call> = t.calls().collect();
    assert_eq!(calls.len(), 3);
    assert_eq!(
        calls[0].usage.output_tokens, 40,
        "the split response's last record"
    );
    assert_eq!(calls[0].usage.prompt_tokens(), 123);
    let total: u64 = calls.iter().map(|c| c.usage.prompt_tokens()).sum();
    assert_eq!(total, 3 * 123, "each response once, not once per record");
    assert_eq!(calls[0].timestamp, "2025-06-01T10:00:00.000Z");
    assert_eq!(calls[1].timestamp, "2025-06-01T10:00:04.000Z");
    assert_eq!(calls[2].timestamp, "2025-06-01T10:01:00.000Z");
    assert_eq!(
        times(&t.segments[0].calls).unwrap()[2],
        Duration::from_secs(60)
    );
    let second = body(calls[1]);
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[0]["content"][0],
        json!({"type": "text", "text": "list the files"})
    );
    // Thinking kept with its signature; the log's own `caller` and a false `is_error` gone.
    assert_eq!(messages[1]["content"][0]["signature"], "sig");
    assert_eq!(
        messages[1]["content"][1],
        json!({"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}})
    );
    assert_eq!(
        messages[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "t1", "content": "a.rs"})
    );
    assert_eq!(second["max_tokens"], 32_000);
    assert_eq!(second["model"], "claude-sonnet-4-5");
    let third = body(calls[2]);
    let text = third.to_string();
    assert!(!text.contains("abandoned"), "off the live branch");
    assert_eq!(
        third["messages"][3]["content"].as_array().unwrap().len(),
        1,
        "whitespace text dropped"
    );
    // The conversation ends with a reply: the record replay reads answers from.
    let record: Value = serde_json::from_slice(t.segments[0].record.as_ref().unwrap()).unwrap();
    assert_eq!(record["messages"].as_array().unwrap().len(), 6);
    assert!(!t.sidechain);
    assert_eq!(t.session_id.as_deref(), Some("s1"));
}

#[test]
fn parallel_results_come_in_call_order_and_off_branch_ones_are_recovered() {
    let mut s = String::new();
    s += &user("u1", None, json!("go"), "2025-06-01T10:00:00Z");
    s += &reply(
        "a1",
        "u1",
        "m1",
        json!([{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]),
        1,
        "2025-06-01T10:00:01Z",
    );
    s += &reply(
        "a2",
        "a1",
        "m1",
        json!([{"type": "tool_use", "id": "t2", "name": "Read", "input": {}}]),
        5,
        "2025-06-01T10:00:01Z",
    );
    // t1's result hangs off a1, a sibling branch; t2's is on the chain.
    s += &user(
        "r1",
        Some("a1"),
        json!([{"type": "tool_result", "tool_use_id": "t1", "content": "one"}]),
        "2025-06-01T10:00:02Z",
    );
    s += &user(
        "r2",
        Some("a2"),
        json!([{"type": "tool_result", "tool_use_id": "t2", "content": "two"}]),
        "2025-06-01T10:00:02Z",
    );
    s += &reply(
        "a3",
        "r2",
        "m2",
        json!([{"type": "text", "text": "done"}]),
        1,
        "2025-06-01T10:00:03Z",
    );
    let t = read("p.jsonl", s.as_bytes());
    let calls: Vec<&Call> = t.calls().collect();
    assert_eq!(calls.len(), 2);
    let results = &body(calls[1])["messages"][2]["content"];
    assert_eq!(results[0]["tool_use_id"], "t1");
    assert_eq!(results[1]["tool_use_id"], "t2");
}

#[test]
fn a_compact_boundary_starts_a_segment_led_by_its_summary() {
    let mut s = session();
    s += &line(
        json!({"type": "system", "subtype": "compact_boundary", "uuid": "b1", "parentUuid": null,
                      "logicalParentUuid": "a4", "isSidechain": false, "timestamp": "2025-06-01T11:00:00Z"}),
    );
    s += &user(
        "c1",
        Some("b1"),
        json!("This session is being continued from a previous conversation. Summary: ..."),
        "2025-06-01T11:00:01Z",
    );
    s += &reply(
        "c2",
        "c1",
        "m9",
        json!([{"type": "text", "text": "resuming"}]),
        1,
        "2025-06-01T11:00:05Z",
    );
    let t = read("c.jsonl", s.as_bytes());
    assert_eq!(t.segments.len(), 2);
    assert_eq!(
        t.segments[0].calls.len(),
        3,
        "the walk crossed the boundary"
    );
    let after = &t.segments[1].calls[0];
    assert_eq!(after.segment, 1);
    let messages = body(after)["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 1);
    assert!(
        messages[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("This session is being continued")
    );
    assert_eq!(t.skipped.get("system/compact_boundary"), Some(&1));
    assert!(t.unknown.is_empty());
}

#[test]
fn a_sub_agent_file_is_a_session_of_its_own() {
    let s = session().replace("\"isSidechain\":false", "\"isSidechain\":true");
    let t = read("agent-a1.jsonl", s.as_bytes());
    assert!(t.sidechain);
    assert_eq!(t.calls().count(), 3);
    // Sub-agent records inside a main session file (before 2.1.2) stay out of its branch, and
    // come back as a transcript of their own: two sub-agents here, the first with a retry it
    // abandoned, the main conversation's records interleaved.
    let side = |v: Value| line(v);
    let sub_user = |uuid: &str, parent: Option<&str>, text: &str, ts: &str| {
        side(
            json!({"type": "user", "uuid": uuid, "parentUuid": parent, "isSidechain": true,
                    "sessionId": "s1", "timestamp": ts, "message": {"role": "user", "content": text}}),
        )
    };
    let sub_reply = |uuid: &str, parent: &str, id: &str, text: &str, ts: &str| {
        side(
            json!({"type": "assistant", "uuid": uuid, "parentUuid": parent, "isSidechain": true,
                    "sessionId": "s1", "timestamp": ts, "requestId": format!("req_{id}"),
                    "message": {"id": id, "role": "assistant", "model": "claude-sonnet-4-5",
                                "content": [{"type": "text", "text": text}],
                                "usage": {"input_tokens": 5, "cache_read_input_tokens": 0,
                                          "cache_creation_input_tokens": 50, "output_tokens": 7}}}),
        )
    };
    let mut mixed = sub_user("s1", None, "sub task", "2025-06-01T09:59:00Z");
    mixed += &sub_reply("s2", "s1", "x1", "first try", "2025-06-01T09:59:01Z");
    mixed += &session();
    mixed += &sub_reply("s3", "s1", "x2", "second try", "2025-06-01T09:59:05Z");
    mixed += &sub_user("s4", Some("s3"), "go on", "2025-06-01T09:59:06Z");
    mixed += &sub_reply("s5", "s4", "x3", "done", "2025-06-01T09:59:07Z");
    mixed += &sub_user("r1", None, "another task", "2025-06-01T10:05:00Z");
    mixed += &sub_reply("r2", "r1", "y1", "ok", "2025-06-01T10:05:01Z");
    let t = read("main.jsonl", mixed.as_bytes());
    assert!(!t.sidechain);
    assert_eq!(t.calls().count(), 3, "the main conversation as before");
    assert_eq!(t.sidechains.len(), 2, "{:?}", t.sidechains);
    let first: Vec<&Call> = t.sidechains[0].calls().collect();
    assert!(t.sidechains[0].sidechain);
    // The live branch of the first sub-agent: its second try, then its answer; the abandoned
    // first try is not a call of it.
    assert_eq!(first.len(), 2);
    assert_eq!(first[0].message_id, "x2");
    assert_eq!(first[1].message_id, "x3");
    assert_eq!(first[0].usage.prompt_tokens(), 55);
    let second: Vec<&Call> = t.sidechains[1].calls().collect();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].message_id, "y1");
    // A sub-agent's own file holds no sidechains of its own.
    let own = read("agent-a1.jsonl", s.as_bytes());
    assert!(own.sidechains.is_empty());
}

#[test]
fn a_half_written_last_line_is_skipped_and_noted() {
    let mut s = session();
    s += "{\"type\":\"assistant\",\"uuid\":\"a9\",\"message\":{\"content\":[{\"type\":\"te";
    let t = read("s.jsonl", s.as_bytes());
    assert_eq!(t.half_written_line, Some(9));
    assert!(t.malformed.is_empty());
    assert_eq!(t.calls().count(), 3);
}

#[test]
fn a_malformed_line_names_file_and_line_and_the_rest_still_reads() {
    let lines: Vec<String> = session().lines().map(str::to_owned).collect();
    let mut s = String::new();
    for (i, l) in lines.iter().enumerate() {
        s += l;
        s += "\n";
        if i == 1 {
            s += "{not json: secret text}\n[1, 2]\n";
        }
    }
    let t = read("proj/s.jsonl", s.as_bytes());
    assert_eq!(t.malformed.len(), 2);
    assert_eq!(t.malformed[0].line, 3);
    assert_eq!(t.malformed[1].line, 4);
    let message = t.malformed[0].to_string();
    assert!(
        message.starts_with("proj/s.jsonl line 3: not a JSON record"),
        "{message}"
    );
    assert!(
        !message.contains("secret"),
        "no transcript content in a message: {message}"
    );
    assert_eq!(t.malformed[1].why, "not an object");
    assert_eq!(t.calls().count(), 3);
    assert_eq!(t.half_written_line, None);
}

#[test]
fn unknown_record_types_are_skipped_and_counted() {
    let mut s = session();
    for (i, kind) in ["hologram", "hologram", "progress", "summary"]
        .iter()
        .enumerate()
    {
        s += &line(json!({"type": kind, "uuid": format!("k{i}"), "data": "x"}));
    }
    let t = read("s.jsonl", s.as_bytes());
    assert_eq!(t.unknown.get("hologram"), Some(&2));
    assert_eq!(t.unknown.len(), 1);
    assert_eq!(t.skipped.get("progress"), Some(&1));
    assert_eq!(t.calls().count(), 3);
}

#[test]
fn one_hour_cache_writes_ask_for_the_one_hour_lifetime() {
    let s = session().replace(
        "\"cache_creation_input_tokens\":20",
        "\"cache_creation\":{\"ephemeral_1h_input_tokens\":20},\"cache_creation_input_tokens\":20",
    );
    let t = read("s.jsonl", s.as_bytes());
    let first = t.calls().next().unwrap();
    assert_eq!(first.usage.one_hour_writes, 20);
    assert_eq!(body(first)["system"][0]["cache_control"]["ttl"], "1h");
    let plain = read("s.jsonl", session().as_bytes());
    assert!(body(plain.calls().next().unwrap()).get("system").is_none());
}

#[test]
fn timestamps_read_as_utc_milliseconds() {
    assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(parse_timestamp("1970-01-02T00:00:01.5Z"), Some(86_401_500));
    assert_eq!(
        parse_timestamp("2025-06-18T23:17:59.336Z"),
        Some(1_750_288_679_336)
    );
    assert_eq!(
        parse_timestamp("2025-06-19T01:17:59.336+02:00"),
        Some(1_750_288_679_336)
    );
    assert_eq!(parse_timestamp("yesterday"), None);
    // Nothing after the offset, and only dates that exist.
    assert_eq!(parse_timestamp("2025-06-18T23:17:59.336Z junk"), None);
    assert_eq!(parse_timestamp("2025-02-31T00:00:00Z"), None);
    assert_eq!(parse_timestamp("2025-02-29T00:00:00Z"), None);
    assert!(parse_timestamp("2024-02-29T00:00:00Z").is_some());
    assert_eq!(parse_timestamp("2025-06-18T24:00:00Z"), None);
    assert_eq!(parse_timestamp("2025-13-01T00:00:00Z"), None);
}

/// A call recorded with `prompt` prompt tokens (all fresh input), by `model` and `version`,
/// whose body is one short user message.
fn recorded(prompt: u64, model: &str, version: &str) -> Call {
    let body = json!({"model": model, "max_tokens": MAX_TOKENS, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "fix the failing test"}]}]});
    Call {
        message_id: String::new(),
        request_id: String::new(),
        model: model.to_owned(),
        version: version.to_owned(),
        segment: 0,
        timestamp: String::new(),
        at_ms: None,
        usage: Usage {
            input_tokens: prompt,
            ..Usage::default()
        },
        body: serde_json::to_vec(&body).unwrap(),
        messages: 1,
    }
}

const SONNET: &str = "claude-sonnet-4-5";

#[test]
fn the_preamble_is_the_median_of_what_the_record_billed_beyond_the_messages() {
    use preamble::estimate;
    // Gaps 20,000, 20,500 and 85,000: one odd record does not move the median.
    let calls = [
        recorded(20_100, SONNET, "2.1.17"),
        recorded(21_000, SONNET, "2.1.17"),
        recorded(90_000, SONNET, "2.1.17"),
    ];
    let counted = [Some(100), Some(500), Some(5_000)];
    assert_eq!(estimate(calls.iter().zip(counted)), Some(20_500));
    // An even number of calls: the mean of the middle two.
    let calls = [100, 200, 300, 1_000].map(|gap| recorded(gap + 10, SONNET, "2.1.17"));
    assert_eq!(estimate(calls.iter().zip([Some(10); 4])), Some(250));
}

#[test]
fn a_preamble_below_zero_is_clamped_to_zero() {
    let calls = [
        recorded(50, SONNET, "1.0.17"),
        recorded(60, SONNET, "1.0.17"),
    ];
    let counted = [Some(80), Some(90)];
    assert_eq!(preamble::estimate(calls.iter().zip(counted)), Some(0));
}

#[test]
fn calls_whose_record_is_odd_tell_no_preamble() {
    let calls = [
        recorded(1_000_000, "<synthetic>", "2.1.17"),
        recorded(0, SONNET, "2.1.17"),
        recorded(500_000, SONNET, "2.1.17"),
        recorded(12_000, SONNET, "2.1.17"),
    ];
    // The stand-in reply, the call with no usage and the body replay could not count are left
    // out: the one call left tells it.
    let counted = [Some(10), Some(10), None, Some(2_000)];
    assert_eq!(preamble::estimate(calls.iter().zip(counted)), Some(10_000));
    assert_eq!(preamble::estimate(calls[..3].iter().zip(counted)), None);
    assert_eq!(preamble::per_call(&[&calls[0], &calls[1]]), None);
}

#[test]
fn each_version_has_its_own_preamble() {
    let n = preamble::counted(&recorded(0, SONNET, "")).expect("the body parses") as u64;
    assert!(n > 0);
    let calls = [
        recorded(10_000 + n, SONNET, "1.0.98"),
        recorded(10_000 + n, SONNET, "1.0.98"),
        recorded(15_000 + n, SONNET, "2.0.42"),
        recorded(15_000 + n, SONNET, "2.0.42"),
        // A version none of whose calls tells it: the estimate over every call.
        recorded(0, SONNET, "2.1.17"),
    ];
    let refs: Vec<&Call> = calls.iter().collect();
    assert_eq!(
        preamble::per_call(&refs),
        Some(vec![10_000, 10_000, 15_000, 15_000, 12_500])
    );
}

#[test]
fn a_call_keeps_the_version_that_made_it() {
    let s = session().replace(
        "\"type\":\"assistant\"",
        "\"type\":\"assistant\",\"version\":\"2.1.17\"",
    );
    let t = read("s.jsonl", s.as_bytes());
    assert!(t.calls().count() > 0);
    assert!(t.calls().all(|c| c.version == "2.1.17"));
    // And each call's preamble is read from its usage (123 prompt tokens each, here).
    let calls: Vec<&Call> = t.calls().collect();
    let preambles = preamble::per_call(&calls).expect("every call has usage");
    assert_eq!(preambles.len(), calls.len());
    assert!(preambles.iter().all(|p| *p < 123), "{preambles:?}");
}
