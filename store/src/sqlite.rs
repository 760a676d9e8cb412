//! The SQLite backend: embedded, durable, the default for `sluice serve`.
//!
//! One writer thread owns the one connection and is fed by a bounded channel; it takes every job
//! waiting and runs them in one transaction, so a burst of turns costs one commit. Reads go
//! through the same thread: they are rare (a session's first turn after a restart, an expand
//! that missed memory) and then see every write queued before them.
//!
//! WAL with `synchronous = NORMAL`: a committed turn survives the process being killed (the WAL
//! is in the operating system's hands), and the last few may be lost to a power cut, which
//! costs a cache write on the next turn, never content. The file is locked for one process
//! (`locking_mode = EXCLUSIVE`): replicas share Redis, not a file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::oneshot;

use crate::backend::{Acquired, Backend, BackendError, Commit, Committed, Occupancy, Snapshot};

/// Jobs waiting for the writer before senders block (off the request path: commits are spawned).
const QUEUE: usize = 1024;
/// Jobs run in one transaction at most.
const BATCH: usize = 256;
/// How often expired sessions are deleted.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS stashes (
    session TEXT NOT NULL,
    id TEXT NOT NULL,
    original TEXT NOT NULL,
    UNIQUE (session, id)
);
CREATE INDEX IF NOT EXISTS stashes_by_id ON stashes (id);
CREATE TABLE IF NOT EXISTS frozen (
    session TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    UNIQUE (session, key)
);
PRAGMA user_version = 1;
";

type Reply<T> = oneshot::Sender<Result<T, BackendError>>;

enum Job {
    Load(String, Reply<Snapshot>),
    Commit(String, Commit, Reply<Committed>),
    Fetch(Option<String>, String, Reply<Option<String>>),
    Put(Entry, Reply<()>),
    Ping(Reply<()>),
    AddSpend(String, crate::spend::Spend, Reply<()>),
    Spends(String, Reply<Vec<crate::spend::Spend>>),
}

/// One replay entry written outside a turn.
struct Entry {
    session: String,
    key: String,
    value: String,
    ttl: Duration,
}

#[derive(Debug, Default)]
struct Counts {
    sessions: AtomicU64,
    bytes: AtomicU64,
    expired: AtomicU64,
}

/// See the module docs.
pub struct SqliteBackend {
    path: PathBuf,
    jobs: Sender<Job>,
    counts: Arc<Counts>,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The default file for a `sluice serve` listening on `listen`: [`default_path`] for the default
/// address, and a file of its own for any other. People run one sluice per project or per agent
/// on one machine; SQLite serves one process, so with one default file the second would be
/// refused.
pub fn default_path_for(listen: std::net::SocketAddr) -> PathBuf {
    if listen == std::net::SocketAddr::from(([127, 0, 0, 1], 4000)) {
        return default_path();
    }
    let name = match listen.ip() {
        ip if ip.is_loopback() => format!("state-{}.db", listen.port()),
        ip => format!(
            "state-{}-{}.db",
            ip.to_string().replace([':', '.'], "_"),
            listen.port()
        ),
    };
    default_path().with_file_name(name)
}

/// Where `sluice serve` on the default listen address keeps its state when told nothing:
/// `$XDG_STATE_HOME/sluice/state.db`, else `~/.local/state/sluice/state.db`, else
/// `./sluice-state.db`.
pub fn default_path() -> PathBuf {
    let state_home = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")));
    match state_home {
        Some(dir) => dir.join("sluice").join("state.db"),
        None => PathBuf::from("sluice-state.db"),
    }
}

impl SqliteBackend {
    /// Opens (creating) the file and starts the writer.
    ///
    /// # Errors
    /// Only when another process holds the file: two processes on one file would each believe
    /// they own its sessions. Any other problem (a read-only file, a missing directory that
    /// cannot be made) starts a failing episode instead: turns go upstream unmodified and the
    /// writer tries again on each job.
    pub fn open(path: &Path) -> Result<SqliteBackend, BackendError> {
        let counts = Arc::new(Counts::default());
        let first = match connect(path) {
            Ok(conn) => Some(conn),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy =>
            {
                return Err(BackendError::Io(format!(
                    "{} is in use by another process (SQLite serves one process; replicas share \
                     Redis): give this sluice a file of its own with --store sqlite:PATH, or \
                     --store memory",
                    path.display()
                )));
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "state store cannot be opened");
                None
            }
        };
        if let Some(conn) = &first {
            let n: i64 = conn
                .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
                .unwrap_or(0);
            counts.sessions.store(n as u64, Ordering::Relaxed);
        }
        let (jobs, rx) = crossbeam_channel::bounded(QUEUE);
        let writer = Writer {
            path: path.to_owned(),
            conn: first,
            counts: counts.clone(),
            last_sweep: Instant::now(),
            last_measure: None,
            unmeasured: false,
        };
        std::thread::Builder::new()
            .name("sluice-sqlite".to_owned())
            .spawn(move || writer.run(&rx))
            .map_err(|e| BackendError::Io(format!("cannot start the store writer: {e}")))?;
        Ok(SqliteBackend {
            path: path.to_owned(),
            jobs,
            counts,
        })
    }

    async fn ask<T: Send + 'static>(
        &self,
        job: impl FnOnce(Reply<T>) -> Job,
    ) -> Result<T, BackendError> {
        let (reply, answer) = oneshot::channel();
        match self.jobs.try_send(job(reply)) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) => {
                // The writer is behind: wait for room on a blocking thread, never on the runtime.
                let jobs = self.jobs.clone();
                tokio::task::spawn_blocking(move || jobs.send(job))
                    .await
                    .map_err(|_| BackendError::Closed)?
                    .map_err(|_| BackendError::Closed)?;
            }
            Err(TrySendError::Disconnected(_)) => return Err(BackendError::Closed),
        }
        answer.await.map_err(|_| BackendError::Closed)?
    }
}

fn connect(path: &Path) -> rusqlite::Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::ZERO)?;
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // The schema is a write: it takes the exclusive lock now, so a second process is told at
    // start-up rather than on its first turn.
    conn.execute_batch(SCHEMA)?;
    // Experiments' rows (`crate::spend`): a table of their own, added to a file of any age.
    conn.execute_batch(crate::spend::SQLITE_SCHEMA)?;
    Ok(conn)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn io(error: rusqlite::Error) -> BackendError {
    BackendError::Io(format!("sqlite: {error}"))
}

struct Writer {
    path: PathBuf,
    conn: Option<Connection>,
    counts: Arc<Counts>,
    last_sweep: Instant,
    /// When the file's size was last read for `/stats` (see [`Writer::measure`]), and whether
    /// a write since has gone unmeasured.
    last_measure: Option<Instant>,
    unmeasured: bool,
}

/// How often the writer reads the file's size for `/stats`: two `statx` calls per batch were 3%
/// of the writer's time when every turn is a batch.
const MEASURE_EVERY: Duration = Duration::from_secs(1);

impl Writer {
    fn run(mut self, rx: &Receiver<Job>) {
        loop {
            // A size reading put off by the last batch is taken once the writer idles.
            let wait = if self.unmeasured {
                MEASURE_EVERY
            } else {
                SWEEP_EVERY
            };
            let first = match rx.recv_timeout(wait) {
                Ok(job) => job,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if self.last_sweep.elapsed() >= SWEEP_EVERY {
                        self.sweep();
                    }
                    self.measure();
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.run_batch(batch);
            if self.last_sweep.elapsed() >= SWEEP_EVERY {
                self.sweep();
            }
        }
    }

    fn connection(&mut self) -> Result<&mut Connection, BackendError> {
        if self.conn.is_none() {
            self.conn = Some(connect(&self.path).map_err(io)?);
        }
        Ok(self.conn.as_mut().expect("set above"))
    }

    /// Runs every job in one transaction; replies only once it is committed, so an
    /// acknowledged write is on disk. When the transaction fails, every job hears why.
    fn run_batch(&mut self, batch: Vec<Job>) {
        let counts = self.counts.clone();
        let (answers, transaction_failed) = match self.connection() {
            Ok(conn) => run_in_transaction(conn, batch, &counts),
            Err(error) => (
                batch.into_iter().map(|job| job.failed(&error)).collect(),
                true,
            ),
        };
        if transaction_failed {
            // Reopened on the next batch: a file that became writable again recovers. (One job's
            // own failure is rolled back, to its savepoint or with the transaction when it ran
            // alone, and keeps the connection.)
            self.conn = None;
        }
        answers.into_iter().for_each(Answer::send);
        self.measure();
    }

    fn measure(&mut self) {
        if self
            .last_measure
            .is_some_and(|at| at.elapsed() < MEASURE_EVERY)
        {
            self.unmeasured = true;
            return;
        }
        self.unmeasured = false;
        self.last_measure = Some(Instant::now());
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let bytes = size(&self.path) + size(Path::new(&wal));
        self.counts.bytes.store(bytes, Ordering::Relaxed);
    }

    fn sweep(&mut self) {
        self.last_sweep = Instant::now();
        let now = now_ms();
        let Ok(conn) = self.connection() else {
            return;
        };
        let swept = (|| -> rusqlite::Result<usize> {
            let tx = conn.transaction()?;
            let expired = "SELECT session FROM sessions WHERE expires_ms < ?1";
            tx.execute(
                &format!("DELETE FROM stashes WHERE session IN ({expired})"),
                [now],
            )?;
            tx.execute(
                &format!("DELETE FROM frozen WHERE session IN ({expired})"),
                [now],
            )?;
            let n = tx.execute("DELETE FROM sessions WHERE expires_ms < ?1", [now])?;
            tx.commit()?;
            Ok(n)
        })();
        if let Ok(n) = swept {
            self.counts.expired.fetch_add(n as u64, Ordering::Relaxed);
            let _ = self
                .counts
                .sessions
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    Some(s.saturating_sub(n as u64))
                });
        }
    }
}

/// What a batch changed in the session count, applied once its transaction commits.
#[derive(Default)]
struct Tally {
    added: u64,
    expired: u64,
}

/// Runs a batch in one transaction, each job of several under its own savepoint (a failing job
/// leaves no partial write); the answers, and whether the transaction itself failed.
fn run_in_transaction(
    conn: &mut Connection,
    batch: Vec<Job>,
    counts: &Counts,
) -> (Vec<Answer>, bool) {
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(error) => {
            let error = io(error);
            return (
                batch.into_iter().map(|job| job.failed(&error)).collect(),
                true,
            );
        }
    };
    let mut tally = Tally::default();
    if let [_] = batch.as_slice() {
        // One job (the common case: every turn's write is a batch of its own under light load)
        // needs no savepoint: when it fails, the whole transaction is rolled back instead.
        let job = batch.into_iter().next().expect("one job");
        let answer = run_job(&tx, job, &mut tally);
        if answer.is_err() {
            // A rollback that fails (SQLite may have ended the transaction itself, on a full
            // disk) drops the connection; the job still hears its own error.
            let rolled_back = tx.rollback().is_ok();
            return (vec![answer], !rolled_back);
        }
        return commit(tx, vec![answer], &tally, counts);
    }
    let answers: Vec<Answer> = batch
        .into_iter()
        .map(|job| match tx.savepoint() {
            Ok(mut savepoint) => {
                let mut job_tally = Tally::default();
                let answer = run_job(&savepoint, job, &mut job_tally);
                if answer.is_err() {
                    let _ = savepoint.rollback();
                } else if savepoint.commit().is_ok() {
                    tally.added += job_tally.added;
                    tally.expired += job_tally.expired;
                }
                answer
            }
            Err(error) => job.failed(&io(error)),
        })
        .collect();
    commit(tx, answers, &tally, counts)
}

/// Commits a batch's transaction: its answers as they are, or each carrying why it did not
/// commit; and whether the transaction failed.
fn commit(
    tx: rusqlite::Transaction<'_>,
    answers: Vec<Answer>,
    tally: &Tally,
    counts: &Counts,
) -> (Vec<Answer>, bool) {
    match tx.commit() {
        Ok(()) => {
            counts.sessions.fetch_add(tally.added, Ordering::Relaxed);
            counts.expired.fetch_add(tally.expired, Ordering::Relaxed);
            let _ = counts
                .sessions
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some(n.saturating_sub(tally.expired))
                });
            (answers, false)
        }
        Err(error) => {
            let error = io(error);
            (
                answers.into_iter().map(|a| a.failed(&error)).collect(),
                true,
            )
        }
    }
}

impl Job {
    fn failed(self, error: &BackendError) -> Answer {
        match self {
            Job::Load(_, reply) => Answer::Load(reply, Err(error.clone())),
            Job::Commit(_, _, reply) => Answer::Commit(reply, Err(error.clone())),
            Job::Fetch(_, _, reply) => Answer::Fetch(reply, Err(error.clone())),
            Job::Put(_, reply) => Answer::Ping(reply, Err(error.clone())),
            Job::Ping(reply) | Job::AddSpend(_, _, reply) => {
                Answer::Ping(reply, Err(error.clone()))
            }
            Job::Spends(_, reply) => Answer::Spends(reply, Err(error.clone())),
        }
    }
}

/// A job's result, sent after the transaction commits.
enum Answer {
    Load(Reply<Snapshot>, Result<Snapshot, BackendError>),
    Commit(Reply<Committed>, Result<Committed, BackendError>),
    Fetch(Reply<Option<String>>, Result<Option<String>, BackendError>),
    Ping(Reply<()>, Result<(), BackendError>),
    Spends(
        Reply<Vec<crate::spend::Spend>>,
        Result<Vec<crate::spend::Spend>, BackendError>,
    ),
}

impl Answer {
    fn is_err(&self) -> bool {
        match self {
            Answer::Load(_, r) => r.is_err(),
            Answer::Commit(_, r) => r.is_err(),
            Answer::Fetch(_, r) => r.is_err(),
            Answer::Ping(_, r) => r.is_err(),
            Answer::Spends(_, r) => r.is_err(),
        }
    }

    /// The same reply, now carrying `error` (the transaction it ran in did not commit).
    fn failed(self, error: &BackendError) -> Answer {
        match self {
            Answer::Load(reply, _) => Answer::Load(reply, Err(error.clone())),
            Answer::Commit(reply, _) => Answer::Commit(reply, Err(error.clone())),
            Answer::Fetch(reply, _) => Answer::Fetch(reply, Err(error.clone())),
            Answer::Ping(reply, _) => Answer::Ping(reply, Err(error.clone())),
            Answer::Spends(reply, _) => Answer::Spends(reply, Err(error.clone())),
        }
    }

    fn send(self) {
        match self {
            Answer::Load(reply, r) => drop(reply.send(r)),
            Answer::Commit(reply, r) => drop(reply.send(r)),
            Answer::Fetch(reply, r) => drop(reply.send(r)),
            Answer::Ping(reply, r) => drop(reply.send(r)),
            Answer::Spends(reply, r) => drop(reply.send(r)),
        }
    }
}

fn run_job(conn: &Connection, job: Job, tally: &mut Tally) -> Answer {
    match job {
        Job::Load(session, reply) => Answer::Load(reply, load(conn, &session, tally).map_err(io)),
        Job::Commit(session, commit, reply) => {
            let written = write(conn, &session, &commit, tally).map_err(io);
            Answer::Commit(reply, written.map(|()| Committed::Written))
        }
        Job::Fetch(session, id, reply) => {
            Answer::Fetch(reply, fetch(conn, session.as_deref(), &id).map_err(io))
        }
        Job::Put(entry, reply) => Answer::Ping(reply, put(conn, &entry, tally).map_err(io)),
        // A write, so a file that can be read but not written is not taken for healthy.
        Job::Ping(reply) => Answer::Ping(
            reply,
            conn.pragma_update(None, "user_version", 1).map_err(io),
        ),
        Job::AddSpend(experiment, spend, reply) => Answer::Ping(
            reply,
            crate::spend::sqlite_add(conn, &experiment, &spend).map_err(io),
        ),
        Job::Spends(experiment, reply) => Answer::Spends(
            reply,
            crate::spend::sqlite_all(conn, &experiment).map_err(io),
        ),
    }
}

/// Deletes `session` if its time to live has run out and the sweep has not come yet, so an
/// expired session is never read, nor revived with its old rows by a new write.
fn clear_expired(
    conn: &Connection,
    session: &str,
    now: i64,
    tally: &mut Tally,
) -> rusqlite::Result<()> {
    let gone = conn
        .prepare_cached("DELETE FROM sessions WHERE session = ?1 AND expires_ms < ?2")?
        .execute(params![session, now])?;
    if gone > 0 {
        conn.prepare_cached("DELETE FROM stashes WHERE session = ?1")?
            .execute([session])?;
        conn.prepare_cached("DELETE FROM frozen WHERE session = ?1")?
            .execute([session])?;
        tally.expired += 1;
    }
    Ok(())
}

fn load(conn: &Connection, session: &str, tally: &mut Tally) -> rusqlite::Result<Snapshot> {
    clear_expired(conn, session, now_ms(), tally)?;
    let version: Option<i64> = conn
        .prepare_cached("SELECT version FROM sessions WHERE session = ?1")?
        .query_row([session], |r| r.get(0))
        .optional()?;
    let Some(version) = version else {
        return Ok(Snapshot::default());
    };
    let frozen = conn
        .prepare_cached("SELECT key, value FROM frozen WHERE session = ?1")?
        .query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<(String, String)>>>()?;
    let stash_ids = conn
        .prepare_cached("SELECT id FROM stashes WHERE session = ?1")?
        .query_map([session], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(Snapshot {
        version: version as u64,
        frozen,
        stash_ids,
    })
}

/// Creates or refreshes the session row: at `version` when given (a turn), else keeping the
/// version it has (0 for a new row).
fn upsert_session(
    conn: &Connection,
    session: &str,
    version: Option<u64>,
    ttl: Duration,
    tally: &mut Tally,
) -> rusqlite::Result<()> {
    let now = now_ms();
    let expires = now.saturating_add(ttl.as_millis() as i64);
    // A live session's next write, the common case, is one statement. One whose time to live
    // ran out is not updated: it is cleared below and written new, so its old rows never revive.
    // No version (a stash's touch) keeps the stored one.
    let updated = conn
        .prepare_cached(
            "UPDATE sessions SET version = coalesce(?2, version), expires_ms = ?3 \
             WHERE session = ?1 AND expires_ms >= ?4",
        )?
        .execute(params![session, version.map(|v| v as i64), expires, now])?;
    if updated > 0 {
        return Ok(());
    }
    clear_expired(conn, session, now, tally)?;
    let new = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO sessions (session, version, expires_ms) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![session, version.unwrap_or(0) as i64, expires])?;
    if new > 0 {
        tally.added += 1;
    }
    Ok(())
}

fn write(
    conn: &Connection,
    session: &str,
    commit: &Commit,
    tally: &mut Tally,
) -> rusqlite::Result<()> {
    if commit.release_only {
        // One process per file holds no lease to release.
        return Ok(());
    }
    upsert_session(conn, session, Some(commit.fence), commit.ttl, tally)?;
    let mut stash = conn.prepare_cached(
        "INSERT OR IGNORE INTO stashes (session, id, original) VALUES (?1, ?2, ?3)",
    )?;
    for (id, original) in &commit.stashes {
        stash.execute(params![session, id, &**original])?;
    }
    let mut frozen = conn.prepare_cached(
        "INSERT INTO frozen (session, key, value) VALUES (?1, ?2, ?3) \
         ON CONFLICT (session, key) DO UPDATE SET value = excluded.value",
    )?;
    for (key, value) in &commit.frozen {
        frozen.execute(params![session, key, &**value])?;
    }
    Ok(())
}

/// A value written outside a turn: the session row is created at version 0 if it is new (no
/// turn written), or keeps its version.
fn put(conn: &Connection, entry: &Entry, tally: &mut Tally) -> rusqlite::Result<()> {
    upsert_session(conn, &entry.session, None, entry.ttl, tally)?;
    conn.prepare_cached(
        "INSERT INTO frozen (session, key, value) VALUES (?1, ?2, ?3) \
         ON CONFLICT (session, key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![entry.session, entry.key, entry.value])?;
    Ok(())
}

fn fetch(tx: &Connection, session: Option<&str>, id: &str) -> rusqlite::Result<Option<String>> {
    match session {
        Some(session) => tx
            .prepare_cached("SELECT original FROM stashes WHERE session = ?1 AND id = ?2")?
            .query_row(params![session, id], |r| r.get(0))
            .optional(),
        None => tx
            .prepare_cached("SELECT original FROM stashes WHERE id = ?1 LIMIT 1")?
            .query_row([id], |r| r.get(0))
            .optional(),
    }
}

#[async_trait]
impl Backend for SqliteBackend {
    fn describe(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    fn shared(&self) -> bool {
        false
    }

    async fn acquire(
        &self,
        _: &str,
        _: Duration,
        _: Duration,
    ) -> Result<Option<Acquired>, BackendError> {
        // One process per file: the session actors are the lease.
        Ok(Some(Acquired {
            fence: 0,
            version: 0,
        }))
    }

    async fn load(&self, session: &str) -> Result<Snapshot, BackendError> {
        let session = session.to_owned();
        self.ask(|reply| Job::Load(session, reply)).await
    }

    async fn commit(&self, session: &str, commit: Commit) -> Result<Committed, BackendError> {
        let session = session.to_owned();
        self.ask(|reply| Job::Commit(session, commit, reply)).await
    }

    async fn fetch(&self, session: Option<&str>, id: &str) -> Result<Option<String>, BackendError> {
        let (session, id) = (session.map(str::to_owned), id.to_owned());
        self.ask(|reply| Job::Fetch(session, id, reply)).await
    }

    async fn put(
        &self,
        session: &str,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), BackendError> {
        let entry = Entry {
            session: session.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            ttl,
        };
        self.ask(|reply| Job::Put(entry, reply)).await
    }

    async fn ping(&self) -> Result<(), BackendError> {
        self.ask(Job::Ping).await
    }

    async fn add_spend(
        &self,
        experiment: &str,
        spend: &crate::spend::Spend,
    ) -> Result<(), BackendError> {
        let (experiment, spend) = (experiment.to_owned(), spend.clone());
        self.ask(|reply| Job::AddSpend(experiment, spend, reply))
            .await
    }

    async fn spends(&self, experiment: &str) -> Result<Vec<crate::spend::Spend>, BackendError> {
        let experiment = experiment.to_owned();
        self.ask(|reply| Job::Spends(experiment, reply)).await
    }

    fn occupancy(&self) -> Occupancy {
        Occupancy {
            sessions: self.counts.sessions.load(Ordering::Relaxed),
            bytes: self.counts.bytes.load(Ordering::Relaxed),
            expired: self.counts.expired.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(session: &str) -> Job {
        let (reply, _) = oneshot::channel();
        let entry = Entry {
            session: session.to_owned(),
            key: "state".to_owned(),
            value: "{}".to_owned(),
            ttl: Duration::from_secs(60),
        };
        Job::Put(entry, reply)
    }

    fn sessions(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .expect("counted")
    }

    #[test]
    fn a_failing_job_leaves_nothing_alone_or_in_a_batch_and_keeps_the_connection() {
        let dir = std::env::temp_dir().join(format!("sluice-sqlite-jobs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut conn = connect(&dir.join("state.db")).expect("opened");
        let counts = Counts::default();

        let (answers, failed) = run_in_transaction(&mut conn, vec![put("kept")], &counts);
        assert!(!answers[0].is_err() && !failed);
        assert_eq!(sessions(&conn), 1);

        // A put writes its session's row, then its value: without the table for the value, the
        // row it wrote first must go too.
        conn.execute_batch("DROP TABLE frozen").expect("dropped");
        let (answers, failed) = run_in_transaction(&mut conn, vec![put("alone")], &counts);
        assert!(answers[0].is_err(), "the job hears why");
        assert!(!failed, "the connection is kept");
        assert_eq!(sessions(&conn), 1, "its session row is rolled back");

        let (reply, _) = oneshot::channel();
        let batch = vec![put("in a batch"), Job::Ping(reply)];
        let (answers, failed) = run_in_transaction(&mut conn, batch, &counts);
        assert!(answers[0].is_err() && !answers[1].is_err() && !failed);
        assert_eq!(
            sessions(&conn),
            1,
            "only the failing job's writes are rolled back"
        );
        assert_eq!(counts.sessions.load(Ordering::Relaxed), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A write to a live session updates its row in place; to one whose time to live ran out
    /// (before the sweep came), it clears the old rows and starts the session anew; to none,
    /// it adds one.
    #[test]
    fn a_write_updates_a_live_session_and_starts_an_expired_one_anew() {
        let dir = std::env::temp_dir().join(format!("sluice-sqlite-ttl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let conn = connect(&dir.join("state.db")).expect("opened");
        let row = |session: &str| -> Option<(i64, i64)> {
            conn.query_row(
                "SELECT version, expires_ms FROM sessions WHERE session = ?1",
                [session],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .expect("read")
        };
        let frozen = |session: &str| -> i64 {
            conn.query_row(
                "SELECT count(*) FROM frozen WHERE session = ?1",
                [session],
                |r| r.get(0),
            )
            .expect("counted")
        };
        let hour = Duration::from_secs(3600);
        let mut tally = Tally::default();

        upsert_session(&conn, "live", Some(3), hour, &mut tally).expect("written");
        assert_eq!(tally.added, 1, "a new session is added");
        let (version, first_expiry) = row("live").expect("its row");
        assert_eq!(version, 3);
        upsert_session(&conn, "live", None, hour, &mut tally).expect("written");
        upsert_session(&conn, "live", Some(4), hour, &mut tally).expect("written");
        let (version, expiry) = row("live").expect("its row");
        assert_eq!((version, tally.added, tally.expired), (4, 1, 0));
        assert!(expiry >= first_expiry, "the time to live slides");

        // A session whose time ran out, with a value of its own still on file.
        conn.execute(
            "INSERT INTO sessions (session, version, expires_ms) VALUES ('gone', 9, 1)",
            [],
        )
        .expect("inserted");
        conn.execute(
            "INSERT INTO frozen (session, key, value) VALUES ('gone', 'state', '{}')",
            [],
        )
        .expect("inserted");
        upsert_session(&conn, "gone", None, hour, &mut tally).expect("written");
        let (version, expiry) = row("gone").expect("written anew");
        assert_eq!(version, 0, "an expired session starts anew");
        assert!(expiry > now_ms(), "with a fresh time to live");
        assert_eq!(frozen("gone"), 0, "its old rows are gone");
        assert_eq!((tally.added, tally.expired), (2, 1));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
