//! The `Store` trait and its in-memory implementation: stashed originals and replay state.
//!
//! Two kinds of entry live here, both scoped to a session:
//!
//! - **Stashes**: the original text behind a `<<cg:ID>>` marker, which the expand loop and
//!   `GET /expand` resolve. The marker naming one has already been sent to the model, so a live
//!   stash is never evicted to make room: when the reserve (entry count or bytes) is exhausted and
//!   nothing has expired, a new stash is *refused*. The component that asked then leaves its
//!   content alone (gate `store_full`): nothing is lost, a saving is forgone.
//! - **Replay entries**: frozen decisions (exact replacement bytes) and per-session bookkeeping.
//!   They are pinned against eviction by stashes, but capped at half the entry budget so one
//!   session cannot starve the stashes; past the cap the least recently used replay entry goes,
//!   and the drop is counted (`frozen_dropped` in `/stats`).
//!
//! TTL is sliding: every read refreshes it, because a read is proof the session is alive, and a
//! stash or freeze that dies mid-task costs a cache write of the whole suffix.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::clock::Clock;

/// Why a stash was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The rewind reserve is full of live stashes.
    #[error("store reserve is full of live stashes")]
    Full,
    /// The store does not keep anything (`store.enabled: false`).
    #[error("store is disabled")]
    Disabled,
}

/// Counters a store reports to `/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStats {
    pub stashes: usize,
    pub stash_bytes: usize,
    pub frozen_entries: usize,
    pub refused: u64,
    /// Of `refused`: by the per-session quota.
    pub quota_refused: u64,
    pub expired: u64,
    pub frozen_evicted: u64,
}

/// Where sluice keeps originals and replay state. Implementations must be cheap to call from
/// the request path (no IO there: a durable store writes behind, off-path).
pub trait Store: Send + Sync {
    /// Stashes `original` under `id` for `session`.
    ///
    /// # Errors
    /// [`StoreError::Full`] when the reserve holds only live stashes; [`StoreError::Disabled`].
    fn stash(&self, session: &str, id: &str, original: &str) -> Result<(), StoreError>;

    /// The original behind `id`, refreshing its TTL. `None` when unknown, expired or owned by
    /// another session.
    fn resolve(&self, session: &str, id: &str) -> Option<Arc<str>>;

    /// The original behind `id` in any session. Only for a person at a trusted address
    /// (`GET /expand` without a session): never for a model.
    fn resolve_any(&self, id: &str) -> Option<Arc<str>>;

    /// Records a replay entry (pinned, see the module docs).
    fn put_frozen(&self, session: &str, key: &str, value: &str);

    /// Reads a replay entry, refreshing its TTL.
    fn get_frozen(&self, session: &str, key: &str) -> Option<Arc<str>>;

    /// Whether a replay entry under `key` existed and was dropped (expired or evicted) since it
    /// was last written: "was frozen, now lost" as opposed to "never frozen". The pipeline
    /// re-derives such a decision where that is provably byte-identical. A store that cannot
    /// tell answers `false`, which errs towards leaving the message alone.
    fn was_lost(&self, session: &str, key: &str) -> bool {
        let _ = (session, key);
        false
    }

    /// Whether stashes survive until they are resolved (false for a disabled store, where an
    /// offload would be one-way).
    fn persists(&self) -> bool;

    fn stats(&self) -> StoreStats;
}

/// Sizing of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStoreLimits {
    /// Sliding time to live of every entry.
    pub ttl: Duration,
    /// Entries of both kinds together. Replay entries may use at most half.
    pub max_entries: usize,
    /// Bytes of stashed originals.
    pub reserve_bytes: usize,
    /// Stashes one session may hold: past it that session's stashes are refused, so one
    /// session cannot take the reserve every other session needs.
    pub session_max_stashes: usize,
    /// Bytes of originals one session may hold, likewise.
    pub session_max_bytes: usize,
}

impl MemoryStoreLimits {
    pub const DEFAULT: MemoryStoreLimits = MemoryStoreLimits {
        ttl: Duration::from_secs(10_000),
        max_entries: 5000,
        reserve_bytes: 256 << 20,
        session_max_stashes: 2000,
        session_max_bytes: 64 << 20,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Stash,
    Frozen,
}

#[derive(Debug)]
struct Entry {
    value: Arc<str>,
    expires: Duration,
    tick: u64,
    class: Class,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Recency order: tick → key. With a fixed TTL, least recently used is also first to expire.
    by_recency: BTreeMap<u64, String>,
    next_tick: u64,
    stash_bytes: usize,
    stash_count: usize,
    frozen_count: usize,
    /// Replay keys dropped since their last write, oldest first, bounded by `max_entries`.
    lost: HashSet<String>,
    lost_order: VecDeque<String>,
    /// Per session: its stashes and their bytes (for the per-session quota).
    per_session: HashMap<String, (usize, usize)>,
    stats: StoreStats,
}

/// The default store: in memory, sliding TTL, bounded, see the module docs.
pub struct MemoryStore {
    limits: MemoryStoreLimits,
    clock: Arc<dyn Clock>,
    inner: Mutex<Inner>,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

fn stash_key(session: &str, id: &str) -> String {
    format!("s\u{0}{session}\u{0}{id}")
}

/// The session a stash key belongs to.
fn stash_session(key: &str) -> &str {
    key.get(2..)
        .and_then(|rest| rest.split('\u{0}').next())
        .unwrap_or("")
}

fn frozen_key(session: &str, key: &str) -> String {
    format!("r\u{0}{session}\u{0}{key}")
}

impl MemoryStore {
    pub fn new(limits: MemoryStoreLimits, clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            limits,
            clock,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn get(&self, key: &str) -> Option<Arc<str>> {
        let now = self.clock.now();
        let mut inner = self.inner.lock();
        let expired = inner.entries.get(key)?.expires <= now;
        if expired {
            inner.drop_entry(key, self.limits.max_entries);
            inner.stats.expired += 1;
            return None;
        }
        let tick = inner.bump();
        let ttl = self.limits.ttl;
        let entry = inner.entries.get_mut(key)?;
        let old_tick = std::mem::replace(&mut entry.tick, tick);
        entry.expires = now + ttl;
        let value = entry.value.clone();
        inner.by_recency.remove(&old_tick);
        inner.by_recency.insert(tick, key.to_owned());
        Some(value)
    }
}

impl Inner {
    fn bump(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }

    fn remove(&mut self, key: &str) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        self.by_recency.remove(&entry.tick);
        match entry.class {
            Class::Stash => {
                self.stash_count -= 1;
                self.stash_bytes -= entry.value.len();
                let session = stash_session(key);
                if let Some(used) = self.per_session.get_mut(session) {
                    used.0 -= 1;
                    used.1 -= entry.value.len();
                    if used.0 == 0 {
                        self.per_session.remove(session);
                    }
                }
            }
            Class::Frozen => self.frozen_count -= 1,
        }
        Some(entry)
    }

    /// Removes an entry that is going away for good (expired or evicted). A replay entry's key
    /// is remembered as lost, so a later turn can tell a dropped freeze from one never made.
    fn drop_entry(&mut self, key: &str, max_lost: usize) {
        if let Some(entry) = self.remove(key)
            && entry.class == Class::Frozen
            && self.lost.insert(key.to_owned())
        {
            self.lost_order.push_back(key.to_owned());
            while self.lost_order.len() > max_lost.max(1) {
                if let Some(old) = self.lost_order.pop_front() {
                    self.lost.remove(&old);
                }
            }
        }
    }

    /// Drops expired entries, oldest first; stops at the first live one.
    fn purge_expired(&mut self, now: Duration, max_lost: usize) {
        while let Some((&tick, key)) = self.by_recency.first_key_value() {
            let key = key.clone();
            match self.entries.get(&key) {
                Some(entry) if entry.expires > now => break,
                Some(_) => {
                    self.drop_entry(&key, max_lost);
                    self.stats.expired += 1;
                }
                // A recency slot whose entry is gone must not stall the purge.
                None => {
                    self.by_recency.remove(&tick);
                }
            }
        }
    }

    /// Evicts the least recently used replay entry, if any.
    fn evict_oldest_frozen(&mut self, max_lost: usize) -> bool {
        let victim = self
            .by_recency
            .values()
            .find(|k| {
                self.entries
                    .get(*k)
                    .is_some_and(|e| e.class == Class::Frozen)
            })
            .cloned();
        match victim {
            Some(key) => {
                self.drop_entry(&key, max_lost);
                self.stats.frozen_evicted += 1;
                true
            }
            None => false,
        }
    }

    fn insert(&mut self, key: String, value: &str, class: Class, expires: Duration) {
        let tick = self.bump();
        match class {
            Class::Stash => {
                self.stash_count += 1;
                self.stash_bytes += value.len();
                let used = self
                    .per_session
                    .entry(stash_session(&key).to_owned())
                    .or_default();
                used.0 += 1;
                used.1 += value.len();
            }
            Class::Frozen => self.frozen_count += 1,
        }
        self.by_recency.insert(tick, key.clone());
        self.entries.insert(
            key,
            Entry {
                value: Arc::from(value),
                expires,
                tick,
                class,
            },
        );
    }
}

impl Store for MemoryStore {
    fn stash(&self, session: &str, id: &str, original: &str) -> Result<(), StoreError> {
        let key = stash_key(session, id);
        if self.get(&key).is_some() {
            // Same id means the same content hash: already stashed, and now refreshed.
            return Ok(());
        }
        let now = self.clock.now();
        let mut inner = self.inner.lock();
        // Two turns of one session may stash the same content at once (the id is its hash):
        // the first insert wins, the second is already done.
        if inner.entries.contains_key(&key) {
            return Ok(());
        }
        let over_quota = |inner: &Inner| {
            let (held, held_bytes) = inner.per_session.get(session).copied().unwrap_or_default();
            held >= self.limits.session_max_stashes
                || held_bytes + original.len() > self.limits.session_max_bytes
        };
        if over_quota(&inner) {
            // Its own expired stashes do not count against a session.
            inner.purge_expired(now, self.limits.max_entries);
        }
        if over_quota(&inner) {
            inner.stats.refused += 1;
            inner.stats.quota_refused += 1;
            return Err(StoreError::Full);
        }
        let full = |inner: &Inner| {
            inner.entries.len() >= self.limits.max_entries
                || inner.stash_bytes + original.len() > self.limits.reserve_bytes
        };
        if full(&inner) {
            inner.purge_expired(now, self.limits.max_entries);
        }
        // Replay entries beyond their half may be reclaimed for a stash; live stashes never are.
        while full(&inner)
            && inner.frozen_count > self.limits.max_entries / 2
            && inner.evict_oldest_frozen(self.limits.max_entries)
        {}
        if full(&inner) {
            inner.stats.refused += 1;
            return Err(StoreError::Full);
        }
        inner.insert(key, original, Class::Stash, now + self.limits.ttl);
        Ok(())
    }

    fn resolve(&self, session: &str, id: &str) -> Option<Arc<str>> {
        self.get(&stash_key(session, id))
    }

    fn resolve_any(&self, id: &str) -> Option<Arc<str>> {
        let suffix = format!("\u{0}{id}");
        let key = {
            let inner = self.inner.lock();
            inner
                .entries
                .keys()
                .find(|k| k.starts_with("s\u{0}") && k.ends_with(&suffix))
                .cloned()
        }?;
        self.get(&key)
    }

    fn put_frozen(&self, session: &str, key: &str, value: &str) {
        let key = frozen_key(session, key);
        let now = self.clock.now();
        let mut inner = self.inner.lock();
        if inner.lost.remove(&key) {
            inner.lost_order.retain(|k| k != &key);
        }
        if inner.remove(&key).is_some() {
            inner.insert(key, value, Class::Frozen, now + self.limits.ttl);
            return;
        }
        if inner.entries.len() >= self.limits.max_entries {
            inner.purge_expired(now, self.limits.max_entries);
        }
        while (inner.frozen_count >= self.limits.max_entries / 2
            || inner.entries.len() >= self.limits.max_entries)
            && inner.evict_oldest_frozen(self.limits.max_entries)
        {}
        if inner.entries.len() >= self.limits.max_entries {
            // Everything left is live stashes: keep them, drop this decision instead.
            inner.stats.frozen_evicted += 1;
            return;
        }
        inner.insert(key, value, Class::Frozen, now + self.limits.ttl);
    }

    fn get_frozen(&self, session: &str, key: &str) -> Option<Arc<str>> {
        self.get(&frozen_key(session, key))
    }

    fn was_lost(&self, session: &str, key: &str) -> bool {
        let key = frozen_key(session, key);
        let now = self.clock.now();
        let mut inner = self.inner.lock();
        // An entry that expired but was not yet swept is lost too.
        if inner.entries.get(&key).is_some_and(|e| e.expires <= now) {
            inner.drop_entry(&key, self.limits.max_entries);
            inner.stats.expired += 1;
        }
        inner.lost.contains(&key)
    }

    fn persists(&self) -> bool {
        true
    }

    fn stats(&self) -> StoreStats {
        let inner = self.inner.lock();
        StoreStats {
            stashes: inner.stash_count,
            stash_bytes: inner.stash_bytes,
            frozen_entries: inner.frozen_count,
            ..inner.stats
        }
    }
}

/// A store that keeps nothing (`store.enabled: false`): every stash is refused, so offloaders
/// stay inert instead of dropping content one way.
#[derive(Debug, Default)]
pub struct NopStore;

impl Store for NopStore {
    fn stash(&self, _: &str, _: &str, _: &str) -> Result<(), StoreError> {
        Err(StoreError::Disabled)
    }
    fn resolve(&self, _: &str, _: &str) -> Option<Arc<str>> {
        None
    }
    fn resolve_any(&self, _: &str) -> Option<Arc<str>> {
        None
    }
    fn put_frozen(&self, _: &str, _: &str, _: &str) {}
    fn get_frozen(&self, _: &str, _: &str) -> Option<Arc<str>> {
        None
    }
    fn persists(&self) -> bool {
        false
    }
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn store(max_entries: usize, reserve_bytes: usize) -> (MemoryStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        let limits = MemoryStoreLimits {
            ttl: Duration::from_secs(100),
            max_entries,
            reserve_bytes,
            ..MemoryStoreLimits::DEFAULT
        };
        (MemoryStore::new(limits, clock.clone()), clock)
    }

    #[test]
    fn one_session_cannot_take_the_reserve_of_the_others() {
        let clock = Arc::new(ManualClock::new());
        let limits = MemoryStoreLimits {
            ttl: Duration::from_secs(100),
            session_max_stashes: 2,
            session_max_bytes: 10,
            ..MemoryStoreLimits::DEFAULT
        };
        let store = MemoryStore::new(limits, clock.clone());
        store.stash("greedy", "a", "12345").unwrap();
        store.stash("greedy", "b", "1").unwrap();
        assert_eq!(store.stash("greedy", "c", "1"), Err(StoreError::Full));
        assert_eq!(
            store.stash("big", "a", "12345678901"),
            Err(StoreError::Full)
        );
        store.stash("modest", "a", "12345").unwrap();
        assert_eq!(store.stats().quota_refused, 2);
        // Room comes back with the session's own stashes.
        clock.advance(Duration::from_secs(101));
        store.stash("other", "z", "1").unwrap();
        assert_eq!(store.resolve("greedy", "a"), None);
        store.stash("greedy", "c", "1").unwrap();
    }

    #[test]
    fn stashes_are_scoped_to_their_session() {
        let (store, _) = store(10, 1 << 20);
        store.stash("a", "id1", "original").unwrap();
        assert_eq!(store.resolve("a", "id1").as_deref(), Some("original"));
        assert_eq!(store.resolve("b", "id1"), None);
        assert_eq!(store.resolve_any("id1").as_deref(), Some("original"));
    }

    #[test]
    fn ttl_slides_on_every_read() {
        let (store, clock) = store(10, 1 << 20);
        store.stash("s", "x", "v").unwrap();
        for _ in 0..5 {
            clock.advance(Duration::from_secs(60));
            assert!(
                store.resolve("s", "x").is_some(),
                "a read within the TTL keeps it alive"
            );
        }
        clock.advance(Duration::from_secs(101));
        assert_eq!(store.resolve("s", "x"), None);
        assert_eq!(store.stats().expired, 1);
    }

    #[test]
    fn full_reserve_refuses_instead_of_evicting_a_live_stash() {
        let (store, clock) = store(3, 1 << 20);
        for id in ["a", "b", "c"] {
            store.stash("s", id, id).unwrap();
        }
        assert_eq!(store.stash("s", "d", "d"), Err(StoreError::Full));
        for id in ["a", "b", "c"] {
            assert!(store.resolve("s", id).is_some(), "live stash {id} survived");
        }
        // Once they expire, room comes back.
        clock.advance(Duration::from_secs(101));
        store.stash("s", "d", "d").unwrap();
        assert_eq!(store.stats().refused, 1);
    }

    #[test]
    fn byte_reserve_is_enforced() {
        let (store, _) = store(100, 10);
        store.stash("s", "a", "12345678").unwrap();
        assert_eq!(store.stash("s", "b", "123"), Err(StoreError::Full));
    }

    #[test]
    fn replay_entries_are_capped_at_half_and_yield_to_stashes() {
        let (store, _) = store(4, 1 << 20);
        for i in 0..5 {
            store.put_frozen("s", &format!("k{i}"), "v");
        }
        let stats = store.stats();
        assert_eq!(stats.frozen_entries, 2, "capped at half of max_entries");
        assert_eq!(stats.frozen_evicted, 3);
        assert!(store.get_frozen("s", "k4").is_some(), "most recent kept");
        assert!(
            store.get_frozen("s", "k0").is_none(),
            "least recent dropped"
        );
        store.stash("s", "a", "a").unwrap();
        store.stash("s", "b", "b").unwrap();
        assert_eq!(
            store.stash("s", "c", "c"),
            Err(StoreError::Full),
            "replay within its half is pinned"
        );
    }

    #[test]
    fn a_dropped_replay_entry_is_remembered_as_lost_until_rewritten() {
        let (store, clock) = store(4, 1 << 20);
        store.put_frozen("s", "frz", "v");
        assert!(!store.was_lost("s", "frz"), "live is not lost");
        assert!(!store.was_lost("s", "never"), "never written is not lost");
        clock.advance(Duration::from_secs(101));
        assert!(store.was_lost("s", "frz"), "expired is lost");
        assert!(
            !store.was_lost("other", "frz"),
            "lost is scoped to the session"
        );
        store.put_frozen("s", "frz", "v");
        assert!(!store.was_lost("s", "frz"), "a rewrite repairs it");
        for i in 0..3 {
            store.put_frozen("s", &format!("k{i}"), "v");
        }
        assert!(store.was_lost("s", "frz"), "evicted past the cap is lost");
        store.put_frozen("s", "k2", "changed");
        assert!(!store.was_lost("s", "k2"), "an overwrite is not a loss");
    }

    #[test]
    fn stashing_the_same_content_twice_counts_it_once() {
        let (store, clock) = store(10, 1 << 20);
        store.stash("s", "a", "same").unwrap();
        store.stash("s", "a", "same").unwrap();
        assert_eq!(store.stats().stashes, 1);
        assert_eq!(store.stats().stash_bytes, 4);
        clock.advance(Duration::from_secs(101));
        assert_eq!(store.resolve("s", "a"), None);
        store.stash("s", "b", "other").unwrap();
        assert_eq!(
            (store.stats().stashes, store.stats().stash_bytes),
            (1, 5),
            "counters follow removals"
        );
    }

    #[test]
    fn nop_store_refuses() {
        assert_eq!(NopStore.stash("s", "a", "b"), Err(StoreError::Disabled));
        assert!(!NopStore.persists());
    }
}
