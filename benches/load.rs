//! The load harness: sluice against going direct, on the public corpus bodies, same mock.
//!
//! Run with `bash benches/load.sh` (builds release binaries, then runs this). Reports, per
//! dialect and overall: added latency p50/p99 (sluice minus direct, bodies up to 200 KB, the
//! embedded default config), streaming time to first byte, throughput at 64 concurrent
//! connections as a share of direct, and the sluice process's peak RSS.
//!
//! The mock and the load generator share this process and the machine's two cores with sluice,
//! so throughput is a relative figure: both arms pay the same overhead.
//!
//! `load.sh turns` sends the largest public sessions turn by turn, as an agent does (each turn
//! re-sends the transcript with the newest messages first seen), alternating with direct, under
//! one session id each: the added latency a live agent sees, first sight of every new output
//! included. `TURNS_PASSES=2` sends the same sessions again under new session ids, to the same
//! sluice process: every message's token count and every component memo is then warm, so the
//! second pass's rows are a turn without first sight, and the difference between the passes is
//! what first sight costs on the request path. `TURNS_PRESET=off` runs the same turns through
//! `--preset off`, which forwards without reading: what the hop itself adds.
//! `TURNS_DIALECT=anthropic` (or `openai`) sends one dialect's sessions only, to a sluice of its
//! own: both dialects hold the same runs, so the dialect sent second finds every output's token
//! count already memoized by the first, and only the first row of a two-dialect run is a first
//! sight of every output.
//!
//! `load.sh dashboard` measures the dashboard's capture instead: two sluices on the same mock,
//! one with `--no-dashboard` and one with the dashboard on a file and content capture open,
//! requests alternating between them; it reports both arms' latency and the difference.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use engine::wire::Dialect;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use integration_tests::mock::Mock;

use benches::http_load::{HttpClient, ms, percentile, post};

const MAX_BODY: usize = 200 * 1024;
const ROUNDS: usize = 20;
const CONCURRENCY: usize = 64;
const THROUGHPUT_WINDOW: Duration = Duration::from_secs(5);

fn route(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::OpenAi => "/openai/v1/chat/completions",
        Dialect::Anthropic => "/anthropic/v1/messages",
        Dialect::Responses => "/openai/v1/responses",
        Dialect::Gemini => "/gemini/v1beta/models/m:generateContent",
    }
}

/// Direct calls go to the mock with the path sluice would use upstream.
fn direct_route(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::OpenAi => "/v1/chat/completions",
        Dialect::Anthropic => "/v1/messages",
        Dialect::Responses => "/v1/responses",
        Dialect::Gemini => "/v1beta/models/m:generateContent",
    }
}

async fn first_byte(client: &HttpClient, url: &str, body: Bytes) -> Duration {
    let started = Instant::now();
    let request = http::Request::post(url)
        .body(Full::new(body))
        .expect("request");
    let response = client.request(request).await.expect("response");
    let mut body = response.into_body();
    let _ = body.frame().await;
    let ttfb = started.elapsed();
    while body.frame().await.is_some() {}
    ttfb
}

fn with_stream(body: &[u8]) -> Bytes {
    let mut value: serde_json::Value = serde_json::from_slice(body).expect("corpus JSON");
    value["stream"] = serde_json::Value::Bool(true);
    Bytes::from(serde_json::to_vec(&value).expect("JSON"))
}

/// A memory store: this harness never touches the user's state directory, and the stores are
/// compared side by side in `stores.rs`.
fn start_sluice(binary: &str, port: u16, upstream: &str) -> Child {
    start_sluice_with(binary, port, upstream, &["--no-dashboard"])
}

fn start_sluice_with(binary: &str, port: u16, upstream: &str, extra: &[&str]) -> Child {
    // `memory` unless `extra` names a store.
    let store: &[&str] = if extra.contains(&"--store") {
        &[]
    } else {
        &["--store", "memory"]
    };
    Command::new(binary)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(store)
        .args(extra)
        .args([
            "--anthropic-upstream",
            upstream,
            "--openai-upstream",
            upstream,
        ])
        .env("SLUICE_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("sluice starts")
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

async fn throughput(client: &HttpClient, url: String, bodies: Arc<Vec<Bytes>>) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + THROUGHPUT_WINDOW;
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let (client, url, bodies, done) =
            (client.clone(), url.clone(), bodies.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = worker;
            while Instant::now() < deadline {
                post(&client, &url, bodies[i % bodies.len()].clone()).await;
                done.fetch_add(1, Ordering::Relaxed);
                i += CONCURRENCY;
            }
        }));
    }
    for task in tasks {
        task.await.expect("load task");
    }
    done.load(Ordering::Relaxed) as f64 / THROUGHPUT_WINDOW.as_secs_f64()
}

/// The public final requests of at most `MAX_BODY` in `dialect`.
fn measured_bodies(dialect: Dialect) -> Vec<Bytes> {
    benches::public_bodies(dialect)
        .into_iter()
        .filter(|(_, b)| b.len() <= MAX_BODY)
        .map(|(_, b)| Bytes::from(b))
        .collect()
}

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    probe.local_addr().expect("addr").port()
}

async fn wait_ready(client: &HttpClient, url: &str) {
    for _ in 0..100 {
        let request = http::Request::get(format!("{url}/healthz"))
            .body(Full::new(Bytes::new()))
            .expect("req");
        if client.request(request).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The turn's latency through two sluices (`without`, `with`) over the same bodies, alternating
/// which goes first, after one unmeasured pass; a table row per dialect.
async fn side_by_side(client: &HttpClient, off_url: &str, on_url: &str) {
    println!(
        "| dialect | bodies | without p50 | with p50 | difference p50 | without p99 | with p99 | difference p99 |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|");
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        let bodies = measured_bodies(dialect);
        let (a, b) = (
            format!("{off_url}{}", route(dialect)),
            format!("{on_url}{}", route(dialect)),
        );
        for body in &bodies {
            post(client, &a, body.clone()).await;
            post(client, &b, body.clone()).await;
        }
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS * 2 {
            for body in &bodies {
                if round % 2 == 0 {
                    without.push(ms(post(client, &a, body.clone()).await));
                    with.push(ms(post(client, &b, body.clone()).await));
                } else {
                    with.push(ms(post(client, &b, body.clone()).await));
                    without.push(ms(post(client, &a, body.clone()).await));
                }
            }
        }
        without.sort_by(f64::total_cmp);
        with.sort_by(f64::total_cmp);
        let (w50, d50, w99, d99) = (
            percentile(&without, 50.0),
            percentile(&with, 50.0),
            percentile(&without, 99.0),
            percentile(&with, 99.0),
        );
        println!(
            "| {} | {} | {w50:.3} ms | {d50:.3} ms | {:+.3} ms | {w99:.3} ms | {d99:.3} ms | {:+.3} ms |",
            dialect.as_str(),
            bodies.len(),
            d50 - w50,
            d99 - w99,
        );
    }
}

/// The cache keep-alive's cost on the request path: a sluice without it and one with
/// `cache.keepalive: true` and no prefix minimum (every Anthropic turn tells the keeper its gap ended, and its report
/// arms the next gap's pings), the same bodies alternating, in one run. Pings fire after 280 s
/// of quiet, past the run's end: what is measured is the bookkeeping on the turn.
async fn compare_keepalive(binary: &str, mock: &Mock, client: &HttpClient) {
    let config =
        std::env::temp_dir().join(format!("sluice-load-keepalive-{}.yaml", std::process::id()));
    // Every turn past a session's first held for pings (no prefix too small): the worst case.
    std::fs::write(
        &config,
        "cache:\n  keepalive: true\n  keepalive_min_prefix_tokens: 0\n",
    )
    .expect("config");
    let config_arg = config.display().to_string();
    let (off_port, on_port) = (free_port(), free_port());
    let mut off = start_sluice_with(binary, off_port, &mock.url(), &[]);
    let mut on = start_sluice_with(binary, on_port, &mock.url(), &["--config", &config_arg]);
    let (off_url, on_url) = (
        format!("http://127.0.0.1:{off_port}"),
        format!("http://127.0.0.1:{on_port}"),
    );
    wait_ready(client, &off_url).await;
    wait_ready(client, &on_url).await;
    side_by_side(client, &off_url, &on_url).await;
    let stats = get_json(client, &format!("{on_url}/stats")).await;
    println!();
    println!(
        "keep-alive: {} sessions held for pings, {} turns skipped",
        stats["keepalive_live_sessions"], stats["keepalive_skipped"]
    );
    for child in [&mut off, &mut on] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_file(&config);
}

async fn get_json(client: &HttpClient, url: &str) -> serde_json::Value {
    let response = client
        .request(
            http::Request::get(url)
                .body(Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("get");
    serde_json::from_slice(
        &response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes(),
    )
    .unwrap_or_default()
}

/// The dashboard's cost on the request path: the same bodies through a sluice without it and
/// one with it (a file, content capture on), alternating, in one run.
async fn compare_dashboard(binary: &str, mock: &Mock, client: &HttpClient) {
    let db = std::env::temp_dir().join(format!("sluice-load-dashboard-{}.db", std::process::id()));
    let db_arg = db.display().to_string();
    let (off_port, on_port) = (free_port(), free_port());
    let mut off = start_sluice_with(binary, off_port, &mock.url(), &["--no-dashboard"]);
    let mut on = start_sluice_with(
        binary,
        on_port,
        &mock.url(),
        &[
            "--dashboard",
            "--dashboard-db",
            &db_arg,
            "--dashboard-content",
        ],
    );
    let (off_url, on_url) = (
        format!("http://127.0.0.1:{off_port}"),
        format!("http://127.0.0.1:{on_port}"),
    );
    wait_ready(client, &off_url).await;
    wait_ready(client, &on_url).await;
    side_by_side(client, &off_url, &on_url).await;
    let overview = client
        .request(
            http::Request::get(format!("{on_url}/dashboard/api/overview"))
                .body(Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("overview");
    let overview: serde_json::Value = serde_json::from_slice(
        &overview
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes(),
    )
    .unwrap_or_default();
    println!();
    println!(
        "dashboard rows: {} captured, {} dropped, {} write errors",
        overview["capture"]["captured"],
        overview["capture"]["dropped"],
        overview["capture"]["write_errors"]
    );
    for child in [&mut off, &mut on] {
        let _ = child.kill();
        let _ = child.wait();
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{db_arg}{suffix}"));
    }
}

/// Sessions sent by `load.sh turns`: the largest of each dialect.
const LARGEST_SESSIONS: usize = 4;

/// The largest public sessions turn by turn, through sluice and direct, alternating.
async fn turn_by_turn(binary: &str, mock: &Mock, client: &HttpClient) {
    let port = free_port();
    // `TURNS_PRESET=off`: the same turns through `--preset off`, which forwards without
    // reading, so what the hop costs by itself is measured beside what the turn adds.
    let preset = std::env::var("TURNS_PRESET").ok().filter(|p| !p.is_empty());
    let mut extra = vec!["--no-dashboard"];
    if let Some(preset) = &preset {
        extra.extend(["--preset", preset.as_str()]);
    }
    let mut sluice = start_sluice_with(binary, port, &mock.url(), &extra);
    let url = format!("http://127.0.0.1:{port}");
    wait_ready(client, &url).await;
    println!(
        "| dialect | sessions | turns | largest turn | direct p50 | added p50 | direct p99 | added p99 | added max |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    let passes: usize = std::env::var("TURNS_PASSES").map_or(1, |p| {
        p.parse::<usize>()
            .expect("TURNS_PASSES is a number of passes")
            .max(1)
    });
    let dialects: Vec<Dialect> = match std::env::var("TURNS_DIALECT").ok().as_deref() {
        None => vec![Dialect::OpenAi, Dialect::Anthropic],
        Some("openai") => vec![Dialect::OpenAi],
        Some("anthropic") => vec![Dialect::Anthropic],
        Some(other) => panic!("TURNS_DIALECT is openai or anthropic, not {other}"),
    };
    for pass in 1..=passes {
        for &dialect in &dialects {
            turns_of_dialect(dialect, pass, passes, &url, mock, client).await;
        }
    }
    let _ = sluice.kill();
    let _ = sluice.wait();
}

/// One pass of [`turn_by_turn`] over one dialect's largest sessions: one table row.
async fn turns_of_dialect(
    dialect: Dialect,
    pass: usize,
    passes: usize,
    url: &str,
    mock: &Mock,
    client: &HttpClient,
) {
    let (mut direct, mut via, mut paired) = (Vec::new(), Vec::new(), Vec::new());
    let (mut turns, mut largest) = (0, 0);
    for (round, (name, body)) in benches::public_bodies(dialect)
        .into_iter()
        .take(LARGEST_SESSIONS)
        .enumerate()
    {
        // The dialect is part of the id: both dialects hold the same runs under the same
        // names, and one run's Anthropic turns must not continue its OpenAI session.
        let session = format!(
            "turns-{name}-{}-{}-{pass}",
            dialect.as_str(),
            std::process::id()
        );
        for turn in integration_tests::session_turns(&body) {
            largest = largest.max(turn.len());
            turns += 1;
            let turn = Bytes::from(turn);
            let d_url = format!("{}{}", mock.url(), direct_route(dialect));
            let s_url = format!("{url}{}", route(dialect));
            // A credential, as agents send (the parse memo keeps no conversation without one).
            let headers = [
                ("x-context-guru-session", session.as_str()),
                ("x-api-key", "sk-load"),
            ];
            let send = |turn: Bytes| benches::http_load::post_with(client, &s_url, &headers, turn);
            let (d, s) = if round % 2 == 0 {
                let d = ms(post(client, &d_url, turn.clone()).await);
                (d, ms(send(turn).await))
            } else {
                let s = ms(send(turn.clone()).await);
                (ms(post(client, &d_url, turn).await), s)
            };
            direct.push(d);
            via.push(s);
            // The same turn through sluice and direct: the worst single turn's cost.
            paired.push(s - d);
        }
    }
    direct.sort_by(f64::total_cmp);
    via.sort_by(f64::total_cmp);
    let (d50, s50, d99, s99) = (
        percentile(&direct, 50.0),
        percentile(&via, 50.0),
        percentile(&direct, 99.0),
        percentile(&via, 99.0),
    );
    let label = if passes > 1 {
        format!("{} (pass {pass})", dialect.as_str())
    } else {
        dialect.as_str().to_owned()
    };
    println!(
        "| {label} | {LARGEST_SESSIONS} | {turns} | {} KB | {d50:.3} ms | {:.3} ms | {d99:.3} ms | {:.3} ms | {:.3} ms |",
        largest / 1024,
        s50 - d50,
        s99 - d99,
        paired.iter().copied().fold(0.0, f64::max),
    );
}

/// Two builds side by side (`load A compare B`): the same bodies to each, alternating which
/// goes first, then each one's throughput, in one run. For a build setting that must not move
/// the turn (the shipped `dist` profile against `release`).
/// One sluice without an experiment and one with `--ab 0.5`, both on a SQLite store of their
/// own, side by side (alternating which goes first): every OpenAI corpus body to each, each body
/// its own session. The experiment's own cost is its treatment arm against the first sluice
/// (the arm's hash, the delivered reply's scan, a row written behind the reply); its control
/// arm goes untouched, its shadow run off the request path.
async fn compare_ab(binary: &str, mock: &Mock, client: &HttpClient) {
    let dir = std::env::temp_dir().join(format!("sluice-load-ab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let store = |name: &str| format!("sqlite:{}", dir.join(name).display());
    let (off_store, on_store) = (store("off.db"), store("on.db"));
    let (off_port, on_port) = (free_port(), free_port());
    let mut off = start_sluice_with(binary, off_port, &mock.url(), &["--store", &off_store]);
    let on_args = ["--store", on_store.as_str(), "--ab", "0.5"];
    let mut on = start_sluice_with(binary, on_port, &mock.url(), &on_args);
    let (off_url, on_url) = (
        format!("http://127.0.0.1:{off_port}"),
        format!("http://127.0.0.1:{on_port}"),
    );
    wait_ready(client, &off_url).await;
    wait_ready(client, &on_url).await;
    let bodies = measured_bodies(Dialect::OpenAi);
    let experiment = engine::config::ExperimentConfig {
        control_share: Some(0.5),
        ..engine::config::ExperimentConfig::default()
    };
    // The harness sends no credential: every session is under the anonymous scope `u:`.
    let arms: Vec<engine::config::Arm> = bodies
        .iter()
        .map(|body| {
            let parsed = engine::wire::parse(body, Dialect::OpenAi).expect("a corpus body");
            let key = format!("u:{}", engine::session::for_request(None, &parsed));
            experiment.arm(&key).expect("an experiment")
        })
        .collect();
    let (a, b) = (
        format!("{off_url}{}", route(Dialect::OpenAi)),
        format!("{on_url}{}", route(Dialect::OpenAi)),
    );
    for body in &bodies {
        post(client, &a, body.clone()).await;
        post(client, &b, body.clone()).await;
    }
    // By the arm the body's session is in, so each arm is compared on its own bodies.
    let mut without: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut with: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..ROUNDS * 2 {
        for (body, arm) in bodies.iter().zip(&arms) {
            let first = round % 2 == 0;
            let (x, y) = if first { (&a, &b) } else { (&b, &a) };
            let tx = ms(post(client, x, body.clone()).await);
            let ty = ms(post(client, y, body.clone()).await);
            let (t_off, t_on) = if first { (tx, ty) } else { (ty, tx) };
            let k = usize::from(*arm == engine::config::Arm::Treatment);
            without[k].push(t_off);
            with[k].push(t_on);
        }
    }
    println!("| bodies of | sluice | turns | p50 | p99 |");
    println!("|---|---|--:|--:|--:|");
    let row = |label: &str, times: &mut Vec<f64>| {
        times.sort_by(f64::total_cmp);
        println!(
            "| {label} | {} | {:.3} ms | {:.3} ms |",
            times.len(),
            percentile(times, 50.0),
            percentile(times, 99.0)
        );
    };
    row("treatment sessions | no experiment", &mut without[1]);
    row("treatment sessions | `--ab 0.5`", &mut with[1]);
    row("control sessions | no experiment", &mut without[0]);
    row("control sessions | `--ab 0.5`", &mut with[0]);
    let stats = client
        .request(
            http::Request::get(format!("{on_url}/stats"))
                .body(Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("stats");
    let stats: serde_json::Value =
        serde_json::from_slice(&stats.into_body().collect().await.expect("body").to_bytes())
            .unwrap_or_default();
    println!();
    println!(
        "experiment rows: {} written, {} lost",
        stats["ab_rows_written"], stats["ab_rows_lost"]
    );
    for child in [&mut off, &mut on] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

async fn compare_builds(binaries: [&str; 2], mock: &Mock, client: &HttpClient) {
    let mut children = Vec::new();
    let mut urls = Vec::new();
    for binary in binaries {
        let port = free_port();
        children.push(start_sluice(binary, port, &mock.url()));
        let url = format!("http://127.0.0.1:{port}");
        wait_ready(client, &url).await;
        urls.push(url);
    }
    let bodies = measured_bodies(Dialect::OpenAi);
    for url in &urls {
        for body in &bodies {
            post(
                client,
                &format!("{url}{}", route(Dialect::OpenAi)),
                body.clone(),
            )
            .await;
        }
    }
    let mut took = [Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        for body in &bodies {
            for k in [round % 2, 1 - round % 2] {
                let url = format!("{}{}", urls[k], route(Dialect::OpenAi));
                took[k].push(ms(post(client, &url, body.clone()).await));
            }
        }
    }
    let bodies = Arc::new(bodies);
    // Throughput in the order A B B A: whichever runs first meets a cooler machine.
    let mut rps = [0.0; 2];
    for k in [0, 1, 1, 0] {
        let url = format!("{}{}", urls[k], route(Dialect::OpenAi));
        rps[k] += throughput(client, url, bodies.clone()).await / 2.0;
    }
    println!(
        "| build | turns | p50 | p99 | throughput at {CONCURRENCY} connections (A B B A, mean) |"
    );
    println!("|---|--:|--:|--:|--:|");
    for (k, binary) in binaries.iter().enumerate() {
        took[k].sort_by(f64::total_cmp);
        let rps = rps[k];
        println!(
            "| {binary} | {} | {:.3} ms | {:.3} ms | {rps:.0} req/s |",
            took[k].len(),
            percentile(&took[k], 50.0),
            percentile(&took[k], 99.0),
        );
    }
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn main() {
    let binary = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/release/sluice".into());
    let mode = std::env::args().nth(2);
    if let Some(mode @ ("turns" | "dashboard" | "ab" | "keepalive" | "compare")) = mode.as_deref() {
        let other = std::env::args().nth(3);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let mock = Mock::start().await;
            let client: HttpClient =
                Client::builder(TokioExecutor::new()).build(HttpConnector::new());
            match mode {
                "turns" => turn_by_turn(&binary, &mock, &client).await,
                "dashboard" => compare_dashboard(&binary, &mock, &client).await,
                "ab" => compare_ab(&binary, &mock, &client).await,
                "keepalive" => compare_keepalive(&binary, &mock, &client).await,
                _ => {
                    let other = other.expect("load A compare B");
                    compare_builds([&binary, &other], &mock, &client).await;
                }
            }
        });
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let mock = Mock::start().await;
        let port = free_port();
        let mut sluice = start_sluice(&binary, port, &mock.url());
        let sluice_url = format!("http://127.0.0.1:{port}");
        let client: HttpClient = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
        wait_ready(&client, &sluice_url).await;

        println!("| dialect | bodies | direct p50 | sluice p50 | added p50 | direct p99 | sluice p99 | added p99 | TTFB direct p50 | TTFB sluice p50 |");
        println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        let mut all_bodies = Vec::new();
        for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
            let bodies = measured_bodies(dialect);
            // One unmeasured pass first: a live agent re-sends its transcript every turn, so every
            // message but the newest has been seen (and its token count cached) before. The cost
            // of a first sight is measured by the engine bench (`first_sight`).
            for body in &bodies {
                post(&client, &format!("{sluice_url}{}", route(dialect)), body.clone()).await;
            }
            let (mut direct, mut via, mut ttfb_direct, mut ttfb_via) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for round in 0..ROUNDS {
                for body in &bodies {
                    // Alternate which arm goes first so neither always meets a warm pool.
                    let d_url = format!("{}{}", mock.url(), direct_route(dialect));
                    let s_url = format!("{sluice_url}{}", route(dialect));
                    if round % 2 == 0 {
                        direct.push(ms(post(&client, &d_url, body.clone()).await));
                        via.push(ms(post(&client, &s_url, body.clone()).await));
                    } else {
                        via.push(ms(post(&client, &s_url, body.clone()).await));
                        direct.push(ms(post(&client, &d_url, body.clone()).await));
                    }
                }
                if round < 5 {
                    for body in &bodies {
                        let streamed = with_stream(body);
                        ttfb_direct.push(ms(first_byte(&client, &format!("{}{}", mock.url(), direct_route(dialect)), streamed.clone()).await));
                        ttfb_via.push(ms(first_byte(&client, &format!("{sluice_url}{}", route(dialect)), streamed).await));
                    }
                }
            }
            for v in [&mut direct, &mut via, &mut ttfb_direct, &mut ttfb_via] {
                v.sort_by(f64::total_cmp);
            }
            let (d50, s50, d99, s99) = (percentile(&direct, 50.0), percentile(&via, 50.0), percentile(&direct, 99.0), percentile(&via, 99.0));
            println!(
                "| {} | {} | {d50:.3} ms | {s50:.3} ms | {:.3} ms | {d99:.3} ms | {s99:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms |",
                dialect.as_str(),
                bodies.len(),
                s50 - d50,
                s99 - d99,
                percentile(&ttfb_direct, 50.0),
                percentile(&ttfb_via, 50.0),
            );
            all_bodies.extend(bodies.into_iter().map(|b| (dialect, b)));
        }

        // Throughput: the same mixed set of OpenAI bodies, 64 connections, direct then sluice.
        let openai: Arc<Vec<Bytes>> =
            Arc::new(all_bodies.iter().filter(|(d, _)| *d == Dialect::OpenAi).map(|(_, b)| b.clone()).collect());
        let direct_rps = throughput(&client, format!("{}{}", mock.url(), direct_route(Dialect::OpenAi)), openai.clone()).await;
        let sluice_rps = throughput(&client, format!("{sluice_url}{}", route(Dialect::OpenAi)), openai).await;
        println!();
        println!(
            "throughput at {CONCURRENCY} connections: direct {direct_rps:.0} req/s, via sluice {sluice_rps:.0} req/s ({:.0}% of direct)",
            100.0 * sluice_rps / direct_rps.max(1.0)
        );
        let stats = client
            .request(http::Request::get(format!("{sluice_url}/stats")).body(Full::new(Bytes::new())).expect("req"))
            .await
            .expect("stats");
        let stats: serde_json::Value =
            serde_json::from_slice(&stats.into_body().collect().await.expect("body").to_bytes()).unwrap_or_default();
        println!(
            "sluice's own time per rewritten request (cg_added_ms_avg): {:.3} ms over {} requests",
            stats["cg_added_ms_avg"].as_f64().unwrap_or(0.0),
            stats["requests"]
        );
        match peak_rss_kib(sluice.id()) {
            Some(kib) => println!("sluice peak RSS: {:.1} MiB", kib as f64 / 1024.0),
            None => println!("sluice peak RSS: unavailable (no /proc)"),
        }
        let _ = sluice.kill();
        let _ = sluice.wait();
    });
}
