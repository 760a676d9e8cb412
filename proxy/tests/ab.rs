//! The live A/B experiment through real `sluice serve` processes (`--ab 0.5`): sessions split
//! by the documented rule, control bytes identical to what the agent sent, and each arm's
//! recorded totals equal, to the token, to what the provider (the scripted mock, reporting
//! the usage a provider reports) billed for that arm's requests, expand rounds included; the
//! records survive a restart, and two replicas on one Redis assign and report alike.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use engine::config::{Arm, ExperimentConfig};
use engine::wire::Dialect;
use integration_tests::mock::{Mock, Reply};
use integration_tests::redis::RedisServer;
use serde_json::Value;

mod serve;
use serve::{CREDENTIAL, Sluice, call, sqlite, temp_dir};

/// Turns each session sends (the last ones of the corpus session: long enough to be cut).
const TURNS: usize = 3;

/// The last turns of a session the default pipeline cuts.
fn session() -> (Dialect, Vec<Vec<u8>>) {
    let (dialect, turns) = serve::cut_early_session();
    assert_eq!(dialect, Dialect::OpenAi);
    (dialect, turns[turns.len() - TURNS..].to_vec())
}

/// The arm the documented rule gives session `id` of the test's caller: the experiment's
/// hash of the session key (the caller's credential scope, then the id).
fn arm_of(id: &str) -> Arm {
    let mut headers = http::HeaderMap::new();
    headers.insert(CREDENTIAL.0, CREDENTIAL.1.parse().unwrap());
    let scope = modes::turn::caller_scope(&headers, modes::turn::DEFAULT_SCOPE_SECRET);
    let experiment = ExperimentConfig {
        control_share: Some(0.5),
        ..ExperimentConfig::default()
    };
    experiment.arm(&format!("{scope}{id}")).unwrap()
}

/// What the mock billed one arm, summed from its replies' usage (OpenAI chat: the prompt
/// includes the cached part).
#[derive(Debug, Default, PartialEq, Eq)]
struct Billed {
    turns: u64,
    calls: u64,
    input: u64,
    cache_read: u64,
    output: u64,
}

impl Billed {
    fn add(&mut self, usage: &Value) {
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let cached = n(&usage["prompt_tokens_details"]["cached_tokens"]);
        self.calls += 1;
        self.input += n(&usage["prompt_tokens"]) - cached;
        self.cache_read += cached;
        self.output += n(&usage["completion_tokens"]);
    }
}

/// Sends `turn` of session `id` (streamed, usage included, for every fourth session; the
/// curious model asking for what was cut for every third) to `sluice`.
async fn send(sluice: &Sluice, id: &str, i: usize, turn: &[u8]) -> Bytes {
    let mut body: Value = serde_json::from_slice(turn).unwrap();
    if i % 4 == 3 {
        body["stream"] = Value::Bool(true);
        body["stream_options"] = serde_json::json!({ "include_usage": true });
    }
    let body = Bytes::from(serde_json::to_vec(&body).unwrap());
    let curious = if i % 3 == 0 { "curious" } else { "plain" };
    let headers = [
        ("content-type", "application/json"),
        ("x-context-guru-session", id),
        ("x-mock-model", curious),
        ("user-agent", "codex_cli_rs/0.46.0 (Debian 13; x86_64)"),
        CREDENTIAL,
    ];
    let (status, _) = call(
        &sluice.url,
        "POST",
        "/openai/v1/chat/completions",
        &headers,
        body.clone(),
    )
    .await;
    assert_eq!(status, 200, "{id}");
    body
}

/// What one run of the sessions came to, per arm, from the mock's side.
#[derive(Debug, Default)]
struct Sent {
    billed: BTreeMap<Arm, Billed>,
    sessions: BTreeMap<Arm, u64>,
    /// Sessions some of whose forwarded bodies differ from what was sent.
    changed: BTreeMap<Arm, u64>,
}

/// Sends every session's turns, session `i`'s turn through `via(i, k)`, one request at a time
/// so that each of the mock's replies is known to belong to the request just sent.
async fn run(mock: &Mock, sluices: &[&Sluice], sessions: usize, name: &str) -> Sent {
    let (_, turns) = session();
    let mut sent = Sent::default();
    for i in 0..sessions {
        let id = format!("{name}-{i}");
        let arm = arm_of(&id);
        *sent.sessions.entry(arm).or_default() += 1;
        let mut changed = false;
        for (k, turn) in turns.iter().enumerate() {
            let (before, billed_before) = (mock.recorded().len(), mock.billed().len());
            let body = send(sluices[(i + k) % sluices.len()], &id, i, turn).await;
            let recorded = mock.recorded();
            let forwarded = &recorded[before].body;
            if arm == Arm::Control {
                assert_eq!(
                    forwarded, &body,
                    "{id} turn {k}: a control turn is untouched"
                );
                assert_eq!(
                    recorded.len(),
                    before + 1,
                    "{id}: no expand round in control"
                );
            }
            changed |= forwarded != &body;
            let billed = sent.billed.entry(arm).or_default();
            billed.turns += 1;
            for usage in &mock.billed()[billed_before..] {
                billed.add(usage);
            }
        }
        *sent.changed.entry(arm).or_default() += u64::from(changed);
    }
    sent
}

/// Waits until `sluice` has written a row for `turns` requests, then until every session is
/// idle past `idle_seconds`; its `/ab` report.
async fn ab_of(sluice: &Sluice, turns: u64, idle: Duration) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = sluice.stats().await;
        if stats["ab_rows_written"].as_u64() >= Some(turns) {
            assert_eq!(stats["ab_rows_lost"], 0);
            break;
        }
        assert!(Instant::now() < deadline, "rows not written: {stats}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(idle).await;
    let (status, body) = call(&sluice.url, "GET", "/ab", &[], Bytes::new()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// Each arm of `report` holds exactly what the mock billed that arm.
fn assert_totals(report: &Value, sent: &Sent) {
    for (arm, billed) in &sent.billed {
        let summary = &report["overall"][arm_name(*arm)];
        let totals = &summary["totals"];
        let got = Billed {
            turns: totals["turns"].as_u64().unwrap(),
            calls: totals["turns"].as_u64().unwrap() + totals["expand_rounds"].as_u64().unwrap(),
            input: totals["input"].as_u64().unwrap(),
            cache_read: totals["cache_read"].as_u64().unwrap(),
            output: totals["output"].as_u64().unwrap(),
        };
        assert_eq!(&got, billed, "{arm:?}: {report}");
        assert_eq!(summary["sessions"], sent.sessions[arm], "{arm:?} finished");
        assert_eq!(summary["open"], 0);
        assert_eq!(summary["no_usage_turns"], 0, "{arm:?}");
        assert_eq!(summary["error_rate"], 0.0);
    }
}

fn arm_name(arm: Arm) -> &'static str {
    arm.name()
}

fn experiment_config(dir: &std::path::Path) -> String {
    let path = dir.join("sluice.yaml");
    std::fs::write(&path, "experiment: { idle_seconds: 2 }\n").unwrap();
    path.display().to_string()
}

/// 40 sessions on one SQLite-backed sluice: split about evenly by the documented rule, control
/// untouched, treatment cut (and its markers asked for), each arm's totals the mock's; the
/// report the same after a SIGKILL and a restart, from `GET /ab`, `/metrics` and
/// `sluice ab report` alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_arm_records_what_the_provider_billed_it() {
    let dir = temp_dir("ab-sqlite");
    let config = experiment_config(&dir);
    let store = sqlite(&dir);
    let mock = Mock::start().await;
    let args = ["--ab", "0.5", "--config", &config];
    let sluice = Sluice::spawn_logging(&store, &mock.url(), &args, None);
    let sent = run(&mock, &[&sluice], 40, "ab").await;
    let (control, treatment) = (sent.sessions[&Arm::Control], sent.sessions[&Arm::Treatment]);
    assert!(control >= 12 && treatment >= 12, "{sent:?}");
    assert_eq!(sent.changed[&Arm::Control], 0);
    assert_eq!(
        sent.changed[&Arm::Treatment],
        treatment,
        "every treatment session is cut"
    );
    let rounds = sent.billed[&Arm::Treatment].calls - sent.billed[&Arm::Treatment].turns;
    assert!(
        rounds > 0,
        "the curious model asked for originals: {sent:?}"
    );
    let report = ab_of(&sluice, 40 * TURNS as u64, Duration::from_secs(3)).await;
    assert_totals(&report, &sent);
    // A control session has no live state at all: only treatment sessions have an actor and a
    // place in the store.
    let stats = sluice.stats().await;
    assert_eq!(stats["sessions"]["live"], treatment, "{stats}");
    assert_eq!(stats["store_backend_sessions"], treatment, "{stats}");
    // Its sign is not this test's business (every session sends the same turns, so the mock's
    // prompt cache serves the control arm across sessions, and a third of the sessions have a
    // model that asks for every original): the interval is there and holds the estimate.
    let difference = &report["overall"]["difference"];
    let relative = difference["relative"].as_f64().expect("a difference");
    assert!(difference["low"].as_f64().unwrap() <= relative, "{report}");
    assert!(relative <= difference["high"].as_f64().unwrap(), "{report}");
    let agents: Vec<&str> = report["by_agent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(agents, ["codex"]);
    let (_, metrics) = call(&sluice.url, "GET", "/metrics", &[], Bytes::new()).await;
    let metrics = String::from_utf8(metrics.to_vec()).unwrap();
    assert!(
        metrics.contains(&format!("cg_ab_sessions{{arm=\"control\"}} {control}")),
        "{metrics}"
    );
    let printed = ab_report(&["--listen", sluice.url.trim_start_matches("http://")]);
    assert!(printed.contains("95% interval"), "{printed}");

    // SIGKILL, and a new process on the same file: the rows are there, read the same.
    sluice.kill();
    let printed_from_file = ab_report(&["--store", &store, "--config", &config]);
    assert_eq!(
        printed_from_file, printed,
        "the file, read directly, says the same"
    );
    let sluice = Sluice::spawn_logging(&store, &mock.url(), &args, None);
    let again = ab_of(&sluice, 0, Duration::ZERO).await;
    assert_eq!(again["overall"], report["overall"]);

    // Ended with a winner: a control session's next turn is compacted, nothing more is
    // recorded, and the report still reads the same.
    sluice.kill();
    let ended = dir.join("ended.yaml");
    std::fs::write(
        &ended,
        "experiment: { idle_seconds: 2, control_share: 0.5, winner: treatment }\n",
    )
    .unwrap();
    let ended = ended.display().to_string();
    let sluice = Sluice::spawn_logging(&store, &mock.url(), &["--config", &ended], None);
    let id = (0..40)
        .map(|i| format!("ab-{i}"))
        .find(|id| arm_of(id) == Arm::Control)
        .unwrap();
    let (_, turns) = session();
    let before = mock.recorded().len();
    let sent = send(&sluice, &id, 1, &turns[0]).await;
    assert_ne!(
        mock.recorded()[before].body,
        sent,
        "the winner applies to every session"
    );
    // Rows are written behind the reply: given the time to be, none is.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stats = sluice.stats().await;
    assert_eq!(
        (
            stats["ab_running"].as_u64(),
            stats["ab_rows_written"].as_u64()
        ),
        (Some(0), Some(0))
    );
    let (status, body) = call(&sluice.url, "GET", "/ab", &[], Bytes::new()).await;
    assert_eq!(status, 200);
    let after: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(after["overall"], report["overall"]);
}

/// `sluice ab report` with `args`; its stdout.
fn ab_report(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["ab", "report"])
        .args(args)
        .env_remove("SLUICE_STORE")
        .env_remove("SLUICE_LISTEN")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Two replicas on one Redis, each session's turns alternating between them: the same arm on
/// both (control bytes untouched whichever replica forwards them), and the same report from
/// either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_assign_and_report_alike() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = temp_dir("ab-redis");
    let config = experiment_config(&dir);
    let mock = Mock::start().await;
    let args = ["--ab", "0.5", "--config", &config];
    let log = dir.join("a.log");
    let a = Sluice::spawn_logging(&redis.url(), &mock.url(), &args, Some(&log));
    let b = Sluice::spawn_logging(&redis.url(), &mock.url(), &args, None);
    let sent = run(&mock, &[&a, &b], 12, "fleet").await;
    assert!(sent.sessions.len() == 2, "both arms: {sent:?}");
    let from_a = ab_of(&a, 0, Duration::from_secs(3)).await;
    let from_b = ab_of(&b, 0, Duration::ZERO).await;
    assert_eq!(from_a["overall"], from_b["overall"]);
    assert_totals(&from_a, &sent);

    // The provider overloaded (529): an error, billed nothing (not a turn of unknown cost);
    // the agent's next try of the same session is a retry.
    let (_, turns) = session();
    let id = "fleet-overloaded";
    mock.script([Reply::Status(529, OVERLOADED.into())]);
    let headers = [
        ("content-type", "application/json"),
        ("x-context-guru-session", id),
        CREDENTIAL,
    ];
    let body = Bytes::from(turns[0].clone());
    let path = "/openai/v1/chat/completions";
    let (status, _) = call(&a.url, "POST", path, &headers, body.clone()).await;
    assert_eq!(status, 529);
    let (status, _) = call(&a.url, "POST", path, &headers, body).await;
    assert_eq!(status, 200);
    let report = ab_of(&a, 0, Duration::from_secs(3)).await;
    let arm = &report["overall"][arm_of(id).name()];
    assert_eq!(arm["no_usage_turns"], 0, "{report}");
    assert!(arm["error_rate"].as_f64().unwrap() > 0.0, "{report}");
    assert!(
        arm["retries_per_session"].as_f64().unwrap() > 0.0,
        "{report}"
    );
}

const OVERLOADED: &str = r#"{"error":{"message":"Overloaded","type":"overloaded_error"}}"#;

/// An experiment that cannot run is refused at start, with what to do instead.
#[test]
fn an_experiment_that_cannot_run_is_refused_at_start() {
    for (args, says) in [
        (&["--ab", "0.5", "--mode", "observe"][..], "observe"),
        (&["--ab", "0.5", "--store", "memory"][..], "sqlite:"),
        (&["--ab", "1.5"][..], "strictly between 0 and 1"),
        (&["--ab", "0.5", "--preset", "off"][..], "pipeline is empty"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("SLUICE_STORE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// With `count_tokens: compacted`, a control session's count is of the body as the agent sent
/// it (that arm's agent sees no sign of sluice), a treatment session's of the rewrite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_session_counts_its_own_tokens() {
    let dir = temp_dir("ab-count");
    let config = dir.join("sluice.yaml");
    std::fs::write(&config, "count_tokens: compacted\n").unwrap();
    let config = config.display().to_string();
    let mock = Mock::start().await;
    let args = ["--ab", "0.5", "--config", &config];
    let sluice = Sluice::spawn_logging(&sqlite(&dir), &mock.url(), &args, None);
    let body = integration_tests::bodies()
        .into_iter()
        .find(|b| {
            b.dialect == Dialect::Anthropic
                && b.path
                    .to_string_lossy()
                    .contains("gemini3pro-miniswe-pytest-dev-pytest-6197")
        })
        .expect("the pytest-6197 run in Messages");
    let ids: Vec<String> = (0..40).map(|i| format!("count-{i}")).collect();
    for arm in [Arm::Control, Arm::Treatment] {
        let id = ids.iter().find(|id| arm_of(id) == arm).unwrap();
        let headers = [
            ("content-type", "application/json"),
            ("x-context-guru-session", id.as_str()),
            ("anthropic-version", "2023-06-01"),
            CREDENTIAL,
        ];
        let before = mock.recorded().len();
        let sent = Bytes::from(body.bytes.clone());
        let path = "/anthropic/v1/messages/count_tokens";
        let (status, _) = call(&sluice.url, "POST", path, &headers, sent.clone()).await;
        assert_eq!(status, 200);
        let counted = &mock.recorded()[before].body;
        assert_eq!(counted == &sent, arm == Arm::Control, "{arm:?}");
    }
}
