//! Turn-by-turn tests of the session machinery: replay, the boundary, cold turns, store misses.

use std::sync::Arc;
use std::time::Duration;

use engine::clock::ManualClock;
use engine::config::Config;
use engine::message::Message;
use engine::pipeline::RunReport;
use engine::store::{MemoryStore, MemoryStoreLimits};
use engine::wire;
use serde_json::json;

use super::*;
use crate::run::{begin_turn, run_turn};
use actors::sessions::Persist;
use engine::config::AmortizeConfig;
use engine::pipeline::Pipeline;
use engine::pipeline::RunCx;
use engine::store::Store;
use engine::wire::Dialect;

/// A realistic build log for call `i`: some runs fail, all are big enough to mask.
fn output(i: usize) -> String {
    let mut out = format!(
        "$ cargo test -p service_{i}\n   Compiling service_{i} v0.1.0 (/repo/service_{i})\n"
    );
    for t in 0..30 {
        out.push_str(&format!("test service_{i}::case_{t} ... ok\n"));
    }
    if i.is_multiple_of(4) {
        out.push_str(&format!(
            "test service_{i}::edge ... FAILED\n\nfailures:\n    service_{i}::edge\n\ntest result: FAILED. 30 passed; 1 failed\n"
        ));
    } else {
        out.push_str("test result: ok. 30 passed; 0 failed\n");
    }
    out
}

/// The OpenAI request body an agent sends after `calls` tool calls.
fn body(calls: usize) -> Vec<u8> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent. Use the bash tool."}),
        json!({"role": "user", "content": "Make every service's tests pass."}),
    ];
    for i in 0..calls {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{i}"), "type": "function",
            "function": {"name": "bash", "arguments": format!("{{\"command\":\"cargo test -p service_{i}\"}}")}
        }]}));
        messages.push(
            json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": output(i)}),
        );
    }
    serde_json::to_vec(&json!({"model": "gpt-4.1", "messages": messages})).unwrap()
}

struct Session {
    state: SessionState,
    amortize: AmortizeConfig,
    pipeline: Pipeline,
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
}

impl Session {
    fn new(yaml: &str) -> Session {
        let clock = Arc::new(ManualClock::new());
        let config = Config::parse(yaml).unwrap();
        Session {
            state: SessionState::default(),
            amortize: config.cache.amortize,
            pipeline: config.build_pipeline().unwrap(),
            store: Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone())),
            clock,
        }
    }

    fn turn(&mut self, calls: usize) -> (Vec<Message>, TurnFacts, RunReport) {
        let body = body(calls);
        let parsed = wire::parse(&body, Dialect::OpenAi).unwrap();
        let cx = RunCx::new(
            Dialect::OpenAi,
            "s1",
            self.store.clone(),
            self.clock.clone(),
        );
        let (applied, facts) =
            run_turn(&mut self.state, &parsed, &self.pipeline, cx, &self.amortize);
        assert!(applied.error.is_none());
        (
            applied.messages.to_vec(parsed.messages()),
            facts,
            applied.report,
        )
    }
}

const MASK: &str = "pipeline: [mask]";

fn assert_no_flip(previous: &[Message], current: &[Message], turn: usize) {
    for (i, (p, c)) in previous.iter().zip(current).enumerate() {
        assert_eq!(
            p, c,
            "turn {turn}: message {i} flipped inside the cached prefix"
        );
    }
}

#[test]
fn fifty_turns_replay_every_earlier_compaction_byte_identically() {
    let mut session = Session::new(MASK);
    session.turn(1);
    let mut previous = session.turn(2).0;
    let mut masked_total = 0;
    for turn in 3..=50 {
        // A cold gap every tenth turn (a coffee break): mask may act at depth then.
        let gap = if turn % 10 == 0 { 2 * 3600 } else { 30 };
        session.clock.advance(Duration::from_secs(gap));
        let (messages, facts, report) = session.turn(turn);
        assert_eq!(facts.cold, turn % 10 == 0, "turn {turn}");
        if !facts.cold {
            assert_no_flip(&previous, &messages, turn);
            assert_eq!(facts.mutable_from, previous.len());
        }
        let mask = &report.components[0];
        assert!(mask.reverted.is_none());
        masked_total = masked_total.max(mask.frozen.hits);
        previous = messages;
    }
    // After the turn-50 cold sweep everything but the newest three outputs is masked.
    let masked = previous
        .iter()
        .filter(|m| m.content.contains("<<cg:"))
        .count();
    assert_eq!(masked, 50 - 3);
    assert!(
        masked_total >= 30,
        "earlier sweeps were replayed: {masked_total}"
    );
}

#[test]
fn a_warm_turn_never_decides_below_the_boundary_and_unknown_fails_closed() {
    let mut session = Session::new(MASK);
    let (first, facts, report) = session.turn(8);
    assert!(!facts.known);
    assert_eq!(
        facts.mutable_from,
        first.len(),
        "whole transcript treated as cached"
    );
    assert!(report.components[0].changed.is_empty());
    session.clock.advance(Duration::from_secs(10));
    let (second, facts, report) = session.turn(9);
    assert_eq!(facts.mutable_from, first.len());
    assert_eq!(
        second[..first.len()],
        first[..],
        "nothing inside the prefix changed"
    );
    assert!(
        report.components[0]
            .gates
            .get("cached_prefix")
            .copied()
            .unwrap_or(0)
            >= 5
    );
}

#[test]
fn a_cold_decision_stays_frozen_on_later_warm_turns() {
    let mut session = Session::new(MASK);
    session.turn(6);
    session.clock.advance(Duration::from_secs(2 * 3600));
    let (cold, facts, _) = session.turn(7);
    assert!(facts.cold);
    let masked: Vec<usize> = (0..cold.len())
        .filter(|&i| cold[i].content.contains("<<cg:"))
        .collect();
    assert_eq!(masked.len(), 4, "seven outputs, the newest three kept");
    for turn in 8..12 {
        session.clock.advance(Duration::from_secs(20));
        let (warm, facts, _) = session.turn(turn);
        assert!(!facts.cold);
        for &i in &masked {
            assert_eq!(warm[i], cold[i], "turn {turn}: cold decision replayed");
        }
    }
}

#[test]
fn cold_cache_off_is_byte_identical_to_a_warm_turn() {
    let run = |yaml: &str, gap: u64| {
        let mut session = Session::new(yaml);
        session.turn(6);
        session.clock.advance(Duration::from_secs(gap));
        session.turn(7).0
    };
    let off = "pipeline: [mask]\ncomponents:\n  mask:\n    cold_cache: false\n";
    assert!(
        run(off, 2 * 3600) == run(MASK, 10),
        "off: a cold turn acts like a warm one"
    );
    assert!(
        run(MASK, 2 * 3600) != run(MASK, 10),
        "on, a cold turn does act"
    );
}

#[test]
fn a_forced_store_miss_does_not_flip_an_established_compaction() {
    // A store whose entries live 100 s, while the provider's cache lives an hour: every warm
    // turn 150 s later finds its freezes gone.
    let mut session = Session::new(MASK);
    session.store = Arc::new(MemoryStore::new(
        MemoryStoreLimits {
            ttl: Duration::from_secs(100),
            ..MemoryStoreLimits::DEFAULT
        },
        session.clock.clone(),
    ));
    session.turn(5);
    session.clock.advance(Duration::from_secs(2 * 3600));
    let (cold, _, _) = session.turn(6);
    assert!(cold.iter().any(|m| m.content.contains("<<cg:")));
    let mut dropped = 0;
    for turn in 7..10 {
        session.clock.advance(Duration::from_secs(150));
        let (warm, facts, report) = session.turn(turn);
        assert!(!facts.cold);
        assert_no_flip(&cold, &warm, turn);
        let frozen = report.frozen();
        assert_eq!(
            frozen.dropped, frozen.repaired,
            "every lost freeze re-derived"
        );
        dropped += frozen.dropped;
    }
    assert!(dropped > 0, "the small store did drop freezes");
}

#[test]
fn session_state_round_trips_through_the_store() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        MemoryStoreLimits::DEFAULT,
        Arc::new(ManualClock::new()),
    ));
    let persist = StorePersist::new(store.clone());
    let mut state = SessionState::default();
    let parsed_body = body(3);
    let parsed = wire::parse(&parsed_body, Dialect::OpenAi).unwrap();
    begin_turn(&mut state, &parsed, Duration::ZERO);
    persist.save("s1", &state);
    let mut back = persist.load("s1");
    let facts = begin_turn(&mut back, &parsed, Duration::from_secs(1));
    assert_eq!(facts.mutable_from, parsed.messages().len());
    assert!(facts.known);
    assert!(!begin_turn(&mut persist.load("other"), &parsed, Duration::ZERO).known);
}

#[test]
fn amortize_rewrites_the_prefix_on_a_staircase_turn_only_when_it_pays() {
    let yaml = "pipeline: [mask]\ncache:\n  amortize: {enabled: true, every_turns: 5}\n";
    let mut session = Session::new(yaml);
    let mut previous = session.turn(1).0;
    let mut rewrites = Vec::new();
    for turn in 2..=30 {
        session.clock.advance(Duration::from_secs(30));
        let (messages, facts, _) = session.turn(turn);
        assert!(!facts.cold, "every turn is warm");
        if facts.amortized {
            rewrites.push(turn);
        } else {
            assert_no_flip(&previous, &messages, turn);
        }
        previous = messages;
    }
    assert!(
        !rewrites.is_empty(),
        "a long warm session does re-write at some point"
    );
    for pair in rewrites.windows(2) {
        assert!(
            pair[1] - pair[0] >= 5,
            "a staircase, not every turn: {rewrites:?}"
        );
    }
    // The last re-write masked everything old, and later warm turns replayed it.
    let masked = previous
        .iter()
        .filter(|m| m.content.contains("<<cg:"))
        .count();
    assert!(masked >= rewrites.last().unwrap() - 4, "{masked} masked");

    // Off (the default): no warm turn ever touches the prefix.
    let mut off = Session::new("pipeline: [mask]");
    off.turn(1);
    for turn in 2..=30 {
        off.clock.advance(Duration::from_secs(30));
        assert!(!off.turn(turn).1.amortized);
    }
}

#[test]
fn amortize_declines_when_the_suffix_costs_more_than_it_saves() {
    use engine::apply::apply_body;
    // One old output worth masking, deep under a long suffix, and one expected turn left.
    let config = AmortizeConfig {
        enabled: true,
        expected_turns: 1,
        ..AmortizeConfig::default()
    };
    let pipeline = Config::parse("pipeline: [mask]")
        .unwrap()
        .build_pipeline()
        .unwrap();
    let body = body(12);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        MemoryStoreLimits::DEFAULT,
        Arc::new(ManualClock::new()),
    ));
    let cx = |cold| {
        RunCx::new(
            Dialect::OpenAi,
            "s",
            store.clone(),
            Arc::new(ManualClock::new()),
        )
        .at_boundary(25, cold)
    };
    let usual = apply_body(&body, &pipeline, &cx(false));
    let deep = apply_body(&body, &pipeline, &cx(true));
    let parsed = engine::wire::parse(&body, Dialect::OpenAi).unwrap();
    let originals = parsed.messages();
    let verdict = amortize::weigh(&config, originals, &usual, &deep, 25, 12);
    assert!(verdict.extra_saved > 0);
    assert!(!verdict.pays(), "{verdict:?}");
    let patient = AmortizeConfig {
        expected_turns: 100,
        ..config
    };
    assert!(amortize::weigh(&patient, originals, &usual, &deep, 25, 12).pays());
}
