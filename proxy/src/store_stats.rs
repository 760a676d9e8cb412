//! The state store in `/stats` (`store_*`) and `/metrics` (`cg_store_*`): occupancy, quota
//! refusals, evictions, backend errors and lease waits, one table ([`STORE_FIELDS`]) rendered
//! into both, like `modes::stats::FIELDS`.

use engine::store::StoreStats;
use modes::stats::table::{Field, MetricType, Num};
use store::DurableStats;

/// What the rows read: the engine-side counters every store has, and the durable store's own
/// (zero for `memory` and `off`).
#[derive(Debug, Default)]
pub struct StoreView {
    pub store: StoreStats,
    pub durable: DurableStats,
}

/// A row with a `/stats` key and an unlabelled series (the store's and the dashboard's tables).
pub(crate) const fn row<S>(
    json: &'static str,
    metric: &'static str,
    kind: MetricType,
    unit: &'static str,
    help: &'static str,
    value: fn(&S) -> Num,
) -> Field<S> {
    Field {
        json: Some(json),
        metric: Some(metric),
        labels: "",
        kind,
        unit,
        help,
        value,
    }
}

pub(crate) fn count(n: impl TryInto<u64>) -> Num {
    Num::Count(n.try_into().unwrap_or(u64::MAX))
}

use MetricType::{Counter, Gauge};

pub static STORE_FIELDS: &[Field<StoreView>] = &[
    row(
        "store_stashes",
        "cg_store_stashes",
        Gauge,
        "stashes",
        "Originals behind markers held in memory (with SQLite or Redis: copies of sessions in use).",
        |v| count(v.store.stashes),
    ),
    row(
        "store_stash_bytes",
        "cg_store_stash_bytes",
        Gauge,
        "bytes",
        "Bytes of those originals.",
        |v| count(v.store.stash_bytes),
    ),
    row(
        "store_frozen_entries",
        "cg_store_frozen_entries",
        Gauge,
        "entries",
        "Replay entries (freezes, session state, checkpoints) held in memory.",
        |v| count(v.store.frozen_entries),
    ),
    row(
        "store_refused",
        "cg_store_refused_total",
        Counter,
        "stashes",
        "Stashes refused (reserve full of live stashes, or the per-session quota): the content stayed as it was (gate `store_full`).",
        |v| count(v.store.refused),
    ),
    row(
        "store_quota_refused",
        "cg_store_quota_refused_total",
        Counter,
        "stashes",
        "Of those, refused by the per-session quota (`store.session_max_stashes`, `store.session_max_mb`).",
        |v| count(v.store.quota_refused),
    ),
    row(
        "store_expired",
        "cg_store_expired_total",
        Counter,
        "entries",
        "Entries (memory) or whole sessions (SQLite) dropped because their time to live ran out.",
        |v| count(v.store.expired),
    ),
    row(
        "store_frozen_evicted",
        "cg_store_frozen_evicted_total",
        Counter,
        "entries",
        "Replay entries evicted from the memory store to make room.",
        |v| count(v.store.frozen_evicted),
    ),
    row(
        "store_failing",
        "cg_store_failing",
        Gauge,
        "0/1",
        "1 while the durable backend fails: sessions this replica holds are carried from memory (`store.outage_grace_seconds`), others go upstream unmodified until it answers.",
        |v| count(u64::from(v.durable.failing)),
    ),
    row(
        "store_backend_sessions",
        "cg_store_backend_sessions",
        Gauge,
        "sessions",
        "Sessions the backend holds (SQLite; 0 for Redis, where counting would be a scan).",
        |v| count(v.durable.occupancy.sessions),
    ),
    row(
        "store_backend_bytes",
        "cg_store_backend_bytes",
        Gauge,
        "bytes",
        "Size of the SQLite file and its write-ahead log.",
        |v| count(v.durable.occupancy.bytes),
    ),
    row(
        "store_cached_sessions",
        "cg_store_cached_sessions",
        Gauge,
        "sessions",
        "Sessions copied in memory from the durable backend.",
        |v| count(v.durable.cached_sessions),
    ),
    row(
        "store_cached_bytes",
        "cg_store_cached_bytes",
        Gauge,
        "bytes",
        "Bytes of those copies (bounded by `store.rewind_reserve_mb`).",
        |v| count(v.durable.cached_bytes),
    ),
    row(
        "store_cache_evictions",
        "cg_store_cache_evictions_total",
        Counter,
        "sessions",
        "Session copies dropped from memory to stay in budget (their state is safe in the backend).",
        |v| count(v.durable.cache_evictions),
    ),
    row(
        "store_loads",
        "cg_store_loads_total",
        Counter,
        "sessions",
        "Sessions loaded from the backend: a first turn after a restart, or a turn after another replica's.",
        |v| count(v.durable.loads),
    ),
    row(
        "store_commits",
        "cg_store_commits_total",
        Counter,
        "turns",
        "Turns written to the backend.",
        |v| count(v.durable.commits),
    ),
    row(
        "store_commit_failures",
        "cg_store_commit_failures_total",
        Counter,
        "turns",
        "Turns whose writes the backend did not take (the session reloads on its next turn).",
        |v| count(v.durable.commit_failures),
    ),
    row(
        "store_backend_errors",
        "cg_store_backend_errors_total",
        Counter,
        "calls",
        "Backend calls that failed or timed out (each episode is logged once).",
        |v| count(v.durable.backend_errors),
    ),
    row(
        "store_lease_waits",
        "cg_store_lease_waits_total",
        Counter,
        "turns",
        "Turns that found another replica holding their session's lease and waited.",
        |v| count(v.durable.lease_waits),
    ),
    row(
        "store_lease_timeouts",
        "cg_store_lease_timeouts_total",
        Counter,
        "turns",
        "Turns that waited `store.lease_wait_ms` in vain and went upstream unmodified.",
        |v| count(v.durable.lease_timeouts),
    ),
    row(
        "store_lease_lost",
        "cg_store_lease_lost_total",
        Counter,
        "turns",
        "Commits refused because their lease had expired and another replica has written the session since (fencing): their replay entries are dropped (`store_writes_lost`), their originals go with the next commit, and the session reloads on its next turn.",
        |v| count(v.durable.lease_lost),
    ),
    row(
        "store_unavailable_turns",
        "cg_store_unavailable_turns_total",
        Counter,
        "turns",
        "Turns that went upstream unmodified because the backend failed and their session could not be carried.",
        |v| count(v.durable.unavailable_turns),
    ),
    row(
        "store_carried_sessions",
        "cg_store_carried_sessions_total",
        Counter,
        "sessions",
        "Sessions served from this replica's copy while the backend did not answer (once per session and outage): their decisions replayed byte-identically, their writes held.",
        |v| count(v.durable.carried_sessions),
    ),
    row(
        "store_carried_turns",
        "cg_store_carried_turns_total",
        Counter,
        "turns",
        "Turns of those sessions served from memory.",
        |v| count(v.durable.carried_turns),
    ),
    row(
        "store_held_sessions",
        "cg_store_held_sessions",
        Gauge,
        "sessions",
        "Sessions whose copy holds writes the backend has not taken yet (kept in memory until it does).",
        |v| count(v.durable.held_sessions),
    ),
    row(
        "store_writes_held",
        "cg_store_writes_held_total",
        Counter,
        "entries",
        "Originals and replay entries held for the backend while it did not answer.",
        |v| count(v.durable.writes_held),
    ),
    row(
        "store_writes_replayed",
        "cg_store_writes_replayed_total",
        Counter,
        "entries",
        "Of those, written once it answered, in order and under the session's lease.",
        |v| count(v.durable.writes_replayed),
    ),
    row(
        "store_writes_lost",
        "cg_store_writes_lost_total",
        Counter,
        "entries",
        "Entries that never reached the backend: replay entries of a commit whose lease another replica took, and originals a backend lost that no copy here held (each logged).",
        |v| count(v.durable.writes_lost),
    ),
    row(
        "store_regressions",
        "cg_store_regressions_total",
        Counter,
        "sessions",
        "Sessions the backend had lost writes of (a restart without persistence, a failover to a lagging replica), written back from this replica's copy.",
        |v| count(v.durable.regressions),
    ),
];
