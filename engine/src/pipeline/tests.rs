//! Pipeline guard tests: each failure mode reverts only the component that caused it.

use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::message::Role;
use crate::store::{MemoryStore, MemoryStoreLimits, Store, StoreError};
use crate::wire::Dialect;

struct Shorten;
impl Offload for Shorten {
    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let key = cx.stash(&messages[1].content)?;
        messages.get_mut(1).content = format!("short {}", key.marker());
        Ok(vec![key])
    }
}

struct Panics;
impl Reformat for Panics {
    fn reformat(
        &self,
        messages: &mut Transcript<'_, '_>,
        _: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        messages.get_mut(2).content.clear();
        panic!("component bug");
    }
}

struct Fails;
impl Reformat for Fails {
    fn reformat(
        &self,
        messages: &mut Transcript<'_, '_>,
        _: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        messages.get_mut(2).content = "half done".into();
        Err(ComponentError::Other("gave up".into()))
    }
}

struct DropsWithoutKey;
impl Offload for DropsWithoutKey {
    fn offload(&self, messages: &mut Transcript<'_, '_>, _: &mut ApplyCx<'_>) -> Stashed {
        messages.get_mut(2).content = "gone".into();
        Ok(Vec::new())
    }
}

struct Grows;
impl Reformat for Grows {
    fn reformat(
        &self,
        messages: &mut Transcript<'_, '_>,
        _: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        messages
            .get_mut(2)
            .content
            .push_str(" and a great deal of extra padding text that costs tokens");
        Ok(())
    }
}

/// Records what it saw, to prove a reverted component leaks nothing into the next one.
struct Observer(parking_lot::Mutex<Vec<String>>);
impl Reformat for Observer {
    fn reformat(
        &self,
        messages: &mut Transcript<'_, '_>,
        _: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        self.0.lock().push(messages[2].content.clone());
        Ok(())
    }
}

fn messages() -> Vec<Message> {
    vec![
        Message::text(Role::User, "run the tests"),
        Message::tool("a", "bash", "first output ".repeat(50)),
        Message::tool("b", "bash", "second output ".repeat(50)),
    ]
}

fn cx() -> RunCx {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone()));
    RunCx::new(Dialect::OpenAi, "s", store, clock)
}

fn run(stages: Vec<Stage>) -> (Vec<Message>, RunReport) {
    let mut msgs = messages();
    let report = Pipeline::new(stages).run(&mut msgs, &cx());
    (msgs, report)
}

#[test]
fn each_failure_mode_reverts_only_its_component() {
    let observer = Arc::new(Observer(parking_lot::Mutex::new(Vec::new())));
    struct Shared(Arc<Observer>);
    impl Reformat for Shared {
        fn reformat(
            &self,
            m: &mut Transcript<'_, '_>,
            cx: &mut ApplyCx<'_>,
        ) -> Result<(), ComponentError> {
            self.0.reformat(m, cx)
        }
    }
    let (msgs, report) = run(vec![
        Stage::offload("shorten", Shorten),
        Stage::reformat("panics", Panics),
        Stage::reformat("observer", Shared(observer.clone())),
        Stage::reformat("fails", Fails),
        Stage::reformat("observer", Shared(observer.clone())),
        Stage::offload("drops_without_key", DropsWithoutKey),
        Stage::reformat("observer", Shared(observer.clone())),
        Stage::reformat("grows", Grows),
    ]);
    let original = messages();
    // The surviving change made before the reverts is kept.
    assert!(msgs[1].content.starts_with("short <<cg:"));
    // Everything the failing components touched is back to the original.
    assert_eq!(msgs[2], original[2]);
    // No reverted change leaked into the next component.
    assert!(
        observer
            .0
            .lock()
            .iter()
            .all(|seen| *seen == original[2].content)
    );

    let reverts: Vec<_> = report
        .components
        .iter()
        .map(|c| (c.name, c.reverted.clone()))
        .collect();
    assert_eq!(reverts[0], ("shorten", None));
    assert_eq!(
        reverts[1],
        ("panics", Some(Revert::Panicked("component bug".into())))
    );
    assert_eq!(
        reverts[3],
        ("fails", Some(Revert::Failed("gave up".into())))
    );
    assert_eq!(reverts[5], ("drops_without_key", Some(Revert::NoStashKey)));
    assert_eq!(reverts[7], ("grows", Some(Revert::Grew)));
    assert!(report.components[0].acted && report.components[0].saved_tokens > 0);
    assert_eq!(
        report.tokens_after,
        report.tokens_before - report.components[0].saved_tokens
    );
    assert_eq!(report.components[0].changed, vec![1]);
    assert_eq!(report.components[0].stashed.len(), 1);
}

/// A run hands back the messages it changed and nothing else: a message a failing component
/// wrote to and that was put back is its original again, not a copy.
#[test]
fn a_run_returns_only_the_messages_it_kept_changes_to() {
    let originals = messages();
    let computed = crate::digests::Computed::of(&originals);
    let pipeline = Pipeline::new(vec![
        Stage::reformat("panics", Panics),
        Stage::offload("shorten", Shorten),
        Stage::reformat("fails", Fails),
        Stage::reformat("grows", Grows),
    ]);
    let (report, forwarded) = pipeline.run_digested(&originals, computed.digests(), &cx());
    assert_eq!(forwarded.len(), originals.len());
    let changed: Vec<usize> = forwarded.changed().iter().map(|(i, _)| *i).collect();
    assert_eq!(
        changed,
        vec![1],
        "message 2 was written by three reverted components"
    );
    assert!(forwarded.changed()[0].1.content.starts_with("short <<cg:"));
    assert_eq!(forwarded.get(&originals, 2), Some(&originals[2]));
    assert_eq!(forwarded.get(&originals, 3), None, "past the transcript");
    assert_eq!(report.changed(), vec![1]);
    // The same run over a slice writes the same change into it.
    let mut in_place = originals.clone();
    pipeline.run_from(&originals, &mut in_place, &cx());
    assert_eq!(in_place, forwarded.to_vec(&originals));
    // A failed run forwards the body untouched and reports no message at all.
    assert_eq!(Forwarded::default().get(&originals, 0), None);
}

#[test]
fn stash_key_resolves_to_the_exact_original() {
    let context = cx();
    let mut msgs = messages();
    let report = Pipeline::new(vec![Stage::offload("shorten", Shorten)]).run(&mut msgs, &context);
    let id = &report.components[0].stashed[0];
    assert_eq!(
        context.store.resolve("s", id).as_deref(),
        Some(messages()[1].content.as_str())
    );
    assert_eq!(context.store.resolve("other-session", id), None);
}

/// A store that can forget every replay entry at once, the way a TTL or the pin cap would: after
/// `forget_replays`, a replay entry reads as lost until it is written again.
struct Forgetful {
    inner: MemoryStore,
    forgot: std::sync::atomic::AtomicBool,
    rewritten: parking_lot::Mutex<std::collections::HashSet<String>>,
}

impl Forgetful {
    fn new() -> Forgetful {
        Forgetful {
            inner: MemoryStore::new(MemoryStoreLimits::DEFAULT, Arc::new(ManualClock::new())),
            forgot: std::sync::atomic::AtomicBool::new(false),
            rewritten: parking_lot::Mutex::new(Default::default()),
        }
    }

    fn forget_replays(&self) {
        self.forgot.store(true, std::sync::atomic::Ordering::SeqCst);
        self.rewritten.lock().clear();
    }

    fn is_forgotten(&self, key: &str) -> bool {
        self.forgot.load(std::sync::atomic::Ordering::SeqCst)
            && !self.rewritten.lock().contains(key)
    }
}

impl Store for Forgetful {
    fn stash(&self, s: &str, id: &str, original: &str) -> Result<(), StoreError> {
        self.inner.stash(s, id, original)
    }
    fn resolve(&self, s: &str, id: &str) -> Option<Arc<str>> {
        self.inner.resolve(s, id)
    }
    fn resolve_any(&self, id: &str) -> Option<Arc<str>> {
        self.inner.resolve_any(id)
    }
    fn put_frozen(&self, s: &str, key: &str, value: &str) {
        self.rewritten.lock().insert(key.to_owned());
        self.inner.put_frozen(s, key, value);
    }
    fn get_frozen(&self, s: &str, key: &str) -> Option<Arc<str>> {
        if self.is_forgotten(key) {
            return None;
        }
        self.inner.get_frozen(s, key)
    }
    fn was_lost(&self, s: &str, key: &str) -> bool {
        self.is_forgotten(key) && self.inner.get_frozen(s, key).is_some()
    }
    fn persists(&self) -> bool {
        true
    }
    fn stats(&self) -> crate::store::StoreStats {
        self.inner.stats()
    }
}

fn session_cx(store: Arc<dyn Store>, mutable_from: usize) -> RunCx {
    RunCx::new(Dialect::OpenAi, "s", store, Arc::new(ManualClock::new()))
        .at_boundary(mutable_from, false)
}

fn run_log(i: usize) -> String {
    format!("$ cargo test -p api_{i}\n")
        + &format!("test api_{i}::roundtrip ... ok\n").repeat(40)
        + "test result: ok. 40 passed; 0 failed\n"
}

/// A user turn, then `n` tool outputs, each a distinct test run.
fn turn(n: usize) -> Vec<Message> {
    let mut m = vec![Message::text(Role::User, "make the api tests pass")];
    m.extend((0..n).map(|i| Message::tool(&format!("c{i}"), "bash", run_log(i))));
    m
}

fn mask() -> Pipeline {
    crate::config::Config::parse("pipeline: [mask]")
        .unwrap()
        .build_pipeline()
        .unwrap()
}

#[test]
fn a_frozen_decision_replays_byte_identically_and_depth_stays_untouched_when_warm() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        MemoryStoreLimits::DEFAULT,
        Arc::new(ManualClock::new()),
    ));
    let pipeline = mask();
    let mut first = turn(5);
    let r1 = pipeline.run(&mut first, &session_cx(store.clone(), 0));
    assert_eq!(r1.components[0].changed, vec![1, 2]);

    // Next turn: two more outputs; the previous turn's six messages are cached.
    let mut second = turn(7);
    let r2 = pipeline.run(&mut second, &session_cx(store.clone(), 6));
    assert_eq!(second[..3], first[..3], "earlier decisions replayed");
    assert_eq!(
        second[3..6],
        turn(7)[3..6],
        "no new decision inside the prefix"
    );
    let c = &r2.components[0];
    assert_eq!(c.frozen.hits, 2);
    assert_eq!(c.gates.get("cached_prefix"), Some(&2));
    assert!(c.reverted.is_none());
}

#[test]
fn a_lost_freeze_is_rederived_identically_only_when_rederivable() {
    let store = Arc::new(Forgetful::new());
    let pipeline = mask();
    let mut first = turn(5);
    pipeline.run(&mut first, &session_cx(store.clone(), 0));
    store.forget_replays();
    let mut second = turn(7);
    let r2 = pipeline.run(&mut second, &session_cx(store.clone(), 6));
    assert_eq!(second[..3], first[..3], "re-derived byte for byte");
    let c = &r2.components[0];
    assert_eq!((c.frozen.dropped, c.frozen.repaired), (2, 2));

    /// Writes a different replacement every time it runs, like a sampled model.
    struct Sampled(std::sync::atomic::AtomicUsize);
    impl Offload for Sampled {
        fn policy(&self) -> Policy {
            Policy::SAMPLED
        }

        fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut keys = Vec::new();
            for i in 1..messages.len() {
                if messages[i].content.contains("<<cg:") || !cx.may_mutate(i) {
                    continue;
                }
                let key = cx.stash(&messages[i].content).unwrap();
                messages.get_mut(i).content = format!("summary #{n} {}", key.marker());
                keys.push(key);
            }
            Ok(keys)
        }
    }
    let store = Arc::new(Forgetful::new());
    let sampled = Pipeline::new(vec![Stage::offload("sampled", Sampled(0.into()))]);
    let mut first = turn(2);
    sampled.run(&mut first, &session_cx(store.clone(), 0));
    store.forget_replays();
    let mut second = turn(3);
    let r2 = sampled.run(&mut second, &session_cx(store.clone(), 3));
    assert_eq!(
        second[..3],
        turn(3)[..3],
        "never re-derived: forwarded verbatim"
    );
    assert!(
        second[3].content.starts_with("summary #1 "),
        "the tail is new"
    );
    let c = &r2.components[0];
    assert_eq!((c.frozen.dropped, c.frozen.repaired), (2, 0));
}

#[test]
fn a_new_decision_inside_the_cached_prefix_is_reverted_on_a_warm_turn() {
    /// Masks everything but the newest, ignoring the boundary.
    struct Careless;
    impl Offload for Careless {
        fn policy(&self) -> Policy {
            Policy::rederivable(false)
        }

        fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
            let mut keys = Vec::new();
            for i in 1..messages.len() - 1 {
                let key = cx.stash(&messages[i].content).unwrap();
                messages.get_mut(i).content = key.marker();
                keys.push(key);
            }
            Ok(keys)
        }
    }
    let careless = Pipeline::new(vec![Stage::offload("careless", Careless)]);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        MemoryStoreLimits::DEFAULT,
        Arc::new(ManualClock::new()),
    ));
    let mut warm = turn(4);
    let report = careless.run(&mut warm, &session_cx(store.clone(), 3));
    assert_eq!(report.components[0].reverted, Some(Revert::CachedPrefix));
    assert_eq!(warm, turn(4));
    let mut cold = turn(4);
    let mut cx = session_cx(store, 3);
    cx.cold = true;
    let report = careless.run(&mut cold, &cx);
    assert_eq!(
        report.components[0].reverted,
        Some(Revert::CachedPrefix),
        "cold does not help a component that did not opt into cold_cache"
    );
}

#[test]
fn a_frozen_decision_never_replays_onto_another_copy_of_the_same_text() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        MemoryStoreLimits::DEFAULT,
        Arc::new(ManualClock::new()),
    ));
    let pipeline = mask();
    // Turn 1: four outputs, the oldest masked.
    let mut first = turn(4);
    pipeline.run(&mut first, &session_cx(store.clone(), 0));
    assert!(first[1].content.contains("<<cg:"));
    // Turn 2: the agent ran the same command again; its output is the newest and identical to
    // the masked one. Only the old copy's decision replays.
    let mut second = turn(4);
    second.push(Message::tool("again", "bash", run_log(0)));
    pipeline.run(&mut second, &session_cx(store, 5));
    assert_eq!(second[1], first[1], "the old copy replays");
    assert_eq!(second[5].content, run_log(0), "the newest copy stays whole");
}

#[test]
fn a_component_that_fails_after_replaying_keeps_its_replays() {
    /// Named like mask, so it finds mask's frozen decisions; then fails.
    struct FailingMask;
    impl Offload for FailingMask {
        fn policy(&self) -> Policy {
            Policy::rederivable(false)
        }

        fn offload(&self, _: &mut Transcript<'_, '_>, _: &mut ApplyCx<'_>) -> Stashed {
            Err(ComponentError::Other("bug on a later message".into()))
        }
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        MemoryStoreLimits::DEFAULT,
        Arc::new(ManualClock::new()),
    ));
    let mut first = turn(5);
    mask().run(&mut first, &session_cx(store.clone(), 0));
    let mut second = turn(6);
    let report = Pipeline::new(vec![Stage::offload("mask", FailingMask)])
        .run(&mut second, &session_cx(store, 6));
    let c = &report.components[0];
    assert!(matches!(c.reverted, Some(Revert::Failed(_))));
    assert_eq!(
        second[..3],
        first[..3],
        "the replayed decisions reached the wire anyway"
    );
    assert_eq!(c.changed, vec![1, 2]);
    assert!(report.tokens_after < report.tokens_before);
}

#[test]
fn a_decision_stays_with_its_transcript() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        MemoryStoreLimits::DEFAULT,
        Arc::new(ManualClock::new()),
    ));
    let mut parent = turn(5);
    mask().run(&mut parent, &session_cx(store.clone(), 0));
    assert!(parent[1].content.contains("<<cg:"));
    // A subagent under the same session key: another task, the same outputs at the same
    // indices. Warm and fully cached, so only replays could change it; none belong to it.
    let mut subagent = turn(5);
    subagent[0] = Message::text(Role::User, "review the api tests for flakiness");
    let before = subagent.clone();
    let report = mask().run(&mut subagent, &session_cx(store, 6));
    assert_eq!(subagent, before);
    assert_eq!(report.components[0].frozen.hits, 0);
}

#[test]
fn a_replay_put_back_by_a_revert_is_never_vouched_for_by_the_originals_hash() {
    /// Frozen, same-length replacement: message 1 blanked to spaces (fewer tokens, same bytes
    /// count, so only the hash can tell it from the original). On the second turn it replays
    /// that, writes the original back and fails, so the guard puts the replay back.
    struct Blank {
        undo_and_fail: bool,
    }
    impl Offload for Blank {
        fn policy(&self) -> Policy {
            Policy::rederivable(false)
        }

        fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
            let original = turn(2)[1].content.clone();
            if self.undo_and_fail {
                messages.set_content(1, original);
                return Err(ComponentError::Other("failed after its replay".into()));
            }
            let key = cx.stash(&original)?;
            messages.set_content(1, " ".repeat(original.len()));
            Ok(vec![key])
        }
    }
    /// Records whether the shared hash of every message matches its content.
    struct Probe(Arc<parking_lot::Mutex<Vec<bool>>>);
    impl Reformat for Probe {
        fn reformat(
            &self,
            messages: &mut Transcript<'_, '_>,
            cx: &mut ApplyCx<'_>,
        ) -> Result<(), ComponentError> {
            let mut seen = self.0.lock();
            for (i, m) in messages.iter().enumerate() {
                seen.push(cx.content_hash(i, &m.content) == tokens::content_hash(&m.content));
            }
            Ok(())
        }
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        MemoryStoreLimits::DEFAULT,
        Arc::new(ManualClock::new()),
    ));
    let mut first = turn(2);
    let blank = |undo_and_fail| Stage::offload("blank", Blank { undo_and_fail });
    let r1 = Pipeline::new(vec![blank(false)]).run(&mut first, &session_cx(store.clone(), 0));
    assert_eq!(r1.components[0].changed, vec![1], "{r1:?}");

    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let probe = Stage::reformat("probe", Probe(seen.clone()));
    let mut second = turn(2);
    let r2 = Pipeline::new(vec![blank(true), probe]).run(&mut second, &session_cx(store, 3));
    assert!(matches!(r2.components[0].reverted, Some(Revert::Failed(_))));
    assert_eq!(second[1], first[1], "the replay went back on the wire");
    assert_eq!(*seen.lock(), vec![true; 3]);
}

#[test]
fn a_cut_floor_puts_back_only_the_cuts_that_save_less_from_its_index_on() {
    let pipeline = crate::config::Config::parse(
        "pipeline: [mask]\ncomponents:\n  mask: {keep_recent: 0, keep_head_chars: 0}",
    )
    .unwrap()
    .build_pipeline()
    .unwrap();
    // Outputs 1 and 3 are short runs, 2 and 4 long ones.
    let output =
        |i: usize, times: usize| Message::tool(&format!("c{i}"), "bash", run_log(i).repeat(times));
    let transcript = || {
        vec![
            Message::text(Role::User, "make the api tests pass"),
            output(1, 1),
            output(2, 10),
            output(3, 1),
            output(4, 10),
        ]
    };
    let short_cut = {
        let mut m = transcript();
        let report = pipeline.run(&mut m, &cx());
        assert_eq!(report.components[0].changed, vec![1, 2, 3, 4]);
        message_tokens(&transcript()[3]) - message_tokens(&m[3])
    };
    let mut m = transcript();
    let floor = CutFloor {
        from: 3,
        min_saved: short_cut + 1,
    };
    let report = pipeline.run(&mut m, &cx().with_cut_floor(Some(floor)));
    let component = &report.components[0];
    // Before the floor's index every cut stays; from it on, the short output goes whole.
    assert_eq!(component.changed, vec![1, 2, 4]);
    assert_eq!(m[3], transcript()[3]);
    assert_eq!(component.gates.get("below_cost_floor"), Some(&1));
}

#[test]
fn a_failure_report_keeps_its_causes() {
    let refused = ComponentError::from(crate::store::StoreError::Full);
    assert_eq!(
        refused.with_causes(),
        "stashing an original failed: store reserve is full of live stashes"
    );
    assert_eq!(
        ComponentError::Other("gave up".into()).with_causes(),
        "gave up"
    );
}
