//! The live A/B experiment (`sluice serve --ab SHARE`, `experiment:`): what each request of an
//! assigned session spent, recorded in the durable store, and the report read back from it.
//!
//! The arm itself is the turn's decision (`modes::turn`, before any session state is touched);
//! here each request's [`Tab`] collects what its arm cost as the request goes (the reply the
//! agent got, with every expand round's usage added in, and its status), and the [`Book`]
//! adds it to the session's row with one write behind the reply. The report is computed from
//! the rows (`modes::experiment::Findings`), so every replica and every restart reads the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashboard::ReplyUsage;
use dashboard::prices::{Billed, Work, price, priced};
use engine::config::{Arm, ExperimentConfig};
use engine::wire::Dialect;
use http::HeaderMap;
use modes::experiment::Findings;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use store::{BackendError, DurableStore, Spend};

/// How often the report `/stats` shows is read again from the store.
const REFRESH: Duration = Duration::from_secs(10);
/// A report younger than this is served as it is.
const FRESH: Duration = Duration::from_secs(2);
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

/// A model's name without the date a provider's reply adds to it (`claude-sonnet-4-5-20250929`,
/// `gpt-4o-2024-08-06`), so a session's turns group under one model whichever named it, and at
/// most 120 characters.
fn undated(model: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let bytes = model.as_bytes();
    let cut =
        if bytes.len() > 9 && bytes[bytes.len() - 9] == b'-' && digits(&model[bytes.len() - 8..]) {
            bytes.len() - 9
        } else if bytes.len() > 11
            && bytes[bytes.len() - 11] == b'-'
            && digits(&model[bytes.len() - 10..bytes.len() - 6])
            && model[bytes.len() - 6..].starts_with('-')
            && digits(&model[bytes.len() - 5..bytes.len() - 3])
            && model[bytes.len() - 3..].starts_with('-')
            && digits(&model[bytes.len() - 2..])
        {
            bytes.len() - 11
        } else {
            bytes.len()
        };
    let name = &model[..cut];
    match name.char_indices().nth(120) {
        Some((at, _)) => &name[..at],
        None => name,
    }
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
    latest: Mutex<Option<Arc<Findings>>>,
    /// When a report was last read for someone asking.
    served: tokio::sync::Mutex<Option<Instant>>,
    /// One read of the rows at a time.
    reading: tokio::sync::Mutex<()>,
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
            served: tokio::sync::Mutex::new(None),
            reading: tokio::sync::Mutex::new(()),
            runtime: runtime.clone(),
        });
        let weak = Arc::downgrade(&book);
        runtime.spawn(async move {
            loop {
                let Some(book) = weak.upgrade() else {
                    return;
                };
                let one = book.reading.lock().await;
                let _ = book.read().await;
                drop(one);
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

    /// The report for someone asking (`GET /ab`, the dashboard's tab, which an open browser asks
    /// for on every burst of traffic): read from the store, unless it was for someone asking
    /// under [`FRESH`] ago, so that the rows are never read more often than that.
    pub(crate) async fn report(&self) -> Result<Arc<Findings>, BackendError> {
        let _one = self.reading.lock().await;
        let mut served = self.served.lock().await;
        if let Some(at) = *served
            && at.elapsed() < FRESH
            && let Some(report) = self.latest()
        {
            return Ok(report);
        }
        let report = self.read().await?;
        *served = Some(Instant::now());
        Ok(report)
    }

    /// Reads every row and makes the report (kept for `/stats`).
    async fn read(&self) -> Result<Arc<Findings>, BackendError> {
        let rows = self.durable.spends(&self.config.name).await?;
        let (name, idle_ms) = (
            self.config.name.clone(),
            self.config.idle_seconds.saturating_mul(1000),
        );
        // 2,000 resamples a group: off the runtime's workers.
        let report = tokio::task::spawn_blocking(move || {
            Findings::of(&name, &rows, dashboard::now_ms(), idle_ms)
        })
        .await
        .map_err(|_| BackendError::Closed)?;
        let report = Arc::new(report);
        *self.latest.lock() = Some(report.clone());
        Ok(report)
    }

    /// The report as last read (at most [`REFRESH`] old), for `/stats` and `/metrics`.
    pub(crate) fn latest(&self) -> Option<Arc<Findings>> {
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
        let model = undated(model.or(usage.model.as_deref()).unwrap_or("")).to_owned();
        let failed = status >= 400 || self.cut;
        let retried = self.book.retried(&row, failed);
        let reported = usage.input.is_some() || usage.output.is_some();
        // A refusal (an error status, no reply) is billed nothing; a reply that was answered,
        // or broke off after its head, without a report has a cost nobody knows.
        let unknown = !reported && (status < 400 || self.cut);
        let billed = Billed {
            // Anthropic reports input apart from the cache; the others include it
            // (A gateway's OpenAI-shaped reply in front of Anthropic reports cache writes too,
            // inside its prompt count.)
            fresh: match dialect {
                Some(Dialect::Anthropic) => usage.input.unwrap_or(0),
                _ => usage
                    .input
                    .unwrap_or(0)
                    .saturating_sub(usage.cache_read.unwrap_or(0))
                    .saturating_sub(usage.cache_write.unwrap_or(0)),
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
            no_usage: u64::from(unknown),
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
    fn reply_dates_are_left_out_of_model_names() {
        assert_eq!(undated("claude-sonnet-4-5-20250929"), "claude-sonnet-4-5");
        assert_eq!(undated("gpt-4o-2024-08-06"), "gpt-4o");
        assert_eq!(undated("claude-sonnet-4-5"), "claude-sonnet-4-5");
        assert_eq!(undated("gpt-4.1"), "gpt-4.1");
        assert_eq!(undated("model-12345678x"), "model-12345678x");
        assert_eq!(undated("é-20250929"), "é");
        assert_eq!(undated(&"m".repeat(300)).len(), 120);
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
