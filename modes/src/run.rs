//! One turn's run against its session: the tracker's facts first ([`begin_turn`]), then the
//! pipeline under them ([`run_turn`]), or again once a model job lands ([`rerun`]). Private to
//! `modes`: hosts reach it through [`crate::turn::TurnService`], replay through its own driver.

use std::sync::Arc;

use engine::apply::{Applied, apply_parsed};
use engine::config::AmortizeConfig;
use engine::pipeline::{Pipeline, RunCx};
use engine::wire::{Dialect, Mention, ParsedBody};

use crate::session::SessionState;
use crate::tracker::{self, TurnFacts};
use crate::{amortize, guard, restore, retries};

/// Asks the tracker about a turn carrying `parsed`, and records it.
pub(crate) fn begin_turn(
    state: &mut SessionState,
    parsed: &ParsedBody<'_>,
    now: std::time::Duration,
) -> TurnFacts {
    let fingerprints = parsed.fingerprints().to_vec();
    // OpenAI caches every long enough prompt on its own; Anthropic only what a breakpoint asks.
    let asked_caching =
        parsed.dialect() != Dialect::Anthropic || parsed.mentions(Mention::CacheControl);
    state
        .tracker
        .begin_turn(fingerprints, now, tracker::asked_ttl(parsed), asked_caching)
}

/// One turn: the tracker's facts, then the pipeline under them. `cx` carries the request's
/// session, store and clock; its boundary and coldness are overwritten here. With
/// `cache.amortize` on, a warm staircase turn also weighs a depth re-write (see [`amortize`]).
pub(crate) fn run_turn<'a>(
    state: &mut SessionState,
    parsed: &ParsedBody<'a>,
    pipeline: &Pipeline,
    mut cx: RunCx,
    amortize: &AmortizeConfig,
) -> (Applied<'a>, TurnFacts) {
    let mut facts = begin_turn(state, parsed, cx.clock.now());
    facts.retries = retries::detect(state, parsed.messages());
    state.restore.turns += 1;
    let prices = restore::Prices {
        prompt: state.guard.last_prompt(),
        new: restore::new_price(state.guard.bills_writes()),
        banked: state.guard.billed.gross(),
    };
    (facts.restored, facts.restored_tokens) = state.restore.decide(parsed.messages(), prices);
    cx.mutable_from = facts.mutable_from;
    cx.cold = facts.cold;
    cx = learned(state, cx);
    let (applied, facts) = run_under(state, parsed, pipeline, cx, amortize, facts);
    retries::remember(state, parsed.messages(), &applied.messages);
    let mut facts = facts;
    facts.ledger_turn = state
        .guard
        .turn(guard::work(&applied.report, &facts))
        .map(|seq| tracker::LedgerTurn { seq, declared: 0 });
    (applied, facts)
}

/// What the session learned applies to its runs: the tools it keeps whole, the outputs it
/// restored in place and the cost guard's floor under cuts.
pub(crate) fn learned(state: &SessionState, cx: RunCx) -> RunCx {
    let mut cx = if state.lossless_tools.is_empty() {
        cx
    } else {
        cx.with_lossless_tools(retries::lossless(state))
    };
    if !state.restore.restored.is_empty() {
        cx = cx.with_restored(Arc::new(state.restore.restored.clone()));
    }
    cx.with_cut_floor(state.guard.cut_floor())
}

/// [`run_turn`] once the tracker has answered: the pipeline, or the staircase's two runs.
fn run_under<'a>(
    state: &mut SessionState,
    parsed: &ParsedBody<'a>,
    pipeline: &Pipeline,
    cx: RunCx,
    amortize: &AmortizeConfig,
    mut facts: TurnFacts,
) -> (Applied<'a>, TurnFacts) {
    state.turns_since_amortized = state.turns_since_amortized.saturating_add(1);
    let staircase = amortize.enabled
        && facts.known
        && !facts.cold
        && state.turns_since_amortized >= amortize.every_turns;
    if !staircase {
        return (apply_parsed(parsed, pipeline, &cx), facts);
    }
    // A staircase step is taken whether or not the re-write pays: weighing costs a second
    // pipeline run, at most once every `every_turns`.
    state.turns_since_amortized = 0;
    // The two runs are weighed by their totals: each must be whole.
    let cx = cx.with_deferred_counts(false);
    let usual_store = Arc::new(amortize::Overlay::new(cx.store.clone()));
    let deep_store = Arc::new(amortize::Overlay::new(cx.store.clone()));
    let mut usual_cx = cx.clone();
    usual_cx.store = usual_store.clone();
    let mut deep_cx = cx;
    deep_cx.store = deep_store.clone();
    deep_cx.cold = true;
    let usual = apply_parsed(parsed, pipeline, &usual_cx);
    let deep = apply_parsed(parsed, pipeline, &deep_cx);
    let verdict = amortize::weigh(
        amortize,
        parsed.messages(),
        &usual,
        &deep,
        facts.mutable_from,
        state.tracker.counts.turns,
    );
    if verdict.pays() {
        deep_store.commit();
        state.tracker.counts.amortized_rewrites += 1;
        facts.amortized = true;
        (deep, facts)
    } else {
        usual_store.commit();
        (usual, facts)
    }
}

/// Runs the pipeline again for a turn [`run_turn`] already began: the tracker is not consulted
/// again and its facts (boundary, cold) stand. The proxy does this once when a model job it
/// waited for finished within the deadline, so the result lands on this turn.
pub(crate) fn rerun<'a>(
    parsed: &ParsedBody<'a>,
    pipeline: &Pipeline,
    mut cx: RunCx,
    facts: &TurnFacts,
) -> Applied<'a> {
    cx.mutable_from = facts.mutable_from;
    // An amortized turn re-wrote at depth as if cold; the re-run keeps that.
    cx.cold = facts.cold || facts.amortized;
    apply_parsed(parsed, pipeline, &cx)
}
