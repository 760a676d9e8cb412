//! Inputs for sluice's criterion benches and load harness, built from the real corpus.

use engine::wire::Dialect;
use integration_tests::CorpusError;

/// Every public final request body of one dialect, largest first.
pub fn public_bodies(dialect: Dialect) -> Vec<(String, Vec<u8>)> {
    corpus_bodies("public", dialect)
}

/// Every final request body of one dialect in a corpus folder (`public`, `claude-code`),
/// largest first, read plain or gzipped (`integration_tests::read_corpus_file`). Responses and
/// Gemini bodies are the chat-completions ones converted (`integration_tests::responses_from_chat`,
/// `integration_tests::gemini_from_chat`).
pub fn corpus_bodies(folder: &str, dialect: Dialect) -> Vec<(String, Vec<u8>)> {
    let file = match dialect {
        Dialect::OpenAi | Dialect::Responses | Dialect::Gemini => "openai.json",
        Dialect::Anthropic => "anthropic.json",
    };
    let mut out: Vec<(String, Vec<u8>)> =
        std::fs::read_dir(integration_tests::corpus_root().join(folder))
            .expect("corpus readable")
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                match integration_tests::read_corpus_file(&e.path().join(file)) {
                    Ok(bytes) if dialect == Dialect::Responses => {
                        Some((name, integration_tests::responses_from_chat(&bytes)))
                    }
                    Ok(bytes) if dialect == Dialect::Gemini => {
                        Some((name, integration_tests::gemini_from_chat(&bytes)))
                    }
                    Ok(bytes) => Some((name, bytes)),
                    // Not every entry is a run (MANIFEST.md), nor has every run both dialects.
                    Err(CorpusError::Missing(_)) => None,
                    Err(e) => panic!("{e}"),
                }
            })
            .collect();
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    out
}

/// A ~1 MB OpenAI body: the messages of the largest public runs, one after another, under the
/// first run's envelope. Real tool outputs, real shapes, just more of them.
pub fn one_megabyte_body() -> Vec<u8> {
    body_of_size(1 << 20)
}

/// [`one_megabyte_body`] for any size: public transcript messages until `target` bytes.
pub fn body_of_size(target: usize) -> Vec<u8> {
    let bodies = public_bodies(Dialect::OpenAi);
    let mut root: serde_json::Value = serde_json::from_slice(&bodies[0].1).expect("corpus JSON");
    let mut messages = Vec::new();
    let mut size = 0;
    for (_, bytes) in &bodies {
        let value: serde_json::Value = serde_json::from_slice(bytes).expect("corpus JSON");
        for message in value["messages"].as_array().into_iter().flatten() {
            // Keep one system message at the top; the rest is transcript.
            if message["role"] == "system" && !messages.is_empty() {
                continue;
            }
            size += message.to_string().len();
            messages.push(message.clone());
        }
        if size >= target {
            break;
        }
    }
    root["messages"] = serde_json::Value::Array(messages);
    serde_json::to_vec(&root).expect("serializable")
}

/// A pytest log of about `bytes` bytes: passing lines, and a failure with its assertion every
/// `fail_every` tests.
pub fn pytest_log(bytes: usize, fail_every: usize) -> String {
    let mut log = String::from(
        "============================= test session starts ==============================\n",
    );
    let mut i = 0;
    while log.len() < bytes {
        log.push_str(&format!(
            "tests/test_models.py::test_case_{i} PASSED                               [ 42%]\n"
        ));
        if i % fail_every == 0 {
            log.push_str(&format!(
                "tests/test_models.py::test_edge_{i} FAILED\nE   AssertionError: assert {i} == 0\n"
            ));
        }
        i += 1;
    }
    log
}

/// What the harnesses share: a plain HTTP/1 client, a timed POST, percentiles.
pub mod http_load {
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

    pub fn client() -> HttpClient {
        Client::builder(TokioExecutor::new()).build(HttpConnector::new())
    }

    /// A JSON POST with extra headers, timed to the end of the response body.
    ///
    /// # Panics
    /// On a transport error or a status that is not a success.
    pub async fn post_with(
        client: &HttpClient,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Duration {
        let started = Instant::now();
        let mut request = http::Request::post(url).header("content-type", "application/json");
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let request = request.body(Full::new(body)).expect("request");
        let response = client.request(request).await.expect("response");
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        response.into_body().collect().await.expect("body");
        started.elapsed()
    }

    /// A JSON POST, timed to the end of the response body.
    pub async fn post(client: &HttpClient, url: &str, body: Bytes) -> Duration {
        post_with(client, url, &[], body).await
    }

    /// The nearest-rank percentile of sorted values (0 for none).
    pub fn percentile(sorted: &[f64], p: f64) -> f64 {
        if sorted.is_empty() {
            return 0.0;
        }
        let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        sorted[rank.min(sorted.len() - 1)]
    }

    /// Milliseconds, as the reports print them.
    pub fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }
}

/// What the harnesses that run `sluice serve` as a child share.
pub mod process {
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    /// Starts `sluice serve` on a free loopback port with `--store STORE`, both upstreams at
    /// `upstream`, `extra` arguments and warnings-only logs; returns its URL once it listens.
    /// The dashboard is off (`--no-dashboard`) unless `extra` asks for it: a harness measures
    /// one thing at a time, and `load.sh dashboard` measures the dashboard.
    ///
    /// # Panics
    /// When the binary cannot be started.
    pub fn spawn_sluice(
        binary: &str,
        store: &str,
        upstream: &str,
        extra: &[&str],
    ) -> (String, Child) {
        let port = integration_tests::redis::free_port();
        let child = Command::new(binary)
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--store",
                store,
            ])
            .args([
                "--anthropic-upstream",
                upstream,
                "--openai-upstream",
                upstream,
            ])
            .args(extra)
            .args(if extra.iter().any(|a| a.starts_with("--dashboard")) {
                &[][..]
            } else {
                &["--no-dashboard"][..]
            })
            .env("SLUICE_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("sluice starts");
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        (format!("http://127.0.0.1:{port}"), child)
    }

    /// A `/proc/PID/status` field in KiB (`VmRSS:`, `VmHWM:`), 0 where there is no `/proc`.
    pub fn status_kib(pid: u32, field: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(field))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }
}
