//! A run that defers its counts against one that counts first: the same forwarded messages,
//! and once settled the same report; the counts it took reach the next turn's parse.

use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::digests::{Computed, Digests};
use crate::message::Role;
use crate::pipeline::{Pipeline, RunCx};
use crate::store::{MemoryStore, MemoryStoreLimits};
use crate::wire::prefix::tests::{body, call, history, result};
use crate::wire::{Dialect, Resumed, parse_continuing, parse_text};

fn default_pipeline() -> Pipeline {
    crate::config::Config::parse(crate::config::EMBEDDED_DEFAULT)
        .unwrap()
        .build_pipeline()
        .unwrap()
}

fn run_cx(defer: bool) -> RunCx {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone()));
    RunCx::new(Dialect::OpenAi, "s", store, clock).with_deferred_counts(defer)
}

/// A session the embedded default acts on: a task, assistant text and tool outputs (a long
/// build log for `collapse`, a repeated listing for `dedup`, small outputs it leaves).
fn session() -> Vec<Message> {
    let log: String = (0..900)
        .map(|n| format!("compiling module_{n} with flags -O2 -g (unit {n} of 900)\n"))
        .collect();
    let listing: String = (0..60)
        .map(|n| format!("src/module_{n}.rs   unchanged since the last build\n"))
        .collect();
    vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(Role::User, "Make the build pass."),
        Message::text(
            Role::Assistant,
            "I will build it first and read what fails.",
        ),
        Message::tool("c1", "bash", log),
        Message::text(Role::Assistant, "Now the listing of the sources."),
        Message::tool("c2", "bash", listing.clone()),
        Message::tool("c3", "bash", "ok"),
        Message::tool("c4", "bash", listing),
        Message::text(Role::Assistant, "The build passes now."),
    ]
}

/// The session's digests with every message from `from` on left uncounted, as a resumed parse
/// leaves its new messages.
fn uncounted_from(messages: &[Message], from: usize) -> Computed {
    let mut computed = Computed::of(messages);
    for n in &mut computed.tokens[from..] {
        *n = UNCOUNTED;
    }
    computed
}

#[test]
fn a_deferred_run_settles_to_the_report_a_counting_run_makes() {
    let pipeline = default_pipeline();
    let messages = session();
    let counted = Computed::of(&messages);
    let (full, full_forwarded, _) =
        pipeline.run_carrying(&messages, counted.digests(), &run_cx(false), None);
    assert!(full.saved_tokens() > 0, "the default cut something");
    for from in [0, 2, 5, messages.len()] {
        let computed = uncounted_from(&messages, from);
        let late = LateCounts::default();
        let digests = Digests {
            late: Some(&late),
            ..computed.digests()
        };
        let (mut deferred, forwarded, _) =
            pipeline.run_carrying(&messages, digests, &run_cx(true), None);
        assert_eq!(forwarded, full_forwarded, "from {from}");
        // Differences are exact before the counts settle; the totals are short alike.
        assert_eq!(deferred.saved_tokens(), full.saved_tokens(), "from {from}");
        let short = full.tokens_before - deferred.tokens_before;
        for (c, whole) in deferred.components.iter().zip(&full.components) {
            assert_eq!(whole.tokens_before - c.tokens_before, short, "{}", c.name);
            assert_eq!(whole.tokens_after - c.tokens_after, short, "{}", c.name);
        }
        assert_eq!(deferred.is_counted(), from == messages.len(), "from {from}");
        deferred.count_deferred();
        assert!(deferred.is_counted());
        assert_eq!(format!("{deferred:?}"), format!("{full:?}"), "from {from}");
        // Every count the run took or settled is left for the next turn, and it is the count.
        for (i, &n) in counted.tokens.iter().enumerate().skip(from) {
            assert_eq!(late.get(i), Some(n), "from {from}, message {i}");
        }
        // Counted twice, nothing changes.
        deferred.count_deferred();
        assert_eq!(format!("{deferred:?}"), format!("{full:?}"), "from {from}");
    }
}

#[test]
fn a_run_that_does_not_defer_counts_what_its_digests_left() {
    let pipeline = default_pipeline();
    let messages = session();
    let counted = Computed::of(&messages);
    let (full, _, _) = pipeline.run_carrying(&messages, counted.digests(), &run_cx(false), None);
    let computed = uncounted_from(&messages, 3);
    let (report, _, _) = pipeline.run_carrying(&messages, computed.digests(), &run_cx(false), None);
    assert!(report.is_counted());
    assert_eq!(format!("{report:?}"), format!("{full:?}"));
}

/// Three turns of a Messages conversation, the second run deferring its counts.
fn third_turn_counts(settle: bool) -> (Vec<usize>, Vec<usize>) {
    let pipeline = default_pipeline();
    let first = body(&history(true), true);
    let mut messages = history(false);
    messages.push(call("toolu_03", "cargo test -p parser"));
    messages.push(result("toolu_03", "test result: ok. 12 passed", true));
    let second = body(&messages, true);
    messages.push(call("toolu_04", "git diff --stat"));
    messages.push(result("toolu_04", " src/parser.rs | 2 +-", true));
    let third = body(&messages, true);

    let parsed = parse_text(&first, Dialect::Anthropic).unwrap();
    parsed.digests();
    let Resumed { parsed, kept, seen } =
        parse_continuing(&second, Dialect::Anthropic, parsed.into_continuation(None)).unwrap();
    let new = parsed.digests().tokens.iter().filter(|&&n| n == UNCOUNTED);
    assert_eq!(
        new.count(),
        4,
        "the system prompt (read fresh), the message whose breakpoint moved, the two new ones"
    );
    let mut applied = crate::apply::apply_parsed(&parsed, &pipeline, &run_cx(true));
    if settle {
        applied.report.count_deferred();
    }
    drop(applied);
    let continuation = parsed.into_continuation(Some((&seen, kept)));
    let parsed = parse_continuing(&third, Dialect::Anthropic, continuation)
        .unwrap()
        .parsed;
    let whole = parse_text(&third, Dialect::Anthropic).unwrap();
    let tokens = parsed.digests().tokens.to_vec();
    (tokens, whole.digests().tokens.to_vec())
}

#[test]
fn the_counts_a_run_settles_reach_the_next_turn() {
    let (settled, whole) = third_turn_counts(true);
    // The second turn's new messages were counted after its run; the third turn carries them,
    // and leaves only what it reads fresh: the system prompt and its own new messages.
    let n = whole.len();
    assert_eq!(settled[1..n - 2], whole[1..n - 2]);
    assert_eq!(settled[0], UNCOUNTED);
    assert!(settled[n - 2..].iter().all(|&c| c == UNCOUNTED));
    // A host that never settles costs the next turn a count, never a wrong one.
    let (unsettled, _) = third_turn_counts(false);
    for (i, (&n, &whole)) in unsettled.iter().zip(&whole).enumerate() {
        assert!(n == whole || n == UNCOUNTED, "message {i}");
    }
    assert!(unsettled[..n - 2].contains(&UNCOUNTED));
}
