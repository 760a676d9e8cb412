//! The real server against the mock provider: both dialects, stream and non-stream, the expand
//! loop, header hygiene, pass-through, operator routes, limits and graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use engine::config::Config;
use engine::marker;
use engine::store::MemoryStore;
use engine::wire::{self, Dialect};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use integration_tests::mock::{Mock, Reply};
use proxy::state::{App, Settings, StateStore};
use proxy::upstream::{Timeouts, Upstream};
use serde_json::{Value, json};

pub(crate) struct Sluice {
    pub(crate) url: String,
    pub(crate) mock: Mock,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<()>,
}

async fn start_with(config: &str, body_limit: usize) -> Sluice {
    start_configured(|_| config.to_owned(), body_limit).await
}

/// Starts sluice with a config that may name its mock's URL (the mock as the cheap model too).
pub(crate) async fn start_cheap(config_for: impl Fn(&str) -> String) -> Sluice {
    start_configured(config_for, 32 << 20).await
}

async fn start_configured(config_for: impl Fn(&str) -> String, body_limit: usize) -> Sluice {
    start_tuned(config_for, |settings| settings.body_limit = body_limit).await
}

/// Starts sluice with its settings adjusted by `tune` (timeouts, caps).
pub(crate) async fn start_tuned(
    config_for: impl Fn(&str) -> String,
    tune: impl FnOnce(&mut Settings),
) -> Sluice {
    start_timed(config_for, tune, Timeouts::default()).await
}

/// [`start_tuned`] with the upstream's timeouts too.
pub(crate) async fn start_timed(
    config_for: impl Fn(&str) -> String,
    tune: impl FnOnce(&mut Settings),
    timeouts: Timeouts,
) -> Sluice {
    let mock = Mock::start().await;
    let config = Config::parse(&config_for(&mock.url())).unwrap();
    let clock = Arc::new(proxy::clock::SystemClock);
    let store = Arc::new(MemoryStore::new(config.store.limits(), clock));
    let mut settings = Settings {
        anthropic_upstream: mock.url(),
        openai_upstream: mock.url(),
        gemini_upstream: mock.url(),
        vertex_upstream: Some(mock.url()),
        ..Settings::default()
    };
    tune(&mut settings);
    let app = Arc::new(
        App::new(
            config,
            settings,
            Upstream::new(timeouts),
            StateStore::Local(store),
        )
        .unwrap(),
    );
    let (listener, addr) = proxy::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(proxy::server::serve(
        listener,
        app,
        async {
            let _ = rx.await;
        },
        Duration::from_secs(5),
    ));
    Sluice {
        url: format!("http://{addr}"),
        mock,
        stop: Some(tx),
        served,
    }
}

pub(crate) async fn start(config: &str) -> Sluice {
    start_with(config, 32 << 20).await
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

pub(crate) struct Reply_ {
    pub(crate) status: u16,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: Bytes,
}

pub(crate) async fn call(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply_ {
    let mut request = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = client()
        .request(request.body(Full::new(body.into())).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply_ {
        status,
        headers,
        body,
    }
}

impl Sluice {
    /// POSTs a body to the dialect's rewritten route.
    pub(crate) async fn chat(
        &self,
        dialect: Dialect,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply_ {
        call(
            "POST",
            &format!("{}{}", self.url, route(dialect)),
            headers,
            body,
        )
        .await
    }

    pub(crate) async fn get(&self, path_and_query: &str) -> Reply_ {
        call("GET", &format!("{}{path_and_query}", self.url), &[], "").await
    }

    pub(crate) async fn stats(&self) -> Value {
        serde_json::from_slice(&self.get("/stats").await.body).unwrap()
    }

    /// `/stats` once `key` reads `want`, or after ten seconds (for the caller to assert on).
    /// What the server does after the client holds its reply (settling the reply's usage, the
    /// keep-alive's pings) lands a moment later; a test that read `/stats` at once raced it.
    pub(crate) async fn stats_when(&self, key: &str, want: u64) -> Value {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let stats = self.stats().await;
            if stats[key].as_u64() == Some(want) || tokio::time::Instant::now() > deadline {
                return stats;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// A corpus run's body in `dialect`; a Responses body is converted from the chat one.
pub(crate) fn corpus(run: &str, dialect: Dialect) -> Vec<u8> {
    let file = match dialect {
        Dialect::OpenAi | Dialect::Responses | Dialect::Gemini => "openai.json",
        Dialect::Anthropic => "anthropic.json",
    };
    let path = integration_tests::corpus_root()
        .join("public")
        .join(run)
        .join(file);
    let body = integration_tests::read_corpus_file(&path).unwrap_or_else(|e| panic!("{e}"));
    match dialect {
        Dialect::Responses => integration_tests::responses_from_chat(&body),
        Dialect::Gemini => integration_tests::gemini_from_chat(&body),
        _ => body,
    }
}

/// Every dialect sluice rewrites.
pub(crate) const DIALECTS: [Dialect; 3] = [Dialect::OpenAi, Dialect::Anthropic, Dialect::Responses];

pub(crate) fn route(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::OpenAi => "/openai/v1/chat/completions",
        Dialect::Anthropic => "/anthropic/v1/messages",
        Dialect::Responses => "/openai/v1/responses",
        // The model is in the path; streaming is `gemini_route(true)`.
        Dialect::Gemini => "/gemini/v1beta/models/gemini-2.5-pro:generateContent",
    }
}

/// A corpus body the default config compacts (collapse acts on it), with `stream` set.
pub(crate) fn compactable(dialect: Dialect, stream: bool) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(&corpus(
        "gemini3pro-miniswe-pytest-dev-pytest-6197",
        dialect,
    ))
    .unwrap();
    value["stream"] = Value::Bool(stream);
    serde_json::to_vec(&value).unwrap()
}

/// The first marker id in a forwarded body and the original it stands for.
pub(crate) fn first_marker(forwarded: &[u8], sent: &[u8], dialect: Dialect) -> (String, String) {
    let after = wire::parse(forwarded, dialect).unwrap();
    let before = wire::parse(sent, dialect).unwrap();
    for (old, new) in before.messages().iter().zip(after.messages()) {
        if let Some(id) = marker::marker_ids(&new.content).next() {
            return (id.to_owned(), old.content.clone());
        }
    }
    panic!("no marker in the forwarded body");
}

pub(crate) fn answer_text(body: &[u8], dialect: Dialect) -> String {
    let value: Value = serde_json::from_slice(body).unwrap();
    match dialect {
        Dialect::Anthropic => value["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        Dialect::OpenAi => value["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        Dialect::Responses => value["output"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| item["type"] == "message")
            .filter_map(|item| item["content"][0]["text"].as_str())
            .collect(),
        Dialect::Gemini => value["candidates"][0]["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|part| part["text"].as_str())
            .collect(),
    }
}

/// The `index` of every Anthropic event of `kind` in a raw stream, in order.
fn event_indices(raw: &str, kind: &str) -> Vec<u64> {
    raw.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == kind)
        .filter_map(|v| v["index"].as_u64())
        .collect()
}

/// The text carried by a streamed answer, whichever dialect.
pub(crate) fn streamed_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out = String::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some(t) = value["delta"]["text"].as_str() {
            out.push_str(t);
        }
        if let Some(t) = value["choices"][0]["delta"]["content"].as_str() {
            out.push_str(t);
        }
        if value["type"] == "response.output_text.delta"
            && let Some(t) = value["delta"].as_str()
        {
            out.push_str(t);
        }
        for part in value["candidates"][0]["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(t) = part["text"].as_str() {
                out.push_str(t);
            }
        }
    }
    out
}

#[tokio::test]
async fn off_preset_forwards_bytes_identically_in_both_dialects() {
    let sluice = start("preset: off").await;
    for dialect in DIALECTS {
        let body = corpus("sweagent-fncall-simple", dialect);
        let reply = sluice
            .chat(dialect, &[("authorization", "Bearer k")], body.clone())
            .await;
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.headers.get("x-mock").unwrap(),
            "1",
            "the upstream response passes through"
        );
        assert_eq!(answer_text(&reply.body, dialect), "ok");
        let recorded = sluice.mock.recorded();
        assert!(
            recorded.last().unwrap().body == body,
            "forwarded byte-identically"
        );
    }
}

#[tokio::test]
async fn compacts_and_injects_the_expand_tool_last() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    for dialect in DIALECTS {
        let body = compactable(dialect, false);
        let reply = sluice.chat(dialect, &[], body.clone()).await;
        assert_eq!(reply.status, 200);
        let forwarded = sluice.mock.recorded().last().unwrap().body.clone();
        assert!(forwarded.len() < body.len());
        let value: Value = serde_json::from_slice(&forwarded).unwrap();
        let last = value["tools"].as_array().unwrap().last().unwrap().clone();
        let name = last["name"]
            .as_str()
            .or(last["function"]["name"].as_str())
            .unwrap()
            .to_owned();
        assert_eq!(name, "context_guru_expand");
        first_marker(&forwarded, &body, dialect);
    }
}

/// Issue #58: a 3,000-line job log with one failing batch in its middle, read after the user
/// asked why the job failed. Under the embedded default (every stage of it, `linecap` after
/// `collapse`) the failing line reaches the model in view, in both dialects, and the marker
/// still gives back the whole log.
#[tokio::test]
async fn a_failure_in_the_middle_of_a_long_log_reaches_the_model_under_the_default() {
    let error = r#"2026-03-02T10:41:40Z ERROR batch 2500 failed: duplicate key value violates unique constraint "orders_pkey""#;
    let log: String = (1..=3000)
        .map(|i| match i {
            2500 => error.to_owned(),
            i => format!(
                "2026-03-02T10:{:02}:{:02}Z INFO  batch {i} committed: 500 rows into orders in {}ms",
                (i / 60) % 60,
                i % 60,
                10 + i % 7
            ),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let command = json!({"command": "cat /var/log/import/job-4411.log"});
    let question = "tell me why it failed";
    let openai = json!({"model": "gpt-4.1", "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": question},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": command.to_string()}}]},
        {"role": "tool", "tool_call_id": "c1", "content": log}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]});
    let anthropic = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024,
        "system": "You are a coding agent.",
        "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": command}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": log}]}]});
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    // A session each: the second request re-issues the first one's call, which one session
    // would read as a retry after a cut and leave whole.
    let runs = [
        (Dialect::OpenAi, openai, "issue-58-openai"),
        (Dialect::Anthropic, anthropic, "issue-58-anthropic"),
    ];
    for (dialect, body, session) in runs {
        let sent = serde_json::to_vec(&body).unwrap();
        let headers = [("x-context-guru-session", session)];
        let reply = sluice.chat(dialect, &headers, sent.clone()).await;
        assert_eq!(reply.status, 200, "{dialect:?}");
        let forwarded = sluice.mock.recorded().last().unwrap().body.clone();
        let parsed = wire::parse(&forwarded, dialect).unwrap();
        let output = parsed
            .messages()
            .iter()
            .find(|m| m.is_tool())
            .unwrap()
            .content
            .clone();
        assert!(
            output.contains("of them kept below) <<cg:"),
            "{dialect:?}: collapsed, with lines kept: {output:.300}"
        );
        assert!(
            output.contains(&format!("\n[line 2500] {error}\n")),
            "{dialect:?}: the failing line is in view: {output}"
        );
        assert!(
            !output.contains("batch 1500 committed"),
            "{dialect:?}: the rest of the middle is cut"
        );
        assert!(
            output.len() * 20 < log.len(),
            "{dialect:?}: {} bytes",
            output.len()
        );
        // The marker gives back the whole log, byte for byte.
        let (id, original) = first_marker(&forwarded, &sent, dialect);
        assert_eq!(original, log);
        let expanded = sluice.get(&format!("/expand?id={id}")).await;
        assert_eq!(expanded.status, 200);
        assert!(
            expanded.body == log.as_bytes(),
            "{dialect:?}: the exact original"
        );
    }
}

#[tokio::test]
async fn expand_calls_are_answered_from_the_store_without_streaming() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    for dialect in DIALECTS {
        let body = compactable(dialect, false);
        // Learn the marker id the way the model would: from a first forwarded request.
        sluice.chat(dialect, &[], body.clone()).await;
        let (id, original) =
            first_marker(&sluice.mock.recorded().last().unwrap().body, &body, dialect);
        let before = sluice.mock.recorded().len();
        sluice.mock.script([
            Reply::Expand {
                text: Some("let me look".into()),
                ids: vec![id.clone(), "0000000000000000".into()],
            },
            Reply::Text("final answer".into()),
        ]);
        let reply = sluice.chat(dialect, &[], body.clone()).await;
        assert_eq!(reply.status, 200);
        assert_eq!(
            answer_text(&reply.body, dialect),
            "final answer",
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        let recorded = sluice.mock.recorded();
        assert_eq!(recorded.len(), before + 2, "one continuation round");
        let continuation: Value = serde_json::from_slice(&recorded.last().unwrap().body).unwrap();
        let text = continuation.to_string();
        assert!(
            text.contains(&serde_json::to_string(&original).unwrap()[1..200]),
            "the exact original is returned"
        );
        assert!(text.contains("[expand: original for id 0000000000000000 is no longer available]"));
    }
    let stats: Value = sluice.stats().await;
    assert_eq!(stats["expand_rounds"], 3);
    assert_eq!(stats["bounces"], 3);
    assert_eq!(stats["expand_misses"], 3);
    assert!(stats["wasted_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn expand_calls_are_answered_in_stream_in_both_dialects() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    for dialect in DIALECTS {
        let body = compactable(dialect, true);
        let first = sluice.chat(dialect, &[], body.clone()).await;
        assert_eq!(
            streamed_text(&first.body),
            "ok",
            "a marker-free answer streams through"
        );
        let (id, original) =
            first_marker(&sluice.mock.recorded().last().unwrap().body, &body, dialect);
        sluice.mock.script([
            Reply::Expand {
                text: None,
                ids: vec![id],
            },
            Reply::Text("streamed final".into()),
        ]);
        let reply = sluice.chat(dialect, &[], body.clone()).await;
        assert_eq!(reply.status, 200);
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        assert_eq!(streamed_text(&reply.body), "streamed final", "{text}");
        assert!(
            !text.contains("context_guru_expand"),
            "the client never sees the expand call"
        );
        let continuation =
            String::from_utf8_lossy(&sluice.mock.recorded().last().unwrap().body).into_owned();
        assert!(continuation.contains(&serde_json::to_string(&original).unwrap()[1..200]));
    }
    let stats: Value = sluice.stats().await;
    assert_eq!(stats["sse_buffered"], 3);
    assert!(stats["sse_streamed"].as_u64().unwrap() >= 6);
}

#[tokio::test]
async fn text_before_an_expand_call_streams_and_the_answer_continues_in_the_same_stream() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    for dialect in DIALECTS {
        let body = compactable(dialect, true);
        sluice.chat(dialect, &[], body.clone()).await;
        let (id, _) = first_marker(&sluice.mock.recorded().last().unwrap().body, &body, dialect);
        let before = sluice.mock.recorded().len();
        // Two rounds: text then expand, again text then expand, then the answer.
        sluice.mock.script([
            Reply::Expand {
                text: Some("Let me read the full log. ".into()),
                ids: vec![id.clone()],
            },
            Reply::Expand {
                text: Some("And once more. ".into()),
                ids: vec![id],
            },
            Reply::Text("Here is the fix.".into()),
        ]);
        let reply = sluice.chat(dialect, &[], body.clone()).await;
        let raw = String::from_utf8_lossy(&reply.body).into_owned();
        assert_eq!(
            streamed_text(&reply.body),
            "Let me read the full log. And once more. Here is the fix.",
            "{raw}"
        );
        assert!(!raw.contains("context_guru_expand"), "{raw}");
        assert_eq!(
            sluice.mock.recorded().len(),
            before + 3,
            "two continuation rounds"
        );
        if dialect == Dialect::Anthropic {
            // One message, with content blocks numbered 0, 1, 2 across the three upstream calls.
            assert_eq!(raw.matches("event: message_start").count(), 1, "{raw}");
            assert_eq!(
                event_indices(&raw, "content_block_start"),
                vec![0, 1, 2],
                "{raw}"
            );
            let mut deltas = event_indices(&raw, "content_block_delta");
            deltas.dedup();
            assert_eq!(deltas, vec![0, 1, 2], "deltas follow their blocks");
        }
        if dialect == Dialect::Responses {
            // One response: created once, output items 0, 1, 2, sequence numbers increasing,
            // and the closing response lists all three messages.
            let events: Vec<Value> = raw
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let count = |kind: &str| events.iter().filter(|e| e["type"] == kind).count();
            assert_eq!(count("response.created"), 1, "{raw}");
            assert_eq!(count("response.completed"), 1, "{raw}");
            let added: Vec<u64> = events
                .iter()
                .filter(|e| e["type"] == "response.output_item.added")
                .filter_map(|e| e["output_index"].as_u64())
                .collect();
            assert_eq!(added, vec![0, 1, 2], "{raw}");
            let sequences: Vec<u64> = events
                .iter()
                .filter_map(|e| e["sequence_number"].as_u64())
                .collect();
            assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
            let completed = events
                .iter()
                .find(|e| e["type"] == "response.completed")
                .unwrap();
            assert_eq!(
                answer_text(completed["response"].to_string().as_bytes(), dialect),
                "Let me read the full log. And once more. Here is the fix."
            );
        }
    }
}

#[tokio::test]
async fn a_call_to_another_tool_reaches_the_agent_untouched() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let dialect = Dialect::Anthropic;
    sluice.mock.script([Reply::Tool {
        name: "bash".into(),
        arguments: serde_json::json!({"command": "ls"}),
    }]);
    let reply = sluice.chat(dialect, &[], compactable(dialect, false)).await;
    let value: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(value["content"][0]["name"], "bash");
    assert_eq!(sluice.mock.recorded().len(), 1);
}

#[tokio::test]
async fn forbidden_headers_never_reach_the_upstream() {
    let sluice = start("preset: off").await;
    let headers = [
        ("authorization", "Bearer secret"),
        ("x-api-key", "key"),
        ("cookie", "session=abc"),
        ("x-context-guru-session", "s1"),
        ("x-context-guru-bypass", "true"),
        ("anthropic-version", "2023-06-01"),
    ];
    call(
        "POST",
        &format!("{}/anthropic/v1/messages", sluice.url),
        &headers,
        corpus("sweagent-fncall-simple", Dialect::Anthropic),
    )
    .await;
    let seen = &sluice.mock.recorded()[0].headers;
    assert_eq!(seen.get("authorization").unwrap(), "Bearer secret");
    assert_eq!(seen.get("x-api-key").unwrap(), "key");
    assert_eq!(seen.get("anthropic-version").unwrap(), "2023-06-01");
    assert!(seen.get("cookie").is_none());
    assert!(
        seen.keys()
            .all(|k| !k.as_str().starts_with("x-context-guru-"))
    );
}

#[tokio::test]
async fn other_paths_pass_through_and_errors_arrive_verbatim() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let reply = call(
        "GET",
        &format!("{}/openai/v1/models?limit=2", sluice.url),
        &[],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
    let value: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(value["path"], "/v1/models");
    let recorded = sluice.mock.recorded();
    assert_eq!(recorded[0].path, "/v1/models");

    let error = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    sluice.mock.script([
        Reply::Status(429, error.into()),
        Reply::Status(500, "upstream broke".into()),
    ]);
    let body = compactable(Dialect::Anthropic, false);
    let reply = call(
        "POST",
        &format!("{}/anthropic/v1/messages", sluice.url),
        &[],
        body.clone(),
    )
    .await;
    assert_eq!((reply.status, reply.body.as_ref()), (429, error.as_bytes()));
    let reply = call(
        "POST",
        &format!("{}/anthropic/v1/messages", sluice.url),
        &[],
        body,
    )
    .await;
    assert_eq!(
        (reply.status, reply.body.as_ref()),
        (500, &b"upstream broke"[..])
    );
}

#[tokio::test]
async fn unparseable_bodies_are_forwarded_untouched_and_counted() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let reply = call(
        "POST",
        &format!("{}/openai/v1/chat/completions", sluice.url),
        &[],
        "{not json",
    )
    .await;
    assert_eq!(reply.status, 200, "the upstream judges it, not sluice");
    assert_eq!(sluice.mock.recorded()[0].body.as_ref(), b"{not json");
    let stats: Value = sluice.stats().await;
    assert_eq!(stats["unparsed_requests"], 1);
}

#[tokio::test]
async fn expand_route_returns_the_exact_original_scoped_to_a_session() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let body = compactable(Dialect::OpenAi, false);
    call(
        "POST",
        &format!("{}/openai/v1/chat/completions", sluice.url),
        &[("x-context-guru-session", "agent-1")],
        body.clone(),
    )
    .await;
    let (id, original) = first_marker(&sluice.mock.recorded()[0].body, &body, Dialect::OpenAi);
    let reply = call(
        "GET",
        &format!("{}/expand?id={id}", sluice.url),
        &[("x-context-guru-session", "agent-1")],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
    assert!(reply.body == original.as_bytes(), "exact original");
    let reply = call(
        "GET",
        &format!("{}/expand?id={id}&session=agent-2", sluice.url),
        &[],
        "",
    )
    .await;
    assert_eq!(reply.status, 404, "another session does not see it");
    let reply = sluice.get(&format!("/expand?id={id}")).await;
    assert_eq!(
        reply.status, 200,
        "a person on loopback without a session may look it up"
    );
    let reply = call(
        "GET",
        &format!("{}/expand?id=ffffffffffffffff", sluice.url),
        &[],
        "",
    )
    .await;
    assert_eq!(reply.status, 404);
}

/// Stashes belong to the session and the caller's credential: a second tenant with the same
/// opening, the same claimed session and a forged marker gets a placeholder through the expand
/// loop, and `GET /expand` answers a session only to the credential that made it.
#[tokio::test]
async fn a_stash_answers_only_the_credential_that_made_it() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let body = compactable(Dialect::OpenAi, false);
    let tenant_a = [
        ("x-context-guru-session", "shared"),
        ("authorization", "Bearer sk-tenant-a"),
    ];
    let tenant_b = [
        ("x-context-guru-session", "shared"),
        ("authorization", "Bearer sk-tenant-b"),
    ];
    sluice.chat(Dialect::OpenAi, &tenant_a, body.clone()).await;
    let (id, original) = first_marker(&sluice.mock.recorded()[0].body, &body, Dialect::OpenAi);
    // Tenant B: the same opening, then a message that names A's marker (so the expand tool is
    // declared), and a model that asks to expand it.
    let mut forged: Value = serde_json::from_slice(&body).unwrap();
    let messages = forged["messages"].as_array().unwrap()[..2].to_vec();
    forged["messages"] = Value::Array(messages);
    forged["messages"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"role": "user", "content": format!("what is in <<cg:{id}>>?")}));
    let forged = serde_json::to_vec(&forged).unwrap();
    for (tenant, sees) in [(&tenant_b, false), (&tenant_a, true)] {
        sluice.mock.script([
            Reply::Expand {
                text: None,
                ids: vec![id.clone()],
            },
            Reply::Text("done".into()),
        ]);
        let reply = sluice.chat(Dialect::OpenAi, tenant, forged.clone()).await;
        assert_eq!(reply.status, 200);
        let continuation =
            String::from_utf8_lossy(&sluice.mock.recorded().last().unwrap().body).into_owned();
        let restored = continuation.contains(&serde_json::to_string(&original).unwrap()[1..200]);
        assert_eq!(restored, sees, "{tenant:?}");
        if !sees {
            assert!(
                continuation.contains("is no longer available"),
                "a miss is answered, not omitted"
            );
        }
    }
    let expand = |headers: &'static [(&'static str, &'static str)]| {
        let url = format!("{}/expand?id={id}&session=shared", sluice.url);
        async move { call("GET", &url, headers, "").await.status }
    };
    assert_eq!(
        expand(&[("authorization", "Bearer sk-tenant-a")]).await,
        200
    );
    assert_eq!(
        expand(&[("authorization", "Bearer sk-tenant-b")]).await,
        404
    );
    assert_eq!(expand(&[]).await, 404, "no credential, no scoped session");
    // A session header that is not text is refused, not read as absent (an unscoped lookup).
    let mut request = http::Request::builder()
        .method("GET")
        .uri(format!("{}/expand?id={id}", sluice.url));
    request = request.header(
        "x-context-guru-session",
        http::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
    );
    let response = client()
        .request(request.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
}

#[tokio::test]
async fn stats_metrics_health_and_compact_routes() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    assert_eq!(sluice.get("/healthz").await.body.as_ref(), b"ok");
    let body = compactable(Dialect::Anthropic, false);
    let compacted = call(
        "POST",
        &format!("{}/compact?provider=anthropic", sluice.url),
        &[],
        body.clone(),
    )
    .await;
    assert_eq!(compacted.status, 200);
    assert!(compacted.body.len() < body.len());
    assert!(
        sluice.mock.recorded().is_empty(),
        "/compact never calls upstream"
    );
    let garbage = call("POST", &format!("{}/compact", sluice.url), &[], "garbage").await;
    assert_eq!(
        (garbage.status, garbage.body.as_ref()),
        (200, &b"garbage"[..])
    );
    let off = call(
        "POST",
        &format!("{}/compact?preset=off", sluice.url),
        &[],
        body.clone(),
    )
    .await;
    assert!(off.body == body);

    call(
        "POST",
        &format!("{}/anthropic/v1/messages", sluice.url),
        &[],
        body,
    )
    .await;
    let stats: Value = sluice.stats().await;
    for key in [
        "requests",
        "tokens_before",
        "tokens_after",
        "saved_tokens",
        "saved_tokens_unique",
        "overcount_ratio",
        "savings_pct",
        "cg_added_ms_avg",
        "sse_streamed",
        "sse_buffered",
        "components",
        "mode",
        "bounces",
        "wasted_tokens",
    ] {
        assert!(stats.get(key).is_some(), "/stats has {key}");
    }
    assert_eq!(stats["mode"], "sync");
    assert!(
        stats["components"]["collapse"]["saved_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(stats["version"], env!("CARGO_PKG_VERSION"));
    assert!(stats["uptime_seconds"].is_u64());
    let metrics = String::from_utf8(sluice.get("/metrics").await.body.to_vec()).unwrap();
    assert!(metrics.contains("cg_requests_total"));
    assert!(metrics.contains("cg_component_runs_total{component=\"collapse\",outcome=\"acted\"}"));
    assert!(metrics.contains(&format!(
        "cg_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    )));
    // One naming scheme: every series is `cg_`, sluice's own as well as the reference's.
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("cg_"), "{line}");
    }
    promtool_passes(&metrics);
}

/// `promtool check metrics` (Debian's `prometheus` package) finds nothing to say about the
/// exposition. Skipped without promtool, unless `SLUICE_REQUIRE_PROMTOOL=1` (`.ci/run`).
fn promtool_passes(metrics: &str) {
    use std::io::Write as _;
    let required = std::env::var_os("SLUICE_REQUIRE_PROMTOOL").is_some_and(|v| v == "1");
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if !required => {
            eprintln!("skipped: promtool is not installed ({e}); .ci/run installs it");
            return;
        }
        Err(e) => panic!("SLUICE_REQUIRE_PROMTOOL=1 but promtool cannot start: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}"
    );
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let sluice = start_with("preset: off", 1024).await;
    let reply = call(
        "POST",
        &format!("{}/openai/v1/chat/completions", sluice.url),
        &[],
        vec![b' '; 4096],
    )
    .await;
    assert_eq!(reply.status, 413);
    assert!(sluice.mock.recorded().is_empty());
}

#[tokio::test]
async fn streams_pass_through_chunk_by_chunk_and_survive_shutdown() {
    let mut sluice = start("preset: off").await;
    sluice.mock.script([Reply::Slow {
        chunks: 5,
        pause: Duration::from_millis(150),
    }]);
    let mut body: Value =
        serde_json::from_slice(&corpus("sweagent-fncall-simple", Dialect::OpenAi)).unwrap();
    body["stream"] = Value::Bool(true);
    let request = http::Request::post(format!("{}/openai/v1/chat/completions", sluice.url))
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let response = client().request(request).await.unwrap();
    let mut incoming = response.into_body();
    // The first chunk arrives before the upstream has finished: nothing is buffered.
    let first = incoming
        .frame()
        .await
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("chat.completion.chunk"));
    // Stop the server while the stream is open: it must still finish.
    sluice.stop.take().unwrap().send(()).unwrap();
    let rest = incoming.collect().await.unwrap().to_bytes();
    let all = [first.as_ref(), rest.as_ref()].concat();
    assert_eq!(streamed_text(&all), "xxxxx");
    assert!(String::from_utf8_lossy(&all).ends_with("data: [DONE]\n\n"));
    tokio::time::timeout(Duration::from_secs(5), &mut sluice.served)
        .await
        .expect("server stops after draining")
        .unwrap();
}

#[tokio::test]
async fn an_upstream_reset_mid_stream_reaches_the_client_as_an_error() {
    let sluice = start("preset: off").await;
    sluice.mock.script([Reply::ResetMidStream]);
    let mut body: Value =
        serde_json::from_slice(&corpus("sweagent-fncall-simple", Dialect::Anthropic)).unwrap();
    body["stream"] = Value::Bool(true);
    let request = http::Request::post(format!("{}/anthropic/v1/messages", sluice.url))
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let response = client().request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.into_body().collect().await.is_err(),
        "the reset is not hidden as a clean end"
    );
}

#[tokio::test]
async fn bypass_header_and_agent_compaction_forward_untouched() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let body = compactable(Dialect::Anthropic, false);
    sluice
        .chat(
            Dialect::Anthropic,
            &[("x-context-guru-bypass", "true")],
            body.clone(),
        )
        .await;
    assert!(
        sluice.mock.recorded()[0].body == body,
        "bypassed byte-identically"
    );

    // Claude Code's own /compact request: the last user turn asks for a summary.
    let mut value: Value = serde_json::from_slice(&body).unwrap();
    let messages = value["messages"].as_array_mut().unwrap();
    messages.push(serde_json::json!({"role": "assistant", "content": "ok"}));
    messages.push(serde_json::json!({"role": "user", "content": "Your task is to create a detailed summary of the conversation so far."}));
    let summary_request = serde_json::to_vec(&value).unwrap();
    sluice
        .chat(Dialect::Anthropic, &[], summary_request.clone())
        .await;
    assert!(
        sluice.mock.recorded()[1].body == summary_request,
        "the agent's summary sees everything"
    );

    let stats = sluice.stats().await;
    assert_eq!(stats["bypassed_requests"], 2);
    assert_eq!(stats["components"]["bypass"]["gates"]["header"], 1);
    assert_eq!(
        stats["components"]["bypass"]["gates"]["agent_compaction"],
        1
    );
}

#[tokio::test]
async fn claude_code_metadata_names_the_session() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let mut value: Value = serde_json::from_slice(&compactable(Dialect::Anthropic, false)).unwrap();
    value["metadata"] = serde_json::json!({"user_id": "user_6b74_account__session_07f2e15c"});
    let body = serde_json::to_vec(&value).unwrap();
    sluice.chat(Dialect::Anthropic, &[], body.clone()).await;
    let (id, original) = first_marker(&sluice.mock.recorded()[0].body, &body, Dialect::Anthropic);
    let scoped = sluice
        .get(&format!(
            "/expand?id={id}&session=user_6b74_account__session_07f2e15c"
        ))
        .await;
    assert_eq!(scoped.status, 200);
    assert!(scoped.body == original.as_bytes());
}

#[tokio::test]
async fn serves_h2_with_prior_knowledge_on_the_same_port() {
    let sluice = start("preset: off").await;
    let h2: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    let body = corpus("sweagent-fncall-simple", Dialect::OpenAi);
    let request = http::Request::post(format!("{}/openai/v1/chat/completions", sluice.url))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = h2.request(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(answer_text(&bytes, Dialect::OpenAi), "ok");
}

/// Polls `/stats` until the observe pool has processed `n` jobs.
async fn observed(sluice: &Sluice, n: u64) -> Value {
    for _ in 0..200 {
        let stats = sluice.stats().await;
        if stats["observe_queue"]["processed"].as_u64().unwrap_or(0) >= n {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the observe pool did not process {n} jobs");
}

#[tokio::test]
async fn observe_forwards_untouched_and_projects_what_sync_saves() {
    let config = format!(
        "{}\nobserve: {{workers: 1, max_queue: 64}}\n",
        engine::config::EMBEDDED_DEFAULT.replace("mode: sync", "mode: observe")
    );
    let observe = start(&config).await;
    let sync = start(engine::config::EMBEDDED_DEFAULT).await;
    let bodies = [
        compactable(Dialect::OpenAi, false),
        compactable(Dialect::Anthropic, false),
        corpus("swesmith-sqlfluff-sqlfluff-2", Dialect::OpenAi),
        compactable(Dialect::Responses, false),
    ];
    let dialects = [
        Dialect::OpenAi,
        Dialect::Anthropic,
        Dialect::OpenAi,
        Dialect::Responses,
    ];
    for (body, dialect) in bodies.iter().zip(dialects) {
        observe.chat(dialect, &[], body.clone()).await;
        sync.chat(dialect, &[], body.clone()).await;
    }
    // Observe forwarded every body exactly as sent, with no tool injected.
    for (recorded, body) in observe.mock.recorded().iter().zip(&bodies) {
        assert!(recorded.body == *body);
    }
    let stats = observed(&observe, 4).await;
    let sync_stats = sync.stats().await;
    assert_eq!(stats["mode"], "observe");
    assert_eq!(stats["saved_tokens"], 0, "nothing is enforced in observe");
    assert!(
        stats["observe_notice"]
            .as_str()
            .unwrap()
            .contains("untouched")
    );
    assert_eq!(stats["observe_hypothetical_requests"], 4);
    assert!(sync_stats["saved_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        stats["potential_saved_tokens"], sync_stats["saved_tokens"],
        "projection equals sync's actual"
    );
    assert_eq!(stats["actual_baseline_tokens"], sync_stats["tokens_before"]);
    assert_eq!(
        stats["potential_components"]["collapse"]["saved_tokens"],
        sync_stats["components"]["collapse"]["saved_tokens"]
    );

    // The shadow run's stashes never reach the live store.
    let (id, _) = first_marker(&sync.mock.recorded()[0].body, &bodies[0], Dialect::OpenAi);
    assert_eq!(sync.get(&format!("/expand?id={id}")).await.status, 200);
    assert_eq!(
        observe.get(&format!("/expand?id={id}")).await.status,
        404,
        "observe never writes the live store"
    );
}

#[tokio::test]
async fn turns_of_a_session_share_one_tracker_and_never_flip_the_cached_prefix() {
    let sluice = start("pipeline: [dedup, mask, collapse, linecap]").await;
    let full: Value = serde_json::from_slice(&corpus(
        "swegym-openhands-python-mypy-15976_0",
        Dialect::OpenAi,
    ))
    .unwrap();
    let messages = full["messages"].as_array().unwrap();
    let turn = |n: usize| {
        let mut body = full.clone();
        body["messages"] = Value::Array(messages[..n].to_vec());
        serde_json::to_vec(&body).unwrap()
    };
    let header = [("x-context-guru-session", "task-42")];
    let (early, late) = (messages.len() - 6, messages.len());
    sluice.chat(Dialect::OpenAi, &header, turn(early)).await;
    sluice.chat(Dialect::OpenAi, &header, turn(late)).await;
    let recorded = sluice.mock.recorded();
    let forwarded = |i: usize| {
        let parsed = wire::parse(&recorded[i].body, Dialect::OpenAi).unwrap();
        parsed.messages().to_vec()
    };
    let (first, second) = (forwarded(0), forwarded(1));
    assert_eq!(
        second[..first.len()],
        first[..],
        "the second turn forwards the first turn's messages byte for byte"
    );
    let stats = sluice.stats().await;
    assert_eq!(stats["tracked_turns"], 2);
    assert_eq!(stats["unknown_boundary_turns"], 1, "only the first turn");
    assert_eq!(stats["sessions"]["live"], 1);
    assert_eq!(stats["frozen_flips"], 0);
    assert!(
        stats["components"]["mask"]["gates"]["cached_prefix"]
            .as_u64()
            .unwrap()
            > 0,
        "mask left the cached prefix alone on a warm turn"
    );
}

/// The provider's cache report reaches the tracker of the mode that runs turns: in sync mode the
/// live one, in observe mode the shadow one (through the same reporting relay). A reply that
/// reports neither a read nor a write for a request without breakpoints means nothing is
/// cached, so the session's next turn reads cold.
#[tokio::test]
async fn the_cache_report_reaches_the_tracker_in_sync_and_observe_mode() {
    let observe_config = format!(
        "{}\nobserve: {{workers: 1, max_queue: 64}}\n",
        engine::config::EMBEDDED_DEFAULT.replace("mode: sync", "mode: observe")
    );
    for (config, observing) in [
        (engine::config::EMBEDDED_DEFAULT.to_owned(), false),
        (observe_config, true),
    ] {
        let sluice = start(&config).await;
        sluice.mock.set_cache_report(Some((0, 0)));
        let session = [("x-context-guru-session", "cache-report")];
        let body = compactable(Dialect::Anthropic, false);
        sluice
            .chat(Dialect::Anthropic, &session, body.clone())
            .await;
        if observing {
            observed(&sluice, 1).await;
        }
        // The report lands between turns (the relay hands it over when the body ends).
        tokio::time::sleep(Duration::from_millis(100)).await;
        sluice.chat(Dialect::Anthropic, &session, body).await;
        let stats = if observing {
            observed(&sluice, 2).await
        } else {
            sluice.stats().await
        };
        assert_eq!(stats["tracked_turns"], 2, "observing={observing}");
        assert_eq!(
            stats["cold_turns"], 1,
            "observing={observing}: the report was lost"
        );
    }
}

/// What a raw client gets back: the status line's code, or `None` when the connection closed
/// without an answer.
pub(crate) async fn raw_exchange(url: &str, request: &[u8], wait: Duration) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = vec![0u8; 256];
    let n = tokio::time::timeout(wait, stream.read(&mut answer))
        .await
        .expect("the server neither answered nor closed in time")
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&answer[..n]);
    text.split(' ').nth(1).and_then(|code| code.parse().ok())
}

/// Hostile clients cannot hold sluice: a declared body over the limit is refused before it is
/// read, a body that stalls gets 408, and a connection that never finishes its headers (or sits
/// idle) is closed (issue #20, defect 3).
#[tokio::test]
async fn stalled_and_oversized_clients_are_refused_in_bounded_time() {
    let sluice = start_tuned(
        |_| engine::config::EMBEDDED_DEFAULT.to_owned(),
        |s| {
            s.body_idle = Duration::from_secs(1);
            s.header_timeout = Duration::from_secs(1);
        },
    )
    .await;
    let started = std::time::Instant::now();
    let declared = b"POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1073741824\r\n\r\n{";
    assert_eq!(
        raw_exchange(&sluice.url, declared, Duration::from_secs(5)).await,
        Some(413)
    );
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "refused at once, not after reading"
    );
    let stalled = b"POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{\"model\":";
    assert_eq!(
        raw_exchange(&sluice.url, stalled, Duration::from_secs(5)).await,
        Some(408)
    );
    let partial = b"POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\n";
    let code = raw_exchange(&sluice.url, partial, Duration::from_secs(5)).await;
    assert!(
        code.is_none() || code == Some(408),
        "partial headers: {code:?}"
    );
    let idle = b"";
    let code = raw_exchange(&sluice.url, idle, Duration::from_secs(5)).await;
    assert!(
        code.is_none() || code == Some(408),
        "an idle connection is closed: {code:?}"
    );
    // And sluice still serves.
    let reply = sluice
        .chat(Dialect::OpenAi, &[], compactable(Dialect::OpenAi, false))
        .await;
    assert_eq!(reply.status, 200);
}

/// Past `max_connections` a new connection waits instead of being served: with a cap of one, a
/// second client is answered only once the first connection is gone.
#[tokio::test]
async fn connections_past_the_cap_wait_their_turn() {
    let sluice = start_tuned(
        |_| engine::config::EMBEDDED_DEFAULT.to_owned(),
        |s| {
            s.max_connections = 1;
            s.header_timeout = Duration::from_secs(1);
        },
    )
    .await;
    let addr = sluice.url.trim_start_matches("http://").to_owned();
    let hog = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let reply = sluice.get("/healthz").await;
    assert_eq!(reply.status, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "served before the first connection was closed ({:?})",
        started.elapsed()
    );
    drop(hog);
}

/// A path that could climb out of the upstream's base path never reaches the upstream (issue
/// #20, defect 5).
#[tokio::test]
async fn dot_segments_are_refused_before_the_upstream() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    for path in ["/openai/v1/../../admin", "/openai/v1/%2e%2e/%2E%2E/admin"] {
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n");
        let code = raw_exchange(&sluice.url, request.as_bytes(), Duration::from_secs(5)).await;
        assert_eq!(code, Some(400), "{path}");
    }
    assert!(sluice.mock.recorded().is_empty(), "nothing went upstream");
}

/// With an admin token, the operator routes want it, while `/healthz` and the agent's own
/// routes do not (issue #20, defect 4; the loopback and trusted-network rules are unit tests in
/// `proxy/src/admit.rs`, since every test peer here is loopback).
#[tokio::test]
async fn an_admin_token_guards_the_operator_routes_only() {
    let sluice = start_tuned(
        |_| engine::config::EMBEDDED_DEFAULT.to_owned(),
        |s| s.admission.token = Some("admin-s3cret".into()),
    )
    .await;
    let url = |path: &str| format!("{}{path}", sluice.url);
    let bearer = [("authorization", "Bearer admin-s3cret")];
    for path in ["/stats", "/metrics", "/expand?id=0123456789abcdef"] {
        assert_eq!(call("GET", &url(path), &[], "").await.status, 403, "{path}");
        assert_ne!(
            call("GET", &url(path), &bearer, "").await.status,
            403,
            "{path}"
        );
    }
    let body = compactable(Dialect::OpenAi, false);
    assert_eq!(
        call("POST", &url("/compact"), &[], body.clone())
            .await
            .status,
        403
    );
    assert_eq!(
        call("POST", &url("/compact"), &bearer, body).await.status,
        200
    );
    assert_eq!(call("GET", &url("/healthz"), &[], "").await.status, 200);
    let agent = [("authorization", "Bearer sk-the-agents-own-key")];
    let reply = sluice
        .chat(Dialect::OpenAi, &agent, compactable(Dialect::OpenAi, false))
        .await;
    assert_eq!(reply.status, 200, "the agent's routes are the agent's");
}

/// Azure OpenAI's deployment route is compacted like chat completions, its `api-version` passed
/// on; `count_tokens` counts the compacted body when the config asks for it.
#[tokio::test]
async fn azure_deployments_and_count_tokens() {
    let sluice = start("count_tokens: compacted").await;
    let body = compactable(Dialect::OpenAi, false);
    let reply = call(
        "POST",
        &format!(
            "{}/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
            sluice.url
        ),
        &[("api-key", "azure-key")],
        body.clone(),
    )
    .await;
    assert_eq!(reply.status, 200);
    let recorded = sluice.mock.recorded();
    assert_eq!(
        recorded[0].path, "/deployments/gpt-4o/chat/completions",
        "the deployment path, under the OpenAI upstream"
    );
    assert!(recorded[0].body.len() < body.len(), "compacted");
    let escape = call(
        "POST",
        &format!("{}/openai/deployments/../chat/completions", sluice.url),
        &[],
        body,
    )
    .await;
    assert_eq!(escape.status, 400, "a dot segment is refused, not routed");

    sluice.mock.clear_recorded();
    let anthropic = compactable(Dialect::Anthropic, false);
    let reply = call(
        "POST",
        &format!("{}/anthropic/v1/messages/count_tokens", sluice.url),
        &[],
        anthropic.clone(),
    )
    .await;
    assert_eq!(reply.status, 200);
    let counted = &sluice.mock.recorded()[0];
    assert_eq!(counted.path, "/v1/messages/count_tokens");
    assert!(
        counted.body.len() < anthropic.len(),
        "the compacted body is counted"
    );

    let original = start("preset: balanced").await;
    let _ = call(
        "POST",
        &format!("{}/anthropic/v1/messages/count_tokens", original.url),
        &[],
        anthropic.clone(),
    )
    .await;
    assert_eq!(
        original.mock.recorded()[0].body,
        anthropic,
        "by default the agent's own body is counted"
    );
}

/// The sidecar contract LiteLLM's and Portkey's `headroom` guardrail speaks: `/v1/compress`
/// answers the compacted messages with markers their retrieve tool matches, the same on every
/// call; `/v1/retrieve/{hash}` answers the original; `x-headroom-bypass` skips.
#[tokio::test]
async fn the_gateway_sidecar_contract() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let body: Value = serde_json::from_slice(&compactable(Dialect::OpenAi, false)).unwrap();
    let request = json!({"model": "gpt-4o", "messages": body["messages"], "user_api_key": "x"});
    let compress = |headers: &'static [(&'static str, &'static str)]| {
        let url = format!("{}/v1/compress", sluice.url);
        let request = serde_json::to_vec(&request).unwrap();
        async move { call("POST", &url, headers, request).await }
    };
    let first = compress(&[]).await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let answer: Value = serde_json::from_slice(&first.body).unwrap();
    let (before, after) = (
        answer["tokens_before"].as_u64().unwrap(),
        answer["tokens_after"].as_u64().unwrap(),
    );
    assert!(after < before, "{answer}");
    assert!(
        (answer["compression_ratio"].as_f64().unwrap() - after as f64 / before as f64).abs() < 1e-9
    );
    assert!(!answer["transforms_applied"].as_array().unwrap().is_empty());
    let hashes = answer["ccr_hashes"].as_array().unwrap();
    assert!(!hashes.is_empty());
    let text = answer["messages"].to_string();
    let hash = hashes[0].as_str().unwrap();
    assert!(
        text.contains(&format!("hash={hash}")),
        "the gateway's pattern finds it"
    );
    assert_eq!(
        answer["messages"].as_array().unwrap().len(),
        body["messages"].as_array().unwrap().len()
    );

    // The same history again: the same answer, byte for byte.
    let second = compress(&[]).await;
    assert_eq!(second.body, first.body);

    let retrieved = sluice.get(&format!("/v1/retrieve/{hash}")).await;
    assert_eq!(retrieved.status, 200);
    let original: Value = serde_json::from_slice(&retrieved.body).unwrap();
    let original = original["original_content"].as_str().unwrap();
    assert!(
        body["messages"]
            .to_string()
            .contains(&serde_json::to_string(original).unwrap()[1..20])
    );
    assert_eq!(
        sluice.get("/v1/retrieve/0000000000000000").await.status,
        404
    );

    let bypassed = compress(&[("x-headroom-bypass", "true")]).await;
    let bypassed: Value = serde_json::from_slice(&bypassed.body).unwrap();
    assert_eq!(bypassed["messages"], body["messages"]);
    assert_eq!(bypassed["compression_ratio"], 1.0);

    let broken = call(
        "POST",
        &format!("{}/v1/compress", sluice.url),
        &[],
        "{\"model\":1}",
    )
    .await;
    assert_eq!(broken.status, 400);
}

/// `tools:` rules hold in every dialect, matched on the tool that produced each output: an
/// excluded tool's outputs leave byte-identical, and a rule lets only its components act.
#[tokio::test]
async fn tool_rules_decide_which_components_may_cut_an_output() {
    let tool_outputs = |body: &[u8], dialect: Dialect| -> Vec<String> {
        let parsed = wire::parse(body, dialect).unwrap();
        parsed
            .messages()
            .iter()
            .filter(|m| m.is_tool())
            .map(|m| m.content.clone())
            .collect()
    };
    // Layered on the embedded default, whose own `tools:` each replaces.
    let excluded = start("tools: {exclude: [bash]}\n").await;
    let ruled = start("tools:\n  rules:\n    \"ba?h\": {components: [linecap]}\n").await;
    for dialect in DIALECTS {
        let body = compactable(dialect, false);
        let sent = tool_outputs(&body, dialect);
        assert!(sent.len() > 20, "{dialect:?}: a run with many bash outputs");

        excluded.chat(dialect, &[], body.clone()).await;
        let forwarded = excluded.mock.recorded().last().unwrap().body.clone();
        assert_eq!(tool_outputs(&forwarded, dialect), sent, "{dialect:?}");

        ruled.chat(dialect, &[], body.clone()).await;
        let forwarded = ruled.mock.recorded().last().unwrap().body.clone();
        let cut = tool_outputs(&forwarded, dialect);
        assert_ne!(cut, sent, "{dialect:?}: linecap may still cut");
    }
    let stats = excluded.stats().await;
    assert!(stats["components"]["collapse"]["gates"]["tool_excluded"].as_u64() > Some(0));
    assert_eq!(stats["components"]["linecap"]["saved_tokens"], 0);
    let stats = ruled.stats().await;
    assert!(stats["components"]["collapse"]["gates"]["tool_rule"].as_u64() > Some(0));
    assert_eq!(stats["components"]["collapse"]["saved_tokens"], 0);
    assert!(stats["components"]["linecap"]["saved_tokens"].as_u64() > Some(0));
}

/// Learning from retries, through the proxy: the model re-running a call whose output was cut,
/// or expanding the same marker twice, makes that tool's outputs lossless for the session.
#[tokio::test]
async fn a_retried_call_makes_its_tool_lossless_for_the_session() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let session = [("x-context-guru-session", "retries-1")];
    // Where the default first cuts an output of this run (learned on another session).
    let whole = compactable(Dialect::OpenAi, false);
    sluice
        .chat(
            Dialect::OpenAi,
            &[("x-context-guru-session", "probe")],
            whole.clone(),
        )
        .await;
    let probe: Value =
        serde_json::from_slice(&sluice.mock.recorded().last().unwrap().body).unwrap();
    let cut = probe["messages"]
        .as_array()
        .unwrap()
        .iter()
        .position(|m| m["role"] == "tool" && m["content"].as_str().unwrap_or("").contains("<<cg:"))
        .expect("the default cuts an output of this run");
    // The turn that ends on that output: it is cut on arrival, the model's newest result.
    let mut sent: Value = serde_json::from_slice(&whole).unwrap();
    sent["messages"].as_array_mut().unwrap().truncate(cut + 1);
    let first = serde_json::to_vec(&sent).unwrap();
    sluice.chat(Dialect::OpenAi, &session, first.clone()).await;
    let messages = sent["messages"].as_array().unwrap();
    let call_id = messages[cut]["tool_call_id"].clone();
    let call = messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .find(|c| c["id"] == call_id)
        .unwrap()
        .clone();
    assert_eq!(sluice.stats().await["retries_after_compaction"], 0);

    // The model runs the same command again, and gets the same long output.
    let mut again = sent.clone();
    let mut retried = call.clone();
    retried["id"] = json!("call_retry");
    let list = again["messages"].as_array_mut().unwrap();
    list.push(json!({"role": "assistant", "content": null, "tool_calls": [retried]}));
    list.push(
        json!({"role": "tool", "tool_call_id": "call_retry", "content": messages[cut]["content"]}),
    );
    let again = serde_json::to_vec(&again).unwrap();
    sluice.chat(Dialect::OpenAi, &session, again.clone()).await;
    let stats = sluice.stats().await;
    assert_eq!(stats["retries_after_compaction"], 1);
    let forwarded: Value =
        serde_json::from_slice(&sluice.mock.recorded().last().unwrap().body).unwrap();
    let last = forwarded["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["content"], messages[cut]["content"],
        "the re-run's output reaches the model whole"
    );
    assert!(
        stats["components"]
            .as_object()
            .unwrap()
            .values()
            .any(|c| c["gates"]["retried_after_compaction"].as_u64() > Some(0)),
        "{stats}"
    );
    // The cut already on the wire keeps its bytes: the cached prefix does not move.
    assert_eq!(forwarded["messages"][cut], probe["messages"][cut]);

    // A marker expanded twice counts too.
    let id = marker::marker_ids(forwarded["messages"][cut]["content"].as_str().unwrap())
        .next()
        .unwrap()
        .to_owned();
    for _ in 0..2 {
        sluice.mock.script([
            Reply::Expand {
                text: None,
                ids: vec![id.clone()],
            },
            Reply::Text("done".into()),
        ]);
        sluice.chat(Dialect::OpenAi, &session, again.clone()).await;
    }
    assert_eq!(sluice.stats().await["retries_after_compaction"], 2);
}

/// Turns of the compactable corpus run as Claude Code sends them: each ends on a user message,
/// with the breakpoint on its last block; the last `n` such turns from the first one that
/// carries the default's first cut (so sluice changes every turn).
fn breakpointed_turns(n: usize) -> Vec<Value> {
    let whole: Value = serde_json::from_slice(&compactable(Dialect::Anthropic, false)).unwrap();
    let messages = whole["messages"].as_array().unwrap();
    let ends: Vec<usize> = (1..messages.len())
        .filter(|&i| messages[i]["role"] == "user")
        .collect();
    ends[ends.len() - n..]
        .iter()
        .map(|&end| {
            let mut turn = whole.clone();
            let list = turn["messages"].as_array_mut().unwrap();
            list.truncate(end + 1);
            let last = list.last_mut().unwrap();
            if last["content"].is_string() {
                last["content"] = json!([{"type": "text", "text": last["content"]}]);
            }
            if let Some(block) = last["content"].as_array_mut().and_then(|b| b.last_mut()) {
                block["cache_control"] = json!({"type": "ephemeral"});
            }
            turn
        })
        .collect()
}

#[tokio::test]
async fn a_session_whose_rewrites_cost_more_than_they_save_backs_off() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let turns = breakpointed_turns(4);
    // A model that expands a marker every turn: each round re-reads the whole prompt and
    // writes an original back, which the cuts do not make up for. The mock provider's cache
    // reports the usage that settles each turn.
    sluice.mock.set_curious(true);
    let session = [("x-context-guru-session", "guard-dear")];
    for turn in &turns[..3] {
        let reply = sluice
            .chat(
                Dialect::Anthropic,
                &session,
                serde_json::to_vec(turn).unwrap(),
            )
            .await;
        assert_eq!(reply.status, 200);
        // The report reaches the session's actor after the reply's body ends.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sluice.mock.set_curious(false);
    let stats = sluice.stats().await;
    assert_eq!(stats["expand_rounds"], 3, "{stats}");
    assert_eq!(stats["cost_guard_backoffs"]["expand_rounds"], 1, "{stats}");
    let metrics = sluice.get("/metrics").await.body;
    assert!(
        String::from_utf8_lossy(&metrics)
            .contains("cg_cost_guard_backoffs_total{reason=\"expand_rounds\"} 1"),
        "/metrics counts it"
    );

    // A new long output after the back-off, whose cut would save less than one round re-reads
    // (the floor under the session's cuts), reaches the model whole.
    let last = serde_json::to_vec(&turns[3]).unwrap();
    let (_, original) = {
        sluice
            .chat(
                Dialect::Anthropic,
                &[("x-context-guru-session", "guard-probe")],
                last.clone(),
            )
            .await;
        first_marker(
            &sluice.mock.recorded().last().unwrap().body,
            &last,
            Dialect::Anthropic,
        )
    };
    // One more `cat` and its output; then what sluice forwarded of the newest message.
    let cat = |transcript: &mut Value, id: &str, output: &str| {
        let list = transcript["messages"].as_array_mut().unwrap();
        list.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "bash", "input": {"command": format!("cat {id}.log")}}]}));
        list.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": output,
             "cache_control": {"type": "ephemeral"}}]}));
    };
    let newest = async |transcript: &Value| {
        sluice
            .chat(
                Dialect::Anthropic,
                &session,
                serde_json::to_vec(transcript).unwrap(),
            )
            .await;
        let forwarded = sluice.mock.recorded().last().unwrap().body.clone();
        let parsed = wire::parse(&forwarded, Dialect::Anthropic).unwrap();
        parsed.messages().last().unwrap().content.clone()
    };
    let mut fresh = turns[3].clone();
    cat(&mut fresh, "toolu_guard", &original);
    assert_eq!(
        newest(&fresh).await,
        original,
        "the newest output goes whole"
    );
    let stats = sluice.stats().await;
    assert!(
        stats["components"]
            .as_object()
            .unwrap()
            .values()
            .any(|c| c["gates"]["below_cost_floor"].as_u64() > Some(0)),
        "{stats}"
    );
    // An output whose cut saves far more than a round costs is still cut.
    let huge: String = (0..6_000)
        .map(|i| {
            format!(
                "2026-12-03T10:{:02}:{:02} worker {i} flushed batch {}",
                i / 60 % 60,
                i % 60,
                i * 7
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    cat(&mut fresh, "toolu_huge", &huge);
    let last = newest(&fresh).await;
    assert!(
        last.len() < huge.len() / 4 && last.contains("<<cg:"),
        "{last}"
    );
    // The same turns on another sluice, with a model that works from what it was shown, save
    // and never back off; the provider reads the transcript back from its cache.
    let saving = start(engine::config::EMBEDDED_DEFAULT).await;
    let mut read = 0;
    for turn in &turns {
        let reply = saving
            .chat(
                Dialect::Anthropic,
                &session,
                serde_json::to_vec(turn).unwrap(),
            )
            .await;
        let reply: Value = serde_json::from_slice(&reply.body).unwrap();
        read = reply["usage"]["cache_read_input_tokens"].as_u64().unwrap();
    }
    assert!(
        read > 10_000,
        "the provider read the transcript back: {read}"
    );
    let stats = saving.stats().await;
    assert_eq!(stats["cost_guard_backoffs"], json!({}), "{stats}");
    assert_eq!(stats["tracked_turns"], 4);
}
