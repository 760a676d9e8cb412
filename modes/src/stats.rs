//! In-process rollups behind `/stats` and `/metrics`.
//!
//! Savings are token-weighted (Σ saved / Σ before), never a mean of per-request percentages.
//! The headline is billed input saved, net (`billed_savings_pct`, defined once in
//! `engine::savings`), from the providers' own reports ([`Stats::record_billed`]); beside it,
//! content tokens saved, net (`net_savings_pct`), over the requests the upstream completed
//! ([`Stats::record_outcome`]). `saved_tokens` is cumulative
//! (the agent re-sends history, so the same saving is counted every
//! turn); `saved_tokens_unique` counts each (component, replaced content) once, and
//! `overcount_ratio` says how far apart the two are. Field names are context-guru's, and the
//! set only ever grows: dashboards parse it.
//!
//! One short critical section per request under a `parking_lot` mutex, no `.await` inside.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use engine::apply::Discarded;
use engine::pipeline::{FrozenCounts, RunReport};
use engine::savings::{BilledSaving, NetSaving};
use parking_lot::Mutex;

use actors::pool::PoolStats;
use actors::sessions::SessionStats;
use serde_json::{Map, Value, json};

mod fields;
pub mod table;

pub use fields::FIELDS;

/// Distinct (component, content) keys remembered for `saved_tokens_unique` before the set is
/// reset; bounds memory at a few MiB on a long-running proxy.
const MAX_UNIQUE_KEYS: usize = 1 << 20;

#[derive(Debug, Default, Clone)]
struct ComponentTotals {
    runs: u64,
    mutated: u64,
    acted: u64,
    reverted: u64,
    saved_tokens: u64,
    saved_tokens_unique: u64,
    duration_us: u64,
    discarded_changes: u64,
    gates: BTreeMap<String, u64>,
}

/// Upper bounds of the latency histogram buckets, in seconds (Prometheus `le`).
const LATENCY_BUCKETS: [f64; 13] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// A fixed-bucket latency histogram.
#[derive(Debug, Default, Clone)]
struct Histogram {
    /// Per bucket (not cumulative); the last slot is `+Inf`.
    counts: [u64; LATENCY_BUCKETS.len() + 1],
    sum_us: u64,
}

impl Histogram {
    fn observe(&mut self, d: Duration) {
        let seconds = d.as_secs_f64();
        let slot = LATENCY_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[slot] += 1;
        self.sum_us += micros(d);
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (slot, count) in self.counts.iter().enumerate() {
            cumulative += count;
            let le = LATENCY_BUCKETS
                .get(slot)
                .map_or_else(|| "+Inf".to_owned(), |le| le.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_sum {}", self.sum_us as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

/// Token savings rolled up per component: one for what sluice did, one (observe mode) for what
/// it would have done.
#[derive(Debug, Default)]
struct Rollup {
    tokens_before: u64,
    tokens_after: u64,
    saved_tokens_unique: u64,
    components: BTreeMap<&'static str, ComponentTotals>,
    seen: HashSet<(&'static str, u64)>,
    frozen: FrozenCounts,
}

impl Rollup {
    fn add(&mut self, report: &RunReport, discarded: &[Discarded]) {
        self.tokens_before += report.tokens_before as u64;
        self.tokens_after += report.tokens_after as u64;
        self.frozen.add(report.frozen());
        if self.seen.len() > MAX_UNIQUE_KEYS {
            self.seen.clear();
        }
        for c in &report.components {
            let mut unique = 0;
            for saving in &c.savings {
                if saving.saved_tokens > 0 && self.seen.insert((c.name, saving.content_key)) {
                    unique += saving.saved_tokens as u64;
                }
            }
            self.saved_tokens_unique += unique;
            let entry = self.components.entry(c.name).or_default();
            entry.runs += 1;
            entry.mutated += u64::from(c.mutated);
            entry.acted += u64::from(c.acted);
            entry.reverted += u64::from(c.reverted.is_some());
            entry.saved_tokens += c.saved_tokens as u64;
            entry.saved_tokens_unique += unique;
            entry.duration_us += c.duration_us;
            for (gate, n) in &c.gates {
                *entry.gates.entry((*gate).to_owned()).or_default() += u64::from(*n);
            }
        }
        for d in discarded {
            if let Some(name) = d.component {
                self.components.entry(name).or_default().discarded_changes += 1;
            }
        }
    }

    fn saved(&self) -> u64 {
        self.tokens_before.saturating_sub(self.tokens_after)
    }

    fn components_json(&self) -> BTreeMap<&'static str, Value> {
        self.components
            .iter()
            .map(|(name, c)| {
                let verdict = if c.acted > 0 {
                    "acted"
                } else if c.mutated > 0 {
                    "moved"
                } else if c.gates.is_empty() {
                    "idle"
                } else {
                    "skipped"
                };
                let value = json!({
                    "runs": c.runs,
                    "acted": c.acted,
                    "mutated": c.mutated,
                    "reverted": c.reverted,
                    "saved_tokens": c.saved_tokens,
                    "saved_tokens_unique": c.saved_tokens_unique,
                    "overcount_ratio": ratio(c.saved_tokens, c.saved_tokens_unique),
                    "duration_ms": c.duration_us as f64 / 1000.0,
                    "discarded_changes": c.discarded_changes,
                    "verdict": verdict,
                    "gates": c.gates,
                });
                (*name, value)
            })
            .collect()
    }
}

#[derive(Debug, Default)]
pub struct Totals {
    live: Rollup,
    potential: Rollup,
    observe_projections: u64,
    observe_us: u64,
    added_latency: Histogram,
    upstream_latency: Histogram,
    ttfb: Histogram,
    requests: u64,
    compacted_requests: u64,
    unparsed_requests: u64,
    passthrough_requests: u64,
    bypassed_requests: u64,
    store_skipped_requests: u64,
    added_us: u64,
    added_n: u64,
    upstream_us: u64,
    upstream_n: u64,
    sse_streamed: u64,
    sse_buffered: u64,
    sse_ttfb_us: u64,
    sse_ttfb_n: u64,
    expand_rounds: u64,
    restorations: u64,
    expand_misses: u64,
    wasted_tokens: u64,
    /// Prompt tokens expand rounds sent upstream again (read from the provider's cache).
    expand_reread_tokens: u64,
    /// The net saving's sums over requests the upstream completed; the rounds' terms are
    /// `wasted_tokens` and `expand_reread_tokens` ([`Totals::net`]).
    completed: NetSaving,
    /// Requests that ran the pipeline and did not complete upstream, and the tokens their cuts
    /// would have saved: left out of every savings percentage.
    failed_requests: u64,
    failed_saved_tokens: u64,
    /// The billed saving's sums: each turn its provider's report settled, each expand round.
    billed: BilledSaving,
    retries_after_compaction: u64,
    upstream_errors: u64,
    turns: TurnTotals,
    /// Turns run without lossy offloads because the model could not have called the expand
    /// tool, by reason (`engine::way_back::Withheld` labels).
    way_back_withheld: BTreeMap<&'static str, u64>,
    /// Requests on the rewritten routes, by the dialect the route speaks.
    requests_by_dialect: BTreeMap<&'static str, u64>,
    /// Sessions whose cost guard backed off, by reason (`cache_misses`: every tool output whole;
    /// `expand_rounds`: only the cuts that pay for a round).
    cost_guard_backoffs: BTreeMap<&'static str, u64>,
    /// Responses the expand loop could not read (an encoding sluice cannot decode, a body over
    /// the bound): relayed untouched, by reason.
    expand_unread: BTreeMap<&'static str, u64>,
    /// Requests forwarded untouched, by reason (`modes::turn::Untouched` labels).
    untouched: BTreeMap<&'static str, u64>,
    /// Wire entries kept as they came while the rest of their body was compacted.
    opaque_entries: u64,
}

impl Totals {
    /// The net saving's sums: the completed requests, and every expand round's cost (a round
    /// runs only on a request whose upstream answered).
    fn net(&self) -> NetSaving {
        NetSaving {
            restored_tokens: self.wasted_tokens,
            reread_tokens: self.expand_reread_tokens,
            ..self.completed
        }
    }
}

/// What the cached-prefix tracker decided, over all turns.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
struct TurnTotals {
    tracked_turns: u64,
    cold_turns: u64,
    unknown_boundary_turns: u64,
    compaction_resets: u64,
    cold_mispredicted: u64,
    amortized_rewrites: u64,
    restored_outputs: u64,
}

/// The aggregator. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct Stats {
    totals: Mutex<Totals>,
}

/// How a streamed response was relayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamRelay {
    /// Passed through chunk by chunk.
    Streamed,
    /// Held back whole, for the expand loop to inspect.
    Buffered,
}

fn ms(us: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        us as f64 / n as f64 / 1000.0
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Stats {
    pub fn new() -> Stats {
        Stats::default()
    }

    /// A request sluice rewrote (or tried to): its pipeline report and the time sluice added.
    pub fn record_run(&self, report: &RunReport, discarded: &[Discarded], added: Duration) {
        debug_assert!(
            report.is_counted(),
            "a run recorded before its deferred counts were counted"
        );
        let mut t = self.totals.lock();
        t.requests += 1;
        t.compacted_requests += 1;
        t.added_us += micros(added);
        t.added_n += 1;
        t.added_latency.observe(added);
        t.live.add(report, discarded);
    }

    /// One turn the cached-prefix tracker saw: whether it read cold, whether an earlier turn was
    /// on record, whether the transcript diverged from every remembered one, whether
    /// `cache.amortize` re-wrote part of the cached prefix, and the outputs it restored in place.
    pub fn record_turn(&self, facts: &crate::tracker::TurnFacts) {
        let mut t = self.totals.lock();
        t.turns.tracked_turns += 1;
        t.turns.amortized_rewrites += u64::from(facts.amortized);
        t.turns.restored_outputs += u64::from(facts.restored);
        t.turns.cold_turns += u64::from(facts.cold);
        t.turns.unknown_boundary_turns += u64::from(!facts.known);
        t.turns.compaction_resets += u64::from(facts.diverged);
    }

    /// Signs that a cut was needed after all: calls re-issued right after their output was cut,
    /// and markers expanded a second time (see `retries`).
    pub fn record_retries(&self, n: u64) {
        if n > 0 {
            self.totals.lock().retries_after_compaction += n;
        }
    }

    /// The provider reported a cache read on a turn the predictor read cold.
    pub fn record_cold_mispredicted(&self) {
        self.totals.lock().turns.cold_mispredicted += 1;
    }

    /// What sync would have done to a request observe mode forwarded untouched (the shadow
    /// run), and what computing it cost off the request path.
    pub fn record_projection(&self, report: &RunReport, discarded: &[Discarded], took: Duration) {
        debug_assert!(
            report.is_counted(),
            "a run recorded before its deferred counts were counted"
        );
        let mut t = self.totals.lock();
        t.observe_projections += 1;
        t.observe_us += micros(took);
        t.potential.add(report, discarded);
    }

    /// A request forwarded untouched: a body sluice could not parse, or a route it does not
    /// rewrite. `unparsed` separates the first kind.
    pub fn record_passthrough(&self, unparsed: bool) {
        let mut t = self.totals.lock();
        t.requests += 1;
        t.passthrough_requests += 1;
        t.unparsed_requests += u64::from(unparsed);
    }

    /// A request forwarded untouched on purpose: counted on the pseudo-component `bypass`
    /// with the reason as its gate (`header`, `agent_compaction`).
    pub fn record_bypass(&self, reason: &'static str) {
        let mut t = self.totals.lock();
        t.requests += 1;
        t.bypassed_requests += 1;
        let entry = t.live.components.entry("bypass").or_default();
        entry.runs += 1;
        *entry.gates.entry(reason.to_owned()).or_default() += 1;
    }

    /// A request forwarded unmodified because the state store could not be used: counted on
    /// the pseudo-component `store` under `reason` (`lease_timeout`, `store_unavailable`).
    pub fn record_store_skip(&self, reason: &'static str) {
        let mut t = self.totals.lock();
        t.requests += 1;
        t.store_skipped_requests += 1;
        let entry = t.live.components.entry("store").or_default();
        entry.runs += 1;
        *entry.gates.entry(reason.to_owned()).or_default() += 1;
    }

    pub fn record_upstream(&self, took: Duration, failed: bool) {
        let mut t = self.totals.lock();
        t.upstream_us += micros(took);
        t.upstream_n += 1;
        t.upstream_latency.observe(took);
        t.upstream_errors += u64::from(failed);
    }

    /// What the upstream made of a request that ran the pipeline, with what it adds to the net
    /// saving (`modes::turn::Forward::saving`). One it completed (a status below 400) adds to
    /// the headline. One it did not (a transport error, or an error status) was billed nothing,
    /// so its cuts saved nothing, and the agent's retry is counted when it completes: it is
    /// counted apart (`failed_requests_excluded`). A request whose client left before the
    /// upstream answered is in neither.
    pub fn record_outcome(&self, saving: &NetSaving, completed: bool) {
        let mut t = self.totals.lock();
        if completed {
            t.completed.add(saving);
        } else {
            t.failed_requests += 1;
            t.failed_saved_tokens += saving.cut_tokens();
        }
    }

    /// What a provider's report (a settled turn) or an expand round added to the billed saving
    /// (`modes::turn::Settlement`, `ExpandOutcome`). A request the upstream did not complete
    /// reports no usage, so it adds nothing here either.
    pub fn record_billed(&self, billed: &BilledSaving) {
        if *billed != BilledSaving::default() {
            self.totals.lock().billed.add(billed);
        }
    }

    pub fn record_stream(&self, relay: StreamRelay, ttfb: Option<Duration>) {
        let mut t = self.totals.lock();
        match relay {
            StreamRelay::Streamed => t.sse_streamed += 1,
            StreamRelay::Buffered => t.sse_buffered += 1,
        }
        if let Some(ttfb) = ttfb {
            t.sse_ttfb_us += micros(ttfb);
            t.sse_ttfb_n += 1;
            t.ttfb.observe(ttfb);
        }
    }

    /// One expand round: how many ids were restored, how many missed, the tokens the restored
    /// originals cost (a premature offload: saved then paid back), and the prompt tokens the
    /// round sent upstream again.
    pub fn record_expand_round(
        &self,
        restored: u64,
        missed: u64,
        wasted_tokens: u64,
        reread_tokens: u64,
    ) {
        let mut t = self.totals.lock();
        t.expand_rounds += 1;
        t.restorations += restored;
        t.expand_misses += missed;
        t.wasted_tokens += wasted_tokens;
        t.expand_reread_tokens += reread_tokens;
    }

    /// A request on a rewritten route of `dialect` (`Dialect::as_str`), counted before anything
    /// else is done with it.
    pub fn record_dialect(&self, dialect: &'static str) {
        *self
            .totals
            .lock()
            .requests_by_dialect
            .entry(dialect)
            .or_default() += 1;
    }

    /// A turn whose lossy offloads were withheld: the model had no way to call the expand tool.
    pub fn record_way_back_withheld(&self, reason: &'static str) {
        *self
            .totals
            .lock()
            .way_back_withheld
            .entry(reason)
            .or_default() += 1;
    }

    /// A session's cost guard backed off (`cache_misses`, `expand_rounds`).
    pub fn record_cost_guard_backoff(&self, reason: &'static str) {
        *self
            .totals
            .lock()
            .cost_guard_backoffs
            .entry(reason)
            .or_default() += 1;
    }

    /// A request forwarded untouched, by why (`unparsed_not_json`, `header`, ...).
    pub fn record_untouched(&self, reason: &'static str) {
        *self.totals.lock().untouched.entry(reason).or_default() += 1;
    }

    /// Wire entries a compacted request carried that sluice could not read.
    pub fn record_opaque(&self, entries: u64) {
        if entries > 0 {
            self.totals.lock().opaque_entries += entries;
        }
    }

    /// A response the expand loop could not read, relayed untouched.
    pub fn record_expand_unread(&self, reason: &'static str) {
        *self.totals.lock().expand_unread.entry(reason).or_default() += 1;
    }

    /// Tokens the named components saved, cumulative (the cheap model's share, say).
    pub fn saved_tokens_by(&self, components: &[&str]) -> u64 {
        let t = self.totals.lock();
        components
            .iter()
            .filter_map(|name| t.live.components.get(name))
            .map(|c| c.saved_tokens)
            .sum()
    }

    /// The `/stats` document: the scalar rows of [`FIELDS`], then the structured parts.
    pub fn to_json(
        &self,
        mode: &str,
        observe: Option<PoolStats>,
        sessions: Option<SessionStats>,
    ) -> Value {
        let t = self.totals.lock();
        let live = &t.live;
        let top_passthrough: Vec<&str> = live
            .components
            .iter()
            .filter(|(_, c)| c.runs > 0 && c.mutated == 0)
            .map(|(n, _)| *n)
            .collect();
        let mut discarded: Vec<(&str, u64)> = live
            .components
            .iter()
            .filter(|(_, c)| c.discarded_changes > 0)
            .map(|(n, c)| (*n, c.discarded_changes))
            .collect();
        discarded.sort_by_key(|d| std::cmp::Reverse(d.1));
        let mut object = Map::new();
        table::write_json(FIELDS, &*t, &mut object);
        let notice = if mode == "observe" {
            "observe mode: requests are forwarded untouched; potential_* fields show what sync would have saved"
        } else {
            ""
        };
        for (key, value) in [
            ("components", json!(live.components_json())),
            ("top_passthrough", json!(top_passthrough)),
            (
                "top_discarded",
                json!(discarded.iter().map(|(n, _)| *n).collect::<Vec<_>>()),
            ),
            ("mode", json!(mode)),
            ("sync_enforced", json!(mode == "sync")),
            ("observe_notice", json!(notice)),
            ("potential_components", json!(t.potential.components_json())),
            ("observe_queue", json!(observe.unwrap_or_default())),
            ("sessions", json!(sessions.unwrap_or_default())),
            ("way_back_withheld", json!(t.way_back_withheld)),
            ("requests_by_dialect", json!(t.requests_by_dialect)),
            ("expand_unread", json!(t.expand_unread)),
            ("cost_guard_backoffs", json!(t.cost_guard_backoffs)),
            ("untouched", json!(t.untouched)),
        ] {
            object.insert(key.to_owned(), value);
        }
        Value::Object(object)
    }

    /// The `/metrics` document, Prometheus text format. Labels are fixed sets (component and
    /// gate names compiled into sluice), never a session id or a model string.
    pub fn to_prometheus(&self) -> String {
        let t = self.totals.lock();
        let mut out = String::new();
        table::write_prometheus(FIELDS, &*t, &mut out);
        for (name, help, label, values) in [
            (
                "cg_way_back_withheld_total",
                "Turns run without lossy offloads: the model could not call the expand tool.",
                "reason",
                &t.way_back_withheld,
            ),
            (
                "cg_requests_by_dialect_total",
                "Requests on the rewritten routes, by the dialect the route speaks.",
                "dialect",
                &t.requests_by_dialect,
            ),
            (
                "cg_expand_unread_total",
                "Responses the expand loop could not read, relayed untouched.",
                "reason",
                &t.expand_unread,
            ),
            (
                "cg_untouched_requests_total",
                "Requests forwarded untouched, by reason.",
                "reason",
                &t.untouched,
            ),
            (
                "cg_cost_guard_backoffs_total",
                "Sessions whose rewrites cost more than they saved, by the provider's reports, backed off (cache_misses: every tool output whole; expand_rounds: only cuts that pay for a round).",
                "reason",
                &t.cost_guard_backoffs,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (value_label, n) in values {
                let _ = writeln!(out, "{name}{{{label}=\"{value_label}\"}} {n}");
            }
        }
        t.added_latency.write(
            &mut out,
            "cg_added_latency_seconds",
            "Time sluice spent rewriting a request.",
        );
        t.upstream_latency.write(
            &mut out,
            "cg_upstream_latency_seconds",
            "Time to upstream response headers.",
        );
        t.ttfb.write(
            &mut out,
            "cg_sse_ttfb_seconds",
            "Time to the first byte relayed of a streamed response.",
        );
        write_component_series(&mut out, &t.live.components);
        out
    }
}

/// The per-component series of `/metrics`: runs by outcome, declines by gate, unique savings.
fn write_component_series(out: &mut String, components: &BTreeMap<&'static str, ComponentTotals>) {
    let counter = |out: &mut String, name: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    };
    let runs = "cg_component_runs_total";
    counter(
        out,
        runs,
        "Component runs by outcome (nested, not disjoint).",
    );
    for (name, c) in components {
        for (outcome, n) in [
            ("ran", c.runs),
            ("mutated", c.mutated),
            ("acted", c.acted),
            ("reverted", c.reverted),
            ("discarded", c.discarded_changes),
        ] {
            let _ = writeln!(
                out,
                "{runs}{{component=\"{name}\",outcome=\"{outcome}\"}} {n}"
            );
        }
    }
    let declines = "cg_component_gate_declines_total";
    counter(
        out,
        declines,
        "Items a component declined, by named reason.",
    );
    for (name, c) in components {
        for (gate, n) in &c.gates {
            let _ = writeln!(
                out,
                "{declines}{{component=\"{name}\",gate=\"{gate}\"}} {n}"
            );
        }
    }
    let unique = "cg_component_saved_tokens_unique_total";
    counter(out, unique, "Unique content tokens saved per component.");
    for (name, c) in components {
        let n = c.saved_tokens_unique;
        let _ = writeln!(out, "{unique}{{component=\"{name}\"}} {n}");
    }
}

/// cumulative ÷ unique, 0 when nothing unique was saved (never a made-up 1.0 or infinity).
fn ratio(cumulative: u64, unique: u64) -> f64 {
    if unique == 0 {
        0.0
    } else {
        cumulative as f64 / unique as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::pipeline::{ComponentReport, Kind, MessageSaving};

    fn report(saved_key: u64, saved: usize) -> RunReport {
        RunReport {
            tokens_before: 1000,
            tokens_after: 1000 - saved,
            components: vec![ComponentReport {
                name: "collapse",
                kind: Kind::Offload,
                tokens_before: 1000,
                tokens_after: 1000 - saved,
                saved_tokens: saved,
                mutated: true,
                acted: true,
                reverted: None,
                gates: [("below_max_tokens", 2)].into_iter().collect(),
                changed: vec![3],
                stashed: vec!["abc".into()],
                savings: vec![MessageSaving {
                    index: 3,
                    content_key: saved_key,
                    saved_tokens: saved,
                }],
                frozen: FrozenCounts {
                    hits: 2,
                    misses: 1,
                    dropped: 1,
                    repaired: 1,
                },
                duration_us: 1500,
            }],
            duration_us: 2000,
            pending: None,
        }
    }

    /// A request that ran the pipeline and that its upstream completed, as the proxy records
    /// one: the run, then the upstream's outcome.
    fn completed(stats: &Stats, report: &RunReport, added_ms: u64) {
        stats.record_run(report, &[], Duration::from_millis(added_ms));
        stats.record_outcome(&saving(report), true);
    }

    fn saving(report: &RunReport) -> NetSaving {
        NetSaving {
            tokens_before: report.tokens_before as u64,
            tokens_after: report.tokens_after as u64,
            ..NetSaving::default()
        }
    }

    #[test]
    fn unique_savings_count_resent_content_once() {
        let stats = Stats::new();
        // The same message saved on three turns, then a new one.
        for _ in 0..3 {
            completed(&stats, &report(7, 100), 2);
        }
        completed(&stats, &report(8, 50), 4);
        let doc = stats.to_json("sync", None, None);
        assert_eq!(doc["saved_tokens"], 350);
        assert_eq!(doc["saved_tokens_unique"], 150);
        assert_eq!(doc["savings_pct"], 8.75);
        assert_eq!(doc["cg_added_ms_avg"], 2.5);
        let c = &doc["components"]["collapse"];
        assert_eq!(
            (c["runs"].as_u64(), c["acted"].as_u64()),
            (Some(4), Some(4))
        );
        assert_eq!(c["gates"]["below_max_tokens"], 8);
        assert_eq!(c["verdict"], "acted");
        let ratio = c["overcount_ratio"].as_f64().unwrap();
        assert!((ratio - 350.0 / 150.0).abs() < 1e-9);
        // Four runs, each with 2 hits, 1 miss and one dropped freeze re-derived.
        assert_eq!(
            (doc["frozen_hits"].as_u64(), doc["frozen_dropped"].as_u64()),
            (Some(8), Some(4))
        );
        assert_eq!(doc["frozen_flips"], 0);
    }

    #[test]
    fn the_net_headline_charges_the_prompt_each_round_rereads() {
        let stats = Stats::new();
        for _ in 0..4 {
            completed(&stats, &report(7, 100), 2);
        }
        // 400 saved of 4000; one round restored 100 and re-read a 3,000-token prompt.
        stats.record_expand_round(1, 0, 100, 3000);
        let doc = stats.to_json("sync", None, None);
        assert_eq!(doc["expand_reread_tokens"], 3000);
        assert_eq!(doc["net_savings_pct"], 0.0);
        assert_eq!(
            doc["savings_pct"], 0.0,
            "context-guru's name, the same figure"
        );
        assert_eq!(doc["savings_pct_gross"], 10.0, "before expand rounds");
        stats.record_expand_round(1, 0, 0, 1000);
        let doc = stats.to_json("sync", None, None);
        assert_eq!(
            doc["net_savings_pct"], -2.5,
            "below zero when the way back costs more"
        );
    }

    #[test]
    fn the_headline_is_net_of_what_expand_rounds_sent_back() {
        let stats = Stats::new();
        // 4 runs of 1000 tokens, 350 saved; expand rounds then re-sent 224 of them.
        for _ in 0..3 {
            completed(&stats, &report(7, 100), 2);
        }
        completed(&stats, &report(8, 50), 4);
        stats.record_expand_round(2, 0, 224, 0);
        stats.record_way_back_withheld("tool_choice_named");
        stats.record_dialect("gemini");
        let doc = stats.to_json("sync", None, None);
        assert_eq!(doc["savings_pct_gross"], 8.75);
        assert_eq!(doc["savings_pct"], 100.0 * 126.0 / 4000.0);
        assert_eq!(doc["net_savings_pct"], doc["savings_pct"]);
        assert_eq!(doc["adjusted_saved"], 126);
        assert_eq!(doc["way_back_withheld"]["tool_choice_named"], 1);
        let metrics = stats.to_prometheus();
        assert!(metrics.contains("cg_way_back_withheld_total{reason=\"tool_choice_named\"} 1"));
        assert_eq!(doc["requests_by_dialect"]["gemini"], 1);
        assert!(metrics.contains("cg_requests_by_dialect_total{dialect=\"gemini\"} 1"));
    }

    #[test]
    fn a_request_that_failed_upstream_adds_nothing_to_the_headline() {
        let stats = Stats::new();
        completed(&stats, &report(7, 100), 2);
        let before = stats.to_json("sync", None, None);
        // The upstream could not be reached, or answered an error: nothing was billed.
        let failed = report(8, 900);
        stats.record_run(&failed, &[], Duration::from_millis(2));
        stats.record_outcome(&saving(&failed), false);
        let doc = stats.to_json("sync", None, None);
        for key in [
            "net_savings_pct",
            "savings_pct",
            "savings_pct_gross",
            "net_saved_tokens",
        ] {
            assert_eq!(doc[key], before[key], "{key}");
        }
        assert_eq!(doc["net_savings_pct"], 10.0);
        assert_eq!(doc["failed_requests_excluded"], 1);
        assert_eq!(doc["failed_saved_tokens_excluded"], 900);
        assert_eq!(
            doc["saved_tokens"], 1000,
            "the pipeline's own count keeps it"
        );
        let metrics = stats.to_prometheus();
        assert!(metrics.contains("cg_net_savings_ratio 0.1\n"), "{metrics}");
        assert!(metrics.contains("cg_failed_requests_excluded_total 1\n"));
    }

    #[test]
    fn the_declaration_is_charged_and_a_loss_reads_negative() {
        let stats = Stats::new();
        // Nothing cut, the expand tool declared: the session cost more than without sluice.
        let idle = report(7, 0);
        stats.record_run(&idle, &[], Duration::from_millis(1));
        stats.record_outcome(
            &NetSaving {
                declared_tokens: 4,
                ..saving(&idle)
            },
            true,
        );
        let doc = stats.to_json("sync", None, None);
        assert_eq!(doc["net_savings_pct"], -0.4);
        assert_eq!(
            doc["savings_pct_gross"], -0.4,
            "the declaration is not a round"
        );
        assert_eq!(doc["expand_declared_tokens"], 4);
        assert_eq!(doc["net_saved_tokens"], -4.0);
    }

    #[test]
    fn turn_totals_reach_stats_and_metrics() {
        let stats = Stats::new();
        let turn = |cold, known, diverged, amortized, restored| crate::tracker::TurnFacts {
            cold,
            known,
            diverged,
            amortized,
            restored,
            ..crate::tracker::TurnFacts::default()
        };
        stats.record_turn(&turn(false, false, false, false, 0));
        stats.record_turn(&turn(true, true, false, false, 0));
        stats.record_turn(&turn(false, true, true, true, 2));
        stats.record_cold_mispredicted();
        let doc = stats.to_json("sync", None, None);
        assert_eq!(doc["tracked_turns"], 3);
        assert_eq!(doc["cold_turns"], 1);
        assert_eq!(doc["unknown_boundary_turns"], 1);
        assert_eq!(doc["compaction_resets"], 1);
        assert_eq!(doc["cold_mispredicted"], 1);
        assert_eq!(doc["amortized_rewrites"], 1);
        assert_eq!(doc["restored_outputs"], 2);
        assert!(stats.to_prometheus().contains("cg_cold_turns_total 1"));
        assert!(
            stats
                .to_prometheus()
                .contains("cg_restored_outputs_total 2")
        );
    }

    #[test]
    fn every_key_and_series_is_defined_once() {
        let mut keys = HashSet::new();
        let mut series: Vec<&str> = Vec::new();
        for field in FIELDS {
            if let Some(key) = field.json {
                assert!(keys.insert(key), "`{key}` has two rows");
            }
            if let Some(name) = field.metric {
                // Rows of one series stand together, so its help and type are written once.
                if series.last() != Some(&name) {
                    assert!(!series.contains(&name), "`{name}` is split");
                    series.push(name);
                }
            }
        }
        let doc = Stats::new().to_json("sync", None, None);
        for key in keys {
            assert!(doc.get(key).is_some(), "`{key}` missing from /stats");
        }
        let text = Stats::new().to_prometheus();
        for name in series {
            assert_eq!(
                text.matches(&format!("# TYPE {name} ")).count(),
                1,
                "{name}"
            );
        }
    }

    #[test]
    fn ratios_without_data_are_zero() {
        let doc = Stats::new().to_json("sync", None, None);
        assert_eq!(doc["savings_pct"], 0.0);
        assert_eq!(doc["overcount_ratio"], 0.0);
        assert_eq!(doc["sse_buffered_pct"], 0.0);
    }

    #[test]
    fn prometheus_has_fixed_labels_only() {
        let stats = Stats::new();
        stats.record_run(&report(1, 10), &[], Duration::from_millis(1));
        let text = stats.to_prometheus();
        assert!(text.contains("cg_requests_total 1"));
        // 1 ms lands in the le=0.001 bucket and every bucket above it.
        assert!(
            text.contains("cg_added_latency_seconds_bucket{le=\"0.0005\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("cg_added_latency_seconds_bucket{le=\"0.001\"} 1"),
            "{text}"
        );
        assert!(text.contains("cg_added_latency_seconds_bucket{le=\"+Inf\"} 1"));
        assert!(text.contains("cg_added_latency_seconds_count 1"));
        assert!(
            text.contains("cg_component_runs_total{component=\"collapse\",outcome=\"acted\"} 1")
        );
        assert!(text.contains(
            "cg_component_gate_declines_total{component=\"collapse\",gate=\"below_max_tokens\"} 2"
        ));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                !line.contains("session") && !line.contains("model"),
                "{line}"
            );
        }
    }
}
