//! Pipeline guard tests: each failure mode reverts only the component that caused it.

use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::message::Role;
use crate::store::{MemoryStore, MemoryStoreLimits};

struct Shorten(&'static str);
impl Offload for Shorten {
    fn name(&self) -> &'static str {
        self.0
    }
    fn offload(
        &self,
        messages: &mut Transcript<'_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<Vec<StashKey>, ComponentError> {
        let key = cx
            .stash(&messages[1].content)
            .map_err(|e| ComponentError(e.to_string()))?;
        messages.get_mut(1).content = format!("short {}", key.marker());
        Ok(vec![key])
    }
}

struct Panics;
impl Reformat for Panics {
    fn name(&self) -> &'static str {
        "panics"
    }
    fn reformat(
        &self,
        messages: &mut Transcript<'_>,
        _: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        messages.get_mut(2).content.clear();
        panic!("component bug");
    }
}

struct Fails;
impl Reformat for Fails {
    fn name(&self) -> &'static str {
        "fails"
    }
    fn reformat(
        &self,
        messages: &mut Transcript<'_>,
        _: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        messages.get_mut(2).content = "half done".into();
        Err(ComponentError("gave up".into()))
    }
}

struct DropsWithoutKey;
impl Offload for DropsWithoutKey {
    fn name(&self) -> &'static str {
        "drops_without_key"
    }
    fn offload(
        &self,
        messages: &mut Transcript<'_>,
        _: &mut ApplyCx<'_>,
    ) -> Result<Vec<StashKey>, ComponentError> {
        messages.get_mut(2).content = "gone".into();
        Ok(Vec::new())
    }
}

struct Grows;
impl Reformat for Grows {
    fn name(&self) -> &'static str {
        "grows"
    }
    fn reformat(
        &self,
        messages: &mut Transcript<'_>,
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
    fn name(&self) -> &'static str {
        "observer"
    }
    fn reformat(
        &self,
        messages: &mut Transcript<'_>,
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
    RunCx {
        dialect: Dialect::OpenAi,
        session: "s".into(),
        store: Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone())),
        clock,
        mutable_from: 0,
        cold: false,
        existing_breakpoints: 0,
    }
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
        fn name(&self) -> &'static str {
            "observer"
        }
        fn reformat(
            &self,
            m: &mut Transcript<'_>,
            cx: &mut ApplyCx<'_>,
        ) -> Result<(), ComponentError> {
            self.0.reformat(m, cx)
        }
    }
    let (msgs, report) = run(vec![
        Stage::Offload(Box::new(Shorten("shorten"))),
        Stage::Reformat(Box::new(Panics)),
        Stage::Reformat(Box::new(Shared(observer.clone()))),
        Stage::Reformat(Box::new(Fails)),
        Stage::Reformat(Box::new(Shared(observer.clone()))),
        Stage::Offload(Box::new(DropsWithoutKey)),
        Stage::Reformat(Box::new(Shared(observer.clone()))),
        Stage::Reformat(Box::new(Grows)),
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

#[test]
fn stash_key_resolves_to_the_exact_original() {
    let context = cx();
    let mut msgs = messages();
    let report =
        Pipeline::new(vec![Stage::Offload(Box::new(Shorten("shorten")))]).run(&mut msgs, &context);
    let id = &report.components[0].stashed[0];
    assert_eq!(
        context.store.resolve("s", id).as_deref(),
        Some(messages()[1].content.as_str())
    );
    assert_eq!(context.store.resolve("other-session", id), None);
}
