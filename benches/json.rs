//! Criterion bench for the wire layer's JSON scanner beside `sonic-rs` (issue #18, item 9): the
//! design card names `sonic-rs`, the wire layer uses its own validating scanner
//! (`engine::wire::json`), and this bench puts both on the same corpus bodies in one run.
//!
//! Every arm starts from the body's bytes (UTF-8 is checked in each) and, except the baselines,
//! ends with the same answer: the byte spans of the top-level `messages`, `system`, `tools` and
//! `tool_choice` values, the number of messages, and the spans of the content string literals
//! write-back may replace (a message's `content` string; in a content array, each block's
//! `text`, a `tool_result`'s `content` string or its inner blocks' `text`). The answers are
//! compared once, outside the timed loops.
//!
//! - `scanner/parse_indexed`: `json::parse_indexed` alone, the scan `wire::parse` starts with
//!   (validates, records every container's members, decodes escaped strings).
//! - `scanner/spans`: that scan plus reading the spans above out of its index.
//! - `wire/parse`: `wire::parse` whole (scan, index, normalize into `Message`s and slots).
//! - `sonic_rs/validate`: `sonic_rs::to_object_iter` over the top level, which validates every
//!   value while skipping it: the floor of any `sonic-rs` arm that validates the whole body.
//! - `sonic_rs/lazy_spans`: that, then the lazy walk into `messages` (`LazyValue::into_array_iter`
//!   / `into_object_iter`, unchecked: already validated) for the same spans. `sonic-rs` has no
//!   offset API: a `LazyValue` borrowed from a `&[u8]` input is a subslice of it
//!   (`as_raw_str`), so the offset is the pointer difference.
//! - `sonic_rs/lazy_spans_decoded`: the same, and every content string decoded
//!   (`JsonValueTrait::as_str`), which the scanner's arms get from the scan itself.
//! - `serde_json/value`: `serde_json::from_slice::<Value>`, the familiar baseline (no spans).
//!
//! Run: `cargo bench -p benches --bench json`. Figures go to `docs/performance.md`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::wire::json::{self, Kind, Span};
use engine::wire::{self, Dialect};
use sonic_rs::{JsonValueTrait, LazyValue};

/// The top-level members the wire layer reads, in this order.
const TOP_LEVEL: [&str; 4] = ["messages", "system", "tools", "tool_choice"];

/// What each span-finding arm must find: the same for every parser, or the bench is void.
#[derive(Debug, PartialEq, Eq)]
struct Found {
    /// Spans of `messages`, `system`, `tools`, `tool_choice` (last occurrence wins, as in
    /// `json::lookup`).
    top: [Option<Span>; 4],
    messages: usize,
    /// Content string literals (quotes included), in document order.
    content: Vec<Span>,
}

// --- the wire scanner -----------------------------------------------------------------------

fn scanner_spans(body: &[u8]) -> Found {
    let text = std::str::from_utf8(body).expect("UTF-8");
    let (root, index) = json::parse_indexed(text).expect("valid JSON");
    let top_level = index.members(root);
    let top = TOP_LEVEL.map(|key| json::lookup(text, top_level, key));
    let mut found = Found {
        top,
        messages: 0,
        content: Vec::new(),
    };
    let Some(messages) = top[0] else {
        return found;
    };
    // Members of an object; nothing for any other value (an array's elements have no keys).
    let fields = |value: Span| match json::kind_of(text, value) {
        Kind::Object => index.members(value),
        _ => &[],
    };
    let string_at = |object: Span, key: &str| {
        json::lookup(text, fields(object), key).filter(|s| json::kind_of(text, *s) == Kind::String)
    };
    for message in index.elements(messages) {
        found.messages += 1;
        let Some(content) = json::lookup(text, fields(message), "content") else {
            continue;
        };
        match json::kind_of(text, content) {
            Kind::String => found.content.push(content),
            Kind::Array => {
                for block in index.elements(content) {
                    found.content.extend(string_at(block, "text"));
                    let Some(inner) = json::lookup(text, fields(block), "content") else {
                        continue;
                    };
                    match json::kind_of(text, inner) {
                        Kind::String => found.content.push(inner),
                        Kind::Array => {
                            for part in index.elements(inner) {
                                found.content.extend(string_at(part, "text"));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    found
}

// --- sonic-rs -------------------------------------------------------------------------------

/// The byte span of a lazy value inside `body`. `sonic-rs` gives no offsets; a `LazyValue` read
/// from a `&[u8]` input borrows a subslice of it, so the offset is the pointer difference
/// (checked to lie inside `body`, which a copy would not).
fn span_in(body: &[u8], value: &LazyValue<'_>) -> Span {
    let raw = value.as_raw_str().as_bytes();
    let start = (raw.as_ptr() as usize)
        .checked_sub(body.as_ptr() as usize)
        .expect("a subslice of the input");
    assert!(start + raw.len() <= body.len(), "a subslice of the input");
    Span::new(start, start + raw.len())
}

/// The last value of each of `keys` in a validated object (as `json::lookup` reads duplicate
/// keys), in one walk of its members; all `None` for any other value.
fn last_members<'de, const N: usize>(
    value: LazyValue<'de>,
    keys: [&str; N],
) -> [Option<LazyValue<'de>>; N] {
    let mut found: [Option<LazyValue<'de>>; N] = std::array::from_fn(|_| None);
    for (key, member) in value.into_object_iter().into_iter().flatten().flatten() {
        if let Some(slot) = keys.iter().position(|k| *k == key) {
            found[slot] = Some(member);
        }
    }
    found
}

/// Validates the whole body: every top-level value is skipped with validation, then the bytes
/// after the closing brace must be whitespace (`ObjectJsonIter` stops at the brace).
fn sonic_top_level(body: &[u8]) -> sonic_rs::Result<[Option<LazyValue<'_>>; 4]> {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let mut top: [Option<LazyValue<'_>>; 4] = Default::default();
    // Just after the opening brace (the iterator checks it is one), then after each value.
    let mut end = body.iter().position(|b| !ws(b)).map_or(0, |at| at + 1);
    for entry in sonic_rs::to_object_iter(body) {
        let (key, value) = entry?;
        end = span_in(body, &value).end;
        if let Some(slot) = TOP_LEVEL.iter().position(|k| *k == key) {
            top[slot] = Some(value);
        }
    }
    let mut rest = body[end..].iter().skip_while(|b| ws(b));
    assert_eq!(rest.next(), Some(&b'}'), "the object closes");
    assert!(
        rest.all(ws),
        "trailing characters after the top-level value"
    );
    Ok(top)
}

/// The content string literals of one message, as lazy values, in document order.
fn sonic_content<'de>(message: LazyValue<'de>, out: &mut Vec<LazyValue<'de>>) {
    let [Some(content)] = last_members(message, ["content"]) else {
        return;
    };
    if content.is_str() {
        out.push(content);
        return;
    }
    for block in content.into_array_iter().into_iter().flatten().flatten() {
        let [text, inner] = last_members(block, ["text", "content"]);
        out.extend(text.filter(LazyValue::is_str));
        let Some(inner) = inner else {
            continue;
        };
        if inner.is_str() {
            out.push(inner);
            continue;
        }
        for part in inner.into_array_iter().into_iter().flatten().flatten() {
            let [text] = last_members(part, ["text"]);
            out.extend(text.filter(LazyValue::is_str));
        }
    }
}

/// Validation and the spans of [`Found`]; `decode` also decodes every content string.
fn sonic_spans(body: &[u8], decode: bool) -> (Found, usize) {
    let top = sonic_top_level(body).expect("valid JSON");
    let mut found = Found {
        top: top.each_ref().map(|v| v.as_ref().map(|v| span_in(body, v))),
        messages: 0,
        content: Vec::new(),
    };
    let mut decoded = 0;
    let [messages, ..] = top;
    let Some(messages) = messages.and_then(LazyValue::into_array_iter) else {
        return (found, decoded);
    };
    let mut strings = Vec::new();
    for message in messages {
        let message = message.expect("validated");
        found.messages += 1;
        strings.clear();
        sonic_content(message, &mut strings);
        for s in &strings {
            found.content.push(span_in(body, s));
            if decode {
                decoded += s.as_str().map_or(0, str::len);
            }
        }
    }
    (found, decoded)
}

// --- the bench ------------------------------------------------------------------------------

fn scanner_beside_sonic(c: &mut Criterion) {
    let mut group = c.benchmark_group("json");
    let largest = benches::public_bodies(Dialect::Anthropic).remove(0).1;
    let one_mb = benches::one_megabyte_body();
    for (name, dialect, body) in [
        ("1mb_openai", Dialect::OpenAi, &one_mb),
        ("largest_public_anthropic", Dialect::Anthropic, &largest),
    ] {
        // Every arm finds the same thing, or its figure means nothing.
        let expected = scanner_spans(body);
        assert!(expected.messages > 0 && !expected.content.is_empty());
        let parsed = wire::parse(body, dialect).unwrap();
        assert_eq!(expected.top[0], Some(parsed.messages_span()));
        assert_eq!(expected.top[1], parsed.system_span());
        assert_eq!(expected.top[2], parsed.tools_span());
        assert_eq!(expected.top[3], parsed.field("tool_choice"));
        let (sonic, _) = sonic_spans(body, false);
        assert_eq!(
            sonic, expected,
            "sonic-rs and the scanner disagree on {name}"
        );
        let (_, decoded) = sonic_spans(body, true);
        let text = std::str::from_utf8(body).unwrap();
        let scanner_decoded: usize = expected
            .content
            .iter()
            .map(|s| json::decode_string(text, *s).unwrap().len())
            .sum();
        assert_eq!(
            decoded, scanner_decoded,
            "decoded content differs on {name}"
        );
        println!(
            "json/{name}: {} bytes, {} messages, {} content strings",
            body.len(),
            expected.messages,
            expected.content.len()
        );

        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("{name}/scanner/parse_indexed"), |b| {
            b.iter(|| {
                let text = std::str::from_utf8(black_box(body)).unwrap();
                json::parse_indexed(text).unwrap()
            });
        });
        group.bench_function(format!("{name}/scanner/spans"), |b| {
            b.iter(|| scanner_spans(black_box(body)));
        });
        group.bench_function(format!("{name}/wire/parse"), |b| {
            b.iter(|| wire::parse(black_box(body), dialect).unwrap());
        });
        group.bench_function(format!("{name}/sonic_rs/validate"), |b| {
            b.iter(|| {
                sonic_top_level(black_box(body))
                    .unwrap()
                    .map(|v| v.is_some())
            });
        });
        group.bench_function(format!("{name}/sonic_rs/lazy_spans"), |b| {
            b.iter(|| sonic_spans(black_box(body), false));
        });
        group.bench_function(format!("{name}/sonic_rs/lazy_spans_decoded"), |b| {
            b.iter(|| sonic_spans(black_box(body), true));
        });
        group.bench_function(format!("{name}/serde_json/value"), |b| {
            b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(body)).unwrap());
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
}

criterion_group! { name = benches; config = config(); targets = scanner_beside_sonic }
criterion_main!(benches);
