//! State that survives a restart and is shared by replicas: the durable [`engine::store::Store`].
//!
//! The engine's `Store` is synchronous and never does I/O, because components call it in the
//! middle of a pipeline run. A durable store keeps that contract by working a session at a time:
//!
//! 1. [`DurableStore::open`] (async, before the pipeline) takes the session's lease in the
//!    backend when replicas share it, and loads the session's replay entries (freezes, tracker
//!    state, checkpoints) into memory when this process's copy is not the newest.
//! 2. The pipeline reads and writes memory only, recording what it wrote.
//! 3. [`DurableStore::close`] (after the pipeline, before forwarding) hands what was written to
//!    the backend *without waiting*, and returns a [`Flush`]. The proxy awaits the flush before it
//!    relays the reply's head: a client cannot send its next turn, nor a model ask for a marker,
//!    before it has seen this reply, so by then every replica can see this turn's writes, and a
//!    crash after the reply loses nothing the client was told about.
//!
//! Stashes (the originals behind markers) are never loaded in bulk: their ids are content
//! hashes, and a replayed freeze whose stash is not in memory re-stashes it from the transcript
//! the client sent. An expand that misses memory asks the backend ([`DurableStore::fetch`]).
//!
//! Backends: [`sqlite`] (embedded, one process per file, the default for `sluice serve`),
//! [`redis`] (shared by replicas, fenced leases). `memory` is `engine::store::MemoryStore`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

mod durable;
pub mod redis;
pub mod sqlite;
#[cfg(test)]
mod tests;

pub use durable::{DurableLimits, DurableStats, DurableStore, Flush, Opened, Unavailable};

/// Where state lives, as `--store`, `SLUICE_STORE` or `store.backend` name it.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// In this process only (`memory`): tests, `sluice compact`, an ephemeral run.
    Memory,
    /// Nothing is kept (`off`): every offload stays inert.
    Off,
    /// `sqlite:PATH`: embedded and durable, one process per file.
    Sqlite(PathBuf),
    /// `redis://HOST:PORT/DB`: shared by replicas.
    Redis(String),
}

/// A `--store` value that names no backend (a password in it is not repeated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown store `{}`: use `memory`, `off`, `sqlite:PATH` or `redis://HOST:PORT/DB` (TLS to Redis is not built in)",
    redact_url(.0)
)]
pub struct UnknownStore(pub String);

impl FromStr for StoreSpec {
    type Err = UnknownStore;

    fn from_str(s: &str) -> Result<StoreSpec, UnknownStore> {
        match s {
            "memory" => return Ok(StoreSpec::Memory),
            // The reference's `--store` switched `store.enabled`; its values still work.
            "off" | "false" | "disabled" => return Ok(StoreSpec::Off),
            _ => {}
        }
        if let Some(path) = s.strip_prefix("sqlite:").filter(|p| !p.is_empty()) {
            return Ok(StoreSpec::Sqlite(PathBuf::from(path)));
        }
        // `rediss://` (TLS) is not built in: it would bring a second TLS stack (see
        // docs/ARCHITECTURE.md, "Dependencies"); a TLS tunnel in front of Redis works.
        if s.starts_with("redis://") {
            return Ok(StoreSpec::Redis(s.to_owned()));
        }
        Err(UnknownStore(s.to_owned()))
    }
}

/// Printed at start-up and in `/stats`: a Redis password never is.
impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Off => f.write_str("off"),
            StoreSpec::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            StoreSpec::Redis(url) => f.write_str(&redact_url(url)),
        }
    }
}

impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `redis://user:secret@host/0` → `redis://user:***@host/0`. Everything between `://` and the
/// last `@` is credentials, whatever characters the password has (a `/` included).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((credentials, host)) => {
            let user = credentials
                .split_once(':')
                .map_or("", |(user, _)| user)
                .split('/')
                .next()
                .unwrap_or("");
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_owned(),
    }
}

/// Why a backend call failed. The message never carries a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    Io(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The backend's writer has stopped (the process is shutting down).
    #[error("the store's writer has stopped")]
    Closed,
}

/// The lease on a session in a shared backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    /// Unique per acquisition; a commit carrying an older fence than the lease's is refused.
    pub fence: u64,
    /// The fence of the last commit of this session (0: never committed).
    pub version: u64,
}

/// A session's replay entries, as the backend holds them, and the ids of its stashes (their
/// originals stay in the backend until an expand asks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub version: u64,
    pub frozen: Vec<(String, String)>,
    pub stash_ids: Vec<String>,
}

/// One turn's writes.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    /// Becomes the session's version.
    pub fence: u64,
    /// The version the turn found. A shared backend writes when the lease still holds `fence`,
    /// or when the lease has lapsed and the version is still this one (nobody wrote since).
    pub expected: u64,
    /// Only release the lease (a turn that never ran): nothing is written, the version stays.
    pub release_only: bool,
    pub stashes: Vec<(String, Arc<str>)>,
    pub frozen: Vec<(String, Arc<str>)>,
    /// Sliding time to live of the whole session, refreshed by every commit.
    pub ttl: Duration,
}

/// What became of a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    Written,
    /// The lease expired and another holder took it: nothing was written (the fence at work).
    Fenced,
}

/// What a backend holds, for `/stats`; read from counters, never from a scan on request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Sessions the backend holds (SQLite), or 0 where counting would cost a scan (Redis).
    pub sessions: u64,
    /// Bytes on disk (SQLite file and its WAL), 0 where unknown.
    pub bytes: u64,
    /// Sessions removed because their time to live ran out.
    pub expired: u64,
}

/// A durable home for sessions. Every call is bounded in time by the implementation.
#[async_trait]
pub trait Backend: Send + Sync {
    /// `sqlite:PATH` or a redacted Redis URL.
    fn describe(&self) -> String;

    /// Whether other processes use it at the same time (then every turn takes a lease).
    fn shared(&self) -> bool;

    /// Takes the session's lease for `hold`, or `None` while another holder has it (`ttl`: the
    /// session's time to live).
    async fn acquire(
        &self,
        session: &str,
        hold: Duration,
        ttl: Duration,
    ) -> Result<Option<Acquired>, BackendError>;

    async fn load(&self, session: &str) -> Result<Snapshot, BackendError>;

    /// Writes a turn and releases its lease, if the lease is still the commit's.
    async fn commit(&self, session: &str, commit: Commit) -> Result<Committed, BackendError>;

    /// Writes one replay entry outside any turn and without a lease: only for values keyed by
    /// their content (a model's result for one output), which no turn overwrites with another.
    async fn put(
        &self,
        session: &str,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), BackendError>;

    /// The original behind `id`: in `session`, or in any session for a trusted person.
    async fn fetch(&self, session: Option<&str>, id: &str) -> Result<Option<String>, BackendError>;

    /// Whether it answers (used while it is failing, to find out that it came back).
    async fn ping(&self) -> Result<(), BackendError>;

    fn occupancy(&self) -> Occupancy;
}
