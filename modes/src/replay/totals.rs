//! Sums over replayed sessions: the headline, billed input saved, net (`engine::savings`, the
//! ledger each session's cost guard keeps from the provider's reports, the figure `/stats`
//! reports live); the same change billed on both arms of the cost model beside it, as a check;
//! content tokens saved; recall; and the sessions sluice cost more than it saved, with why.

use std::collections::{BTreeMap, BTreeSet};

use engine::savings::{BilledSaving, NetSaving};
use serde::Serialize;

use super::{Bill, Prices, Recall, SessionReport};

/// Sums over sessions. Every savings figure reads positive for a saving and negative for a
/// loss.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Recorded conversations ([`recording`]): a run recorded in two dialects is one recording
    /// and two sessions.
    pub recordings: usize,
    /// Sessions by the dialect they were replayed in.
    pub dialects: BTreeMap<String, usize>,
    pub sessions: usize,
    pub turns: usize,
    /// The net saving's sums, as `/stats` keeps them: the turns that ran the pipeline, and
    /// the expand rounds their answers needed.
    pub net: NetSaving,
    /// Content tokens saved, net: the same definition as `/stats` `net_savings_pct` (the
    /// pipeline's figure; the headline is `billed_savings_pct`).
    pub net_savings_pct: f64,
    /// Saved before expand rounds (the declaration still charged).
    pub savings_pct_gross: f64,
    /// The billed saving's sums, as `/stats` keeps them: each turn the cost model's report
    /// settled, each expand round.
    pub billed: BilledSaving,
    /// The headline, billed input saved, net: what the provider billed against what it would
    /// have billed without sluice, read from each turn's report by the session's cost guard
    /// ([`BilledSaving`]), expand rounds included; the same code and figure as `/stats`.
    pub billed_savings_pct: f64,
    /// The same before expand rounds.
    pub billed_savings_pct_gross: f64,
    pub baseline: Bill,
    pub sluice: Bill,
    pub baseline_cost: f64,
    pub sluice_cost: f64,
    /// The check on the headline: both arms billed on the prompt-cache cost model, the
    /// requests without sluice with their own cache use (which only replay can bill), expand
    /// rounds included. It differs from the ledger's figure where the ledger prices a cut at
    /// the turn's own rates and the baseline's cache would have been read differently.
    pub two_arm_savings_pct: f64,
    /// The same before expand rounds.
    pub two_arm_savings_pct_gross: f64,
    /// Cache writes against no compaction (a change, not a saving: more writes read
    /// positive).
    pub cache_write_change_pct: f64,
    pub flips: usize,
    pub frozen_flips: u64,
    pub recall: Recall,
    /// Identifiers the answers used that were visible or one expand away.
    pub recall_pct: f64,
    /// Identifiers the answers used that were visible in the forwarded body itself.
    pub visible_recall_pct: f64,
    /// Expand rounds the answers needed, and their bill.
    pub expand_rounds: usize,
    /// Of those, rounds that expanded only markers already expanded in their session.
    pub expand_repeats: usize,
    pub expand: Bill,
    pub expand_cost: f64,
    /// Sessions whose billed input saved, net, is below zero: sluice cost them more than it
    /// saved.
    pub losing_sessions: usize,
    /// Their share of the sessions, in percent.
    pub losing_sessions_pct: f64,
    /// Those sessions by why they lost ([`Loss::label`]).
    pub losses: BTreeMap<&'static str, LossSummary>,
    /// The session with the lowest billed input saved, net, and that figure.
    pub worst_session: Option<(String, f64)>,
    /// The keep-alive's pings, replayed with `cache.keepalive` (`crate::keepalive`).
    pub keepalive: Option<crate::keepalive::Ledger>,
    /// What they spared less what they cost, in input-token equivalents.
    pub keepalive_net: f64,
    /// The headline with the keep-alive: a turn a ping kept reports its prefix read, so the
    /// headline's own baseline prices it warm; without sluice it would have been written. So
    /// the writes spared go on both sides: (net + spared − spent) ÷ (baseline + spared).
    pub billed_savings_pct_with_keepalive: f64,
}

/// The sessions that lost for one reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LossSummary {
    pub sessions: usize,
    /// Their median billed input saved, net (below zero).
    pub median_pct: f64,
    /// The lowest of them.
    pub worst_pct: f64,
}

/// Why a session cost more than it saved on the cost model: before expand rounds, or only once
/// they are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// It lost before any expand round: the expand tool's declaration, sent on every turn of
    /// an agent a lossy pipeline may cut, and the cache writes cuts cost, came to more than the
    /// cuts saved (a session with little or nothing to cut).
    Declaration,
    /// The cuts paid for themselves, and expand rounds (the prompt re-read, the originals
    /// written back) turned the saving into a loss.
    ExpandRounds,
}

impl Loss {
    /// Why a session whose billed saving (`net`, rounds counted) is below zero lost, from the
    /// same figure before rounds (`gross`).
    pub fn of(gross: f64) -> Loss {
        if gross < 0.0 {
            Loss::Declaration
        } else {
            Loss::ExpandRounds
        }
    }

    /// Its key in [`Totals::losses`].
    pub fn label(self) -> &'static str {
        match self {
            Loss::Declaration => "declaration",
            Loss::ExpandRounds => "expand_rounds",
        }
    }

    /// What the report says of it.
    pub fn why(label: &str) -> &'static str {
        match label {
            "declaration" => {
                "they lost before any expand round: the expand tool's declaration, sent on every turn, cost more than the cuts saved"
            }
            _ => {
                "expand rounds (the prompt re-read, the originals written back) cost more than the cuts saved"
            }
        }
    }
}

/// The recording a session came from. A run's folder holds its conversation once per dialect
/// (`openai.json`, `anthropic.json`, `turns.openai.jsonl`, each maybe gzipped), each replayed as
/// a session of its own; any other file is a recording of its own.
pub fn recording(name: &str) -> &str {
    let path = std::path::Path::new(name);
    let file = path.file_name().and_then(|f| f.to_str()).unwrap_or(name);
    let stem = file.strip_suffix(".gz").unwrap_or(file);
    let stem = stem.strip_prefix("turns.").unwrap_or(stem);
    let stem = stem
        .strip_suffix(".jsonl")
        .or_else(|| stem.strip_suffix(".json"))
        .unwrap_or(stem);
    let per_dialect = matches!(stem, "openai" | "anthropic" | "responses" | "gemini");
    match path.parent().and_then(|p| p.to_str()) {
        Some(folder) if per_dialect && !folder.is_empty() => folder,
        _ => name,
    }
}

/// A session's own net saving: the sum of its turns'.
pub fn session_net(session: &SessionReport) -> NetSaving {
    let mut net = NetSaving::default();
    for turn in &session.turns {
        net.add(&turn.saving);
    }
    net
}

/// Sums sessions.
pub fn totals(sessions: &[SessionReport], prices: &Prices) -> Totals {
    let mut t = Totals {
        sessions: sessions.len(),
        ..Totals::default()
    };
    let mut recordings = BTreeSet::new();
    for s in sessions {
        recordings.insert(recording(&s.name));
        *t.dialects.entry(s.dialect.clone()).or_default() += 1;
        t.turns += s.turns.len();
        t.frozen_flips += s.frozen_flips;
        if let Some(ledger) = &s.keepalive {
            t.keepalive.get_or_insert_default().add(ledger);
        }
        for turn in &s.turns {
            t.net.add(&turn.saving);
            t.billed.add(&turn.billed);
            t.baseline.add(&turn.baseline);
            t.sluice.add(&turn.sluice);
            t.flips += turn.flipped_messages;
            t.recall.add(&turn.recall);
            t.expand.add(&turn.expand);
            t.expand_rounds += turn.expand_rounds;
            t.expand_repeats += turn.expand_repeats;
        }
    }
    t.recordings = recordings.len();
    t.net_savings_pct = t.net.net_pct();
    t.savings_pct_gross = t.net.gross_pct();
    t.billed_savings_pct = t.billed.net_pct();
    t.billed_savings_pct_gross = t.billed.gross_pct();
    t.baseline_cost = t.baseline.cost(prices);
    t.sluice_cost = t.sluice.cost(prices);
    t.expand_cost = t.expand.cost(prices);
    t.two_arm_savings_pct_gross = saved(t.sluice_cost, t.baseline_cost);
    t.two_arm_savings_pct = saved(t.sluice_cost + t.expand_cost, t.baseline_cost);
    let (writes, baseline_writes) = (t.sluice.cache_write as f64, t.baseline.cache_write as f64);
    t.cache_write_change_pct = if baseline_writes == 0.0 {
        0.0
    } else {
        100.0 * (writes - baseline_writes) / baseline_writes
    };
    let keepalive = t.keepalive.unwrap_or_default();
    let spared = keepalive.saved(prices.read, prices.write);
    t.keepalive_net = spared - keepalive.spent(prices.read);
    t.billed_savings_pct_with_keepalive = saved(
        t.billed.baseline() + spared - t.billed.net() - t.keepalive_net,
        t.billed.baseline() + spared,
    );
    t.recall_pct = 100.0 * t.recall.share();
    t.visible_recall_pct = 100.0 * t.recall.visible_share();
    losses(&mut t, sessions);
    t
}

/// The sessions that lost (billed saving below zero, rounds counted), by why, and the worst
/// session.
fn losses(t: &mut Totals, sessions: &[SessionReport]) {
    let mut by_cause: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for s in sessions {
        let billed = session_billed(s);
        let (net, gross) = (billed.net_pct(), billed.gross_pct());
        if t.worst_session
            .as_ref()
            .is_none_or(|(_, worst)| net < *worst)
        {
            t.worst_session = Some((s.name.clone(), net));
        }
        if net < 0.0 {
            by_cause
                .entry(Loss::of(gross).label())
                .or_default()
                .push(net);
        }
    }
    t.losing_sessions = by_cause.values().map(Vec::len).sum();
    t.losing_sessions_pct = if sessions.is_empty() {
        0.0
    } else {
        100.0 * t.losing_sessions as f64 / sessions.len() as f64
    };
    t.losses = by_cause
        .into_iter()
        .map(|(cause, mut pcts)| {
            pcts.sort_by(f64::total_cmp);
            let summary = LossSummary {
                sessions: pcts.len(),
                median_pct: pcts[pcts.len() / 2],
                worst_pct: pcts[0],
            };
            (cause, summary)
        })
        .collect();
}

/// A session's billed saving: the sum of its turns' (the headline's, per session).
pub fn session_billed(session: &SessionReport) -> BilledSaving {
    let mut billed = BilledSaving::default();
    for turn in &session.turns {
        billed.add(&turn.billed);
    }
    billed
}

/// Savings positive: the share of `old` that `new` did not pay (0 without data).
fn saved(new: f64, old: f64) -> f64 {
    if old == 0.0 {
        0.0
    } else {
        100.0 * (old - new) / old
    }
}
