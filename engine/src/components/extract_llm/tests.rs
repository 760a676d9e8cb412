//! `extract_llm` against a scripted host: what it accepts, what falls back, and when it asks.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::components::testing::{check_with, tool_messages};
use crate::model::{Answer, Ask, Job, Models};

/// A host that answers every ask with a fixed answer and records the asks.
struct Scripted {
    answer: Answer,
    asks: Mutex<Vec<(bool, Job)>>,
}

impl Models for Scripted {
    fn ask(&self, ask: Ask<'_>) -> Answer {
        self.asks.lock().push((ask.submit, (ask.job)()));
        self.answer.clone()
    }
}

fn host(answer: Answer) -> Arc<Scripted> {
    Arc::new(Scripted {
        answer,
        asks: Mutex::new(Vec::new()),
    })
}

fn log() -> String {
    let mut out = String::from("collected 400 items\n");
    for i in 0..400 {
        out.push_str(&format!("tests/test_api.py::test_case_{i} PASSED\n"));
    }
    out.push_str("tests/test_api.py::test_timeout FAILED\nE   TimeoutError: read timed out\n");
    out
}

fn run(
    block: &str,
    host: &Arc<Scripted>,
    tweak: impl FnOnce(&mut crate::pipeline::RunCx),
) -> crate::components::testing::Checked {
    let log = log();
    let models: Arc<dyn Models> = host.clone();
    check_with("extract_llm", block, tool_messages(&[&log]), |cx| {
        cx.models = Some(models);
        tweak(cx);
    })
}

#[test]
fn a_deletion_only_result_is_applied_with_a_marker() {
    let host = host(Answer::Ready(
        "tests/test_api.py::test_timeout FAILED\nE   TimeoutError: read timed out".into(),
    ));
    let out = run("break_even_tokens: 0", &host, |_| {});
    let content = &out.messages[1].content;
    assert!(content.starts_with("tests/test_api.py::test_timeout FAILED\nE   TimeoutError"));
    assert!(
        content.contains("\n<<cg:") && content.ends_with("[full output: call context_guru_expand]")
    );
    out.assert_stashes_resolve();
    let asks = host.asks.lock();
    assert_eq!(asks.len(), 1);
    let (
        submitted,
        Job::Extract {
            output,
            context,
            rewrite,
        },
    ) = &asks[0]
    else {
        panic!("an extract job")
    };
    assert!(*submitted && !rewrite);
    assert_eq!(output, &log());
    assert!(context.contains("TASK:\nplease fix the failing build"));
}

#[test]
fn a_fabricating_result_is_rejected_and_the_projection_used() {
    let host = host(Answer::Ready("all 401 tests passed".into()));
    let out = run("break_even_tokens: 0", &host, |_| {});
    let report = &out.report.components[0];
    assert_eq!(report.gates.get("not_deletion_only"), Some(&1));
    let content = &out.messages[1].content;
    assert!(
        content.contains("test_timeout FAILED") && content.contains("… ("),
        "the deterministic projection: {content}"
    );
    // With rewrite the proof is off: the same result is accepted.
    let out = run("break_even_tokens: 0\nrewrite: true", &host, |_| {});
    assert!(
        out.messages[1]
            .content
            .starts_with("all 401 tests passed\n<<cg:")
    );
}

#[test]
fn no_model_and_failures_fall_back_to_the_projection() {
    for (answer, gate) in [
        (Answer::NoModel, "no_model"),
        (Answer::Failed("timeout".into()), "model_failed"),
    ] {
        let host = host(answer);
        let out = run("break_even_tokens: 0", &host, |_| {});
        assert_eq!(out.report.components[0].gates.get(gate), Some(&1));
        assert_ne!(out.messages[1], out.before[1], "projected");
    }
    // No host at all (offline): the same.
    let log = log();
    let out = check_with("extract_llm", "", tool_messages(&[&log]), |_| {});
    assert_eq!(out.report.components[0].gates.get("no_model"), Some(&1));
}

#[test]
fn pending_leaves_the_output_and_late_results_may_land_in_the_prefix_once() {
    let pending = host(Answer::Pending);
    let out = run("break_even_tokens: 0", &pending, |_| {});
    assert_eq!(out.messages, out.before, "untouched while the model works");
    assert_eq!(
        out.report.components[0].gates.get("model_pending"),
        Some(&1)
    );

    // Next turn: the output is in the cached prefix. A late result lands there once.
    let result = "tests/test_api.py::test_timeout FAILED\nE   TimeoutError: read timed out";
    let late = host(Answer::Late(result.into()));
    let out = run("break_even_tokens: 0", &late, |cx| cx.mutable_from = 5);
    assert!(out.messages[1].content.starts_with(result));
    assert_eq!(
        out.report.components[0].gates.get("late_result_applied"),
        Some(&1)
    );
    assert!(
        !late.asks.lock()[0].0,
        "inside the prefix nothing new is submitted"
    );

    // A plain ready result for an output in the prefix is not applied there.
    let ready = host(Answer::Ready(result.into()));
    let out = run("break_even_tokens: 0", &ready, |cx| cx.mutable_from = 5);
    assert_eq!(out.messages, out.before);
}

#[test]
fn small_outputs_on_warm_turns_do_not_buy_a_call() {
    // The log is about 4,000 tokens: under a 100,000-token break-even.
    let host = host(Answer::Unknown);
    let out = run("break_even_tokens: 100000", &host, |_| {});
    assert_eq!(
        out.report.components[0].gates.get("below_break_even"),
        Some(&1)
    );
    assert!(!host.asks.lock()[0].0, "no job submitted below break-even");
    // On a cold turn a cheap model gets the usual floor: the job is submitted.
    let cold = self::host(Answer::Pending);
    let cheap = "break_even_tokens: 100000\nmodel: {source: config}";
    let _ = run(cheap, &cold, |cx| cx.cold = true);
    assert!(cold.asks.lock()[0].0);
    // The agent's own model (incoming, no override) never: its call costs what it saves.
    let own = self::host(Answer::Unknown);
    let _ = run("break_even_tokens: 100000", &own, |cx| cx.cold = true);
    assert!(!own.asks.lock()[0].0);
}

#[test]
fn the_request_trigger_gates_every_call() {
    let host = host(Answer::Pending);
    let out = run("trigger: {min_request_tokens: 1000000}", &host, |_| {});
    assert_eq!(
        out.report.components[0].gates.get("below_trigger_tokens"),
        Some(&1)
    );
    assert!(host.asks.lock().is_empty());
}

/// Counts submissions the way the LLM actor's request view does.
struct Counting {
    submitted: std::sync::atomic::AtomicUsize,
}

impl Models for Counting {
    fn ask(&self, ask: Ask<'_>) -> Answer {
        if ask.submit {
            self.submitted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Answer::Pending
    }

    fn submitted(&self) -> usize {
        self.submitted.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[test]
fn the_per_request_cap_counts_what_the_request_submitted() {
    let host = Arc::new(Counting {
        submitted: std::sync::atomic::AtomicUsize::new(0),
    });
    let models: Arc<dyn Models> = host.clone();
    let (a, b) = (log(), log().replace("test_case", "test_other"));
    let out = check_with(
        "extract_llm",
        "break_even_tokens: 0\nllm_max_per_request: 1",
        tool_messages(&[&a, &b]),
        |cx| cx.models = Some(models),
    );
    assert_eq!(host.submitted(), 1);
    assert_eq!(
        out.report.components[0].gates.get("llm_max_per_request"),
        Some(&1)
    );
}
