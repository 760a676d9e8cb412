//! The dashboard store: what happened, per request, per session and per component, durable
//! across restarts, captured off the request path.
//!
//! The host builds one [`Event`] per request from values it already has (the pipeline's own
//! report, so the dashboard can never disagree with the rewrite) and hands it to
//! [`Dashboard::record`]: one `try_send` on a bounded channel, which drops and counts when full
//! and never waits. One writer thread does everything that costs: it redacts content, prices the
//! row at write time (`prices.rs`), gzips what it keeps, inserts a batch in one transaction
//! (SQLite, WAL, its own file), applies retention, and fans the summary rows out to live
//! subscribers ([`Hub`]). Reads (`query.rs`) go through a second connection, so a slow query
//! never holds the writer; ratios are computed when read, time series bucketed in SQL when
//! asked, and there are no rollup tables.

mod hub;
pub mod prices;
pub mod query;
pub mod redact;
mod schema;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use crossbeam_channel::{Sender, TrySendError};
use engine::wire::Dialect;
use parking_lot::Mutex;
use rusqlite::Connection;

use hub::Hub;
pub use hub::Subscription;

/// Events waiting for the writer; beyond it a request's event is dropped and counted.
pub const QUEUE: usize = 4096;
/// Bytes of request bodies held for content capture at once (from the turn until the writer
/// has read them); past it a request's content is not captured (`capture_blocked_by:
/// "budget"`), its row still is.
pub const CONTENT_BUDGET: u64 = 256 << 20;

/// Where and how the dashboard keeps its rows.
#[derive(Debug, Clone)]
pub struct DashboardOptions {
    /// The SQLite file, or `None` for memory only (a test, or a state store in memory).
    pub path: Option<PathBuf>,
    /// Rows older than this are deleted (`None`: kept until the size bound).
    pub retention: Option<Duration>,
    /// Bytes the rows may use before the oldest are deleted (`None`: no bound).
    pub max_bytes: Option<u64>,
    /// The operator's switch for message content (`--dashboard-content`, off by default).
    pub content: bool,
    /// Events queued for the writer at most.
    pub queue: usize,
}

impl Default for DashboardOptions {
    fn default() -> DashboardOptions {
        DashboardOptions {
            path: None,
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
            max_bytes: Some(512 << 20),
            content: false,
            queue: QUEUE,
        }
    }
}

/// The file beside a state store at `state`: `state.db` gives `state.dashboard.db`.
pub fn beside(state: &Path) -> PathBuf {
    let stem = state
        .file_stem()
        .map_or_else(|| "sluice".into(), |s| s.to_string_lossy().into_owned());
    state.with_file_name(format!("{stem}.dashboard.db"))
}

/// Why the dashboard could not start.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    #[error("dashboard database {path}: {source}")]
    Open {
        path: String,
        source: rusqlite::Error,
    },
    #[error("dashboard directory {path}: {source}")]
    Directory {
        path: String,
        source: std::io::Error,
    },
    #[error("dashboard query: {0}")]
    Query(#[from] rusqlite::Error),
    #[error("{0} is not a dashboard file (another program's, or the state store's)")]
    NotADashboard(String),
}

/// One request, as the host saw it. Plain values only: everything derived (prices, hashes,
/// redaction, content diffs) happens on the writer.
#[derive(Debug, Default)]
pub struct Event {
    /// Epoch milliseconds at the request's start.
    pub ts_ms: u64,
    /// The session key (credential scope and session id); stored only as a keyed hash.
    pub session: Option<String>,
    pub dialect: Option<Dialect>,
    pub model: Option<String>,
    /// `sync` or `observe`.
    pub mode: &'static str,
    /// The status the client got: the upstream's, sluice's own when it answered, or 499 when
    /// the client went away before an answer.
    pub status: u16,
    pub stream: bool,
    /// Why the body went upstream as it came, when it did.
    pub untouched: Option<&'static str>,
    pub messages: u32,
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// The components are what sync mode would have done (observe mode): nothing was cut.
    pub projected: bool,
    pub components: Vec<ComponentEvent>,
    /// Time sluice added before the request went upstream, in microseconds.
    pub added_us: u64,
    /// Until the upstream's response head, in milliseconds.
    pub upstream_ms: Option<u64>,
    pub usage: ReplyUsage,
    /// Expand rounds the expand loop ran for this request, and the tokens it restored.
    pub expand_rounds: u32,
    pub expand_tokens: u64,
    /// The bodies to take message content from, when both switches allow it.
    pub content: Option<ContentSource>,
    /// What stopped content capture (`operator`, `tenant`), when it was stopped.
    pub capture_blocked_by: Option<&'static str>,
}

/// What one component did on the request.
#[derive(Debug, Clone, Default)]
pub struct ComponentEvent {
    pub name: &'static str,
    /// `reformat` or `offload`.
    pub kind: &'static str,
    pub acted: bool,
    pub mutated: bool,
    pub reverted: Option<&'static str>,
    pub saved_tokens: u64,
    pub duration_us: u64,
    /// Why it declined items, with counts.
    pub gates: Vec<(&'static str, u32)>,
    /// Messages it changed.
    pub changed: Vec<usize>,
}

/// The provider's usage as read off the reply; `None` where the reply did not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyUsage {
    /// The model the reply names (a request that named none, like Azure's, is priced by it).
    pub model: Option<String>,
    /// Anthropic `input_tokens`; OpenAI `prompt_tokens` / Responses `input_tokens`, which
    /// include the cached part.
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
}

/// The request's own bytes and what went upstream: the writer reads the changed messages'
/// before and after text from them, off the request path.
#[derive(Debug)]
pub struct ContentSource {
    pub dialect: Dialect,
    pub original: Bytes,
    pub forwarded: Vec<engine::message::Message>,
    /// Its share of [`CONTENT_BUDGET`], given back when the writer is done with it.
    pub hold: ContentHold,
}

/// Bytes counted against [`CONTENT_BUDGET`] while a [`ContentSource`] lives.
#[derive(Debug)]
pub struct ContentHold {
    bytes: u64,
    held: Arc<AtomicU64>,
}

impl Drop for ContentHold {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Counters about the dashboard itself (`/stats` `dashboard_*`).
#[derive(Debug, Default)]
pub struct Counts {
    /// Events written.
    pub captured: AtomicU64,
    /// Events dropped because the writer's queue was full.
    pub dropped: AtomicU64,
    /// Bytes of request bodies held for content capture now.
    pub content_held: Arc<AtomicU64>,
    /// Events lost to a failed write.
    pub write_errors: AtomicU64,
    /// Rows deleted by retention (age or size).
    pub evicted_rows: AtomicU64,
    /// Live subscribers evicted for not reading.
    pub subscribers_evicted: AtomicU64,
}

/// See the module docs.
pub struct Dashboard {
    events: Mutex<Option<Sender<Event>>>,
    counts: Arc<Counts>,
    /// Events the writer took (for [`Dashboard::flush`]).
    accepted: AtomicU64,
    hub: Arc<Hub>,
    reader: Arc<Mutex<Connection>>,
    content: bool,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("content", &self.content)
            .finish_non_exhaustive()
    }
}

impl Dashboard {
    /// Opens (creating) the store and starts its writer thread.
    ///
    /// # Errors
    /// The file cannot be created or opened, or its schema cannot be made.
    pub fn open(options: DashboardOptions) -> Result<Dashboard, DashboardError> {
        let (writer_conn, reader) = schema::open(options.path.as_deref())?;
        let key = schema::session_key(&writer_conn.lock())?;
        let counts = Arc::new(Counts::default());
        let hub = Arc::new(Hub::default());
        let (tx, rx) = crossbeam_channel::bounded(options.queue.max(1));
        let writer = writer::Writer {
            conn: writer_conn,
            key,
            counts: counts.clone(),
            hub: hub.clone(),
            retention: options.retention,
            max_bytes: options.max_bytes,
        };
        let handle = std::thread::Builder::new()
            .name("sluice-dashboard".into())
            .spawn(move || writer.run(&rx))
            .map_err(|source| DashboardError::Directory {
                path: "(writer thread)".into(),
                source,
            })?;
        Ok(Dashboard {
            events: Mutex::new(Some(tx)),
            counts,
            accepted: AtomicU64::new(0),
            hub,
            reader,
            content: options.content,
            writer: Mutex::new(Some(handle)),
        })
    }

    /// Hands one request's event to the writer; never waits. A full queue drops it, counted.
    pub fn record(&self, event: Event) {
        let events = self.events.lock();
        let Some(tx) = events.as_ref() else {
            return;
        };
        match tx.try_send(event) {
            Ok(()) => {
                self.accepted.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts `bytes` of a request body against [`CONTENT_BUDGET`]; `None` when they do not fit.
    pub fn hold_content(&self, bytes: usize) -> Option<ContentHold> {
        let bytes = bytes as u64;
        let held = &self.counts.content_held;
        let mut now = held.load(Ordering::Relaxed);
        loop {
            if now.saturating_add(bytes) > CONTENT_BUDGET {
                return None;
            }
            match held.compare_exchange_weak(now, now + bytes, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => now = actual,
            }
        }
        Some(ContentHold {
            bytes,
            held: held.clone(),
        })
    }

    /// Whether the operator allows message content to be captured.
    pub fn content_enabled(&self) -> bool {
        self.content
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Live summary rows from now on, after the ones since `last_event_id` still in the ring.
    ///
    /// # Errors
    /// Too many subscribers already.
    pub fn subscribe(&self, last_event_id: Option<u64>) -> Result<Subscription, hub::Full> {
        self.hub.subscribe(last_event_id)
    }

    /// Subscribers connected now.
    pub fn subscribers(&self) -> usize {
        self.hub.len()
    }

    /// Runs a read on the reader connection. Blocking: a host calls it off its async threads.
    ///
    /// # Errors
    /// The query failed.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, DashboardError> {
        Ok(f(&self.reader.lock())?)
    }

    /// Ends every live subscription (a server draining for shutdown).
    pub fn close_live(&self) {
        self.hub.close();
    }

    /// Stops taking events, lets the writer store what is queued, and waits for it.
    pub fn close(&self) {
        self.events.lock().take();
        if let Some(handle) = self.writer.lock().take() {
            let _ = handle.join();
        }
        self.hub.close();
    }

    /// Waits until every event recorded so far is written (tests and benches).
    pub fn flush(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let done = self.counts.captured.load(Ordering::Relaxed)
                + self.counts.write_errors.load(Ordering::Relaxed);
            if done >= self.accepted.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.close();
    }
}

/// The current time in epoch milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests;
