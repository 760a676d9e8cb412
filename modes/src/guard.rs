//! The cost guard (issue #22): per session, whether compaction is paying, judged from what the
//! provider reports, and a back-off to lossless components when it is not.
//!
//! Each turn leaves a pending entry: the content tokens its rewrite removed (split into those
//! on messages new to the provider's cache, at or past the tracker's boundary, and those
//! already in it), whether the turn read warm, and whether sluice changed anything. When the
//! provider's usage arrives (`cache_read_input_tokens`, `cache_creation_input_tokens`,
//! `cached_tokens`), the entry is settled into a ledger in input-token equivalents (fresh input
//! 1, cache read 0.1, cache write 1.25, so no model's list price is needed):
//! - **saved**: removed tokens already cached would have been read (0.1 each); newly removed
//!   ones would have been written (1.25, or 1 where the provider bills no writes). A floor:
//!   later turns' re-reads are not counted.
//! - **missed**: on a warm turn sluice changed, the provider should read back at least what the
//!   previous turn cached (read plus written). Whatever it read less was paid again, at the
//!   write price instead of the read price: that is what a rewrite in the cached prefix costs
//!   (an amortized depth re-write, a changed decision), measured rather than predicted.
//! - **expand**: each expand round re-reads the forwarded prompt (0.1 a token) and writes the
//!   originals it brings back (1.25).
//!
//! After [`MIN_TURNS`] settled turns, a session whose costs (missed plus expand) exceed what it
//! saved, by at least [`MIN_LOSS`], backs off: from the next new message on, every tool output
//! is lossless (the `*` entry of `lossless_tools`; offloaders' cuts there are put back with skip
//! reason `cost_guard`, lossless repacking still runs), so nothing already forwarded changes and
//! the cached prefix never moves because of it. The reason is the larger cost: `cache_misses` or
//! `expand_rounds`. A backed-off session stays backed off.

use serde::{Deserialize, Serialize};

use crate::SessionState;

/// Input-token equivalents of each tier (fresh input is 1).
const READ: f64 = 0.1;
const WRITE: f64 = 1.25;
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
    /// Removed tokens on messages the provider has cached already.
    saved_cached: u64,
    /// Removed tokens on messages new to its cache.
    saved_new: u64,
    warm: bool,
    changed: bool,
}

/// One session's ledger (see the module docs), saved with the session.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CostGuard {
    pending: Option<Pending>,
    /// What the previous settled turn left cached (read plus written).
    last_cached: Option<u64>,
    pub settled_turns: u32,
    pub saved: f64,
    pub missed: f64,
    pub expand: f64,
    pub backed_off: Option<BackOff>,
}

/// What a turn did, as the guard needs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TurnWork {
    pub saved_cached: u64,
    pub saved_new: u64,
    /// The turn read warm (an earlier turn on record, the cache not provably cold).
    pub warm: bool,
    /// sluice forwarded different bytes than it received.
    pub changed: bool,
}

/// What the provider reported for a turn's request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Billed {
    pub read: u64,
    /// `None` where the provider bills no cache writes (OpenAI).
    pub written: Option<u64>,
}

impl CostGuard {
    /// Records a turn; the next provider report settles it.
    pub fn turn(&mut self, work: TurnWork) {
        self.pending = Some(Pending {
            saved_cached: work.saved_cached,
            saved_new: work.saved_new,
            warm: work.warm,
            changed: work.changed,
        });
    }

    /// Settles the pending turn with the provider's report. Returns the back-off when this
    /// report is the one that decided it.
    pub fn settle(&mut self, billed: Billed) -> Option<BackOff> {
        let pending = self.pending.take()?;
        let write = if billed.written.is_some() { WRITE } else { 1.0 };
        self.saved += pending.saved_cached as f64 * READ + pending.saved_new as f64 * write;
        if let (true, true, Some(expected)) = (pending.warm, pending.changed, self.last_cached) {
            let short = expected.saturating_sub(billed.read);
            self.missed += short as f64 * (write - READ);
        }
        self.last_cached = Some(billed.read + billed.written.unwrap_or(0));
        self.settled_turns += 1;
        self.judge()
    }

    /// One expand round: the prompt re-read, the originals written.
    pub fn expand_round(&mut self, prompt_tokens: u64, restored_tokens: u64) {
        self.expand += prompt_tokens as f64 * READ + restored_tokens as f64 * WRITE;
    }

    fn judge(&mut self) -> Option<BackOff> {
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

/// Settles `state`'s pending turn with the provider's report and, when the guard decides to
/// back off, makes every tool output from the next new message on lossless.
pub fn settle(state: &mut SessionState, billed: Billed) -> Option<BackOff> {
    let why = state.guard.settle(billed)?;
    hold_every_output(state);
    Some(why)
}

/// From the next new message on, every tool output is lossless.
fn hold_every_output(state: &mut SessionState) {
    let from = state.seen_messages;
    state
        .lossless_tools
        .entry(engine::tools::EVERY_TOOL.to_owned())
        .or_insert(from);
}

/// An expand round the session's model asked for. Returns the back-off it decided, if any
/// (expand rounds alone never settle a turn, but they can tip a judged session).
pub fn expand_round(
    state: &mut SessionState,
    prompt_tokens: u64,
    restored_tokens: u64,
) -> Option<BackOff> {
    state.guard.expand_round(prompt_tokens, restored_tokens);
    let why = state.guard.judge()?;
    hold_every_output(state);
    Some(why)
}

/// What a turn did, from its run: removed tokens split at the tracker's boundary.
pub fn work(
    report: &engine::pipeline::RunReport,
    mutable_from: usize,
    warm: bool,
    changed: bool,
) -> TurnWork {
    let (mut cached, mut new) = (0u64, 0u64);
    for saving in report.components.iter().flat_map(|c| &c.savings) {
        if saving.index >= mutable_from {
            new += saving.saved_tokens as u64;
        } else {
            cached += saving.saved_tokens as u64;
        }
    }
    TurnWork {
        saved_cached: cached,
        saved_new: new,
        warm,
        changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warm(saved_new: u64) -> TurnWork {
        TurnWork {
            saved_cached: 0,
            saved_new,
            warm: true,
            changed: true,
        }
    }

    #[test]
    fn a_session_whose_cache_keeps_missing_backs_off() {
        let mut guard = CostGuard::default();
        // Each turn removes 500 new tokens (625 saved), but the provider reads back nothing of
        // the 50,000 it cached the turn before: 50,000 × 1.15 lost per turn.
        guard.turn(warm(500));
        assert_eq!(
            guard.settle(Billed {
                read: 0,
                written: Some(50_000)
            }),
            None
        );
        guard.turn(warm(500));
        assert_eq!(
            guard.settle(Billed {
                read: 0,
                written: Some(50_000)
            }),
            None
        );
        guard.turn(warm(500));
        assert_eq!(
            guard.settle(Billed {
                read: 0,
                written: Some(50_000)
            }),
            Some(BackOff::CacheMisses)
        );
        assert!(guard.missed > guard.saved);
    }

    #[test]
    fn a_session_that_reads_its_cache_back_keeps_compacting() {
        let mut guard = CostGuard::default();
        let mut cached = 10_000;
        for _ in 0..20 {
            guard.turn(warm(800));
            let written = 1_200;
            assert_eq!(
                guard.settle(Billed {
                    read: cached,
                    written: Some(written)
                }),
                None
            );
            cached += written;
        }
        assert_eq!(guard.missed, 0.0);
        assert!(guard.saved > 0.0 && guard.backed_off.is_none());
    }

    #[test]
    fn expand_rounds_that_cost_more_than_the_cuts_back_off() {
        let mut guard = CostGuard::default();
        let mut cached = 10_000;
        for _ in 0..3 {
            guard.turn(warm(200));
            guard.settle(Billed {
                read: cached,
                written: Some(1_000),
            });
            cached += 1_000;
            // Every turn the model expands: the whole 40,000-token prompt is read again.
            guard.expand_round(40_000, 300);
        }
        assert_eq!(guard.backed_off, Some(BackOff::ExpandRounds));
        assert_eq!(guard.missed, 0.0);
    }

    #[test]
    fn cold_turns_and_untouched_turns_are_not_misses() {
        let mut guard = CostGuard::default();
        for work in [
            TurnWork {
                warm: false,
                ..warm(0)
            },
            TurnWork {
                changed: false,
                ..warm(0)
            },
        ] {
            guard.turn(work);
            guard.settle(Billed {
                read: 0,
                written: Some(60_000),
            });
        }
        assert_eq!(
            guard.missed, 0.0,
            "a cold cache and an untouched turn are not sluice's"
        );
    }

    #[test]
    fn backing_off_keeps_what_was_forwarded_and_cuts_nothing_new() {
        let mut state = SessionState {
            seen_messages: 42,
            ..SessionState::default()
        };
        for _ in 0..3 {
            state.guard.turn(warm(10));
            settle(
                &mut state,
                Billed {
                    read: 0,
                    written: Some(30_000),
                },
            );
        }
        assert_eq!(state.guard.backed_off, Some(BackOff::CacheMisses));
        assert_eq!(
            state.lossless_tools.get(engine::tools::EVERY_TOOL),
            Some(&42)
        );
    }
}
