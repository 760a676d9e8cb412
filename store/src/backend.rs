//! What a durable backend does for [`crate::DurableStore`]: the [`Backend`] trait and the values
//! that cross it (leases, snapshots, commits).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::spend::Spend;

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

    /// Adds to a session's row of `experiment` (see [`crate::Spend`]).
    async fn add_spend(&self, experiment: &str, spend: &Spend) -> Result<(), BackendError> {
        let _ = (experiment, spend);
        Err(BackendError::Io(
            "this store keeps no experiment".to_owned(),
        ))
    }

    /// Every row of `experiment`.
    async fn spends(&self, experiment: &str) -> Result<Vec<Spend>, BackendError> {
        let _ = experiment;
        Err(BackendError::Io(
            "this store keeps no experiment".to_owned(),
        ))
    }
}
