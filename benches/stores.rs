//! The state stores side by side: `sluice serve --store memory`, `sqlite:` and `redis://`, in one
//! run, in front of the same mock, against going direct.
//!
//! Run with `bash benches/stores.sh` (builds release binaries, starts Debian's `redis-server` on a
//! free port, runs this). Every public corpus session is sent turn by turn (bodies up to 200 KB)
//! under its own session id, each turn to the four arms in a rotating order, for three rounds of
//! fresh session ids. Reports added latency p50/p99 per store (its p50 minus direct's), each
//! durable store's p50 beside memory's, the SQLite file size per 1,000 turns, and each process's
//! peak RSS.

use std::process::Child;

use bytes::Bytes;
use engine::wire::Dialect;
use http_body_util::{BodyExt, Full};
use integration_tests::mock::Mock;
use integration_tests::redis::RedisServer;

use benches::http_load::{HttpClient, client, ms, percentile, post_with};
use benches::process::{spawn_sluice, status_kib};

const MAX_BODY: usize = 200 * 1024;
const ROUNDS: usize = 3;

struct Arm {
    name: &'static str,
    url: String,
    child: Option<Child>,
    took: Vec<f64>,
}

fn route(dialect: Dialect, direct: bool) -> &'static str {
    match (dialect, direct) {
        (Dialect::OpenAi, false) => "/openai/v1/chat/completions",
        (Dialect::Anthropic, false) => "/anthropic/v1/messages",
        (Dialect::OpenAi, true) => "/v1/chat/completions",
        (Dialect::Anthropic, true) => "/v1/messages",
        (Dialect::Responses, false) => "/openai/v1/responses",
        (Dialect::Responses, true) => "/v1/responses",
        (Dialect::Gemini, false) => "/gemini/v1beta/models/m:generateContent",
        (Dialect::Gemini, true) => "/v1beta/models/m:generateContent",
    }
}

/// Every public session as its turns, cut at the first turn over `MAX_BODY`.
fn sessions() -> Vec<(Dialect, Vec<Bytes>)> {
    integration_tests::bodies()
        .into_iter()
        .filter(|b| b.path.to_string_lossy().contains("/public/"))
        .map(|b| {
            let turns = integration_tests::session_turns(&b.bytes)
                .into_iter()
                .take_while(|t| t.len() <= MAX_BODY)
                .map(Bytes::from)
                .collect();
            (b.dialect, turns)
        })
        .collect()
}

async fn stats(client: &HttpClient, url: &str) -> serde_json::Value {
    let request = http::Request::get(format!("{url}/stats"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = client.request(request).await.expect("stats");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    serde_json::from_slice(&body).expect("JSON")
}

fn main() {
    let binary = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/release/sluice".into());
    // Another build (an earlier commit's) to put beside this one in the same run: its SQLite
    // and Redis arms are added, on a file and a Redis database of their own.
    let before = std::env::args().nth(2);
    let redis =
        RedisServer::start().expect("redis-server is installed (apt-get install redis-server)");
    let dir = std::env::temp_dir().join(format!("sluice-stores-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let db = dir.join("state.db");
    let before_db = dir.join("before.db");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let mock = Mock::start().await;
        let mut arms = vec![Arm {
            name: "direct",
            url: mock.url(),
            child: None,
            took: Vec::new(),
        }];
        let mut stores = vec![
            ("memory", binary.clone(), "memory".to_owned()),
            ("sqlite", binary.clone(), format!("sqlite:{}", db.display())),
            ("redis", binary.clone(), redis.url()),
        ];
        if let Some(before) = &before {
            let other_db = redis.url().replace("/0", "/1");
            stores.push((
                "sqlite (before)",
                before.clone(),
                format!("sqlite:{}", before_db.display()),
            ));
            stores.push(("redis (before)", before.clone(), other_db));
        }
        for (name, binary, store) in stores {
            let (url, child) = spawn_sluice(&binary, &store, &mock.url(), &[]);
            arms.push(Arm {
                name,
                url,
                child: Some(child),
                took: Vec::new(),
            });
        }
        let client = client();
        let sessions = sessions();
        let mut turns = 0usize;
        for round in 0..ROUNDS {
            for (i, (dialect, session_turns)) in sessions.iter().enumerate() {
                let session = format!("bench-{round}-{i}");
                let headers = [
                    ("x-context-guru-session", session.as_str()),
                    ("authorization", "Bearer sk-bench"),
                    ("anthropic-version", "2023-06-01"),
                ];
                for (k, turn) in session_turns.iter().enumerate() {
                    turns += 1;
                    // Rotate which arm goes first so none always meets a warm mock or cache.
                    for j in 0..arms.len() {
                        let count = arms.len();
                        let arm = &mut arms[(k + j) % count];
                        let direct = arm.child.is_none();
                        let url = format!("{}{}", arm.url, route(*dialect, direct));
                        let took = post_with(&client, &url, &headers, turn.clone()).await;
                        arm.took.push(ms(took));
                    }
                }
            }
        }
        for arm in &mut arms {
            arm.took.sort_by(f64::total_cmp);
        }
        let p = |arm: &Arm, q: f64| percentile(&arm.took, q);
        let (d50, d99) = (p(&arms[0], 50.0), p(&arms[0], 99.0));
        let m50 = p(&arms[1], 50.0);
        println!("{turns} turns per arm ({} sessions x {ROUNDS} rounds)\n", sessions.len());
        println!("| store | p50 | added p50 | p99 | added p99 | p50 minus memory's | peak RSS |");
        println!("|---|--:|--:|--:|--:|--:|--:|");
        for arm in &arms {
            let rss = arm.child.as_ref().map_or(0.0, |c| status_kib(c.id(), "VmHWM:") as f64 / 1024.0);
            println!(
                "| {} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {} |",
                arm.name,
                p(arm, 50.0),
                p(arm, 50.0) - d50,
                p(arm, 99.0),
                p(arm, 99.0) - d99,
                p(arm, 50.0) - m50,
                if rss > 0.0 { format!("{rss:.1} MiB") } else { "—".into() },
            );
        }
        let sqlite = stats(&client, &arms[2].url).await;
        let commits = sqlite["store_commits"].as_u64().unwrap_or(0).max(1);
        let bytes = sqlite["store_backend_bytes"].as_u64().unwrap_or(0);
        let db_only = std::fs::metadata(&db).map_or(0, |m| m.len());
        println!(
            "\nSQLite after {commits} turns: {:.1} MiB on disk (file {:.1} MiB + WAL), {:.2} MiB per 1,000 turns",
            bytes as f64 / (1 << 20) as f64,
            db_only as f64 / (1 << 20) as f64,
            bytes as f64 / (1 << 20) as f64 * 1000.0 / commits as f64,
        );
        let redis_stats = stats(&client, &arms[3].url).await;
        println!(
            "Redis: {} loads, {} lease waits, {} skipped; SQLite: {} loads, {} skipped",
            redis_stats["store_loads"],
            redis_stats["store_lease_waits"],
            redis_stats["store_skipped_requests"],
            sqlite["store_loads"],
            sqlite["store_skipped_requests"],
        );
        for arm in &mut arms {
            if let Some(child) = arm.child.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
