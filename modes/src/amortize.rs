//! Amortized depth decisions: when re-writing part of the cached prefix on a warm turn pays.
//!
//! On a staircase turn (at most one every `every_turns`), the pipeline runs twice: as usual, and
//! with the depth restriction lifted for rederivable components that opted into `cold_cache`.
//! The second run wins when the tokens it removes in addition, read at the cache-read price on
//! this turn and every turn the session is expected to have left, outweigh writing the suffix
//! from its first change once at the cache-write price instead of reading it:
//!
//! ```text
//! extra_saved × read × (remaining + 1)  >  (write − read) × suffix_tokens
//! ```
//!
//! Both runs record their frozen decisions into an [`Overlay`]; only the winner's reach the
//! store, so a decision that was not forwarded can never be replayed.

use std::collections::BTreeMap;
use std::sync::Arc;

use engine::apply::Applied;
use engine::config::AmortizeConfig;
use engine::message::{Forwarded, Message};
use engine::pipeline::message_tokens;
use engine::store::{Store, StoreError, StoreStats};
use parking_lot::Mutex;

/// A store whose replay writes are held back until [`Overlay::commit`]. Stashes go straight
/// through: an original stashed by the losing run is unreferenced and simply expires, while
/// holding it back could leave the winner's marker unresolvable if the store refused it later.
pub struct Overlay {
    base: Arc<dyn Store>,
    replays: Mutex<BTreeMap<(String, String), String>>,
}

impl Overlay {
    pub fn new(base: Arc<dyn Store>) -> Overlay {
        Overlay {
            base,
            replays: Mutex::new(BTreeMap::new()),
        }
    }

    /// Writes the held replay entries to the base store.
    pub fn commit(&self) {
        for ((session, key), value) in std::mem::take(&mut *self.replays.lock()) {
            self.base.put_frozen(&session, &key, &value);
        }
    }
}

impl Store for Overlay {
    fn stash(&self, session: &str, id: &str, original: &str) -> Result<(), StoreError> {
        self.base.stash(session, id, original)
    }
    fn resolve(&self, session: &str, id: &str) -> Option<Arc<str>> {
        self.base.resolve(session, id)
    }
    fn resolve_any(&self, id: &str) -> Option<Arc<str>> {
        self.base.resolve_any(id)
    }
    fn put_frozen(&self, session: &str, key: &str, value: &str) {
        self.replays
            .lock()
            .insert((session.to_owned(), key.to_owned()), value.to_owned());
    }
    fn get_frozen(&self, session: &str, key: &str) -> Option<Arc<str>> {
        let held = self
            .replays
            .lock()
            .get(&(session.to_owned(), key.to_owned()))
            .map(|v| Arc::from(v.as_str()));
        held.or_else(|| self.base.get_frozen(session, key))
    }
    fn was_lost(&self, session: &str, key: &str) -> bool {
        self.base.was_lost(session, key)
    }
    fn persists(&self) -> bool {
        self.base.persists()
    }
    fn stats(&self) -> StoreStats {
        self.base.stats()
    }
}

/// The verdict on one staircase turn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Tokens the depth run removes beyond the usual run, on this and every later turn.
    pub extra_saved: usize,
    /// Tokens from the depth run's first change to the end of the cached prefix.
    pub suffix_tokens: usize,
    /// What the re-write is worth, in fresh-input-token units (negative: it costs).
    pub net: f64,
}

impl Verdict {
    pub fn pays(&self) -> bool {
        self.extra_saved > 0 && self.net > 0.0
    }
}

/// Weighs the depth run against the usual one.
pub fn weigh(
    config: &AmortizeConfig,
    originals: &[Message],
    usual: &Applied<'_>,
    deep: &Applied<'_>,
    cached_prefix: usize,
    turns_so_far: u64,
) -> Verdict {
    let extra_saved = usual
        .report
        .tokens_after
        .saturating_sub(deep.report.tokens_after);
    let first_change = first_difference(originals, &usual.messages, &deep.messages);
    let suffix_tokens: usize = first_change.map_or(0, |from| {
        let to = cached_prefix.max(from);
        if to > deep.messages.len() {
            return 0;
        }
        (from..to)
            .filter_map(|i| deep.messages.get(originals, i))
            .map(message_tokens)
            .sum()
    });
    let remaining = match config.expected_turns {
        0 => turns_so_far.clamp(1, 100),
        n => u64::from(n),
    } as f64;
    let benefit = extra_saved as f64 * config.read_price * (remaining + 1.0);
    let cost = suffix_tokens as f64 * (config.write_price - config.read_price);
    Verdict {
        extra_saved,
        suffix_tokens,
        net: benefit - cost,
    }
}

/// The first index at which the two runs forward different messages, among those both
/// forwarded (a failed run reports none): only an index one of them changed can be one.
fn first_difference(originals: &[Message], a: &Forwarded, b: &Forwarded) -> Option<usize> {
    let both = a.len().min(b.len());
    let mut indices: Vec<usize> = a
        .changed()
        .iter()
        .chain(b.changed())
        .map(|(i, _)| *i)
        .collect();
    indices.sort_unstable();
    indices
        .into_iter()
        .take_while(|&i| i < both)
        .find(|&i| a.get(originals, i) != b.get(originals, i))
}
