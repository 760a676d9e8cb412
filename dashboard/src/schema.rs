//! The dashboard's tables, and opening its file.
//!
//! Epoch milliseconds throughout. Costs are columns, priced when the row is written (a price
//! change does not reprice history); ratios are never stored. A file whose `user_version` is
//! not this schema's is moved aside to `<file>.v<old>.bak` and a fresh one started: the
//! dashboard is history, not state, and must never stop sluice from starting.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use rusqlite::{Connection, OpenFlags, OptionalExtension};

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

/// 3: `declared_tokens` and `expand_reread_tokens`, the terms of the net saving a row lacked.
/// 4: `billed_*`, the terms of the billed saving, the headline.
pub(super) const VERSION: i64 = 4;
/// `PRAGMA application_id` of a dashboard file ("sdsh"): a file of another kind (the state
/// store's, say) is never taken for one, nor moved aside as an old one.
const APPLICATION_ID: i64 = 0x7364_7368;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts INTEGER NOT NULL,
    session TEXT,
    route TEXT NOT NULL,
    model TEXT,
    mode TEXT NOT NULL,
    status INTEGER NOT NULL,
    stream INTEGER NOT NULL,
    untouched TEXT,
    messages INTEGER NOT NULL,
    tokens_before INTEGER NOT NULL,
    tokens_after INTEGER NOT NULL,
    saved_tokens INTEGER NOT NULL,
    projected INTEGER NOT NULL,
    acted TEXT NOT NULL,
    fresh_input INTEGER,
    cache_read INTEGER,
    cache_write INTEGER,
    output_tokens INTEGER,
    expand_rounds INTEGER NOT NULL,
    expand_tokens INTEGER NOT NULL,
    expand_reread_tokens INTEGER NOT NULL,
    declared_tokens INTEGER NOT NULL,
    billed_requests INTEGER NOT NULL,
    billed_input REAL NOT NULL,
    billed_cut REAL NOT NULL,
    billed_declared REAL NOT NULL,
    billed_missed REAL NOT NULL,
    billed_rounds REAL NOT NULL,
    added_us INTEGER NOT NULL,
    upstream_ms INTEGER,
    cost_usd REAL,
    baseline_cost_usd REAL,
    saved_usd REAL,
    expand_cost_usd REAL,
    net_saved_usd REAL,
    content_captured INTEGER NOT NULL,
    capture_blocked_by TEXT
);
CREATE INDEX IF NOT EXISTS requests_by_ts ON requests (ts);
CREATE INDEX IF NOT EXISTS requests_by_session ON requests (session, ts);
CREATE TABLE IF NOT EXISTS request_components (
    request_id INTEGER NOT NULL REFERENCES requests (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    component TEXT NOT NULL,
    kind TEXT NOT NULL,
    acted INTEGER NOT NULL,
    mutated INTEGER NOT NULL,
    reverted TEXT,
    saved_tokens INTEGER NOT NULL,
    duration_us INTEGER NOT NULL,
    gates TEXT,
    PRIMARY KEY (request_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS request_content (
    request_id INTEGER NOT NULL REFERENCES requests (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message INTEGER NOT NULL,
    role TEXT NOT NULL,
    tool TEXT,
    components TEXT NOT NULL,
    before_tokens INTEGER NOT NULL,
    after_tokens INTEGER NOT NULL,
    before_gz BLOB NOT NULL,
    after_gz BLOB NOT NULL,
    PRIMARY KEY (request_id, seq)
) WITHOUT ROWID;
";

/// The writer's connection and the reader's (one shared connection when in memory).
pub(super) type Connections = (Arc<Mutex<Connection>>, Arc<Mutex<Connection>>);

pub(super) fn open(path: Option<&Path>) -> Result<Connections, DashboardError> {
    let Some(path) = path else {
        let conn = Connection::open_in_memory().map_err(|e| opening(":memory:", e))?;
        prepare(&conn).map_err(|e| opening(":memory:", e))?;
        let shared = Arc::new(Mutex::new(conn));
        return Ok((shared.clone(), shared));
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| DashboardError::Directory {
            path: dir.display().to_string(),
            source,
        })?;
    }
    let shown = path.display().to_string();
    let writer = Connection::open(path).map_err(|e| opening(&shown, e))?;
    let found: i64 = writer
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| opening(&shown, e))?;
    let kind: i64 = writer
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| opening(&shown, e))?;
    let tables: i64 = writer
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(|e| opening(&shown, e))?;
    // A file with tables that does not say it is a dashboard's (the state store's, or another
    // program's) is not ours to write or move aside; a dashboard from before the file said so
    // is known by its tables.
    let ours = kind == APPLICATION_ID || (kind == 0 && looks_like_a_dashboard(&writer));
    if tables > 0 && !ours {
        return Err(DashboardError::NotADashboard(shown));
    }
    let writer = if tables > 0 && found != VERSION {
        drop(writer);
        let aside = format!("{shown}.v{found}.bak");
        std::fs::rename(path, &aside).map_err(|source| DashboardError::Directory {
            path: aside.clone(),
            source,
        })?;
        for suffix in ["-wal", "-shm"] {
            let _ = std::fs::rename(format!("{shown}{suffix}"), format!("{aside}{suffix}"));
        }
        tracing::warn!(old = found, moved_to = %aside, "dashboard schema changed: started a fresh file");
        Connection::open(path).map_err(|e| opening(&shown, e))?
    } else {
        writer
    };
    prepare(&writer).map_err(|e| opening(&shown, e))?;
    let reader = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| opening(&shown, e))?;
    reader
        .busy_timeout(std::time::Duration::from_secs(2))
        .map_err(|e| opening(&shown, e))?;
    Ok((Arc::new(Mutex::new(writer)), Arc::new(Mutex::new(reader))))
}

/// A dashboard file of version 1, which did not set `application_id` yet.
fn looks_like_a_dashboard(conn: &Connection) -> bool {
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap_or(0);
    count(
        "SELECT count(*) FROM sqlite_master WHERE name IN ('requests', 'request_components', 'request_content')",
    ) == 3
        && count("SELECT count(*) FROM meta WHERE key = 'session_key'") == 1
}

fn prepare(conn: &Connection) -> rusqlite::Result<()> {
    // WAL: readers never wait for the writer. NORMAL: a crash may lose the last batch, which is
    // history, never state.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(std::time::Duration::from_secs(2))?;
    conn.execute_batch(SCHEMA)?;
    conn.pragma_update(None, "user_version", VERSION)?;
    conn.pragma_update(None, "application_id", APPLICATION_ID)?;
    Ok(())
}

fn opening(path: &str, source: rusqlite::Error) -> DashboardError {
    DashboardError::Open {
        path: path.to_owned(),
        source,
    }
}

/// The key sessions are hashed with: random, made once per file, so a session keeps its row
/// label across restarts but the label cannot be reversed by guessing session ids.
pub(super) fn session_key(conn: &Connection) -> Result<Vec<u8>, DashboardError> {
    let found: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'session_key'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(hex) = found {
        return Ok(hex.into_bytes());
    }
    let hex = random_hex();
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('session_key', ?1)",
        [&hex],
    )?;
    Ok(hex.into_bytes())
}

/// 32 hex digits from the standard library's OS-seeded hasher keys.
fn random_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    (0..2)
        .map(|i| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u8(i);
            format!("{:016x}", h.finish())
        })
        .collect()
}

/// Bytes the rows use (pages in use; deleted rows' pages are reused, not returned).
pub(super) fn used_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    Ok(((pages - free).max(0) * size) as u64)
}
