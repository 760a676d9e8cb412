//! The cache keep-alive through the real server (`proxy::keepalive`, `cache.keepalive`): a quiet
//! Anthropic session's last request goes upstream again as pings asking for one token, while it
//! stays quiet; a session that comes back on an entry a ping kept is booked as kept; a ping the
//! provider answers with a cache write stops the session's pings.

use std::time::Duration;

use engine::wire::Dialect;
use integration_tests::mock::Reply;
use modes::replay::turns_of;
use serde_json::{Value, json};

use crate::proxy::{Sluice, corpus, start_tuned};

/// `idle` seconds of quiet before each ping, and an entry that lives `lifetime`: the
/// provider's five minutes, scaled to a test.
async fn start(idle: u64, lifetime: Duration) -> Sluice {
    start_tuned(
        move |_| {
            format!(
                "cache:\n  keepalive: true\n  keepalive_idle_seconds: {idle}\n  keepalive_min_prefix_tokens: 1000\n"
            )
        },
        move |settings| settings.keepalive_lifetime = lifetime,
    )
    .await
}

/// The turns of one Anthropic corpus session, each with a cache breakpoint on its last
/// message, as Claude Code marks every request (a client that asks for no caching has no entry
/// to keep, and gets no pings).
fn turns() -> Vec<Vec<u8>> {
    let body = corpus(
        "gemini3pro-miniswe-pytest-dev-pytest-6197",
        Dialect::Anthropic,
    );
    turns_of(&body)
        .unwrap()
        .iter()
        .map(|turn| {
            let mut value: Value = serde_json::from_slice(turn).unwrap();
            let last = value["messages"]
                .as_array_mut()
                .unwrap()
                .last_mut()
                .unwrap();
            let content = match last["content"].take() {
                Value::String(text) => json!([{"type": "text", "text": text}]),
                blocks => blocks,
            };
            last["content"] = content;
            let block = last["content"].as_array_mut().unwrap().last_mut().unwrap();
            block["cache_control"] = json!({"type": "ephemeral"});
            serde_json::to_vec(&value).unwrap()
        })
        .collect()
}

const KEY: &str = "sk-ant-keepalive-test";

async fn send(sluice: &Sluice, session: &str, body: &[u8]) {
    assert_eq!(sent(sluice, session, body).await, 200);
}

/// The status of one turn of `session`.
async fn sent(sluice: &Sluice, session: &str, body: &[u8]) -> u16 {
    let headers = [
        (modes::turn::SESSION_HEADER, session),
        ("x-api-key", KEY),
        ("anthropic-version", "2023-06-01"),
    ];
    sluice
        .chat(Dialect::Anthropic, &headers, body.to_vec())
        .await
        .status
}

/// The pings the mock has received: requests asking for one token.
fn pings(sluice: &Sluice) -> Vec<bytes::Bytes> {
    sluice
        .mock
        .recorded()
        .into_iter()
        .filter(|r| serde_json::from_slice::<Value>(&r.body).is_ok_and(|v| v["max_tokens"] == 1))
        .map(|r| r.body)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_session_is_pinged_and_comes_back_on_the_kept_entry() {
    // Pings a second after the entry was last used; it lives three, and a ping may go until
    // two seconds after (the keeper's margin for delivery).
    let sluice = start(1, Duration::from_secs(3)).await;
    let turns = turns();
    let session = "keepalive-kept";

    // A session's first turn gets no pings (half of all pings went to one-request sessions).
    send(&sluice, session, &turns[2]).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(pings(&sluice).is_empty(), "no ping after a first turn");
    let stats = sluice.stats().await;
    assert_eq!(stats["keepalive_skipped"], 1, "{stats}");

    // The second turn is worth them: two pings, a second apart, then nothing more.
    sluice.mock.clear_recorded();
    let third = tokio::time::Instant::now();
    send(&sluice, session, &turns[3]).await;
    let forwarded = sluice.mock.recorded()[0].body.clone();
    let stats = sluice.stats_when("keepalive_pings", 2).await;
    assert_eq!(stats["keepalive_pings"], 2, "{stats}");
    assert_eq!(stats["keepalive_gaps_pinged"], 1);
    assert_eq!(stats["keepalive_wrote_instead_of_read"], 0);
    assert_eq!(stats["keepalive_failed"], 0);
    let read = stats["keepalive_ping_tokens"].as_u64().unwrap();
    assert!(read > 1000, "each ping read the whole prefix: {stats}");
    let sent = pings(&sluice);
    assert_eq!(sent.len(), 2);
    // The turn's bytes, but for `max_tokens` and `stream` (`ping_body` is tested to change
    // nothing else): the cached prompt is the same.
    let expected = modes::keepalive::ping_body(&forwarded).unwrap();
    for ping in &sent {
        assert_eq!(ping.as_ref(), expected.as_slice());
        let value: Value = serde_json::from_slice(ping).unwrap();
        assert_ne!(value["stream"], true, "a ping is not streamed");
    }
    let recorded = sluice.mock.recorded();
    let last = recorded.last().unwrap();
    assert_eq!(
        last.headers.get("x-api-key").unwrap(),
        KEY,
        "a ping goes with the caller's credential"
    );
    assert!(last.path.ends_with("/v1/messages"), "{}", last.path);

    // Back after the entry would have expired (more than three seconds of quiet), on the entry
    // the second ping kept (read about two seconds in): a kept gap.
    tokio::time::sleep_until(third + Duration::from_millis(3300)).await;
    send(&sluice, session, &turns[4]).await;
    let stats = sluice.stats_when("keepalive_kept", 1).await;
    assert_eq!(stats["keepalive_kept"], 1, "{stats}");
    assert!(stats["keepalive_kept_tokens"].as_u64().unwrap() > 1000);
    // Nothing of the credential stays once the gap's pings are done.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let stats = sluice.stats_when("keepalive_live_sessions", 0).await;
    assert_eq!(stats["keepalive_live_sessions"], 0, "{stats}");
    assert_eq!(
        stats["keepalive_pings"], 4,
        "two pings per quiet gap: {stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_stops_the_pings_and_a_ping_that_writes_or_a_refusal_ends_them() {
    // Two seconds before each ping, which may go until three and a half seconds after: room
    // for the steps below on a loaded machine.
    let sluice = start(2, Duration::from_secs(5)).await;
    let turns = turns();
    let session = "keepalive-stops";
    send(&sluice, session, &turns[2]).await;
    send(&sluice, session, &turns[3]).await;
    // From now on the provider reports every request as a write: the entry has gone.
    sluice.mock.set_cache_report(Some((0, 40_000)));
    // The next turn comes before the first ping is due: none is sent for that gap.
    tokio::time::sleep(Duration::from_millis(400)).await;
    send(&sluice, session, &turns[4]).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(pings(&sluice).is_empty(), "a turn ends the gap's pings");

    // The gap after it: its first ping is answered with a write, so pinging on would pay for
    // writes. One ping, counted, and no second.
    let stats = sluice
        .stats_when("keepalive_wrote_instead_of_read", 1)
        .await;
    assert_eq!(stats["keepalive_wrote_instead_of_read"], 1, "{stats}");
    tokio::time::sleep(Duration::from_millis(2300)).await;
    assert_eq!(pings(&sluice).len(), 1, "no ping after one that wrote");
    let stats = sluice.stats().await;
    assert_eq!(stats["keepalive_pings"], 1);
    assert_eq!(stats["keepalive_live_sessions"], 0, "{stats}");

    // A turn the provider refuses has no entry to keep: what it held goes at once, and no
    // ping follows.
    sluice.mock.set_cache_report(None);
    sluice.mock.script([Reply::Status(
        429,
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#.into(),
    )]);
    assert_eq!(sent(&sluice, session, &turns[5]).await, 429);
    let stats = sluice.stats_when("keepalive_live_sessions", 0).await;
    assert_eq!(stats["keepalive_live_sessions"], 0, "{stats}");
    tokio::time::sleep(Duration::from_millis(2300)).await;
    assert_eq!(pings(&sluice).len(), 1, "no ping after a refused turn");
}
