//! One turn, one path: what happens to a request body between the moment a host has read it and
//! the moment it goes upstream.
//!
//! Every host calls this: sync mode forwards what it returns, observe mode runs it off the
//! request path on its shadow store, `POST /compact` and `sluice compact` return it, and
//! `sluice replay` runs it turn after turn on a simulated clock. So what replay computes is what
//! the proxy forwards, byte for byte.
//!
//! A turn, in order:
//! 1. `x-context-guru-bypass: true`, an unparseable body, or an agent asking to summarize its own
//!    transcript leave untouched (a bypassed turn is still recorded by the tracker: the provider
//!    cached it).
//! 2. The session key: the sanitized session header, else the body's metadata, else a hash of
//!    its opening.
//! 3. Whether the model could call the expand tool on this request ([`way_back::reach`]); when it
//!    could not, only lossless components run.
//! 4. Under the session's lease: the tracker's boundary and coldness, then the pipeline.
//! 5. When an LLM component started a model job, a wait up to its deadline and one re-run.
//! 6. The hand-off of the turn's new tool outputs to the preparer.
//! 7. The way back: a body carrying a marker declares the expand tool, and so does every turn of
//!    an agent a lossy pipeline may cut, from its first (so `tools` never changes within a
//!    session); if it cannot, the turn is run again without lossy offloads.
//!
//! HTTP, streaming and the expand loop stay in the proxy.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::stats::Stats;
use actors::pool::WorkerPool;
use actors::sessions::{Lease, Sessions};
use async_trait::async_trait;
use bytes::Bytes;
use engine::apply::{Discarded, apply_parsed};
use engine::clock::Clock;
use engine::config::{AmortizeConfig, ExperimentConfig};
use engine::message::{Forwarded, Message};
use engine::model::Models;
use engine::pipeline::{Pipeline, RunCx, RunReport};
use engine::store::Store;
use engine::way_back::{self, Withheld};
use engine::wire::{self, Dialect, ParsedBody};
use http::HeaderMap;
pub use store::Flush;
use store::{DurableStore, Opened, Unavailable};

use crate::parses::ParseMemo;
use crate::run::{begin_turn, learned, rerun, run_turn};
use crate::session::{SessionState, StorePersist, load_state, save_state};
use crate::tracker::{CacheUsage, TurnFacts};

mod admit;
mod declaration;
mod reply;

pub use admit::{Untouched, caller_scope, is_agent_compaction, unparsed_label};
use admit::{admit, bypass_reason};
use declaration::{Placed, declares_from_the_start};
pub use reply::{ExpandOutcome, Settlement, settle_state};

/// The session header; wins over the derived key once sanitized.
pub const SESSION_HEADER: &str = "x-context-guru-session";

/// `x-context-guru-bypass: true` forwards the request byte-identically (still counted).
pub const BYPASS_HEADER: &str = "x-context-guru-bypass";

/// What keys the credential scope when the deployment sets no secret of its own.
pub const DEFAULT_SCOPE_SECRET: &[u8] = b"sluice-credential-scope-v1";

/// A request's view of the host's cheap-model service.
///
/// `engine::model::Models` is what components ask; this adds what the turn needs around the
/// pipeline: whether anything is pending, and a wait bounded by the jobs' deadlines.
#[async_trait]
pub trait TurnModels: Models {
    /// Jobs this request is waiting on.
    fn pending(&self) -> usize;

    /// Waits for the pending jobs up to their deadline; returns how many finished in time.
    async fn wait(&self) -> usize;
}

/// Where a turn gets its model view, once its body is parsed (the model a request names, its
/// upstream and credentials come from the request).
pub trait TurnModelsSource: Send + Sync {
    fn for_turn(&self, parsed: &ParsedBody<'_>) -> Arc<dyn TurnModels>;
}

/// One request, as the turn needs it.
pub struct TurnInput<'a> {
    pub dialect: Dialect,
    pub body: &'a Bytes,
    pub headers: &'a HeaderMap,
    /// The host's model service; `None` offline.
    pub models: Option<&'a dyn TurnModelsSource>,
    /// The host sends the request before it reads the report's totals, and settles them then
    /// ([`Forward::count_deferred`]): counts no decision reads are taken off the request path.
    /// False: the turn's report is complete when it returns.
    pub defer_counts: bool,
}

/// What a turn came to.
#[derive(Debug)]
pub enum Turn {
    /// The body to forward, rewritten or not.
    Forward(Box<Forward>),
    /// Forward the request's own bytes.
    Untouched {
        reason: Untouched,
        /// Known when the body parsed.
        session: Option<String>,
        /// The tracker's facts for a bypassed live turn.
        facts: Option<TurnFacts>,
    },
}

/// A turn that ran the pipeline.
#[derive(Debug)]
pub struct Forward {
    /// The body to send upstream (the request's own bytes when nothing changed).
    pub body: Bytes,
    pub session: String,
    /// The expand tool is declared, so the response may call it.
    pub expandable: bool,
    /// Tokens of the expand tool's declaration sluice added (0: none), which the net saving
    /// charges ([`Forward::saving`]).
    pub declared_tokens: usize,
    /// The body asks for a streamed response.
    pub stream: bool,
    /// The body's `model`, when it names one.
    pub model: Option<String>,
    /// The normalized messages as forwarded: what differs from the parsed ones.
    pub messages: Forwarded,
    pub facts: TurnFacts,
    pub report: RunReport,
    pub discarded: Vec<Discarded>,
    /// Why lossy offloads were withheld on this turn, if they were.
    pub withheld: Option<Withheld>,
    /// Wire entries kept as they came because sluice could not read them.
    pub opaque: usize,
    /// Time the turn took on the service's clock.
    pub added: Duration,
    /// The state store's acknowledgement of this turn's writes: a host awaits it before it
    /// relays the reply, so the next turn (on any replica) finds them.
    pub flushed: Flush,
}

impl Forward {
    /// Completes the report's totals when the turn deferred counts ([`TurnInput::defer_counts`]):
    /// a host calls it once the request is on its way, before it reads them.
    pub fn count_deferred(&mut self) {
        self.report.count_deferred();
    }

    /// [`Turn::record`] of a forwarded turn, for a host that holds the `Forward` alone (one
    /// that settles its counts after the send).
    pub fn record(&self, stats: &Stats) {
        let facts = &self.facts;
        stats.record_turn(facts);
        stats.record_retries(facts.retries.into());
        stats.record_run(&self.report, &self.discarded, self.added);
        if let Some(reason) = self.withheld {
            stats.record_way_back_withheld(reason.label());
        }
        stats.record_opaque(self.opaque as u64);
    }

    /// A turn forwarded as it came (a bypass), in the shape of a rewritten one.
    pub fn untouched(
        body: Bytes,
        parsed: &ParsedBody<'_>,
        session: String,
        facts: TurnFacts,
    ) -> Forward {
        let tokens = parsed
            .messages()
            .iter()
            .map(engine::pipeline::message_tokens)
            .sum();
        Forward {
            body,
            session,
            expandable: false,
            declared_tokens: 0,
            stream: is_stream(parsed),
            model: model_of(parsed),
            messages: Forwarded::unchanged(parsed.messages().len()),
            facts,
            report: RunReport {
                tokens_before: tokens,
                tokens_after: tokens,
                ..RunReport::default()
            },
            discarded: Vec::new(),
            withheld: None,
            opaque: parsed.opaque_entries().len(),
            added: Duration::ZERO,
            flushed: Flush::done(),
        }
    }
}

fn model_of(parsed: &ParsedBody<'_>) -> Option<String> {
    serde_json::from_str(parsed.field("model")?.of(parsed.text())).ok()
}

fn is_stream(parsed: &ParsedBody<'_>) -> bool {
    parsed
        .field("stream")
        .is_some_and(|s| s.of(parsed.text()) == "true")
}

impl Turn {
    /// The session key, when the body parsed.
    pub fn session(&self) -> Option<&str> {
        match self {
            Turn::Forward(f) => Some(&f.session),
            Turn::Untouched { session, .. } => session.as_deref(),
        }
    }

    /// Feeds `/stats`: every turn is counted exactly once, here.
    pub fn record(&self, stats: &Stats) {
        match self {
            Turn::Forward(f) => f.record(stats),
            Turn::Untouched { reason, facts, .. } => {
                if let Some(f) = facts {
                    stats.record_turn(f);
                }
                match reason {
                    // Not ours to judge: the upstream answers a body we cannot read.
                    Untouched::Unparsed(_) => stats.record_passthrough(true),
                    Untouched::Bypassed(why) => stats.record_bypass(why),
                    Untouched::Held(why) => stats.record_store_skip(why),
                    // Forwarded as it came on purpose; the shadow run measures it.
                    Untouched::Control => stats.record_passthrough(false),
                }
                stats.record_untouched(reason.label());
            }
        }
    }

    /// What observe mode projects: the run as sync would have forwarded it.
    pub fn record_projection(&self, stats: &Stats) {
        if let Turn::Forward(f) = self {
            stats.record_turn(&f.facts);
            stats.record_projection(&f.report, &f.discarded, f.added);
        }
    }
}

/// Runs `Pipeline::prepare` on each turn's new tool outputs while the upstream answers, so work
/// such as `skeleton`'s parse is memoized before a later turn needs it. One worker, a short
/// queue: when it is busy a turn's preparation is dropped, never waited for.
struct Preparer {
    pool: WorkerPool,
    jobs: AtomicU64,
}

/// The turn's machinery, shared by every request of a host.
pub struct TurnService {
    /// Swapped whole by a config reload (SIGHUP); each turn runs the one it read at its start.
    pipeline: parking_lot::RwLock<Arc<Pipeline>>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// The session actors; `None` for one-off rewrites, whose turns have no history.
    sessions: Option<Sessions<SessionState>>,
    amortize: AmortizeConfig,
    preparer: Option<Preparer>,
    /// Every turn reads warm (`sluice replay --no-cold`).
    never_cold: bool,
    /// Keys the credential scope of every session key.
    scope_secret: Vec<u8>,
    /// The A/B split (`experiment:`): a control session's turns go untouched, before any of
    /// its state is touched.
    experiment: Option<ExperimentConfig>,
    /// The durable store behind `store`, when state lives beyond this process: each live turn
    /// opens its session there first and closes it before forwarding.
    durable: Option<Arc<DurableStore>>,
    /// Which sessions were already told that sluice left (part of) their body alone.
    warned: crate::loud::WarnOnce,
    /// Each conversation's last parse, so a live turn reads only what is new in its body;
    /// `None` parses every body whole.
    parses: Option<ParseMemo>,
}

impl std::fmt::Debug for TurnService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnService")
            .field("pipeline", &self.pipeline().names())
            .field("never_cold", &self.never_cold)
            .finish_non_exhaustive()
    }
}

impl TurnService {
    /// A service for one-off rewrites; add sessions for live turns.
    pub fn new(
        pipeline: Arc<Pipeline>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> TurnService {
        TurnService {
            pipeline: parking_lot::RwLock::new(pipeline),
            store,
            clock,
            sessions: None,
            amortize: AmortizeConfig::default(),
            preparer: None,
            never_cold: false,
            scope_secret: DEFAULT_SCOPE_SECRET.to_vec(),
            durable: None,
            warned: crate::loud::WarnOnce::default(),
            parses: Some(ParseMemo::default()),
            experiment: None,
        }
    }

    /// Parses every live body whole (the parity test's reference; a host never needs it).
    #[must_use]
    pub fn without_parse_memo(mut self) -> TurnService {
        self.parses = None;
        self
    }

    /// The parse memo, for `/stats`-like reports of what it holds.
    pub fn parses(&self) -> Option<&ParseMemo> {
        self.parses.as_ref()
    }

    /// Live turns keep their state in `durable` (which must also be this service's `store`).
    #[must_use]
    pub fn with_durable(mut self, durable: Arc<DurableStore>) -> TurnService {
        self.durable = Some(durable);
        self
    }

    /// Live turns: each session's tracker lives in its actor, and `cache.amortize` applies.
    #[must_use]
    pub fn with_sessions(
        mut self,
        sessions: Sessions<SessionState>,
        amortize: AmortizeConfig,
    ) -> TurnService {
        self.sessions = Some(sessions);
        self.amortize = amortize;
        self
    }

    /// The durable store behind the live turns, when state lives beyond this process.
    pub fn durable(&self) -> Option<&Arc<DurableStore>> {
        self.durable.as_ref()
    }

    /// Live turns whose sessions persist to this service's own store, their actors on the
    /// current tokio runtime, with the default limits: one process and its memory store (the
    /// flip test, the turn's own tests).
    #[must_use]
    pub fn with_local_sessions(self, amortize: AmortizeConfig) -> TurnService {
        let sessions = Sessions::new(
            actors::sessions::SessionLimits::DEFAULT,
            Arc::new(StorePersist::new(self.store.clone())),
            tokio::runtime::Handle::current(),
        );
        self.with_sessions(sessions, amortize)
    }

    /// Prepare each turn's new outputs on a background worker (the proxy does; replay does not
    /// need to: preparing only fills memos, it never changes a decision).
    #[must_use]
    pub fn with_preparer(mut self) -> TurnService {
        self.preparer = Some(Preparer {
            pool: WorkerPool::new("sluice-prepare", 1, 32),
            jobs: AtomicU64::new(0),
        });
        self
    }

    #[must_use]
    pub fn never_cold(mut self, never_cold: bool) -> TurnService {
        self.never_cold = never_cold;
        self
    }

    /// A deployment's own secret for the credential scope (`SLUICE_SCOPE_SECRET`): replicas
    /// that share a store must share it.
    #[must_use]
    pub fn with_scope_secret(mut self, secret: &[u8]) -> TurnService {
        self.scope_secret = secret.to_vec();
        self
    }

    /// The experiment's arm of the session a request belongs to, as a live turn would find it
    /// (`None` without an experiment, or for a body that does not parse). For the routes beside
    /// the turn that must treat a control session as sluice were not there (`count_tokens`).
    pub fn arm(&self, input: &TurnInput<'_>) -> Option<engine::config::Arm> {
        let experiment = self.experiment.as_ref()?;
        let parsed = wire::parse(input.body, input.dialect).ok()?;
        let explicit = input
            .headers
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok());
        let key = engine::session::for_request(explicit, &parsed);
        experiment.arm(&format!("{}{key}", self.scope(input.headers)))
    }

    /// Live turns under an A/B experiment: control sessions are left untouched.
    #[must_use]
    pub fn with_experiment(mut self, experiment: ExperimentConfig) -> TurnService {
        self.experiment = experiment.enabled().then_some(experiment);
        self
    }

    /// The scope the caller's credential gives its sessions (the prefix of every session key
    /// this service makes for it).
    pub fn scope(&self, headers: &HeaderMap) -> String {
        caller_scope(headers, &self.scope_secret)
    }

    /// The pipeline turns run now.
    pub fn pipeline(&self) -> Arc<Pipeline> {
        self.pipeline.read().clone()
    }

    /// Runs every later turn through `pipeline` (a reloaded config). Turns already running keep
    /// the one they started with. A component still in the new pipeline replays its frozen
    /// decisions as before; one removed no longer does, so the messages it had cut go back to
    /// their originals once (one cache write), which is what removing it asks for.
    pub fn set_pipeline(&self, pipeline: Arc<Pipeline>) {
        *self.pipeline.write() = pipeline;
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn sessions(&self) -> Option<&Sessions<SessionState>> {
        self.sessions.as_ref()
    }

    /// The one builder of a run's facts.
    fn run_cx(
        &self,
        parsed: &ParsedBody<'_>,
        session: &str,
        models: Option<&Arc<dyn TurnModels>>,
        offloads: bool,
    ) -> RunCx {
        let models: Option<Arc<dyn Models>> = models.cloned().map(|m| m as Arc<dyn Models>);
        RunCx::new(
            parsed.dialect(),
            session,
            self.store.clone(),
            self.clock.clone(),
        )
        .with_models(models)
        .with_offloads(offloads)
    }

    async fn lease(&self, session: &str) -> Lease<SessionState> {
        let mut lease = match &self.sessions {
            Some(sessions) => sessions.lease(session).await,
            None => Lease::detached(SessionState::default()),
        };
        if self.never_cold {
            lease.tracker.set_never_cold(true);
        }
        lease
    }

    /// The turn of every request when nothing can change a body (`--preset off`): relayed
    /// without being read, so an empty pipeline costs what a plain hop does. A host that has it
    /// may send the body on as it read it, without making it one buffer first.
    pub fn untouched_by_pipeline(&self) -> Option<Turn> {
        Self::untouched_by(&self.pipeline())
    }

    /// The turn an empty `pipeline` makes: one read of the pipeline decides it and runs the
    /// turn, so a reload in between cannot split them.
    fn untouched_by(pipeline: &Pipeline) -> Option<Turn> {
        pipeline.is_empty().then_some(Turn::Untouched {
            reason: Untouched::Bypassed("empty_pipeline"),
            session: None,
            facts: None,
        })
    }

    /// A live turn: sync mode, observe's shadow run, replay.
    pub async fn run(&self, input: TurnInput<'_>) -> Turn {
        let pipeline = self.pipeline();
        if let Some(turn) = Self::untouched_by(&pipeline) {
            return turn;
        }
        let started = self.clock.now();
        let scope = self.scope(input.headers);
        let (parsed, ticket) = match &self.parses {
            Some(memo) => {
                // The session the caller named, known before the parse: one continuation each
                // for agents whose bodies open alike.
                let named = input
                    .headers
                    .get(SESSION_HEADER)
                    .and_then(|v| v.to_str().ok());
                let scope = named.map_or_else(|| scope.clone(), |id| format!("{scope}\0{id}"));
                memo.parse(&scope, input.body, input.dialect)
            }
            None => (
                wire::parse(input.body, input.dialect),
                crate::parses::Ticket::default(),
            ),
        };
        let admitted = admit(
            &input,
            parsed,
            &scope,
            &self.warned,
            self.experiment.as_ref(),
        );
        let (parsed, session) = match admitted {
            Ok(admitted) => admitted,
            Err(untouched) => return untouched,
        };
        self.warn_opaque(&parsed, &session);
        // Held for the rewrite only: a concurrent turn of this session waits here, not for the
        // upstream call. Taken before the durable store's session, so two turns of one session
        // in this process never load it at once.
        let mut lease = self.lease(&session).await;
        let opened = match self.open(&session).await {
            Ok(opened) => opened,
            Err(held) => return held,
        };
        if opened.as_ref().is_some_and(|o| o.reloaded) {
            // Another replica, or this process before a restart, ran the session's latest turn:
            // the store's state is newer than the actor's.
            *lease = load_state(&*self.store, &session);
            lease.tracker.set_never_cold(self.never_cold);
        }
        if let Some(reason) = bypass_reason(input.headers, &parsed) {
            // A bypassed turn still happened: the provider cached it, so the tracker records it.
            let facts = begin_turn(&mut lease, &parsed, self.clock.now());
            self.keep(&session, &lease);
            return Turn::Untouched {
                reason: Untouched::Bypassed(reason),
                session: Some(session),
                facts: Some(facts),
            };
        }
        let reach = way_back::reach(&parsed);
        let models = input.models.map(|source| source.for_turn(&parsed));
        let cx = self
            .run_cx(&parsed, &session, models.as_ref(), reach.is_ok())
            .with_deferred_counts(input.defer_counts);
        let (mut applied, facts) =
            run_turn(&mut lease, &parsed, &pipeline, cx.clone(), &self.amortize);
        // A re-run of this turn holds to what this turn learned (tools kept whole, a floor), too.
        let cx = learned(&lease, cx);
        self.keep(&session, &lease);
        drop(lease);
        if let Some(models) = models.as_ref().filter(|m| m.pending() > 0) {
            // A model job this turn started (or an earlier one still running): wait up to its
            // deadline, then run again so a result that made it lands now. One that did not is
            // used on the next turn; this request goes without it (fail-open).
            if models.wait().await > 0 {
                // Under the lease again: the re-run writes freezes and checkpoints, and only a
                // leased turn may run the pipeline for its session.
                let _lease = self.lease(&session).await;
                applied = rerun(&parsed, &pipeline, cx.clone(), &facts);
            }
        }
        self.prepare(&parsed, facts.mutable_from);
        let declare = declares_from_the_start(&parsed, &pipeline);
        let placed = match Placed::placed(&parsed, applied, reach, declare) {
            Ok(placed) => placed,
            Err(reason) => {
                let _lease = self.lease(&session).await;
                let lossless = rerun(&parsed, &pipeline, cx.with_offloads(false), &facts);
                Placed::lossless(&parsed, lossless, reason)
            }
        };
        let added = self.clock.now().saturating_sub(started);
        // Written behind: the forward does not wait for the store, the reply does.
        let flushed = opened.map_or_else(Flush::done, Opened::close);
        let turn = placed.forward(input.body, &parsed, session, facts, added, flushed);
        if let Some(memo) = &self.parses {
            memo.keep(ticket, parsed);
        }
        turn
    }

    /// The reply half of a turn: the provider's cache report for `session`'s request goes to
    /// its tracker (checking the cold prediction) and settles the cost guard's entry for
    /// `ledger_turn` (the turn that sent the request, when one ran the pipeline). The proxy
    /// calls it with what the provider reported, replay with what its cost model billed, so
    /// both back off on the same turn.
    pub async fn settle(
        &self,
        session: &str,
        usage: CacheUsage,
        ledger_turn: Option<crate::tracker::LedgerTurn>,
    ) -> Settlement {
        let Some(sessions) = &self.sessions else {
            return Settlement::default();
        };
        let mut state = sessions.lease(session).await;
        let settled = settle_state(&mut state, usage, ledger_turn);
        self.keep(session, &state);
        settled
    }

    /// An expand round the model of `session` asked for ([`SessionState::expand_round`]: what
    /// the session learns from it, and its cost). The proxy's expand loop and replay both call
    /// it.
    pub async fn expand_round(
        &self,
        session: &str,
        stash_ids: &[&str],
        prompt_tokens: u64,
        restored_tokens: u64,
    ) -> ExpandOutcome {
        let Some(sessions) = &self.sessions else {
            return ExpandOutcome::default();
        };
        let mut state = sessions.lease(session).await;
        // A marker expanded a second time makes its tool's later outputs lossless (`retries`).
        let repeats = stash_ids
            .iter()
            .filter(|id| crate::retries::note_expand(&mut state, id))
            .count();
        let (billed, backoff) = state.expand_round(stash_ids, prompt_tokens, restored_tokens);
        self.keep(session, &state);
        ExpandOutcome {
            repeats,
            backoff,
            billed,
        }
    }

    /// Says once per session that parts of its bodies are kept opaque, and where.
    fn warn_opaque(&self, parsed: &ParsedBody<'_>, session: &str) {
        let opaque = parsed.opaque_entries();
        if opaque.is_empty() || !self.warned.first(session, "opaque_entry") {
            return;
        }
        let key = parsed.dialect().transcript_key();
        let paths: Vec<String> = opaque
            .iter()
            .take(8)
            .map(|o| match o.index {
                Some(i) => format!("$.{key}[{i}]"),
                None => "$.system".to_owned(),
            })
            .collect();
        tracing::warn!(
            session = %crate::loud::log_id(session),
            dialect = parsed.dialect().as_str(),
            entries = opaque.len(),
            paths = %paths.join(","),
            "parts of this session's requests could not be read and go upstream as they came; the rest is compacted (counted in /stats as opaque_entries)"
        );
    }

    /// Opens the session in the durable store, if there is one; the turn to return when it
    /// cannot be (a turn whose decisions could not be recorded must not make any).
    async fn open(&self, session: &str) -> Result<Option<Opened>, Turn> {
        let Some(durable) = &self.durable else {
            return Ok(None);
        };
        durable
            .open(session)
            .await
            .map(Some)
            .map_err(|why: Unavailable| Turn::Untouched {
                reason: Untouched::Held(why.label()),
                session: Some(session.to_owned()),
                facts: None,
            })
    }

    /// Writes the session's state into a durable store at the end of each turn (a memory store
    /// gets it from the actor when the actor stops).
    fn keep(&self, session: &str, state: &SessionState) {
        if self.durable.is_some() {
            save_state(&*self.store, session, state);
        }
    }

    /// A one-off rewrite (`POST /compact`, `/v1/compress`, `sluice compact`): no tracker, any
    /// depth, and a session namespace of its own (`compact:<session>`), so its frozen decisions
    /// are never replayed into a live session's cached prefix. `pipeline` overrides the
    /// service's. With a durable store its session is opened there and its writes handed to it
    /// (`Forward::flushed`), so its markers expand on any replica and after a restart; the
    /// caller decides nothing.
    pub async fn compact(&self, input: &TurnInput<'_>, pipeline: Option<&Pipeline>) -> Turn {
        let (parsed, session) = match self.compact_admit(input) {
            Ok(admitted) => admitted,
            Err(untouched) => return untouched,
        };
        let opened = match self.open(&session).await {
            Ok(opened) => opened,
            Err(held) => return held,
        };
        let mut turn = self.compact_run(input, &parsed, session, pipeline, Flush::done());
        if let (Turn::Forward(forward), Some(opened)) = (&mut turn, opened) {
            forward.flushed = opened.close();
        }
        turn
    }

    /// The body and session of a one-off rewrite, or why it goes untouched.
    fn compact_admit<'b>(&self, input: &TurnInput<'b>) -> Result<(ParsedBody<'b>, String), Turn> {
        // A one-off rewrite is no conversation: parsed whole, and not kept.
        let (parsed, session) = admit(
            input,
            wire::parse(input.body, input.dialect),
            &format!("compact:{}", self.scope(input.headers)),
            &self.warned,
            // One-off rewrites (`POST /compact`) are the caller's explicit ask, in no arm.
            None,
        )?;
        if let Some(reason) = bypass_reason(input.headers, &parsed) {
            return Err(Turn::Untouched {
                reason: Untouched::Bypassed(reason),
                session: Some(session),
                facts: None,
            });
        }
        Ok((parsed, session))
    }

    fn compact_run(
        &self,
        input: &TurnInput<'_>,
        parsed: &ParsedBody<'_>,
        session: String,
        pipeline: Option<&Pipeline>,
        flushed: Flush,
    ) -> Turn {
        let started = self.clock.now();
        let current = self.pipeline();
        let pipeline = pipeline.unwrap_or(&current);
        let reach = way_back::reach(parsed);
        let cx = self.run_cx(parsed, &session, None, reach.is_ok());
        let applied = apply_parsed(parsed, pipeline, &cx);
        let declare = declares_from_the_start(parsed, pipeline);
        let placed = Placed::placed(parsed, applied, reach, declare).unwrap_or_else(|reason| {
            let lossless = apply_parsed(parsed, pipeline, &cx.with_offloads(false));
            Placed::lossless(parsed, lossless, reason)
        });
        // A one-off rewrite has no history: the facts of "no earlier turn, act anywhere".
        let added = self.clock.now().saturating_sub(started);
        placed.forward(
            input.body,
            parsed,
            session,
            TurnFacts::default(),
            added,
            flushed,
        )
    }

    /// Hands the tool outputs this turn added (from the cached-prefix boundary, and at least the
    /// last few messages on a turn whose boundary is unknown) to the preparer.
    fn prepare(&self, parsed: &ParsedBody<'_>, mutable_from: usize) {
        /// A session sluice has no record of (a restart) still gets its newest messages prepared.
        const NEWEST: usize = 8;
        let Some(preparer) = &self.preparer else {
            return;
        };
        let pipeline = self.pipeline();
        if !pipeline.prepares() {
            return;
        }
        let messages = parsed.messages();
        let from = mutable_from.min(messages.len().saturating_sub(NEWEST));
        let new: Vec<Message> = messages[from..]
            .iter()
            .filter(|m| m.is_tool() && m.rewritable)
            .cloned()
            .collect();
        if new.is_empty() {
            return;
        }
        let key = preparer.jobs.fetch_add(1, Ordering::Relaxed);
        // Refused when the queue is full: preparing is an optimization, the turn that needs
        // the result computes it itself.
        let _ = preparer
            .pool
            .try_submit(key, move || pipeline.prepare(&new));
    }
}

#[cfg(test)]
mod tests;
