//! The cache keep-alive's pings (`cache.keepalive`, off by default; the rule is
//! `modes::keepalive`). After a live turn worth it, the session's request is held, and when the
//! session stays quiet a ping (the same request asking for one token, not streamed) goes
//! upstream every `idle`, at most `max_pings` times, so the provider's five-minute entry is read
//! (0.1×) instead of written again (1.25×) if the session comes back.
//!
//! What is held is what a ping needs and nothing else: the forwarded body, the upstream URI and
//! the request's headers as they went upstream, caller's credential included. It lives in
//! memory only, never in a log or the store (its `Debug` shows neither), and goes when the
//! session's next turn begins, when its pings are done, or when the ping fails; at most
//! [`MAX_HELD`] sessions and [`MAX_BYTES`] of bodies are held, and a turn past either is not
//! pinged (counted as skipped).
//!
//! Every ping is checked against what the provider reports: a ping that wrote more than it read
//! found the entry gone (`keepalive_wrote_instead_of_read`), and a refused one
//! (`keepalive_failed`) ends the session's pings. A session that comes back after its entry
//! would have expired, within the lifetime of a ping that read it, is a kept gap: its turn's
//! cache read is what the pings spared it writing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actors::sessions::Sessions;
use bytes::Bytes;
use dashboard::ReplyUsage;
use engine::clock::Clock;
use engine::config::KeepAlive;
use engine::wire::Dialect;
use http::{HeaderMap, Method};
use http_body_util::BodyExt;
use modes::keepalive::{After, Ledger, eligible, ping_body, thinking_enabled};
use modes::{CacheUsage, SessionState};
use parking_lot::Mutex;

use crate::clock::SystemClock;
use crate::upstream::Upstream;
use crate::usage::UsageScanner;

/// Sessions held at once.
pub const MAX_HELD: usize = 512;
/// Bytes of held bodies, all sessions together.
pub const MAX_BYTES: usize = 128 << 20;
/// The largest body held.
pub const MAX_BODY: usize = 8 << 20;
/// A ping's deadline, to its whole reply.
const PING_TIMEOUT: Duration = Duration::from_secs(60);

/// A turn on its way upstream, until its report says whether it is worth pings.
struct Sent {
    uri: String,
    headers: HeaderMap,
    body: Bytes,
}

/// One session's keep-alive.
#[derive(Default)]
struct Entry {
    /// Bumped by every turn of the session: a ping whose generation is gone is not sent.
    generation: u64,
    /// The latest turn, while its report has not come.
    sent: Option<Sent>,
    /// When the latest turn began.
    last_turn: Option<Instant>,
    /// When a ping last read the entry, in the gap since then.
    last_read: Option<Instant>,
    /// The latest turn came back on an entry a ping kept: its report books the kept gap.
    returning: bool,
    /// Bytes held for pings now.
    held: usize,
    /// The gap's pings, stopped when the next turn begins (freeing what they hold at once).
    task: Option<tokio::task::AbortHandle>,
}

/// The keeper: the held sessions and what their pings did.
pub struct Keeper {
    rule: KeepAlive,
    /// The provider's entry lifetime (`Settings::keepalive_lifetime`).
    lifetime: Duration,
    upstream: Upstream,
    sessions: Sessions<SessionState>,
    runtime: tokio::runtime::Handle,
    entries: Mutex<HashMap<String, Entry>>,
    counts: Mutex<Pings>,
    held_bytes: AtomicU64,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the held requests: they carry credentials.
        f.debug_struct("Keeper")
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

/// What the pings did, for `/stats` (`crate::keepalive_stats`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pings {
    pub ledger: Ledger,
    /// Turns worth no ping (a first turn, a small prefix, thinking on, too dear, or past the
    /// keeper's bounds).
    pub skipped: u64,
    /// Pings the upstream refused or that did not come back in time.
    pub failed: u64,
    /// The pings' cost at list price, US dollars (models with one).
    pub spend_usd: f64,
    /// The kept turns' cache reads priced as the writes they spared, less the reads.
    pub saved_usd: f64,
    /// Sessions holding a request for pings now.
    pub live_sessions: u64,
}

impl Keeper {
    /// The keeper `config` asks for: `cache.keepalive` on, in sync mode (pings act on the
    /// user's bill; observe mode forwards untouched). Must be called on a tokio runtime.
    pub fn start(
        config: &engine::config::Config,
        lifetime: Duration,
        upstream: &Upstream,
        turns: &modes::TurnService,
    ) -> Option<Arc<Keeper>> {
        let rule = config.cache.keepalive()?;
        if config.mode == engine::config::Mode::Observe {
            return None;
        }
        Some(Arc::new(Keeper::new(
            rule,
            lifetime,
            upstream.clone(),
            turns.sessions()?.clone(),
            tokio::runtime::Handle::current(),
        )))
    }

    pub fn new(
        rule: KeepAlive,
        lifetime: Duration,
        upstream: Upstream,
        sessions: Sessions<SessionState>,
        runtime: tokio::runtime::Handle,
    ) -> Keeper {
        Keeper {
            rule,
            lifetime,
            upstream,
            sessions,
            runtime,
            entries: Mutex::default(),
            counts: Mutex::default(),
            held_bytes: AtomicU64::new(0),
        }
    }

    pub fn counts(&self) -> Pings {
        let mut counts = *self.counts.lock();
        counts.live_sessions = self.entries.lock().values().filter(|e| e.held > 0).count() as u64;
        counts
    }

    /// A live turn of `session` goes upstream: the quiet gap before it ends (its pending pings
    /// are not sent), and its request is kept until its report says whether it is worth pings.
    /// Anthropic Messages only: the providers that bill no cache write gain nothing from a ping.
    pub(crate) fn turn_sent(
        &self,
        session: &str,
        dialect: Dialect,
        uri: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) {
        if dialect != Dialect::Anthropic {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_HELD && !entries.contains_key(session) {
            // Forget sessions holding nothing before refusing a new one.
            entries.retain(|_, e| e.held > 0 || e.sent.is_some());
        }
        if entries.len() >= MAX_HELD && !entries.contains_key(session) {
            self.counts.lock().skipped += 1;
            return;
        }
        let entry = entries.entry(session.to_owned()).or_default();
        entry.generation += 1;
        let quiet = entry.last_turn.map(|t| now.duration_since(t));
        entry.returning = quiet.is_some_and(|q| q > self.lifetime)
            && entry
                .last_read
                .is_some_and(|t| now.duration_since(t) <= self.lifetime);
        entry.last_turn = Some(now);
        entry.last_read = None;
        self.release(entry);
        let mut headers = headers.clone();
        headers.remove(http::header::CONTENT_LENGTH);
        entry.sent = (body.len() <= MAX_BODY).then(|| Sent {
            uri: uri.to_owned(),
            headers,
            body: body.clone(),
        });
    }

    fn release(&self, entry: &mut Entry) {
        if let Some(task) = entry.task.take() {
            task.abort();
        }
        self.held_bytes
            .fetch_sub(entry.held as u64, Ordering::Relaxed);
        entry.held = 0;
    }

    /// The report of `session`'s latest turn, its `turns`-th: a kept gap is booked, and the
    /// turn's request, when worth it, is held for the next gap's pings.
    pub(crate) fn settled(
        self: &Arc<Self>,
        session: &str,
        usage: CacheUsage,
        turns: u64,
        model: Option<&str>,
    ) {
        let (sent, generation) = {
            let mut entries = self.entries.lock();
            let Some(entry) = entries.get_mut(session) else {
                return;
            };
            if std::mem::take(&mut entry.returning) {
                let mut counts = self.counts.lock();
                counts.ledger.kept += 1;
                counts.ledger.kept_tokens += usage.read;
                if let Some(price) = model.and_then(dashboard::prices::price) {
                    counts.saved_usd +=
                        usage.read as f64 * (price.cache_write - price.cache_read) / 1e6;
                }
            }
            let Some(sent) = entry.sent.take() else {
                return;
            };
            let size = sent.body.len();
            let total = self.held_bytes.load(Ordering::Relaxed) as usize;
            if total + size > MAX_BYTES {
                self.counts.lock().skipped += 1;
                return;
            }
            entry.held = size;
            self.held_bytes.fetch_add(size as u64, Ordering::Relaxed);
            (sent, entry.generation)
        };
        let prefix = usage.read + usage.written.unwrap_or(0);
        let keeper = self.clone();
        let (name, model) = (session.to_owned(), model.map(str::to_owned));
        let task = self.runtime.spawn(async move {
            keeper
                .pings(&name, generation, sent, prefix, turns, model.as_deref())
                .await;
            keeper.done(&name, generation);
        });
        if let Some(entry) = self.entries.lock().get_mut(session)
            && entry.generation == generation
        {
            entry.task = Some(task.abort_handle());
        }
    }

    /// The session's held request goes, unless a later turn holds its own.
    fn done(&self, session: &str, generation: u64) {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get_mut(session)
            && entry.generation == generation
        {
            // Not `release`: this is the task itself, finishing.
            entry.task = None;
            self.held_bytes
                .fetch_sub(entry.held as u64, Ordering::Relaxed);
            entry.held = 0;
        }
    }

    fn current(&self, session: &str, generation: u64) -> bool {
        self.entries
            .lock()
            .get(session)
            .is_some_and(|e| e.generation == generation)
    }

    /// The quiet gap after turn `generation`: its pings, while the session stays quiet.
    async fn pings(
        &self,
        session: &str,
        generation: u64,
        sent: Sent,
        prefix: u64,
        turns: u64,
        model: Option<&str>,
    ) {
        let price = model.and_then(dashboard::prices::price);
        let turn = After {
            dialect: Dialect::Anthropic,
            turns,
            prefix_tokens: prefix,
            thinking: thinking_enabled(&sent.body),
            ping_usd: price.map(|p| prefix as f64 * p.cache_read / 1e6),
        };
        let body = match eligible(&self.rule, &turn) {
            Ok(()) => ping_body(&sent.body),
            Err(_) => None,
        };
        let Some(body) = body.map(Bytes::from) else {
            self.counts.lock().skipped += 1;
            return;
        };
        for i in 0..self.rule.max_pings {
            tokio::time::sleep(self.rule.idle).await;
            if !self.current(session, generation) {
                return;
            }
            let outcome = self.ping(&sent, body.clone()).await;
            let mut counts = self.counts.lock();
            let Some(usage) = outcome else {
                counts.failed += 1;
                return;
            };
            let (read, written) = (
                usage.cache_read.unwrap_or(0),
                usage.cache_write.unwrap_or(0),
            );
            counts.ledger.pings += 1;
            counts.ledger.gaps_pinged += u64::from(i == 0);
            counts.ledger.ping_tokens += read;
            if let Some(price) = price {
                counts.spend_usd += (read as f64 * price.cache_read
                    + written as f64 * price.cache_write
                    + usage.input.unwrap_or(0) as f64 * price.input
                    + usage.output.unwrap_or(0) as f64 * price.output)
                    / 1e6;
            }
            if written > read {
                // The entry had gone: this ping wrote it again. Pinging on would only pay
                // for more writes of a session that may not come back.
                counts.ledger.wrote_instead_of_read += 1;
                return;
            }
            drop(counts);
            self.kept_alive(session, generation);
        }
    }

    /// A ping read the entry: it lives from now, and the session's tracker hears of it (so
    /// the next turn does not read cold and cut at depth, throwing the entry away).
    fn kept_alive(&self, session: &str, generation: u64) {
        if let Some(entry) = self.entries.lock().get_mut(session)
            && entry.generation == generation
        {
            entry.last_read = Some(Instant::now());
        }
        let at = SystemClock.now();
        self.sessions
            .apply(session, move |state: &mut SessionState| {
                state.tracker.kept_alive(at);
            });
    }

    /// Sends one ping; the provider's usage when it answered 2xx in time.
    async fn ping(&self, sent: &Sent, body: Bytes) -> Option<ReplyUsage> {
        let call = async {
            let response = self
                .upstream
                .send(Method::POST, &sent.uri, &sent.headers, body.into())
                .await
                .ok()?;
            if !response.status().is_success() {
                return None;
            }
            let bytes = response.into_body().collect().await.ok()?.to_bytes();
            let found = Arc::new(Mutex::new(None));
            let into = found.clone();
            let mut scanner = UsageScanner::new(move |usage| *into.lock() = Some(usage));
            scanner.scan(&bytes);
            drop(scanner);
            found.lock().take()
        };
        tokio::time::timeout(PING_TIMEOUT, call)
            .await
            .ok()
            .flatten()
    }
}
