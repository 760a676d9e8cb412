//! The way back always ships with the cut, through the real server and the mock provider: every
//! key order of the body, every forced `tool_choice`, and compressed upstream replies.

use engine::marker::{self, EXPAND_TOOL_NAME};
use engine::wire::{self, Dialect};
use integration_tests::mock::{Encoding, Reply};
use serde_json::Value;

use crate::proxy::{Sluice, answer_text, compactable, first_marker, start, streamed_text};

/// The names of the tools a forwarded body declares.
fn declared_tools(body: &[u8]) -> Vec<String> {
    let value: Value = serde_json::from_slice(body).unwrap();
    value["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().or(t["function"]["name"].as_str()))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The body with its top-level members written in `order` (then the rest), keeping each
/// member's value as the agent wrote it. `system_array` turns a string system into blocks.
fn reorder(body: &[u8], order: &[&str], system_array: bool) -> Vec<u8> {
    let value: Value = serde_json::from_slice(body).unwrap();
    let object = value.as_object().unwrap();
    let mut keys: Vec<&str> = order.to_vec();
    keys.extend(
        object
            .keys()
            .map(String::as_str)
            .filter(|k| !order.contains(k)),
    );
    let members: Vec<String> = keys
        .iter()
        .filter_map(|key| {
            let mut member = object.get(*key)?.clone();
            if *key == "system"
                && system_array
                && let Some(text) = member.as_str()
            {
                member = serde_json::json!([{ "type": "text", "text": text }]);
            }
            Some(format!("{}:{}", Value::from(*key), member))
        })
        .collect();
    format!("{{{}}}", members.join(",")).into_bytes()
}

/// Sends `body`; the forwarded request must carry a marker and declare the expand tool, and an
/// expand call for that marker must come back with the exact original.
async fn assert_way_back(sluice: &Sluice, dialect: Dialect, body: &[u8], what: &str) {
    let reply = sluice.chat(dialect, &[], body.to_vec()).await;
    assert_eq!(reply.status, 200, "{what}");
    let forwarded = sluice.mock.recorded().last().unwrap().body.clone();
    assert!(
        marker::raw_contains_marker(&transcript(&forwarded)),
        "{what}: lossy components cut nothing"
    );
    let tools = declared_tools(&forwarded);
    assert_eq!(
        tools.last().map(String::as_str),
        Some(EXPAND_TOOL_NAME),
        "{what}: a marker without its way back ({tools:?})"
    );
    assert_eq!(
        tools.iter().filter(|t| *t == EXPAND_TOOL_NAME).count(),
        1,
        "{what}"
    );
    let (id, original) = first_marker(&forwarded, body, dialect);
    sluice.mock.script([
        Reply::Expand {
            text: None,
            ids: vec![id],
        },
        Reply::Text("restored".into()),
    ]);
    let reply = sluice.chat(dialect, &[], body.to_vec()).await;
    assert_eq!(reply.status, 200, "{what}");
    let continuation = sluice.mock.recorded().last().unwrap().body.clone();
    let continuation = String::from_utf8_lossy(&continuation);
    assert!(
        continuation.contains(&serde_json::to_string(&original).unwrap()[1..200]),
        "{what}: the expand round did not restore the original"
    );
}

#[tokio::test]
async fn every_key_order_declares_the_expand_tool_and_restores_the_original() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let orders: [[&str; 3]; 6] = [
        ["system", "tools", "messages"],
        ["system", "messages", "tools"],
        ["tools", "system", "messages"],
        ["tools", "messages", "system"],
        ["messages", "system", "tools"],
        // LiteLLM's order: messages, max_tokens, tools, system.
        ["messages", "tools", "system"],
    ];
    let anthropic = compactable(Dialect::Anthropic, false);
    for order in orders {
        for system_array in [false, true] {
            let body = reorder(&anthropic, &order, system_array);
            let what = format!("anthropic {order:?} system_array={system_array}");
            assert_way_back(&sluice, Dialect::Anthropic, &body, &what).await;
        }
    }
    let openai = compactable(Dialect::OpenAi, false);
    for order in [["tools", "messages"], ["messages", "tools"]] {
        let body = reorder(&openai, &order, false);
        assert_way_back(
            &sluice,
            Dialect::OpenAi,
            &body,
            &format!("openai {order:?}"),
        )
        .await;
    }
}

/// The transcript of a body as JSON text (`messages`, or the Responses API's `input`): where
/// markers are, and the expand tool's own description is not.
fn transcript(body: &[u8]) -> String {
    let value: Value = serde_json::from_slice(body).unwrap();
    let messages = &value["messages"];
    if messages.is_null() {
        value["input"].to_string()
    } else {
        messages.to_string()
    }
}

/// `body` with `tool_choice` set to `choice` (raw JSON).
fn with_choice(body: &[u8], choice: &str) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(body).unwrap();
    value["tool_choice"] = serde_json::from_str(choice).unwrap();
    serde_json::to_vec(&value).unwrap()
}

#[tokio::test]
async fn a_forced_tool_choice_never_sends_a_marker_without_a_way_back() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    // Forcing "some tool" keeps the expand tool reachable: it is declared and the cut stands.
    for (dialect, choice) in [
        (Dialect::Anthropic, r#"{"type":"any"}"#),
        (Dialect::Anthropic, r#"{"type":"auto"}"#),
        (Dialect::OpenAi, r#""required""#),
        (Dialect::OpenAi, r#""auto""#),
    ] {
        let body = with_choice(&compactable(dialect, false), choice);
        assert_way_back(&sluice, dialect, &body, choice).await;
    }
    // Naming one tool, or none, leaves the model no way to call expand: nothing lossy is cut,
    // and the tool is declared as on the session's other turns.
    let withheld = [
        (Dialect::Anthropic, r#"{"type":"tool","name":"bash"}"#),
        (Dialect::Anthropic, r#"{"type":"none"}"#),
        (
            Dialect::OpenAi,
            r#"{"type":"function","function":{"name":"bash"}}"#,
        ),
        (Dialect::OpenAi, r#""none""#),
    ];
    for (dialect, choice) in withheld {
        let body = with_choice(&compactable(dialect, false), choice);
        let reply = sluice.chat(dialect, &[], body.clone()).await;
        assert_eq!(reply.status, 200, "{choice}");
        let forwarded = sluice.mock.recorded().last().unwrap().body.clone();
        assert!(
            !marker::raw_contains_marker(&transcript(&forwarded)),
            "{choice}: a marker the model cannot expand"
        );
        // Declared all the same (the agent's `tools` stay the same bytes on every turn of its
        // session), though the model cannot call it on this one.
        assert!(
            declared_tools(&forwarded)
                .iter()
                .any(|t| t == EXPAND_TOOL_NAME),
            "{choice}"
        );
        // Lossless repacking still runs: the messages are the agent's, every text intact.
        let sent = wire::parse(&body, dialect).unwrap();
        let out = wire::parse(&forwarded, dialect).unwrap();
        assert_eq!(sent.messages().len(), out.messages().len(), "{choice}");
    }
    let stats = sluice.stats().await;
    let counted = &stats["way_back_withheld"];
    assert_eq!(counted["tool_choice_named"], 2, "{counted}");
    assert_eq!(counted["tool_choice_none"], 2, "{counted}");
}

#[tokio::test]
async fn sluice_asks_for_identity_and_reads_a_gzipped_reply_in_the_expand_loop() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    // A provider front end gzips only what the request accepts: sluice accepts identity.
    sluice.mock.set_encoding(Encoding::GzipWhenAccepted);
    let body = compactable(Dialect::Anthropic, false);
    let reply = sluice
        .chat(
            Dialect::Anthropic,
            &[("accept-encoding", "gzip, deflate")],
            body,
        )
        .await;
    assert_eq!(reply.status, 200);
    let asked = sluice.mock.recorded().last().unwrap().headers.clone();
    assert_eq!(asked.get("accept-encoding").unwrap(), "identity");
    // A hop that gzips all the same: the expand round still works, streamed and not.
    sluice.mock.set_encoding(Encoding::GzipAlways);
    for dialect in [Dialect::Anthropic, Dialect::OpenAi] {
        for stream in [false, true] {
            let body = compactable(dialect, stream);
            let what = format!("{dialect:?} stream={stream}");
            let first = sluice
                .chat(dialect, &[("accept-encoding", "gzip")], body.clone())
                .await;
            assert_eq!(first.status, 200, "{what}");
            assert!(
                first.headers.get("content-encoding").is_none(),
                "{what}: decoded for the agent"
            );
            let (id, original) =
                first_marker(&sluice.mock.recorded().last().unwrap().body, &body, dialect);
            sluice.mock.script([
                Reply::Expand {
                    text: None,
                    ids: vec![id],
                },
                Reply::Text("gzip final".into()),
            ]);
            let reply = sluice
                .chat(dialect, &[("accept-encoding", "gzip")], body.clone())
                .await;
            assert_eq!(reply.status, 200, "{what}");
            let text = String::from_utf8_lossy(&reply.body).into_owned();
            let answer = if stream {
                streamed_text(&reply.body)
            } else {
                answer_text(&reply.body, dialect)
            };
            assert_eq!(answer, "gzip final", "{what}: {text}");
            assert!(
                !text.contains(EXPAND_TOOL_NAME),
                "{what}: the agent saw the expand call"
            );
            let continuation = sluice.mock.recorded().last().unwrap().body.clone();
            assert!(
                String::from_utf8_lossy(&continuation)
                    .contains(&serde_json::to_string(&original).unwrap()[1..200]),
                "{what}"
            );
        }
    }
}

/// A reply the expand loop would have to buffer past its bound (one 17 MiB frame, or a held
/// turn of 20 MiB in 10 MiB frames) reaches the agent whole and untouched instead, counted;
/// nothing is buffered without limit.
#[tokio::test]
async fn an_oversized_reply_is_relayed_untouched_past_the_bound() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let mut expected_unread = 0;
    for (id_bytes, stream) in [(34 << 20, true), (20 << 20, true), (20 << 20, false)] {
        let body = compactable(Dialect::Anthropic, stream);
        let huge = "f".repeat(id_bytes);
        sluice.mock.script([Reply::Expand {
            text: None,
            ids: vec![huge.clone()],
        }]);
        let reply = sluice.chat(Dialect::Anthropic, &[], body).await;
        assert_eq!(reply.status, 200);
        let text = String::from_utf8_lossy(&reply.body);
        assert!(
            text.contains(EXPAND_TOOL_NAME),
            "the reply went through as it came"
        );
        assert!(reply.body.len() > id_bytes, "nothing was cut off");
        expected_unread += 1;
        let stats = sluice.stats().await;
        assert_eq!(
            stats["expand_unread"]["over_bound"], expected_unread,
            "stream={stream}"
        );
    }
}

/// A small compressed reply that expands past the bound (20 MiB of one letter gzips to a few
/// kilobytes) is not decoded without limit: the agent gets it as it came, with the
/// `Content-Encoding` that says how to read it.
#[tokio::test]
async fn a_compressed_reply_that_expands_past_the_bound_goes_through_as_it_came() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    sluice.mock.set_encoding(Encoding::GzipAlways);
    sluice.mock.script([Reply::Text("a".repeat(20 << 20))]);
    let reply = sluice
        .chat(
            Dialect::Anthropic,
            &[],
            compactable(Dialect::Anthropic, false),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers.get("content-encoding").unwrap(), "gzip");
    assert!(reply.body.len() < 1 << 20, "sent compressed, not decoded");
    let stats = sluice.stats().await;
    assert_eq!(stats["expand_unread"]["over_bound"], 1);
}
