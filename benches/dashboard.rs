//! The dashboard store's costs: one capture on the request path (a channel send), and the
//! page's first reads on a large store (200,000 requests, each with five component rows).
//!
//! Run with `cargo bench -p benches --bench dashboard`. Figures are in `docs/performance.md`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use criterion::{Criterion, criterion_group, criterion_main};
use dashboard::query::{self, RowFilter};
use dashboard::{ComponentEvent, Dashboard, DashboardOptions, Event, ReplyUsage};
use engine::wire::Dialect;

const ROWS: u64 = 200_000;
const COMPONENTS: [&str; 5] = ["format", "textclean", "dedup", "collapse", "linecap"];
const MODELS: [&str; 4] = [
    "claude-sonnet-4-5",
    "gpt-4o",
    "claude-opus-4-5",
    "gemini-3-pro",
];

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A realistic event: a turn of one of 2,000 sessions, a week of traffic.
fn event(i: u64, now: u64) -> Event {
    let before = 20_000 + (i * 7_919) % 180_000;
    let saved = (before / 7) * (i % 3);
    Event {
        ts_ms: now - (ROWS - i) * 3_000,
        session: Some(format!("k0123456789abcdef:session-{}", i % 2_000)),
        dialect: Some(if i.is_multiple_of(2) {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }),
        model: Some(MODELS[(i % 4) as usize].into()),
        mode: "sync",
        status: if i.is_multiple_of(97) { 429 } else { 200 },
        stream: !i.is_multiple_of(3),
        messages: 40 + (i % 200) as u32,
        tokens_before: before,
        tokens_after: before - saved,
        components: COMPONENTS
            .iter()
            .enumerate()
            .map(|(k, name)| ComponentEvent {
                name,
                kind: if k < 2 { "reformat" } else { "offload" },
                acted: (i + k as u64).is_multiple_of(4),
                mutated: (i + k as u64).is_multiple_of(4),
                saved_tokens: if (i + k as u64).is_multiple_of(4) {
                    saved / 2
                } else {
                    0
                },
                duration_us: 100 + k as u64 * 40,
                gates: vec![("below_min_tokens", 3), ("too_recent", 1)],
                ..ComponentEvent::default()
            })
            .collect(),
        added_us: 700,
        upstream_ms: Some(900),
        usage: ReplyUsage {
            input: Some(before / 20),
            output: Some(400),
            cache_read: Some(before * 8 / 10),
            cache_write: Some(before / 10),
            model: None,
        },
        ..Event::default()
    }
}

/// A store on disk with `ROWS` requests, filled at the writer's pace.
fn filled() -> (Dashboard, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("sluice-bench-dashboard-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("dashboard.db");
    let dashboard = Dashboard::open(DashboardOptions {
        path: Some(path),
        retention: None,
        max_bytes: None,
        ..DashboardOptions::default()
    })
    .expect("dashboard");
    let now = now_ms();
    let started = std::time::Instant::now();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(4_000) {
        for i in chunk {
            dashboard.record(event(*i, now));
        }
        dashboard.flush();
    }
    let captured = dashboard
        .counts()
        .captured
        .load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "filled {captured} rows in {:.1} s ({:.0} rows/s through the writer)",
        started.elapsed().as_secs_f64(),
        captured as f64 / started.elapsed().as_secs_f64()
    );
    assert_eq!(captured, ROWS, "every row written");
    (dashboard, dir)
}

fn benches(c: &mut Criterion) {
    let (dashboard, dir) = filled();
    let mut group = c.benchmark_group("dashboard_200k");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    let week = RowFilter {
        since: Some(now_ms() - 7 * 24 * 3_600_000),
        ..RowFilter::default()
    };
    group.bench_function("overview", |b| {
        b.iter(|| {
            dashboard
                .read(|c| query::overview(c, &week))
                .expect("overview")
        });
    });
    group.bench_function("requests_first_page", |b| {
        b.iter(|| {
            dashboard
                .read(|c| query::requests(c, &week, None, Some(50)))
                .expect("requests")
        });
    });
    group.bench_function("sessions_first_page", |b| {
        b.iter(|| {
            dashboard
                .read(|c| query::sessions(c, &week, None, Some(50)))
                .expect("sessions")
        });
    });
    group.bench_function("series_hourly", |b| {
        b.iter(|| {
            dashboard
                .read(|c| query::series(c, &week, 3_600_000))
                .expect("series")
        });
    });
    group.bench_function("components", |b| {
        b.iter(|| {
            dashboard
                .read(|c| query::components(c, &week))
                .expect("components")
        });
    });
    group.finish();

    // The request path's whole cost: one send. A queue kept from filling by the writer.
    let now = now_ms();
    let mut i = 0;
    c.bench_function("dashboard_record", |b| {
        b.iter_batched(
            || {
                i += 1;
                event(i, now)
            },
            |e| dashboard.record(e),
            criterion::BatchSize::SmallInput,
        );
    });
    drop(dashboard);
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group!(dashboard, benches);
criterion_main!(dashboard);
