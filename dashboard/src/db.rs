//! The open dashboard ([`Dashboard`]): its file, the writer thread that does everything that
//! costs, the reader the API queries through, and the live hub; see the crate docs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::{Sender, TrySendError};
use parking_lot::Mutex;
use rusqlite::Connection;

use crate::event::{ContentHold, Counts, Event};
use crate::hub::{Full, Hub, Subscription};
use crate::schema::{self, DashboardError};
use crate::writer;

/// Events waiting for the writer; beyond it a request's event is dropped and counted.
pub const QUEUE: usize = 4096;
/// Bytes of request bodies held for content capture at once (from the turn until the writer
/// has read them); past it a request's content is not captured (`capture_blocked_by:
/// "budget"`), its row still is.
pub const CONTENT_BUDGET: u64 = 256 << 20;

/// Where and how the dashboard keeps its rows.
#[derive(Debug, Clone)]
pub struct DashboardOptions {
    /// The SQLite file, or `None` for memory only, this run's rows (a test, or `serve` with a
    /// state store that is not a file). Either is bounded alike (`retention`, `max_bytes`).
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

/// See the crate docs.
pub struct Dashboard {
    events: Mutex<Option<Sender<Event>>>,
    counts: Arc<Counts>,
    /// Events the writer took (for [`Dashboard::flush`]).
    accepted: AtomicU64,
    hub: Arc<Hub>,
    reader: Arc<Mutex<Connection>>,
    content: bool,
    /// The file the rows are kept in; `None` in memory.
    path: Option<PathBuf>,
    /// See [`Dashboard::session_key`].
    session_key: Vec<u8>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("content", &self.content)
            .field("path", &self.path)
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
            key: key.clone(),
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
            path: options.path,
            session_key: key,
            writer: Mutex::new(Some(handle)),
        })
    }

    /// The key this dashboard labels sessions with (`engine::session::label`), kept in its file
    /// so a session's label survives a restart; the logs label sessions with it too, so an
    /// access line and a dashboard row name a session alike.
    pub fn session_key(&self) -> &[u8] {
        &self.session_key
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

    /// The file the rows are kept in, or `None` when they are in memory (this run only).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Live summary rows from now on, after the ones since `last_event_id` still in the ring.
    ///
    /// # Errors
    /// Too many subscribers already.
    pub fn subscribe(&self, last_event_id: Option<u64>) -> Result<Subscription, Full> {
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
