//! Every public corpus session replayed turn by turn through the turn service (the one the
//! proxy runs: session actors, the tracker, freeze and replay), with every built component: no
//! turn may change a byte the previous turn forwarded.

use std::sync::Arc;
use std::time::Duration;

use engine::clock::ManualClock;
use engine::config::Config;
use engine::store::{MemoryStore, Store};
use integration_tests::{bodies, session_turns as turns, wire_messages};
use modes::{Turn, TurnInput, TurnService};

/// The start of the pipeline, in the order a user would run them: lossless repacking first,
/// then the offloaders, `linecap` last among the reference's.
const LEADING: &[&str] = &[
    "format",
    "textclean",
    "dedup",
    "failed_run",
    "repeated_call",
    "failed_call",
    "stale_reasoning",
    "smartcrush",
    "stale_output",
    "oversized_block",
    "skeleton",
    "mask",
    "collapse",
    "linecap",
];

/// Every component this build has (`components::ALL`): the leading ones in their order, then
/// the rest as the registry lists them, so a component added to the registry is in this test
/// the day it lands.
fn all_built() -> String {
    let rest = engine::components::ALL
        .iter()
        .map(|f| f.name())
        .filter(|name| !LEADING.contains(name));
    let names: Vec<&str> = LEADING.iter().copied().chain(rest).collect();
    format!("pipeline: [{}]", names.join(", "))
}

/// The turn service over every built component, a memory store and a clock the test moves.
fn service(config: &Config, clock: &Arc<ManualClock>) -> TurnService {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(config.store.limits(), clock.clone()));
    TurnService::new(
        Arc::new(config.build_pipeline().unwrap()),
        store,
        clock.clone(),
    )
    .with_local_sessions(config.cache.amortize)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_public_session_replays_turn_by_turn_with_zero_flips() {
    let config = Config::parse(&all_built()).unwrap();
    assert_eq!(
        config.pipeline.len(),
        engine::components::ALL.len(),
        "every registered component runs"
    );
    let mut headers = http::HeaderMap::new();
    headers.insert(
        modes::turn::SESSION_HEADER,
        http::HeaderValue::from_static("replay"),
    );
    let (mut sessions, mut checked, mut replayed, mut cold_acted) = (0, 0, 0u64, 0);
    for body in bodies()
        .iter()
        .filter(|b| b.path.to_string_lossy().contains("/public/"))
    {
        let clock = Arc::new(ManualClock::new());
        let service = service(&config, &clock);
        let mut previous: Vec<String> = Vec::new();
        let turns = turns(&body.bytes);
        let cold_turn = turns.len() / 2;
        for (k, turn) in turns.iter().enumerate() {
            // Warm turns 40 s apart, with one long break half way through the session.
            let gap = if k == cold_turn { 3 * 3600 } else { 40 };
            clock.advance(Duration::from_secs(gap));
            let input = TurnInput {
                dialect: body.dialect,
                body: &bytes::Bytes::from(turn.clone()),
                headers: &headers,
                models: None,
                defer_counts: false,
            };
            let Turn::Forward(applied) = service.run(input).await else {
                panic!("{} turn {k}: untouched", body.path.display());
            };
            let facts = &applied.facts;
            let forwarded = wire_messages(&applied.body);
            let frozen = applied.report.frozen();
            // The bytes below are the flip check. A decision the store lost (the 3 h break
            // outlives the TTL) is counted as dropped until it is written again, even where the
            // component re-decides it to the same bytes (`extract`, sampled, cannot re-derive);
            // before the break the store must lose none.
            assert!(
                k >= cold_turn || frozen.dropped == 0,
                "{} turn {k}: {frozen:?}",
                body.path.display()
            );
            replayed += frozen.hits;
            if facts.cold {
                cold_acted += usize::from(
                    applied
                        .report
                        .components
                        .iter()
                        .any(|c| c.name == "mask" && c.acted),
                );
            } else if k > 0 {
                for (i, (before, now)) in previous.iter().zip(&forwarded).enumerate() {
                    assert!(
                        before == now || without_breakpoints(before) == without_breakpoints(now),
                        "{} turn {k}: message {i} flipped inside the cached prefix:\n{}\n---\n{}",
                        body.path.display(),
                        &before[..before.len().min(600)],
                        &now[..now.len().min(600)]
                    );
                }
                checked += 1;
            }
            previous = forwarded;
        }
        sessions += 1;
    }
    eprintln!(
        "{sessions} sessions, {checked} warm turns, mask acted on {cold_acted} cold turns, {replayed} replays"
    );
    assert!(sessions >= 58, "{sessions} sessions");
    assert!(checked > 500, "{checked} warm turns checked");
    assert!(
        cold_acted > 5,
        "mask acted at depth on {cold_acted} cold turns"
    );
    assert!(replayed > 100, "{replayed} frozen decisions replayed");
}

/// A message's bytes without its `cache_control` breakpoints. Where a breakpoint sits is not
/// part of what the provider caches: Claude Code moves its own to the newest message every turn,
/// and so does `cacheinject`. Every other byte must stay as it was, key order included.
fn without_breakpoints(message: &str) -> String {
    const KEY: &str = "\"cache_control\":";
    let mut out = message.to_owned();
    while let Some(at) = out.find(KEY) {
        // The value is a flat object (`{"type":"ephemeral"}`, with `"ttl"` at most).
        let close = out[at..]
            .find('}')
            .map(|i| at + i + 1)
            .expect("a closed breakpoint");
        let (start, end) = match (out[..at].ends_with(','), out[close..].starts_with(',')) {
            (true, _) => (at - 1, close),
            (false, true) => (at, close + 1),
            (false, false) => (at, close),
        };
        out.replace_range(start..end, "");
    }
    out
}
