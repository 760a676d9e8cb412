//! The turn service on realistic agent bodies: bypasses, sessions, the way back, one-off
//! rewrites, and the tracker it shares across turns.

use std::sync::Arc;

use engine::clock::ManualClock;
use engine::config::Config;
use engine::marker;
use engine::store::{MemoryStore, MemoryStoreLimits};
use serde_json::{Value, json};

use super::*;

/// A pytest run long enough for `collapse` to cut: a marker and a stash every time.
fn pytest_log(i: usize) -> String {
    let mut out = format!("$ python -m pytest tests/test_{i}.py -q\n");
    for t in 0..400 {
        out.push_str(&format!(
            "tests/test_{i}.py::test_case_{t} PASSED [{:>3}%]\n",
            t / 4
        ));
    }
    out.push_str("400 passed in 3.21s\n");
    out
}

/// An Anthropic body after `calls` bash calls, with `extra` top-level members.
fn body(calls: usize, extra: &[(&str, Value)]) -> Bytes {
    let mut messages =
        vec![json!({"role": "user", "content": "Run the test suite and fix what fails."})];
    for i in 0..calls {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "bash", "input": {"command": format!("pytest tests/test_{i}.py")}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": pytest_log(i)}]}));
    }
    let mut value = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "You are a coding agent.",
        "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
        "messages": messages,
    });
    for (key, v) in extra {
        value[*key] = v.clone();
    }
    Bytes::from(serde_json::to_vec(&value).unwrap())
}

fn service(clock: &Arc<ManualClock>) -> TurnService {
    let config = Config::parse("pipeline: [format, dedup, collapse, linecap]").unwrap();
    let store: Arc<dyn Store> =
        Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone()));
    TurnService::new(
        Arc::new(config.build_pipeline().unwrap()),
        store,
        clock.clone(),
    )
    .with_local_sessions(config.cache.amortize)
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.insert(*k, http::HeaderValue::from_static(v));
    }
    map
}

async fn run(service: &TurnService, body: &Bytes, headers: &HeaderMap) -> Turn {
    service
        .run(TurnInput {
            dialect: Dialect::Anthropic,
            body,
            headers,
            models: None,
            defer_counts: false,
        })
        .await
}

fn forward(turn: Turn) -> Forward {
    match turn {
        Turn::Forward(forward) => *forward,
        Turn::Untouched { reason, .. } => panic!("untouched: {reason:?}"),
    }
}

fn tool_names(body: &[u8]) -> Vec<String> {
    let value: Value = serde_json::from_slice(body).unwrap();
    value["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_cut_ships_with_its_way_back_and_the_stash_resolves_in_its_session() {
    let clock = Arc::new(ManualClock::new());
    let service = service(&clock);
    let body = body(2, &[]);
    let forward = forward(run(&service, &body, &headers(&[(SESSION_HEADER, "s-1")])).await);
    assert_eq!(forward.session, "u:s-1");
    assert!(forward.expandable);
    assert!(forward.body.len() < body.len());
    assert_eq!(tool_names(&forward.body), ["bash", "context_guru_expand"]);
    let text = std::str::from_utf8(&forward.body).unwrap();
    let id = marker::marker_ids(text).next().expect("a marker");
    let original = service
        .store()
        .resolve("u:s-1", id)
        .expect("stashed in the session");
    assert!(original.contains("400 passed in 3.21s"));
    assert_eq!(forward.withheld, None);
}

#[tokio::test]
async fn a_named_tool_choice_withholds_lossy_offloads_and_says_why() {
    let clock = Arc::new(ManualClock::new());
    let service = service(&clock);
    let named = body(
        2,
        &[("tool_choice", json!({"type": "tool", "name": "bash"}))],
    );
    let forward = forward(run(&service, &named, &HeaderMap::new()).await);
    assert_eq!(forward.withheld, Some(Withheld::ToolChoiceNamed));
    let value: Value = serde_json::from_slice(&forward.body).unwrap();
    let messages = value["messages"].to_string();
    assert_eq!(
        marker::marker_ids(&messages).next(),
        None,
        "nothing was cut"
    );
    // Declared all the same, in the same place: the session's `tools` do not change for one
    // turn (the model cannot call it on this one, and nothing lossy was cut).
    assert_eq!(tool_names(&forward.body), ["bash", "context_guru_expand"]);
    // `any` still lets the model call expand: the cut stands, the tool is declared.
    let any = body(2, &[("tool_choice", json!({"type": "any"}))]);
    let forward = self::forward(run(&service, &any, &HeaderMap::new()).await);
    assert!(forward.expandable && forward.withheld.is_none());
}

#[tokio::test]
async fn bypasses_go_untouched_and_the_tracker_still_records_the_turn() {
    let clock = Arc::new(ManualClock::new());
    let service = service(&clock);
    let session = headers(&[(SESSION_HEADER, "s-2")]);
    // A bypass header on a body that does not even parse is still a bypass.
    let garbage = Bytes::from_static(b"{not json");
    let bypass = headers(&[(BYPASS_HEADER, "TRUE")]);
    assert!(matches!(
        run(&service, &garbage, &bypass).await,
        Turn::Untouched {
            reason: Untouched::Bypassed("header"),
            ..
        }
    ));
    assert!(matches!(
        run(&service, &garbage, &HeaderMap::new()).await,
        Turn::Untouched {
            reason: Untouched::Unparsed("unparsed_not_json"),
            ..
        }
    ));
    // Claude Code compacting its own transcript.
    let mut value: Value = serde_json::from_slice(&body(2, &[])).unwrap();
    value["messages"].as_array_mut().unwrap().push(json!({"role": "user", "content": "Your task is to create a detailed summary of the conversation so far."}));
    let compaction = Bytes::from(serde_json::to_vec(&value).unwrap());
    let Turn::Untouched {
        reason,
        session: named,
        facts,
    } = run(&service, &compaction, &session).await
    else {
        panic!("compacted an agent's own summary request");
    };
    assert_eq!(reason, Untouched::Bypassed("agent_compaction"));
    assert_eq!(named.as_deref(), Some("u:s-2"));
    assert!(!facts.unwrap().known, "the session's first turn");
    // The next turn of the session finds it on record.
    clock.advance(Duration::from_secs(10));
    let next = forward(run(&service, &body(3, &[]), &session).await);
    assert!(next.facts.known);
}

#[tokio::test]
async fn a_one_off_rewrite_has_its_own_namespace_and_the_same_way_back() {
    let clock = Arc::new(ManualClock::new());
    let service = service(&clock);
    let body = body(2, &[]);
    let input = TurnInput {
        dialect: Dialect::Anthropic,
        body: &body,
        headers: &headers(&[(SESSION_HEADER, "s-3")]),
        models: None,
        defer_counts: false,
    };
    let compacted = forward(service.compact(&input, None).await);
    assert_eq!(compacted.session, "compact:u:s-3");
    let live = forward(run(&service, &body, &headers(&[(SESSION_HEADER, "s-3")])).await);
    // The same pipeline, no history: the same bytes either way.
    assert_eq!(compacted.body, live.body);
    assert!(compacted.expandable);
}

#[tokio::test]
async fn an_empty_pipeline_relays_without_reading_the_body() {
    let clock = Arc::new(ManualClock::new());
    let store: Arc<dyn Store> =
        Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone()));
    let pipeline = Config::from_preset("off")
        .unwrap()
        .build_pipeline()
        .unwrap();
    let service = TurnService::new(Arc::new(pipeline), store, clock);
    // Not even JSON: an empty pipeline never parses, so this is not "unparsed".
    let garbage = Bytes::from_static(b"{not json");
    assert!(matches!(
        run(&service, &garbage, &HeaderMap::new()).await,
        Turn::Untouched {
            reason: Untouched::Bypassed("empty_pipeline"),
            session: None,
            ..
        }
    ));
}
