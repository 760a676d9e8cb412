//! The dashboard through the real server: what the pipeline did, the provider's usage and the
//! expand rounds reach its rows; content only with both switches open and only for trusted
//! callers; the live feed; the page's headers; where `sluice serve`'s flags put it (in memory
//! with the memory store, served and recording), and the page that says it is off.

use std::sync::Arc;
use std::time::Duration;

use dashboard::{Dashboard, DashboardOptions};
use engine::wire::Dialect;
use http_body_util::BodyExt;
use integration_tests::mock::Reply;
use serde_json::Value;

use crate::proxy::{DIALECTS, Sluice, call, compactable, first_marker, start_tuned};

async fn start(content: bool, token: Option<&str>) -> (Sluice, Arc<Dashboard>) {
    let dashboard = Arc::new(
        Dashboard::open(DashboardOptions {
            content,
            ..DashboardOptions::default()
        })
        .unwrap(),
    );
    let shared = dashboard.clone();
    let sluice = start_tuned(
        |_| engine::config::EMBEDDED_DEFAULT.to_owned(),
        move |settings| {
            settings.dashboard = Some(shared);
            settings.admission.token = token.map(str::to_owned);
        },
    )
    .await;
    (sluice, dashboard)
}

async fn api(sluice: &Sluice, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let reply = call("GET", &format!("{}{path}", sluice.url), headers, "").await;
    let value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    (reply.status, value)
}

/// Waits for the writer, as the page's next refresh would.
fn settle(dashboard: &Dashboard) {
    dashboard.flush();
}

#[tokio::test]
async fn every_dialect_is_captured_as_the_pipeline_and_the_provider_reported_it() {
    let (sluice, dashboard) = start(false, None).await;
    for dialect in DIALECTS {
        for stream in [false, true] {
            let mut body: Value = serde_json::from_slice(&compactable(dialect, stream)).unwrap();
            if dialect == Dialect::OpenAi && stream {
                body["stream_options"] = serde_json::json!({ "include_usage": true });
            }
            let reply = sluice
                .chat(dialect, &[], serde_json::to_vec(&body).unwrap())
                .await;
            assert_eq!(reply.status, 200);
        }
    }
    settle(&dashboard);
    let stats = sluice.stats().await;
    let (status, overview) = api(&sluice, "/dashboard/api/overview", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(overview["requests"], 6);
    // The dashboard reads the pipeline's own report: it cannot disagree with /stats.
    assert_eq!(
        overview["saved_tokens"].as_u64(),
        stats["saved_tokens"].as_u64(),
        "{overview} vs {stats}"
    );
    assert!(overview["saved_tokens"].as_u64().unwrap() > 0);
    // And the one savings figure is the same figure, streamed or not, in every dialect.
    assert_eq!(overview["net_savings_pct"], stats["net_savings_pct"]);
    assert_eq!(overview["errors"], 0);
    assert_eq!(overview["capture"]["dropped"], 0);

    let (_, page) = api(&sluice, "/dashboard/api/requests?limit=10", &[]).await;
    let rows = page["requests"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for row in rows {
        let input = row["fresh_input_tokens"].as_u64().unwrap()
            + row["cache_read_tokens"].as_u64().unwrap_or(0)
            + row["cache_write_tokens"].as_u64().unwrap_or(0);
        assert!(
            input > 10_000,
            "the provider's usage of a corpus body: {row}"
        );
        assert!(row["cost_usd"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["output_tokens"].as_u64().unwrap() > 0, "{row}");
        assert!(!row["acted"].as_array().unwrap().is_empty(), "{row}");
        assert_eq!(row["content_captured"], false);
        assert_eq!(row["capture_blocked_by"], "operator");
    }
    // The mock provider caches prompts: the same chat body a second time is read from its cache.
    let cached = rows
        .iter()
        .filter(|r| r["cache_read_tokens"].as_u64().unwrap_or(0) > 0)
        .count();
    assert!(cached >= 2, "{page}");

    let id = rows[0]["id"].as_u64().unwrap();
    let (_, detail) = api(&sluice, &format!("/dashboard/api/requests/{id}"), &[]).await;
    let names: Vec<&str> = detail["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["component"].as_str().unwrap())
        .collect();
    let pipeline = engine::config::Config::embedded().pipeline;
    assert_eq!(names, pipeline, "one row per component, in pipeline order");
    assert_eq!(detail["content_visible"], true, "loopback is trusted");
    assert_eq!(detail["content"], Value::Array(vec![]));

    let (_, components) = api(&sluice, "/dashboard/api/components", &[]).await;
    let collapse = components["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["component"] == "collapse")
        .unwrap();
    assert_eq!(collapse["runs"], 6);
    assert!(collapse["acted"].as_u64().unwrap() > 0);
    let (_, sessions) = api(&sluice, "/dashboard/api/sessions", &[]).await;
    assert!(!sessions["sessions"].as_array().unwrap().is_empty());
    let (_, series) = api(&sluice, "/dashboard/api/series?bucket_ms=60000", &[]).await;
    let total: u64 = series["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 6);
}

#[tokio::test]
async fn expand_rounds_are_billed_in_the_net_figure() {
    let (sluice, dashboard) = start(false, None).await;
    let dialect = Dialect::Anthropic;
    let body = compactable(dialect, false);
    sluice.chat(dialect, &[], body.clone()).await;
    let (id, _) = first_marker(&sluice.mock.recorded().last().unwrap().body, &body, dialect);
    sluice.mock.script([
        Reply::Expand {
            text: None,
            ids: vec![id],
        },
        Reply::Text("done".into()),
    ]);
    sluice.chat(dialect, &[], body).await;
    settle(&dashboard);
    let (_, page) = api(&sluice, "/dashboard/api/requests", &[]).await;
    let latest = &page["requests"][0];
    assert_eq!(latest["expand_rounds"], 1, "{latest}");
    assert!(latest["expand_tokens"].as_u64().unwrap() > 0);
    let (saved, expand, net) = (
        latest["saved_usd"].as_f64().unwrap(),
        latest["expand_cost_usd"].as_f64().unwrap(),
        latest["net_saved_usd"].as_f64().unwrap(),
    );
    assert!(expand > 0.0);
    assert!((net - (saved - expand)).abs() < 1e-12);
    let (_, overview) = api(&sluice, "/dashboard/api/overview", &[]).await;
    assert_eq!(overview["expand_rounds"], 1);
}

#[tokio::test]
async fn content_needs_both_switches_and_a_trusted_caller() {
    let (sluice, dashboard) = start(true, Some("s3cret")).await;
    let dialect = Dialect::OpenAi;
    sluice.chat(dialect, &[], compactable(dialect, false)).await;
    sluice
        .chat(
            dialect,
            &[("x-context-guru-capture", "off")],
            compactable(dialect, false),
        )
        .await;
    settle(&dashboard);
    // The consent header is sluice's: it never reaches the provider.
    assert!(
        sluice
            .mock
            .recorded()
            .iter()
            .all(|r| !r.headers.contains_key("x-context-guru-capture"))
    );
    let bearer = [("authorization", "Bearer s3cret")];
    let (_, page) = api(&sluice, "/dashboard/api/requests", &[]).await;
    let (declined, captured) = (&page["requests"][0], &page["requests"][1]);
    assert_eq!(declined["capture_blocked_by"], "tenant");
    assert_eq!(declined["content_captured"], false);
    assert_eq!(captured["content_captured"], true);

    let path = format!("/dashboard/api/requests/{}", captured["id"]);
    let (_, untrusted) = api(&sluice, &path, &[]).await;
    assert_eq!(
        untrusted["content_visible"], false,
        "no admin token: not trusted"
    );
    assert!(untrusted.get("content").is_none());
    assert!(!untrusted["components"].as_array().unwrap().is_empty());
    let (_, trusted) = api(&sluice, &path, &bearer).await;
    assert_eq!(trusted["content_visible"], true);
    let content = trusted["content"].as_array().unwrap();
    assert!(!content.is_empty());
    for message in content {
        let (before, after) = (
            message["before"].as_str().unwrap(),
            message["after"].as_str().unwrap(),
        );
        assert_ne!(before, after);
        assert!(after.contains("<<cg:") || after.len() < before.len());
    }
    let (status, _) = api(&sluice, "/dashboard/api/config", &[]).await;
    assert_eq!(status, 403);
    let (status, config) = api(&sluice, "/dashboard/api/config", &bearer).await;
    assert_eq!(status, 200);
    assert_eq!(config["mode"], "sync");
    // A page on another site that re-points its own name at sluice (DNS rebinding) reaches it
    // from loopback, with the right token even, but names itself in Host: nothing for it.
    let rebound = [bearer[0], ("host", "attacker.example:4000")];
    let (_, detail) = api(&sluice, &path, &rebound).await;
    assert_eq!(detail["content_visible"], false);
    let (status, _) = api(&sluice, "/dashboard/api/config", &rebound).await;
    assert_eq!(status, 403);
    let named = [bearer[0], ("host", "localhost:4000")];
    let (_, detail) = api(&sluice, &path, &named).await;
    assert_eq!(detail["content_visible"], true);
}

#[tokio::test]
async fn the_operator_switch_off_keeps_every_message_out_of_the_store() {
    let (sluice, dashboard) = start(false, None).await;
    for dialect in DIALECTS {
        sluice.chat(dialect, &[], compactable(dialect, false)).await;
    }
    settle(&dashboard);
    let rows: i64 = dashboard
        .read(|c| c.query_row("SELECT count(*) FROM request_content", [], |r| r.get(0)))
        .unwrap();
    assert_eq!(rows, 0);
    let blocked: i64 = dashboard
        .read(|c| {
            c.query_row(
                "SELECT count(*) FROM requests WHERE capture_blocked_by = 'operator'",
                [],
                |r| r.get(0),
            )
        })
        .unwrap();
    assert_eq!(blocked, 3);
}

#[tokio::test]
async fn the_live_feed_sends_each_row_and_the_page_is_locked_down() {
    let (sluice, dashboard) = start(false, None).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let request = http::Request::get(format!("{}/dashboard/api/events", sluice.url))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    sluice
        .chat(
            Dialect::Anthropic,
            &[],
            compactable(Dialect::Anthropic, false),
        )
        .await;
    let mut seen = String::new();
    let found = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                seen.push_str(&String::from_utf8_lossy(data));
                if seen.contains("event: request") {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "{seen}");
    assert!(seen.contains("\"saved_tokens\":") && !seen.contains("\"content\""));
    assert_eq!(dashboard.subscribers(), 1);

    let page = call("GET", &format!("{}/dashboard/", sluice.url), &[], "").await;
    assert_eq!(page.status, 200);
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(page.headers["x-frame-options"], "DENY");
    let redirect = call("GET", &format!("{}/dashboard", sluice.url), &[], "").await;
    assert_eq!(redirect.status, 301);
    let missing = call(
        "GET",
        &format!("{}/dashboard/api/nope", sluice.url),
        &[],
        "",
    )
    .await;
    assert_eq!(missing.status, 404);
    let bad = call(
        "GET",
        &format!("{}/dashboard/api/requests?since=%zz", sluice.url),
        &[],
        "",
    )
    .await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn without_a_dashboard_the_page_says_how_to_turn_it_on() {
    let sluice = crate::proxy::start(engine::config::EMBEDDED_DEFAULT).await;
    let page = sluice.get("/dashboard/").await;
    assert_eq!(page.status, 404);
    assert!(
        page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let text = String::from_utf8_lossy(&page.body);
    assert!(
        text.contains("The dashboard is off") && text.contains("--no-dashboard"),
        "{text}"
    );
    assert_eq!(page.headers["x-frame-options"], "DENY");
    let (status, error) = api(&sluice, "/dashboard/api/overview", &[]).await;
    assert_eq!(status, 404);
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--no-dashboard"), "{error}");
}

/// `sluice serve` with its flags decides where the dashboard lives; the real server then
/// answers its page and records a request in it.
#[tokio::test]
async fn serve_with_the_memory_store_keeps_the_dashboard_in_memory() {
    let (dashboard, said) = proxy::cli::serve_dashboard(&["--store", "memory"]).unwrap();
    let dashboard = dashboard.expect("the dashboard is on with the memory store");
    assert!(dashboard.path().is_none(), "nothing on disk: {said}");
    assert!(
        said.contains("in memory") && said.contains("64 MiB"),
        "{said}"
    );
    let shared = dashboard.clone();
    let sluice = start_tuned(
        |_| engine::config::EMBEDDED_DEFAULT.to_owned(),
        move |settings| {
            settings.dashboard = Some(shared);
        },
    )
    .await;

    let page = sluice.get("/dashboard/").await;
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("<title>sluice dashboard</title>"));
    let (status, overview) = api(&sluice, "/dashboard/api/overview", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(overview["requests"], 0);
    assert_eq!(overview["capture"]["kept"], "memory");

    let anthropic = sluice
        .chat(
            Dialect::Anthropic,
            &[],
            compactable(Dialect::Anthropic, false),
        )
        .await;
    assert_eq!(anthropic.status, 200);
    let gemini = sluice
        .chat(
            Dialect::Gemini,
            &[("x-goog-api-key", "AIza-one")],
            crate::proxy::corpus("gemini3pro-miniswe-pytest-dev-pytest-6197", Dialect::Gemini),
        )
        .await;
    assert_eq!(gemini.status, 200);
    settle(&dashboard);

    let (status, page) = api(&sluice, "/dashboard/api/requests", &[]).await;
    assert_eq!(status, 200);
    let rows = page["requests"].as_array().unwrap();
    let mut routes: Vec<&str> = rows.iter().map(|r| r["route"].as_str().unwrap()).collect();
    routes.sort_unstable();
    assert_eq!(routes, ["anthropic", "gemini"], "{page}");
    let anthropic_row = rows.iter().find(|r| r["route"] == "anthropic").unwrap();
    assert!(
        anthropic_row["saved_tokens"].as_u64().unwrap() > 0,
        "{page}"
    );
    // Gemini's rows filter as `route=gemini`, as docs/dashboard.md lists.
    let (_, gemini_only) = api(&sluice, "/dashboard/api/requests?route=gemini", &[]).await;
    assert_eq!(gemini_only["requests"].as_array().unwrap().len(), 1);
    let (_, overview) = api(&sluice, "/dashboard/api/overview", &[]).await;
    assert_eq!(overview["requests"], 2);
}

#[test]
fn serve_decides_where_the_dashboard_lives() {
    use proxy::cli::serve_dashboard;
    let kept = |args: &[&str]| {
        let (dashboard, said) = serve_dashboard(args).unwrap();
        (
            dashboard.map(|d| d.path().map(std::path::Path::to_path_buf)),
            said,
        )
    };
    for store in ["memory", "off"] {
        let (path, said) = kept(&["--store", store]);
        assert_eq!(path, Some(None), "--store {store}: in memory ({said})");
    }
    let (path, said) = kept(&["--store", "memory", "--no-dashboard"]);
    assert_eq!(path, None);
    assert!(said.contains("--no-dashboard"), "{said}");
    let (path, said) = kept(&[
        "--store",
        "memory",
        "--dashboard",
        "--dashboard-max-mb",
        "8",
    ]);
    assert_eq!(path, Some(None));
    assert!(said.contains("8 MiB"), "{said}");

    let dir = std::env::temp_dir().join(format!(
        "sluice-dashboard-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let state = dir.join("state.db");
    let store = format!("sqlite:{}", state.display());
    let (path, said) = kept(&["--store", store.as_str()]);
    assert_eq!(path, Some(Some(dir.join("state.dashboard.db"))), "{said}");
    assert!(said.contains("512 MiB"), "{said}");
    let (path, _) = kept(&["--store", store.as_str(), "--dashboard-db", ":memory:"]);
    assert_eq!(path, Some(None));
    let own = dir.join("history.db");
    let (path, _) = kept(&["--store", "memory", "--dashboard-db", own.to_str().unwrap()]);
    assert_eq!(path, Some(Some(own)));
    let refused = serve_dashboard(&[
        "--store",
        store.as_str(),
        "--dashboard-db",
        state.to_str().unwrap(),
    ]);
    assert!(refused.is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
