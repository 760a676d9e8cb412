//! An experiment's record of what each session spent (`sluice serve --ab`): one [`Spend`] row
//! per experiment, session and model, added to by every request, read whole by the report.
//!
//! Kept apart from a session's own state on purpose: it has no time to live (a report reads
//! it long after the session is gone), it is never leased (every request adds, in any order,
//! on any replica), and losing a row costs a measurement, never a cache miss.

use rusqlite::{Connection, params};

/// What one session spent under one model in one experiment. Counts add; `first_ms` and
/// `last_ms` (Unix milliseconds) bound the requests; `arm` and `agent` are the first written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spend {
    /// The session's label (a hash of its key, never the key or a credential).
    pub session: String,
    /// The model the provider named ("" when neither the request nor the reply did).
    pub model: String,
    pub arm: String,
    /// The agent's family, from its user-agent (`claude-code`, `codex`, ...).
    pub agent: String,
    /// Requests from the agent (its steps).
    pub turns: u64,
    /// Requests whose reply reported no usage: their cost is unknown, never zero.
    pub no_usage: u64,
    /// Provider-reported tokens, every upstream call of the request (expand rounds included):
    /// input not read from the cache, cache reads, cache writes, output.
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
    /// Those tokens at the model's list price, in millionths of a dollar (0 for a model
    /// without one: `unpriced` says how many turns).
    pub cost_micros: u64,
    pub unpriced: u64,
    pub expand_rounds: u64,
    /// Requests that repeated one that had failed (the agent retrying).
    pub retries: u64,
    /// Requests that ended in an error (the provider's or the connection's).
    pub errors: u64,
    /// Time from the request's arrival to its reply's end.
    pub wall_ms: u64,
    pub first_ms: u64,
    pub last_ms: u64,
}

/// The counters of a [`Spend`], by the name they are stored under.
fn counters(spend: &Spend) -> [(&'static str, u64); 14] {
    [
        ("turns", spend.turns),
        ("no_usage", spend.no_usage),
        ("input", spend.input),
        ("cache_read", spend.cache_read),
        ("cache_write", spend.cache_write),
        ("output", spend.output),
        ("cost_micros", spend.cost_micros),
        ("unpriced", spend.unpriced),
        ("expand_rounds", spend.expand_rounds),
        ("retries", spend.retries),
        ("errors", spend.errors),
        ("wall_ms", spend.wall_ms),
        ("first_ms", spend.first_ms),
        ("last_ms", spend.last_ms),
    ]
}

impl Spend {
    /// Sets a counter by its stored name; false for a name that is none.
    fn set(&mut self, name: &str, value: u64) -> bool {
        let slot = match name {
            "turns" => &mut self.turns,
            "no_usage" => &mut self.no_usage,
            "input" => &mut self.input,
            "cache_read" => &mut self.cache_read,
            "cache_write" => &mut self.cache_write,
            "output" => &mut self.output,
            "cost_micros" => &mut self.cost_micros,
            "unpriced" => &mut self.unpriced,
            "expand_rounds" => &mut self.expand_rounds,
            "retries" => &mut self.retries,
            "errors" => &mut self.errors,
            "wall_ms" => &mut self.wall_ms,
            "first_ms" => &mut self.first_ms,
            "last_ms" => &mut self.last_ms,
            _ => return false,
        };
        *slot = value;
        true
    }
}

pub(crate) const SQLITE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS spend (
    experiment TEXT NOT NULL,
    session TEXT NOT NULL,
    model TEXT NOT NULL,
    arm TEXT NOT NULL,
    agent TEXT NOT NULL,
    turns INTEGER NOT NULL, no_usage INTEGER NOT NULL,
    input INTEGER NOT NULL, cache_read INTEGER NOT NULL, cache_write INTEGER NOT NULL,
    output INTEGER NOT NULL, cost_micros INTEGER NOT NULL, unpriced INTEGER NOT NULL,
    expand_rounds INTEGER NOT NULL, retries INTEGER NOT NULL, errors INTEGER NOT NULL,
    wall_ms INTEGER NOT NULL, first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
    PRIMARY KEY (experiment, session, model)
);
";

/// Adds `spend` to its row (SQLite).
pub(crate) fn sqlite_add(
    conn: &Connection,
    experiment: &str,
    spend: &Spend,
) -> rusqlite::Result<()> {
    let c = counters(spend).map(|(_, v)| v as i64);
    conn.prepare_cached(
        "INSERT INTO spend VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)
         ON CONFLICT (experiment, session, model) DO UPDATE SET
           turns = turns + excluded.turns, no_usage = no_usage + excluded.no_usage,
           input = input + excluded.input, cache_read = cache_read + excluded.cache_read,
           cache_write = cache_write + excluded.cache_write, output = output + excluded.output,
           cost_micros = cost_micros + excluded.cost_micros, unpriced = unpriced + excluded.unpriced,
           expand_rounds = expand_rounds + excluded.expand_rounds,
           retries = retries + excluded.retries, errors = errors + excluded.errors,
           wall_ms = wall_ms + excluded.wall_ms,
           first_ms = MIN(first_ms, excluded.first_ms), last_ms = MAX(last_ms, excluded.last_ms)",
    )?
    .execute(params![
        experiment,
        spend.session,
        spend.model,
        spend.arm,
        spend.agent,
        c[0],
        c[1],
        c[2],
        c[3],
        c[4],
        c[5],
        c[6],
        c[7],
        c[8],
        c[9],
        c[10],
        c[11],
        c[12],
        c[13]
    ])?;
    Ok(())
}

/// Every row of `experiment` (SQLite).
pub(crate) fn sqlite_all(conn: &Connection, experiment: &str) -> rusqlite::Result<Vec<Spend>> {
    let mut statement = conn.prepare_cached(
        "SELECT session, model, arm, agent, turns, no_usage, input, cache_read, cache_write,
                output, cost_micros, unpriced, expand_rounds, retries, errors, wall_ms,
                first_ms, last_ms
         FROM spend WHERE experiment = ?1 ORDER BY session, model",
    )?;
    let rows = statement.query_map(params![experiment], |row| {
        let mut spend = Spend {
            session: row.get(0)?,
            model: row.get(1)?,
            arm: row.get(2)?,
            agent: row.get(3)?,
            ..Spend::default()
        };
        for (i, (name, _)) in counters(&Spend::default()).iter().enumerate() {
            let value: i64 = row.get(4 + i)?;
            spend.set(name, value.max(0) as u64);
        }
        Ok(spend)
    })?;
    rows.collect()
}

/// The Redis keys of `experiment`: the set of its rows, and one row's hash. One hash tag for
/// the whole experiment, so a Cluster keeps it on one slot and the script stays single-slot.
pub(crate) fn redis_keys(experiment: &str, row: Option<&str>) -> String {
    match row {
        None => format!("sluice:{{ab:{experiment}}}:rows"),
        Some(row) => format!("sluice:{{ab:{experiment}}}:row:{row}"),
    }
}

/// A row's member in the set: session and model, tab-separated (neither holds a tab: the
/// session is a label, a model name is cut at a quote or a backslash and never has one).
pub(crate) fn redis_member(spend: &Spend) -> String {
    format!("{}\t{}", spend.session, spend.model)
}

/// Adds a row: KEYS rows, row. ARGV member, arm, agent, first_ms, last_ms, then counter pairs.
pub(crate) const REDIS_ADD: &str = r"
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('HSETNX', KEYS[2], 'arm', ARGV[2])
redis.call('HSETNX', KEYS[2], 'agent', ARGV[3])
local first = tonumber(redis.call('HGET', KEYS[2], 'first_ms') or '0')
if first == 0 or tonumber(ARGV[4]) < first then redis.call('HSET', KEYS[2], 'first_ms', ARGV[4]) end
local last = tonumber(redis.call('HGET', KEYS[2], 'last_ms') or '0')
if tonumber(ARGV[5]) > last then redis.call('HSET', KEYS[2], 'last_ms', ARGV[5]) end
for i = 6, #ARGV, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
return 1
";

/// The counter pairs [`REDIS_ADD`] increments (all but the two time bounds).
pub(crate) fn redis_increments(spend: &Spend) -> Vec<(&'static str, u64)> {
    counters(spend)
        .into_iter()
        .filter(|(name, _)| !name.ends_with("_ms") || *name == "wall_ms")
        .collect()
}

/// A row read back from its member and hash fields.
pub(crate) fn from_redis(member: &str, fields: Vec<(String, String)>) -> Spend {
    let (session, model) = member.split_once('\t').unwrap_or((member, ""));
    let mut spend = Spend {
        session: session.to_owned(),
        model: model.to_owned(),
        ..Spend::default()
    };
    for (name, value) in fields {
        match name.as_str() {
            "arm" => spend.arm = value,
            "agent" => spend.agent = value,
            _ => {
                spend.set(&name, value.parse().unwrap_or(0));
            }
        }
    }
    spend
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(session: &str, turns: u64, first_ms: u64, last_ms: u64) -> Spend {
        Spend {
            session: session.to_owned(),
            model: "claude-sonnet-4-5".to_owned(),
            arm: "control".to_owned(),
            agent: "claude-code".to_owned(),
            turns,
            input: 10 * turns,
            cost_micros: 7 * turns,
            first_ms,
            last_ms,
            ..Spend::default()
        }
    }

    /// Rows add counter by counter; the time bounds widen; arm and agent stay the first.
    #[test]
    fn rows_add_up_in_sqlite() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SQLITE_SCHEMA).unwrap();
        sqlite_add(&conn, "ab", &spend("s1", 1, 200, 300)).unwrap();
        let mut later = spend("s1", 2, 100, 250);
        later.arm = "treatment".to_owned();
        sqlite_add(&conn, "ab", &later).unwrap();
        sqlite_add(&conn, "ab", &spend("s2", 1, 500, 600)).unwrap();
        sqlite_add(&conn, "other", &spend("s1", 5, 1, 2)).unwrap();
        let rows = sqlite_all(&conn, "ab").unwrap();
        assert_eq!(rows.len(), 2);
        let s1 = &rows[0];
        assert_eq!((s1.turns, s1.input, s1.cost_micros), (3, 30, 21));
        assert_eq!((s1.first_ms, s1.last_ms), (100, 300));
        assert_eq!(s1.arm, "control");
        assert_eq!(rows[1], spend("s2", 1, 500, 600));
    }

    #[test]
    fn a_redis_row_reads_back_whole() {
        let row = spend("s1", 3, 100, 300);
        let mut fields: Vec<(String, String)> = counters(&row)
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.to_string()))
            .collect();
        fields.push(("arm".to_owned(), row.arm.clone()));
        fields.push(("agent".to_owned(), row.agent.clone()));
        assert_eq!(from_redis(&redis_member(&row), fields), row);
        let names: Vec<&str> = redis_increments(&row).iter().map(|(k, _)| *k).collect();
        assert!(names.contains(&"wall_ms") && !names.contains(&"first_ms"));
    }
}
