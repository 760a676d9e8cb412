//! What the host hands the dashboard: one [`Event`] per request, plain values only, and the
//! counters the dashboard keeps about itself ([`Counts`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use engine::wire::Dialect;

/// One request, as the host saw it. Plain values only: everything derived (prices, hashes,
/// redaction, content diffs) happens on the writer.
#[derive(Debug, Default)]
pub struct Event {
    /// Epoch milliseconds at the request's start.
    pub ts_ms: u64,
    /// The session key (credential scope and session id); stored only as a keyed hash.
    pub session: Option<String>,
    pub dialect: Option<Dialect>,
    pub model: Option<String>,
    /// `sync` or `observe`.
    pub mode: &'static str,
    /// The status the client got: the upstream's, sluice's own when it answered, or 499 when
    /// the client went away before an answer.
    pub status: u16,
    pub stream: bool,
    /// Why the body went upstream as it came, when it did.
    pub untouched: Option<&'static str>,
    pub messages: u32,
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// The components are what sync mode would have done (observe mode): nothing was cut.
    pub projected: bool,
    pub components: Vec<ComponentEvent>,
    /// Time sluice added before the request went upstream, in microseconds.
    pub added_us: u64,
    /// Until the upstream's response head, in milliseconds.
    pub upstream_ms: Option<u64>,
    pub usage: ReplyUsage,
    /// Expand rounds the expand loop ran for this request, and the tokens it restored.
    pub expand_rounds: u32,
    pub expand_tokens: u64,
    /// Prompt tokens those rounds sent upstream again.
    pub expand_reread_tokens: u64,
    /// Tokens of the expand tool's declaration sluice added to the request (the net saving
    /// charges it, `engine::savings`).
    pub declared_tokens: u64,
    /// What the request added to the billed saving (`engine::savings`): its provider's report
    /// as the session's cost guard settled it, and its expand rounds' cost.
    pub billed: engine::savings::BilledSaving,
    /// The bodies to take message content from, when both switches allow it.
    pub content: Option<ContentSource>,
    /// What stopped content capture (`operator`, `tenant`), when it was stopped.
    pub capture_blocked_by: Option<&'static str>,
}

/// What one component did on the request.
#[derive(Debug, Clone, Default)]
pub struct ComponentEvent {
    pub name: &'static str,
    /// `reformat` or `offload`.
    pub kind: &'static str,
    pub acted: bool,
    pub mutated: bool,
    pub reverted: Option<&'static str>,
    pub saved_tokens: u64,
    pub duration_us: u64,
    /// Why it declined items, with counts.
    pub gates: Vec<(&'static str, u32)>,
    /// Messages it changed.
    pub changed: Vec<usize>,
}

/// The provider's usage as read off the reply; `None` where the reply did not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyUsage {
    /// The model the reply names (a request that named none, like Azure's, is priced by it).
    pub model: Option<String>,
    /// Anthropic `input_tokens`; OpenAI `prompt_tokens` / Responses `input_tokens`, which
    /// include the cached part.
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
}

/// The request's own bytes and what went upstream: the writer reads the changed messages'
/// before and after text from them, off the request path.
#[derive(Debug)]
pub struct ContentSource {
    pub dialect: Dialect,
    pub original: Bytes,
    pub forwarded: engine::message::Forwarded,
    /// Its share of [`CONTENT_BUDGET`], given back when the writer is done with it.
    pub hold: ContentHold,
}

/// Bytes counted against [`CONTENT_BUDGET`] while a [`ContentSource`] lives.
#[derive(Debug)]
pub struct ContentHold {
    pub(crate) bytes: u64,
    pub(crate) held: Arc<AtomicU64>,
}

impl Drop for ContentHold {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Counters about the dashboard itself (`/stats` `dashboard_*`).
#[derive(Debug, Default)]
pub struct Counts {
    /// Events written.
    pub captured: AtomicU64,
    /// Events dropped because the writer's queue was full.
    pub dropped: AtomicU64,
    /// Bytes of request bodies held for content capture now.
    pub content_held: Arc<AtomicU64>,
    /// Events lost to a failed write.
    pub write_errors: AtomicU64,
    /// Rows deleted by retention (age or size).
    pub evicted_rows: AtomicU64,
    /// Live subscribers evicted for not reading.
    pub subscribers_evicted: AtomicU64,
}

/// The current time in epoch milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
