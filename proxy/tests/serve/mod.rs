//! A `sluice serve` process for the tests in this directory that run the binary (`store.rs`,
//! `ab.rs`), and one-shot HTTP calls to it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use engine::wire::Dialect;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use integration_tests::redis::free_port;

pub const CREDENTIAL: (&str, &str) = ("authorization", "Bearer sk-test-tenant-a");

/// A `sluice serve` process; SIGKILLed on drop.
pub struct Sluice {
    pub child: Child,
    pub url: String,
}

impl Sluice {
    pub fn spawn(store: &str, upstream: &str) -> Sluice {
        Sluice::spawn_logging(store, upstream, &[], None)
    }

    /// With extra `serve` arguments, its stderr to `log` when given.
    pub fn spawn_logging(
        store: &str,
        upstream: &str,
        extra: &[&str],
        log: Option<&Path>,
    ) -> Sluice {
        let port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SLUICE_") {
                command.env_remove(key);
            }
        }
        let child = command
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--store", store])
            .args([
                "--anthropic-upstream",
                upstream,
                "--openai-upstream",
                upstream,
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(match log {
                Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
                None => Stdio::null(),
            })
            .spawn()
            .expect("sluice starts");
        let sluice = Sluice {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sluice did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        sluice
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> (u16, Bytes) {
        call(&self.url, method, path, headers, body).await
    }

    pub async fn turn(&self, dialect: Dialect, session: &str, body: &[u8]) -> u16 {
        let path = match dialect {
            Dialect::OpenAi => "/openai/v1/chat/completions",
            Dialect::Anthropic => "/anthropic/v1/messages",
            Dialect::Responses => "/openai/v1/responses",
            Dialect::Gemini => "/gemini/v1beta/models/gemini-2.5-pro:generateContent",
        };
        let headers = [
            ("content-type", "application/json"),
            ("x-context-guru-session", session),
            ("anthropic-version", "2023-06-01"),
            CREDENTIAL,
        ];
        self.call("POST", path, &headers, Bytes::copy_from_slice(body))
            .await
            .0
    }

    pub async fn expand(&self, session: &str, id: &str) -> (u16, Bytes) {
        let headers = [("x-context-guru-session", session), CREDENTIAL];
        self.call("GET", &format!("/expand?id={id}"), &headers, Bytes::new())
            .await
    }

    pub async fn stats(&self) -> serde_json::Value {
        let (status, body) = self.call("GET", "/stats", &[], Bytes::new()).await;
        assert_eq!(status, 200);
        serde_json::from_slice(&body).unwrap()
    }
}

/// One request to `base`; the status and the whole body.
pub async fn call(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> (u16, Bytes) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = client
        .request(request.body(Full::new(body)).unwrap())
        .await
        .expect("sluice answers");
    let status = response.status().as_u16();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-store-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn sqlite(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("state.db").display())
}

/// A public session the default pipeline cuts early and often (mini-swe-agent on OpenAI chat
/// completions), as its turns.
pub fn cut_early_session() -> (Dialect, Vec<Vec<u8>>) {
    let body = integration_tests::bodies()
        .into_iter()
        .find(|b| {
            b.path
                .to_string_lossy()
                .contains("gemini3pro-miniswe-pytest-dev-pytest-6197")
        })
        .expect("the pytest-6197 run is in the corpus");
    (body.dialect, integration_tests::session_turns(&body.bytes))
}
