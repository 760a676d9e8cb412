//! `sync` and `observe` modes, the cached-prefix tracker and the cold-cache predictor.
//!
//! A turn is one path for every host, [`turn::TurnService`]: the session actor (see
//! `actors::sessions`) lends the session's [`SessionState`]; [`run_turn`] asks its [`Tracker`]
//! for the cached-prefix boundary and coldness, records the turn, and runs the pipeline with
//! them. Sync forwards the result; observe computes it off the request path against its own
//! store and only reports it; `sluice replay` runs it on a simulated clock.
//! Both use one tracker per session, so observe's projection respects the same boundary sync
//! would have: a projection without it would overstate savings.

pub mod amortize;
pub mod guard;
pub mod loud;
pub mod replay;
pub mod retries;
pub mod stats;
pub mod tracker;
pub mod turn;

use std::sync::Arc;

use actors::sessions::Persist;
use engine::apply::{Applied, apply_parsed};
use engine::config::AmortizeConfig;
use engine::pipeline::{Pipeline, RunCx};
use engine::store::Store;
use engine::wire::{Dialect, ParsedBody};
use serde::{Deserialize, Serialize};

pub use tracker::{CacheUsage, Tracker, TurnFacts};
pub use turn::{Forward, Turn, TurnInput, TurnModels, TurnService, Untouched};

/// What a session actor owns for one session.
///
/// Freeze decisions are not here: they live in the store's pinned replay namespace, scoped to
/// the session, because they must outlive this state (an evicted actor, a restarted actor) for
/// as long as the provider may still cache what they produced. The actor serializes every use
/// of them all the same, since only a leased turn runs the pipeline for its session.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionState {
    pub tracker: Tracker,
    /// Turns since the last amortized depth re-write (the staircase of `cache.amortize`).
    #[serde(default)]
    pub turns_since_amortized: u32,
    /// Calls whose outputs the last forwarded request carried cut, by tool and arguments (see
    /// [`retries`]), with the id of the call that produced each.
    #[serde(default)]
    pub cut_calls: std::collections::BTreeMap<String, String>,
    /// The tool behind each marker this session's cuts left.
    #[serde(default)]
    pub marker_tools: std::collections::BTreeMap<String, String>,
    /// Marker ids the model expanded at least once.
    #[serde(default)]
    pub expanded: std::collections::BTreeSet<String>,
    /// Tools whose outputs this session no longer cuts lossily (the model needed what was
    /// cut), each with the first message index that applies from.
    #[serde(default)]
    pub lossless_tools: std::collections::BTreeMap<String, usize>,
    /// Messages the previous request had: the calls after them are the model's new ones.
    #[serde(default)]
    pub seen_messages: usize,
    /// The most messages any request of the session had. What the session learns applies from
    /// here on: a shorter request in between (a sub-agent under the same session, a resend)
    /// must not pull it back over outputs a longer transcript already forwarded cut.
    #[serde(default)]
    pub frontier: usize,
    /// Whether compaction is paying for this session, from the provider's reports (see
    /// [`guard`]).
    #[serde(default)]
    pub guard: guard::CostGuard,
}

/// Keeps a session's state in a store between actors (under the session's replay namespace).
pub struct StorePersist {
    store: Arc<dyn Store>,
}

/// The replay key a session's state is saved under.
const STATE_KEY: &str = "session-state";

impl StorePersist {
    pub fn new(store: Arc<dyn Store>) -> StorePersist {
        StorePersist { store }
    }
}

impl Persist<SessionState> for StorePersist {
    fn load(&self, key: &str) -> SessionState {
        load_state(&*self.store, key)
    }

    fn save(&self, key: &str, state: &SessionState) {
        save_state(&*self.store, key, state);
    }
}

/// A session's state as `store` holds it. A missing or unreadable snapshot is a fresh state: a
/// tracker that knows no boundary treats the whole transcript as cached, the safe direction.
pub fn load_state(store: &dyn Store, key: &str) -> SessionState {
    store
        .get_frozen(key, STATE_KEY)
        .and_then(|json| serde_json::from_str(&json).ok())
        .unwrap_or_default()
}

pub fn save_state(store: &dyn Store, key: &str, state: &SessionState) {
    if let Ok(json) = serde_json::to_string(state) {
        store.put_frozen(key, STATE_KEY, &json);
    }
}

/// Asks the tracker about a turn carrying `parsed`, and records it.
pub(crate) fn begin_turn(
    state: &mut SessionState,
    parsed: &ParsedBody<'_>,
    now: std::time::Duration,
) -> TurnFacts {
    let fingerprints = parsed.messages().iter().map(tracker::fingerprint).collect();
    let raw = parsed.text().as_bytes();
    let dialect = parsed.dialect();
    // OpenAI caches every long enough prompt on its own; Anthropic only what a breakpoint asks.
    let asked_caching =
        dialect != Dialect::Anthropic || memchr::memmem::find(raw, b"\"cache_control\"").is_some();
    state.tracker.begin_turn(
        fingerprints,
        now,
        tracker::asked_ttl(raw, dialect),
        asked_caching,
    )
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
    cx.mutable_from = facts.mutable_from;
    cx.cold = facts.cold;
    cx = learned(state, cx);
    let (applied, facts) = run_under(state, parsed, pipeline, cx, amortize, facts);
    retries::remember(state, parsed.messages(), &applied.messages);
    let mut facts = facts;
    facts.ledger_turn = state.guard.turn(guard::work(&applied.report, &facts));
    (applied, facts)
}

/// What the session learned applies to its runs: the tools it keeps whole and the cost
/// guard's floor under cuts.
pub(crate) fn learned(state: &SessionState, cx: RunCx) -> RunCx {
    let cx = if state.lossless_tools.is_empty() {
        cx
    } else {
        cx.with_lossless_tools(retries::lossless(state))
    };
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

#[cfg(test)]
mod tests;
