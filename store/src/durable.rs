//! [`DurableStore`]: the engine's `Store` over a [`Backend`], a session at a time (see the
//! module docs of `store` for the open / run / close cycle).
//!
//! Memory holds a *copy* of each session in use: its replay entries as of its last load, the
//! stashes this process has seen, and what the running turn wrote. The copy is bounded in bytes
//! and the least recently used sessions are dropped from it first; since everything a copy holds
//! is in the backend once its turn has closed, dropping one loses nothing. The exception is a
//! copy holding writes the backend has not taken (an outage: `durable/outage.rs`), which stays.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use engine::store::{Store, StoreError, StoreStats};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::backend::{Acquired, Backend, BackendError, Commit, Committed};
use crate::copies::{Copies, Held};

mod outage;
mod stats;

pub use stats::DurableStats;
use stats::{Counters, add, bump};

/// Sizing and patience of a [`DurableStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableLimits {
    /// Sliding time to live of a session in the backend (and of its copy in memory).
    pub ttl: Duration,
    /// Stashes one session may hold: past it, its new stashes are refused (gate `store_full`),
    /// so one session cannot take the room every other session needs.
    pub session_stashes: usize,
    /// Bytes of originals one session may hold, with the same effect.
    pub session_bytes: usize,
    /// Bytes of session copies kept in memory.
    pub cache_bytes: usize,
    /// A copy unused this long leaves memory whatever the budget: its session is in the
    /// backend, and one load brings it back. Memory then follows the sessions in use, not every
    /// session seen since start-up.
    pub copy_idle: Duration,
    /// How long a shared lease lives if its holder dies. A turn that outlives it (a long model
    /// wait) still commits while no other replica has written the session since it began.
    pub lease_hold: Duration,
    /// How long a turn waits for another replica's lease before going upstream unmodified.
    pub lease_wait: Duration,
    /// Bound on any one backend call.
    pub call_timeout: Duration,
    /// How long after the backend last confirmed a session's copy this replica keeps serving
    /// the session from it while the backend does not answer (an outage, a failover).
    pub outage_grace: Duration,
}

impl DurableLimits {
    pub const DEFAULT: DurableLimits = DurableLimits {
        ttl: Duration::from_secs(10_000),
        session_stashes: 2_000,
        session_bytes: 64 << 20,
        cache_bytes: 256 << 20,
        // The providers' default cache lifetime: a session idle longer has gone cold anyway.
        copy_idle: Duration::from_secs(300),
        lease_hold: Duration::from_secs(30),
        lease_wait: Duration::from_millis(500),
        call_timeout: Duration::from_secs(2),
        // A Sentinel failover takes 5 to 15 s with common settings, a managed Redis's restart
        // some seconds more, and a session's turns come tens of seconds apart.
        outage_grace: Duration::from_secs(60),
    };
}

/// Why a turn cannot use the store: it then goes upstream unmodified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// Another replica held the session's lease for longer than `lease_wait`.
    LeaseTimeout,
    /// The backend does not answer or refuses to write.
    Backend,
}

impl Unavailable {
    /// The `/stats` label.
    pub fn label(self) -> &'static str {
        match self {
            Unavailable::LeaseTimeout => "lease_timeout",
            Unavailable::Backend => "store_unavailable",
        }
    }
}

/// Consecutive backend errors that make an episode (see `DurableStore::call`).
const EPISODE_AFTER: u32 = 3;

/// The engine's `Store` kept in a [`Backend`]. See the module docs.
pub struct DurableStore {
    backend: Arc<dyn Backend>,
    limits: DurableLimits,
    copies: Mutex<Copies>,
    counters: Counters,
    /// Set on the first failure of an episode, cleared by the first success after it: each
    /// episode is logged once, at its start and at its end.
    failing: AtomicBool,
    /// Backend errors since the last success: an episode starts at `EPISODE_AFTER` of them, so
    /// one slow call does not send every session upstream unmodified.
    errors_in_a_row: AtomicU32,
    last_probe: Mutex<Option<Instant>>,
    /// Some copy holds writes for the backend: the next call that succeeds writes them behind
    /// (`writing_held` while that runs), so they do not wait for their sessions' next turns.
    holding: AtomicBool,
    writing_held: AtomicBool,
    /// A background probe runs while writes are held (`probe_behind`).
    probing: AtomicBool,
    /// The outage outlasted a session's grace, said once per episode.
    grace_said: AtomicBool,
    me: Weak<DurableStore>,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for DurableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableStore")
            .field("backend", &self.backend.describe())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// A session opened for one turn; closing it (explicitly, or on drop) writes the turn behind.
pub struct Opened {
    store: Arc<DurableStore>,
    session: String,
    fence: Option<u64>,
    /// This turn loaded the session from the backend: a host's in-memory state for it (the
    /// session actor's tracker) is older than what the store now holds.
    pub reloaded: bool,
    /// The copy is current (found so, or loaded). Until it is, closing releases the lease and
    /// writes nothing: a turn cancelled mid-load must not mark an empty copy as the newest.
    loaded: bool,
    /// The version this turn found, which a commit after an expired lease must still see.
    found: u64,
    /// Served from this replica's copy while the backend did not answer: closing holds the
    /// turn's writes in the copy until it does.
    carried: bool,
    closed: bool,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("session", &self.session)
            .field("reloaded", &self.reloaded)
            .finish_non_exhaustive()
    }
}

/// The backend's acknowledgement of a turn's writes.
#[derive(Debug)]
pub struct Flush(Option<oneshot::Receiver<bool>>);

impl Flush {
    /// Nothing to wait for.
    pub fn done() -> Flush {
        Flush(None)
    }

    /// Waits up to `limit`; whether the writes are in the backend.
    pub async fn wait(self, limit: Duration) -> bool {
        match self.0 {
            None => true,
            Some(rx) => matches!(tokio::time::timeout(limit, rx).await, Ok(Ok(true))),
        }
    }
}

impl DurableStore {
    /// Must be called on a tokio runtime: writes are spawned on it.
    pub fn new(backend: Arc<dyn Backend>, limits: DurableLimits) -> Arc<DurableStore> {
        Arc::new_cyclic(|me| DurableStore {
            backend,
            limits,
            copies: Mutex::new(Copies::default()),
            counters: Counters::default(),
            failing: AtomicBool::new(false),
            errors_in_a_row: AtomicU32::new(0),
            last_probe: Mutex::new(None),
            holding: AtomicBool::new(false),
            writing_held: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            grace_said: AtomicBool::new(false),
            me: me.clone(),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// Readies `session` for a turn: the shared lease, then a load if memory is not current.
    /// While the backend does not answer, a session whose copy here is current (within
    /// `outage_grace` of the backend's last word on it) is carried: served from the copy, its
    /// writes held until the backend answers.
    ///
    /// # Errors
    /// The turn must go upstream unmodified: the lease stayed taken, or the backend fails and
    /// the session cannot be carried.
    pub async fn open(self: &Arc<Self>, session: &str) -> Result<Opened, Unavailable> {
        self.open_as(session, true).await
    }

    /// `open` for a turn, or (`turn` false) to write a copy's held writes: only a turn is
    /// carried or counted as unavailable.
    async fn open_as(self: &Arc<Self>, session: &str, turn: bool) -> Result<Opened, Unavailable> {
        let (why, copy_current) = match self.open_in_backend(session, turn).await {
            Ok(mut opened) => {
                // A load that no turn saw (writing held copies) is the next turn's news.
                let mut copies = self.copies.lock();
                if let Some(copy) = copies.sessions.get_mut(session) {
                    if !turn && opened.reloaded {
                        copy.reload_unseen = true;
                    } else if turn && std::mem::take(&mut copy.reload_unseen) {
                        opened.reloaded = true;
                    }
                }
                return Ok(opened);
            }
            Err(refusal) => refusal,
        };
        if why == Unavailable::Backend && turn {
            if copy_current && let Some(opened) = self.carry(session) {
                return Ok(opened);
            }
            bump(&self.counters.unavailable_turns);
        }
        Err(why)
    }

    /// `open` through the backend. A refusal says whether this replica's copy may still be
    /// current (the backend failed before saying otherwise).
    async fn open_in_backend(
        self: &Arc<Self>,
        session: &str,
        turn: bool,
    ) -> Result<Opened, (Unavailable, bool)> {
        self.healthy().await.map_err(|why| (why, true))?;
        let acquired = if self.backend.shared() {
            self.release_held_leases(session)
                .await
                .map_err(|why| (why, true))?;
            Some(
                self.acquire(session)
                    .await
                    .map_err(|why| (why, why == Unavailable::Backend))?,
            )
        } else {
            None
        };
        let ttl = self.limits.ttl;
        let (current, found, busy) = {
            let mut copies = self.copies.lock();
            // A copy idle past the time to live may describe a session the backend has dropped
            // (and, with Redis, restarted its fences for): it is read again.
            let idle = copies.get(session).is_some_and(|c| c.used.elapsed() > ttl);
            let copy = copies.touch(session);
            // Writing held copies never runs beside a turn of the same session: the turn's
            // commit takes them.
            let busy = !turn && copy.open > 0;
            copy.open += 1;
            copy.carried = false;
            let current = !busy
                && !idle
                && match acquired {
                    Some(a) => self.reconcile(copy, a.version),
                    None => copy.version.is_some(),
                };
            (current, copy.version.unwrap_or(0), busy)
        };
        let mut opened = Opened {
            store: self.clone(),
            session: session.to_owned(),
            fence: acquired.map(|a| a.fence),
            reloaded: false,
            loaded: current,
            found: acquired.map_or(found, |a| a.version),
            carried: false,
            closed: false,
        };
        if busy {
            // Releases the lease and writes nothing.
            drop(opened);
            return Err((Unavailable::LeaseTimeout, false));
        }
        if !current {
            // A cancelled load drops `opened`, which releases the lease and writes nothing.
            let Ok(snapshot) = self.call(self.backend.load(session)).await else {
                drop(opened);
                return Err((Unavailable::Backend, false));
            };
            bump(&self.counters.loads);
            self.copies.lock().replace_frozen(session, snapshot);
            opened.reloaded = true;
            opened.loaded = true;
        }
        Ok(opened)
    }

    /// Keeps a replay entry at once, outside any turn and its lease: for a value keyed by its
    /// content that other replicas should see before this session's next turn here (a model's
    /// result, which another replica would otherwise pay for again). Written behind; a failure
    /// is counted and costs only that.
    pub fn put_now(self: &Arc<Self>, session: &str, key: &str, value: &str) -> Flush {
        {
            let mut copies = self.copies.lock();
            let copy = copies.touch(session);
            let old = copy.frozen.insert(key.to_owned(), Arc::from(value));
            let removed = old.as_ref().map_or(0, |v| key.len() + v.len());
            copies.bytes = (copies.bytes + key.len() + value.len()).saturating_sub(removed);
            copies.frozen += usize::from(old.is_none());
        }
        let (store, session, key, value) = (
            self.clone(),
            session.to_owned(),
            key.to_owned(),
            value.to_owned(),
        );
        let (tx, rx) = oneshot::channel();
        self.runtime.spawn(async move {
            let ttl = store.limits.ttl;
            let put = store.backend.put(&session, &key, &value, ttl);
            let _ = tx.send(store.call(put).await.is_ok());
        });
        Flush(Some(rx))
    }

    /// The original behind `id`, from memory or the backend (an expand on a replica that did
    /// not cut it, or after a restart).
    pub async fn fetch(&self, session: Option<&str>, id: &str) -> Option<Arc<str>> {
        let local = match session {
            Some(session) => self.resolve(session, id),
            None => self.resolve_any(id),
        };
        if local.is_some() {
            return local;
        }
        let found = self.call(self.backend.fetch(session, id)).await.ok()??;
        Some(Arc::from(found))
    }

    /// Adds to a session's row of an experiment (`crate::Spend`); false when the backend did
    /// not take it (the request's measurement is lost, never its content).
    ///
    /// Outside [`DurableStore::call`]'s episodes on purpose: a measurement that fails must not
    /// make the store look failing to the turns (which would then go upstream unmodified).
    pub async fn add_spend(&self, experiment: &str, spend: &crate::spend::Spend) -> bool {
        let add = self.backend.add_spend(experiment, spend);
        matches!(
            tokio::time::timeout(self.limits.call_timeout, add).await,
            Ok(Ok(()))
        )
    }

    /// Every row of an experiment (outside the episodes, as [`DurableStore::add_spend`]).
    ///
    /// # Errors
    /// The backend's, or a timeout.
    pub async fn spends(&self, experiment: &str) -> Result<Vec<crate::spend::Spend>, BackendError> {
        // A read of every row may take longer than a turn's call: four of its timeouts.
        let limit = self.limits.call_timeout * 4;
        match tokio::time::timeout(limit, self.backend.spends(experiment)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(BackendError::Timeout(limit)),
        }
    }

    pub fn durable_stats(&self) -> DurableStats {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let copies = self.copies.lock();
        DurableStats {
            backend: self.backend.describe(),
            failing: self.failing.load(Ordering::Relaxed),
            occupancy: self.backend.occupancy(),
            cached_sessions: copies.sessions.len() as u64,
            cached_bytes: copies.bytes as u64,
            cache_evictions: load(&c.cache_evictions),
            loads: load(&c.loads),
            commits: load(&c.commits),
            commit_failures: load(&c.commit_failures),
            backend_errors: load(&c.backend_errors),
            lease_waits: load(&c.lease_waits),
            lease_timeouts: load(&c.lease_timeouts),
            lease_lost: load(&c.lease_lost),
            unavailable_turns: load(&c.unavailable_turns),
            quota_refused: load(&c.quota_refused),
            carried_sessions: load(&c.carried_sessions),
            carried_turns: load(&c.carried_turns),
            held_sessions: copies
                .sessions
                .values()
                .filter(|c| c.held.is_some())
                .count() as u64,
            writes_held: load(&c.writes_held),
            writes_replayed: load(&c.writes_replayed),
            writes_lost: load(&c.writes_lost),
            regressions: load(&c.regressions),
        }
    }

    /// A backend call, bounded in time; failures start (or continue) an episode.
    async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, BackendError>>,
    ) -> Result<T, BackendError> {
        let outcome = match tokio::time::timeout(self.limits.call_timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(BackendError::Timeout(self.limits.call_timeout)),
        };
        match &outcome {
            Ok(_) => {
                self.errors_in_a_row.store(0, Ordering::Relaxed);
                if self.failing.swap(false, Ordering::Relaxed) {
                    self.grace_said.store(false, Ordering::Relaxed);
                    tracing::info!(store = %self.backend.describe(), "state store answers again");
                }
                self.write_held_behind();
            }
            Err(error) => {
                bump(&self.counters.backend_errors);
                let in_a_row = self.errors_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                if in_a_row >= EPISODE_AFTER {
                    *self.last_probe.lock() = Some(Instant::now());
                    if !self.failing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            store = %self.backend.describe(),
                            %error,
                            grace = ?self.limits.outage_grace,
                            "state store failing: sessions this replica holds are carried from memory, others go upstream unmodified until it answers"
                        );
                    }
                } else {
                    tracing::debug!(store = %self.backend.describe(), %error, "state store call failed");
                }
            }
        }
        outcome
    }

    /// While an episode lasts, one turn a second asks the backend whether it is back; the
    /// others fail fast instead of each waiting out a timeout.
    async fn healthy(&self) -> Result<(), Unavailable> {
        if !self.failing.load(Ordering::Relaxed) {
            return Ok(());
        }
        {
            let mut last = self.last_probe.lock();
            if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                return Err(Unavailable::Backend);
            }
            *last = Some(Instant::now());
        }
        match self.call(self.backend.ping()).await {
            Ok(()) => return Ok(()),
            // A backend that does not answer in time is not tried twice in one turn.
            Err(BackendError::Timeout(_)) => return Err(Unavailable::Backend),
            Err(_) => {}
        }
        // A client whose connection died with the server fails its first call after the server
        // is back (and reconnects meanwhile): one more try tells, rather than another second
        // of turns served without the store.
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.call(self.backend.ping())
            .await
            .map_err(|_| Unavailable::Backend)
    }

    /// The session's shared lease, waiting up to `lease_wait` for another holder.
    async fn acquire(&self, session: &str) -> Result<Acquired, Unavailable> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        let mut waited = false;
        loop {
            let attempt = self
                .backend
                .acquire(session, self.limits.lease_hold, self.limits.ttl);
            match self.call(attempt).await {
                Ok(Some(acquired)) => return Ok(acquired),
                Ok(None) => {}
                Err(_) => return Err(Unavailable::Backend),
            }
            if !waited {
                waited = true;
                bump(&self.counters.lease_waits);
            }
            if started.elapsed() >= self.limits.lease_wait {
                bump(&self.counters.lease_timeouts);
                return Err(Unavailable::LeaseTimeout);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Takes a session's writes for the backend (all of them, or with `write` false only the
    /// lease's release), moves its copy to the version they make, and chains the commit after
    /// the session's previous one. `None`: nothing to send.
    fn take_commit(
        &self,
        session: &str,
        fence: Option<u64>,
        found: u64,
        write: bool,
    ) -> Option<(
        Commit,
        Option<Held>,
        Option<oneshot::Receiver<()>>,
        oneshot::Sender<()>,
    )> {
        let mut copies = self.copies.lock();
        let copy = copies.sessions.get_mut(session)?;
        copy.open = copy.open.saturating_sub(1);
        // What earlier turns held goes with this commit; a failure gives it back.
        let held = if write { copy.held.take() } else { None };
        let commit = if write {
            // Without a shared lease this process is the only writer: versions simply count.
            let fence = fence.unwrap_or_else(|| copy.version.unwrap_or(0) + 1);
            let stashes = std::mem::take(&mut copy.dirty_stashes)
                .into_iter()
                .filter_map(|id| copy.stashes.get(&id).map(|v| (id, v.clone())))
                .collect();
            let frozen = std::mem::take(&mut copy.dirty_frozen)
                .into_iter()
                .filter_map(|key| copy.frozen.get(&key).map(|v| (key, v.clone())))
                .collect();
            copy.version = Some(fence);
            Commit {
                fence,
                expected: found,
                stashes,
                frozen,
                ttl: self.limits.ttl,
                release_only: false,
            }
        } else {
            Commit {
                fence: fence?,
                expected: found,
                ttl: self.limits.ttl,
                release_only: true,
                ..Commit::default()
            }
        };
        let (done, tail) = oneshot::channel();
        let previous = copy.tail.replace(tail);
        Some((commit, held, previous, done))
    }

    /// Writes one turn, with what earlier turns `held`. A failure leaves the copy as the next
    /// turn must see it. No answer: the writes are held (dirty again, built on the version the
    /// turn found), for the next turn or the first call that succeeds. A lost lease (another
    /// replica has written the session since): the copy is read again on the next turn; the
    /// originals still go with its commit, the replay entries are counted lost.
    async fn write(&self, session: &str, commit: Commit, held: Option<Held>) -> bool {
        let (fence, expected) = (commit.fence, commit.expected);
        let release_only = commit.release_only;
        let stashes: Vec<String> = commit.stashes.iter().map(|(id, _)| id.clone()).collect();
        let frozen: Vec<String> = commit.frozen.iter().map(|(k, _)| k.clone()).collect();
        let outcome = self.call(self.backend.commit(session, commit)).await;
        if release_only {
            return outcome.is_ok();
        }
        let mut copies = self.copies.lock();
        let Some(copy) = copies.sessions.get_mut(session) else {
            return false;
        };
        match outcome {
            Ok(Committed::Written) => {
                bump(&self.counters.commits);
                copy.confirmed = Some(Instant::now());
                copy.confirmed_version = Some(fence);
                add(
                    &self.counters.writes_replayed,
                    held.map_or(0, |h| h.entries),
                );
                return true;
            }
            Ok(Committed::Fenced) => {
                bump(&self.counters.lease_lost);
                add(&self.counters.writes_lost, frozen.len());
                tracing::warn!(
                    store = %self.backend.describe(),
                    replay_entries = frozen.len(),
                    "a turn's lease was taken before its commit: its replay entries are dropped, the session reloads"
                );
                // The originals are still held: an id names one content, whoever wrote since.
                let held_before = held.as_ref().map_or(0, |h| h.entries);
                let entries = stashes.len() + held_before;
                copy.dirty_stashes.extend(stashes);
                if copy.version == Some(fence) {
                    copy.version = None;
                }
                if copy.held.is_none() && !copy.dirty_stashes.is_empty() {
                    add(
                        &self.counters.writes_held,
                        entries.saturating_sub(held_before),
                    );
                    copy.held = Some(Held {
                        base: fence,
                        fences: Vec::new(),
                        entries,
                    });
                    self.holding.store(true, Ordering::Relaxed);
                }
            }
            Err(_) => {
                bump(&self.counters.commit_failures);
                copy.dirty_stashes.extend(stashes);
                copy.dirty_frozen.extend(frozen);
                let before = held.as_ref().map_or(0, |h| h.entries)
                    + copy.held.as_ref().map_or(0, |h| h.entries);
                let mut fences = held.map(|h| h.fences).unwrap_or_default();
                fences.extend(copy.held.take().map(|h| h.fences).unwrap_or_default());
                fences.push(fence);
                let entries = copy.dirty();
                add(&self.counters.writes_held, entries.saturating_sub(before));
                copy.held = Some(Held {
                    base: expected,
                    fences,
                    entries,
                });
                if self.backend.shared() {
                    copy.version = Some(expected);
                }
                self.holding.store(true, Ordering::Relaxed);
                self.probe_behind();
            }
        }
        false
    }
}

impl Opened {
    /// Hands the turn's writes to the backend and releases the lease; returns at once.
    pub fn close(mut self) -> Flush {
        let loaded = self.loaded;
        self.finish(loaded)
    }

    fn finish(&mut self, write: bool) -> Flush {
        if std::mem::replace(&mut self.closed, true) {
            return Flush::done();
        }
        let store = self.store.clone();
        if self.carried {
            store.hold(&self.session);
            return Flush::done();
        }
        let Some((commit, held, previous, done)) =
            store.take_commit(&self.session, self.fence, self.found, write)
        else {
            return Flush::done();
        };
        let evicted = store.copies.lock().shrink(
            store.limits.cache_bytes,
            store.limits.copy_idle.min(store.limits.ttl),
        );
        store
            .counters
            .cache_evictions
            .fetch_add(evicted, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let session = self.session.clone();
        self.store.runtime.spawn(async move {
            if let Some(previous) = previous {
                // Its sender goes when that commit is done, written or not.
                let _ = previous.await;
            }
            let _ = tx.send(store.write(&session, commit, held).await);
            let _ = done.send(());
        });
        Flush(Some(rx))
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        // A turn that ends early (a bypass, a panic unwinding) still writes what it wrote; one
        // cancelled before its session was loaded only releases the lease.
        let loaded = self.loaded;
        let _ = self.finish(loaded);
    }
}

impl Store for DurableStore {
    fn stash(&self, session: &str, id: &str, original: &str) -> Result<(), StoreError> {
        let mut copies = self.copies.lock();
        let limits = self.limits;
        let copy = copies.touch(session);
        if copy.stashes.contains_key(id) {
            return Ok(());
        }
        // The backend has it (a replay after a reload): kept in memory, not written again.
        let stored = copy.stored_ids.contains(id);
        if copy.stashes.len() >= limits.session_stashes
            || copy.stash_bytes + original.len() > limits.session_bytes
        {
            bump(&self.counters.quota_refused);
            return Err(StoreError::Full);
        }
        copy.stashes.insert(id.to_owned(), Arc::from(original));
        if !stored {
            copy.dirty_stashes.push(id.to_owned());
        }
        copy.stash_bytes += original.len();
        copies.bytes += original.len();
        copies.stashes += 1;
        copies.stash_bytes += original.len();
        Ok(())
    }

    fn resolve(&self, session: &str, id: &str) -> Option<Arc<str>> {
        self.copies.lock().get(session)?.stashes.get(id).cloned()
    }

    fn resolve_any(&self, id: &str) -> Option<Arc<str>> {
        let copies = self.copies.lock();
        copies
            .sessions
            .values()
            .find_map(|copy| copy.stashes.get(id).cloned())
    }

    fn put_frozen(&self, session: &str, key: &str, value: &str) {
        let mut copies = self.copies.lock();
        let copy = copies.touch(session);
        let added = value.len() + key.len();
        let old = copy.frozen.insert(key.to_owned(), Arc::from(value));
        copy.dirty_frozen.insert(key.to_owned());
        let removed = old.map_or(0, |v| v.len() + key.len());
        let fresh = usize::from(removed == 0);
        copies.bytes = (copies.bytes + added).saturating_sub(removed);
        copies.frozen += fresh;
    }

    fn get_frozen(&self, session: &str, key: &str) -> Option<Arc<str>> {
        self.copies.lock().get(session)?.frozen.get(key).cloned()
    }

    fn persists(&self) -> bool {
        true
    }

    fn stats(&self) -> StoreStats {
        let copies = self.copies.lock();
        StoreStats {
            stashes: copies.stashes,
            stash_bytes: copies.stash_bytes,
            frozen_entries: copies.frozen,
            refused: self.counters.quota_refused.load(Ordering::Relaxed),
            quota_refused: self.counters.quota_refused.load(Ordering::Relaxed),
            expired: self.backend.occupancy().expired,
            frozen_evicted: 0,
        }
    }
}
