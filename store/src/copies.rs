//! A session's copy in memory ([`Copy`]) and the bounded, least-recently-used set of them
//! ([`Copies`]) that [`crate::DurableStore`] serves turns from. A copy also holds the writes the
//! backend has not taken yet: normally one turn's, until its commit; during a store outage, every
//! carried turn's, until the store answers (see [`Held`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backend::Snapshot;

/// Writes a copy holds that the backend has not taken (a commit that got no answer, turns
/// carried through an outage). The entries themselves are the copy's dirty ones; this says what
/// they build on, so that the store, once it answers, can tell whether anyone wrote since.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// The backend version they build on: the last one this replica saw written or loaded.
    pub base: u64,
    /// Fences of commits that got no answer. One may have landed after all (then the backend's
    /// version is that fence, and still nothing another replica wrote), and each may still hold
    /// its lease in the backend, which the first turn after the outage releases.
    pub fences: Vec<u64>,
    /// Entries held (stashes and replay entries), as last counted.
    pub entries: usize,
}

impl Held {
    /// Whether a backend at `version` holds nothing this replica has not seen.
    pub fn builds_on(&self, version: u64) -> bool {
        version == self.base || self.fences.contains(&version)
    }
}

/// One session's copy in memory.
#[derive(Debug)]
pub(crate) struct Copy {
    /// The backend version this copy matches; `None` until loaded, or after a lost lease.
    pub version: Option<u64>,
    pub stashes: HashMap<String, Arc<str>>,
    pub frozen: HashMap<String, Arc<str>>,
    pub dirty_stashes: Vec<String>,
    pub dirty_frozen: BTreeSet<String>,
    pub stash_bytes: usize,
    /// Turns of this session between open and close: never dropped from memory meanwhile.
    pub open: usize,
    /// Stash ids the backend holds for this session (as of the last load): a replay that
    /// re-stashes one of them keeps it in memory without writing it again.
    pub stored_ids: HashSet<String>,
    /// Done when this session's last commit is: the next commit waits for it, so a session's
    /// writes reach the backend in the order its turns closed.
    pub tail: Option<oneshot::Receiver<()>>,
    pub tick: u64,
    pub used: Instant,
    /// When the backend last confirmed this copy (a load, or a commit written). A replica
    /// carries a session through a store outage only within `outage_grace` of it.
    pub confirmed: Option<Instant>,
    /// The version the backend last confirmed (`version` runs ahead of it while a commit is on
    /// its way): a backend found behind *this* lost writes.
    pub confirmed_version: Option<u64>,
    /// Loaded by something other than a turn (writing held copies after an outage): the next
    /// turn must still hear that the session changed under it.
    pub reload_unseen: bool,
    /// Writes the backend has not taken yet; never dropped from memory while there are any.
    pub held: Option<Held>,
    /// Being carried through an outage (counted once per session and outage).
    pub carried: bool,
}

impl Copy {
    fn new(now: Instant) -> Copy {
        Copy {
            version: None,
            stashes: HashMap::new(),
            frozen: HashMap::new(),
            dirty_stashes: Vec::new(),
            dirty_frozen: BTreeSet::new(),
            stash_bytes: 0,
            open: 0,
            stored_ids: HashSet::new(),
            tail: None,
            tick: 0,
            used: now,
            confirmed: None,
            confirmed_version: None,
            reload_unseen: false,
            held: None,
            carried: false,
        }
    }

    /// Dirty entries: what the next commit writes.
    pub fn dirty(&self) -> usize {
        self.dirty_stashes.len() + self.dirty_frozen.len()
    }

    /// A commit of this session is still on its way to the backend.
    pub fn committing(&mut self) -> bool {
        self.tail
            .as_mut()
            .is_some_and(|rx| matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)))
    }

    pub fn bytes(&self) -> usize {
        self.stash_bytes
            + self
                .frozen
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

#[derive(Debug, Default)]
pub(crate) struct Copies {
    pub sessions: HashMap<String, Copy>,
    pub recency: BTreeMap<u64, String>,
    pub next_tick: u64,
    /// Approximate bytes held (originals and replay values), kept up to date on every write.
    pub bytes: usize,
    pub stashes: usize,
    pub stash_bytes: usize,
    pub frozen: usize,
}

impl Copies {
    /// `session`'s copy, created if absent, marked most recently used.
    pub fn touch(&mut self, session: &str) -> &mut Copy {
        let now = Instant::now();
        // Looked up before it is named: a turn touches its session once per stash it makes or
        // carries over, and making the name twice each time was most of that.
        if !self.sessions.contains_key(session) {
            self.sessions.insert(session.to_owned(), Copy::new(now));
        }
        let latest = self.next_tick;
        let copy = self.sessions.get_mut(session).expect("inserted above");
        copy.used = now;
        if copy.tick == latest && latest != 0 {
            // Already the most recently used (the turn's earlier stashes touched it): its place
            // in the eviction order stands, and moving it again was most of each later touch.
            return copy;
        }
        self.next_tick += 1;
        let tick = self.next_tick;
        let old = std::mem::replace(&mut copy.tick, tick);
        let name = self
            .recency
            .remove(&old)
            .unwrap_or_else(|| session.to_owned());
        self.recency.insert(tick, name);
        copy
    }

    pub fn get(&self, session: &str) -> Option<&Copy> {
        self.sessions.get(session)
    }

    /// Replaces a session's replay entries with a loaded snapshot. Its stashes stay (an id names
    /// one content forever), and so do entries written here and not yet committed: they are
    /// newer than anything the backend has.
    pub fn replace_frozen(&mut self, session: &str, snapshot: Snapshot) {
        let copy = self.touch(session);
        let old_bytes = copy.bytes();
        let old_count = copy.frozen.len();
        let mut frozen: HashMap<String, Arc<str>> = snapshot
            .frozen
            .into_iter()
            .map(|(k, v)| (k, Arc::from(v)))
            .collect();
        for key in &copy.dirty_frozen {
            if let Some(value) = copy.frozen.get(key) {
                frozen.insert(key.clone(), value.clone());
            }
        }
        copy.frozen = frozen;
        copy.stored_ids = snapshot.stash_ids.into_iter().collect();
        copy.version = Some(snapshot.version);
        copy.confirmed = Some(Instant::now());
        copy.confirmed_version = Some(snapshot.version);
        let (new_bytes, new_count) = (copy.bytes(), copy.frozen.len());
        self.bytes = self.bytes + new_bytes - old_bytes;
        self.frozen = self.frozen + new_count - old_count;
    }

    /// Drops least recently used copies that no turn has open until the bytes fit, and copies
    /// idle longer than `idle`. Returns how many went.
    pub fn shrink(&mut self, budget: usize, idle: Duration) -> u64 {
        let mut dropped = 0;
        let now = Instant::now();
        let mut passed = Vec::new();
        while let Some((tick, session)) = self.recency.pop_first() {
            let Some(copy) = self.sessions.get(&session) else {
                continue;
            };
            let stale = now.duration_since(copy.used) > idle;
            if !stale && self.bytes <= budget {
                self.recency.insert(tick, session);
                break;
            }
            // A copy with writes the backend has not taken is the only place they are.
            if copy.open > 0
                || copy.held.is_some()
                || self
                    .sessions
                    .get_mut(&session)
                    .is_some_and(Copy::committing)
            {
                passed.push((tick, session));
                continue;
            }
            if let Some(copy) = self.sessions.remove(&session) {
                self.bytes = self.bytes.saturating_sub(copy.bytes());
                self.stashes -= copy.stashes.len();
                self.stash_bytes -= copy.stash_bytes;
                self.frozen -= copy.frozen.len();
                dropped += 1;
            }
        }
        self.recency.extend(passed);
        dropped
    }
}

#[cfg(test)]
mod recency {
    use super::*;

    /// A session touched again while it is the most recent keeps its place without moving;
    /// the eviction order is the order of last use either way, one entry per session.
    #[test]
    fn the_eviction_order_is_the_order_of_last_use() {
        let mut copies = Copies::default();
        for session in ["a", "b", "b", "b", "a", "c", "c", "a", "a"] {
            let before = Instant::now();
            let copy = copies.touch(session);
            assert!(copy.used >= before, "each touch marks the copy used");
        }
        let order: Vec<&str> = copies.recency.values().map(String::as_str).collect();
        assert_eq!(order, ["b", "c", "a"]);
        assert_eq!(copies.recency.len(), copies.sessions.len());
        for (tick, session) in &copies.recency {
            assert_eq!(copies.sessions[session].tick, *tick);
        }
    }
}
