//! Test helpers: run one component by name, with a YAML block, over messages, and check stashes.

use std::sync::Arc;

use crate::clock::ManualClock;
use crate::config::Config;
use crate::marker;
use crate::message::{Message, Role};
use crate::pipeline::{RunCx, RunReport};
use crate::store::{MemoryStore, MemoryStoreLimits, Store};
use crate::wire::Dialect;

pub(crate) struct Checked {
    pub before: Vec<Message>,
    pub messages: Vec<Message>,
    pub report: RunReport,
    pub store: Arc<MemoryStore>,
}

impl Checked {
    /// Every marker resolves, and every changed message's original is among what they resolve to.
    pub fn assert_stashes_resolve(&self) {
        for (before, after) in self.before.iter().zip(&self.messages) {
            if before == after {
                continue;
            }
            let resolved: Vec<String> = marker::marker_ids(&after.content)
                .map(|id| {
                    self.store
                        .resolve("test", id)
                        .unwrap_or_else(|| panic!("marker {id} does not resolve"))
                        .to_string()
                })
                .collect();
            assert!(
                resolved.iter().any(|r| r == &before.content),
                "the original of a changed message is stashed"
            );
        }
    }
}

/// A user turn followed by one tool call and output per text.
pub(crate) fn tool_messages(outputs: &[&str]) -> Vec<Message> {
    let mut messages = vec![Message::text(Role::User, "please fix the failing build")];
    for (i, output) in outputs.iter().enumerate() {
        messages.push(Message::tool(&format!("call_{i}"), "bash", *output));
    }
    messages
}

pub(crate) fn check(component: &str, block: &str, messages: Vec<Message>) -> Checked {
    check_with(component, block, messages, |_| {})
}

pub(crate) fn check_with(
    component: &str,
    block: &str,
    messages: Vec<Message>,
    tweak: impl FnOnce(&mut RunCx),
) -> Checked {
    let indented: String = block.lines().map(|l| format!("    {l}\n")).collect();
    let yaml = format!("pipeline: [{component}]\ncomponents:\n  {component}:\n{indented}");
    let config = Config::parse(&yaml).unwrap_or_else(|e| panic!("config {yaml}: {e:?}"));
    let pipeline = config.build_pipeline().unwrap();
    let (mut cx, store) = run_cx("test");
    tweak(&mut cx);
    let before = messages.clone();
    let mut messages = messages;
    let report = pipeline.run(&mut messages, &cx);
    Checked {
        before,
        messages,
        report,
        store,
    }
}

/// A warm-turn context for `session` over a fresh in-memory store, and that store.
pub(crate) fn run_cx(session: &str) -> (RunCx, Arc<MemoryStore>) {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone()));
    let cx = RunCx::new(Dialect::OpenAi, session, store.clone(), clock);
    (cx, store)
}
