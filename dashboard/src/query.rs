//! The dashboard's reads: filters, keyset pages, time buckets computed in SQL when asked.
//!
//! Every function takes the reader connection and returns the JSON the API serves, so the page
//! and the tests read the same shapes. Ratios are derived here, never stored; a ratio without
//! data is 0, and a cost that was never priced stays `null` (unknown), never $0.
//!
//! The savings figures are computed by `engine::savings` from the same sums `/stats` keeps:
//! the headline, billed input saved, net (`billed_savings_pct`), from each row's settled
//! provider report and expand rounds; and content tokens saved, net (`net_savings_pct`), over
//! the rows `/stats` counts for it: the requests that ran the pipeline and that their upstream
//! completed ([`COMPLETED`]). Dollars are what those figures' terms were worth at list prices,
//! never another percentage.

use engine::savings::{BilledSaving, NetSaving};
use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OptionalExtension, Row};
use serde_json::{Map, Value, json};

/// A row the net saving sums: the pipeline ran on it (not forwarded untouched, not observe
/// mode's projection) and its upstream completed it (a status below 400). `/stats` draws the
/// same line (`modes::stats`, `record_outcome`).
const COMPLETED: &str = "(r.status < 400 AND NOT r.projected AND r.untouched IS NULL)";

/// A row the pipeline ran on that did not complete upstream: sluice's own 502 or 504, or the
/// upstream's error status. A 499 (the client left before an answer) is in neither, as in
/// `/stats`.
const FAILED: &str =
    "(r.status >= 400 AND r.status != 499 AND NOT r.projected AND r.untouched IS NULL)";

/// The savings' sums over `requests r`, as thirteen SQL columns [`net_of`] reads: the net
/// saving's five terms over the completed rows, then the failed rows and the tokens their cuts
/// would have saved, then the billed saving's six terms (a row whose report settled nothing
/// adds zeros to them).
fn net_columns() -> String {
    let completed =
        |column: &str| format!("coalesce(sum(CASE WHEN {COMPLETED} THEN {column} END), 0)");
    format!(
        "{}, {}, {}, {}, {}, coalesce(sum({FAILED}), 0),
         coalesce(sum(CASE WHEN {FAILED} THEN r.saved_tokens END), 0),
         coalesce(sum(r.billed_requests), 0), coalesce(sum(r.billed_input), 0.0),
         coalesce(sum(r.billed_cut), 0.0), coalesce(sum(r.billed_declared), 0.0),
         coalesce(sum(r.billed_missed), 0.0), coalesce(sum(r.billed_rounds), 0.0)",
        completed("r.tokens_before"),
        completed("r.tokens_after"),
        completed("r.declared_tokens"),
        completed("r.expand_tokens"),
        completed("r.expand_reread_tokens"),
    )
}

/// The figures of [`net_columns`], read from column `at` on: `net_savings_pct`, its numerator,
/// the secondary figure before expand rounds, the declaration charged, and what was left out.
fn net_of(row: &Row<'_>, at: usize) -> rusqlite::Result<Map<String, Value>> {
    let n = |i: usize| row.get::<_, i64>(at + i).map(|v| v.max(0) as u64);
    let net = NetSaving {
        tokens_before: n(0)?,
        tokens_after: n(1)?,
        declared_tokens: n(2)?,
        restored_tokens: n(3)?,
        reread_tokens: n(4)?,
    };
    let mut out = net_json(&net);
    out.insert("failed_requests_excluded".into(), n(5)?.into());
    out.insert("failed_saved_tokens_excluded".into(), n(6)?.into());
    let real = |i: usize| row.get::<_, f64>(at + i);
    let billed = BilledSaving {
        requests: n(7)?,
        billed: real(8)?,
        cut: real(9)?,
        declared: real(10)?,
        missed: real(11)?,
        rounds: real(12)?,
    };
    out.extend(billed_json(&billed));
    Ok(out)
}

/// The billed saving's figures, named as in `/stats`.
fn billed_json(billed: &BilledSaving) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("billed_savings_pct".into(), billed.net_pct().into());
    out.insert("billed_savings_pct_gross".into(), billed.gross_pct().into());
    out.insert("billed_requests".into(), billed.requests.into());
    out.insert(
        "billed_input_tokens".into(),
        (billed.billed + billed.rounds).into(),
    );
    out.insert("billed_baseline_tokens".into(), billed.baseline().into());
    out
}

/// The net saving's figures, named as in `/stats`.
fn net_json(net: &NetSaving) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("net_savings_pct".into(), net.net_pct().into());
    out.insert("savings_pct_gross".into(), net.gross_pct().into());
    out.insert("net_saved_tokens".into(), net.net_tokens().into());
    out.insert("expand_declared_tokens".into(), net.declared_tokens.into());
    out
}

/// `value`, an object, with `extra`'s keys added.
fn with(mut value: Value, extra: Map<String, Value>) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.extend(extra);
    }
    value
}

/// Rows a page holds at most.
pub const MAX_LIMIT: u32 = 500;

/// What the caller narrowed to. Every field is optional; times are epoch ms, `until` exclusive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowFilter {
    pub since: Option<u64>,
    pub until: Option<u64>,
    pub session: Option<String>,
    pub model: Option<String>,
    pub route: Option<String>,
    pub mode: Option<String>,
    /// Requests a component acted on.
    pub component: Option<String>,
    /// `ok` (status below 400) or `error`.
    pub status: Option<String>,
}

impl RowFilter {
    /// The `WHERE` clause over `requests` (aliased `r`) and its parameters.
    fn clause(&self) -> (String, Vec<Sql>) {
        let mut terms = Vec::new();
        let mut params = Vec::new();
        let mut add = |term: &str, value: Sql| {
            params.push(value);
            terms.push(term.replace('?', &format!("?{}", params.len())));
        };
        if let Some(since) = self.since {
            add("r.ts >= ?", Sql::Integer(since as i64));
        }
        if let Some(until) = self.until {
            add("r.ts < ?", Sql::Integer(until as i64));
        }
        for (column, value) in [
            ("r.session", &self.session),
            ("r.model", &self.model),
            ("r.route", &self.route),
            ("r.mode", &self.mode),
        ] {
            if let Some(value) = value {
                add(&format!("{column} = ?"), Sql::Text(value.clone()));
            }
        }
        if let Some(component) = &self.component {
            add(
                "EXISTS (SELECT 1 FROM request_components c WHERE c.request_id = r.id \
                 AND c.component = ? AND c.acted)",
                Sql::Text(component.clone()),
            );
        }
        match self.status.as_deref() {
            Some("ok") => terms.push("r.status < 400".into()),
            Some("error") => terms.push("r.status >= 400".into()),
            _ => {}
        }
        let clause = if terms.is_empty() {
            "1".to_owned()
        } else {
            terms.join(" AND ")
        };
        (clause, params)
    }
}

fn ratio(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

/// Totals for the window: requests, tokens, cache reads and writes, expand rounds, errors,
/// money with the net figure beside every cost, and the requests forwarded untouched by reason.
pub fn overview(conn: &Connection, filter: &RowFilter) -> rusqlite::Result<Value> {
    let mut totals = overview_totals(conn, filter)?;
    let untouched = untouched(conn, filter)?;
    if let Some(object) = totals.as_object_mut() {
        object.insert("untouched".into(), untouched);
    }
    Ok(totals)
}

/// Requests forwarded untouched in the window, by reason, most first, each with its share of
/// all requests: the share a user needs to see when sluice is doing nothing for them.
fn untouched(conn: &Connection, filter: &RowFilter) -> rusqlite::Result<Value> {
    let (clause, params) = filter.clause();
    let sql = format!(
        "SELECT r.untouched, count(*), (SELECT count(*) FROM requests r WHERE {clause})
         FROM requests r WHERE {clause} AND r.untouched IS NOT NULL
         GROUP BY r.untouched ORDER BY count(*) DESC, r.untouched"
    );
    // The clause numbers its parameters (`?1`), so both uses share one list.
    let mut statement = conn.prepare(&sql)?;
    let rows = statement.query_map(rusqlite::params_from_iter(params), |row| {
        let requests: i64 = row.get(1)?;
        let all: i64 = row.get(2)?;
        Ok(json!({
            "reason": row.get::<_, String>(0)?,
            "requests": requests,
            "pct": 100.0 * ratio(requests as f64, all as f64),
        }))
    })?;
    rows.collect::<rusqlite::Result<Vec<Value>>>()
        .map(Value::from)
}

fn overview_totals(conn: &Connection, filter: &RowFilter) -> rusqlite::Result<Value> {
    let (clause, params) = filter.clause();
    let sql = format!(
        "SELECT count(*), count(DISTINCT r.session), coalesce(sum(r.tokens_before), 0),
                coalesce(sum(r.tokens_after), 0), coalesce(sum(r.saved_tokens), 0),
                coalesce(sum(r.cache_read), 0), coalesce(sum(r.cache_write), 0),
                coalesce(sum(r.fresh_input), 0), coalesce(sum(r.output_tokens), 0),
                coalesce(sum(r.expand_rounds), 0), coalesce(sum(r.status >= 400), 0),
                sum(r.cost_usd), sum(r.baseline_cost_usd), sum(r.saved_usd),
                sum(r.expand_cost_usd), sum(r.net_saved_usd), count(r.cost_usd),
                coalesce(sum(r.projected), 0), coalesce(avg(r.added_us), 0),
                min(r.ts), max(r.ts), {}
         FROM requests r WHERE {clause}",
        net_columns()
    );
    conn.query_row(&sql, rusqlite::params_from_iter(params), |row| {
        let totals = json!({
            "requests": row.get::<_, i64>(0)?,
            "sessions": row.get::<_, i64>(1)?,
            "tokens_before": row.get::<_, i64>(2)?,
            "tokens_after": row.get::<_, i64>(3)?,
            "saved_tokens": row.get::<_, i64>(4)?,
            "cache_read_tokens": row.get::<_, i64>(5)?,
            "cache_write_tokens": row.get::<_, i64>(6)?,
            "fresh_input_tokens": row.get::<_, i64>(7)?,
            "output_tokens": row.get::<_, i64>(8)?,
            "expand_rounds": row.get::<_, i64>(9)?,
            "errors": row.get::<_, i64>(10)?,
            "cost_usd": row.get::<_, Option<f64>>(11)?,
            "baseline_cost_usd": row.get::<_, Option<f64>>(12)?,
            "saved_usd": row.get::<_, Option<f64>>(13)?,
            "expand_cost_usd": row.get::<_, Option<f64>>(14)?,
            "net_saved_usd": row.get::<_, Option<f64>>(15)?,
            "priced_requests": row.get::<_, i64>(16)?,
            "projected_requests": row.get::<_, i64>(17)?,
            "added_ms_avg": row.get::<_, f64>(18)? / 1e3,
            "first_ts": row.get::<_, Option<i64>>(19)?,
            "last_ts": row.get::<_, Option<i64>>(20)?,
        });
        Ok(with(totals, net_of(row, 21)?))
    })
}

/// Points a series returns at most: a narrower bucket over a wide window is widened.
pub const MAX_POINTS: u64 = 2_000;

/// Buckets of `bucket_ms` over the window, computed in SQL.
pub fn series(conn: &Connection, filter: &RowFilter, bucket_ms: u64) -> rusqlite::Result<Value> {
    // Without a start, the window starts at the oldest row kept (not at 1970).
    let since = match filter.since {
        Some(since) => since,
        None => conn
            .query_row("SELECT min(ts) FROM requests", [], |r| {
                r.get::<_, Option<i64>>(0)
            })?
            .map_or(0, |ts| ts.max(0) as u64),
    };
    let span = filter
        .until
        .unwrap_or_else(crate::event::now_ms)
        .saturating_sub(since);
    let bucket = bucket_ms
        .max(1000)
        .max(span / MAX_POINTS)
        .min(i64::MAX as u64 / 2) as i64;
    let (clause, mut params) = filter.clause();
    params.push(Sql::Integer(bucket));
    let b = params.len();
    let sql = format!(
        "SELECT r.ts / ?{b} * ?{b} AS t, count(*), sum(r.tokens_before), sum(r.saved_tokens),
                coalesce(sum(r.cache_read), 0), coalesce(sum(r.cache_write), 0),
                sum(r.cost_usd), sum(r.baseline_cost_usd), sum(r.net_saved_usd),
                coalesce(sum(r.status >= 400), 0)
         FROM requests r WHERE {clause} GROUP BY 1 ORDER BY 1"
    );
    let mut stmt = conn.prepare(&sql)?;
    let points = stmt
        .query_map(rusqlite::params_from_iter(params), |row| {
            Ok(json!({
                "t": row.get::<_, i64>(0)?,
                "requests": row.get::<_, i64>(1)?,
                "tokens_before": row.get::<_, i64>(2)?,
                "saved_tokens": row.get::<_, i64>(3)?,
                "cache_read_tokens": row.get::<_, i64>(4)?,
                "cache_write_tokens": row.get::<_, i64>(5)?,
                "cost_usd": row.get::<_, Option<f64>>(6)?,
                "baseline_cost_usd": row.get::<_, Option<f64>>(7)?,
                "net_saved_usd": row.get::<_, Option<f64>>(8)?,
                "errors": row.get::<_, i64>(9)?,
            }))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(json!({ "bucket_ms": bucket, "points": points }))
}

fn limit(limit: Option<u32>) -> i64 {
    i64::from(limit.unwrap_or(50).clamp(1, MAX_LIMIT))
}

/// Sessions, most recently active first; `before` is the previous page's last `last_ts`.
pub fn sessions(
    conn: &Connection,
    filter: &RowFilter,
    before: Option<u64>,
    page: Option<u32>,
) -> rusqlite::Result<Value> {
    let (clause, mut params) = filter.clause();
    let having = match before {
        Some(before) => {
            params.push(Sql::Integer(before as i64));
            format!("HAVING max(r.ts) < ?{}", params.len())
        }
        None => String::new(),
    };
    params.push(Sql::Integer(limit(page)));
    let l = params.len();
    let sql = format!(
        "SELECT r.session, count(*), min(r.ts), max(r.ts), sum(r.tokens_before),
                sum(r.saved_tokens), sum(r.expand_rounds), sum(r.cost_usd), sum(r.net_saved_usd),
                group_concat(DISTINCT r.model), max(r.route), {}
         FROM requests r WHERE {clause} AND r.session IS NOT NULL
         GROUP BY r.session {having} ORDER BY max(r.ts) DESC LIMIT ?{l}",
        net_columns()
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params), |row| {
            let session = json!({
                "session": row.get::<_, String>(0)?,
                "requests": row.get::<_, i64>(1)?,
                "first_ts": row.get::<_, i64>(2)?,
                "last_ts": row.get::<_, i64>(3)?,
                "tokens_before": row.get::<_, i64>(4)?,
                "saved_tokens": row.get::<_, i64>(5)?,
                "expand_rounds": row.get::<_, i64>(6)?,
                "cost_usd": row.get::<_, Option<f64>>(7)?,
                "net_saved_usd": row.get::<_, Option<f64>>(8)?,
                "models": row.get::<_, Option<String>>(9)?,
                "route": row.get::<_, String>(10)?,
            });
            Ok(with(session, net_of(row, 11)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let next = rows.last().and_then(|r| r["last_ts"].as_i64());
    Ok(json!({ "sessions": rows, "next_before": next }))
}

const REQUEST_COLUMNS: &str = "r.id, r.ts, r.session, r.route, r.model, r.mode, r.status,
    r.stream, r.untouched, r.messages, r.tokens_before, r.tokens_after, r.saved_tokens,
    r.projected, r.acted, r.fresh_input, r.cache_read, r.cache_write, r.output_tokens,
    r.expand_rounds, r.expand_tokens, r.added_us, r.upstream_ms, r.cost_usd,
    r.baseline_cost_usd, r.saved_usd, r.expand_cost_usd, r.net_saved_usd,
    r.content_captured, r.capture_blocked_by, r.expand_reread_tokens, r.declared_tokens";

/// A request's own net saving (`null` for one that is not in the figure: forwarded untouched,
/// projected, or not completed upstream).
fn request_net(row: &Row<'_>) -> rusqlite::Result<Value> {
    let (status, untouched, projected): (i64, Option<String>, bool) =
        (row.get(6)?, row.get(8)?, row.get(13)?);
    if status >= 400 || untouched.is_some() || projected {
        return Ok(Value::Null);
    }
    let n = |i: usize| row.get::<_, i64>(i).map(|v| v.max(0) as u64);
    let net = NetSaving {
        tokens_before: n(10)?,
        tokens_after: n(11)?,
        declared_tokens: n(31)?,
        restored_tokens: n(20)?,
        reread_tokens: n(30)?,
    };
    Ok(net.net_pct().into())
}

fn request_row(row: &Row<'_>) -> rusqlite::Result<Value> {
    Ok(json!({
        "id": row.get::<_, i64>(0)?,
        "ts": row.get::<_, i64>(1)?,
        "session": row.get::<_, Option<String>>(2)?,
        "route": row.get::<_, String>(3)?,
        "model": row.get::<_, Option<String>>(4)?,
        "mode": row.get::<_, String>(5)?,
        "status": row.get::<_, i64>(6)?,
        "stream": row.get::<_, bool>(7)?,
        "untouched": row.get::<_, Option<String>>(8)?,
        "messages": row.get::<_, i64>(9)?,
        "tokens_before": row.get::<_, i64>(10)?,
        "tokens_after": row.get::<_, i64>(11)?,
        "saved_tokens": row.get::<_, i64>(12)?,
        "net_savings_pct": request_net(row)?,
        "projected": row.get::<_, bool>(13)?,
        "acted": row.get::<_, String>(14)?.split(',').filter(|s| !s.is_empty()).collect::<Vec<_>>(),
        "fresh_input_tokens": row.get::<_, Option<i64>>(15)?,
        "cache_read_tokens": row.get::<_, Option<i64>>(16)?,
        "cache_write_tokens": row.get::<_, Option<i64>>(17)?,
        "output_tokens": row.get::<_, Option<i64>>(18)?,
        "expand_rounds": row.get::<_, i64>(19)?,
        "expand_tokens": row.get::<_, i64>(20)?,
        "expand_reread_tokens": row.get::<_, i64>(30)?,
        "expand_declared_tokens": row.get::<_, i64>(31)?,
        "added_ms": row.get::<_, i64>(21)? as f64 / 1e3,
        "upstream_ms": row.get::<_, Option<i64>>(22)?,
        "cost_usd": row.get::<_, Option<f64>>(23)?,
        "baseline_cost_usd": row.get::<_, Option<f64>>(24)?,
        "saved_usd": row.get::<_, Option<f64>>(25)?,
        "expand_cost_usd": row.get::<_, Option<f64>>(26)?,
        "net_saved_usd": row.get::<_, Option<f64>>(27)?,
        "content_captured": row.get::<_, bool>(28)?,
        "capture_blocked_by": row.get::<_, Option<String>>(29)?,
    }))
}

/// Requests, newest first; `before` is the previous page's last id (keyset paging).
pub fn requests(
    conn: &Connection,
    filter: &RowFilter,
    before: Option<u64>,
    page: Option<u32>,
) -> rusqlite::Result<Value> {
    let (mut clause, mut params) = filter.clause();
    if let Some(before) = before {
        params.push(Sql::Integer(before as i64));
        clause.push_str(&format!(" AND r.id < ?{}", params.len()));
    }
    params.push(Sql::Integer(limit(page)));
    let sql = format!(
        "SELECT {REQUEST_COLUMNS} FROM requests r WHERE {clause} ORDER BY r.id DESC LIMIT ?{}",
        params.len()
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params), request_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let next = rows.last().and_then(|r| r["id"].as_i64());
    Ok(json!({ "requests": rows, "next_before": next }))
}

/// One request with its component decisions; its captured content only when `content_visible`.
pub fn request(
    conn: &Connection,
    id: u64,
    content_visible: bool,
) -> rusqlite::Result<Option<Value>> {
    let sql = format!("SELECT {REQUEST_COLUMNS} FROM requests r WHERE r.id = ?1");
    let Some(mut request) = conn.query_row(&sql, [id as i64], request_row).optional()? else {
        return Ok(None);
    };
    let mut stmt = conn.prepare_cached(
        "SELECT component, kind, acted, mutated, reverted, saved_tokens, duration_us, gates
         FROM request_components WHERE request_id = ?1 ORDER BY seq",
    )?;
    let components = stmt
        .query_map([id as i64], |row| {
            let gates: Option<String> = row.get(7)?;
            Ok(json!({
                "component": row.get::<_, String>(0)?,
                "kind": row.get::<_, String>(1)?,
                "acted": row.get::<_, bool>(2)?,
                "mutated": row.get::<_, bool>(3)?,
                "reverted": row.get::<_, Option<String>>(4)?,
                "saved_tokens": row.get::<_, i64>(5)?,
                "duration_ms": row.get::<_, i64>(6)? as f64 / 1e3,
                "skipped": gates
                    .and_then(|g| serde_json::from_str::<Value>(&g).ok())
                    .unwrap_or_else(|| json!({})),
            }))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    request["components"] = Value::Array(components);
    request["content_visible"] = content_visible.into();
    if content_visible {
        request["content"] = Value::Array(content(conn, id)?);
    }
    Ok(Some(request))
}

fn content(conn: &Connection, id: u64) -> rusqlite::Result<Vec<Value>> {
    let mut stmt = conn.prepare_cached(
        "SELECT message, role, tool, components, before_tokens, after_tokens, before_gz, after_gz
         FROM request_content WHERE request_id = ?1 ORDER BY seq",
    )?;
    stmt.query_map([id as i64], |row| {
        Ok(json!({
            "message": row.get::<_, i64>(0)?,
            "role": row.get::<_, String>(1)?,
            "tool": row.get::<_, Option<String>>(2)?,
            "components": row.get::<_, String>(3)?,
            "before_tokens": row.get::<_, i64>(4)?,
            "after_tokens": row.get::<_, i64>(5)?,
            "before": gunzip(&row.get::<_, Vec<u8>>(6)?),
            "after": gunzip(&row.get::<_, Vec<u8>>(7)?),
        }))
    })?
    .collect()
}

fn gunzip(bytes: &[u8]) -> String {
    use std::io::Read;
    let mut text = String::new();
    let _ = flate2::read::GzDecoder::new(bytes).read_to_string(&mut text);
    text
}

/// Per component: runs, acts, reverts, tokens saved and time, with why it declined.
pub fn components(conn: &Connection, filter: &RowFilter) -> rusqlite::Result<Value> {
    let (clause, params) = filter.clause();
    let sql = format!(
        "SELECT c.component, min(c.kind), count(*), sum(c.acted), sum(c.mutated),
                sum(c.reverted IS NOT NULL), sum(c.saved_tokens), sum(c.duration_us),
                min(c.seq)
         FROM request_components c JOIN requests r ON r.id = c.request_id
         WHERE {clause} GROUP BY c.component ORDER BY min(c.seq)"
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt
        .query_map(rusqlite::params_from_iter(params.clone()), |row| {
            let runs: i64 = row.get(2)?;
            let acted: i64 = row.get(3)?;
            Ok(json!({
                "component": row.get::<_, String>(0)?,
                "kind": row.get::<_, String>(1)?,
                "runs": runs,
                "acted": acted,
                "act_rate_pct": 100.0 * ratio(acted as f64, runs as f64),
                "mutated": row.get::<_, i64>(4)?,
                "reverted": row.get::<_, i64>(5)?,
                "saved_tokens": row.get::<_, i64>(6)?,
                "avg_ms": ratio(row.get::<_, i64>(7)? as f64, runs as f64) / 1e3,
                "skipped": {},
                "reverts": {},
            }))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let gates = format!(
        "SELECT c.component, g.key, sum(g.value)
         FROM request_components c JOIN requests r ON r.id = c.request_id, json_each(c.gates) g
         WHERE {clause} AND c.gates IS NOT NULL GROUP BY 1, 2"
    );
    let reverts = format!(
        "SELECT c.component, c.reverted, count(*)
         FROM request_components c JOIN requests r ON r.id = c.request_id
         WHERE {clause} AND c.reverted IS NOT NULL GROUP BY 1, 2"
    );
    for (sql, field) in [(gates, "skipped"), (reverts, "reverts")] {
        let mut stmt = conn.prepare(&sql)?;
        let mut found = stmt.query(rusqlite::params_from_iter(params.clone()))?;
        while let Some(row) = found.next()? {
            let (component, reason, n): (String, String, i64) =
                (row.get(0)?, row.get(1)?, row.get(2)?);
            if let Some(entry) = rows
                .iter_mut()
                .find(|r| r["component"] == component.as_str())
            {
                entry[field][reason] = n.into();
            }
        }
    }
    Ok(json!({ "components": rows }))
}

/// Money by model, the net saving beside every cost.
pub fn cost(conn: &Connection, filter: &RowFilter) -> rusqlite::Result<Value> {
    let (clause, params) = filter.clause();
    let sql = format!(
        "SELECT coalesce(r.model, '(unknown)'), count(*), count(r.cost_usd), sum(r.cost_usd),
                sum(r.baseline_cost_usd), sum(r.saved_usd), sum(r.expand_cost_usd),
                sum(r.net_saved_usd), {}
         FROM requests r WHERE {clause} GROUP BY 1 ORDER BY sum(r.cost_usd) DESC",
        net_columns()
    );
    let mut stmt = conn.prepare(&sql)?;
    let models = stmt
        .query_map(rusqlite::params_from_iter(params), |row| {
            let model = json!({
                "model": row.get::<_, String>(0)?,
                "requests": row.get::<_, i64>(1)?,
                "priced_requests": row.get::<_, i64>(2)?,
                "cost_usd": row.get::<_, Option<f64>>(3)?,
                "baseline_cost_usd": row.get::<_, Option<f64>>(4)?,
                "saved_usd": row.get::<_, Option<f64>>(5)?,
                "expand_cost_usd": row.get::<_, Option<f64>>(6)?,
                "net_saved_usd": row.get::<_, Option<f64>>(7)?,
            });
            Ok(with(model, net_of(row, 8)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(json!({ "models": models }))
}
