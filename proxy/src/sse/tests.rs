//! The SSE frame splitter and the expand relay on provider-shaped streams.

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

/// A renumbered event keeps the upstream's bytes: its key order, spacing and event line,
/// with only the number changed (re-serializing sorted the keys).
#[test]
fn a_continuations_event_is_renumbered_in_place() {
    let frame = b"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\", \"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\r\n\r\n";
    let spliced = splice_frame(frame, |text, root| {
        Some(vec![(wire_json::get(text, root, "index")?, "7".to_owned())])
    })
    .unwrap();
    let expected = String::from_utf8_lossy(frame).replace("\"index\":0", "\"index\":7");
    assert_eq!(String::from_utf8(spliced).unwrap(), expected);
    // Data over two lines is not spliced: the caller re-serializes it.
    assert_eq!(
        splice_frame(b"data: {\"a\":\ndata: 1}\n\n", |_, _| Some(Vec::new())),
        None
    );
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

/// Text said in the chunk that carries the expand call reaches the client; the call is held.
#[test]
fn gemini_text_beside_an_expand_call_streams_and_the_call_is_held() {
    let chunk = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Let me look.\"},{\"functionCall\":{\"name\":\"context_guru_expand\",\"args\":{\"id\":\"ab\"}},\"thoughtSignature\":\"c2ln\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":9}}\r\n\r\n";
    let mut relay = Relay::new(Dialect::Gemini);
    let sent = relay.push_frames(vec![chunk.as_bytes().to_vec()]);
    let sent = String::from_utf8(sent.to_vec()).unwrap();
    assert!(
        sent.contains("Let me look.") && !sent.contains("context_guru_expand"),
        "{sent}"
    );
    assert!(relay.holding());
    let turn = relay.take_turn();
    let parts = &turn["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0]["text"], "Let me look.");
    assert_eq!(parts[1]["thoughtSignature"], "c2ln");
    // Released (the turn was not answered), the call follows the text it came with.
    let released = String::from_utf8(relay.release_held().to_vec()).unwrap();
    assert!(released.contains("context_guru_expand") && !released.contains("Let me look."));
}

/// Text streamed a few words per chunk folds into one part; a signed call and a part that
/// is not text stay as they came (a part with no `text` key once panicked the fold: found
/// by the fuzzer, target `sse`).
#[test]
fn gemini_chunks_fold_into_one_content() {
    let frames = [
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Let "}]}}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "me look."}]}}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"inlineData": {}}, {"thought": true}]}}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "context_guru_expand", "args": {"id": "ab"}}, "thoughtSignature": "c2ln"}]}}]}),
    ];
    assert!(!starts_expand(Dialect::Gemini, &frames[0]));
    assert!(starts_expand(Dialect::Gemini, &frames[3]));
    let turn = aggregate(Dialect::Gemini, &frames);
    let parts = &turn["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0], json!({"text": "Let me look."}));
    assert_eq!(parts[1], json!({"inlineData": {}}));
    assert_eq!(parts[3]["thoughtSignature"], "c2ln");
    let calls = crate::expand::expand_calls(turn.to_string().as_bytes(), Dialect::Gemini);
    assert_eq!(calls.unwrap()[0].stash_id, "ab");
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
    let text: Value = serde_json::from_str(r#"{"choices":[{"delta":{"content":"Hi"}}]}"#).unwrap();
    assert!(!starts_expand(Dialect::OpenAi, &text));
}

fn responses_frame(data: Value) -> Vec<u8> {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap()
    )
    .into_bytes()
}

/// One Responses round: a text item, then (when `expand`) an expand call, sequence numbered
/// from 0 as a provider numbers each response.
fn responses_round(text: &str, expand: bool) -> Vec<Vec<u8>> {
    let message = json!({"type": "message", "id": "msg", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": text, "annotations": []}]});
    let call = json!({"type": "function_call", "id": "fc", "call_id": "call_1",
                      "name": EXPAND_TOOL_NAME, "arguments": "", "status": "in_progress"});
    let mut events = vec![
        json!({"type": "response.created", "response": {"id": "r", "output": []}}),
        json!({"type": "response.in_progress", "response": {"id": "r", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": text}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": message.clone()}),
    ];
    let mut output = vec![message];
    if expand {
        let mut done = call.clone();
        done["arguments"] = json!("{\"id\":\"abc\"}");
        events.push(json!({"type": "response.output_item.added", "output_index": 1, "item": call}));
        events.push(json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{\"id\":"}));
        events.push(json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "\"abc\"}"}));
        events.push(
            json!({"type": "response.output_item.done", "output_index": 1, "item": done.clone()}),
        );
        output.push(done);
    }
    events.push(json!({"type": "response.completed", "response": {"id": "r", "status": "completed", "output": output}}));
    events
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            e["sequence_number"] = json!(i);
            responses_frame(e)
        })
        .collect()
}

/// The client reads one stream: the expand call is held, the continuation's opening events
/// are dropped, its items and sequence numbers follow the first round's, and the closing
/// response lists every item the client saw.
#[test]
fn responses_rounds_read_as_one_stream() {
    let mut relay = Relay::new(Dialect::Responses);
    let mut first_round = responses_round("looking", true);
    first_round[0] = responses_frame(
        json!({"type": "response.created", "sequence_number": 0, "response": {"id": "r1", "output": []}}),
    );
    let first = relay.push_frames(first_round);
    assert!(relay.holding());
    let sent: Vec<Value> = take_frames(&mut first.to_vec())
        .iter()
        .filter_map(|f| frame_data(f))
        .collect();
    assert_eq!(sent.len(), 5, "created, in_progress and the text item");
    let turn = relay.take_turn();
    assert_eq!(turn["output"][1]["arguments"], "{\"id\":\"abc\"}");
    assert_eq!(
        turn,
        aggregate_responses(
            &responses_round("looking", true)
                .iter()
                .filter_map(|f| frame_data(f))
                .filter(|d| d["type"] != "response.completed")
                .collect::<Vec<_>>()
        ),
        "pieced together from item events when the stream stops early"
    );
    relay.continue_in_place();
    let second = relay.push_frames(responses_round("found it", false));
    let events: Vec<Value> = take_frames(&mut second.to_vec())
        .iter()
        .filter_map(|f| frame_data(f))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.output_item.added",
            "response.output_text.delta",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert!(events[..3].iter().all(|e| e["output_index"] == 1));
    let sequences: Vec<u64> = sent
        .iter()
        .chain(&events)
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "increasing: {sequences:?}"
    );
    assert_eq!(events[3]["response"]["id"], "r1", "the first round's id");
    let output = events[3]["response"]["output"].as_array().unwrap();
    let texts: Vec<&Value> = output.iter().map(|i| &i["content"][0]["text"]).collect();
    assert_eq!(texts, ["looking", "found it"]);
}

/// The events a round keeps for folding are bounded like the held part: a round whose
/// frames pass the bound is not folded (no expand round; the agent gets it as it came).
#[test]
fn a_round_past_the_bound_is_not_folded() {
    let mut relay = Relay::new(Dialect::OpenAi);
    let text = "x".repeat(1 << 20);
    let frame = format!(
        "data: {}\n\n",
        json!({"choices": [{"delta": {"content": text}}]})
    )
    .into_bytes();
    for _ in 0..(MAX_HELD_BYTES >> 20) + 1 {
        relay.push_frames(vec![frame.clone()]);
    }
    assert!(relay.events.len() <= MAX_HELD_BYTES >> 20);
    assert_eq!(relay.take_turn(), Value::Null);
    relay.push_frames(vec![frame]);
    assert_ne!(
        relay.take_turn(),
        Value::Null,
        "the next round starts afresh"
    );
}
