//! The cost guard (issue #22): per session, whether compaction is paying, judged from what the
//! provider reports, and a back-off when it is not.
//!
//! Each turn leaves a numbered pending entry: the content tokens its rewrite removed (split into
//! those on messages new to the provider's cache, at or past the tracker's boundary, and those
//! already in it; all new on a turn that did not read warm), whether the turn read warm, and
//! whether sluice re-wrote part of the cached prefix (`cache.amortize`'s depth re-write: by
//! design the only way sluice changes bytes the provider cached). When the provider's usage for
//! that same request arrives (`cache_read_input_tokens`, `cache_creation_input_tokens`,
//! `cached_tokens`), the entry is settled into a ledger in input-token equivalents (fresh input
//! 1, cache read 0.1, cache write 1.25, so no model's list price is needed); a report for
//! another turn (a bypassed one, or one that arrives after the next turn began) settles nothing:
//! - **saved**: removed tokens already cached would have been read (0.1 each); newly removed
//!   ones would have been written (1.25, or 1 where the provider bills no writes). A floor:
//!   later turns' re-reads are not counted.
//! - **missed**: on a warm turn that re-wrote part of the cached prefix, on a transcript that did
//!   not diverge, the provider should read back at least what the previous report said was
//!   cached (read plus written). Whatever it read less was paid again, at the write price
//!   instead of the read price: what the re-write cost, measured rather than predicted. A miss
//!   sluice did not cause (an eviction, a model switch, the agent compacting its history) is
//!   not counted.
//! - **expand**: each expand round re-reads the forwarded prompt (0.1 a token) and writes the
//!   originals it brings back (1.25).
//!
//! After [`MIN_TURNS`] settled turns, a session whose costs (missed plus expand) exceed what it
//! saved, by at least [`MIN_LOSS`], backs off, from the next new message on (the session's
//! frontier: the most messages any of its requests had), so nothing already forwarded changes
//! and the cached prefix never moves because of it. How far depends on the reason, the larger
//! cost:
//! - `cache_misses`: every tool output is lossless (the `EVERY_TOOL` entry of
//!   `lossless_tools`; offloaders' cuts are put back with skip reason `cost_guard`, lossless
//!   repacking still runs; `summarize` keeps serving the checkpoint it has and rolls no new one).
//! - `expand_rounds`: a cut stays only where it would pay for a round on its own (the session's
//!   [`CutFloor`]; skip reason `below_cost_floor`). A round re-reads the whole prompt, 0.1 a
//!   token, and a cut of `n` tokens saves at least their write, 1.25 each (1 where the
//!   provider bills no writes); so the floor is 0.1 / 1.25 (or 0.1) of the prompt of the
//!   session's latest round when it backed off: the round's own count, which a provider's
//!   cache report does not give where nothing was cached. It is
//!   fixed from then on: a deterministic component re-decides every output on every turn, and a
//!   floor that rose with the prompt would put back a cut the provider has cached.
//!   Stopping every cut instead was measured: on Claude Code's long sessions the outputs that
//!   matter most come late and are large, and they paid for their rounds where the early small
//!   cuts had not (`docs/performance.md`, issue #33).
//!
//! A backed-off session stays backed off.

use engine::pipeline::CutFloor;
use engine::savings::{BilledSaving, InputBill};
use serde::{Deserialize, Serialize};

/// Input-token equivalents of each tier (fresh input is 1).
const READ: f64 = engine::savings::READ_PRICE;
const WRITE: f64 = engine::savings::WRITE_PRICE;
/// Settled turns before the guard judges a session.
pub const MIN_TURNS: u32 = 3;
/// How far costs must exceed savings (input-token equivalents) before a session backs off: a
/// few hundred tokens is noise (a provider rounding its cached prefix to 128 tokens).
pub const MIN_LOSS: f64 = 2_000.0;

/// Why a session backed off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackOff {
    /// The provider read back less than it should have on turns sluice changed.
    CacheMisses,
    /// Expand rounds cost more than the cuts saved.
    ExpandRounds,
}

impl BackOff {
    /// How `/stats` and `/metrics` name it.
    pub fn label(self) -> &'static str {
        match self {
            BackOff::CacheMisses => "cache_misses",
            BackOff::ExpandRounds => "expand_rounds",
        }
    }
}

/// A turn waiting for its provider report.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Pending {
    /// The turn's number: only the report for this request settles it.
    seq: u64,
    /// Removed tokens on messages the provider has cached already.
    saved_cached: u64,
    /// Removed tokens on messages new to its cache.
    saved_new: u64,
    warm: bool,
    rewrote_prefix: bool,
    #[serde(default)]
    restored_tokens: u64,
}

/// One session's ledger (see the module docs), saved with the session.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CostGuard {
    /// The number the next turn gets.
    next_turn: u64,
    pending: Option<Pending>,
    /// What the previous settled turn left cached (read plus written).
    last_cached: Option<u64>,
    pub settled_turns: u32,
    pub saved: f64,
    pub missed: f64,
    pub expand: f64,
    pub backed_off: Option<BackOff>,
    /// An `expand_rounds` back-off's floor (see the module docs).
    #[serde(default)]
    floor: Option<CutFloor>,
    /// The prompt the latest expand round re-read, in tokens.
    #[serde(default)]
    round_prompt: u64,
    /// The provider bills cache writes (its last report had a written figure).
    #[serde(default)]
    bills_writes: bool,
    /// The whole prompt of the last settled turn as the provider counted it (fresh, read and
    /// written): what an expand round after it reads again.
    #[serde(default)]
    last_prompt: u64,
    /// The session's billed saving (`engine::savings`): each settled turn's bill and what its
    /// cuts kept off it, and each expand round's cost, priced as the provider bills.
    #[serde(default)]
    pub billed: BilledSaving,
}

/// What a turn did, as the guard needs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TurnWork {
    pub saved_cached: u64,
    pub saved_new: u64,
    /// The turn read warm (an earlier turn on record, the cache not provably cold).
    pub warm: bool,
    /// sluice re-wrote part of the cached prefix on purpose (an amortized depth re-write, an
    /// output restored in place), on a transcript that extends the previous one.
    pub rewrote_prefix: bool,
    /// Tokens of the outputs this turn restored in place (see `restore`).
    pub restored_tokens: u64,
}

/// What the provider reported for a turn's request, and what sluice added to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnBill {
    pub read: u64,
    /// `None` where the provider bills no cache writes (OpenAI).
    pub written: Option<u64>,
    /// Input billed neither as a read nor as a write.
    pub fresh: u64,
    /// The expand tool's declaration sluice added to the request (part of what was billed).
    pub declared: u64,
}

impl CostGuard {
    /// Records a turn; the provider's report for the same request settles it. Returns the
    /// turn's number, which that report must carry.
    pub fn turn(&mut self, work: TurnWork) -> Option<u64> {
        let seq = self.next_turn;
        self.next_turn += 1;
        self.pending = Some(Pending {
            seq,
            saved_cached: work.saved_cached,
            saved_new: work.saved_new,
            warm: work.warm,
            rewrote_prefix: work.rewrote_prefix,
            restored_tokens: work.restored_tokens,
        });
        Some(seq)
    }

    /// Settles turn `seq` with the provider's report for it (nothing when another turn is
    /// pending). Returns the back-off when this report is the one that decided it.
    pub fn settle(&mut self, seq: u64, billed: TurnBill) -> Option<BackOff> {
        let previous = self
            .last_cached
            .replace(billed.read + billed.written.unwrap_or(0));
        self.bills_writes = billed.written.is_some();
        let bill = InputBill {
            fresh: billed.fresh,
            read: billed.read,
            written: billed.written,
        };
        self.last_prompt = bill.fresh + bill.read + bill.written.unwrap_or(0);
        let write = bill.new_price();
        // A report for a turn this guard no longer holds (another request of the session
        // took its place) goes on no ledger: what its cuts saved is unknown, and counting its
        // bill with nothing cut would understate the saving.
        let pending = self.pending.take_if(|p| p.seq == seq)?;
        let cut = pending.saved_cached as f64 * READ + pending.saved_new as f64 * write;
        let mut missed = 0.0;
        if let (true, true, Some(expected)) = (pending.warm, pending.rewrote_prefix, previous)
            && billed.read > 0
        {
            missed = expected.saturating_sub(billed.read) as f64 * (write - READ);
        }
        // Outputs restored in place are written whole where, without sluice, they would have
        // been read: the restore's own write, beside the prefix it made the provider re-write.
        if pending.warm {
            missed += pending.restored_tokens as f64 * (write - READ);
        }
        // The declaration opens the request (`tools`): read back with the prefix when the
        // request read one, else paid as new input.
        let declared_price = if billed.read > 0 { READ } else { write };
        self.billed.add(&BilledSaving {
            requests: 1,
            billed: bill.cost(),
            cut,
            declared: billed.declared as f64 * declared_price,
            missed,
            rounds: 0.0,
        });
        self.saved += cut;
        self.missed += missed;
        self.settled_turns += 1;
        self.judge()
    }

    /// One expand round: the prompt re-read, the originals written. Returns the round's
    /// billed cost, as the ledger took it.
    pub fn expand_round(&mut self, prompt_tokens: u64, restored_tokens: u64) -> BilledSaving {
        self.expand += prompt_tokens as f64 * READ + restored_tokens as f64 * WRITE;
        self.round_prompt = prompt_tokens;
        // Billed as the provider bills it: the whole prompt read again (the system prompt and
        // the tools too, which `prompt_tokens`, the content, leaves out), the originals new.
        let write = if self.bills_writes { WRITE } else { 1.0 };
        let prompt = prompt_tokens.max(self.last_prompt);
        let round = BilledSaving {
            rounds: prompt as f64 * READ + restored_tokens as f64 * write,
            ..BilledSaving::default()
        };
        self.billed.add(&round);
        round
    }

    /// The whole prompt the provider last reported (fresh, read and written), 0 before any.
    pub fn last_prompt(&self) -> u64 {
        self.last_prompt
    }

    /// Whether the provider bills cache writes (else new input is fresh).
    pub fn bills_writes(&self) -> bool {
        self.bills_writes
    }

    /// The floor under this session's cuts, set by an `expand_rounds` back-off.
    pub fn cut_floor(&self) -> Option<CutFloor> {
        self.floor
    }

    /// Sets the floor from message `from` on, at the price of one round: the latest round's
    /// prompt re-read, against what a cut saves by not being written. An earlier floor stays.
    pub(crate) fn set_floor(&mut self, from: usize) {
        let prompt = self.round_prompt.max(self.last_cached.unwrap_or(0)) as f64;
        let write = if self.bills_writes { WRITE } else { 1.0 };
        self.floor.get_or_insert(CutFloor {
            from,
            min_saved: (prompt * READ / write).ceil() as usize,
        });
    }

    pub(crate) fn judge(&mut self) -> Option<BackOff> {
        if self.backed_off.is_some() || self.settled_turns < MIN_TURNS {
            return None;
        }
        let cost = self.missed + self.expand;
        if cost - self.saved < MIN_LOSS {
            return None;
        }
        let why = if self.missed >= self.expand {
            BackOff::CacheMisses
        } else {
            BackOff::ExpandRounds
        };
        self.backed_off = Some(why);
        Some(why)
    }
}

/// What a turn did, from its run and the tracker's facts: removed tokens split at the
/// boundary (all new on a turn that did not read warm: nothing was cached for it).
pub fn work(report: &engine::pipeline::RunReport, facts: &crate::tracker::TurnFacts) -> TurnWork {
    let warm = facts.known && !facts.cold;
    let (mut cached, mut new) = (0u64, 0u64);
    for saving in report.components.iter().flat_map(|c| &c.savings) {
        if warm && saving.index < facts.mutable_from {
            cached += saving.saved_tokens as u64;
        } else {
            new += saving.saved_tokens as u64;
        }
    }
    TurnWork {
        saved_cached: cached,
        saved_new: new,
        warm,
        rewrote_prefix: facts.rewrote_prefix(),
        restored_tokens: facts.restored_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionState;

    fn warm(saved_new: u64) -> TurnWork {
        TurnWork {
            saved_cached: 0,
            saved_new,
            warm: true,
            rewrote_prefix: true,
            restored_tokens: 0,
        }
    }

    /// Records `work` and settles it with `billed`, as one request and its report.
    fn round(guard: &mut CostGuard, work: TurnWork, billed: TurnBill) -> Option<BackOff> {
        let seq = guard.turn(work).unwrap();
        guard.settle(seq, billed)
    }

    fn billed(read: u64, written: u64) -> TurnBill {
        TurnBill {
            read,
            written: Some(written),
            ..TurnBill::default()
        }
    }

    #[test]
    fn a_depth_rewrite_that_the_cache_pays_for_again_backs_off() {
        let mut guard = CostGuard::default();
        // The first report: 50,000 cached. Then each amortized re-write saves 500 new tokens
        // (625) but the provider reads back only 1,000 of what it had: 49,000 × 1.15 per turn.
        assert_eq!(round(&mut guard, warm(500), billed(0, 50_000)), None);
        assert_eq!(round(&mut guard, warm(500), billed(1_000, 49_500)), None);
        assert_eq!(
            round(&mut guard, warm(500), billed(1_000, 49_500)),
            Some(BackOff::CacheMisses)
        );
        assert!(guard.missed > guard.saved);
    }

    #[test]
    fn a_session_that_reads_its_cache_back_keeps_compacting() {
        let mut guard = CostGuard::default();
        let mut cached = 10_000;
        for _ in 0..20 {
            assert_eq!(round(&mut guard, warm(800), billed(cached, 1_200)), None);
            cached += 1_200;
        }
        assert_eq!(guard.missed, 0.0);
        assert!(guard.saved > 0.0 && guard.backed_off.is_none());
    }

    /// The headline's ledger: what the provider reported, billed at its prices; each cut at the
    /// price it would have paid on that turn; the declaration; each round's whole prompt re-read.
    #[test]
    fn the_ledger_bills_the_report_and_prices_cuts_at_the_turns_rates() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let mut guard = CostGuard::default();
        let work = TurnWork {
            saved_cached: 1_000,
            saved_new: 200,
            warm: true,
            rewrote_prefix: false,
            restored_tokens: 0,
        };
        let anthropic = TurnBill {
            read: 50_000,
            written: Some(2_000),
            fresh: 100,
            declared: 300,
        };
        round(&mut guard, work, anthropic);
        let b = guard.billed;
        assert_eq!(b.requests, 1);
        assert!(close(b.billed, 100.0 + 5_000.0 + 2_500.0), "{b:?}");
        assert!(close(b.cut, 1_000.0 * 0.1 + 200.0 * 1.25), "{b:?}");
        assert!(
            close(b.declared, 300.0 * 0.1),
            "read with the prefix: {b:?}"
        );
        // The round re-reads the whole prompt the provider last reported, not only its content.
        let cost = guard.expand_round(10_000, 400);
        assert!(
            close(cost.rounds, 52_100.0 * 0.1 + 400.0 * 1.25),
            "{cost:?}"
        );
        assert!(close(guard.billed.rounds, cost.rounds));
        assert!(guard.billed.net_pct() < guard.billed.gross_pct());

        // OpenAI bills no writes: a new cut saves fresh input, a cold declaration is fresh.
        let mut openai = CostGuard::default();
        let cold = TurnWork {
            saved_new: 500,
            ..TurnWork::default()
        };
        let report = TurnBill {
            fresh: 9_000,
            declared: 300,
            ..TurnBill::default()
        };
        round(&mut openai, cold, report);
        assert!(close(openai.billed.cut, 500.0) && close(openai.billed.declared, 300.0));
        assert!(close(openai.billed.baseline(), 9_000.0 + 500.0 - 300.0));
        // A report for a turn this guard does not hold is in no figure: its cuts are unknown.
        openai.settle(
            99,
            TurnBill {
                fresh: 1_000,
                ..TurnBill::default()
            },
        );
        assert_eq!(openai.billed.requests, 1);
        assert!(close(openai.billed.billed, 9_000.0) && close(openai.billed.cut, 500.0));
    }

    #[test]
    fn expand_rounds_that_cost_more_than_the_cuts_back_off() {
        let mut guard = CostGuard::default();
        let mut cached = 10_000;
        for _ in 0..3 {
            round(&mut guard, warm(200), billed(cached, 1_000));
            cached += 1_000;
            // Every turn the model expands: the whole 40,000-token prompt is read again.
            guard.expand_round(40_000, 300);
        }
        assert_eq!(guard.backed_off, Some(BackOff::ExpandRounds));
        assert_eq!(guard.missed, 0.0);
    }

    #[test]
    fn misses_sluice_did_not_cause_are_not_counted() {
        let mut guard = CostGuard::default();
        round(&mut guard, warm(0), billed(0, 60_000));
        for work in [
            // A cold turn: nothing was cached for it.
            TurnWork {
                warm: false,
                ..warm(0)
            },
            // A warm turn that re-wrote nothing cached: an eviction, a model switch.
            TurnWork {
                rewrote_prefix: false,
                ..warm(0)
            },
        ] {
            round(&mut guard, work, billed(5, 60_000));
        }
        // A report that read nothing at all is a cache gone, not a re-write.
        round(&mut guard, warm(0), billed(0, 60_000));
        assert_eq!(guard.missed, 0.0);
    }

    #[test]
    fn only_its_own_report_settles_a_turn() {
        let mut guard = CostGuard::default();
        let first = guard.turn(warm(100)).unwrap();
        let second = guard.turn(warm(100)).unwrap();
        // The first request's report arrives after the second turn began: it settles nothing,
        // but it is what the provider cached.
        assert_eq!(guard.settle(first, billed(0, 10_000)), None);
        assert_eq!(guard.settled_turns, 0);
        guard.settle(second, billed(10_000, 500));
        assert_eq!(guard.settled_turns, 1);
        assert_eq!(guard.missed, 0.0);
    }

    #[test]
    fn backing_off_holds_from_the_frontier() {
        let mut state = SessionState {
            seen_messages: 12,
            frontier: 42,
            ..SessionState::default()
        };
        let mut result = None;
        for _ in 0..4 {
            state.guard.expand_round(50_000, 1_000);
            let seq = state.guard.turn(warm(10)).unwrap();
            result = result.or(state.settle(seq, billed(1_000, 500)));
        }
        assert_eq!(result, Some(BackOff::ExpandRounds));
        // A shorter request came last (a sub-agent): the floor starts past the longest one,
        // at one round's re-read of its prompt (50,000 tokens × 0.1 / 1.25).
        assert_eq!(
            state.guard.cut_floor(),
            Some(CutFloor {
                from: 42,
                min_saved: 4_000
            })
        );
        // Rounds keep the cuts that pay for one; only cache misses stop every cut.
        assert!(state.lossless_tools.is_empty());
    }

    #[test]
    fn cache_misses_hold_every_output() {
        let mut state = SessionState {
            frontier: 9,
            ..SessionState::default()
        };
        let seq = state.guard.turn(warm(0)).unwrap();
        state.settle(seq, billed(0, 50_000));
        let mut result = None;
        for _ in 0..3 {
            // Each re-write was read back 40,000 short of what the last report cached.
            let seq = state.guard.turn(warm(10)).unwrap();
            result = result.or(state.settle(seq, billed(10_000, 40_000)));
        }
        assert_eq!(result, Some(BackOff::CacheMisses));
        assert_eq!(
            state.lossless_tools.get(engine::tools::EVERY_TOOL),
            Some(&9)
        );
        assert_eq!(state.guard.cut_floor(), None);
    }

    #[test]
    fn the_floor_stays_where_it_was_set() {
        let mut state = SessionState::default();
        for _ in 0..3 {
            state.guard.expand_round(100_000, 5_000);
            let seq = state.guard.turn(warm(10)).unwrap();
            state.settle(seq, billed(20_000, 5_000));
        }
        assert_eq!(state.guard.cut_floor().map(|f| f.min_saved), Some(8_000));
        state.guard.expand_round(200_000, 5_000);
        let seq = state.guard.turn(warm(10)).unwrap();
        state.settle(seq, billed(195_000, 5_000));
        assert_eq!(state.guard.cut_floor().map(|f| f.min_saved), Some(8_000));
    }

    #[test]
    fn a_provider_that_reports_no_cache_still_gets_a_floor() {
        // OpenAI bills no writes, and a prompt under its caching threshold reads nothing back:
        // the floor comes from the round's own prompt, at 0.1 against a fresh token's 1.
        let mut state = SessionState::default();
        for _ in 0..3 {
            state.guard.expand_round(30_000, 2_000);
            let seq = state.guard.turn(warm(10)).unwrap();
            state.settle(
                seq,
                TurnBill {
                    read: 0,
                    written: None,
                    ..TurnBill::default()
                },
            );
        }
        assert_eq!(state.guard.backed_off, Some(BackOff::ExpandRounds));
        assert_eq!(state.guard.cut_floor().map(|f| f.min_saved), Some(3_000));
    }
}
