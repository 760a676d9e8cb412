//! Structure-aware fuzzing on the stable toolchain: the wire parse, normalize and splice; the SSE
//! decoder and the in-stream expand relay; Bedrock's event-stream decoder and its re-framing;
//! filter DSL documents and their regexes; config YAML; the sandbox's deletion-only check.
//!
//! Each target takes bytes a mutator made from real seeds (corpus bodies cut to a few messages,
//! the embedded config and filters, recorded-shape SSE streams) and checks an invariant, not just
//! the absence of a panic. The mutator knows the formats: besides flipping, deleting, duplicating
//! and splicing bytes, it inserts the tokens that matter (`"tool_calls"`, `\ud800`, `<<cg:`,
//! deep brackets, YAML anchors) and, for JSON seeds, replaces a whole value with a generated one.
//!
//! `cargo test` runs every target for a few thousand executions. The long run, per target:
//!
//! ```sh
//! SLUICE_FUZZ_EXECS=10000000 SLUICE_FUZZ_TARGET=wire \
//!   cargo test --release -p integration-tests --test it fuzz::long -- --ignored --nocapture
//! ```
//!
//! A failing input is written to `target/fuzz-failure-<target>.bin` and named in the panic.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use engine::config::{Config, EMBEDDED_DEFAULT};
use engine::contain;
use engine::dsl::{BUILTINS, FilterSet};
use engine::message::Message;
use engine::wire::{self, Dialect};
use proxy::sse::{Frames, Relay};
use serde_json::{Value, json};

/// A small, fast, seedable generator: runs are reproducible from their seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Tokens that matter to the formats under test.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\",
    ":",
    ",",
    "\\u",
    "\\ud800",
    "\\udc00",
    "\\u0000",
    "\\\"",
    "null",
    "true",
    "false",
    "-0",
    "1e999",
    "0.0000001",
    "18446744073709551616",
    "\"messages\"",
    "\"role\"",
    "\"content\"",
    "\"tool\"",
    "\"tool_calls\"",
    "\"tool_use\"",
    "\"tool_result\"",
    "\"tool_call_id\"",
    "\"type\"",
    "\"text\"",
    "\"system\"",
    "\"tools\"",
    "\"tool_choice\"",
    "\"stream\"",
    "\"assistant\"",
    "\"user\"",
    "\"function\"",
    "\"arguments\"",
    "\"input\"",
    "\"cache_control\"",
    "\"image\"",
    "\"thinking\"",
    "<<cg:",
    ">>",
    "<<cg:0123456789abcdef>>",
    "\\u003c\\u003ccg:",
    "context_guru_expand",
    "\n",
    "\r\n",
    "\n\n",
    "data: ",
    "event: ",
    "data: [DONE]",
    ": ping\n\n",
    "content_block_start",
    "content_block_delta",
    "input_json_delta",
    "message_stop",
    "&a ",
    "*a",
    "!!binary ",
    "- ",
    "? ",
    "|\n",
    ">\n",
    "'",
    "#",
    "---\n",
    "...\n",
    "(?:",
    ")*",
    "+",
    "{1000000}",
    "\\p{L}",
    "[^",
    "(?i)",
    "$",
    "^",
    "\u{FEFF}",
    "\u{200B}",
    "é",
    "\u{10FFFF}",
];

/// One to four format-aware edits of `seed`, within `max` bytes.
pub(crate) fn mutate(rng: &mut Rng, seed: &[u8], seeds: &[Vec<u8>], max: usize) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..=rng.below(4) {
        let len = data.len();
        let at = rng.below(len + 1);
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                data[i] = rng.next() as u8;
            }
            2 => {
                let token = rng.pick(TOKENS).as_bytes();
                data.splice(at..at, token.iter().copied());
            }
            3 if len > 0 => {
                let end = (at + 1 + rng.below(64)).min(len);
                data.drain(at.min(end)..end);
            }
            4 if len > 0 => {
                // Duplicate a range: nesting and repetition grow from here.
                let start = rng.below(len);
                let end = (start + 1 + rng.below(256)).min(len);
                let copy = data[start..end].to_vec();
                data.splice(at..at, copy);
            }
            5 => {
                let other = rng.pick(seeds);
                if !other.is_empty() {
                    let start = rng.below(other.len());
                    let end = (start + 1 + rng.below(512)).min(other.len());
                    data.splice(at..at, other[start..end].iter().copied());
                }
            }
            6 => {
                let depth = 1 + rng.below(300);
                let open = if rng.below(2) == 0 { b'[' } else { b'{' };
                data.splice(at..at, std::iter::repeat_n(open, depth));
            }
            7 => {
                if let Some(edited) = replace_json_value(rng, &data) {
                    data = edited;
                }
            }
            _ => data.truncate(at),
        }
    }
    data.truncate(max);
    data
}

/// Replaces one value of a JSON document with a generated one (structure-aware).
fn replace_json_value(rng: &mut Rng, data: &[u8]) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(data).ok()?;
    let steps = rng.below(6);
    *slot(&mut value, rng, steps) = generated_value(rng, 3);
    serde_json::to_vec(&value).ok()
}

/// A value `steps` levels down a random path (or where the path ends).
fn slot<'v>(value: &'v mut Value, rng: &mut Rng, steps: usize) -> &'v mut Value {
    let len = match &*value {
        Value::Array(items) => items.len(),
        Value::Object(map) => map.len(),
        _ => 0,
    };
    if steps == 0 || len == 0 {
        return value;
    }
    let i = rng.below(len);
    let child = match value {
        Value::Array(items) => &mut items[i],
        Value::Object(map) => map.values_mut().nth(i).expect("in range"),
        _ => unreachable!("only containers have children"),
    };
    slot(child, rng, steps - 1)
}

fn generated_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth == 0 { 5 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => json!(rng.next() as i64),
        3 => json!(*rng.pick(&["", "tool", "assistant", "text", "tool_use", "<<cg:abc>>"])),
        4 => Value::String(
            (0..rng.below(40))
                .map(|_| char::from_u32(rng.below(0x2FFF) as u32).unwrap_or('x'))
                .collect(),
        ),
        5 => Value::Array(
            (0..rng.below(4))
                .map(|_| generated_value(rng, depth - 1))
                .collect(),
        ),
        _ => {
            let keys = [
                "role",
                "content",
                "type",
                "text",
                "tool_calls",
                "id",
                "name",
                "input",
            ];
            Value::Object(
                (0..rng.below(4))
                    .map(|_| {
                        (
                            (*rng.pick(&keys)).to_owned(),
                            generated_value(rng, depth - 1),
                        )
                    })
                    .collect(),
            )
        }
    }
}

/// A fuzz target: an input, and a panic when an invariant breaks.
pub(crate) struct Target {
    pub(crate) name: &'static str,
    seeds: fn() -> Vec<Vec<u8>>,
    max: usize,
    check: fn(&[u8]),
    /// Executions in `cargo test` (debug build): a few seconds per target.
    short: u64,
}

pub(crate) const TARGETS: &[Target] = &[
    Target {
        name: "wire",
        short: 2000,
        seeds: wire_seeds,
        max: 32 << 10,
        check: check_wire,
    },
    Target {
        name: "sse",
        short: 4000,
        seeds: sse_seeds,
        max: 16 << 10,
        check: check_sse,
    },
    Target {
        name: "eventstream",
        short: 3000,
        seeds: eventstream_seeds,
        max: 16 << 10,
        check: check_eventstream,
    },
    Target {
        name: "dsl",
        short: 300,
        seeds: dsl_seeds,
        max: 8 << 10,
        check: check_dsl,
    },
    Target {
        name: "config",
        short: 500,
        seeds: config_seeds,
        max: 8 << 10,
        check: check_config,
    },
    Target {
        name: "contain",
        short: 4000,
        seeds: contain_seeds,
        max: 4 << 10,
        check: check_contain,
    },
];

/// Runs `execs` mutated inputs through `target`; returns executions per second.
pub(crate) fn run(target: &Target, execs: u64, seed: u64) -> f64 {
    let seeds = (target.seeds)();
    assert!(!seeds.is_empty(), "{}: no seeds", target.name);
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    // Seeds first, as they are.
    for input in &seeds {
        exercise(target, input);
    }
    for _ in 0..execs {
        let seed = &seeds[rng.below(seeds.len())];
        let input = mutate(&mut rng, seed, &seeds, target.max);
        exercise(target, &input);
    }
    execs as f64 / started.elapsed().as_secs_f64()
}

fn exercise(target: &Target, input: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| (target.check)(input))).is_err() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target")
            .join(format!("fuzz-failure-{}.bin", target.name));
        let _ = std::fs::write(&path, input);
        panic!(
            "fuzz target {} failed; input saved to {}",
            target.name,
            path.display()
        );
    }
}

// ---- wire: parse, normalize, splice ----------------------------------------------------------

/// Corpus bodies cut to their first few messages, both dialects, plus hostile shapes.
fn wire_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for body in integration_tests::bodies().iter().step_by(7) {
        let Ok(mut value) = serde_json::from_slice::<Value>(&body.bytes) else {
            continue;
        };
        let Some(messages) = value["messages"].as_array().cloned() else {
            continue;
        };
        for n in [1, 3, 6] {
            let cut: Vec<Value> = messages
                .iter()
                .take(n)
                .map(|m| shorten(m.clone()))
                .collect();
            value["messages"] = Value::Array(cut);
            let seed = serde_json::to_vec(&value).expect("serializes");
            if value.get("system").is_none() {
                // The same conversation as Responses API `input` items, and as Gemini contents.
                seeds.push(integration_tests::responses_from_chat(&seed));
                seeds.push(integration_tests::gemini_from_chat(&seed));
            }
            seeds.push(seed);
        }
    }
    seeds.extend(
        [
            r#"{"messages":[{"role":"tool","tool_call_id":"a","content":"x"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"<<cg:0123456789abcdef>>"}]}]}],"system":[{"type":"text","text":"s"}]}"#,
            r#"{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"\ud800"}]}"#,
            r#"{"messages":[],"messages":[{"role":"user","content":"dup"}]}"#,
            r#"{"instructions":"i","input":[{"type":"reasoning","id":"rs","encrypted_content":"e"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"<<cg:0123456789abcdef>>"}]}],"store":false}"#,
            r#"{"contents":[{"role":"model","parts":[{"text":"t","thought":true},{"functionCall":{"id":"f_1","name":"f","args":{}},"thoughtSignature":"c2ln"}]},{"parts":[{"functionResponse":{"id":"f_1","name":"f","response":{"output":"<<cg:0123456789abcdef>>","error":"e"}}},{"inlineData":{"data":"AA"}}]}],"systemInstruction":{"parts":[{"text":"s"}]}}"#,
        ]
        .map(|s| s.as_bytes().to_vec()),
    );
    seeds
}

/// Long strings in a seed cut to 600 characters: mutations, not sizes, find the bugs.
fn shorten(value: Value) -> Value {
    match value {
        Value::String(s) if s.len() > 600 => Value::String(s.chars().take(600).collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(shorten).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, shorten(v))).collect())
        }
        other => other,
    }
}

/// Parses in every dialect; a body that parses is spliced back unchanged (same bytes) and with
/// every tool output cut in half (valid JSON, every other top-level field byte-identical, and it
/// parses again to the same number of messages).
fn check_wire(input: &[u8]) {
    for dialect in Dialect::ALL {
        let Ok(parsed) = wire::parse(input, dialect) else {
            continue;
        };
        // A copy, not the parsed slice itself: write-back short-cuts its own slice by pointer,
        // and the comparison path is what is under test.
        #[allow(clippy::unnecessary_to_owned)]
        let same = parsed.write_back(&parsed.messages().to_vec());
        assert_eq!(&*same.body, input, "an unchanged write-back is the input");
        let cut: Vec<Message> = parsed
            .messages()
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if m.is_tool() && m.rewritable {
                    let half: String = m
                        .content
                        .chars()
                        .take(m.content.chars().count() / 2)
                        .collect();
                    m.content = half;
                }
                m
            })
            .collect();
        let spliced = parsed.write_back(&cut);
        let text = std::str::from_utf8(&spliced.body).expect("a spliced body is UTF-8");
        let original = std::str::from_utf8(input).expect("parsed input is UTF-8");
        // The scanner reads what providers accept (a lone surrogate escape, say) and leaves it
        // as it came; strict JSON in means strict JSON out.
        if serde_json::from_str::<Value>(original).is_ok() {
            serde_json::from_str::<Value>(text)
                .unwrap_or_else(|e| panic!("a spliced body is JSON ({e})"));
        }
        let transcript = dialect.transcript_key();
        assert_eq!(
            integration_tests::top_level_fields(text, transcript),
            integration_tests::top_level_fields(original, transcript),
            "fields other than the transcript are byte-identical"
        );
        let again = wire::parse(&spliced.body, dialect).expect("a spliced body parses again");
        assert_eq!(again.messages().len(), parsed.messages().len());
    }
}

// ---- SSE: decoder and the in-stream expand relay ---------------------------------------------

/// Streams in the shapes providers send, with and without an expand call.
fn sse_seeds() -> Vec<Vec<u8>> {
    let gemini_expand = GEMINI_EXPAND;
    let anthropic_text = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":5}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        ": ping\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let anthropic_expand = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"context_guru_expand\",\"input\":{}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"id\\\": \\\"0123\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"456789abcdef\\\"}\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let openai_text = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n",
        "data: [DONE]\n\n",
    );
    let openai_expand = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"context_guru_expand\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"id\\\":\\\"0123456789abcdef\\\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let responses_expand = concat!(
        "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"r\",\"output\":[]}}\n\n",
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"context_guru_expand\",\"arguments\":\"\"}}\n\n",
        "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":2,\"output_index\":0,\"delta\":\"{\\\"id\\\":\\\"0123456789abcdef\\\"}\"}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"r\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"context_guru_expand\",\"arguments\":\"{}\"}],\"usage\":{\"input_tokens\":9,\"input_tokens_details\":{\"cached_tokens\":4}}}}\n\n",
    );
    [
        anthropic_text,
        anthropic_expand,
        openai_text,
        openai_expand,
        responses_expand,
        gemini_expand,
        // Text and the call in one chunk: the relay splits it.
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Let me\"},{\"functionCall\":{\"name\":\"context_guru_expand\",\"args\":{}}}]},\"finishReason\":\"STOP\"}]}\r\n\r\n",
        "data: x\r\n\r\ndata: y\r\r",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Gemini's `alt=sse`: whole responses, CRLF-separated, a signed call whole in the last one.
const GEMINI_EXPAND: &str = concat!(
    "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Let me\"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":1},\"modelVersion\":\"m\"}\r\n\r\n",
    "data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"context_guru_expand\",\"args\":{\"id\":\"0123456789abcdef\"}},\"thoughtSignature\":\"c2ln\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":9,\"cachedContentTokenCount\":4,\"candidatesTokenCount\":7}}\r\n\r\n",
);

/// Feeds `input` to the decoder in chunks cut where `cuts` says.
pub(crate) fn decode_chunked(input: &[u8], cuts: &[usize]) -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut frames = Frames::default();
    let mut out = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        let cut = cut.clamp(from, input.len());
        out.extend(frames.push(&input[from..cut]));
        from = cut;
    }
    (out, frames.into_rest())
}

/// What a client sees of a stream through the relay (first round), in both dialects.
pub(crate) fn relayed(frames: &[Vec<u8>], dialect: Dialect, batches: &[usize]) -> Vec<u8> {
    let mut relay = Relay::new(dialect);
    let mut seen = Vec::new();
    let mut from = 0;
    for &size in batches.iter().chain(std::iter::once(&frames.len())) {
        let to = (from + size.max(1)).min(frames.len());
        seen.extend_from_slice(&relay.push_frames(frames[from..to].to_vec()));
        from = to;
        if from == frames.len() {
            break;
        }
    }
    seen.extend_from_slice(&relay.release_held());
    seen
}

/// The decoder loses no byte and does not depend on chunking; the relay's first round, released,
/// gives the client every byte in order, and neither the fold of a held turn nor renumbering the
/// same events as a continuation panics.
fn check_sse(input: &[u8]) {
    let (whole, rest) = decode_chunked(input, &[]);
    let mut joined: Vec<u8> = whole.concat();
    joined.extend_from_slice(&rest);
    assert_eq!(joined, input, "frames and the rest are the input");
    let n = input.len();
    let cuts = [n / 3, n / 3 + 1, (2 * n) / 3, n.saturating_sub(1)];
    let (chunked, chunked_rest) = decode_chunked(input, &cuts);
    assert_eq!(chunked, whole, "framing does not depend on chunking");
    assert_eq!(chunked_rest, rest);
    for dialect in Dialect::ALL {
        if dialect == Dialect::Gemini {
            // A Gemini chunk with text beside the expand call is split in two (the text goes to
            // the client), so the bytes are not the input's; they must not depend on batching.
            assert_eq!(
                relayed(&whole, dialect, &[1, 2, 3]),
                relayed(&whole, dialect, &[])
            );
        } else {
            assert_eq!(relayed(&whole, dialect, &[1, 2, 3]), whole.concat());
        }
        let mut relay = Relay::new(dialect);
        relay.push_frames(whole.clone());
        let turn = relay.take_turn();
        let _ = proxy::expand::expand_calls(turn.to_string().as_bytes(), dialect);
        relay.continue_in_place();
        relay.push_frames(whole.clone());
    }
}

// ---- Bedrock's event stream: unframe, re-frame ------------------------------------------------

/// The Anthropic seeds as Bedrock frames them (AWS's encoder), and a stream exception.
fn eventstream_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for seed in sse_seeds().iter().take(2) {
        let (frames, _) = decode_chunked(seed, &[]);
        let events: Vec<String> = frames
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        seeds.push(integration_tests::aws::event_stream(&events).concat());
    }
    let exception = integration_tests::aws::exception_frame("throttlingException", "slow down");
    seeds.push([seeds[0].clone(), exception.to_vec()].concat());
    seeds
}

/// CRC-32 (IEEE), the event-stream checksum.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// `input` with every frame's checksums made right again, so a mutation reaches the headers,
/// the payload and the chunk inside it rather than stopping at the checksum.
fn with_checksums(input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    let mut at = 0;
    while at + 12 <= out.len() {
        let total = u32::from_be_bytes(out[at..at + 4].try_into().unwrap()) as usize;
        if total < 16 || at + total > out.len() {
            break;
        }
        let prelude = crc32(&out[at..at + 8]);
        out[at + 8..at + 12].copy_from_slice(&prelude.to_be_bytes());
        let message = crc32(&out[at..at + total - 4]);
        out[at + total - 4..at + total].copy_from_slice(&message.to_be_bytes());
        at += total;
    }
    out
}

/// The decoder never panics and does not depend on chunking; what it reads, re-framed and read
/// again, is the same text (the expand loop's round trip).
fn check_eventstream(input: &[u8]) {
    use proxy::bedrock::{Reframe, Unframe};
    for input in [input.to_vec(), with_checksums(input)] {
        let whole = Unframe::default().feed(&input);
        let n = input.len();
        let mut chunked = Unframe::default();
        let mut text = Vec::new();
        let mut failed = false;
        let cuts = [
            0,
            n / 3,
            (n / 3 + 1).min(n),
            n.saturating_sub(1).max(n / 3 + 1).min(n),
            n,
        ];
        for piece in cuts.windows(2).map(|w| &input[w[0]..w[1]]) {
            match chunked.feed(piece) {
                Ok(t) => text.extend_from_slice(&t),
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        match whole {
            Ok(whole) => {
                assert!(!failed, "chunking made a readable stream fail");
                assert_eq!(
                    text,
                    whole.as_ref(),
                    "unframing does not depend on chunking"
                );
                let again = Reframe::default().feed(&whole);
                let read = Unframe::default()
                    .feed(&again)
                    .expect("re-framed is readable");
                assert_eq!(read, whole, "re-framing keeps every event");
            }
            Err(_) => assert!(failed, "a broken stream fails however it is cut"),
        }
    }
}

// ---- the filter DSL: documents and their regexes ---------------------------------------------

/// Each builtin filter as a document of its own (the whole set compiles every filter's regexes
/// per execution, and mutations find the same bugs in one filter at many times the rate).
fn dsl_seeds() -> Vec<Vec<u8>> {
    let mut docs: Vec<String> = Vec::new();
    let mut in_filters = false;
    for line in BUILTINS.lines() {
        if line == "filters:" {
            in_filters = true;
            continue;
        }
        let starts_filter = in_filters
            && line.starts_with("  ")
            && !line.starts_with("   ")
            && line.trim_end().ends_with(':');
        if starts_filter {
            docs.push("schema_version: 1\nfilters:\n".to_owned());
        }
        if let Some(doc) = docs.last_mut().filter(|_| in_filters) {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    assert!(docs.len() >= 10, "{} builtin filters", docs.len());
    docs.into_iter().map(String::into_bytes).collect()
}

const SAMPLE_OUTPUT: &str = "ok 1 - parses\nnot ok 2 - splices\nerror: E0308 mismatched types\n  --> src/lib.rs:3:5\nwarning: unused\n\n\n\nDone in 1.2s\n";

/// A document loads or says why; every filter it loads runs on a real-shaped output and leaves
/// no more lines than it got.
fn check_dsl(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let Ok(set) = FilterSet::load(&[("fuzz", text)]) else {
        return;
    };
    for filter in set.filters() {
        let _ = filter.selects("cargo test");
        let _ = filter.apply(SAMPLE_OUTPUT);
    }
}

// ---- config YAML -------------------------------------------------------------------------------

fn config_seeds() -> Vec<Vec<u8>> {
    [
        EMBEDDED_DEFAULT,
        "preset: balanced\nstore: { backend: memory, ttl_seconds: 60 }\nmode: observe\n",
        "pipeline: [format, textclean, dedup, collapse, linecap]\ncomponents:\n  collapse: { max_tokens: 2000, head_lines: 20, tail_lines: 20 }\ncache:\n  amortize: { enabled: true, every_turns: 10 }\n",
        "components:\n  linecap: &a { max_line_chars: 200 }\n  dedup: *a\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// A config parses or names its problems; one that parses builds its pipeline or says why.
fn check_config(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    match Config::parse(text) {
        Ok(config) => {
            let _ = config.build_pipeline();
        }
        Err(errors) => assert!(!errors.is_empty(), "a refusal names a problem"),
    }
}

// ---- the sandbox's result check ----------------------------------------------------------------

fn contain_seeds() -> Vec<Vec<u8>> {
    [
        "test_a PASSED\ntest_b FAILED\n\u{0}test_b FAILED\n",
        "{\"a\":[1,2,{\"b\":\"text\"}],\"c\":null}\u{0}{\"a\":[{\"b\":\"tx\"}]}",
        "[1,2,3]\u{0}[3,1]",
        "héllo wörld\u{0}hll wrld",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Input and candidate, split at the first NUL: any text is contained in itself; a text result
/// judged contained is a subsequence; anything longer than a non-JSON input is not contained.
fn check_contain(input: &[u8]) {
    let text = String::from_utf8_lossy(input);
    let (whole, part) = text.split_once('\u{0}').unwrap_or((&text, ""));
    assert!(
        contain::deletion_only(whole, whole),
        "a text contains itself"
    );
    let verdict = contain::deletion_only(whole, part);
    let json =
        serde_json::from_str::<Value>(whole).is_ok() && serde_json::from_str::<Value>(part).is_ok();
    if verdict && !json {
        assert!(contain::subsequence(part, whole));
    }
    if !json {
        let longer = format!("{whole}Z");
        assert!(!contain::deletion_only(whole, &longer), "nothing is added");
    }
}

#[test]
fn every_target_survives_a_short_run() {
    for target in TARGETS {
        let execs = target.short;
        let rate = run(target, execs, 0x5EED);
        eprintln!("fuzz {}: {execs} execs, {rate:.0}/s", target.name);
    }
}

/// The long run (see the module docs): `SLUICE_FUZZ_EXECS` per target (default 10^7),
/// `SLUICE_FUZZ_TARGET` to run one, `SLUICE_FUZZ_SEED` to vary the stream.
#[test]
#[ignore = "long: run on purpose, in release"]
fn long() {
    let execs: u64 = std::env::var("SLUICE_FUZZ_EXECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let seed: u64 = std::env::var("SLUICE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let only = std::env::var("SLUICE_FUZZ_TARGET").ok();
    for target in TARGETS
        .iter()
        .filter(|t| only.as_deref().is_none_or(|o| o == t.name))
    {
        let started = Instant::now();
        let rate = run(target, execs, seed);
        println!(
            "fuzz {}: {execs} execs, no failure, {:.0} s, {rate:.0} execs/s",
            target.name,
            started.elapsed().as_secs_f64()
        );
    }
}
