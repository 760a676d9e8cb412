//! The LLM components end to end: sluice in front of a mock provider that is also the cheap
//! model. No network.

use std::time::Duration;

use engine::wire::Dialect;
use integration_tests::mock::Reply;
use serde_json::{Value, json};

use crate::proxy::start_cheap;

/// An Anthropic request whose newest tool output is a 400-test pytest log with one failure.
fn agent_body(turns: usize) -> Vec<u8> {
    let mut log = String::from(
        "============================= test session starts ==============================\n",
    );
    for i in 0..400 {
        log.push_str(&format!("tests/test_api.py::test_case_{i} PASSED\n"));
    }
    log.push_str("tests/test_api.py::test_timeout FAILED\nE   TimeoutError: read timed out\n");
    let mut messages = vec![
        json!({"role": "user", "content": "the API call times out; fix the timeout"}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "pytest"}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": log}]}),
    ];
    for i in 1..turns {
        messages.push(json!({"role": "assistant", "content": format!("step {i}")}));
        messages.push(json!({"role": "user", "content": "go on"}));
    }
    serde_json::to_vec(
        &json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": messages}),
    )
    .unwrap()
}

const FILTER: &str = "```python\ndef filter(text):\n    return \"\\n\".join([l for l in text.split(\"\\n\") if not re_match(\"PASSED\", l)])\n```";

fn config(mock_url: &str, deadline_ms: u64) -> String {
    format!(
        "pipeline: [extract_llm]\ncomponents:\n  extract_llm:\n    break_even_tokens: 0\n    model: {{source: config, base_url: \"{mock_url}\", provider: anthropic, model: cheap-1, api_key: sk-cheap, deadline_ms: {deadline_ms}}}\n"
    )
}

/// The agent's first turn (the task alone), so the session's cached-prefix boundary is known
/// and the tool output of the next turn is new: sluice never makes a new decision on a
/// transcript it has no record of (it could be cached). It carries the agent's credential, as
/// every later turn does: a session belongs to its credential.
async fn first_turn(sluice: &crate::proxy::Sluice, headers: &[(&str, &str)]) {
    let body: Value = serde_json::from_slice(&agent_body(1)).unwrap();
    let first =
        json!({"model": body["model"], "max_tokens": 100, "messages": [body["messages"][0]]});
    sluice.mock.script([Reply::Text("first".into())]);
    sluice
        .chat(
            Dialect::Anthropic,
            headers,
            serde_json::to_vec(&first).unwrap(),
        )
        .await;
}

/// The mock's records after the first turn.
fn after_first(sluice: &crate::proxy::Sluice) -> Vec<integration_tests::mock::Recorded> {
    sluice.mock.recorded().into_iter().skip(1).collect()
}

fn forwarded_tool_text(body: &[u8]) -> String {
    let value: Value = serde_json::from_slice(body).unwrap();
    value["messages"][2]["content"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_model_written_filter_is_accepted_and_costed() {
    let sluice = start_cheap(|url| config(url, 5000)).await;
    let headers = [("x-api-key", "sk-agent"), ("x-context-guru-session", "s")];
    first_turn(&sluice, &headers).await;
    sluice
        .mock
        .script([Reply::Text(FILTER.into()), Reply::Text("done".into())]);
    let reply = sluice
        .chat(Dialect::Anthropic, &headers, agent_body(1))
        .await;
    assert_eq!(reply.status, 200);
    let recorded = after_first(&sluice);
    assert_eq!(recorded.len(), 2, "one model call, one agent call");
    let cheap: Value = serde_json::from_slice(&recorded[0].body).unwrap();
    assert_eq!(cheap["model"], "cheap-1");
    assert_eq!(
        recorded[0].headers["x-api-key"], "sk-cheap",
        "the config model's own key"
    );
    let text = forwarded_tool_text(&recorded[1].body);
    assert!(
        text.starts_with("===") && text.contains("test_timeout FAILED\nE   TimeoutError"),
        "{text}"
    );
    assert!(!text.contains("PASSED") && text.contains("<<cg:"), "{text}");
    let stats = sluice.stats().await;
    assert_eq!(stats["llm_calls"], 1);
    assert!(stats["llm_cost_usd"].as_f64().unwrap() > 0.0);
    assert!(
        stats["llm_saved_tokens"].as_u64().unwrap() > 2000,
        "{stats}"
    );
    assert!(stats["llm_net_usd"].is_number());
}

#[tokio::test]
async fn a_fabricating_filter_falls_back_to_the_projection() {
    let sluice = start_cheap(|url| config(url, 5000)).await;
    let headers = [("x-context-guru-session", "s")];
    first_turn(&sluice, &headers).await;
    let lie = "```python\ndef filter(text):\n    return \"all 401 tests passed\"\n```";
    sluice
        .mock
        .script([Reply::Text(lie.into()), Reply::Text("done".into())]);
    sluice
        .chat(Dialect::Anthropic, &headers, agent_body(1))
        .await;
    let recorded = sluice.mock.recorded();
    let text = forwarded_tool_text(&recorded.last().unwrap().body);
    assert!(
        !text.contains("all 401 tests passed"),
        "never the fabrication"
    );
    assert!(
        text.contains("… (") && text.contains("test_timeout FAILED"),
        "the projection: {text}"
    );
    let stats = sluice.stats().await;
    assert_eq!(stats["llm_rejected"], 1);
    assert_eq!(
        stats["components"]["extract_llm"]["gates"]["model_failed"],
        1
    );
}

#[tokio::test]
async fn a_slow_model_is_not_waited_for_and_its_result_lands_next_turn() {
    let sluice = start_cheap(|url| config(url, 100)).await;
    let headers = [("x-context-guru-session", "slow")];
    first_turn(&sluice, &headers).await;
    sluice.mock.script([
        Reply::Delayed(
            Duration::from_millis(600),
            Box::new(Reply::Text(FILTER.into())),
        ),
        Reply::Text("turn 1".into()),
        Reply::Text("turn 2".into()),
    ]);
    sluice
        .chat(Dialect::Anthropic, &headers, agent_body(1))
        .await;
    let first = sluice.mock.recorded().last().cloned().unwrap();
    assert!(
        forwarded_tool_text(&first.body).contains("PASSED"),
        "turn 1 went without the model"
    );
    tokio::time::sleep(Duration::from_millis(900)).await;
    sluice
        .chat(Dialect::Anthropic, &headers, agent_body(2))
        .await;
    let last = sluice.mock.recorded().last().cloned().unwrap();
    let text = forwarded_tool_text(&last.body);
    assert!(
        !text.contains("PASSED") && text.contains("<<cg:"),
        "turn 2 has the late result: {text}"
    );
    let stats = sluice.stats().await;
    assert_eq!(stats["llm_timeouts"], 1);
    assert_eq!(
        stats["components"]["extract_llm"]["gates"]["late_result_applied"],
        1
    );
}

#[tokio::test]
async fn the_incoming_source_reuses_the_request_and_no_model_degrades() {
    let sluice = start_cheap(|_| {
        "pipeline: [extract_llm]\ncomponents:\n  extract_llm:\n    break_even_tokens: 0\n    model: {model: claude-haiku-4-5, deadline_ms: 5000}\n".into()
    })
    .await;
    let headers = [("x-api-key", "sk-agent"), ("x-context-guru-session", "s")];
    first_turn(&sluice, &headers).await;
    sluice
        .mock
        .script([Reply::Text(FILTER.into()), Reply::Text("done".into())]);
    sluice
        .chat(Dialect::Anthropic, &headers, agent_body(1))
        .await;
    let recorded = after_first(&sluice);
    let cheap: Value = serde_json::from_slice(&recorded[0].body).unwrap();
    assert_eq!(
        cheap["model"], "claude-haiku-4-5",
        "re-pointed at a cheaper model"
    );
    assert_eq!(
        recorded[0].headers["x-api-key"], "sk-agent",
        "the caller's own key"
    );
    assert!(!forwarded_tool_text(&recorded[1].body).contains("PASSED"));

    // A request with no model to reuse: the deterministic projection, gate no_model.
    let mut body: Value = serde_json::from_slice(&agent_body(1)).unwrap();
    body.as_object_mut().unwrap().remove("model");
    let headers = [("x-context-guru-session", "no-model")];
    let first = json!({"max_tokens": 100, "messages": [body["messages"][0]]});
    sluice
        .chat(
            Dialect::Anthropic,
            &headers,
            serde_json::to_vec(&first).unwrap(),
        )
        .await;
    sluice
        .chat(
            Dialect::Anthropic,
            &headers,
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    let stats = sluice.stats().await;
    assert_eq!(stats["components"]["extract_llm"]["gates"]["no_model"], 1);
    assert_eq!(stats["llm_calls"], 1);
}

/// An OpenAI transcript of `steps` file reads, ending on a user question.
fn long_openai(steps: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Make the flaky test in tests/test_io.py pass."}),
    ];
    for i in 0..steps {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("c{i}"), "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\": \"cat src/io_{i}.py\"}}")}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "    return open(path).read()  # io helper\n".repeat(40)}));
    }
    messages.push(json!({"role": "user", "content": "What did you find?"}));
    messages
}

#[tokio::test]
async fn summarize_reuses_its_checkpoint_and_rolls_forward_past_the_threshold() {
    let sluice = start_cheap(|url| {
        format!(
            "pipeline: [summarize]\ncomponents:\n  summarize:\n    resummarize_tokens: 3000\n    model: {{source: config, base_url: \"{url}\", provider: anthropic, model: cheap-1, api_key: k, deadline_ms: 5000}}\n"
        )
    })
    .await;
    let headers = [("x-context-guru-session", "long")];
    let send = |messages: Vec<Value>| {
        serde_json::to_vec(&json!({"model": "gpt-4o", "messages": messages})).unwrap()
    };
    let summary_of = |body: &[u8]| -> String {
        let value: Value = serde_json::from_slice(body).unwrap();
        value["messages"][2]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let model_calls = |sluice: &crate::proxy::Sluice| {
        sluice
            .mock
            .recorded()
            .iter()
            .filter(|r| r.path == "/v1/messages")
            .count()
    };
    sluice.mock.script([
        Reply::Text("<summary>Read twelve io modules; none handles EINTR.</summary>".into()),
        Reply::Text("answer 1".into()),
    ]);
    let mut messages = long_openai(12);
    sluice
        .chat(Dialect::OpenAi, &headers, send(messages.clone()))
        .await;
    let first = sluice.mock.recorded().last().cloned().unwrap();
    let summary = summary_of(&first.body);
    assert!(
        summary.starts_with("=== History Summary ===\n<summary>\nRead twelve io modules"),
        "{summary}"
    );
    assert_eq!(model_calls(&sluice), 1);

    // A small next turn: the checkpoint serves, byte for byte, with no call.
    messages.push(json!({"role": "assistant", "content": "None of them retries on EINTR."}));
    messages.push(json!({"role": "user", "content": "Fix it."}));
    sluice.mock.script([Reply::Text("answer 2".into())]);
    sluice
        .chat(Dialect::OpenAi, &headers, send(messages.clone()))
        .await;
    let second = sluice.mock.recorded().last().cloned().unwrap();
    assert_eq!(summary_of(&second.body), summary);
    assert_eq!(
        model_calls(&sluice),
        1,
        "the mock saw no new summarize call"
    );

    // Twelve more reads: past resummarize_tokens, one fresh summary.
    let more = long_openai(12);
    messages.extend(more[2..more.len() - 1].iter().cloned());
    messages.push(json!({"role": "user", "content": "And now?"}));
    sluice.mock.script([
        Reply::Text("<summary>Read 24 io modules; patched read_3.</summary>".into()),
        Reply::Text("answer 3".into()),
    ]);
    sluice.chat(Dialect::OpenAi, &headers, send(messages)).await;
    let third = sluice.mock.recorded().last().cloned().unwrap();
    assert!(summary_of(&third.body).contains("Read 24 io modules"));
    assert_eq!(model_calls(&sluice), 2);
    let stats = sluice.stats().await;
    assert_eq!(stats["llm_calls"], 2);
    assert!(
        stats["components"]["summarize"]["saved_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
}
