//! Offline replay of recorded sessions, turn by turn, with a prompt-cache cost model.
//!
//! A session is a list of request bodies, one per turn. Each goes through the same session
//! state, freeze and cold-cache machinery the proxy uses ([`crate::turn::TurnService`]), on a simulated
//! clock. Both arms, the bodies as recorded (baseline) and as sluice would forward them, are
//! billed by one model:
//!
//! - A turn's **cached prefix** is the run of leading messages byte-identical (as normalized) to
//!   the previous turn's forwarded messages, when the gap is within the cache TTL the request
//!   asks for; a later gap means nothing is cached.
//! - Agents that use prompt caching mark the end of every request, so the prefix is billed as
//!   **cache reads** and the rest as **cache writes**. Prices are relative by default (fresh 1.0,
//!   read 0.1, write 1.25).
//! - A **flip** is a message inside the previous turn's forwarded prefix that sluice forwards
//!   differently on a warm turn whose incoming prefix did not change: a cache write sluice
//!   caused. Cold turns, `cache.amortize` re-writes and outputs restored in place are decisions, not flips.
//!
//! **Reference recall** checks fidelity: for each answer (the assistant message that followed a
//! turn), the identifiers it mentions that appeared in earlier tool outputs (paths, symbols,
//! error names, numbers of three or more digits), and how many the compacted request still
//! showed (**visible recall**), or showed behind a marker one expand away (**recall**).
//!
//! **The way back is billed.** An identifier one expand away is not free: the model has to call
//! `context_guru_expand`, and the expand loop makes one more upstream call. A turn whose answer
//! used an identifier sluice had hidden is charged one **expand round**: the whole forwarded
//! prompt read again (at the cache-read price: the turn's own call has just cached it) and the
//! restored originals written after it, with the model's call, at the cache-write price.
//!
//! **The headline is the bill's change**: billed input saved, net, both arms on the cost model
//! above with the expand rounds billed, savings positive like every figure. Each turn also adds
//! what the proxy would add to `/stats` for it ([`TurnRecord::saving`]): its pipeline report's
//! content tokens, the expand tool's declaration, and its round's restored originals and
//! re-read prompt. So content tokens saved, net (`engine::savings`), means the same thing here
//! as live, and on the same traffic reads the same; it is reported beside the headline. It
//! counts tokens, not their price, and the bill needs the baseline's cache use, which only a
//! replay has.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use actors::sessions::{SessionLimits, Sessions};
use bytes::Bytes;
use engine::clock::{Clock, ManualClock};
use engine::config::Config;
use engine::message::{Message, Role};
use engine::pipeline::Pipeline;
use engine::savings::{BilledSaving, NetSaving};
use engine::store::{MemoryStore, Store};
use engine::wire::{self, Dialect, ParsedBody, WireError};
use serde::Serialize;

use http::HeaderMap;

use crate::session::StorePersist;
use crate::tracker;
use crate::turn::{Forward, SESSION_HEADER, Turn, TurnInput, TurnService};

/// Relative prices of one input token by how it is billed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prices {
    pub fresh: f64,
    pub read: f64,
    pub write: f64,
}

impl Default for Prices {
    fn default() -> Prices {
        Prices {
            fresh: 1.0,
            read: 0.1,
            write: 1.25,
        }
    }
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct Options {
    /// Simulated time between turns, for a recording that does not say when each was sent.
    pub gap: Duration,
    /// When each turn was sent, from the session's first (a Claude Code transcript records
    /// it): turn k runs at its recorded time, so the cache's lifetime and the cold-cache
    /// predictor see the gaps the user had. Empty, or shorter than the turns: `gap` for the
    /// rest.
    pub times: Vec<Duration>,
    pub prices: Prices,
    /// Let the tracker read cold turns (false: every turn is treated as warm, i.e. cold_cache
    /// off for every component).
    pub cold_detection: bool,
    /// Keep each turn's forwarded body in [`SessionReport::bodies`] (the parity test compares
    /// them with what the proxy forwards).
    pub keep_bodies: bool,
    /// Tell the session about each billed expand round, as the proxy's expand loop does when
    /// the model expands (true). The parity test turns it off: its mock model never expands,
    /// so the proxy's sessions never hear of a round.
    pub learn_from_rounds: bool,
    /// Settle each turn's reply as the proxy does when the provider reports its cache use
    /// (`TurnService::settle`), with what the cost model billed: the tracker checks its cold
    /// prediction and the cost guard judges the session (true). The parity test keeps it on,
    /// with a mock provider that bills as the cost model does (`billed_usage`).
    pub settle_replies: bool,
    /// Tokens of an agent preamble the recorded bodies lack (Claude Code's system prompt and
    /// tools, about 18,000 tokens in 2.1), added to every turn as a stand-in `tools` entry of
    /// that size; 0 adds none. `sluice replay` takes it from the corpus's `replay.json`.
    pub preamble_tokens: usize,
    /// Per turn, the preamble's size read from the recording itself (a Claude Code transcript's
    /// usage, `claude_code::preamble`), in place of `preamble_tokens`; shorter than the turns
    /// (empty, say): `preamble_tokens` for the rest.
    pub preambles: Vec<usize>,
    /// How the model expands a marker whose original holds what its answer needs: the whole
    /// original, or (the expand tool's `pattern`) the lines holding each identifier it needs.
    pub expand: ExpandAsk,
    /// Bill the keep-alive's pings on the session's clock (`cache.keepalive`; `keepalive.rs`).
    pub keepalive: Option<engine::config::KeepAlive>,
}

impl Options {
    /// The preamble billed on turn `k`: the recording's own for that turn, else the stand-in.
    pub fn preamble_at(&self, k: usize) -> usize {
        self.preambles
            .get(k)
            .copied()
            .unwrap_or(self.preamble_tokens)
    }
}

/// How replay's model asks for a hidden original.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpandAsk {
    /// `{"id"}`: the whole original comes back.
    Whole,
    /// `{"id", "pattern"}`, once per identifier the answer needs: the matching lines with their
    /// context (`engine::way_back::excerpt`), which is what the round is billed for. The model
    /// knows what it looks for (the identifier its answer then uses); where the marker's own
    /// lines do not say enough to name it, a real model asks for more than this.
    #[default]
    Pattern,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            gap: Duration::from_secs(30),
            times: Vec::new(),
            prices: Prices::default(),
            cold_detection: true,
            keep_bodies: false,
            learn_from_rounds: true,
            settle_replies: true,
            preamble_tokens: 0,
            preambles: Vec::new(),
            expand: ExpandAsk::default(),
            keepalive: None,
        }
    }
}

/// One arm's bill for one turn, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bill {
    pub content_tokens: usize,
    pub cache_read: usize,
    pub cache_write: usize,
    pub fresh: usize,
}

impl Bill {
    pub fn cost(&self, p: &Prices) -> f64 {
        self.cache_read as f64 * p.read
            + self.cache_write as f64 * p.write
            + self.fresh as f64 * p.fresh
    }

    fn add(&mut self, other: &Bill) {
        self.content_tokens += other.content_tokens;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.fresh += other.fresh;
    }
}

/// Identifiers an answer used, and where the compacted request had them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Recall {
    pub referenced: usize,
    pub visible: usize,
    pub behind_marker: usize,
}

impl Recall {
    /// Share visible or one expand away (1.0 when nothing was referenced).
    pub fn share(&self) -> f64 {
        if self.referenced == 0 {
            1.0
        } else {
            (self.visible + self.behind_marker) as f64 / self.referenced as f64
        }
    }

    /// Share visible in the forwarded body itself (1.0 when nothing was referenced).
    pub fn visible_share(&self) -> f64 {
        if self.referenced == 0 {
            1.0
        } else {
            self.visible as f64 / self.referenced as f64
        }
    }

    fn add(&mut self, other: &Recall) {
        self.referenced += other.referenced;
        self.visible += other.visible;
        self.behind_marker += other.behind_marker;
    }
}

/// One turn of one session.
#[derive(Debug, Clone, Serialize)]
pub struct TurnRecord {
    pub baseline: Bill,
    pub sluice: Bill,
    /// The expand round this turn needed (all zero when it needed none): the prompt re-read,
    /// the originals and the call written.
    pub expand: Bill,
    /// 1 when the answer used an identifier only a marker's original had.
    pub expand_rounds: usize,
    /// 1 when that round expanded only markers an earlier round of the session had expanded:
    /// the model asking again for an original it saw once, which the agent never did.
    pub expand_repeats: usize,
    pub cold: bool,
    pub amortized: bool,
    pub flipped_messages: usize,
    pub recall: Recall,
    /// What the proxy's `/stats` would add to the net saving for this turn: the run's content
    /// tokens and declaration (none for a turn the pipeline did not run, which `/stats` leaves
    /// out too), and its expand round's restored originals and re-read prompt.
    pub saving: NetSaving,
    /// What the proxy's `/stats` would add to the billed saving for this turn: what the
    /// session's cost guard settled from the cost model's report for it, and its round's cost.
    pub billed: BilledSaving,
}

/// What one component did over a session (or all of them).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ComponentTally {
    pub acted: usize,
    pub saved_tokens: usize,
    pub saved_tokens_unique: usize,
    pub gates: BTreeMap<String, u64>,
}

/// One session's replay.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionReport {
    pub name: String,
    /// The dialect it was replayed in (`Dialect::as_str`).
    pub dialect: String,
    pub turns: Vec<TurnRecord>,
    pub components: BTreeMap<String, ComponentTally>,
    /// The largest single savings: (turn, message index, tokens saved, component).
    pub largest: Vec<(usize, usize, usize, String)>,
    pub frozen_flips: u64,
    /// What the keep-alive's pings cost and spared, with [`Options::keepalive`].
    pub keepalive: Option<crate::keepalive::Ledger>,
    /// Where compaction pays in the latest turn: the first and last message index it changed,
    /// and the tokens saved between them (the triage spec's suggested compression range).
    pub suggested_range: Option<(usize, usize, usize)>,
    /// Each turn's forwarded body, with [`Options::keep_bodies`].
    #[serde(skip)]
    pub bodies: Vec<Bytes>,
}

impl SessionReport {
    /// A session of no turns yet.
    fn empty(name: &str, dialect: Dialect) -> SessionReport {
        SessionReport {
            name: name.to_owned(),
            dialect: dialect.as_str().to_owned(),
            ..SessionReport::default()
        }
    }
}

/// Why a recorded session could not be cut into turns or replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The recorded body is not JSON.
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    /// The recorded body has no `messages` array.
    #[error("no `messages` array")]
    NoMessages,
    /// A turn that does not serialize again.
    #[error("{0}")]
    Serialize(serde_json::Error),
    /// The runtime the session actors run on could not start.
    #[error("replay runtime: {0}")]
    Runtime(std::io::Error),
    /// The session's longest body does not parse in its dialect.
    #[error("{session}: {error}")]
    Unparsed { session: String, error: WireError },
    /// A turn's body does not parse in its dialect.
    #[error("{session} turn {turn}: {error}")]
    TurnUnparsed {
        session: String,
        turn: usize,
        error: WireError,
    },
}

/// Turn k of a recorded final request: the messages before its k-th assistant message, then the
/// whole request. Re-serialized, so every turn has the same layout.
///
/// # Errors
/// When the body is not a JSON object with a `messages` array.
pub fn turns_of(body: &[u8]) -> Result<Vec<Vec<u8>>, ReplayError> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(ReplayError::NotJson)?;
    let messages = value["messages"]
        .as_array()
        .ok_or(ReplayError::NoMessages)?;
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if m["role"] == "assistant" && i > 0 {
            let mut turn = value.clone();
            turn["messages"] = serde_json::Value::Array(messages[..i].to_vec());
            out.push(serde_json::to_vec(&turn).map_err(ReplayError::Serialize)?);
        }
    }
    out.push(serde_json::to_vec(&value).map_err(ReplayError::Serialize)?);
    Ok(out)
}

/// `body` with a stand-in for the agent preamble the recording lacks: one more entry in `tools`
/// (made when there is none) whose description holds about `tokens` tokens, the same bytes on
/// every turn. `body` as it is for 0 tokens or a body that is not a JSON object.
pub fn with_preamble(body: &[u8], tokens: usize) -> Vec<u8> {
    if tokens == 0 {
        return body.to_vec();
    }
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return body.to_vec();
    };
    let Some(object) = value.as_object_mut() else {
        return body.to_vec();
    };
    let tool = serde_json::json!({
        "name": "agent_preamble_stand_in",
        "description": preamble_text(tokens),
        "input_schema": {"type": "object", "properties": {}},
    });
    match object
        .get_mut("tools")
        .and_then(serde_json::Value::as_array_mut)
    {
        Some(tools) => tools.push(tool),
        None => {
            object.insert("tools".into(), serde_json::Value::Array(vec![tool]));
        }
    }
    serde_json::to_vec(&value).unwrap_or_else(|_| body.to_vec())
}

/// Instruction-like prose of about `tokens` tokens (o200k), the same for the same count.
fn preamble_text(tokens: usize) -> String {
    const SENTENCE: &str = "Use the Bash tool to run commands in the working directory, read a file before editing it, and keep answers short. ";
    // Counted as it is repeated: sentences run into each other across their joins.
    static PER_HUNDRED: OnceLock<usize> = OnceLock::new();
    let per_hundred =
        *PER_HUNDRED.get_or_init(|| engine::tokens::count(&SENTENCE.repeat(100)).max(1));
    SENTENCE.repeat(tokens.saturating_mul(100).div_ceil(per_hundred))
}

/// The headers every replayed turn of session `name` carries: the proxy given the same headers
/// forwards the same bodies.
pub fn session_headers(name: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Ok(value) = http::HeaderValue::from_str(name) {
        headers.insert(SESSION_HEADER, value);
    }
    headers
}

/// Replays one session (its turns' bodies, in order) through the proxy's own [`TurnService`],
/// on a simulated clock and a store of its own.
///
/// Must not be called from inside a tokio runtime: it runs the session actors on one of its own.
///
/// # Errors
/// A turn whose body does not parse in `dialect`.
pub fn replay_session(
    name: &str,
    turns: &[Vec<u8>],
    dialect: Dialect,
    config: &Config,
    pipeline: Arc<Pipeline>,
    options: &Options,
) -> Result<SessionReport, ReplayError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReplayError::Runtime)?;
    runtime.block_on(replay_on(name, turns, dialect, config, pipeline, options))
}

async fn replay_on(
    name: &str,
    turns: &[Vec<u8>],
    dialect: Dialect,
    config: &Config,
    pipeline: Arc<Pipeline>,
    options: &Options,
) -> Result<SessionReport, ReplayError> {
    let (service, store, clock) = replay_service(config, pipeline, options);
    let headers = session_headers(name);
    let mut report = SessionReport::empty(name, dialect);
    let mut unique: BTreeSet<(&'static str, u64)> = BTreeSet::new();
    let Some((full, requests)) = requests_of(name, turns, dialect)? else {
        return Ok(report);
    };
    let full_messages = full.messages();
    let (mut prev_in, mut prev_out): (Option<Billable>, Option<Billable>) = (None, None);
    // Markers this session's rounds expanded, to tell a repeat from a first look.
    let mut expanded: BTreeSet<String> = BTreeSet::new();
    let mut prev_body: Option<Bytes> = None;
    let mut last_at: Option<Duration> = None;
    let mut pinger = options
        .keepalive
        .map(|rule| keepalive::Pinger::new(rule, dialect));
    for (k, body) in requests.iter().enumerate() {
        clock.advance(step(options, k));
        let body = &with_preamble(body, options.preamble_at(k));
        let parsed = parse_turn(name, k, body, dialect)?;
        let now = clock.now();
        let ttl = tracker::asked_ttl(&parsed);
        let gap = keepalive::quiet(&mut pinger, &service, last_at, now).await;
        let (applied, ran) = forward_turn(&service, &parsed, &headers).await;
        let facts = applied.facts;
        let incoming = parsed.messages();
        let warm = last_at.is_some_and(|t| now.saturating_sub(t) <= ttl);
        last_at = Some(now);
        let sent = Billable::of(body, incoming.to_vec());
        let forwarded = Billable::of(&applied.body, applied.messages.to_vec(incoming));
        keepalive::turned(&mut pinger, gap, k, &applied, &forwarded, prev_out.as_ref());
        let baseline = bill(&sent, prev_in.as_ref(), warm);
        let sluice = bill(&forwarded, prev_out.as_ref(), warm);
        let flipped = match (&prev_in, &prev_out) {
            (Some(prev_in), Some(prev_out)) if may_flip(warm || gap.kept, &facts) => flips(
                &prev_in.messages,
                incoming,
                &prev_out.messages,
                &forwarded.messages,
            ),
            _ => 0,
        };
        // The provider reports a kept gap's prefix as read, as it would live.
        let previous = prev_body.as_deref().filter(|_| warm || gap.kept);
        let mut billed = settle_reply(&service, &applied, previous, dialect, options).await;
        let answer = answer_after(full_messages, incoming.len());
        let (recall, round) = answer.map_or_else(
            || (Recall::default(), None),
            |a| {
                let (store, session) = (store.as_ref(), applied.session.as_str());
                recall(&a, incoming, &forwarded, store, session, options.expand)
            },
        );
        let repeat = match &round {
            Some(round) => {
                let (repeat, cost) =
                    round_taken(&service, &applied.session, round, &mut expanded, options).await;
                billed.add(&cost);
                repeat
            }
            None => false,
        };
        tally(&mut report, &mut unique, k, &applied.report);
        let frozen = applied.report.frozen();
        report.frozen_flips += frozen.dropped.saturating_sub(frozen.repaired);
        report.turns.push(TurnRecord {
            // Before `expand` takes the round.
            saving: turn_saving(&applied, ran, round.as_ref()),
            billed,
            baseline,
            sluice,
            expand_rounds: usize::from(round.is_some()),
            expand_repeats: usize::from(repeat),
            expand: round.map(|r| r.bill).unwrap_or_default(),
            cold: facts.cold,
            amortized: facts.amortized,
            flipped_messages: flipped,
            recall,
        });
        prev_in = Some(sent);
        prev_out = Some(forwarded);
        prev_body = Some(applied.body.clone());
        if options.keep_bodies {
            report.bodies.push(applied.body);
        }
    }
    keep_largest(&mut report.largest);
    report.keepalive = pinger.map(|p| p.ledger);
    Ok(report)
}

/// The reply half: the provider reports what the cost model bills (a turn past the cache's
/// lifetime reads nothing back, `previous` is then `None`), and the session's cost guard
/// settles the turn with it. Returns what the turn put on the guard's ledger.
async fn settle_reply(
    service: &TurnService,
    applied: &Forward,
    previous: Option<&[u8]>,
    dialect: Dialect,
    options: &Options,
) -> BilledSaving {
    if !options.settle_replies {
        return BilledSaving::default();
    }
    let Some(usage) = billed_usage(&applied.body, previous, dialect) else {
        return BilledSaving::default();
    };
    let settled = service
        .settle(&applied.session, usage, applied.facts.ledger_turn)
        .await;
    settled.billed
}

/// How far the clock moves before turn `k`: to its recorded time when there is one (the
/// first turn, like every unrecorded one, one `gap` after the last), else one `gap`.
fn step(options: &Options, k: usize) -> Duration {
    match (
        k.checked_sub(1).and_then(|j| options.times.get(j)),
        options.times.get(k),
    ) {
        (Some(before), Some(at)) => at.saturating_sub(*before),
        _ => options.gap,
    }
}

/// The longest body of a session, parsed, and the requests to replay.
type Requests<'a> = (ParsedBody<'a>, &'a [Vec<u8>]);

/// The session's requests, and the longest body, which holds every answer: when it ends with
/// one it is a record, not a request. `None` for a session of no turns.
fn requests_of<'a>(
    name: &str,
    turns: &'a [Vec<u8>],
    dialect: Dialect,
) -> Result<Option<Requests<'a>>, ReplayError> {
    let Some(last) = turns.last() else {
        return Ok(None);
    };
    let full = wire::parse(last, dialect).map_err(|error| ReplayError::Unparsed {
        session: name.to_owned(),
        error,
    })?;
    let record = full
        .messages()
        .last()
        .is_some_and(|m| m.role == Role::Assistant);
    let requests = if record {
        &turns[..turns.len() - 1]
    } else {
        turns
    };
    Ok(Some((full, requests)))
}

/// What the proxy would add to the net saving for this turn, its upstream having completed it
/// (a replay's always does): the run's counts and declaration when the pipeline ran, and the
/// round its answer needed, counted as the proxy's expand loop counts one (the restored
/// originals, and the forwarded prompt's content tokens re-read).
fn turn_saving(applied: &Forward, ran: bool, round: Option<&Round>) -> NetSaving {
    let mut saving = if ran {
        applied.saving()
    } else {
        NetSaving::default()
    };
    if let Some(round) = round {
        saving.restored_tokens = round.restored as u64;
        saving.reread_tokens = applied.report.tokens_after as u64;
    }
    saving
}

/// One turn through the proxy's turn service, and whether the pipeline ran on it; a bypassed
/// body (the agent compacting itself) is forwarded as it came.
fn parse_turn<'b>(
    name: &str,
    k: usize,
    body: &'b [u8],
    dialect: Dialect,
) -> Result<ParsedBody<'b>, ReplayError> {
    wire::parse(body, dialect).map_err(|error| ReplayError::TurnUnparsed {
        session: name.to_owned(),
        turn: k,
        error,
    })
}

/// Whether a change inside the cached prefix on this turn would be a flip: the prefix was
/// cached (`cached`: within its lifetime, or kept by the keep-alive's pings), and the change is
/// not a decision (a cold turn's, an amortized re-write, an output restored in place).
fn may_flip(cached: bool, facts: &tracker::TurnFacts) -> bool {
    cached && !facts.cold && !facts.amortized && facts.restored == 0
}

async fn forward_turn(
    service: &TurnService,
    parsed: &ParsedBody<'_>,
    headers: &http::HeaderMap,
) -> (Forward, bool) {
    let bytes = Bytes::copy_from_slice(parsed.text().as_bytes());
    let input = TurnInput {
        dialect: parsed.dialect(),
        body: &bytes,
        headers,
        models: None,
        defer_counts: false,
    };
    match service.run(input).await {
        Turn::Forward(forward) => (*forward, true),
        Turn::Untouched { session, facts, .. } => {
            let forward = Forward::untouched(
                bytes.clone(),
                parsed,
                session.unwrap_or_default(),
                facts.unwrap_or_default(),
            );
            (forward, false)
        }
    }
}

/// An expand round the turn's answer needed: the session learns from it (when the options say
/// so, and only then does the round reach the billed saving), and it is a repeat when every
/// marker it opens was opened before. Returns that, and what the round added to the billed
/// saving.
async fn round_taken(
    service: &TurnService,
    session: &str,
    round: &Round,
    expanded: &mut BTreeSet<String>,
    options: &Options,
) -> (bool, BilledSaving) {
    let mut billed = BilledSaving::default();
    if options.learn_from_rounds {
        let ids: Vec<&str> = round.markers.iter().map(String::as_str).collect();
        let (prompt, restored) = (round.bill.cache_read as u64, round.bill.cache_write as u64);
        billed = service
            .expand_round(session, &ids, prompt, restored)
            .await
            .billed;
    }
    let repeat = round.markers.iter().all(|m| expanded.contains(m));
    expanded.extend(round.markers.iter().cloned());
    (repeat, billed)
}

/// The proxy's turn service on a simulated clock and a store of its own.
fn replay_service(
    config: &Config,
    pipeline: Arc<Pipeline>,
    options: &Options,
) -> (TurnService, Arc<dyn Store>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(config.store.limits(), clock.clone()));
    let sessions = Sessions::new(
        SessionLimits::DEFAULT,
        Arc::new(StorePersist::new(store.clone())),
        tokio::runtime::Handle::current(),
    );
    let service = TurnService::new(pipeline, store.clone(), clock.clone())
        .with_sessions(sessions, config.cache.amortize)
        .never_cold(!options.cold_detection);
    (service, store, clock)
}

/// Messages sluice forwarded differently on a turn where the agent only appended: each is a
/// cache write sluice caused (the caller checks the turn was warm and not a decision).
fn flips(
    prev_in: &[Message],
    incoming: &[Message],
    prev_out: &[Message],
    out: &[Message],
) -> usize {
    let appended = prev_in.len() <= incoming.len() && prev_in[..] == incoming[..prev_in.len()];
    if !appended {
        return 0;
    }
    prev_out.iter().zip(out).filter(|(a, b)| a != b).count()
}

/// Adds one turn's component reports to the session's tallies.
fn tally(
    report: &mut SessionReport,
    unique: &mut BTreeSet<(&'static str, u64)>,
    turn: usize,
    run: &engine::pipeline::RunReport,
) {
    for c in &run.components {
        let tally = report.components.entry(c.name.to_owned()).or_default();
        tally.acted += usize::from(c.acted);
        tally.saved_tokens += c.saved_tokens;
        for s in c.savings.iter().filter(|s| s.saved_tokens > 0) {
            if unique.insert((c.name, s.content_key)) {
                tally.saved_tokens_unique += s.saved_tokens;
            }
            report
                .largest
                .push((turn, s.index, s.saved_tokens, c.name.to_owned()));
        }
        for (gate, n) in &c.gates {
            *tally.gates.entry((*gate).to_owned()).or_default() += u64::from(*n);
        }
    }
    let savings = run
        .components
        .iter()
        .flat_map(|c| &c.savings)
        .filter(|s| s.saved_tokens > 0);
    report.suggested_range = savings.fold(None, |range, s| {
        let (lo, hi, n) = range.unwrap_or((s.index, s.index, 0));
        Some((lo.min(s.index), hi.max(s.index), n + s.saved_tokens))
    });
}

/// The ten largest items, deduplicated by message across turns (the same saving recurs).
fn keep_largest(largest: &mut Vec<(usize, usize, usize, String)>) {
    largest.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut seen = BTreeSet::new();
    largest.retain(|(_, index, _, component)| seen.insert((*index, component.clone())));
    largest.truncate(10);
}

pub mod agent_log;
mod bill;
pub mod claude_code;
pub mod codex;
pub mod convert;
pub mod gemini;
mod keepalive;
mod recall;
mod totals;

pub use bill::billed_usage;
use bill::{Billable, bill};
use recall::{Round, answer_after, recall};
pub use totals::{Loss, LossSummary, Totals, recording, session_billed, session_net, totals};
#[cfg(test)]
mod tests;
