//! The reply half of a turn: the provider's cache report settled into the session's tracker and
//! cost guard.

use engine::savings::BilledSaving;

use crate::guard::{BackOff, TurnBill};
use crate::session::SessionState;
use crate::tracker::{CacheUsage, LedgerTurn};

/// What settling a turn's reply decided, for the host to count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Settlement {
    /// The provider read from its cache on a turn the tracker had read cold.
    pub cold_mispredicted: bool,
    /// This report tipped the session's cost guard into backing off.
    pub backoff: Option<BackOff>,
    /// What it added to the billed saving (`engine::savings`): nothing unless it settled the
    /// turn it belongs to (a report for another turn is in no figure: its cuts are unknown).
    pub billed: BilledSaving,
}

/// What an expand round decided, for the host to count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExpandOutcome {
    /// Markers the model had expanded before.
    pub repeats: usize,
    pub backoff: Option<BackOff>,
    /// What the round added to the billed saving (its cost).
    pub billed: BilledSaving,
}

/// [`TurnService::settle`] on a state already leased (observe mode's shadow sessions, which
/// settle no ledger, pass `None`).
pub fn settle_state(
    state: &mut SessionState,
    usage: CacheUsage,
    ledger_turn: Option<LedgerTurn>,
) -> Settlement {
    let before = state.tracker.counts.cold_mispredicted;
    state.tracker.observe_usage(usage);
    let billed = TurnBill {
        read: usage.read,
        written: usage.written,
        fresh: usage.fresh,
        declared: ledger_turn.map_or(0, |turn| turn.declared),
    };
    let ledger = state.guard.billed;
    let backoff = ledger_turn.and_then(|turn| state.settle(turn.seq, billed));
    Settlement {
        cold_mispredicted: state.tracker.counts.cold_mispredicted > before,
        backoff,
        billed: state.guard.billed.since(&ledger),
    }
}
