//! The cache keep-alive's pings (`cache.keepalive`, off by default; the rule is
//! `modes::keepalive`). After a live turn worth it, the session's request is held, and when the
//! session stays quiet a ping (the same request asking for one token, not streamed) goes
//! upstream every `idle`, at most `max_pings` times, so the provider's five-minute entry is read
//! (0.1×) instead of written again (1.25×) if the session comes back.
//!
//! What is held is what a ping needs and nothing else: the forwarded body, the upstream URI and
//! the request's headers as they went upstream, caller's credential included. It lives in
//! memory only, never in a log or the store (nothing here implements `Debug` over it), from
//! the moment the turn is sent: it goes when the turn's reply carries no cache report (a
//! refusal, a failure, a client gone), when the session's next request begins, when the gap's
//! pings are done, or when one fails. At most [`MAX_HELD`] sessions and [`MAX_BYTES`] of bodies
//! are held; a turn past either, or with a body over [`MAX_BODY`], is not pinged (counted as
//! skipped).
//!
//! Pings are timed from when the provider last used the entry: the turn's start (its request
//! refreshed the entry when it arrived, however long the answer then took), then each ping's.
//! A ping that would land after the entry's lifetime is not sent: it would write, not read.
//! Every ping is checked against what the provider reports: one that wrote more than it read
//! found the entry gone (`keepalive_wrote_instead_of_read`), and a refused one
//! (`keepalive_failed`) ends that gap's pings. A session that comes back after its entry would
//! have expired, within the lifetime of a ping that read it, and whose turn then reads from the
//! cache, is a kept gap: that read is what the pings spared it writing.
//!
//! Each turn gets a [`Ticket`] (a keeper-wide generation): only its own report arms the pings,
//! and a later request of the session (a turn, or one sluice forwarded untouched) ends them. A
//! ticket dropped unsettled (the reply had no report, the client left, the report was lost on
//! a full mailbox) releases what its turn held at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actors::sessions::Sessions;
use bytes::Bytes;
use dashboard::ReplyUsage;
use engine::clock::Clock;
use engine::config::KeepAlive;
use engine::wire::Dialect;
use http::{HeaderMap, Method};
use http_body_util::BodyExt;
use modes::keepalive::{After, Ledger, asks_for_the_hour, eligible, ping_body, thinking_enabled};
use modes::{CacheUsage, SessionState};
use parking_lot::Mutex;
use tokio::time::Instant;

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
    /// The ticket of the session's latest request: a report or a ping of another is stale.
    generation: u64,
    /// The latest turn's request, from its send until its pings are done.
    sent: Option<Arc<Sent>>,
    /// When the latest request began: when the provider last used the entry.
    last_turn: Option<Instant>,
    /// When a ping last read the entry, in the gap since then.
    last_read: Option<Instant>,
    /// The latest turn came back on an entry a ping kept: its report books the kept gap.
    returning: bool,
    /// Bytes of `sent`, counted in [`Keeper::held_bytes`].
    held: usize,
    /// The gap's pings, stopped when the next request begins (freeing what they hold at once).
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
    /// Tickets, keeper-wide, so a pruned and re-made entry never meets an old one's.
    tickets: AtomicU64,
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
    /// Turns worth no ping (a first turn, the hour-long entry, a small prefix, thinking on, too
    /// dear, a reply later than the entry, or past the keeper's bounds).
    pub skipped: u64,
    /// Pings the upstream refused, did not answer within 60 s, or answered without a cache
    /// report.
    pub failed: u64,
    /// The pings' cost at list price, US dollars (models with one).
    pub spend_usd: f64,
    /// The kept turns' cache reads priced as the writes they spared, less the reads.
    pub saved_usd: f64,
    /// Sessions holding a request now (a turn in flight, or a gap's pings to come).
    pub live_sessions: u64,
}

/// A turn's claim on the keep-alive, from its send to its report.
pub(crate) struct Ticket {
    keeper: Arc<Keeper>,
    session: String,
    /// 0 once settled.
    id: u64,
}

impl Ticket {
    /// The turn's report, its session's `turns`-th: see [`Keeper::settled`].
    pub(crate) fn settled(mut self, usage: CacheUsage, turns: u64, model: Option<&str>) {
        let id = std::mem::take(&mut self.id);
        self.keeper.settled(&self.session, id, usage, turns, model);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.id != 0 {
            self.keeper.unreported(&self.session, self.id);
        }
    }
}

/// What a ping found.
enum Pinged {
    /// The provider read the entry (and what the ping cost).
    Read(ReplyUsage),
    /// It wrote more than it read: the entry had gone.
    Wrote(ReplyUsage),
    /// Refused, late, or no cache report.
    Failed,
}

impl Keeper {
    /// The keeper `config` asks for: `cache.keepalive` on, in sync mode (pings act on the
    /// user's bill; observe mode forwards untouched), and no experiment running (a ping is
    /// billed to no arm, while the turns it kept would be billed to the treatment's).
    /// Must be called on a tokio runtime.
    pub fn start(
        config: &engine::config::Config,
        lifetime: Duration,
        upstream: &Upstream,
        turns: &modes::TurnService,
    ) -> Option<Arc<Keeper>> {
        let rule = config.cache.keepalive()?;
        if config.mode == engine::config::Mode::Observe || config.experiment.running() {
            return None;
        }
        Some(Arc::new(Keeper {
            rule,
            lifetime,
            upstream: upstream.clone(),
            sessions: turns.sessions()?.clone(),
            runtime: tokio::runtime::Handle::current(),
            entries: Mutex::default(),
            counts: Mutex::default(),
            tickets: AtomicU64::new(0),
            held_bytes: AtomicU64::new(0),
        }))
    }

    pub fn counts(&self) -> Pings {
        let mut counts = *self.counts.lock();
        counts.live_sessions = self.entries.lock().values().filter(|e| e.held > 0).count() as u64;
        counts
    }

    /// A request of `session` that sluice forwarded untouched: the quiet gap is over, and its
    /// pings stop (it may have been the agent compacting, which makes the pinged prefix moot).
    pub(crate) fn activity(&self, session: &str) {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get_mut(session) {
            entry.generation = self.tickets.fetch_add(1, Ordering::Relaxed) + 1;
            entry.last_turn = Some(Instant::now());
            entry.last_read = None;
            self.release(entry);
        }
    }

    /// A live turn of `session` goes upstream: the quiet gap before it ends (its pending pings
    /// are not sent), and its request is held until its report says whether it is worth pings.
    /// Its ticket, for the report; `None` where no ping could follow (not Anthropic Messages:
    /// the providers that bill no cache write gain nothing from one).
    pub(crate) fn turn_sent(
        self: &Arc<Self>,
        session: &str,
        dialect: Dialect,
        uri: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Option<Ticket> {
        if dialect != Dialect::Anthropic {
            return None;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_HELD && !entries.contains_key(session) {
            // Forget sessions that hold nothing and whose last gap is over for good.
            let span = self.rule.idle * self.rule.max_pings + self.lifetime;
            entries.retain(|_, e| e.held > 0 || e.last_turn.is_some_and(|t| now - t < span));
        }
        if entries.len() >= MAX_HELD && !entries.contains_key(session) {
            self.counts.lock().skipped += 1;
            return None;
        }
        let id = self.tickets.fetch_add(1, Ordering::Relaxed) + 1;
        let ticket = Ticket {
            keeper: self.clone(),
            session: session.to_owned(),
            id,
        };
        let entry = entries.entry(session.to_owned()).or_default();
        entry.generation = id;
        let quiet = entry.last_turn.map(|t| now - t);
        entry.returning = quiet.is_some_and(|q| q > self.lifetime)
            && entry.last_read.is_some_and(|t| now - t <= self.lifetime);
        entry.last_turn = Some(now);
        entry.last_read = None;
        self.release(entry);
        let total = self.held_bytes.load(Ordering::Relaxed) as usize;
        if body.len() > MAX_BODY || total + body.len() > MAX_BYTES {
            self.counts.lock().skipped += 1;
            return Some(ticket);
        }
        let mut headers = headers.clone();
        headers.remove(http::header::CONTENT_LENGTH);
        entry.sent = Some(Arc::new(Sent {
            uri: uri.to_owned(),
            headers,
            body: body.clone(),
        }));
        entry.held = body.len();
        self.held_bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        Some(ticket)
    }

    /// Drops what `entry` holds, and stops its pings.
    fn release(&self, entry: &mut Entry) {
        if let Some(task) = entry.task.take() {
            task.abort();
        }
        entry.sent = None;
        self.held_bytes
            .fetch_sub(entry.held as u64, Ordering::Relaxed);
        entry.held = 0;
    }

    /// Turn `ticket`'s reply carried no cache report (refused, failed, cut off): nothing to
    /// keep alive, and its request goes now.
    fn unreported(&self, session: &str, ticket: u64) {
        if let Some(entry) = self.entries.lock().get_mut(session)
            && entry.generation == ticket
        {
            entry.returning = false;
            self.release(entry);
        }
    }

    /// The report of `session`'s turn `ticket`, its `turns`-th: a kept gap is booked, and the
    /// turn's request, when worth it, is pinged through the next quiet gap. A stale report
    /// (the session's next request began) does nothing.
    fn settled(
        self: &Arc<Self>,
        session: &str,
        ticket: u64,
        usage: CacheUsage,
        turns: u64,
        model: Option<&str>,
    ) {
        let mut entries = self.entries.lock();
        let Some(entry) = entries.get_mut(session).filter(|e| e.generation == ticket) else {
            return;
        };
        // Kept only if the provider did read it back.
        let written = usage.written.unwrap_or(0);
        if std::mem::take(&mut entry.returning) && usage.read > 0 && written <= usage.read {
            let mut counts = self.counts.lock();
            counts.ledger.kept += 1;
            counts.ledger.kept_tokens += usage.read;
            if let Some(price) = model.and_then(dashboard::prices::price) {
                counts.saved_usd +=
                    usage.read as f64 * (price.cache_write - price.cache_read) / 1e6;
            }
        }
        let (Some(sent), Some(start)) = (entry.sent.clone(), entry.last_turn) else {
            return;
        };
        if start.elapsed() >= self.last_moment() {
            // The reply came after the entry's lifetime: a ping now would write it again.
            self.counts.lock().skipped += 1;
            self.release(entry);
            return;
        }
        let keeper = self.clone();
        let (name, model) = (session.to_owned(), model.map(str::to_owned));
        let prefix = usage.read + written;
        // Judged and built on the runtime, not here: this runs on the session's actor, and
        // reading a large body would hold its next turn.
        let task = self.runtime.spawn(async move {
            if let Some((ping, price)) = keeper.judged(&sent, prefix, turns, model.as_deref()) {
                keeper.pings(&name, ticket, start, &sent, ping, price).await;
            }
            keeper.done(&name, ticket);
        });
        entry.task = Some(task.abort_handle());
    }

    /// The ping for a turn that sent `sent` and cached `prefix` tokens, with its model's price,
    /// when the turn is worth pings (`modes::keepalive::eligible`); counted as skipped when not.
    fn judged(
        &self,
        sent: &Sent,
        prefix: u64,
        turns: u64,
        model: Option<&str>,
    ) -> Option<(Bytes, Option<dashboard::prices::Price>)> {
        let price = model.and_then(dashboard::prices::price);
        let turn = After {
            dialect: Dialect::Anthropic,
            turns,
            prefix_tokens: prefix,
            thinking: thinking_enabled(&sent.body),
            hour: asks_for_the_hour(&sent.body),
            ping_usd: price.map(|p| prefix as f64 * p.cache_read / 1e6),
        };
        let ping = eligible(&self.rule, &turn)
            .ok()
            .and_then(|()| ping_body(&sent.body));
        if ping.is_none() {
            self.counts.lock().skipped += 1;
        }
        Some((ping?.into(), price))
    }

    /// How long after the entry's last use a ping may still go: its lifetime less a margin for
    /// delivery (a ping that lands late writes at 1.25 instead of reading at 0.1, the worst of
    /// every outcome): half the slack between the idle time and the lifetime, at most 20 s
    /// (10 s on the defaults, 280 and 300).
    fn last_moment(&self) -> Duration {
        let slack = self.lifetime.saturating_sub(self.rule.idle);
        self.lifetime - (slack / 2).min(Duration::from_secs(20))
    }

    /// The gap's pings are over: what the session held goes, unless a later request holds its
    /// own.
    fn done(&self, session: &str, ticket: u64) {
        if let Some(entry) = self.entries.lock().get_mut(session)
            && entry.generation == ticket
        {
            // Not `release`: this is the task itself, finishing.
            entry.task = None;
            entry.sent = None;
            self.held_bytes
                .fetch_sub(entry.held as u64, Ordering::Relaxed);
            entry.held = 0;
        }
    }

    /// The quiet gap after turn `ticket`, which began at `start`: a ping each `idle` after the
    /// provider last used the entry, while the session stays quiet.
    async fn pings(
        &self,
        session: &str,
        ticket: u64,
        start: Instant,
        sent: &Sent,
        body: Bytes,
        price: Option<dashboard::prices::Price>,
    ) {
        let mut used = start;
        for i in 0..self.rule.max_pings {
            tokio::time::sleep_until(used + self.rule.idle).await;
            let now = Instant::now();
            if now - used >= self.last_moment() {
                // Woken too late (a stalled runtime): this ping would write, not read.
                self.counts.lock().skipped += 1;
                return;
            }
            let pinged = self.ping(sent, body.clone()).await;
            let mut counts = self.counts.lock();
            let (usage, wrote) = match pinged {
                Pinged::Failed => {
                    counts.failed += 1;
                    return;
                }
                Pinged::Read(usage) => (usage, false),
                Pinged::Wrote(usage) => (usage, true),
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
            if wrote {
                // The entry had gone: pinging on would only pay for more writes of a session
                // that may not come back.
                counts.ledger.wrote_instead_of_read += 1;
                return;
            }
            drop(counts);
            if !self.kept_alive(session, ticket, now) {
                return;
            }
            used = now;
        }
    }

    /// A ping sent at `at` read the entry: it lives from then, and the session's tracker hears
    /// of it (so the next turn does not read cold and cut at depth, throwing the entry away).
    /// False when the session has moved on.
    fn kept_alive(&self, session: &str, ticket: u64, at: Instant) -> bool {
        match self.entries.lock().get_mut(session) {
            Some(entry) if entry.generation == ticket => entry.last_read = Some(at),
            _ => return false,
        }
        let now = SystemClock.now();
        self.sessions
            .apply(session, move |state: &mut SessionState| {
                state.tracker.kept_alive(now);
            });
        true
    }

    /// Sends one ping and reads what the provider reports of it.
    async fn ping(&self, sent: &Sent, body: Bytes) -> Pinged {
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
        match tokio::time::timeout(PING_TIMEOUT, call)
            .await
            .ok()
            .flatten()
        {
            Some(usage) if usage.cache_read.is_none() => Pinged::Failed,
            Some(usage) if usage.cache_write.unwrap_or(0) > usage.cache_read.unwrap_or(0) => {
                Pinged::Wrote(usage)
            }
            Some(usage) => Pinged::Read(usage),
            None => Pinged::Failed,
        }
    }
}
