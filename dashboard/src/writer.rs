//! The dashboard's writer thread: everything that costs, off the request path.
//!
//! It takes the events waiting (up to [`BATCH`], or whatever arrived within [`LINGER`]) and
//! writes them in one transaction: the row priced, its components, and, when both switches
//! allowed it, the changed messages' text before and after, redacted, capped and gzipped. After
//! the commit it publishes each row's summary to the live hub. Retention runs every
//! [`SWEEP_EVERY`]: rows past the age bound, then the oldest rows while the file is over its
//! size bound.

use std::fmt::Write as _;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use parking_lot::Mutex;
use rusqlite::{Connection, params};

use crate::event::{ComponentEvent, ContentSource, Counts, Event, now_ms};
use crate::hub::Hub;
use crate::prices::{self, Billed, Work};
use crate::{redact, schema};

/// Events written in one transaction at most.
pub(super) const BATCH: usize = 128;
/// How long a batch waits for more events after its first.
pub(super) const LINGER: Duration = Duration::from_millis(250);
/// How often a lingering batch looks for more events.
const POLL: Duration = Duration::from_millis(10);
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// Captured text per message, bytes (cut on a character boundary).
pub const CONTENT_CAP: usize = 16 << 10;
/// Messages whose text is captured per request.
pub const CONTENT_MESSAGES: usize = 24;

pub(super) struct Writer {
    pub(super) conn: Arc<Mutex<Connection>>,
    pub(super) key: Vec<u8>,
    pub(super) counts: Arc<Counts>,
    pub(super) hub: Arc<Hub>,
    pub(super) retention: Option<Duration>,
    pub(super) max_bytes: Option<u64>,
}

impl Writer {
    pub(super) fn run(self, events: &Receiver<Event>) {
        let mut swept = Instant::now();
        self.sweep();
        loop {
            let first = match events.recv_timeout(SWEEP_EVERY) {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) => {
                    self.sweep();
                    swept = Instant::now();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let batch = linger(first, events);
            self.write(batch);
            if swept.elapsed() >= SWEEP_EVERY {
                self.sweep();
                swept = Instant::now();
            }
        }
    }

    fn write(&self, batch: Vec<Event>) {
        let n = batch.len() as u64;
        let rows: Vec<Prepared> = batch.into_iter().map(|e| self.prepare(e)).collect();
        let stored = {
            let mut conn = self.conn.lock();
            insert(&mut conn, &rows)
        };
        match stored {
            Ok(ids) => {
                self.counts.captured.fetch_add(n, Ordering::Relaxed);
                for (id, row) in ids.into_iter().zip(&rows) {
                    let evicted = self.hub.publish((id, summary(id, row).into()));
                    self.counts
                        .subscribers_evicted
                        .fetch_add(evicted, Ordering::Relaxed);
                }
            }
            Err(error) => {
                self.counts.write_errors.fetch_add(n, Ordering::Relaxed);
                tracing::warn!(%error, events = n, "dashboard write failed; those rows are lost");
            }
        }
    }

    /// Everything derived from an event: its session hash, prices and content.
    fn prepare(&self, event: Event) -> Prepared {
        let session = event
            .session
            .as_deref()
            .map(|s| engine::session::label(&self.key, s));
        let fresh = fresh_input(&event);
        let priced = event
            .model
            .as_deref()
            .and_then(prices::price)
            .and_then(|price| {
                let fresh = fresh?;
                let billed = Billed {
                    fresh,
                    cache_read: event.usage.cache_read.unwrap_or(0),
                    cache_write: event.usage.cache_write.unwrap_or(0),
                    output: event.usage.output.unwrap_or(0),
                };
                let work = Work {
                    saved_tokens: event.tokens_before.saturating_sub(event.tokens_after),
                    declared_tokens: event.declared_tokens,
                    reread_tokens: event.expand_reread_tokens,
                    expand_tokens: event.expand_tokens,
                };
                let mut priced = prices::priced(&price, &billed, &work);
                if event.projected {
                    // Observe mode: nothing was cut, so the bill is the baseline; the saving is
                    // what sync would have made.
                    priced.baseline = priced.cost;
                }
                Some(priced)
            });
        let content = event
            .content
            .as_ref()
            .map(|source| content_rows(source, &event.components))
            .unwrap_or_default();
        Prepared {
            session,
            fresh,
            priced,
            content,
            event,
        }
    }

    fn sweep(&self) {
        let conn = self.conn.lock();
        let deleted = sweep(&conn, self.retention, self.max_bytes);
        match deleted {
            Ok(n) => {
                self.counts.evicted_rows.fetch_add(n, Ordering::Relaxed);
            }
            Err(error) => tracing::warn!(%error, "dashboard retention failed"),
        }
    }
}

/// An event with what the writer derived from it.
struct Prepared {
    session: Option<String>,
    fresh: Option<u64>,
    priced: Option<prices::Priced>,
    content: Vec<ContentRow>,
    event: Event,
}

struct ContentRow {
    message: usize,
    role: &'static str,
    components: String,
    tool: Option<String>,
    before_tokens: usize,
    after_tokens: usize,
    before_gz: Vec<u8>,
    after_gz: Vec<u8>,
}

/// Input billed at the full price: Anthropic reports it apart; OpenAI's prompt tokens include
/// the cached ones.
fn fresh_input(event: &Event) -> Option<u64> {
    let input = event.usage.input?;
    Some(match event.dialect {
        Some(engine::wire::Dialect::Anthropic) => input,
        _ => input.saturating_sub(event.usage.cache_read.unwrap_or(0)),
    })
}

/// The changed messages' text before and after, redacted, capped and gzipped.
fn content_rows(source: &ContentSource, components: &[ComponentEvent]) -> Vec<ContentRow> {
    let Ok(parsed) = engine::wire::parse(&source.original, source.dialect) else {
        return Vec::new();
    };
    let before = parsed.messages();
    let mut rows = Vec::new();
    for (index, new) in source.forwarded.changed() {
        let index = *index;
        if rows.len() == CONTENT_MESSAGES {
            break;
        }
        let Some(old) = before.get(index) else {
            continue;
        };
        if old.content == new.content {
            continue;
        }
        rows.push(ContentRow {
            message: index,
            role: old.role.as_str(),
            components: components
                .iter()
                .filter(|c| c.changed.contains(&index))
                .map(|c| c.name)
                .collect::<Vec<_>>()
                .join(","),
            tool: new.tool_name.clone(),
            before_tokens: engine::tokens::count(&old.content),
            after_tokens: engine::tokens::count(&new.content),
            before_gz: gzip(&capped(&redact::redact(&old.content))),
            after_gz: gzip(&capped(&redact::redact(&new.content))),
        });
    }
    rows
}

/// `first` and the events that follow it within [`LINGER`], up to [`BATCH`].
///
/// The queue is looked at every [`POLL`] rather than waited on: a receiver blocked on the
/// channel is woken by every event, a futex call on the request path and a switch to this
/// thread per request, where a batch needs one look per few dozen (at 2,700 requests a second,
/// an eighth of this thread's time went to being woken). A batch waits at most [`POLL`] longer
/// to fill than it did, and no longer than [`LINGER`].
fn linger(first: Event, events: &Receiver<Event>) -> Vec<Event> {
    let mut batch = vec![first];
    let until = Instant::now() + LINGER;
    loop {
        loop {
            if batch.len() == BATCH {
                return batch;
            }
            match events.try_recv() {
                Ok(event) => batch.push(event),
                Err(TryRecvError::Empty) => break,
                // Closing: what came is written now, the rest of the wait is for nothing.
                Err(TryRecvError::Disconnected) => return batch,
            }
        }
        let now = Instant::now();
        if now >= until {
            return batch;
        }
        std::thread::sleep(POLL.min(until - now));
    }
}

/// A component's gates as a JSON object: the text `serde_json::Value` writes for them (keys in
/// order, the last of a repeated key), without building the map for every component of every
/// request.
fn gates_json(gates: &[(&'static str, u32)]) -> String {
    let mut sorted = gates.to_vec();
    // Stable, so a repeated key's entries keep their order and the last one is kept below.
    sorted.sort_by_key(|&(gate, _)| gate);
    let mut out = String::from("{");
    for (i, &(gate, n)) in sorted.iter().enumerate() {
        if sorted.get(i + 1).is_some_and(|&(next, _)| next == gate) {
            continue;
        }
        if out.len() > 1 {
            out.push(',');
        }
        // A JSON string, escaped as the map wrote its keys (plain data: cannot fail).
        out.push_str(&serde_json::to_string(gate).unwrap_or_default());
        let _ = write!(out, ":{n}");
    }
    out.push('}');
    out
}

fn capped(text: &str) -> String {
    if text.len() <= CONTENT_CAP {
        return text.to_owned();
    }
    let mut end = CONTENT_CAP;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n… [{} more bytes not captured]",
        &text[..end],
        text.len() - end
    )
}

fn gzip(text: &str) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = encoder.write_all(text.as_bytes());
    encoder.finish().unwrap_or_default()
}

fn insert(conn: &mut Connection, rows: &[Prepared]) -> rusqlite::Result<Vec<u64>> {
    let tx = conn.transaction()?;
    let mut ids = Vec::with_capacity(rows.len());
    {
        let mut request = tx.prepare_cached(INSERT_REQUEST)?;
        let mut component = tx.prepare_cached(INSERT_COMPONENT)?;
        let mut content = tx.prepare_cached(INSERT_CONTENT)?;
        for row in rows {
            let e = &row.event;
            let p = row.priced;
            let acted: Vec<&str> = e
                .components
                .iter()
                .filter(|c| c.acted)
                .map(|c| c.name)
                .collect();
            request.execute(params![
                e.ts_ms as i64,
                row.session,
                e.dialect.map_or("", engine::wire::Dialect::as_str),
                e.model,
                e.mode,
                e.status,
                e.stream,
                e.untouched,
                e.messages,
                e.tokens_before as i64,
                e.tokens_after as i64,
                e.tokens_before.saturating_sub(e.tokens_after) as i64,
                e.projected,
                acted.join(","),
                row.fresh.map(|v| v as i64),
                e.usage.cache_read.map(|v| v as i64),
                e.usage.cache_write.map(|v| v as i64),
                e.usage.output.map(|v| v as i64),
                e.expand_rounds,
                e.expand_tokens as i64,
                e.expand_reread_tokens as i64,
                e.declared_tokens as i64,
                e.billed.requests as i64,
                e.billed.billed,
                e.billed.cut,
                e.billed.declared,
                e.billed.missed,
                e.billed.rounds,
                e.added_us as i64,
                e.upstream_ms.map(|v| v as i64),
                p.map(|p| p.cost),
                p.map(|p| p.baseline),
                p.map(|p| p.saved),
                p.map(|p| p.expand_cost),
                p.map(|p| p.net),
                !row.content.is_empty(),
                e.capture_blocked_by,
            ])?;
            let id = tx.last_insert_rowid();
            for (seq, c) in e.components.iter().enumerate() {
                let gates = (!c.gates.is_empty()).then(|| gates_json(&c.gates));
                component.execute(params![
                    id,
                    seq as i64,
                    c.name,
                    c.kind,
                    c.acted,
                    c.mutated,
                    c.reverted,
                    c.saved_tokens as i64,
                    c.duration_us as i64,
                    gates,
                ])?;
            }
            for (seq, c) in row.content.iter().enumerate() {
                content.execute(params![
                    id,
                    seq as i64,
                    c.message as i64,
                    c.role,
                    c.tool,
                    c.components,
                    c.before_tokens as i64,
                    c.after_tokens as i64,
                    c.before_gz,
                    c.after_gz,
                ])?;
            }
            ids.push(id as u64);
        }
    }
    tx.commit()?;
    Ok(ids)
}

const INSERT_REQUEST: &str = "INSERT INTO requests (
    ts, session, route, model, mode, status, stream, untouched, messages,
    tokens_before, tokens_after, saved_tokens, projected, acted,
    fresh_input, cache_read, cache_write, output_tokens, expand_rounds, expand_tokens,
    expand_reread_tokens, declared_tokens, billed_requests, billed_input, billed_cut,
    billed_declared, billed_missed, billed_rounds,
    added_us, upstream_ms, cost_usd, baseline_cost_usd, saved_usd, expand_cost_usd,
    net_saved_usd, content_captured, capture_blocked_by
) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
          ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36,
          ?37)";

const INSERT_COMPONENT: &str = "INSERT INTO request_components (
    request_id, seq, component, kind, acted, mutated, reverted, saved_tokens, duration_us, gates
) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

const INSERT_CONTENT: &str = "INSERT INTO request_content (
    request_id, seq, message, role, tool, components, before_tokens, after_tokens, before_gz,
    after_gz
) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// The live feed's row: a summary, never content. Its keys are in the order a `serde_json` map
/// writes them (sorted), as the feed always sent them; a struct writes them without building
/// a map per request.
#[derive(serde::Serialize)]
struct Summary<'a> {
    cost_usd: Option<f64>,
    expand_rounds: u32,
    id: u64,
    mode: &'a str,
    model: Option<&'a str>,
    net_saved_usd: Option<f64>,
    route: &'a str,
    saved_tokens: u64,
    session: Option<&'a str>,
    status: u16,
    tokens_after: u64,
    tokens_before: u64,
    ts: u64,
}

fn summary(id: u64, row: &Prepared) -> String {
    let e = &row.event;
    let summary = Summary {
        cost_usd: row.priced.map(|p| p.cost),
        expand_rounds: e.expand_rounds,
        id,
        mode: e.mode,
        model: e.model.as_deref(),
        net_saved_usd: row.priced.map(|p| p.net),
        route: e.dialect.map_or("", engine::wire::Dialect::as_str),
        saved_tokens: e.tokens_before.saturating_sub(e.tokens_after),
        session: row.session.as_deref(),
        status: e.status,
        tokens_after: e.tokens_after,
        tokens_before: e.tokens_before,
        ts: e.ts_ms,
    };
    // Plain data: serializing it cannot fail.
    serde_json::to_string(&summary).unwrap_or_default()
}

/// Deletes rows past the age bound, then the oldest while the rows are over the size bound.
/// Returns the rows deleted.
pub(super) fn sweep(
    conn: &Connection,
    retention: Option<Duration>,
    max_bytes: Option<u64>,
) -> rusqlite::Result<u64> {
    let mut deleted = 0;
    if let Some(age) = retention {
        let cutoff = now_ms().saturating_sub(age.as_millis() as u64);
        deleted += conn.execute("DELETE FROM requests WHERE ts < ?1", [cutoff as i64])? as u64;
    }
    if let Some(max) = max_bytes {
        // Delete a tenth of the rows at a time until under the bound (deleted pages are reused
        // by later rows; the file itself does not shrink).
        for _ in 0..10 {
            if schema::used_bytes(conn)? <= max {
                break;
            }
            let rows: i64 = conn.query_row("SELECT count(*) FROM requests", [], |r| r.get(0))?;
            if rows == 0 {
                break;
            }
            deleted += conn.execute(
                "DELETE FROM requests WHERE id IN (SELECT id FROM requests ORDER BY id LIMIT ?1)",
                [(rows / 10).max(1)],
            )? as u64;
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the writer wrote before [`gates_json`]: the map as `serde_json` renders it.
    fn as_value(gates: &[(&'static str, u32)]) -> String {
        serde_json::Value::Object(
            gates
                .iter()
                .map(|(gate, n)| ((*gate).to_owned(), (*n).into()))
                .collect(),
        )
        .to_string()
    }

    #[test]
    fn gates_are_written_as_the_map_was() {
        let cases: [&[(&'static str, u32)]; 5] = [
            &[("below_min_tokens", 3)],
            &[
                ("too_many_lines", 1),
                ("below_min_tokens", 12),
                ("kept_in_view", 2),
            ],
            // A repeated key: the map keeps the last.
            &[
                ("below_min_tokens", 1),
                ("diff_too_large", 4),
                ("below_min_tokens", 7),
            ],
            &[("a \"quoted\" gate", 1), ("b", u32::MAX)],
            &[("z", 0), ("a", 0), ("m", 5), ("a", 9)],
        ];
        for gates in cases {
            assert_eq!(gates_json(gates), as_value(gates), "{gates:?}");
        }
    }

    /// The feed's row as the writer wrote it before [`Summary`]: a `json!` map.
    fn summary_as_value(id: u64, row: &Prepared) -> String {
        let e = &row.event;
        serde_json::json!({
            "id": id,
            "ts": e.ts_ms,
            "session": row.session,
            "route": e.dialect.map_or("", engine::wire::Dialect::as_str),
            "model": e.model,
            "mode": e.mode,
            "status": e.status,
            "tokens_before": e.tokens_before,
            "tokens_after": e.tokens_after,
            "saved_tokens": e.tokens_before.saturating_sub(e.tokens_after),
            "expand_rounds": e.expand_rounds,
            "cost_usd": row.priced.map(|p| p.cost),
            "net_saved_usd": row.priced.map(|p| p.net),
        })
        .to_string()
    }

    #[test]
    fn the_feeds_summary_is_written_as_the_map_was() {
        let priced = prices::Priced {
            cost: 0.012_345_678_9,
            baseline: 0.02,
            saved: 0.007,
            expand_cost: 0.0,
            net: -1.5e-7,
        };
        let rows = [
            Prepared {
                session: None,
                fresh: None,
                priced: None,
                content: Vec::new(),
                event: Event {
                    ts_ms: 1,
                    mode: "observe",
                    ..Event::default()
                },
            },
            Prepared {
                session: Some("a1b2 \"quoted\"".into()),
                fresh: Some(10),
                priced: Some(priced),
                content: Vec::new(),
                event: Event {
                    ts_ms: 1_764_000_000_000,
                    dialect: Some(engine::wire::Dialect::Anthropic),
                    model: Some("claude-sonnet-4-5".into()),
                    mode: "sync",
                    status: 200,
                    tokens_before: 120_000,
                    tokens_after: 80_000,
                    expand_rounds: 2,
                    ..Event::default()
                },
            },
            Prepared {
                session: Some("s".into()),
                fresh: None,
                priced: Some(prices::Priced {
                    cost: f64::NAN,
                    net: f64::INFINITY,
                    ..priced
                }),
                content: Vec::new(),
                event: Event {
                    tokens_before: 5,
                    tokens_after: 9,
                    ..Event::default()
                },
            },
        ];
        for (id, row) in rows.iter().enumerate() {
            let id = id as u64 * 1_000_003;
            assert_eq!(summary(id, row), summary_as_value(id, row));
        }
    }

    #[test]
    fn a_batch_takes_what_is_queued_and_returns_when_the_queue_closes() {
        let (tx, rx) = crossbeam_channel::bounded(BATCH * 2);
        let event = || Event {
            ts_ms: 1,
            mode: "sync",
            ..Event::default()
        };
        for _ in 0..BATCH + 5 {
            tx.send(event()).expect("queued");
        }
        let first = rx.recv().expect("first");
        assert_eq!(linger(first, &rx).len(), BATCH, "a full batch goes at once");
        let first = rx.recv().expect("first");
        drop(tx);
        let started = Instant::now();
        assert_eq!(linger(first, &rx).len(), 5);
        assert!(
            started.elapsed() < LINGER,
            "a closed queue is not waited on"
        );
    }
}
