//! State that survives a restart and is shared by replicas: the durable [`engine::store::Store`].
//!
//! The engine's `Store` is synchronous and never does I/O, because components call it in the
//! middle of a pipeline run. A durable store keeps that contract by working a session at a time:
//!
//! 1. [`DurableStore::open`] (async, before the pipeline) takes the session's lease in the
//!    backend when replicas share it, and loads the session's replay entries (freezes, tracker
//!    state, checkpoints) into memory when this process's copy is not the newest.
//! 2. The pipeline reads and writes memory only, recording what it wrote.
//! 3. [`Opened::close`] (after the pipeline, before forwarding) hands what was written to
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

mod backend;
mod copies;
mod durable;
pub mod redis;
mod spec;
mod spend;
pub mod sqlite;
#[cfg(test)]
mod tests;

pub use backend::{Acquired, Backend, BackendError, Commit, Committed, Occupancy, Snapshot};
pub use durable::{DurableLimits, DurableStats, DurableStore, Flush, Opened, Unavailable};
pub use spec::{StoreSpec, UnknownStore, redact_url};
pub use spend::Spend;
