//! What a [`super::DurableStore`] counts, for `/stats` and `/metrics` (rendered by the proxy's
//! `store_stats.rs` table).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::Occupancy;

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
    /// Sessions carried through a backend outage from their copy here, and their turns.
    pub carried_sessions: u64,
    pub carried_turns: u64,
    /// Sessions whose copy holds writes the backend has not taken yet (a gauge).
    pub held_sessions: u64,
    /// Entries (originals, replay entries) held for the backend, and of those, written since.
    pub writes_held: u64,
    pub writes_replayed: u64,
    /// Entries that never reached the backend: replay entries of a commit whose lease another
    /// replica took, and originals a backend lost that no copy here could give back.
    pub writes_lost: u64,
    /// Sessions found behind this replica's copy: the backend lost writes (a restart without
    /// persistence, a failover to a replica that lagged). The copy was written back whole.
    pub regressions: u64,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) cache_evictions: AtomicU64,
    pub(super) loads: AtomicU64,
    pub(super) commits: AtomicU64,
    pub(super) commit_failures: AtomicU64,
    pub(super) backend_errors: AtomicU64,
    pub(super) lease_waits: AtomicU64,
    pub(super) lease_timeouts: AtomicU64,
    pub(super) lease_lost: AtomicU64,
    pub(super) unavailable_turns: AtomicU64,
    pub(super) quota_refused: AtomicU64,
    pub(super) carried_sessions: AtomicU64,
    pub(super) carried_turns: AtomicU64,
    pub(super) writes_held: AtomicU64,
    pub(super) writes_replayed: AtomicU64,
    pub(super) writes_lost: AtomicU64,
    pub(super) regressions: AtomicU64,
}

pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub(super) fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(n as u64, Ordering::Relaxed);
}
