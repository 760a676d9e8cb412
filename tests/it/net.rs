//! One savings figure (issue 58): the headline, billed input saved, net, and content tokens
//! saved, net (both `engine::savings`), read the same in `/stats`, `/metrics`, the dashboard's
//! API and `sluice replay`'s JSON for the same traffic through the real server, and a request
//! that did not complete upstream adds nothing to them.

use std::sync::Arc;
use std::time::Duration;

use dashboard::{Dashboard, DashboardOptions};
use engine::config::Config;
use engine::wire::Dialect;
use integration_tests::mock::Reply;
use modes::replay::{Options, replay_session, session_headers, totals, turns_of};
use serde_json::Value;

use crate::proxy::{Sluice, call, compactable, corpus, start_tuned};

/// The terms of the net saving, by their `/stats` keys.
const TERMS: [&str; 4] = [
    "net_savings_pct",
    "savings_pct_gross",
    "net_saved_tokens",
    "expand_declared_tokens",
];

/// The headline's terms, by their `/stats` keys: settled by each session's cost guard from the
/// provider's usage reports, live and in replay alike.
const BILLED: [&str; 5] = [
    "billed_savings_pct",
    "billed_savings_pct_gross",
    "billed_requests",
    "billed_input_tokens",
    "billed_baseline_tokens",
];

/// Equal up to the order the terms were summed in (per request live, per turn in replay, in
/// SQL on the dashboard).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0),
        _ => false,
    }
}

/// sluice on the embedded default with a dashboard in memory, its OpenAI upstream `upstream`
/// (the mock when `None`).
async fn start(upstream: Option<String>) -> (Sluice, Arc<Dashboard>) {
    let dashboard = Arc::new(Dashboard::open(DashboardOptions::default()).unwrap());
    let shared = dashboard.clone();
    let sluice = start_tuned(
        |_| engine::config::EMBEDDED_DEFAULT.to_owned(),
        move |settings| {
            settings.dashboard = Some(shared);
            if let Some(upstream) = upstream {
                settings.openai_upstream = upstream;
            }
        },
    )
    .await;
    (sluice, dashboard)
}

async fn api(sluice: &Sluice, path: &str) -> Value {
    let reply = call("GET", &format!("{}{path}", sluice.url), &[], "").await;
    assert_eq!(reply.status, 200, "{path}");
    serde_json::from_slice(&reply.body).unwrap()
}

/// The dashboard's overview once its writer has stored `requests` rows (a row is sent when its
/// reply is done, which may be a moment after the client has read it).
async fn overview(sluice: &Sluice, dashboard: &Dashboard, requests: usize) -> Value {
    for _ in 0..100 {
        dashboard.flush();
        let overview = api(sluice, "/dashboard/api/overview").await;
        if overview["requests"].as_u64() == Some(requests as u64) {
            return overview;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the dashboard never stored {requests} rows");
}

/// A `/metrics` sample's value.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

async fn metrics(sluice: &Sluice) -> String {
    String::from_utf8(sluice.get("/metrics").await.body.to_vec()).unwrap()
}

/// A corpus session with every answer reduced to words and its calls' arguments to `{}`.
/// Replay bills an expand round where an answer names an identifier only a marker kept, and the
/// mock model never expands: traffic that needs no round is the same traffic on both sides.
fn plain_answers(body: &[u8]) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(body).unwrap();
    for message in value["messages"].as_array_mut().unwrap() {
        if message["role"] != "assistant" {
            continue;
        }
        message["content"] = Value::from("next step");
        if let Some(calls) = message["tool_calls"].as_array_mut() {
            for call in calls {
                call["function"]["arguments"] = Value::from("{}");
            }
        }
    }
    serde_json::to_vec(&value).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_saved_is_one_figure_in_stats_metrics_the_dashboard_and_replay() {
    let (sluice, dashboard) = start(None).await;
    let dialect = Dialect::OpenAi;
    let body = plain_answers(&corpus(
        "gemini3pro-miniswe-pytest-dev-pytest-6197",
        dialect,
    ));
    let turns = turns_of(&body).unwrap();
    let name = "net-saved-one-figure";

    // Replay first, as the parity test does: the same session, the same config.
    let yaml = engine::config::EMBEDDED_DEFAULT;
    let config = Config::parse(yaml).unwrap();
    let pipeline = Arc::new(config.build_pipeline().unwrap());
    let options = Options {
        keep_bodies: true,
        // The mock model never expands: neither side learns from a round.
        learn_from_rounds: false,
        ..Options::default()
    };
    let prices = options.prices;
    let (replayed_turns, replay_options) = (turns.clone(), options.clone());
    let report = tokio::task::spawn_blocking(move || {
        replay_session(
            name,
            &replayed_turns,
            dialect,
            &config,
            pipeline,
            &replay_options,
        )
    })
    .await
    .unwrap()
    .unwrap();
    let reports = [report];
    let all = totals(&reports, &prices);
    let replayed: Value =
        serde_json::from_str(&proxy::replay::json(&reports, &all, &prices)).unwrap();
    assert_eq!(
        replayed["totals"]["expand_rounds"], 0,
        "the traffic needs no expand round, so both sides see the same"
    );

    // The same turns through the real server, billed as replay bills them.
    sluice.mock.set_billing_like_replay(true);
    let headers = session_headers(name);
    let header = headers
        .get(modes::turn::SESSION_HEADER)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let sent = reports[0].bodies.len();
    for turn in &turns[..sent] {
        let reply = sluice
            .chat(
                dialect,
                &[(modes::turn::SESSION_HEADER, header.as_str())],
                turn.clone(),
            )
            .await;
        assert_eq!(reply.status, 200);
    }

    let stats = sluice.stats_when("billed_requests", sent as u64).await;
    assert!(stats["saved_tokens"].as_u64().unwrap() > 0, "{stats}");
    assert_eq!(stats["expand_rounds"], 0);
    assert_eq!(stats["failed_requests_excluded"], 0);
    let net = stats["net_savings_pct"].as_f64().unwrap();
    assert!(net != 0.0, "{stats}");
    assert_eq!(
        stats["savings_pct"], stats["net_savings_pct"],
        "one figure, two names"
    );

    // /metrics: the same figure as a ratio.
    let text = metrics(&sluice).await;
    assert_eq!(metric(&text, "cg_net_savings_ratio"), net / 100.0);
    assert_eq!(
        metric(&text, "cg_gross_savings_ratio"),
        stats["savings_pct_gross"].as_f64().unwrap() / 100.0
    );

    let billed = stats["billed_savings_pct"].as_f64().unwrap();
    assert_eq!(
        stats["billed_requests"], sent,
        "every turn settled: {stats}"
    );
    assert!(billed > 0.0, "{stats}");
    assert_eq!(metric(&text, "cg_billed_savings_ratio"), billed / 100.0);
    assert_eq!(
        metric(&text, "cg_billed_requests_total"),
        sent as f64,
        "/metrics counts the same sample"
    );

    // The dashboard: the whole window, the session, the model.
    let over = overview(&sluice, &dashboard, sent).await;
    let sessions = api(&sluice, "/dashboard/api/sessions").await;
    let cost = api(&sluice, "/dashboard/api/cost").await;
    let session = &sessions["sessions"][0];
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1);
    for key in TERMS {
        assert_eq!(over[key], stats[key], "dashboard overview {key}: {over}");
        assert_eq!(
            session[key], stats[key],
            "dashboard session {key}: {session}"
        );
        assert_eq!(cost["models"][0][key], stats[key], "dashboard cost {key}");
    }
    for key in BILLED {
        assert!(
            same(&over[key], &stats[key]),
            "dashboard overview {key}: {over}"
        );
        assert!(same(&session[key], &stats[key]), "dashboard session {key}");
        assert!(
            same(&cost["models"][0][key], &stats[key]),
            "dashboard cost {key}"
        );
    }

    // Replay's JSON, for the corpus and for its one session.
    let replay_session_totals = &replayed["sessions"][0]["totals"];
    for (replay_key, stats_key) in [
        ("net_savings_pct", "net_savings_pct"),
        ("savings_pct_gross", "savings_pct_gross"),
    ] {
        assert_eq!(
            replayed["totals"][replay_key], stats[stats_key],
            "replay {replay_key}"
        );
        assert_eq!(replay_session_totals[replay_key], stats[stats_key]);
    }
    for key in ["billed_savings_pct", "billed_savings_pct_gross"] {
        assert!(
            same(&replayed["totals"][key], &stats[key]),
            "replay {key}: {} against {}",
            replayed["totals"],
            stats
        );
        assert!(same(&replay_session_totals[key], &stats[key]));
    }
    assert_eq!(
        replayed["totals"]["billed"]["requests"],
        stats["billed_requests"]
    );
    for (replay_key, stats_key) in [
        ("tokens_before", "tokens_before"),
        ("declared_tokens", "expand_declared_tokens"),
    ] {
        assert_eq!(
            replayed["totals"]["net"][replay_key], stats[stats_key],
            "replay net.{replay_key}"
        );
    }

    // Two requests the upstream refused: nothing billed, nothing saved.
    sluice.mock.script([
        Reply::Status(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
        ),
        Reply::Status(
            400,
            r#"{"error":{"message":"bad request","type":"invalid_request_error"}}"#.into(),
        ),
    ]);
    for status in [529, 400] {
        let reply = sluice
            .chat(
                dialect,
                &[(modes::turn::SESSION_HEADER, header.as_str())],
                turns[sent - 1].clone(),
            )
            .await;
        assert_eq!(reply.status, status);
    }
    let after = sluice.stats_when("failed_requests_excluded", 2).await;
    for key in TERMS.into_iter().chain(BILLED) {
        assert_eq!(after[key], stats[key], "/stats {key} after the failures");
    }
    assert_eq!(after["failed_requests_excluded"], 2);
    let excluded = after["failed_saved_tokens_excluded"].as_u64().unwrap();
    assert!(excluded > 0, "their cuts are counted apart: {after}");
    assert_eq!(
        after["saved_tokens"].as_u64().unwrap(),
        stats["saved_tokens"].as_u64().unwrap() + excluded,
        "the pipeline's own count keeps them"
    );
    assert_eq!(
        metric(&metrics(&sluice).await, "cg_net_savings_ratio"),
        net / 100.0
    );
    let over = overview(&sluice, &dashboard, sent + 2).await;
    for key in TERMS {
        assert_eq!(over[key], stats[key], "dashboard {key} after the failures");
    }
    for key in BILLED {
        assert!(
            same(&over[key], &stats[key]),
            "dashboard {key} after the failures"
        );
    }
    assert_eq!(over["failed_requests_excluded"], 2);
    assert_eq!(over["failed_saved_tokens_excluded"], excluded);
    assert_eq!(over["errors"], 2);
}

#[tokio::test]
async fn with_no_upstream_reachable_nothing_is_saved() {
    // A port nobody listens on: the call fails to connect.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let (sluice, dashboard) = start(Some(format!("http://{closed}"))).await;
    let dialect = Dialect::OpenAi;
    let reply = sluice.chat(dialect, &[], compactable(dialect, false)).await;
    assert!(reply.status >= 500, "{}", reply.status);
    let stats = sluice.stats_when("failed_requests_excluded", 1).await;
    assert_eq!(stats["upstream_errors"], 1);
    let cut = stats["saved_tokens"].as_u64().unwrap();
    assert!(cut > 0, "the pipeline cut before the call failed: {stats}");
    for key in [
        "net_savings_pct",
        "savings_pct",
        "savings_pct_gross",
        "billed_savings_pct",
    ] {
        assert_eq!(stats[key], 0.0, "{key}: {stats}");
    }
    assert_eq!(stats["billed_requests"], 0, "no report, nothing billed");
    assert_eq!(stats["failed_requests_excluded"], 1);
    assert_eq!(stats["failed_saved_tokens_excluded"], cut);
    assert_eq!(metric(&metrics(&sluice).await, "cg_net_savings_ratio"), 0.0);
    let over = overview(&sluice, &dashboard, 1).await;
    assert_eq!(over["net_savings_pct"], 0.0);
    assert_eq!(over["billed_savings_pct"], 0.0);
    assert_eq!(over["billed_requests"], 0);
    assert_eq!(over["failed_requests_excluded"], 1);
    assert_eq!(over["failed_saved_tokens_excluded"], cut);
}
