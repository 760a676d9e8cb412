//! [`DurableStore`]: the engine's `Store` over a [`Backend`], a session at a time (see the
//! module docs of `actors::store` for the open / run / close cycle).
//!
//! Memory holds a *copy* of each session in use: its replay entries as of its last load, the
//! stashes this process has seen, and what the running turn wrote. The copy is bounded in bytes
//! and the least recently used sessions are dropped from it first; since everything a copy holds
//! is in the backend once its turn has closed, dropping one loses nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use engine::store::{Store, StoreError, StoreStats};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::{Acquired, Backend, BackendError, Commit, Committed, Occupancy};

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
    /// How long a shared lease lives if its holder dies.
    pub lease_hold: Duration,
    /// How long a turn waits for another replica's lease before going upstream unmodified.
    pub lease_wait: Duration,
    /// Bound on any one backend call.
    pub call_timeout: Duration,
}

impl DurableLimits {
    pub const DEFAULT: DurableLimits = DurableLimits {
        ttl: Duration::from_secs(10_000),
        session_stashes: 2_000,
        session_bytes: 64 << 20,
        cache_bytes: 256 << 20,
        lease_hold: Duration::from_secs(10),
        lease_wait: Duration::from_millis(500),
        call_timeout: Duration::from_secs(2),
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

/// Counters for `/stats` and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurableStats {
    pub backend: String,
    /// The backend is failing right now (turns go upstream unmodified).
    pub failing: bool,
    pub occupancy: Occupancy,
    /// Sessions copied in memory now, and the bytes they hold.
    pub cached_sessions: u64,
    pub cached_bytes: u64,
    /// Session copies dropped from memory to stay within `cache_bytes` (their state is safe in
    /// the backend).
    pub cache_evictions: u64,
    /// Sessions loaded from the backend (first use, a restart, another replica's turn).
    pub loads: u64,
    pub commits: u64,
    pub commit_failures: u64,
    /// Backend calls that failed or timed out.
    pub backend_errors: u64,
    /// Turns that found another holder on the session's lease and waited.
    pub lease_waits: u64,
    /// Turns that gave up waiting and went upstream unmodified.
    pub lease_timeouts: u64,
    /// Commits refused because their lease had expired and been taken (fencing).
    pub lease_lost: u64,
    /// Turns that went upstream unmodified because the backend was failing.
    pub unavailable_turns: u64,
    /// Stashes refused by the per-session quota.
    pub quota_refused: u64,
}

#[derive(Debug, Default)]
struct Counters {
    cache_evictions: AtomicU64,
    loads: AtomicU64,
    commits: AtomicU64,
    commit_failures: AtomicU64,
    backend_errors: AtomicU64,
    lease_waits: AtomicU64,
    lease_timeouts: AtomicU64,
    lease_lost: AtomicU64,
    unavailable_turns: AtomicU64,
    quota_refused: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// One session's copy in memory.
#[derive(Debug)]
struct Copy {
    /// The backend version this copy matches; `None` until loaded, or after a failed commit.
    version: Option<u64>,
    stashes: HashMap<String, Arc<str>>,
    frozen: HashMap<String, Arc<str>>,
    dirty_stashes: Vec<String>,
    dirty_frozen: BTreeSet<String>,
    stash_bytes: usize,
    /// Turns of this session between open and close: never dropped from memory meanwhile.
    open: usize,
    tick: u64,
    used: Instant,
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
            tick: 0,
            used: now,
        }
    }

    fn bytes(&self) -> usize {
        self.stash_bytes
            + self
                .frozen
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

#[derive(Debug, Default)]
struct Copies {
    sessions: HashMap<String, Copy>,
    recency: BTreeMap<u64, String>,
    next_tick: u64,
    /// Approximate bytes held (originals and replay values), kept up to date on every write.
    bytes: usize,
    stashes: usize,
    stash_bytes: usize,
    frozen: usize,
}

impl Copies {
    /// `session`'s copy, created if absent, marked most recently used.
    fn touch(&mut self, session: &str) -> &mut Copy {
        self.next_tick += 1;
        let tick = self.next_tick;
        let now = Instant::now();
        let copy = self
            .sessions
            .entry(session.to_owned())
            .or_insert_with(|| Copy::new(now));
        let old = std::mem::replace(&mut copy.tick, tick);
        copy.used = now;
        self.recency.remove(&old);
        self.recency.insert(tick, session.to_owned());
        self.sessions.get_mut(session).expect("inserted above")
    }

    fn get(&self, session: &str) -> Option<&Copy> {
        self.sessions.get(session)
    }

    /// Replaces a session's replay entries with a loaded snapshot (its stashes stay: an id names
    /// one content forever).
    fn replace_frozen(&mut self, session: &str, version: u64, frozen: Vec<(String, String)>) {
        let copy = self.touch(session);
        let old_bytes = copy.bytes();
        let old_count = copy.frozen.len();
        copy.frozen = frozen.into_iter().map(|(k, v)| (k, Arc::from(v))).collect();
        copy.dirty_frozen.clear();
        copy.version = Some(version);
        let (new_bytes, new_count) = (copy.bytes(), copy.frozen.len());
        self.bytes = self.bytes + new_bytes - old_bytes;
        self.frozen = self.frozen + new_count - old_count;
    }

    /// Drops least recently used copies that no turn has open until the bytes fit, and copies
    /// idle past the time to live. Returns how many went.
    fn shrink(&mut self, budget: usize, ttl: Duration) -> u64 {
        let mut dropped = 0;
        let now = Instant::now();
        let mut passed = Vec::new();
        while let Some((tick, session)) = self.recency.pop_first() {
            let Some(copy) = self.sessions.get(&session) else {
                continue;
            };
            let stale = now.duration_since(copy.used) > ttl;
            if !stale && self.bytes <= budget {
                self.recency.insert(tick, session);
                break;
            }
            if copy.open > 0 {
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

/// The engine's `Store` kept in a [`Backend`]. See the module docs.
pub struct DurableStore {
    backend: Arc<dyn Backend>,
    limits: DurableLimits,
    copies: Mutex<Copies>,
    counters: Counters,
    /// Set on the first failure of an episode, cleared by the first success after it: each
    /// episode is logged once, at its start and at its end.
    failing: AtomicBool,
    last_probe: Mutex<Option<Instant>>,
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
        Arc::new(DurableStore {
            backend,
            limits,
            copies: Mutex::new(Copies::default()),
            counters: Counters::default(),
            failing: AtomicBool::new(false),
            last_probe: Mutex::new(None),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// Readies `session` for a turn: the shared lease, then a load if memory is not current.
    ///
    /// # Errors
    /// The turn must go upstream unmodified: the lease stayed taken, or the backend fails.
    pub async fn open(self: &Arc<Self>, session: &str) -> Result<Opened, Unavailable> {
        let refused = |why: Unavailable| {
            if why == Unavailable::Backend {
                bump(&self.counters.unavailable_turns);
            }
            why
        };
        self.healthy().await.map_err(refused)?;
        let acquired = if self.backend.shared() {
            Some(self.acquire(session).await.map_err(refused)?)
        } else {
            None
        };
        let current = {
            let mut copies = self.copies.lock();
            let copy = copies.touch(session);
            copy.open += 1;
            match acquired {
                Some(a) => copy.version == Some(a.version),
                None => copy.version.is_some(),
            }
        };
        let mut opened = Opened {
            store: self.clone(),
            session: session.to_owned(),
            fence: acquired.map(|a| a.fence),
            reloaded: false,
            closed: false,
        };
        if !current {
            match self.call(self.backend.load(session)).await {
                Ok(snapshot) => {
                    bump(&self.counters.loads);
                    let mut copies = self.copies.lock();
                    copies.replace_frozen(session, snapshot.version, snapshot.frozen);
                    opened.reloaded = true;
                }
                Err(_) => {
                    // Release the lease without writing: nothing was run.
                    opened.abandon();
                    return Err(refused(Unavailable::Backend));
                }
            }
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
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(store = %self.backend.describe(), "state store answers again");
                }
            }
            Err(error) => {
                bump(&self.counters.backend_errors);
                *self.last_probe.lock() = Some(Instant::now());
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        store = %self.backend.describe(),
                        %error,
                        "state store failing: turns go upstream unmodified until it answers"
                    );
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
            let attempt = self.backend.acquire(session, self.limits.lease_hold);
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

    /// Takes a session's writes for the backend, and moves its copy to the version they make.
    fn take_commit(&self, session: &str, fence: Option<u64>, write: bool) -> Option<Commit> {
        let mut copies = self.copies.lock();
        let copy = copies.sessions.get_mut(session)?;
        copy.open = copy.open.saturating_sub(1);
        if !write {
            return None;
        }
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
        Some(Commit {
            fence,
            stashes,
            frozen,
            ttl: self.limits.ttl,
        })
    }

    /// Writes one turn; on any failure the copy is marked stale so the next turn reloads what
    /// the backend really holds.
    async fn write(&self, session: &str, commit: Commit) -> bool {
        let fence = commit.fence;
        let written = match self.call(self.backend.commit(session, commit)).await {
            Ok(Committed::Written) => {
                bump(&self.counters.commits);
                true
            }
            Ok(Committed::Fenced) => {
                bump(&self.counters.lease_lost);
                false
            }
            Err(_) => {
                bump(&self.counters.commit_failures);
                false
            }
        };
        if !written {
            let mut copies = self.copies.lock();
            if let Some(copy) = copies.sessions.get_mut(session)
                && copy.version == Some(fence)
            {
                copy.version = None;
            }
        }
        written
    }
}

impl Opened {
    /// Hands the turn's writes to the backend and releases the lease; returns at once.
    pub fn close(mut self) -> Flush {
        self.finish(true)
    }

    /// Releases without writing (the turn never ran).
    fn abandon(&mut self) {
        let _ = self.finish(false);
    }

    fn finish(&mut self, write: bool) -> Flush {
        if std::mem::replace(&mut self.closed, true) {
            return Flush::done();
        }
        let store = &self.store;
        let commit = store.take_commit(&self.session, self.fence, write);
        // A shared lease is released by a commit, so an abandoned turn sends an empty one. It
        // moves the backend's version without changing content: other copies reload once, which
        // costs a read and is never wrong.
        let commit = match (commit, self.fence) {
            (Some(commit), _) => commit,
            (None, Some(fence)) => Commit {
                fence,
                ttl: store.limits.ttl,
                ..Commit::default()
            },
            (None, None) => return Flush::done(),
        };
        let (tx, rx) = oneshot::channel();
        let store = store.clone();
        let session = self.session.clone();
        let evicted = {
            let mut copies = store.copies.lock();
            copies.shrink(store.limits.cache_bytes, store.limits.ttl)
        };
        store
            .counters
            .cache_evictions
            .fetch_add(evicted, Ordering::Relaxed);
        self.store.runtime.spawn(async move {
            let _ = tx.send(store.write(&session, commit).await);
        });
        Flush(Some(rx))
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        // A turn that ends early (a bypass, a panic unwinding) still writes what it wrote.
        let _ = self.finish(true);
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
        if copy.stashes.len() >= limits.session_stashes
            || copy.stash_bytes + original.len() > limits.session_bytes
        {
            bump(&self.counters.quota_refused);
            return Err(StoreError::Full);
        }
        copy.stashes.insert(id.to_owned(), Arc::from(original));
        copy.dirty_stashes.push(id.to_owned());
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
