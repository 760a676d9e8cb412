//! The live A/B experiment (`sluice serve --ab SHARE`, `experiment:`): what each request of an
//! assigned session spent, recorded in the durable store, and the report read back from it.
//!
//! The arm itself is the turn's decision (`modes::turn`, before any session state is touched);
//! here each request's [`Tab`] collects what its arm cost as the request goes (the reply the
//! agent got, with every expand round's usage added in, and its status), and the [`Book`]
//! adds it to the session's row with one write behind the reply. The report is computed from
//! the rows (`modes::experiment::Report`), so every replica and every restart reads the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashboard::ReplyUsage;
use dashboard::prices::{Billed, Work, price, priced};
use engine::config::{Arm, ExperimentConfig};
use engine::wire::Dialect;
use http::HeaderMap;
use modes::experiment::Report;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use store::{BackendError, DurableStore, Spend};

/// How often the report `/stats` and the dashboard show is read again from the store.
const REFRESH: Duration = Duration::from_secs(10);
/// Sessions remembered as "last request failed" (for counting retries), at most.
const FAILED_SESSIONS: usize = 10_000;

/// Agent families by user-agent prefix (case-insensitive), the first match wins. An agent not
/// listed is named by its user-agent's first product token.
const AGENTS: &[(&str, &str)] = &[
    ("claude-cli", "claude-code"),
    ("claude-code", "claude-code"),
    ("codex", "codex"),
    ("geminicli", "gemini-cli"),
    ("gemini-cli", "gemini-cli"),
    ("aider", "aider"),
    ("mini-swe-agent", "mini-swe-agent"),
    ("litellm", "litellm"),
    ("anthropic/", "anthropic-sdk"),
    ("openai/", "openai-sdk"),
    ("asyncopenai/", "openai-sdk"),
];

/// The agent's family from its `user-agent`.
pub(crate) fn agent_family(headers: &HeaderMap) -> String {
    let ua = headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    let lower = ua.to_ascii_lowercase();
    if let Some((_, family)) = AGENTS.iter().find(|(prefix, _)| lower.starts_with(prefix)) {
        return (*family).to_owned();
    }
    let token = lower
        .split(['/', ' '])
        .next()
        .filter(|t| !t.is_empty())
        .unwrap_or("unknown");
    token.chars().take(32).collect()
}

/// A session key's name in the experiment's rows: a hash of the experiment and the key (which
/// already carries the credential's scope as a keyed hash), so no row holds a key or a secret.
fn row_name(experiment: &str, session: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(experiment.as_bytes());
    hasher.update([0]);
    hasher.update(session.as_bytes());
    let digest = hasher.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The experiment's records and its latest report.
pub(crate) struct Book {
    durable: Arc<DurableStore>,
    config: ExperimentConfig,
    /// Sessions whose last request failed: the next one is a retry.
    failed: Mutex<std::collections::HashSet<String>>,
    written: AtomicU64,
    lost: AtomicU64,
    latest: Mutex<Option<Arc<Report>>>,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Book {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Book")
            .field("experiment", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl Book {
    /// The book of an experiment, running or ended with a winner (its report still read, every
    /// [`REFRESH`] on `runtime`); `None` without one.
    pub(crate) fn start(
        config: &ExperimentConfig,
        durable: &Arc<DurableStore>,
        runtime: &tokio::runtime::Handle,
    ) -> Option<Arc<Book>> {
        if !config.enabled() {
            return None;
        }
        let book = Arc::new(Book {
            durable: durable.clone(),
            config: config.clone(),
            failed: Mutex::default(),
            written: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            latest: Mutex::default(),
            runtime: runtime.clone(),
        });
        let weak = Arc::downgrade(&book);
        runtime.spawn(async move {
            loop {
                let Some(book) = weak.upgrade() else {
                    return;
                };
                let _ = book.report().await;
                drop(book);
                tokio::time::sleep(REFRESH).await;
            }
        });
        Some(book)
    }

    /// Whether requests are recorded: the experiment runs (ended with a winner, it only reports).
    pub(crate) fn recording(&self) -> bool {
        self.config.running()
    }

    /// The report now, read from the store (and kept for `/stats`).
    pub(crate) async fn report(&self) -> Result<Arc<Report>, BackendError> {
        let rows = self.durable.spends(&self.config.name).await?;
        let report = Arc::new(Report::of(
            &self.config.name,
            &rows,
            dashboard::now_ms(),
            self.config.idle_seconds.saturating_mul(1000),
        ));
        *self.latest.lock() = Some(report.clone());
        Ok(report)
    }

    /// The report as last read (at most [`REFRESH`] old), for `/stats` and `/metrics`.
    pub(crate) fn latest(&self) -> Option<Arc<Report>> {
        self.latest.lock().clone()
    }

    /// Rows added, and rows the store did not take.
    pub(crate) fn writes(&self) -> (u64, u64) {
        (
            self.written.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed),
        )
    }

    /// Adds one request's spend behind the reply.
    fn add(self: &Arc<Self>, spend: Spend) {
        let book = self.clone();
        // On the book's runtime: a request's last part may finish on a thread outside it (the
        // shadow run of a control request, on the observe pool).
        self.runtime.spawn(async move {
            let counter = if book.durable.add_spend(&book.config.name, &spend).await {
                &book.written
            } else {
                tracing::debug!(experiment = %book.config.name, "an experiment row was not written");
                &book.lost
            };
            counter.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Whether `row`'s previous request failed; remembers whether this one did.
    fn retried(&self, row: &str, failed: bool) -> bool {
        let mut sessions = self.failed.lock();
        let was = if failed {
            !sessions.insert(row.to_owned())
        } else {
            sessions.remove(row)
        };
        if sessions.len() > FAILED_SESSIONS {
            sessions.clear();
        }
        was
    }
}

/// One request's share of the experiment, filled in as the request goes and added to its
/// session's row when the request is done (see `crate::capture`, which carries it).
pub(crate) struct Tab {
    book: Arc<Book>,
    started: Instant,
    started_ms: u64,
    agent: String,
    /// The arm and the session's row name, once the turn has named the session.
    assigned: Option<(Arm, String)>,
    /// The usage of the reply the agent got: every upstream call's, expand rounds included.
    delivered: Option<ReplyUsage>,
    /// The reply broke off (the connection's error, after its head).
    cut: bool,
}

impl Tab {
    pub(crate) fn start(book: Arc<Book>, headers: &HeaderMap) -> Tab {
        Tab {
            book,
            started: Instant::now(),
            started_ms: dashboard::now_ms(),
            agent: agent_family(headers),
            assigned: None,
            delivered: None,
            cut: false,
        }
    }

    /// The request's session (its full key) and arm; a request no session was named for is a
    /// session of its own, named by its body.
    pub(crate) fn assign(&mut self, session: Option<&str>, body: &[u8]) {
        let key = match session {
            Some(session) => session.to_owned(),
            None => format!(
                "request:{}",
                row_name("body", &String::from_utf8_lossy(body))
            ),
        };
        let Some(arm) = self.book.config.arm(&key) else {
            return;
        };
        self.assigned = Some((arm, row_name(&self.book.config.name, &key)));
    }

    pub(crate) fn delivered(&mut self, usage: ReplyUsage, cut: bool) {
        self.delivered = Some(usage);
        self.cut |= cut;
    }

    /// Adds the request to its session's row: `status` is the answer's, `model` the request's
    /// or the reply's, `dialect` tells how its input counts the cache.
    pub(crate) fn finish(
        self,
        status: u16,
        model: Option<&str>,
        dialect: Option<Dialect>,
        rounds: u32,
    ) {
        let Some((arm, row)) = self.assigned else {
            return;
        };
        let usage = self.delivered.unwrap_or_default();
        // The request's model when it named one (a reply names a dated version of it, and both
        // arms must group alike), else the reply's.
        let model = model.or(usage.model.as_deref()).unwrap_or("").to_owned();
        let failed = status >= 400 || self.cut;
        let retried = self.book.retried(&row, failed);
        let reported = usage.input.is_some() || usage.output.is_some();
        let billed = Billed {
            // Anthropic reports input apart from the cache; the others include it.
            fresh: match dialect {
                Some(Dialect::Anthropic) => usage.input.unwrap_or(0),
                _ => usage
                    .input
                    .unwrap_or(0)
                    .saturating_sub(usage.cache_read.unwrap_or(0)),
            },
            cache_read: usage.cache_read.unwrap_or(0),
            cache_write: usage.cache_write.unwrap_or(0),
            output: usage.output.unwrap_or(0),
        };
        let list = price(&model);
        let cost = list.map_or(0.0, |p| priced(&p, &billed, &Work::default()).cost);
        let now_ms = dashboard::now_ms();
        let spend = Spend {
            session: row,
            model,
            arm: arm.name().to_owned(),
            agent: self.agent,
            turns: 1,
            no_usage: u64::from(!reported),
            input: billed.fresh,
            cache_read: billed.cache_read,
            cache_write: billed.cache_write,
            output: billed.output,
            cost_micros: (cost * 1e6).round() as u64,
            unpriced: u64::from(reported && list.is_none()),
            expand_rounds: u64::from(rounds),
            retries: u64::from(retried),
            errors: u64::from(failed),
            wall_ms: self.started.elapsed().as_millis() as u64,
            first_ms: self.started_ms,
            last_ms: now_ms,
        };
        self.book.add(spend);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_are_named_by_family() {
        let named = |ua: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(http::header::USER_AGENT, ua.parse().unwrap());
            agent_family(&headers)
        };
        assert_eq!(named("claude-cli/2.0.14 (external, cli)"), "claude-code");
        assert_eq!(named("codex_cli_rs/0.46.0 (Debian 13; x86_64)"), "codex");
        assert_eq!(named("GeminiCLI/0.9.0 (linux; x64)"), "gemini-cli");
        assert_eq!(named("litellm/1.77.7"), "litellm");
        assert_eq!(named("OpenAI/Python 1.109.1"), "openai-sdk");
        assert_eq!(named("curl/8.14.1"), "curl");
        assert_eq!(agent_family(&HeaderMap::new()), "unknown");
    }

    #[test]
    fn row_names_hide_the_key_and_differ_by_experiment() {
        let a = row_name("ab", "kscope:session-1");
        assert_eq!(a.len(), 16);
        assert!(!a.contains("session"));
        assert_ne!(a, row_name("ab-2", "kscope:session-1"));
        assert_eq!(a, row_name("ab", "kscope:session-1"));
    }
}
