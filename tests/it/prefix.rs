//! The prefix finder on every corpus session, both corpora and both dialects, turn by turn: how
//! much of each turn an incremental turn would not read again, on real bodies. The turns are
//! the recorded final request cut before each assistant step and written out the same way, so
//! every earlier message matches by construction: the share is an upper bound for what live
//! agents send, and the moved-breakpoint test shows the one cost Claude Code adds to it.

use engine::wire::prefix::Seen;
use engine::wire::{self, Dialect};
use integration_tests::{bodies, session_turns};
use serde_json::{Value, json};

fn seen(body: &[u8], dialect: Dialect) -> Seen {
    let parsed = wire::parse(body, dialect).unwrap();
    Seen::of(std::str::from_utf8(body).unwrap(), parsed.messages_span())
}

fn message_count(body: &[u8]) -> usize {
    let value: Value = serde_json::from_slice(body).unwrap();
    value["messages"].as_array().unwrap().len()
}

/// `body` with Claude Code's last breakpoint: `cache_control` on the last block of the last
/// message (its text made a block when it was a string), and on no other message.
fn with_last_breakpoint(body: &[u8]) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(body).unwrap();
    let messages = value["messages"].as_array_mut().unwrap();
    for block in messages
        .iter_mut()
        .filter_map(|m| m["content"].as_array_mut())
        .flatten()
    {
        block.as_object_mut().map(|b| b.remove("cache_control"));
    }
    let last = messages.last_mut().unwrap();
    if let Some(text) = last["content"].as_str() {
        last["content"] = json!([{"type": "text", "text": text}]);
    }
    if let Some(block) = last["content"].as_array_mut().and_then(|b| b.last_mut()) {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
    serde_json::to_vec(&value).unwrap()
}

#[test]
fn every_turn_matches_the_history_it_repeats() {
    let (mut turns, mut matched_bytes, mut total_bytes) = (0, 0, 0);
    for body in bodies() {
        let name = body.path.display();
        let sent = session_turns(&body.bytes);
        for pair in sent.windows(2) {
            let (last, next) = (&pair[0], &pair[1]);
            let common = seen(last, body.dialect).common(next);
            // Each turn repeats the one before and appends: every earlier message matches.
            assert!(common.head_matches, "{name}: the head is the same");
            assert_eq!(common.matched, message_count(last), "{name}");
            assert!(!common.identical, "{name}: a new turn is not a retry");
            // The bytes before the new messages: what an incremental turn would not read again.
            let array = wire::parse(next, body.dialect).unwrap().messages_span();
            let kept = common
                .matched
                .checked_sub(1)
                .and_then(|last| {
                    wire::json::elements(std::str::from_utf8(next).unwrap(), array).nth(last)
                })
                .map_or(array.start, |span| span.end);
            assert!(
                seen(last, body.dialect).same_after(next, array.end),
                "{name}: the keys after the messages are the same"
            );
            matched_bytes += kept;
            total_bytes += next.len();
            turns += 1;
        }
        let last = sent.last().unwrap();
        assert!(seen(last, body.dialect).common(last).identical, "{name}");
    }
    let share = matched_bytes as f64 / total_bytes as f64;
    eprintln!(
        "prefix: {turns} turns, {:.1}% of their bytes matched",
        share * 100.0
    );
    assert!(turns > 1000, "{turns} turns");
    // Turns are whole histories plus one step: nearly every byte was in the last turn.
    assert!(share > 0.8, "{share}");
}

#[test]
fn a_moved_breakpoint_costs_exactly_the_message_it_left() {
    let mut turns = 0;
    for body in bodies()
        .into_iter()
        .filter(|b| b.dialect == Dialect::Anthropic)
    {
        let name = body.path.display();
        let sent: Vec<Vec<u8>> = session_turns(&body.bytes)
            .iter()
            .map(|t| with_last_breakpoint(t))
            .collect();
        for pair in sent.windows(2) {
            let common = seen(&pair[0], body.dialect).common(&pair[1]);
            assert!(common.head_matches, "{name}");
            assert_eq!(common.matched, message_count(&pair[0]) - 1, "{name}");
            turns += 1;
        }
    }
    assert!(turns > 500, "{turns} turns");
}

/// A live turn service on the embedded default: its own memory store, a clock that does not
/// move (so durations in reports are equal), sessions in this runtime.
fn service(
    resume: bool,
) -> (
    modes::turn::TurnService,
    std::sync::Arc<engine::pipeline::Pipeline>,
) {
    use engine::store::{MemoryStore, MemoryStoreLimits, Store};
    let config = engine::config::Config::parse(engine::config::EMBEDDED_DEFAULT).unwrap();
    let clock = std::sync::Arc::new(engine::clock::ManualClock::new());
    let store: std::sync::Arc<dyn Store> =
        std::sync::Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone()));
    let pipeline = std::sync::Arc::new(config.build_pipeline().unwrap());
    let service = modes::turn::TurnService::new(pipeline.clone(), store, clock)
        .with_local_sessions(config.cache.amortize);
    let service = if resume {
        service
    } else {
        service.without_parse_memo()
    };
    (service, pipeline)
}

/// What a turn forwards and reports, to compare: everything but the store's acknowledgement.
fn outcome(turn: &modes::turn::Turn) -> String {
    match turn {
        modes::turn::Turn::Forward(f) => format!(
            "{}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{} {} {:?} {:?}",
            String::from_utf8_lossy(&f.body),
            f.report,
            f.facts,
            f.messages,
            f.discarded,
            f.withheld,
            f.expandable,
            f.opaque,
            f.session,
            f.added,
        ),
        other => format!("{other:?}"),
    }
}

/// `turns` with the agent's own compaction at turn `at`: from there on, the history's third
/// message is a summary of itself (the rest of the history and the new turns are kept).
fn compacted_from(turns: &[Vec<u8>], at: usize) -> Vec<Vec<u8>> {
    turns
        .iter()
        .enumerate()
        .map(|(i, turn)| {
            if i < at {
                return turn.clone();
            }
            let mut value: Value = serde_json::from_slice(turn).unwrap();
            if let Some(third) = value["messages"].get_mut(2) {
                third["content"] = json!("Summary of the earlier steps: the tests were run.");
            }
            serde_json::to_vec(&value).unwrap()
        })
        .collect()
}

/// Item 2 of issue #34: every corpus session, both corpora, both dialects, turn by turn, through
/// a turn service that resumes its parses (and defers its counts past the send) and one that
/// parses whole. Same forwarded bytes, same reports; Claude Code's moving breakpoint on the
/// Messages turns, and an agent's compaction halfway through every session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_turn_forwards_what_a_whole_one_does() {
    let ((resumed, pipeline), (whole, _)) = (service(true), service(false));
    // A credential, as agents send: the parse memo keeps no conversation of a caller without.
    let mut headers = http::HeaderMap::new();
    headers.insert("x-api-key", http::HeaderValue::from_static("sk-parity"));
    let (mut turns, mut sessions) = (0, 0);
    for body in bodies() {
        let name = body.path.display().to_string();
        sessions += 2;
        let mut sent = session_turns(&body.bytes);
        if body.dialect == Dialect::Anthropic {
            sent = sent.iter().map(|t| with_last_breakpoint(t)).collect();
        }
        let sessions = [sent.clone(), compacted_from(&sent, sent.len() / 2)];
        for (variant, turns_of_session) in sessions.iter().enumerate() {
            for turn in turns_of_session {
                let bytes = bytes::Bytes::from(turn.clone());
                let mut headers = headers.clone();
                let run = name.replace(['/', ' '], "_");
                let session = format!("parity-{variant}-{}", &run[run.len().saturating_sub(90)..]);
                headers.insert(
                    modes::turn::SESSION_HEADER,
                    http::HeaderValue::from_str(&session).unwrap(),
                );
                let input =
                    |body: &integration_tests::CorpusBody, defer_counts| modes::turn::TurnInput {
                        dialect: body.dialect,
                        body: &bytes,
                        headers: &headers,
                        models: None,
                        defer_counts,
                    };
                // The resumed turn also defers its counts, as the proxy's does, and settles
                // them as the proxy does once the request is sent.
                let mut a = resumed.run(input(&body, true)).await;
                if let modes::turn::Turn::Forward(forward) = &mut a {
                    forward.count_deferred();
                }
                let b = whole.run(input(&body, false)).await;
                assert_eq!(outcome(&a), outcome(&b), "{name}, variant {variant}");
                turns += 1;
            }
        }
    }
    let (parses, skipped) = resumed.parses().unwrap().resumed();
    let carried = pipeline.carried_over_runs();
    eprintln!(
        "parity: {turns} turns, {parses} resumed parses, {skipped} entries not read again, \
         {carried} runs that carried over the last run's records"
    );
    // The embedded default carries over (`engine::pipeline::carry_over`): nearly every resumed
    // turn puts in what the last one did to the messages it shares, and still forwards the same
    // bytes. (A turn may run the pipeline more than once; each run counts.)
    assert!(
        carried * 10 >= parses * 9,
        "{carried} runs carried over, {parses} resumed"
    );
    assert!(turns > 4000, "{turns} turns");
    // Every turn resumes but a session's first and, with Claude Code's moving breakpoint, its
    // second: the first message carried the breakpoint on the first turn, so the opening the
    // memo finds a conversation by changed once.
    assert!(
        parses as usize + 2 * sessions >= turns,
        "{parses} of {turns}"
    );
}

/// `turn` with its top-level keys in the order `first`, then the rest, `messages` last: the
/// system prompt and tools before the transcript, where chat SDKs and older agents put them
/// (the corpus turns are written with sorted keys, which puts `system` and `tools` after it).
fn head_first(turn: &[u8]) -> Vec<u8> {
    let value: Value = serde_json::from_slice(turn).unwrap();
    let object = value.as_object().unwrap();
    let first = ["system", "tools"];
    let order = first
        .iter()
        .copied()
        .chain(
            object
                .keys()
                .map(String::as_str)
                .filter(|k| !first.contains(k) && *k != "messages"),
        )
        .chain(["messages"])
        .filter(|k| object.contains_key(*k));
    let members: Vec<String> = order
        .map(|k| format!("{}:{}", serde_json::to_string(k).unwrap(), object[k]))
        .collect();
    format!("{{{}}}", members.join(",")).into_bytes()
}

/// The resumed parse itself against the whole one on every corpus turn, both corpora, both
/// dialects, chained as a live conversation chains them (each continuation the last resumed
/// parse's), as written, pretty-printed (whitespace between every element) and with the system
/// prompt and tools before the transcript: `ParsedBody` equal, and its digests (content hashes,
/// token counts, markers, the tracker's fingerprints) and mentions equal.
#[test]
fn every_corpus_turn_resumes_to_the_whole_parse() {
    use engine::wire::{Mention, Resumed, parse_continuing, parse_text};
    let mut checked = 0;
    for body in bodies() {
        let name = body.path.display();
        let compact = session_turns(&body.bytes);
        let pretty: Vec<Vec<u8>> = compact
            .iter()
            .map(|t| {
                serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(t).unwrap()).unwrap()
            })
            .collect();
        let reordered: Vec<Vec<u8>> = compact.iter().map(|t| head_first(t)).collect();
        for turns in [compact, pretty, reordered] {
            let texts: Vec<&str> = turns
                .iter()
                .map(|t| std::str::from_utf8(t).unwrap())
                .collect();
            let first = parse_text(texts[0], body.dialect).unwrap();
            first.digests();
            first.fingerprints();
            let _ = Mention::ALL.map(|m| first.mentions(m));
            let mut earlier = first.into_continuation(None);
            for text in &texts[1..] {
                let entries = earlier.entries();
                let Resumed { parsed, kept, seen } = parse_continuing(text, body.dialect, earlier)
                    .unwrap_or_else(|| panic!("{name}: a turn that appends resumes"));
                assert_eq!(kept, entries, "{name}: every earlier entry is shared");
                let whole = parse_text(text, body.dialect).unwrap();
                assert_eq!(parsed, whole, "{name}");
                let (digests, full) = (parsed.digests(), whole.digests());
                assert_eq!(digests.content, full.content, "{name}");
                assert_eq!(digests.marked, full.marked, "{name}");
                // A count is carried or left to the run (no run took it here), never another.
                let uncounted = engine::digests::UNCOUNTED;
                assert!(
                    digests
                        .tokens
                        .iter()
                        .zip(full.tokens)
                        .all(|(&n, &whole)| n == whole || n == uncounted),
                    "{name}"
                );
                assert_eq!(parsed.fingerprints(), whole.fingerprints(), "{name}");
                // What the tracker looks for, searched past the shared bytes only.
                for mention in Mention::ALL {
                    assert_eq!(parsed.mentions(mention), whole.mentions(mention), "{name}");
                }
                earlier = parsed.into_continuation(Some((&seen, kept)));
                checked += 1;
            }
        }
    }
    eprintln!("resumed parses: {checked} turns checked against the whole parse");
    assert!(checked > 6000, "{checked} turns");
}
