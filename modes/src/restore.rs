//! Restoring in place: an output whose marker the model keeps expanding goes back whole.
//!
//! An expand round answers the model's call and is gone: the agent never sees it, so the next
//! turn shows the model the same marker, and a model that needed the original once often needs
//! it again. Each of those repeats re-reads the whole prompt (at the cache-read price) and sends
//! the original again. Putting the original back where it was ends them, once, for the price of
//! re-writing the prompt from that message on.
//!
//! The decision is per marker and made from costs and the session's own history:
//! - it is weighed once the marker has been expanded [`MIN_EXPANSIONS`] times (a first expand
//!   is one need; a repeat says the need outlives the round);
//! - the rounds the marker is still expected to cost: as many as it has been repeated so far
//!   (expands after the first). It has been carried for `age` turns since a cut first left it;
//!   over as many turns again it is expected to come back about as often (a marker's need, like
//!   a session's life, is judged by how long it has lasted: two expands in a row after twenty
//!   quiet turns are a burst, not a rate). Each round is priced as it is billed: the prompt the
//!   provider last reported re-read, and the part of the original a round returns sent anew;
//! - against one re-write: the prompt from the output's message on, written again instead of
//!   read, and the original itself written, then read on each of those `age` turns;
//! - and only from what the session's cuts have saved. The rounds are a forecast, the
//!   re-write is paid at once: a session that ends sooner than its history says never gets it
//!   back. A restore gives back part of what the cuts saved, so it may stake at most that
//!   (the cost guard's ledger before rounds: cuts, less the declaration and cache re-writes),
//!   and a forecast that misses cannot turn a session whose cuts were not paying into a
//!   deeper loss. Rounds already paid are not counted against it: they are what it ends.
//!
//! A restore, once made, holds for the rest of the session (the marker goes into
//! [`Restore::restored`], saved with the session), so the re-write happens once and every later
//! turn forwards the same bytes; the pipeline undoes every cut that leaves that marker, a
//! frozen decision's replay too (`engine::pipeline::RunCx::restored`).

use std::collections::{BTreeMap, BTreeSet};

use engine::message::Message;
use engine::savings::{READ_PRICE, WRITE_PRICE};
use serde::{Deserialize, Serialize};

/// A marker is weighed for a restore once the model has expanded it this many times.
pub const MIN_EXPANSIONS: u32 = 2;

/// Markers remembered per session (about half is forgotten when full), and restored at most.
const MAX_MARKERS: usize = 4096;

/// What the session knows of its markers' expands, and what it put back.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Restore {
    /// Turns this session has run.
    pub turns: u64,
    /// Each expanded marker's history.
    pub expansions: BTreeMap<String, Expansions>,
    /// The output behind each marker the session's cuts left, and when.
    pub marker_calls: BTreeMap<String, MarkerCall>,
    /// Markers whose outputs are put back in place for the rest of the session.
    pub restored: BTreeSet<String>,
}

/// Where a marker came from: its output's `tool_call_id` and message index (agents reuse call
/// ids: the index tells two outputs of one id apart), and the session's turn count when a
/// forwarded request first carried it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerCall {
    pub call: String,
    pub index: usize,
    pub since_turn: u64,
}

/// One marker's expands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expansions {
    pub count: u32,
    /// The most a round of it sent back, in tokens.
    pub round_tokens: u64,
}

/// The prices a decision weighs, from the provider's last report.
#[derive(Debug, Clone, Copy)]
pub struct Prices {
    /// The whole prompt the provider last reported (fresh, read and written).
    pub prompt: u64,
    /// A new token's price: a cache write where the provider bills them, else fresh input.
    pub new: f64,
    /// What the session's cuts have saved so far, before rounds (its cost guard's ledger, in
    /// fresh-input tokens): the most a restore may stake.
    pub banked: f64,
}

impl Restore {
    /// The output behind `marker` (its call id and message index), as the forwarded request
    /// left it. A marker names its original, and two outputs with the same content leave the
    /// same marker: the earliest is kept, since restoring re-writes the prompt from there.
    pub fn remember_marker(&mut self, marker: &str, call_id: &str, index: usize) {
        if let Some(known) = self.marker_calls.get_mut(marker) {
            if known.call == call_id {
                known.index = known.index.min(index);
            }
            return;
        }
        if self.marker_calls.len() >= MAX_MARKERS {
            let middle = self.marker_calls.keys().nth(MAX_MARKERS / 2).cloned();
            if let Some(middle) = middle {
                self.marker_calls = self.marker_calls.split_off(&middle);
            }
        }
        let known = MarkerCall {
            call: call_id.to_owned(),
            index,
            since_turn: self.turns,
        };
        self.marker_calls.insert(marker.to_owned(), known);
    }

    /// An expand round asked for `markers`, sending `tokens` back in all.
    pub fn note_round(&mut self, markers: &[String], tokens: u64) {
        let each = tokens / markers.len().max(1) as u64;
        for marker in markers {
            if !self.expansions.contains_key(marker) && self.expansions.len() >= MAX_MARKERS {
                self.expansions.clear();
            }
            let e = self.expansions.entry(marker.clone()).or_default();
            e.count += 1;
            e.round_tokens = e.round_tokens.max(each);
        }
    }

    /// Weighs every marker expanded often enough against the request about to run (`messages`,
    /// the agent's originals) and restores those whose re-write is cheaper than the rounds they
    /// are still expected to cost. Returns how many it restored on this turn, and their tokens.
    /// Each restore's re-write comes out of the stake the next one may use.
    pub fn decide(&mut self, messages: &[Message], mut prices: Prices) -> (u32, u64) {
        if self.restored.len() >= MAX_MARKERS {
            return (0, 0);
        }
        let candidates: Vec<(String, MarkerCall, Expansions)> = self
            .expansions
            .iter()
            .filter(|(marker, e)| e.count >= MIN_EXPANSIONS && !self.restored.contains(*marker))
            .filter_map(|(marker, e)| {
                let known = self.marker_calls.get(marker)?;
                Some((marker.clone(), known.clone(), *e))
            })
            .collect();
        let (mut restored, mut tokens) = (0, 0);
        for (marker, known, e) in candidates {
            let is_it = |m: &Message| m.is_tool() && m.tool_call_id.as_deref() == Some(&known.call);
            // Where the forwarded request had it; else (the transcript moved) the first output
            // of that call (agents reuse call ids: the first makes the longest re-write).
            let at = if messages.get(known.index).is_some_and(is_it) {
                Some(known.index)
            } else {
                messages.iter().position(is_it)
            };
            let Some(at) = at else {
                continue;
            };
            let suffix: u64 = messages[at..]
                .iter()
                .map(|m| engine::tokens::count(&m.content) as u64)
                .sum();
            let original = engine::tokens::count(&messages[at].content) as u64;
            let age = self.turns.saturating_sub(known.since_turn);
            if pays(e, age, suffix, original, prices) {
                self.restored.insert(marker);
                restored += 1;
                tokens += original;
                prices.banked -= rewrite(age, suffix, original, prices);
            }
        }
        (restored, tokens)
    }
}

/// Whether restoring a marker with history `e`, carried for `age` turns, costs less than the
/// rounds it is still expected to cost (see the module docs). `suffix`: the prompt's content
/// tokens from its message on; `original`: the output's tokens.
pub fn pays(e: Expansions, age: u64, suffix: u64, original: u64, prices: Prices) -> bool {
    // Repeats, not expands: the first expand was the need the marker was cut without; what it
    // will go on costing is how often the model came back for it.
    let expected_rounds = f64::from(e.count.saturating_sub(1));
    let round = prices.prompt as f64 * READ_PRICE + e.round_tokens as f64 * prices.new;
    let rewrite = rewrite(age, suffix, original, prices);
    expected_rounds * round > rewrite && rewrite <= prices.banked
}

/// What restoring costs: the prompt from the output's message on written again instead of read,
/// the original written, then read on each of `age` turns.
fn rewrite(age: u64, suffix: u64, original: u64, prices: Prices) -> f64 {
    suffix as f64 * (prices.new - READ_PRICE)
        + original as f64 * prices.new
        + original as f64 * READ_PRICE * age.max(1) as f64
}

/// A new token's price where the provider bills cache writes, else fresh input's.
pub fn new_price(bills_writes: bool) -> f64 {
    if bills_writes { WRITE_PRICE } else { 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRICES: Prices = Prices {
        prompt: 60_000,
        new: WRITE_PRICE,
        banked: 50_000.0,
    };

    const TWICE: Expansions = Expansions {
        count: 2,
        round_tokens: 500,
    };

    #[test]
    fn a_marker_the_model_keeps_coming_back_for_is_worth_restoring_near_the_end() {
        // Expanded on each of the 4 turns since its cut: 3 more rounds expected, each 6,000
        // re-read and 625 sent; restoring 2,000 tokens 8,000 from the end re-writes about 9,200.
        let often = Expansions {
            count: 4,
            round_tokens: 500,
        };
        assert!(pays(often, 4, 8_000, 2_000, PRICES));
        // The same output at the head of the prompt: re-writing 60,000 tokens costs more.
        assert!(!pays(often, 4, 60_000, 2_000, PRICES));
    }

    #[test]
    fn one_repeat_pays_only_for_a_short_suffix() {
        // One more round expected (6,625): worth a re-write of 2,500 tokens, not of 8,000.
        assert!(pays(TWICE, 2, 2_500, 500, PRICES));
        assert!(!pays(TWICE, 2, 8_000, 2_000, PRICES));
        // Carried for 40 turns: the original read on each of 40 more costs more again.
        assert!(!pays(TWICE, 40, 2_500, 1_000, PRICES));
    }

    #[test]
    fn a_restore_is_staked_only_on_what_the_session_saved() {
        let poor = Prices {
            banked: 3_000.0,
            ..PRICES
        };
        assert!(pays(TWICE, 2, 2_500, 500, PRICES));
        assert!(
            !pays(TWICE, 2, 2_500, 500, poor),
            "a 3,500 re-write on 3,000 saved"
        );
        let losing = Prices {
            banked: -200.0,
            ..PRICES
        };
        assert!(!pays(TWICE, 2, 100, 100, losing));
    }

    #[test]
    fn restores_by_marker_once_expanded_often_enough_and_only_once() {
        let mut restore = Restore {
            turns: 10,
            ..Restore::default()
        };
        restore.remember_marker("m1", "call_1", 1);
        let messages = vec![
            Message::text(engine::message::Role::User, "fix it"),
            Message::tool("call_1", "bash", &"a log line\n".repeat(400)),
            Message::text(engine::message::Role::Assistant, "looking"),
        ];
        let markers = ["m1".to_owned()];
        restore.turns += 1;
        restore.note_round(&markers, 300);
        assert_eq!(
            restore.decide(&messages, PRICES).0,
            0,
            "one expand is one need"
        );
        restore.turns += 1;
        restore.note_round(&markers, 300);
        let (restored, tokens) = restore.decide(&messages, PRICES);
        assert_eq!(restored, 1);
        assert_eq!(tokens, engine::tokens::count(&messages[1].content) as u64);
        assert!(restore.restored.contains("m1"));
        assert_eq!(
            restore.decide(&messages, PRICES).0,
            0,
            "held, not re-decided"
        );
    }
}
