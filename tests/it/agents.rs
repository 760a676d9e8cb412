//! The request shapes today's agents send, through the real server: every part sluice does not
//! know leaves byte-identical while the rest is compacted (Claude Code 2.1's mid-conversation
//! `system` message first), the tool list never changes within a session, the usage the agent
//! reads includes the expand rounds it never saw, and a JSON tool output is cut inside its
//! string. The agents themselves run in `tests/agents/run.sh`.

use engine::wire::Dialect;
use integration_tests::mock::Reply;
use serde_json::{Value, json};

use crate::proxy::{DIALECTS, Sluice, answer_text, call, first_marker, start};

/// A long shell output, as a coding agent's first command produces.
fn long_log() -> String {
    (0..3000)
        .map(|i| format!("2026-12-01T10:00:{i:05} INFO worker {i} processed batch {i} in 12ms"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A request shaped as Claude Code 2.1 sends it by default (docs/agents.md): the body keys in
/// its order, `system` as three text blocks (two breakpoints), a `role: "system"` message at
/// index 1 of `messages`, adaptive thinking with signed blocks, `context_management`,
/// `output_config`, and a third breakpoint on the newest block.
fn claude_code_body(stream: bool) -> Value {
    json!({
        "model": "claude-sonnet-4-6",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Run the tests and fix what fails."}]},
            {"role": "system", "content": "The following agent types are available: general-purpose, Explore, Plan. Skills: none."},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should run the tests first.", "signature": "EqQBCkYIBxgCKkB0c2lnbmF0dXJl"},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzkhHhRK6bHoaDL"},
                {"type": "text", "text": "Running the tests."},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "pytest -q", "description": "Run the tests"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": long_log(), "is_error": false},
                {"type": "text", "text": "<system-reminder>Keep going.</system-reminder>", "cache_control": {"type": "ephemeral"}}
            ]}
        ],
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332"},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "You are an interactive agent that helps users with software engineering tasks.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [
            {"name": "Bash", "description": "Executes a bash command.", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
            {"name": "Read", "description": "Reads a file.", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}},
            {"name": "Edit", "description": "Edits a file.", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}}, "required": ["file_path", "old_string", "new_string"]}}
        ],
        "metadata": {"user_id": "{\"device_id\":\"d1\",\"account_uuid\":\"\",\"session_id\":\"5b1e0c1e-0000-4000-8000-000000000001\"}"},
        "max_tokens": 32000,
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "stream": stream
    })
}

/// The forwarded body, and the JSON text of `value` found verbatim in it.
fn assert_verbatim(forwarded: &[u8], parts: &[&Value], what: &str) {
    let text = String::from_utf8_lossy(forwarded);
    for part in parts {
        let literal = part.to_string();
        assert!(
            text.contains(&literal),
            "{what}: {literal:.120} is not byte-identical in the forwarded body"
        );
    }
}

fn forwarded(sluice: &Sluice) -> Vec<u8> {
    sluice.mock.recorded().last().unwrap().body.to_vec()
}

#[tokio::test]
async fn claude_codes_default_shape_is_compacted_and_its_own_parts_stay_byte_identical() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    for stream in [false, true] {
        let body = claude_code_body(stream);
        let sent = serde_json::to_vec(&body).unwrap();
        let reply = sluice
            .chat(
                Dialect::Anthropic,
                &[("x-api-key", "sk-test")],
                sent.clone(),
            )
            .await;
        assert_eq!(reply.status, 200);
        let out = forwarded(&sluice);
        assert!(
            out.len() * 4 < sent.len(),
            "the long output is cut ({} of {} bytes)",
            out.len(),
            sent.len()
        );
        first_marker(&out, &sent, Dialect::Anthropic);
        assert_verbatim(
            &out,
            &[
                &body["messages"][1],
                &body["messages"][2]["content"][0],
                &body["messages"][2]["content"][1],
                &body["messages"][3]["content"][1],
                &body["system"],
                &body["metadata"],
                &body["context_management"],
                &body["output_config"],
                &body["thinking"],
            ],
            "claude code",
        );
        let value: Value = serde_json::from_slice(&out).unwrap();
        let names: Vec<&str> = value["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Bash", "Read", "Edit", "context_guru_expand"]);
    }
    let stats = sluice.stats().await;
    assert_eq!(stats["unparsed_requests"], 0);
    assert_eq!(stats["untouched"], json!({}));
}

/// One body per shape an agent or provider adds that sluice does not rewrite: each goes through
/// byte-identical while the long tool output beside it is cut.
#[tokio::test]
async fn parts_sluice_does_not_know_pass_byte_identical_and_the_rest_is_compacted() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let log = long_log();
    let anthropic_turn = |extra_blocks: Vec<Value>| {
        let mut assistant = extra_blocks;
        assistant.push(
            json!({"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}}),
        );
        json!([
            {"role": "user", "content": "build it"},
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": log}]}
        ])
    };
    let tools = json!([{"name": "Bash", "input_schema": {"type": "object"}}]);
    let anthropic_cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "context_management (clear_tool_uses, clear_thinking)",
            json!({"model": "m", "max_tokens": 10, "tools": tools, "messages": anthropic_turn(vec![]),
                   "context_management": {"edits": [
                       {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 30000},
                        "keep": {"type": "tool_uses", "value": 3}, "clear_at_least": {"type": "input_tokens", "value": 5000},
                        "exclude_tools": ["Read"], "clear_tool_inputs": false},
                       {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]}}),
            vec!["/context_management"],
        ),
        (
            "thinking and redacted thinking with their signatures",
            json!({"model": "m", "max_tokens": 10, "tools": tools, "thinking": {"type": "enabled", "budget_tokens": 2048},
                   "messages": anthropic_turn(vec![
                       json!({"type": "thinking", "thinking": "plan: build", "signature": "ErUBCkYIAxgCIkD"}),
                       json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzkhHhRK6bHoaDL"})])}),
            vec![
                "/messages/1/content/0",
                "/messages/1/content/1",
                "/thinking",
            ],
        ),
        (
            "output_config",
            json!({"model": "m", "max_tokens": 10, "tools": tools, "messages": anthropic_turn(vec![]),
                   "output_config": {"effort": "medium", "format": {"type": "json_schema", "schema": {"type": "object"}}}}),
            vec!["/output_config"],
        ),
        (
            "an Anthropic compaction block",
            json!({"model": "m", "max_tokens": 10, "tools": tools,
                   "messages": anthropic_turn(vec![json!({"type": "compaction", "content": "Summary of the earlier conversation: the build was failing."})])}),
            vec!["/messages/1/content/0"],
        ),
        (
            "a role and a block type sluice has never seen",
            json!({"model": "m", "max_tokens": 10, "tools": tools,
                   "messages": [
                       {"role": "user", "content": "build it"},
                       {"role": "observer", "content": [{"type": "hologram", "data": [1, 2, 3]}]},
                       {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "make"}},
                                                         {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}}]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": log}]}]}),
            vec!["/messages/1", "/messages/2/content/0"],
        ),
    ];
    for (what, body, pointers) in &anthropic_cases {
        let sent = serde_json::to_vec(body).unwrap();
        let reply = sluice.chat(Dialect::Anthropic, &[], sent.clone()).await;
        assert_eq!(reply.status, 200, "{what}");
        let out = forwarded(&sluice);
        first_marker(&out, &sent, Dialect::Anthropic);
        let parts: Vec<&Value> = pointers.iter().map(|p| body.pointer(p).unwrap()).collect();
        assert_verbatim(&out, &parts, what);
    }

    // The Responses API: Codex's stateless transcript with the items it adds.
    let responses_cases: Vec<(&str, Vec<Value>)> = vec![
        (
            "a reasoning item with encrypted_content",
            vec![
                json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAABpZ2VuY3J5cHRlZA=="}),
            ],
        ),
        (
            "a compaction item",
            vec![json!({"type": "compaction", "encrypted_content": "gAAAAABjb21wYWN0ZWQ="})],
        ),
        (
            "Codex's compaction_trigger item",
            vec![json!({"type": "compaction_trigger"})],
        ),
    ];
    for (what, items) in &responses_cases {
        let mut input = vec![
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "build it"}]}),
        ];
        input.extend(items.iter().cloned());
        input.push(json!({"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{\"command\":[\"make\"]}"}));
        input.push(json!({"type": "function_call_output", "call_id": "c1", "output": log}));
        let body = json!({"model": "gpt-5-codex", "instructions": "You are Codex.", "input": input,
                          "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
                          "store": false, "stream": false, "include": ["reasoning.encrypted_content"],
                          "prompt_cache_key": "5b1e0c1e"});
        let sent = serde_json::to_vec(&body).unwrap();
        let reply = sluice
            .chat(
                Dialect::Responses,
                &[("x-codex-beta-features", "remote_compaction_v2")],
                sent.clone(),
            )
            .await;
        assert_eq!(reply.status, 200, "{what}");
        let recorded = sluice.mock.recorded().pop().unwrap();
        assert_eq!(
            recorded.headers["x-codex-beta-features"], "remote_compaction_v2",
            "{what}"
        );
        first_marker(&recorded.body, &sent, Dialect::Responses);
        let parts: Vec<&Value> = items.iter().chain([&body["include"]]).collect();
        assert_verbatim(&recorded.body, &parts, what);
    }

    // `POST /responses/compact` is the provider's own compaction: relayed as it came.
    let compact = serde_json::to_vec(&json!({"model": "gpt-5-codex", "input": [
        {"type": "message", "role": "user", "content": "build it"},
        {"type": "function_call_output", "call_id": "c1", "output": log}]}))
    .unwrap();
    let reply = call(
        "POST",
        &format!("{}/openai/v1/responses/compact", sluice.url),
        &[],
        compact.clone(),
    )
    .await;
    assert_eq!(reply.status, 200);
    let recorded = sluice.mock.recorded().pop().unwrap();
    assert_eq!(recorded.path, "/v1/responses/compact");
    assert!(recorded.body == compact, "relayed byte-identically");

    let stats = sluice.stats().await;
    assert!(
        stats["opaque_entries"].as_u64().unwrap() >= 1,
        "the unknown role was kept opaque"
    );
    assert_eq!(stats["unparsed_requests"], 0);
}

/// A body sluice cannot read at all is counted by reason, and the overview's untouched share
/// says so.
#[tokio::test]
async fn a_body_it_cannot_read_is_counted_by_reason() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    for body in ["{not json", "[1,2]", r#"{"model":"m"}"#] {
        let reply = sluice.chat(Dialect::Anthropic, &[], body).await;
        assert_eq!(reply.status, 200);
    }
    let stats = sluice.stats().await;
    assert_eq!(
        stats["untouched"],
        json!({"unparsed_not_json": 1, "unparsed_not_object": 1, "unparsed_no_messages": 1})
    );
    let metrics = String::from_utf8(sluice.get("/metrics").await.body.to_vec()).unwrap();
    assert!(
        metrics.contains("cg_untouched_requests_total{reason=\"unparsed_not_json\"} 1"),
        "{metrics}"
    );
}

/// Claude Code checks its base URL with `HEAD` before its first request.
#[tokio::test]
async fn head_is_answered_at_the_roots() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    for path in ["/", "/anthropic", "/openai/"] {
        let reply = call("HEAD", &format!("{}{path}", sluice.url), &[], "").await;
        assert_eq!(reply.status, 200, "HEAD {path}");
    }
    let reply = call("PATCH", &format!("{}/nowhere", sluice.url), &[], "").await;
    assert_eq!(reply.status, 404);
    assert!(String::from_utf8_lossy(&reply.body).contains("PATCH /nowhere"));
}

/// mini-swe-agent's observation is one line of JSON; the log inside its string is what to cut.
#[tokio::test]
async fn a_json_tool_output_is_cut_inside_its_string_and_stays_valid_json() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let output: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    let observation = json!({"returncode": 0, "output": output}).to_string();
    let body = json!({"model": "m", "messages": [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
        {"role": "user", "content": "Count to 3000."},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"seq 3000\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": observation}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]});
    let sent = serde_json::to_vec(&body).unwrap();
    let reply = sluice.chat(Dialect::OpenAi, &[], sent.clone()).await;
    assert_eq!(reply.status, 200);
    let out: Value = serde_json::from_slice(&forwarded(&sluice)).unwrap();
    let cut = out["messages"][3]["content"].as_str().unwrap();
    assert!(
        cut.len() * 10 < observation.len(),
        "collapsed: {} of {} bytes",
        cut.len(),
        observation.len()
    );
    let inner: Value = serde_json::from_str(cut).expect("the output is still JSON");
    assert_eq!(inner["returncode"], 0);
    let text = inner["output"].as_str().unwrap();
    assert!(
        text.contains("lines omitted) <<cg:"),
        "the marker sits inside the string: {text:.200}"
    );
    // Its way back returns the observation exactly as the agent sent it.
    let (id, original) = first_marker(&forwarded(&sluice), &sent, Dialect::OpenAi);
    assert_eq!(original, observation);
    let expanded = sluice.get(&format!("/expand?id={id}")).await;
    assert_eq!(expanded.status, 200);
}

/// The `tools` value of a forwarded body, as bytes.
fn tools_bytes(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let root = engine::wire::json::parse_document(text).ok()?;
    engine::wire::json::get(text, root, "tools").map(|s| s.of(text).to_owned())
}

/// Claude Code's transcripts in the corpus were recorded without the request around them; a
/// real request declares its tools on every turn, in the same bytes.
fn with_claude_code_tools(turn: &[u8]) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(turn).unwrap();
    if value.get("tools").is_none() {
        value["tools"] = claude_code_body(false)["tools"].clone();
    }
    serde_json::to_vec(&value).unwrap()
}

/// `tools` opens the provider's cached prefix: the expand tool is declared from a session's first
/// turn, so the list is byte-identical on every turn, markers or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_list_never_changes_within_a_session() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let (mut sessions, mut turns_checked, mut with_markers) = (0, 0, 0);
    for body in integration_tests::bodies() {
        let claude_code = body.path.to_string_lossy().contains("/claude-code/");
        let name = body
            .path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let header = format!("tools-{name}-{:?}", body.dialect);
        let turns = modes::replay::turns_of(&body.bytes).unwrap();
        // The first turn's `tools`, absent or not: a list that appears later is a change too.
        let mut first: Option<Option<String>> = None;
        let mut marked = false;
        for (k, turn) in turns.iter().enumerate() {
            let turn = if claude_code {
                with_claude_code_tools(turn)
            } else {
                turn.to_vec()
            };
            let reply = sluice
                .chat(
                    body.dialect,
                    &[(modes::turn::SESSION_HEADER, header.as_str())],
                    turn,
                )
                .await;
            assert_eq!(reply.status, 200, "{name} turn {k}");
            let out = forwarded(&sluice);
            // Markers in the transcript (the declaration's own description names the shape).
            let value: Value = serde_json::from_slice(&out).unwrap();
            marked |= engine::marker::raw_contains_marker(&value["messages"].to_string());
            let tools = tools_bytes(&out);
            match &first {
                None => first = Some(tools),
                Some(expected) => assert_eq!(
                    &tools, expected,
                    "{name} {:?} turn {k}: the tool list changed",
                    body.dialect
                ),
            }
            turns_checked += 1;
        }
        // Every corpus request declares tools of its own (the Claude Code ones as recorded here).
        let tools = first
            .flatten()
            .unwrap_or_else(|| panic!("{name}: no tools"));
        assert!(
            tools.contains("context_guru_expand"),
            "{name}: declared from the first turn"
        );
        with_markers += usize::from(marked);
        sessions += 1;
    }
    assert!(
        sessions >= 80,
        "{sessions} sessions, both corpora and dialects"
    );
    assert!(
        with_markers > sessions / 2,
        "{with_markers} of {sessions} sessions were cut"
    );
    eprintln!("tool list: {sessions} sessions, {turns_checked} turns");
}

/// Every numeric leaf of two usage objects added (what the agent should read after a round).
fn sum_usage(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = a.clone();
            for (key, value) in b {
                let summed = match out.get(key) {
                    Some(mine) => sum_usage(mine, value),
                    None => value.clone(),
                };
                out.insert(key.clone(), summed);
            }
            Value::Object(out)
        }
        (Value::Number(x), Value::Number(y)) => json!(x.as_u64().unwrap() + y.as_u64().unwrap()),
        (_, b) => b.clone(),
    }
}

/// The usage a streamed reply gives its reader: Anthropic's `message_start` overlaid by each
/// `message_delta` (as the SDK accumulates it), the chat completion's usage chunk, the
/// Responses API's closing response.
fn streamed_usage(body: &[u8], dialect: Dialect) -> Value {
    let mut usage = json!({});
    for line in String::from_utf8_lossy(body).lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let piece = match dialect {
            Dialect::Anthropic if event["type"] == "message_start" => &event["message"]["usage"],
            Dialect::Anthropic => &event["usage"],
            Dialect::OpenAi => &event["usage"],
            Dialect::Responses => &event["response"]["usage"],
            Dialect::Gemini => &event["usageMetadata"],
        };
        if let (Some(into), Some(piece)) = (usage.as_object_mut(), piece.as_object()) {
            for (k, v) in piece {
                into.insert(k.clone(), v.clone());
            }
        }
    }
    usage
}

#[tokio::test]
async fn the_usage_the_agent_reads_includes_the_rounds_it_never_saw() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    // One round then the answer; and a model that keeps asking past the last round sluice
    // answers, whose held reply reaches the agent as it came, its usage summed all the same.
    let rounds_cases = [1, proxy::MAX_EXPAND_ROUNDS + 1];
    for stream in [false, true] {
        for dialect in DIALECTS {
            for expands in rounds_cases {
                let mut body: Value =
                    serde_json::from_slice(&crate::proxy::compactable(dialect, stream)).unwrap();
                if dialect == Dialect::OpenAi && stream {
                    body["stream_options"] = json!({"include_usage": true});
                }
                let sent = serde_json::to_vec(&body).unwrap();
                sluice.chat(dialect, &[], sent.clone()).await;
                let (id, _) = first_marker(&forwarded(&sluice), &sent, dialect);
                let billed_before = sluice.mock.billed().len();
                let mut script: Vec<Reply> = (0..expands)
                    .map(|_| Reply::Expand {
                        text: None,
                        ids: vec![id.clone()],
                    })
                    .collect();
                if expands == 1 {
                    script.push(Reply::Text("done".into()));
                }
                let replies = script.len();
                sluice.mock.script(script);
                let reply = sluice.chat(dialect, &[], sent.clone()).await;
                assert_eq!(reply.status, 200);
                let billed = sluice.mock.billed();
                let case = format!("{dialect:?} stream={stream} expands={expands}");
                assert_eq!(billed.len(), billed_before + replies, "{case}");
                let expected = billed[billed_before..]
                    .iter()
                    .skip(1)
                    .fold(billed[billed_before].clone(), |sum, u| sum_usage(&sum, u));
                let seen = if stream {
                    streamed_usage(&reply.body, dialect)
                } else {
                    serde_json::from_slice::<Value>(&reply.body).unwrap()["usage"].clone()
                };
                assert_eq!(
                    seen,
                    expected,
                    "{case}: {}",
                    String::from_utf8_lossy(&reply.body)
                );
            }
        }
    }
}

/// A turn whose `tool_choice` keeps the model from calling the expand tool still declares it:
/// the session's `tools` stay the same bytes.
#[tokio::test]
async fn a_turn_that_cannot_call_the_expand_tool_still_declares_it() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let body = claude_code_body(false);
    let mut forced = body.clone();
    forced["tool_choice"] = json!({"type": "tool", "name": "Bash"});
    let mut tools = Vec::new();
    for turn in [&body, &forced, &body] {
        let reply = sluice
            .chat(
                Dialect::Anthropic,
                &[(modes::turn::SESSION_HEADER, "forced")],
                serde_json::to_vec(turn).unwrap(),
            )
            .await;
        assert_eq!(reply.status, 200);
        tools.push(tools_bytes(&forwarded(&sluice)).unwrap());
    }
    assert!(tools[0].contains("context_guru_expand"));
    assert_eq!(tools[0], tools[1], "the forced turn keeps the declaration");
    assert_eq!(tools[1], tools[2]);
    let stats = sluice.stats().await;
    assert_eq!(
        stats["way_back_withheld"]["tool_choice_named"], 1,
        "and cuts nothing lossy"
    );
}

/// The expand tool's `lines`: the model asks for a range and gets exactly those lines, in every
/// dialect, streamed and not, without the agent seeing the round.
#[tokio::test]
async fn a_partial_expand_returns_exactly_the_lines_asked_for() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    for stream in [false, true] {
        for dialect in DIALECTS {
            let sent = crate::proxy::compactable(dialect, stream);
            sluice.chat(dialect, &[], sent.clone()).await;
            let (id, original) = first_marker(&forwarded(&sluice), &sent, dialect);
            let ask = json!({"id": id, "lines": "3-5"}).to_string();
            sluice.mock.script([
                Reply::Expand {
                    text: None,
                    ids: vec![ask],
                },
                Reply::Text("done".into()),
            ]);
            let reply = sluice.chat(dialect, &[], sent.clone()).await;
            assert_eq!(reply.status, 200);
            let lines: Vec<&str> = original.lines().collect();
            let expected = format!(
                "[lines 3-5 of {}]\n3\t{}\n4\t{}\n5\t{}",
                lines.len(),
                lines[2],
                lines[3],
                lines[4]
            );
            let continuation = String::from_utf8(forwarded(&sluice)).unwrap();
            let literal = serde_json::to_string(&expected).unwrap();
            assert!(
                continuation.contains(&literal),
                "{dialect:?} stream={stream}: the tool result is exactly lines 3-5"
            );
            // The omitted middle stays omitted: only the three lines went back.
            let middle = lines[lines.len() / 2..lines.len() / 2 + 3].join("\n");
            let middle = serde_json::to_string(&middle).unwrap();
            assert!(
                !continuation.contains(&middle[1..middle.len() - 1]),
                "not the whole original"
            );
            let body = String::from_utf8_lossy(&reply.body);
            assert!(
                !body.contains("context_guru_expand"),
                "the agent never sees the round"
            );
            let answer = if stream {
                crate::proxy::streamed_text(&reply.body)
            } else {
                answer_text(&reply.body, dialect)
            };
            assert_eq!(answer, "done", "{dialect:?} stream={stream}");
        }
    }
}
