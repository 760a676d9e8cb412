//! Restoring in place through the real server (`modes::restore`): a marker the model keeps
//! expanding goes back whole on the next turn, the bytes before it as they were, and stays so.

use engine::marker;
use engine::wire::{self, Dialect};
use integration_tests::mock::Reply;
use serde_json::{Value, json};

use crate::proxy::start;

const SESSION: &str = "restore-in-place";

/// A long log with facts in the middle that collapse cuts.
fn log(tag: &str) -> String {
    (0..400)
        .map(|i| match i {
            198..=201 => format!("fact_{} of {tag} is 17000000{}", i - 198, i - 198),
            _ => format!("line {i} of the {tag} listing, nothing to see"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A long text of distinct words: the bulk of the prompt every round re-reads.
fn wide() -> String {
    (0..200_000u64)
        .map(|w| format!("w{}", (w * 104_729) % 1_000_003))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The agent's transcript after `calls` tool calls: a long first answer, three logs collapse
/// cuts (the savings a restore is staked on), the log the model keeps asking about, then
/// short outputs.
fn transcript(calls: usize) -> Vec<u8> {
    let mut messages = vec![
        json!({"role": "user", "content": "why does the alpha job fail?"}),
        json!({"role": "assistant", "content": wide()}),
        json!({"role": "user", "content": "go on"}),
    ];
    let outputs = ["beta", "gamma", "delta", "alpha"];
    for i in 0..calls {
        let (command, output) = match outputs.get(i) {
            Some(tag) => (format!("cat {tag}.log"), log(tag)),
            None => (format!("ls -{i}"), "ok".to_owned()),
        };
        messages.push(
            json!({"role": "assistant", "content": "looking", "tool_calls": [{
            "id": format!("call_{i}"), "type": "function",
            "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}}]}),
        );
        messages
            .push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": output}));
    }
    let tools = json!([{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]);
    serde_json::to_vec(&json!({"model": "gpt-4.1", "messages": messages, "tools": tools})).unwrap()
}

/// The alpha log's message (the fourth output) in a forwarded body.
fn alpha(forwarded: &[u8]) -> String {
    let parsed = wire::parse(forwarded, Dialect::OpenAi).unwrap();
    let message = parsed
        .messages()
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("call_3"))
        .unwrap();
    message.content.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_expanded_again_and_again_comes_back_in_place() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let header = [(modes::turn::SESSION_HEADER, SESSION)];
    let send = |calls: usize| {
        let body = transcript(calls);
        let sluice = &sluice;
        async move {
            let reply = sluice.chat(Dialect::OpenAi, &header, body).await;
            assert_eq!(
                reply.status,
                200,
                "{}",
                String::from_utf8_lossy(&reply.body)
            );
            sluice.mock.recorded().last().unwrap().body.clone()
        }
    };
    for calls in 1..=4 {
        send(calls).await;
    }
    let cut = alpha(&sluice.mock.recorded().last().unwrap().body);
    let id = marker::marker_ids(&cut)
        .next()
        .expect("collapse cut the alpha log")
        .to_owned();
    // Two turns whose answers need the log: the model expands its marker each time.
    for calls in 5..=6 {
        sluice.mock.script([
            Reply::Expand {
                text: None,
                ids: vec![id.clone()],
            },
            Reply::Text("found it".into()),
        ]);
        send(calls).await;
    }
    let recorded = sluice.mock.recorded();
    let before = recorded[recorded.len() - 2].body.clone();
    assert!(
        alpha(&before).contains(&id),
        "still cut before the decision"
    );
    // The next turn: the original is back where it was.
    let restored = send(7).await;
    assert_eq!(
        alpha(&restored),
        log("alpha"),
        "the whole original, in place"
    );
    let first_change = before
        .iter()
        .zip(restored.iter())
        .position(|(a, b)| a != b)
        .unwrap();
    let alpha_at = String::from_utf8_lossy(&before).find(&cut[..40]).unwrap();
    assert!(
        first_change >= alpha_at - 64,
        "the bytes before the restored output are the same: first change at {first_change}, the output at {alpha_at}"
    );
    // And it stays: the next request forwards the same bytes up to its new messages.
    let next = send(8).await;
    let value: Value = serde_json::from_slice(&restored).unwrap();
    let kept = serde_json::to_string(&value["messages"].as_array().unwrap()[..16]).unwrap();
    let next_value: Value = serde_json::from_slice(&next).unwrap();
    let next_kept =
        serde_json::to_string(&next_value["messages"].as_array().unwrap()[..16]).unwrap();
    assert_eq!(kept, next_kept, "the restore holds");
    let stats = sluice.stats().await;
    assert_eq!(stats["restored_outputs"], 1, "{stats}");
    assert_eq!(stats["expand_rounds"], 2);
    let gates = &stats["components"]["collapse"]["gates"];
    assert_eq!(gates["restored_in_place"], 2, "{gates}");
}
