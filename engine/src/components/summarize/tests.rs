//! `summarize` on whole bodies against a scripted host: the restructure, retained bytes, the
//! stash, checkpoint reuse and roll-forward, no model, and the tool-result boundary.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::apply::apply_body;
use crate::clock::ManualClock;
use crate::config::Config;
use crate::model::{Answer, Ask, Job, Models};
use crate::pipeline::RunCx;
use crate::store::{MemoryStore, MemoryStoreLimits, Store};
use crate::wire::{Dialect, json as wire_json};

/// Answers every summarize ask with a summary naming how many characters it read.
struct Summarizer {
    asks: Mutex<Vec<Job>>,
}

impl Models for Summarizer {
    fn ask(&self, ask: Ask<'_>) -> Answer {
        let job = (ask.job)();
        let Job::Summarize { transcript, .. } = &job else {
            return Answer::Failed("unexpected job".into());
        };
        let summary = format!(
            "<summary>\nThe agent read {} characters of history.\n</summary>",
            transcript.len()
        );
        self.asks.lock().push(job);
        Answer::Ready(summary)
    }
}

/// An OpenAI transcript: system, task, then `steps` call/result pairs with big outputs, then a
/// final user message.
fn transcript(steps: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Make the flaky test in tests/test_io.py pass."}),
    ];
    for i in 0..steps {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("c{i}"), "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\": \"cat src/io_{i}.py\"}}")}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": format!("def read_{i}(path):\n{}", "    return open(path).read()  # io helper\n".repeat(40))}));
    }
    messages.push(json!({"role": "user", "content": "What did you find?"}));
    messages
}

fn body(messages: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&json!({"model": "gpt-4o", "messages": messages})).unwrap()
}

struct Harness {
    store: Arc<MemoryStore>,
    host: Arc<Summarizer>,
}

impl Harness {
    fn new() -> Harness {
        let clock = Arc::new(ManualClock::new());
        Harness {
            store: Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock)),
            host: Arc::new(Summarizer {
                asks: Mutex::new(Vec::new()),
            }),
        }
    }

    fn run(
        &self,
        block: &str,
        body: &[u8],
        with_model: bool,
    ) -> (Vec<u8>, crate::pipeline::RunReport) {
        self.run_with(block, body, with_model, Arc::default())
    }

    /// [`Harness::run`] for a session holding `lossless` tools (its cost guard's back-off).
    fn run_with(
        &self,
        block: &str,
        body: &[u8],
        with_model: bool,
        lossless: Arc<std::collections::BTreeMap<String, usize>>,
    ) -> (Vec<u8>, crate::pipeline::RunReport) {
        let yaml = format!("pipeline: [summarize]\ncomponents:\n  summarize: {block}\n");
        let pipeline = Config::parse(&yaml).unwrap().build_pipeline().unwrap();
        let models: Option<Arc<dyn Models>> = if with_model {
            Some(self.host.clone())
        } else {
            None
        };
        let cx = RunCx::new(
            Dialect::OpenAi,
            "s",
            self.store.clone(),
            Arc::new(ManualClock::new()),
        )
        .with_models(models)
        .with_lossless_tools(lossless);
        let applied = apply_body(body, &pipeline, &cx);
        (applied.body.into_owned(), applied.report)
    }
}

fn elements(body: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(body).unwrap();
    let root = wire_json::parse_document(text).unwrap();
    let messages = wire_json::get(text, root, "messages").unwrap();
    wire_json::elements(text, messages)
        .map(|s| s.of(text).to_owned())
        .collect()
}

#[test]
fn the_middle_becomes_one_summary_and_the_rest_stays_byte_identical() {
    let h = Harness::new();
    let input = body(&transcript(12));
    let (output, report) = h.run("{}", &input, true);
    let (before, after) = (elements(&input), elements(&output));
    assert_eq!(after.len(), 2 + 1 + 3, "head, summary, keep_last");
    assert_eq!(after[..2], before[..2], "system and task stay");
    assert_eq!(
        after[3..],
        before[before.len() - 3..],
        "the tail stays byte for byte"
    );
    let summary: Value = serde_json::from_str(&after[2]).unwrap();
    assert_eq!(summary["role"], "system");
    let text = summary["content"].as_str().unwrap();
    assert!(text.starts_with("=== History Summary ===\n<summary>\nThe agent read"));
    assert!(text.ends_with("[full earlier trajectory: call context_guru_expand]"));
    let id = crate::marker::marker_ids(text).next().unwrap();
    let stashed: Value = serde_json::from_str(&h.store.resolve("s", id).unwrap()).unwrap();
    let span: Vec<Value> = before[2..before.len() - 3]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(
        stashed,
        Value::Array(span),
        "expand gives the whole span back"
    );
    assert!(report.saved_tokens() > 3000, "{}", report.saved_tokens());
    assert_eq!(report.components[0].stashed, vec![id.to_string()]);
    let asks = h.host.asks.lock();
    let Job::Summarize {
        transcript, task, ..
    } = &asks[0]
    else {
        panic!()
    };
    assert!(transcript.contains("<masked_tool_output>") && !transcript.contains("io helper"));
    assert!(task.contains("flaky test"));
}

#[test]
fn the_checkpoint_is_reused_until_the_tail_grows_past_the_threshold() {
    let h = Harness::new();
    let mut messages = transcript(12);
    let (first, _) = h.run("{}", &body(&messages), true);
    // Two more small turns: the same summary, no new call.
    messages.push(json!({"role": "assistant", "content": "Looking at the fixture next."}));
    messages.push(json!({"role": "user", "content": "ok"}));
    let (second, report) = h.run("{}", &body(&messages), true);
    assert_eq!(h.host.asks.lock().len(), 1, "reused, no call");
    assert_eq!(
        elements(&second)[2],
        elements(&first)[2],
        "byte-identical summary"
    );
    assert!(report.components[0].acted);
    // Many more big steps: past resummarize_tokens, a fresh summary covers the longer span.
    let more = transcript(12);
    messages.extend(more[2..more.len() - 1].iter().cloned());
    messages.push(json!({"role": "user", "content": "status?"}));
    let (third, _) = h.run("{resummarize_tokens: 1000}", &body(&messages), true);
    assert_eq!(h.host.asks.lock().len(), 2, "rolled forward");
    assert_ne!(elements(&third)[2], elements(&first)[2]);
}

#[test]
fn a_session_that_backed_off_keeps_its_checkpoint_and_rolls_no_new_one() {
    let backed_off = Arc::new(std::collections::BTreeMap::from([(
        crate::tools::EVERY_TOOL.to_owned(),
        0,
    )]));
    // No checkpoint yet: nothing is summarized, and the model is not asked.
    let fresh = Harness::new();
    let input = body(&transcript(12));
    let (output, report) = fresh.run_with("{}", &input, true, backed_off.clone());
    assert_eq!(output, input);
    assert_eq!(report.components[0].gates.get("cost_guard"), Some(&1));
    assert!(fresh.host.asks.lock().is_empty());

    // A checkpoint from before the back-off keeps serving, byte for byte, even past the point
    // where it would roll forward.
    let h = Harness::new();
    let mut messages = transcript(12);
    let (first, _) = h.run("{}", &body(&messages), true);
    let more = transcript(12);
    messages.extend(more[2..more.len() - 1].iter().cloned());
    messages.push(json!({"role": "user", "content": "status?"}));
    let (later, _) = h.run_with(
        "{resummarize_tokens: 1000}",
        &body(&messages),
        true,
        backed_off,
    );
    assert_eq!(h.host.asks.lock().len(), 1, "no new summary");
    assert_eq!(elements(&later)[2], elements(&first)[2]);
}

#[test]
fn no_model_small_transcripts_and_tool_result_boundaries() {
    let h = Harness::new();
    let input = body(&transcript(12));
    let (output, report) = h.run("{}", &input, false);
    assert_eq!(output, input, "no model: untouched");
    assert_eq!(report.components[0].gates.get("no_model"), Some(&1));
    let small = body(&transcript(1));
    let (output, report) = h.run("{}", &small, true);
    assert_eq!(output, small);
    assert_eq!(
        report.components[0].gates.get("below_trigger_messages"),
        Some(&1)
    );
    // keep_last 2 would start the tail on a tool result: the cut moves to its call.
    let (output, _) = h.run("{keep_last: 2}", &input, true);
    let after = elements(&output);
    let first_kept: Value = serde_json::from_str(&after[3]).unwrap();
    assert_eq!(
        first_kept["role"], "assistant",
        "the tail starts on the call, not its result"
    );
}

/// Pending on the ask that submits; ready for a later poll of the same key.
struct Slow {
    asks: Mutex<Vec<(u128, bool)>>,
}

impl Models for Slow {
    fn ask(&self, ask: Ask<'_>) -> Answer {
        let mut asks = self.asks.lock();
        asks.push((ask.key, ask.submit));
        if ask.submit {
            Answer::Pending
        } else {
            Answer::Late("<summary>\nslow but done\n</summary>".into())
        }
    }
}

#[test]
fn a_slow_summary_is_polled_on_later_turns_and_lands_when_ready() {
    let h = Harness::new();
    let slow = Arc::new(Slow {
        asks: Mutex::new(Vec::new()),
    });
    let run = |messages: &[Value]| {
        let pipeline = Config::parse("pipeline: [summarize]")
            .unwrap()
            .build_pipeline()
            .unwrap();
        let cx = RunCx::new(
            Dialect::OpenAi,
            "s",
            h.store.clone(),
            Arc::new(ManualClock::new()),
        )
        .with_models(Some(slow.clone()));
        let input = body(messages);
        let applied = apply_body(&input, &pipeline, &cx);
        let (output, report) = (applied.body.into_owned(), applied.report);
        (input, output, report)
    };
    let mut messages = transcript(12);
    let (input, output, report) = run(&messages);
    assert_eq!(output, input, "nothing until the summary exists");
    assert_eq!(report.components[0].gates.get("model_pending"), Some(&1));
    messages.push(json!({"role": "assistant", "content": "still reading"}));
    messages.push(json!({"role": "user", "content": "go on"}));
    let (_, output, _) = run(&messages);
    let after = elements(&output);
    assert!(after[2].contains("slow but done"), "{}", after[2]);
    let asks = slow.asks.lock();
    assert_eq!(asks.len(), 2);
    assert_eq!(asks[0].0, asks[1].0, "the later turn polls the same job");
    assert!(asks[0].1 && !asks[1].1, "submitted once, then polled");
}

/// Responses items: a call or an output never starts the kept tail (what it answers would be
/// summarized away), and both render for the summarizer like their chat equivalents.
#[test]
fn responses_items_are_tool_exchanges_and_render_like_chat() {
    let element = |raw: &'static str| super::Element {
        raw,
        start: 0,
        value: serde_json::from_str(raw).unwrap(),
    };
    let call = element(
        r#"{"type":"function_call","call_id":"c","name":"shell","arguments":"{\"cmd\":\"ls\"}"}"#,
    );
    let output = element(r#"{"type":"function_call_output","call_id":"c","output":"a.py"}"#);
    let message = element(
        r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}"#,
    );
    assert!(call.is_tool_result() && output.is_tool_result());
    assert!(!message.is_tool_result());
    assert!(call.render(false).contains(r#"[call shell({"cmd":"ls"})]"#));
    assert!(output.render(false).contains("<masked_tool_output>"));
    assert!(output.render(true).contains("a.py"));
    assert!(message.render(false).contains("go on"));
}

/// A span summary is held to `tools:` rules like every other cut: with the only tool's outputs
/// excluded, nothing is summarized and the model is never asked.
#[test]
fn protected_outputs_are_never_summarized_away() {
    let h = Harness::new();
    let input = body(&transcript(12));
    let (output, report) = h.run("{}\ntools: {exclude: [bash]}", &input, true);
    assert_eq!(output, input);
    let summarize = report
        .components
        .iter()
        .find(|c| c.name == "summarize")
        .unwrap();
    assert_eq!(summarize.gates.get("tool_excluded"), Some(&1));
    assert!(h.host.asks.lock().is_empty());
}
