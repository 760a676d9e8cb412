//! What a turn costs against the length of its session, in process: the largest sessions of
//! each corpus and dialect sent turn by turn through the turn service, as agents send them, on
//! three arms side by side in one run:
//!
//! - `whole`: every body parsed whole (the path before issue #34's resumed parse);
//! - `resumed`: the parse memo on, as `sluice serve` runs (each body read from where it stops
//!   repeating the last);
//! - `off`: an empty pipeline (`--preset off`), which forwards without reading.
//!
//! Each arm runs every session five times on fresh services; a turn's figure is its fastest
//! of the five (the least disturbed by the machine), and the table gives the mean per body-size
//! band. One thread, no I/O: the figures are the turn's own work, the proxy's HTTP left out.
//!
//! `cargo run --release -p benches --bin turns` (`-- resumed`, `-- whole` or `-- off` runs one
//! arm alone, for a profiler).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use engine::clock::ManualClock;
use engine::config::{Config, EMBEDDED_DEFAULT};
use engine::store::{MemoryStore, MemoryStoreLimits, Store};
use engine::wire::Dialect;
use modes::turn::{SESSION_HEADER, TurnInput, TurnService};

/// Sessions per corpus and dialect, largest first.
const SESSIONS: usize = 2;
const ROUNDS: usize = 5;
/// Body-size bands, in KiB: a turn falls in the first band whose bound it does not exceed.
const BANDS: [usize; 5] = [32, 64, 128, 256, usize::MAX];

#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Whole,
    Resumed,
    Off,
}

fn service(arm: Arm) -> TurnService {
    let yaml = if arm == Arm::Off {
        "pipeline: []"
    } else {
        EMBEDDED_DEFAULT
    };
    let config = Config::parse(yaml).expect("the config parses");
    let clock = Arc::new(ManualClock::new());
    let store: Arc<dyn Store> =
        Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone()));
    let service = TurnService::new(
        Arc::new(config.build_pipeline().expect("the pipeline builds")),
        store,
        clock,
    )
    .with_local_sessions(config.cache.amortize);
    match arm {
        Arm::Whole => service.without_parse_memo(),
        Arm::Resumed | Arm::Off => service,
    }
}

/// Each turn's time through a fresh service of `arm`.
async fn one_pass(arm: Arm, dialect: Dialect, session: &str, turns: &[Bytes]) -> Vec<Duration> {
    let service = service(arm);
    let mut headers = http::HeaderMap::new();
    headers.insert(
        SESSION_HEADER,
        http::HeaderValue::from_str(session).expect("an id"),
    );
    // A credential, as agents send: the parse memo keeps no conversation of a caller without.
    headers.insert("x-api-key", http::HeaderValue::from_static("sk-turns"));
    let mut out = Vec::with_capacity(turns.len());
    for body in turns {
        let started = Instant::now();
        let turn = service
            .run(TurnInput {
                dialect,
                body,
                headers: &headers,
                models: None,
                defer_counts: false,
            })
            .await;
        out.push(started.elapsed());
        drop(turn);
    }
    out
}

fn band(len: usize) -> usize {
    BANDS
        .iter()
        .position(|kib| len <= kib.saturating_mul(1024))
        .unwrap_or(BANDS.len() - 1)
}

fn band_label(i: usize) -> String {
    match (i.checked_sub(1).map(|p| BANDS[p]), BANDS[i]) {
        (None, hi) => format!("≤ {hi} KB"),
        (Some(lo), usize::MAX) => format!("> {lo} KB"),
        (Some(lo), hi) => format!("{lo}–{hi} KB"),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    engine::tokens::warm_up();
    let only = std::env::args().nth(1).map(|arm| match arm.as_str() {
        "whole" => Arm::Whole,
        "resumed" => Arm::Resumed,
        "off" => Arm::Off,
        other => panic!("unknown arm `{other}` (whole, resumed, off)"),
    });
    println!("| corpus | dialect | body size | turns | whole | resumed | off |");
    println!("|---|---|---|--:|--:|--:|--:|");
    for folder in ["public", "claude-code"] {
        for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
            // Per band: turns, and the summed fastest time of each arm.
            let mut sums = [[Duration::ZERO; 3]; BANDS.len()];
            let mut counts = [0usize; BANDS.len()];
            for (name, body) in benches::corpus_bodies(folder, dialect)
                .into_iter()
                .take(SESSIONS)
            {
                let turns: Vec<Bytes> = integration_tests::session_turns(&body)
                    .into_iter()
                    .map(Bytes::from)
                    .collect();
                for turn in &turns {
                    counts[band(turn.len())] += 1;
                }
                for (a, arm) in [Arm::Whole, Arm::Resumed, Arm::Off].into_iter().enumerate() {
                    if only.is_some_and(|only| only != arm) {
                        continue;
                    }
                    let mut best = vec![Duration::MAX; turns.len()];
                    for round in 0..ROUNDS {
                        let session = format!("turns-{name}-{}-{a}-{round}", dialect.as_str());
                        let times = runtime.block_on(one_pass(arm, dialect, &session, &turns));
                        for (b, t) in best.iter_mut().zip(times) {
                            *b = (*b).min(t);
                        }
                    }
                    for (turn, t) in turns.iter().zip(best) {
                        sums[band(turn.len())][a] += t;
                    }
                }
            }
            for (i, count) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
                let us = |a: usize| sums[i][a].as_secs_f64() * 1e6 / *count as f64;
                println!(
                    "| {folder} | {} | {} | {count} | {:.0} µs | {:.0} µs | {:.1} µs |",
                    dialect.as_str(),
                    band_label(i),
                    us(0),
                    us(1),
                    us(2),
                );
            }
        }
    }
}
