//! What a session actor owns for one session ([`SessionState`]), and how it is kept in a store
//! between actors ([`StorePersist`]).

use std::sync::Arc;

use actors::sessions::Persist;
use engine::savings::BilledSaving;
use engine::store::Store;
use serde::{Deserialize, Serialize};

use crate::guard::{self, BackOff, TurnBill};
use crate::restore;
use crate::tracker::Tracker;

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
    /// The markers the model expanded, and the outputs put back in place (see [`restore`]).
    #[serde(default)]
    pub restore: restore::Restore,
}

impl SessionState {
    /// Settles turn `seq` with the provider's report (the cost guard, see [`guard`]) and, when
    /// the guard decides to back off, holds the cuts from the next new message on.
    pub fn settle(&mut self, seq: u64, billed: TurnBill) -> Option<BackOff> {
        let why = self.guard.settle(seq, billed)?;
        self.back_off(why);
        Some(why)
    }

    /// An expand round for `stash_ids`: each marker's expands are counted for a restore in
    /// place (`restore`), and the round's cost goes to the cost guard (the prompt re-read, the
    /// originals written). Returns the round's billed cost, and the back-off it decided, if
    /// any (rounds alone never settle a turn, but they can tip a judged session).
    pub fn expand_round(
        &mut self,
        stash_ids: &[&str],
        prompt_tokens: u64,
        restored_tokens: u64,
    ) -> (BilledSaving, Option<BackOff>) {
        let markers: Vec<String> = stash_ids.iter().map(|id| (*id).to_owned()).collect();
        self.restore.note_round(&markers, restored_tokens);
        let billed = self.guard.expand_round(prompt_tokens, restored_tokens);
        let why = self.guard.judge();
        if let Some(why) = why {
            self.back_off(why);
        }
        (billed, why)
    }

    /// From the session's frontier on (the most messages any of its requests had), so nothing a
    /// longer transcript already forwarded can change: every tool output lossless after cache
    /// misses, a floor under cuts after expand rounds (see [`guard`]).
    fn back_off(&mut self, why: BackOff) {
        let from = self.frontier.max(self.seen_messages);
        match why {
            BackOff::CacheMisses => {
                self.lossless_tools
                    .entry(engine::tools::EVERY_TOOL.to_owned())
                    .or_insert(from);
            }
            BackOff::ExpandRounds => self.guard.set_floor(from),
        }
    }
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
