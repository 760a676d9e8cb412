//! Properties over generated inputs (proptest, shrinking to a minimal failing case):
//!
//! - the splice preserves every byte it was not asked to change, for arbitrary JSON bodies;
//! - SSE decoding does not depend on how the stream is chunked;
//! - the in-stream expand relay shows the client the same stream however it is chunked and
//!   however its frames are batched;
//! - Bedrock's event stream reads the same however it is chunked, and re-frames to itself.

use engine::message::Message;
use engine::wire::{self, Dialect};
use integration_tests::{top_level_fields, wire_messages};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::fuzz::{decode_chunked, relayed};

/// Arbitrary JSON, a few levels deep, strings with escapes and non-ASCII.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[\\PC\\n\\t\"\\\\]{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A message in either dialect's shapes, with arbitrary extra fields.
fn any_message() -> impl Strategy<Value = Value> {
    let text = "[\\PC\\n]{0,80}";
    prop_oneof![
        (text, any_json()).prop_map(|(t, extra)| json!({"role": "user", "content": t, "x": extra})),
        (text, "[a-z0-9]{1,6}").prop_map(|(t, id)| json!({"role": "tool", "tool_call_id": id, "content": t})),
        ("[a-z0-9]{1,6}", any_json()).prop_map(|(id, args)| json!({
            "role": "assistant", "content": null,
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": args.to_string()}}]
        })),
        (text, "[a-z0-9]{1,6}", any::<bool>()).prop_map(|(t, id, err)| json!({
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": id, "is_error": err, "content": t}]
        })),
        any_json().prop_map(|v| json!({"role": "assistant", "content": [{"type": "text", "text": v.to_string()}]})),
        any_json(),
    ]
}

/// A body: messages among arbitrary top-level fields, serialized compactly or pretty.
fn any_body() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(any_message(), 0..8),
        prop::collection::btree_map("[a-z_]{1,10}", any_json(), 0..5),
        any::<bool>(),
    )
        .prop_map(|(messages, extra, pretty)| {
            let mut body: Map<String, Value> = extra.into_iter().collect();
            body.insert("messages".into(), Value::Array(messages));
            let body = Value::Object(body);
            if pretty {
                serde_json::to_vec_pretty(&body).unwrap()
            } else {
                serde_json::to_vec(&body).unwrap()
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// sluice's token count (its own pre-tokenizer over ASCII, the crate's regex where a byte
    /// over 0x7F decides a piece, remembered piece counts, single tokens by lookup) is the
    /// tokenizer crate's on any text: any characters, and text mostly ASCII with any between.
    #[test]
    fn token_counts_are_the_tokenizers(
        any_text in any::<String>(),
        mostly_ascii in "([ -~\\t\\n\\r]{0,12}\\PC?){0,24}",
    ) {
        for text in [&any_text, &mostly_ascii] {
            let whole = bpe_openai::o200k_base().count(text.as_str());
            prop_assert_eq!(engine::tokens::count_uncached(text), whole, "{:?}", text);
            // And counted in steps, each going on from where the last stopped.
            let mut partial = engine::tokens::Partial::default();
            let key = engine::tokens::content_hash(text) ^ 0x5eed_c0de;
            let resumed = [1, 2, 5, 9, usize::MAX].into_iter().find_map(|limit| {
                match engine::tokens::count_until(text, key, partial, limit) {
                    Ok(n) => Some(n),
                    Err(far) => {
                        partial = far;
                        None
                    }
                }
            });
            prop_assert_eq!(resumed, Some(whole), "{:?}, resumed", text);
        }
    }

    /// Cutting some tool outputs changes those messages' content and nothing else: every other
    /// top-level field and every message not cut leaves byte-identical.
    #[test]
    fn the_splice_preserves_every_untouched_byte(body in any_body(), pick in any::<u64>()) {
        for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
            let Ok(parsed) = wire::parse(&body, dialect) else { continue };
            let rewritten: Vec<Message> = parsed.messages().iter().enumerate().map(|(i, m)| {
                let mut m = m.clone();
                if m.is_tool() && m.rewritable && (pick >> (i % 64)) & 1 == 1 && !m.content.is_empty() {
                    m.content = format!("cut {}", m.content.len());
                }
                m
            }).collect();
            let changed: Vec<bool> = parsed.messages().iter().zip(&rewritten).map(|(a, b)| a != b).collect();
            let out = parsed.write_back(&rewritten);
            prop_assert!(out.discarded.is_empty(), "{:?}", out.discarded);
            let (before, after) = (std::str::from_utf8(&body).unwrap(), std::str::from_utf8(&out.body).unwrap());
            prop_assert_eq!(top_level_fields(before, "messages"), top_level_fields(after, "messages"));
            let (raw_before, raw_after) = (wire_messages(&body), wire_messages(&out.body));
            prop_assert_eq!(raw_before.len(), raw_after.len());
            // Messages map to wire elements in order; one that was not cut is the same bytes.
            if raw_before.len() == changed.len() {
                for (i, was_changed) in changed.iter().enumerate() {
                    if !was_changed {
                        prop_assert_eq!(&raw_before[i], &raw_after[i], "message {}", i);
                    }
                }
            }
            if !changed.contains(&true) {
                prop_assert_eq!(&*out.body, &body[..], "nothing cut, nothing changed");
            }
            let again = wire::parse(&out.body, dialect).expect("parses again");
            for (i, m) in again.messages().iter().enumerate() {
                prop_assert_eq!(&m.content, &rewritten[i].content);
            }
        }
    }

    /// The same bytes, cut anywhere, give the same frames and the same rest.
    #[test]
    fn sse_decoding_does_not_depend_on_chunking(
        frames in prop::collection::vec("(data|event|:)[: ]?[\\PC\\r]{0,40}(\\n\\n|\\r\\n\\r\\n|\\n|\\r\\n)", 0..12),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let stream: Vec<u8> = frames.concat().into_bytes();
        let (whole, rest) = decode_chunked(&stream, &[]);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
        cuts.sort_unstable();
        let (chunked, chunked_rest) = decode_chunked(&stream, &cuts);
        prop_assert_eq!(&chunked, &whole);
        prop_assert_eq!(&chunked_rest, &rest);
        let mut joined = whole.concat();
        joined.extend_from_slice(&rest);
        prop_assert_eq!(joined, stream);
    }

    /// A provider's stream with an expand call somewhere: the client sees the same bytes for any
    /// chunking of the upstream stream and any batching of its frames.
    #[test]
    fn the_expand_relay_shows_the_same_stream_for_any_chunking(
        texts in prop::collection::vec("[\\PC]{0,30}", 0..6),
        expand_at in 0usize..6,
        cuts in prop::collection::vec(any::<usize>(), 0..10),
        batches in prop::collection::vec(1usize..4, 0..8),
        which in 0usize..4,
    ) {
        let dialect = STREAMED[which];
        let stream = provider_stream(dialect, &texts, expand_at);
        let (reference_frames, _) = decode_chunked(&stream, &[]);
        let reference = relayed(&reference_frames, dialect, &[]);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
        cuts.sort_unstable();
        let (frames, _) = decode_chunked(&stream, &cuts);
        prop_assert_eq!(relayed(&frames, dialect, &batches), reference);
    }

    /// The same stream as Bedrock frames it: the event-stream decoder gives the relay the same
    /// SSE for any chunking, and the client gets the same frames back.
    #[test]
    fn bedrock_event_streams_do_not_depend_on_chunking(
        texts in prop::collection::vec("[\\PC]{0,30}", 0..6),
        expand_at in 0usize..6,
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let sse = provider_stream(Dialect::Anthropic, &texts, expand_at);
        let (events, _) = decode_chunked(&sse, &[]);
        let events: Vec<String> =
            events.iter().map(|e| String::from_utf8_lossy(e).into_owned()).collect();
        let stream = integration_tests::aws::event_stream(&events).concat();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(stream.len());
        let mut unframe = proxy::bedrock::Unframe::default();
        let (mut text, mut from) = (Vec::new(), 0);
        for cut in cuts {
            text.extend_from_slice(&unframe.feed(&stream[from..cut]).expect("valid"));
            from = cut;
        }
        unframe.finish().expect("whole frames");
        let whole = proxy::bedrock::Unframe::default().feed(&stream).expect("valid");
        prop_assert_eq!(&text, &whole.to_vec());
        let (frames, _) = decode_chunked(&whole, &[]);
        let shown = relayed(&frames, Dialect::Anthropic, &[]);
        let reframed = proxy::bedrock::Reframe::default().feed(&shown);
        let read = proxy::bedrock::Unframe::default().feed(&reframed).expect("readable");
        prop_assert_eq!(read.to_vec(), shown);
    }
}

/// Every dialect whose streams the relay reads.
const STREAMED: [Dialect; 4] = [
    Dialect::OpenAi,
    Dialect::Anthropic,
    Dialect::Responses,
    Dialect::Gemini,
];

/// Text deltas with an expand call after `expand_at` of them (or none past the end).
fn provider_stream(dialect: Dialect, texts: &[String], expand_at: usize) -> Vec<u8> {
    let mut out = String::new();
    let mut event = |name: &str, data: Value| match dialect {
        Dialect::Anthropic => out.push_str(&format!("event: {name}\ndata: {data}\n\n")),
        Dialect::OpenAi => out.push_str(&format!("data: {data}\n\n")),
        Dialect::Responses => out.push_str(&format!("event: {name}\ndata: {data}\n\n")),
        // Gemini: every chunk a whole response, frames cut by CRLF pairs.
        Dialect::Gemini => out.push_str(&format!("data: {data}\r\n\r\n")),
    };
    for (i, text) in texts.iter().enumerate() {
        if i == expand_at {
            match dialect {
                Dialect::Anthropic => event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": "t", "name": "context_guru_expand", "input": {}}}),
                ),
                Dialect::OpenAi => event(
                    "chunk",
                    json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": 0, "id": "c", "type": "function", "function": {"name": "context_guru_expand", "arguments": ""}}]}}]}),
                ),
                Dialect::Responses => event(
                    "response.output_item.added",
                    json!({"type": "response.output_item.added", "output_index": i, "sequence_number": 2 * i,
                    "item": {"type": "function_call", "call_id": "c", "name": "context_guru_expand", "arguments": ""}}),
                ),
                Dialect::Gemini => event(
                    "chunk",
                    json!({"candidates": [{"content": {"role": "model", "parts": [
                    {"functionCall": {"name": "context_guru_expand", "args": {"id": "c"}}, "thoughtSignature": "c2ln"}]}}]}),
                ),
            }
        }
        match dialect {
            Dialect::Anthropic => event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i,
                "delta": {"type": "text_delta", "text": text}}),
            ),
            Dialect::OpenAi => event(
                "chunk",
                json!({"choices": [{"index": 0, "delta": {"content": text}}]}),
            ),
            Dialect::Responses => event(
                "response.output_text.delta",
                json!({"type": "response.output_text.delta", "output_index": i, "content_index": 0,
                "sequence_number": 2 * i + 1, "delta": text}),
            ),
            Dialect::Gemini => event(
                "chunk",
                json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": i + 1}}),
            ),
        }
    }
    match dialect {
        Dialect::Anthropic => event("message_stop", json!({"type": "message_stop"})),
        Dialect::OpenAi => out.push_str("data: [DONE]\n\n"),
        Dialect::Responses => event(
            "response.completed",
            json!({"type": "response.completed", "response": {"output": []}}),
        ),
        Dialect::Gemini => event(
            "chunk",
            json!({"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP"}]}),
        ),
    }
    out.into_bytes()
}
