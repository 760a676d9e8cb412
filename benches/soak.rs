//! The soak: 1,000 concurrent sessions against one `sluice serve` for ten minutes, on loopback.
//!
//! Run with `bash benches/soak.sh` (release binaries; `SLUICE_SOAK_SECS` and
//! `SLUICE_SOAK_SESSIONS` shorten or widen it). Each session is an agent: it sends a public
//! corpus session turn by turn under its own session id and credential, thinks 1 to 4 s between
//! turns, and when its transcript runs out starts a new session (a bounded loop: no transcript
//! grows past the recorded one). sluice runs on its defaults, state in a fresh SQLite file.
//!
//! Every 30 s it samples sluice's resident memory, open file descriptors, the turns answered in
//! the window with their p50/p99, and sluice's own time per turn (`cg_added_ms_avg`). Memory
//! must plateau: the report compares the last third of the run with the middle third.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use engine::wire::Dialect;
use http_body_util::{BodyExt, Full};
use integration_tests::mock::Mock;
use parking_lot::Mutex;

use benches::http_load::{client, ms, percentile, post_with};
use benches::process::{spawn_sluice, status_kib};

const MAX_BODY: usize = 200 * 1024;
const SAMPLE_EVERY: Duration = Duration::from_secs(30);

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Public sessions as their turns (cut at the first turn over `MAX_BODY`), with their routes.
fn sessions() -> Vec<(&'static str, Vec<Bytes>)> {
    integration_tests::bodies()
        .into_iter()
        .filter(|b| b.path.to_string_lossy().contains("/public/"))
        .map(|b| {
            let route = match b.dialect {
                Dialect::OpenAi => "/openai/v1/chat/completions",
                Dialect::Anthropic => "/anthropic/v1/messages",
                Dialect::Responses => "/openai/v1/responses",
                Dialect::Gemini => "/gemini/v1beta/models/m:generateContent",
            };
            let turns = integration_tests::session_turns(&b.bytes)
                .into_iter()
                .take_while(|t| t.len() <= MAX_BODY)
                .map(Bytes::from)
                .collect();
            (route, turns)
        })
        .filter(|(_, turns): &(&str, Vec<Bytes>)| !turns.is_empty())
        .collect()
}

fn main() {
    let binary = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/release/sluice".into());
    let seconds = env_or("SLUICE_SOAK_SECS", 600);
    let agents = env_or("SLUICE_SOAK_SESSIONS", 1000) as usize;
    let dir = std::env::temp_dir().join(format!("sluice-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let db = dir.join("state.db");
    runtime.block_on(async move {
        let mock = Mock::start().await;
        let store = format!("sqlite:{}", db.display());
        let (url, mut child) = spawn_sluice(&binary, &store, &mock.url(), &["--max-connections", "4096"]);
        let pid = child.id();
        let sessions = Arc::new(sessions());
        let window: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let client = client();
        let mut tasks = Vec::new();
        for agent in 0..agents {
            let (client, url, sessions, window, stop) = (
                client.clone(),
                url.clone(),
                sessions.clone(),
                window.clone(),
                stop.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut round = 0usize;
                // Agents start spread over the first 4 s, as real ones arrive.
                let mut seed = (agent as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut think = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    Duration::from_millis(1_000 + seed % 3_000)
                };
                tokio::time::sleep(think() - Duration::from_millis(1_000)).await;
                while !stop.load(Ordering::Relaxed) {
                    let (route, turns) = &sessions[(agent + round) % sessions.len()];
                    let session = format!("soak-{agent}-{round}");
                    let credential = format!("Bearer sk-soak-{}", agent % 50);
                    let headers = [
                        ("x-context-guru-session", session.as_str()),
                        ("authorization", credential.as_str()),
                        ("anthropic-version", "2023-06-01"),
                    ];
                    for turn in turns {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let took = post_with(&client, &format!("{url}{route}"), &headers, turn.clone()).await;
                        window.lock().push(ms(took));
                        tokio::time::sleep(think()).await;
                    }
                    round += 1;
                }
            }));
        }
        println!("{agents} sessions for {seconds} s against sluice (pid {pid})\n");
        println!("| t | RSS | fds | turns in window | p50 | p99 | sluice's own time per turn (cg_added_ms_avg, cumulative) |");
        println!("|--:|--:|--:|--:|--:|--:|--:|");
        let started = Instant::now();
        let mut samples: Vec<(u64, u64)> = Vec::new();
        while started.elapsed() < Duration::from_secs(seconds) {
            tokio::time::sleep(SAMPLE_EVERY).await;
            let mut took = std::mem::take(&mut *window.lock());
            took.sort_by(f64::total_cmp);
            let rss = status_kib(pid, "VmRSS:");
            let request = http::Request::get(format!("{url}/stats"))
                .body(Full::new(Bytes::new()))
                .expect("request");
            let stats: serde_json::Value = match client.request(request).await {
                Ok(r) => serde_json::from_slice(&r.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default()).unwrap_or_default(),
                Err(_) => serde_json::Value::Null,
            };
            let t = started.elapsed().as_secs();
            samples.push((t, rss));
            println!(
                "| {t} s | {:.1} MiB | {} | {} | {:.2} ms | {:.2} ms | {:.3} ms |",
                rss as f64 / 1024.0,
                open_fds(pid),
                took.len(),
                percentile(&took, 50.0),
                percentile(&took, 99.0),
                stats["cg_added_ms_avg"].as_f64().unwrap_or(0.0),
            );
        }
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            let _ = task.await;
        }
        let third = samples.len() / 3;
        let mean = |s: &[(u64, u64)]| s.iter().map(|(_, r)| *r as f64).sum::<f64>() / s.len().max(1) as f64;
        let (middle, last) = (mean(&samples[third..2 * third]), mean(&samples[2 * third..]));
        println!(
            "\nRSS mean, middle third {:.1} MiB, last third {:.1} MiB ({:+.1}%); peak {:.1} MiB",
            middle / 1024.0,
            last / 1024.0,
            100.0 * (last - middle) / middle.max(1.0),
            status_kib(pid, "VmHWM:") as f64 / 1024.0,
        );
        let _ = child.kill();
        let _ = child.wait();
    });
    let _ = std::fs::remove_dir_all(&dir);
}
