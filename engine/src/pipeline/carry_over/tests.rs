//! A carried turn against a full one: same forwarded messages, same report, and the carry each
//! makes; what is carried over is never decided again; a store that dropped or refuses originals.

use std::sync::Arc;

use parking_lot::Mutex;

use super::*;
use crate::clock::ManualClock;
use crate::message::{Forwarded, Message, Role};
use crate::pipeline::{Offload, Revert, RunReport, Stashed};
use crate::store::{MemoryStore, MemoryStoreLimits, Store, StoreError, StoreStats};
use crate::wire::Dialect;

/// A test log whose warning repeats between other lines (for `linecap`).
fn noisy_log(i: usize) -> String {
    let mut out = format!("$ pytest -q tests/test_{i}.py\ncollected 40 items\n");
    for n in 0..12 {
        out.push_str("DeprecationWarning: pkg_resources is deprecated as an API\n");
        out.push_str(&format!("tests/test_{i}.py::test_case_{n} PASSED\n"));
    }
    out + "40 passed, 12 warnings in 3.21s\n"
}

/// A build log long enough for `collapse`.
fn long_log(i: usize) -> String {
    (0..900)
        .map(|n| format!("[{i}] compiling module_{n} with flags -O2 -g (unit {n} of 900)\n"))
        .collect()
}

/// A listing for `delta`: the same lines each time but one.
fn listing(i: usize) -> String {
    (0..60)
        .map(|n| match n {
            30 => format!("src/changed_{i}.rs   modified\n"),
            n => format!("src/module_{n}.rs   unchanged since the last build\n"),
        })
        .collect()
}

/// A pretty-printed JSON output (for `format`).
fn json_output(i: usize) -> String {
    let rows: Vec<String> = (0..30)
        .map(|n| format!("    {{\n      \"id\": {n},\n      \"name\": \"row {n} of {i}\"\n    }}"))
        .collect();
    format!("{{\n  \"rows\": [\n{}\n  ]\n}}", rows.join(",\n"))
}

/// A session of `n` tool outputs of every kind the embedded default acts on, in turn.
fn session(n: usize) -> Vec<Message> {
    let mut messages = vec![Message::text(Role::User, "make the build pass")];
    for i in 0..n {
        let output = match i % 5 {
            0 => noisy_log(i),
            1 => long_log(i),
            2 => listing(i),
            3 => json_output(i),
            // The same output as two messages back: a duplicate for `dedup`.
            _ => listing(i - 2),
        };
        messages.push(Message::tool(&format!("c{i}"), "bash", output));
    }
    messages
}

fn default_pipeline() -> Pipeline {
    crate::config::Config::parse(crate::config::EMBEDDED_DEFAULT)
        .unwrap()
        .build_pipeline()
        .unwrap()
}

fn run_cx(store: Arc<dyn Store>) -> RunCx {
    RunCx::new(Dialect::OpenAi, "s", store, Arc::new(ManualClock::new()))
}

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(
        MemoryStoreLimits::DEFAULT,
        Arc::new(ManualClock::new()),
    ))
}

type Outcome = (RunReport, Forwarded, Option<RunCarry>);

fn run_with(
    pipeline: &Pipeline,
    messages: &[Message],
    cx: &RunCx,
    carried: Option<&RunCarry>,
) -> Outcome {
    let computed = crate::digests::Computed::of(messages);
    pipeline.run_carrying(messages, computed.digests(), cx, carried)
}

#[test]
fn a_carried_turn_forwards_reports_and_carries_what_a_full_one_does() {
    let pipeline = default_pipeline();
    let (first, second) = (session(20), session(26));
    let store = memory();
    let (_, _, carry) = run_with(&pipeline, &first, &run_cx(store.clone()), None);
    let carry = carry
        .expect("the embedded default carries")
        .truncated(first.len());
    assert!(
        carry.stages.iter().any(|s| !s.outputs.is_empty()),
        "the first turn cut something"
    );
    let carried = run_with(&pipeline, &second, &run_cx(store), Some(&carry));
    let full = run_with(&pipeline, &second, &run_cx(memory()), None);
    assert_eq!(format!("{:?}", carried.0), format!("{:?}", full.0));
    assert_eq!(carried.1, full.1);
    assert_eq!(carried.2, full.2, "the next turn's carry is the same too");
    let acted: Vec<&str> = full
        .0
        .components
        .iter()
        .filter(|c| c.acted)
        .map(|c| c.name)
        .collect();
    for name in ["format", "dedup", "collapse", "linecap", "delta"] {
        assert!(acted.contains(&name), "{name} acted: {acted:?}");
    }
}

/// Records which messages it decided; cuts every tool output to a marker. One that `fails`
/// panics on an output that says "boom", as a component with a bug would.
struct Counting(Arc<Mutex<Vec<usize>>>, bool);
impl Offload for Counting {
    fn carries_over(&self) -> bool {
        true
    }
    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let mut keys = Vec::new();
        for index in 0..messages.len() {
            if !crate::components::offload_candidate(&messages[index], index, cx) {
                continue;
            }
            let boom = messages[index].content.contains("boom");
            assert!(!(self.1 && boom), "a component bug");
            self.0.lock().push(index);
            keys.extend(crate::components::offload_with(
                messages,
                index,
                cx,
                |_, marker| format!("[cut] {marker}"),
            ));
        }
        Ok(keys)
    }
}

/// A pipeline of one [`Counting`], and what it decided.
fn counting() -> (Pipeline, Arc<Mutex<Vec<usize>>>) {
    let decided = Arc::new(Mutex::new(Vec::new()));
    let pipeline = Pipeline::new(vec![Stage::offload(
        "counting",
        Counting(decided.clone(), false),
    )]);
    (pipeline, decided)
}

/// A [`counting`] pipeline's first turn of six outputs: the pipeline, what it decided since
/// (nothing yet), and the carry for the next turn.
fn counted_first_turn() -> (Pipeline, Arc<Mutex<Vec<usize>>>, RunCarry) {
    let (pipeline, decided) = counting();
    let first = session(6);
    let (_, _, carry) = run_with(&pipeline, &first, &run_cx(memory()), None);
    decided.lock().clear();
    (pipeline, decided, carry.unwrap().truncated(first.len()))
}

#[test]
fn a_carried_over_message_is_not_decided_again_and_its_original_is_stashed_again() {
    let (pipeline, decided, carry) = counted_first_turn();
    let second = session(8);
    // A store that kept nothing of the first turn, as one that evicted its stashes would.
    let store = memory();
    let (report, forwarded, _) = run_with(&pipeline, &second, &run_cx(store.clone()), Some(&carry));
    assert_eq!(
        *decided.lock(),
        vec![7, 8],
        "only the new outputs are decided"
    );
    assert_eq!(report.components[0].stashed.len(), 8);
    for (_, message) in forwarded.changed() {
        let id = crate::marker::marker_ids(&message.content).next().unwrap();
        assert!(store.resolve("s", id).is_some(), "every marker resolves");
    }
}

#[test]
fn another_stamp_decides_everything_again() {
    let (pipeline, decided, carry) = counted_first_turn();
    let second = session(8);
    let learned = Arc::new(std::collections::BTreeMap::from([(
        "bash:ls".to_owned(),
        3,
    )]));
    let cx = run_cx(memory()).with_lossless_tools(learned);
    run_with(&pipeline, &second, &cx, Some(&carry));
    assert_eq!(
        decided.lock().len(),
        8,
        "learned rules: nothing carried over"
    );
    let (other, decided_by_other) = counting();
    run_with(&other, &second, &run_cx(memory()), Some(&carry));
    assert_eq!(
        decided_by_other.lock().len(),
        8,
        "another pipeline: nothing carried over"
    );
}

/// A memory store that refuses every stash once `refuse` is set.
struct Refusing {
    inner: MemoryStore,
    refuse: std::sync::atomic::AtomicBool,
}

impl Store for Refusing {
    fn stash(&self, session: &str, id: &str, original: &str) -> Result<(), StoreError> {
        if self.refuse.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::Full);
        }
        self.inner.stash(session, id, original)
    }
    fn resolve(&self, session: &str, id: &str) -> Option<Arc<str>> {
        self.inner.resolve(session, id)
    }
    fn resolve_any(&self, id: &str) -> Option<Arc<str>> {
        self.inner.resolve_any(id)
    }
    fn put_frozen(&self, session: &str, key: &str, value: &str) {
        self.inner.put_frozen(session, key, value);
    }
    fn get_frozen(&self, session: &str, key: &str) -> Option<Arc<str>> {
        self.inner.get_frozen(session, key)
    }
    fn persists(&self) -> bool {
        true
    }
    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }
}

#[test]
fn a_store_that_refuses_the_originals_gets_the_full_run_and_no_carry() {
    let pipeline = default_pipeline();
    let (first, second) = (session(20), session(26));
    let refusing = || {
        Arc::new(Refusing {
            inner: MemoryStore::new(MemoryStoreLimits::DEFAULT, Arc::new(ManualClock::new())),
            refuse: std::sync::atomic::AtomicBool::new(false),
        })
    };
    let store = refusing();
    let (_, _, carry) = run_with(&pipeline, &first, &run_cx(store.clone()), None);
    let carry = carry.unwrap().truncated(first.len());
    store
        .refuse
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let carried = run_with(&pipeline, &second, &run_cx(store), Some(&carry));
    let full_store = refusing();
    full_store
        .refuse
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let full = run_with(&pipeline, &second, &run_cx(full_store), None);
    assert_eq!(format!("{:?}", carried.0), format!("{:?}", full.0));
    assert_eq!(carried.1, full.1);
    assert!(
        full.0
            .components
            .iter()
            .any(|c| c.gates.contains_key(gate::STORE_FULL.name)),
        "the store refused"
    );
    assert!(
        carried.2.is_none() && full.2.is_none(),
        "no carry from a refused stash"
    );
}

#[test]
fn a_stage_that_fails_on_a_new_message_gets_the_full_run_and_so_do_the_stages_after_it() {
    let stages = || {
        let decided = Arc::new(Mutex::new(Vec::new()));
        Pipeline::new(vec![
            Stage::offload("fails", Counting(decided.clone(), true)),
            Stage::offload("after", Counting(decided, false)),
        ])
    };
    let pipeline = stages();
    let first = session(6);
    let (_, _, carry) = run_with(&pipeline, &first, &run_cx(memory()), None);
    let carry = carry.unwrap().truncated(first.len());
    let mut second = session(7);
    second.push(Message::tool("c9", "bash", "boom ".repeat(80)));
    let carried = run_with(&pipeline, &second, &run_cx(memory()), Some(&carry));
    let full = run_with(&stages(), &second, &run_cx(memory()), None);
    assert!(matches!(
        carried.0.components[0].reverted,
        Some(Revert::Panicked(_))
    ));
    assert!(
        carried.0.components[1].acted,
        "the stage after it cut what it left"
    );
    assert_eq!(format!("{:?}", carried.0), format!("{:?}", full.0));
    assert_eq!(carried.1, full.1);
    assert!(carried.2.is_none(), "no carry from a reverted stage");
}
