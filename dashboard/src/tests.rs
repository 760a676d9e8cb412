//! The dashboard store end to end: events in, rows, prices, pages and content out.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use engine::wire::Dialect;

use super::query::{self, RowFilter};

use super::*;

fn event(ts_ms: u64, session: &str, saved: u64) -> Event {
    Event {
        ts_ms,
        session: Some(format!("k0123456789abcdef:{session}")),
        dialect: Some(Dialect::Anthropic),
        model: Some("claude-sonnet-4-5".into()),
        mode: "sync",
        status: 200,
        stream: true,
        messages: 12,
        tokens_before: 10_000,
        tokens_after: 10_000 - saved,
        components: vec![
            ComponentEvent {
                name: "dedup",
                kind: "offload",
                acted: saved > 0,
                mutated: saved > 0,
                saved_tokens: saved,
                duration_us: 120,
                changed: vec![3],
                ..ComponentEvent::default()
            },
            ComponentEvent {
                name: "mask",
                kind: "offload",
                gates: vec![("too_recent", 2), ("below_min_tokens", 1)],
                duration_us: 40,
                ..ComponentEvent::default()
            },
        ],
        added_us: 700,
        upstream_ms: Some(900),
        usage: ReplyUsage {
            input: Some(1_000),
            output: Some(200),
            cache_read: Some(8_000),
            cache_write: Some(1_000),
            model: None,
        },
        ..Event::default()
    }
}

fn open(options: DashboardOptions) -> Dashboard {
    Dashboard::open(options).unwrap()
}

#[test]
fn rows_are_priced_at_write_time_and_read_back_with_their_components() {
    let dash = open(DashboardOptions::default());
    let now = now_ms();
    dash.record(event(now - 2_000, "a", 3_000));
    dash.record(event(now - 1_000, "a", 0));
    dash.record(Event {
        model: Some("some-local-model".into()),
        status: 429,
        ..event(now, "b", 500)
    });
    dash.flush();
    let overview = dash
        .read(|c| query::overview(c, &RowFilter::default()))
        .unwrap();
    assert_eq!(overview["requests"], 3);
    assert_eq!(overview["sessions"], 2);
    assert_eq!(overview["saved_tokens"], 3_500);
    assert_eq!(overview["errors"], 1);
    assert_eq!(
        overview["priced_requests"], 2,
        "an unknown model is not priced"
    );
    // 3,000 tokens at Sonnet's cache-write price ($3.75/M), the tier this request's suffix paid.
    let saved = overview["saved_usd"].as_f64().unwrap();
    assert!((saved - 3_000.0 * 3.75 / 1e6).abs() < 1e-9, "{overview}");
    let net = overview["net_saved_usd"].as_f64().unwrap();
    assert!(
        (net - saved).abs() < 1e-12,
        "no expand rounds: net is the saving"
    );
    // The one savings percentage counts the rows the upstream completed: the 429 (billed
    // nothing) is left out of it and counted apart, as `/stats` does.
    assert_eq!(overview["net_savings_pct"], 100.0 * 3_000.0 / 20_000.0);
    assert_eq!(overview["savings_pct_gross"], overview["net_savings_pct"]);
    assert_eq!(overview["failed_requests_excluded"], 1);
    assert_eq!(overview["failed_saved_tokens_excluded"], 500);
    assert!(
        overview.get("net_saved_pct").is_none(),
        "no second percentage"
    );

    let page = dash
        .read(|c| query::requests(c, &RowFilter::default(), None, Some(2)))
        .unwrap();
    let rows = page["requests"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(
        rows[0]["id"].as_i64() > rows[1]["id"].as_i64(),
        "newest first"
    );
    assert!(rows[0]["cost_usd"].is_null(), "unknown, never $0");
    let next = page["next_before"].as_u64().unwrap();
    let rest = dash
        .read(|c| query::requests(c, &RowFilter::default(), Some(next), Some(2)))
        .unwrap();
    assert_eq!(rest["requests"].as_array().unwrap().len(), 1);

    let id = rows[1]["id"].as_u64().unwrap();
    let detail = dash
        .read(|c| query::request(c, id, false))
        .unwrap()
        .unwrap();
    assert_eq!(detail["components"][1]["component"], "mask");
    assert_eq!(detail["components"][1]["skipped"]["too_recent"], 2);
    assert_eq!(detail["content_visible"], false);
    assert!(detail.get("content").is_none());

    let components = dash
        .read(|c| query::components(c, &RowFilter::default()))
        .unwrap();
    let dedup = &components["components"][0];
    assert_eq!(
        (dedup["runs"].as_i64(), dedup["acted"].as_i64()),
        (Some(3), Some(2))
    );
    assert_eq!(
        components["components"][1]["skipped"]["below_min_tokens"],
        3
    );

    let filtered = RowFilter {
        component: Some("dedup".into()),
        status: Some("ok".into()),
        ..RowFilter::default()
    };
    let only = dash.read(|c| query::overview(c, &filtered)).unwrap();
    assert_eq!(only["requests"], 1);

    let series = dash
        .read(|c| query::series(c, &RowFilter::default(), 1_000))
        .unwrap();
    let total: i64 = series["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["requests"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 3);

    let sessions = dash
        .read(|c| query::sessions(c, &RowFilter::default(), None, None))
        .unwrap();
    let first = &sessions["sessions"][0];
    assert_eq!(first["requests"], 1, "session b is the most recent");
    let label = first["session"].as_str().unwrap();
    assert_eq!(label.len(), 16);
    assert!(!label.contains('b') || label.chars().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn content_is_captured_redacted_and_only_for_changed_messages() {
    let dash = open(DashboardOptions {
        content: true,
        ..DashboardOptions::default()
    });
    let original = br#"{"model":"claude-sonnet-4-5","messages":[
        {"role":"user","content":"run the tests"},
        {"role":"assistant","content":"ok"},
        {"role":"user","content":"OPENAI_API_KEY=sk-proj-4fGh7JkL9mNpQrStUvWxYz0123456789abcdEFGH\nlots of output here"}
    ]}"#;
    let parsed = engine::wire::parse(original, Dialect::Anthropic).unwrap();
    let cut = parsed.messages()[2].with_content("<<cg:0123456789abcdef>> (cut)".into());
    let forwarded = engine::message::Forwarded::new(parsed.messages().len(), vec![(2, cut)]);
    let mut e = event(now_ms(), "c", 20);
    e.components[0].changed = vec![2];
    e.content = Some(ContentSource {
        dialect: Dialect::Anthropic,
        original: Bytes::from_static(original),
        forwarded,
        hold: dash.hold_content(original.len()).unwrap(),
    });
    dash.record(e);
    dash.flush();
    let id = dash
        .read(|c| query::requests(c, &RowFilter::default(), None, None))
        .unwrap()["requests"][0]["id"]
        .as_u64()
        .unwrap();
    let detail = dash.read(|c| query::request(c, id, true)).unwrap().unwrap();
    assert_eq!(detail["content_captured"], true);
    let content = detail["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "only the changed message");
    assert_eq!(content[0]["message"], 2);
    assert_eq!(content[0]["components"], "dedup");
    let before = content[0]["before"].as_str().unwrap();
    assert!(before.contains("[redacted:openai_key]") && !before.contains("sk-proj-4fGh"));
    assert!(before.contains("lots of output here"));
    assert_eq!(content[0]["after"], "<<cg:0123456789abcdef>> (cut)");
}

#[test]
fn a_full_queue_drops_and_counts_without_waiting() {
    let dash = open(DashboardOptions {
        queue: 1,
        ..DashboardOptions::default()
    });
    // The writer takes one event and lingers for more; everything past the queue is dropped.
    let started = std::time::Instant::now();
    for i in 0..2_000 {
        dash.record(event(now_ms(), &format!("s{i}"), 1));
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "record never waits"
    );
    dash.flush();
    let (captured, dropped) = (
        dash.counts().captured.load(Ordering::Relaxed),
        dash.counts().dropped.load(Ordering::Relaxed),
    );
    assert_eq!(captured + dropped, 2_000);
    assert!(dropped > 0, "{captured} captured, none dropped");
}

#[test]
fn retention_deletes_old_rows_and_keeps_the_file_under_its_bound() {
    let dir = std::env::temp_dir().join(format!("sluice-dash-{}", std::process::id()));
    let path = dir.join("state.dashboard.db");
    let _ = std::fs::remove_dir_all(&dir);
    {
        let dash = open(DashboardOptions {
            path: Some(path.clone()),
            retention: None,
            max_bytes: None,
            ..DashboardOptions::default()
        });
        let now = now_ms();
        for i in 0..300 {
            let age = if i < 100 { 10 * 24 * 3_600_000 } else { 0 };
            dash.record(event(now - age, &format!("s{i}"), 10));
        }
        dash.flush();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    let deleted = writer::sweep(&conn, Some(Duration::from_secs(7 * 24 * 3600)), None).unwrap();
    assert_eq!(deleted, 100, "the ten-day-old rows");
    let left: i64 = conn
        .query_row("SELECT count(*) FROM request_components", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 400, "their components went with them");
    writer::sweep(&conn, None, Some(16 << 10)).unwrap();
    assert!(
        schema::used_bytes(&conn).unwrap() <= 16 << 10 || {
            let rows: i64 = conn
                .query_row("SELECT count(*) FROM requests", [], |r| r.get(0))
                .unwrap();
            rows < 200
        }
    );
    drop(conn);
    // A restart reads the same file and keeps labelling sessions the same way.
    let dash = open(DashboardOptions {
        path: Some(path.clone()),
        retention: None,
        ..DashboardOptions::default()
    });
    dash.record(event(now_ms(), "s299", 10));
    dash.flush();
    let sessions = dash
        .read(|c| query::sessions(c, &RowFilter::default(), None, Some(500)))
        .unwrap();
    let s299: Vec<_> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["requests"].as_i64() == Some(2))
        .collect();
    assert_eq!(
        s299.len(),
        1,
        "the same session before and after the restart"
    );
    drop(dash);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_state_stores_file_is_never_taken_for_a_dashboard() {
    let dir = std::env::temp_dir().join(format!("sluice-dash-s-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE sessions (session TEXT); PRAGMA user_version = 1;")
            .unwrap();
    }
    let refused = Dashboard::open(DashboardOptions {
        path: Some(path.clone()),
        ..DashboardOptions::default()
    });
    assert!(matches!(refused, Err(DashboardError::NotADashboard(_))));
    assert!(
        path.exists() && !dir.join("state.db.v1.bak").exists(),
        "left where it was"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn content_is_held_within_its_budget() {
    let dash = open(DashboardOptions::default());
    let big = dash.hold_content(CONTENT_BUDGET as usize - 10).unwrap();
    assert!(dash.hold_content(11).is_none(), "over the budget");
    let small = dash.hold_content(10).unwrap();
    drop(big);
    assert!(
        dash.hold_content(1 << 20).is_some(),
        "given back when dropped"
    );
    drop(small);
}

#[test]
fn a_dashboard_of_another_schema_is_moved_aside_and_other_files_are_not() {
    let dir = std::env::temp_dir().join(format!("sluice-dash-v-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let other = dir.join("other.db");
    {
        let conn = rusqlite::Connection::open(&other).unwrap();
        conn.execute_batch("CREATE TABLE requests (x); PRAGMA user_version = 99;")
            .unwrap();
    }
    assert!(matches!(
        Dashboard::open(DashboardOptions {
            path: Some(other.clone()),
            ..DashboardOptions::default()
        }),
        Err(DashboardError::NotADashboard(_))
    ));
    assert!(other.exists(), "another program's file stays where it is");
    // A dashboard of the first version (no application id yet) is known by its tables.
    let path = dir.join("d.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES ('session_key', 'k');
             CREATE TABLE requests (id INTEGER PRIMARY KEY);
             CREATE TABLE request_components (x);
             CREATE TABLE request_content (x);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let dash = open(DashboardOptions {
        path: Some(path.clone()),
        ..DashboardOptions::default()
    });
    dash.record(event(now_ms(), "a", 1));
    dash.flush();
    assert_eq!(dash.counts().captured.load(Ordering::Relaxed), 1);
    assert!(dir.join("d.db.v1.bak").exists());
    drop(dash);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_overview_shows_the_share_forwarded_untouched_by_reason() {
    let dash = open(DashboardOptions::default());
    let now = now_ms();
    for (i, untouched) in [None, None, Some("unparsed_not_json"), Some("header")]
        .into_iter()
        .enumerate()
    {
        dash.record(Event {
            untouched,
            ..event(now - 1_000 + i as u64, "a", 0)
        });
    }
    dash.record(Event {
        untouched: Some("unparsed_not_json"),
        ..event(now, "b", 0)
    });
    dash.flush();
    let all = dash
        .read(|c| query::overview(c, &RowFilter::default()))
        .unwrap();
    assert_eq!(
        all["untouched"],
        serde_json::json!([
            {"reason": "unparsed_not_json", "requests": 2, "pct": 40.0},
            {"reason": "header", "requests": 1, "pct": 20.0},
        ]),
        "most first, each a share of every request in the window"
    );
    // A narrower window: the share is of the requests in it.
    let before_b = RowFilter {
        until: Some(now),
        ..RowFilter::default()
    };
    let a = dash.read(|c| query::overview(c, &before_b)).unwrap();
    assert_eq!(a["requests"], 4);
    assert_eq!(a["untouched"][0]["pct"], 25.0, "{a}");
}
