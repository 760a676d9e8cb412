//! sluice against headroom, side by side, on the same requests and the same mock upstream.
//!
//! Run with `bash benches/peers.sh` (installs `headroom-ai[proxy]` in a local venv, builds
//! release binaries, then runs this). Both proxies run on their defaults: sluice on its embedded
//! config, headroom offline (`HEADROOM_OFFLINE=1`, so its ML compressor falls back to its
//! non-ML path). Every public final request of at most 200 KB goes direct, through sluice and
//! through headroom, alternating the order, in one run. Reported per arm: added latency p50/p99
//! (minus direct), bytes forwarded, content tokens forwarded (o200k over the messages the
//! upstream received), and the ratios headroom/sluice.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use engine::pipeline::message_tokens;
use engine::wire::{self, Dialect};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use integration_tests::mock::Mock;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

const MAX_BODY: usize = 200 * 1024;
const ROUNDS: usize = 5;

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    probe.local_addr().expect("addr").port()
}

async fn post(client: &HttpClient, url: &str, body: Bytes) -> Result<Duration, u16> {
    let started = Instant::now();
    let request = http::Request::post(url)
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-bench")
        .header("x-api-key", "sk-bench")
        .header("anthropic-version", "2023-06-01")
        .body(Full::new(body))
        .map_err(|_| 0u16)?;
    let response = client.request(request).await.map_err(|_| 0u16)?;
    let status = response.status();
    response.into_body().collect().await.map_err(|_| 0u16)?;
    if status.is_success() {
        Ok(started.elapsed())
    } else {
        Err(status.as_u16())
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Content tokens of the messages in a forwarded body, when it still parses as the dialect.
fn content_tokens(body: &[u8], dialect: Dialect) -> Option<usize> {
    let parsed = wire::parse(body, dialect).ok()?;
    Some(parsed.messages().iter().map(message_tokens).sum())
}

#[derive(Default)]
struct Arm {
    latency: Vec<f64>,
    bytes: usize,
    tokens: usize,
    unparsed: usize,
    failed: std::collections::BTreeMap<u16, usize>,
}

async fn wait_ready(client: &HttpClient, url: &str) -> bool {
    let probe =
        Bytes::from_static(br#"{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#);
    for _ in 0..240 {
        if post(client, url, probe.clone()).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

fn spawn(mut command: Command, log: &str) -> Child {
    let log = std::fs::File::create(log).expect("log file");
    command
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("proxy starts")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let sluice_bin = args
        .next()
        .unwrap_or_else(|| "target/release/sluice".into());
    let headroom_bin = args
        .next()
        .unwrap_or_else(|| "benches/.venv/bin/headroom".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let mock = Mock::start().await;
        let (sluice_port, headroom_port) = (free_port(), free_port());
        let mut sluice = {
            let mut c = Command::new(&sluice_bin);
            // The forward path only: the dashboard (on with every store) is measured by
            // `load.sh dashboard`.
            c.args(["serve", "--listen", &format!("127.0.0.1:{sluice_port}"), "--store", "memory"])
                .args(["--no-dashboard"])
                .args(["--anthropic-upstream", &mock.url(), "--openai-upstream", &mock.url()]);
            spawn(c, "target/peers-sluice.log")
        };
        let mut headroom = {
            let mut c = Command::new(&headroom_bin);
            // No rate limit and no response cache: every request takes the forward path, as
            // through sluice.
            c.args(["proxy", "--port", &headroom_port.to_string(), "--no-rate-limit", "--no-cache"])
                .env("HEADROOM_OFFLINE", "1")
                .env("ANTHROPIC_TARGET_API_URL", mock.url())
                .env("OPENAI_TARGET_API_URL", format!("{}/v1", mock.url()));
            spawn(c, "target/peers-headroom.log")
        };
        let client: HttpClient = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
        let sluice_url = format!("http://127.0.0.1:{sluice_port}");
        let headroom_url = format!("http://127.0.0.1:{headroom_port}");
        let ready = wait_ready(&client, &format!("{sluice_url}/openai/v1/chat/completions")).await
            && wait_ready(&client, &format!("{headroom_url}/v1/chat/completions")).await;
        assert!(ready, "both proxies answer");

        for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        let (mut direct, mut ours, mut theirs) = (Arm::default(), Arm::default(), Arm::default());
        let mut requests = 0;
            let path = match dialect {
                Dialect::OpenAi => "/v1/chat/completions",
                Dialect::Anthropic => "/v1/messages",
                Dialect::Responses => "/v1/responses",
                Dialect::Gemini => "/v1beta/models/m:generateContent",
            };
            let sluice_path = match dialect {
                Dialect::OpenAi => "/openai/v1/chat/completions",
                Dialect::Anthropic => "/anthropic/v1/messages",
                Dialect::Responses => "/openai/v1/responses",
                Dialect::Gemini => "/gemini/v1beta/models/m:generateContent",
            };
            let bodies: Vec<Bytes> = benches::public_bodies(dialect)
                .into_iter()
                .filter(|(_, b)| b.len() <= MAX_BODY)
                .map(|(_, b)| Bytes::from(b))
                .collect();
            for round in 0..ROUNDS {
                for body in &bodies {
                    requests += 1;
                    let arms: [(&mut Arm, String); 3] = [
                        (&mut direct, format!("{}{path}", mock.url())),
                        (&mut ours, format!("{sluice_url}{sluice_path}")),
                        (&mut theirs, format!("{headroom_url}{path}")),
                    ];
                    let mut order: Vec<(&mut Arm, String)> = arms.into_iter().collect();
                    order.rotate_left(round % 3);
                    for (arm, url) in order {
                        let before = mock.recorded().len();
                        match post(&client, &url, body.clone()).await {
                            Ok(took) => arm.latency.push(took.as_secs_f64() * 1000.0),
                            Err(status) => *arm.failed.entry(status).or_default() += 1,
                        }
                        if round == 0 {
                            let recorded = mock.recorded();
                            if let Some(sent) = recorded.get(before) {
                                arm.bytes += sent.body.len();
                                match content_tokens(&sent.body, dialect) {
                                    Some(n) => arm.tokens += n,
                                    None => arm.unparsed += 1,
                                }
                            }
                        }
                    }
                }
            }
        for arm in [&mut direct, &mut ours, &mut theirs] {
            arm.latency.sort_by(f64::total_cmp);
        }
        let (d50, d99) = (percentile(&direct.latency, 50.0), percentile(&direct.latency, 99.0));
        println!("\n**{}**: {requests} requests per arm ({ROUNDS} rounds of the public final requests up to 200 KB).\n", dialect.as_str());
        println!("| arm | added p50 | added p99 | bytes forwarded | content tokens forwarded | failed | unparsed forwards |");
        println!("|---|--:|--:|--:|--:|--:|--:|");
        for (name, arm) in [("direct", &direct), ("sluice", &ours), ("headroom", &theirs)] {
            println!(
                "| {name} | {:.3} ms | {:.3} ms | {} | {} | {:?} | {} |",
                percentile(&arm.latency, 50.0) - d50,
                percentile(&arm.latency, 99.0) - d99,
                arm.bytes,
                arm.tokens,
                arm.failed,
                arm.unparsed
            );
        }
        let ratio = |a: f64, b: f64| if b == 0.0 { f64::NAN } else { a / b };
        println!(
            "\nheadroom / sluice: added p50 {:.1}x, added p99 {:.1}x, bytes forwarded {:.3}x, content tokens forwarded {:.3}x",
            ratio(percentile(&theirs.latency, 50.0) - d50, percentile(&ours.latency, 50.0) - d50),
            ratio(percentile(&theirs.latency, 99.0) - d99, percentile(&ours.latency, 99.0) - d99),
            ratio(theirs.bytes as f64, ours.bytes as f64),
            ratio(theirs.tokens as f64, ours.tokens as f64),
        );
        }
        let _ = sluice.kill();
        let _ = headroom.kill();
        let _ = sluice.wait();
        let _ = headroom.wait();
    });
}
