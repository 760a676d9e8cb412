//! The request handler: routes, the rewrite path, pass-through, the expand loop, and the
//! operator routes (`/healthz`, `/stats`, `/metrics`, `/expand`, `/compact`).
//!
//! Failure rule: sluice never answers 5xx for a problem it caused. A body it cannot parse is
//! forwarded untouched; a panic in the engine forwards the original (the engine's own guard);
//! only an upstream that cannot be reached gives 502/504, and an upstream error status passes
//! through verbatim.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use actors::pool::WorkerPool;
use actors::sessions::{SessionLimits, Sessions};
use actors::stats::{Stats, StreamRelay};
use bytes::Bytes;
use engine::apply::apply_parsed;
use engine::clock::Clock;
use engine::config::Config;
use engine::pipeline::{Pipeline, RunCx};
use engine::store::{MemoryStore, Store};
use engine::wire::{self, Dialect};
use engine::{marker, session, tokens};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use modes::{SessionState, StorePersist};

use crate::clock::SystemClock;
use crate::expand;
use crate::http::{self as h, Body, BoxError};
use crate::sse;
use crate::upstream::{Upstream, UpstreamError, strip_hop_by_hop};
use crate::usage::UsageScanner;

/// The session header; wins over the derived key once sanitized.
pub const SESSION_HEADER: &str = "x-context-guru-session";

/// `x-context-guru-bypass: true` forwards the request byte-identically (still counted).
pub const BYPASS_HEADER: &str = "x-context-guru-bypass";

/// Expand rounds per request before the response goes to the agent as it is.
pub const MAX_EXPAND_ROUNDS: usize = 3;

/// Where requests go and how big they may be.
#[derive(Debug, Clone)]
pub struct Settings {
    pub anthropic_upstream: String,
    pub openai_upstream: String,
    /// Request bodies over this are refused with 413.
    pub body_limit: usize,
    /// Where model-written filters run: `sluice serve` uses a child process of itself.
    pub sandbox: llm::Isolation,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            anthropic_upstream: "https://api.anthropic.com".into(),
            openai_upstream: "https://api.openai.com".into(),
            body_limit: 32 << 20,
            sandbox: llm::Isolation::InProcess,
        }
    }
}

/// Everything a request needs, shared by all of them.
pub struct App {
    pub config: Config,
    pipeline: Arc<Pipeline>,
    store: Arc<dyn Store>,
    pub stats: Arc<Stats>,
    upstream: Upstream,
    clock: Arc<SystemClock>,
    settings: Settings,
    /// Observe mode's off-path measurement; `None` in sync mode.
    observer: Option<Observer>,
    /// One actor per session: the cached-prefix tracker, serialized turns.
    sessions: Sessions<SessionState>,
    /// Runs `Pipeline::prepare` on each turn's new messages while the upstream answers, so
    /// work such as `skeleton`'s parse is memoized before a later turn needs it. One worker,
    /// a short queue: when it is busy a turn's preparation is dropped, never waited for.
    preparer: WorkerPool,
    prepare_jobs: std::sync::atomic::AtomicU64,
    /// The LLM actor: model jobs for `extract_llm`, `extract` (`strategy: code`), `summarize`.
    pub llm: llm::LlmService,
}

/// Observe mode: forward untouched, and measure what sync would have saved on a bounded pool.
///
/// The shadow run has its own store, disjoint from the live one, so no decision observe made can
/// ever be resolved or replayed for a real request. Jobs hold only what they need (never the
/// `App`), so the last reference to the pool is never dropped on one of its own threads.
struct Observer {
    pool: WorkerPool,
    shadow_store: Arc<dyn Store>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl App {
    /// Must be called on a tokio runtime: session actors are spawned on it.
    ///
    /// # Errors
    /// The config's problems, if its pipeline does not build.
    pub fn new(
        config: Config,
        settings: Settings,
        upstream: Upstream,
        store: Arc<dyn Store>,
    ) -> Result<App, Vec<engine::config::ConfigError>> {
        let pipeline = Arc::new(config.build_pipeline()?);
        let clock = Arc::new(SystemClock);
        let observer = (config.mode == engine::config::Mode::Observe).then(|| Observer {
            pool: WorkerPool::new(
                "sluice-observe",
                config.observe.workers,
                config.observe.max_queue,
            ),
            shadow_store: Arc::new(MemoryStore::new(config.store.limits(), clock.clone())),
        });
        // Session state is saved in the store of the mode that runs the pipeline: observe must
        // never write the live store.
        let state_store = observer
            .as_ref()
            .map_or_else(|| store.clone(), |o| o.shadow_store.clone());
        let sessions = Sessions::new(
            SessionLimits {
                max_sessions: config.store.max_sessions,
                ..SessionLimits::DEFAULT
            },
            Arc::new(StorePersist::new(state_store)),
            tokio::runtime::Handle::current(),
        );
        // Model calls go through the agent's own pooled client.
        let llm = llm::LlmService::start(
            Arc::new(upstream.clone()),
            llm::CheapModelEnv::from_env(),
            llm::Options {
                isolation: settings.sandbox.clone(),
                ..llm::Options::default()
            },
        );
        Ok(App {
            config,
            pipeline,
            store,
            stats: Arc::new(Stats::new()),
            upstream,
            clock,
            settings,
            observer,
            sessions,
            preparer: WorkerPool::new("sluice-prepare", 1, 32),
            prepare_jobs: std::sync::atomic::AtomicU64::new(0),
            llm,
        })
    }

    fn mode(&self) -> &'static str {
        match self.config.mode {
            engine::config::Mode::Sync => "sync",
            engine::config::Mode::Observe => "observe",
        }
    }
}

/// The service function: never fails, every outcome is a response.
pub async fn handle(
    app: Arc<App>,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let response = match (&method, path.as_str()) {
        (&Method::GET, "/healthz") => h::text(StatusCode::OK, "ok"),
        (&Method::GET, "/favicon.ico") => h::text(StatusCode::NO_CONTENT, ""),
        (&Method::GET, "/stats") => {
            let mut stats = app.stats.to_json(
                app.mode(),
                app.observer.as_ref().map(|o| o.pool.stats()),
                Some(app.sessions.stats()),
            );
            add_llm_stats(&mut stats, app.llm.counts());
            h::json(StatusCode::OK, stats.to_string())
        }
        (&Method::GET, "/metrics") => {
            let mut text = app.stats.to_prometheus();
            text.push_str(&llm_prometheus(app.llm.counts()));
            h::text(StatusCode::OK, text)
        }
        (&Method::GET, "/expand") => expand_route(&app, peer, &request),
        (&Method::POST, "/compact") => compact_route(&app, request).await,
        (&Method::POST, "/anthropic/v1/messages") => chat(&app, Dialect::Anthropic, request).await,
        (&Method::POST, "/openai/v1/chat/completions") => {
            chat(&app, Dialect::OpenAi, request).await
        }
        _ => match upstream_for(&app.settings, &path) {
            Some(base) => passthrough(&app, base, request).await,
            None => h::error(
                StatusCode::NOT_FOUND,
                "not_found_error",
                &format!("sluice has no route {method} {path}"),
            ),
        },
    };
    Ok(response)
}

/// Components whose savings the model bought, for the net figure.
const MODEL_COMPONENTS: [&str; 2] = ["extract_llm", "summarize"];

/// What a saved token is worth, $/MTok: a Sonnet-class cache-read price, the conservative
/// value of a token the agent would have re-sent on a warm turn (`SLUICE_SAVED_VALUE_PER_MTOK`).
fn saved_value_per_mtok() -> f64 {
    std::env::var("SLUICE_SAVED_VALUE_PER_MTOK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.30)
}

/// The model's spend next to what it saved: `llm_*` fields of `/stats`.
fn add_llm_stats(stats: &mut serde_json::Value, counts: llm::LlmCounts) {
    let saved: u64 = MODEL_COMPONENTS
        .iter()
        .filter_map(|name| stats["components"][name]["saved_tokens"].as_u64())
        .sum();
    let value = saved as f64 * saved_value_per_mtok() / 1e6;
    if let Some(object) = stats.as_object_mut() {
        for (key, v) in [
            ("llm_calls", counts.calls.into()),
            ("llm_input_tokens", counts.input_tokens.into()),
            ("llm_output_tokens", counts.output_tokens.into()),
            ("llm_timeouts", counts.timeouts.into()),
            ("llm_errors", counts.errors.into()),
            ("llm_rejected", counts.rejected.into()),
            ("llm_sandbox_failures", counts.sandbox_failures.into()),
            ("llm_queue_full", counts.queue_full.into()),
            ("llm_cost_usd", counts.cost_usd.into()),
            ("llm_saved_tokens", saved.into()),
            ("llm_saved_value_usd", value.into()),
            ("llm_net_usd", (value - counts.cost_usd).into()),
        ] {
            object.insert(key.to_string(), v);
        }
    }
}

fn llm_prometheus(counts: llm::LlmCounts) -> String {
    format!(
        "# HELP cg_llm_calls_total Cheap-model calls made.\n# TYPE cg_llm_calls_total counter\ncg_llm_calls_total {}\n\
         # HELP cg_llm_tokens_total Cheap-model tokens billed.\n# TYPE cg_llm_tokens_total counter\ncg_llm_tokens_total{{direction=\"input\"}} {}\ncg_llm_tokens_total{{direction=\"output\"}} {}\n\
         # HELP cg_llm_failures_total Cheap-model jobs that failed, by stage.\n# TYPE cg_llm_failures_total counter\ncg_llm_failures_total{{stage=\"call\"}} {}\ncg_llm_failures_total{{stage=\"rejected\"}} {}\ncg_llm_failures_total{{stage=\"sandbox\"}} {}\ncg_llm_failures_total{{stage=\"timeout\"}} {}\n\
         # HELP cg_llm_cost_usd Cheap-model spend at the configured prices.\n# TYPE cg_llm_cost_usd counter\ncg_llm_cost_usd {}\n",
        counts.calls,
        counts.input_tokens,
        counts.output_tokens,
        counts.errors,
        counts.rejected,
        counts.sandbox_failures,
        counts.timeouts,
        counts.cost_usd
    )
}

/// The upstream base and the path to call there, for a path under `/anthropic/` or `/openai/`.
fn upstream_for<'a>(settings: &'a Settings, path: &str) -> Option<&'a str> {
    if path.starts_with("/anthropic/") {
        Some(&settings.anthropic_upstream)
    } else if path.starts_with("/openai/") {
        Some(&settings.openai_upstream)
    } else {
        None
    }
}

/// `/anthropic/v1/x?q` → `<base>/v1/x?q`.
fn upstream_uri(base: &str, request_uri: &http::Uri) -> String {
    let path = request_uri.path();
    let rest = path
        .strip_prefix("/anthropic")
        .or_else(|| path.strip_prefix("/openai"))
        .unwrap_or(path);
    let query = request_uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    format!("{}{rest}{query}", base.trim_end_matches('/'))
}

async fn read_body(app: &App, body: Incoming) -> Result<Bytes, Response<Body>> {
    match Limited::new(body, app.settings.body_limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => Err(h::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            &format!(
                "request body is over sluice's limit of {} bytes",
                app.settings.body_limit
            ),
        )),
        Err(_) => Err(h::error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "could not read the request body",
        )),
    }
}

fn upstream_failure(err: &UpstreamError) -> Response<Body> {
    match err {
        UpstreamError::Timeout => h::error(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            &err.to_string(),
        ),
        _ => h::error(StatusCode::BAD_GATEWAY, "upstream_error", &err.to_string()),
    }
}

/// An upstream response passed through as it streams in.
fn relay(response: Response<Incoming>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed())
}

async fn passthrough(app: &App, base: &str, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match read_body(app, body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    app.stats.record_passthrough(false);
    let uri = upstream_uri(base, &parts.uri);
    send(app, parts.method, &uri, &parts.headers, body)
        .await
        .map_or_else(|e| upstream_failure(&e), relay)
}

async fn send(
    app: &App,
    method: Method,
    uri: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response<Incoming>, UpstreamError> {
    let started = Instant::now();
    let result = app.upstream.send(method, uri, headers, body).await;
    app.stats
        .record_upstream(started.elapsed(), result.is_err());
    result
}

/// What the rewrite produced for one request.
struct Rewritten {
    body: Bytes,
    session: String,
    /// The expand tool was injected, so the response may call it.
    expandable: bool,
    /// The body asks for a streamed response (read from the parse already done).
    stream: bool,
}

/// Why a request went upstream exactly as it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Untouched {
    /// The body could not be normalized.
    Unparsed,
    /// The caller asked (`x-context-guru-bypass: true`), or the request is the agent compacting
    /// its own transcript, where a summary must see everything.
    Bypassed(&'static str),
}

/// Phrases that open an agent's request to summarize its own conversation (Claude Code, and
/// IBM Bob). Compacting that request would summarize our markers instead of the content.
const AGENT_COMPACTION_PROMPTS: [&str; 2] = [
    "Your task is to create a detailed summary of the ",
    "First, reason in your scratchpad. Then, generate the ",
];

fn is_agent_compaction(parsed: &wire::ParsedBody<'_>) -> bool {
    parsed.messages().last().is_some_and(|m| {
        m.role == engine::message::Role::User
            && AGENT_COMPACTION_PROMPTS
                .iter()
                .any(|p| m.content.contains(p))
    })
}

async fn rewrite(
    app: &App,
    dialect: Dialect,
    headers: &HeaderMap,
    body: &Bytes,
    upstream_uri: &str,
) -> Result<Rewritten, Untouched> {
    let started = Instant::now();
    let bypass = headers
        .get(BYPASS_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
    let parsed = match wire::parse(body, dialect) {
        Ok(parsed) => parsed,
        Err(_) if bypass => return Err(Untouched::Bypassed("header")),
        Err(_) => return Err(Untouched::Unparsed),
    };
    let explicit = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok());
    let session = session::for_request(explicit, &parsed);
    let bypassed = if bypass {
        Some("header")
    } else if is_agent_compaction(&parsed) {
        Some("agent_compaction")
    } else {
        None
    };
    // Held for the rewrite only: a concurrent turn of this session waits here, not for our
    // upstream call.
    let mut lease = app.sessions.lease(&session).await;
    if let Some(reason) = bypassed {
        // A bypassed turn still happened: the provider cached it, so the tracker records it.
        let facts = modes::begin_turn(&mut lease, &parsed, app.clock.now());
        app.stats
            .record_turn(facts.cold, facts.known, facts.diverged, facts.amortized);
        return Err(Untouched::Bypassed(reason));
    }
    let models =
        Arc::new(
            app.llm
                .for_request(incoming_model(dialect, headers, &parsed, upstream_uri)),
        );
    let cx = RunCx {
        dialect,
        session: session.clone(),
        store: app.store.clone(),
        clock: app.clock.clone(),
        mutable_from: 0,
        cold: false,
        existing_breakpoints: parsed.existing_breakpoints(),
        models: Some(models.clone()),
    };
    let (mut applied, facts) = modes::run_turn(
        &mut lease,
        &parsed,
        &app.pipeline,
        cx.clone(),
        &app.config.cache.amortize,
    );
    drop(lease);
    app.stats
        .record_turn(facts.cold, facts.known, facts.diverged, facts.amortized);
    if models.pending() > 0 {
        // A model job this turn started (or an earlier one is still running): wait up to its
        // deadline, then run again so a result that made it lands now. One that did not is
        // used on the next turn; this request goes without it (fail-open).
        let waited = models.wait().await;
        app.llm.record_timeouts(waited.timed_out as u64);
        if waited.finished > 0 {
            // Under the session's lease again: the re-run writes freezes and checkpoints, and
            // only a leased turn may run the pipeline for its session.
            let _lease = app.sessions.lease(&session).await;
            applied = modes::rerun(&parsed, &app.pipeline, cx, &facts);
        }
    }
    prepare_new_messages(app, &parsed, facts.mutable_from);
    let stashed = applied
        .report
        .components
        .iter()
        .any(|c| !c.stashed.is_empty());
    let rewritten = match applied.body {
        std::borrow::Cow::Borrowed(_) => body.clone(),
        std::borrow::Cow::Owned(bytes) => Bytes::from(bytes),
    };
    let injected = if stashed {
        expand::inject_tool_after(&parsed, &rewritten).map(Bytes::from)
    } else {
        None
    };
    app.stats
        .record_run(&applied.report, &applied.discarded, started.elapsed());
    let stream = parsed
        .field("stream")
        .is_some_and(|s| s.of(parsed.text()) == "true");
    Ok(Rewritten {
        expandable: injected.is_some(),
        body: injected.unwrap_or(rewritten),
        session,
        stream,
    })
}

/// What `model.source: incoming` reuses: the request's protocol, upstream URL, model and the
/// caller's headers that may go upstream (credentials included; they live only as long as this
/// request's jobs and are never logged). Compression is not asked for: the reply is parsed.
fn incoming_model(
    dialect: Dialect,
    headers: &HeaderMap,
    parsed: &wire::ParsedBody<'_>,
    upstream_uri: &str,
) -> Option<llm::Incoming> {
    let model = parsed.field("model")?.of(parsed.text());
    let model: String = serde_json::from_str(model).ok()?;
    let headers = headers
        .iter()
        .filter(|(name, _)| {
            crate::upstream::forwardable(name)
                && !matches!(
                    name.as_str(),
                    "content-length" | "content-type" | "accept-encoding" | "host"
                )
        })
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    Some(llm::Incoming {
        provider: match dialect {
            Dialect::Anthropic => engine::model::Provider::Anthropic,
            Dialect::OpenAi => engine::model::Provider::Openai,
        },
        url: upstream_uri.to_string(),
        headers,
        model,
    })
}

/// Hands the tool outputs this turn added (from the cached-prefix boundary, and at least the
/// last few messages on a turn whose boundary is unknown) to the preparer.
fn prepare_new_messages(app: &App, parsed: &wire::ParsedBody<'_>, mutable_from: usize) {
    /// A session sluice has no record of (a restart) still gets its newest messages prepared.
    const NEWEST: usize = 8;
    let messages = parsed.messages();
    let from = mutable_from.min(messages.len().saturating_sub(NEWEST));
    let new: Vec<engine::message::Message> = messages[from..]
        .iter()
        .filter(|m| m.is_tool() && m.rewritable)
        .cloned()
        .collect();
    if new.is_empty() {
        return;
    }
    let pipeline = app.pipeline.clone();
    let key = app
        .prepare_jobs
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Refused when the queue is full: preparing is an optimization, the turn that needs the
    // result computes it itself.
    let _ = app.preparer.try_submit(key, move || pipeline.prepare(&new));
}

/// Relays `response` and, once its body is done, hands the provider's cache report for this
/// turn to the session's tracker.
fn relay_reporting(
    app: &Arc<App>,
    session: String,
    response: Response<Incoming>,
) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let (sessions, stats) = (app.sessions.clone(), app.stats.clone());
    let mut scanner = UsageScanner::new(move |usage| {
        sessions.apply(&session, move |state: &mut SessionState| {
            let before = state.tracker.counts.cold_mispredicted;
            state.tracker.observe_usage(usage);
            if state.tracker.counts.cold_mispredicted > before {
                stats.record_cold_mispredicted();
            }
        });
    });
    let body = body
        .map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                scanner.scan(data);
            }
            frame
        })
        .map_err(|e| Box::new(e) as BoxError)
        .boxed();
    Response::from_parts(parts, body)
}

async fn chat(app: &Arc<App>, dialect: Dialect, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match read_body(app, body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let base = match dialect {
        Dialect::Anthropic => &app.settings.anthropic_upstream,
        Dialect::OpenAi => &app.settings.openai_upstream,
    };
    let uri = upstream_uri(base, &parts.uri);
    if let Some(observer) = &app.observer {
        // Observe: the body goes out exactly as it came; the measurement happens off-path.
        observe(app, observer, dialect, &parts.headers, &body);
        app.stats.record_passthrough(false);
        return send(app, parts.method, &uri, &parts.headers, body)
            .await
            .map_or_else(|e| upstream_failure(&e), relay);
    }
    let rewritten = match rewrite(app, dialect, &parts.headers, &body, &uri).await {
        Ok(rewritten) => rewritten,
        Err(untouched) => {
            match untouched {
                // Not ours to judge: the upstream answers a body we cannot read.
                Untouched::Unparsed => app.stats.record_passthrough(true),
                Untouched::Bypassed(reason) => app.stats.record_bypass(reason),
            }
            return send(app, parts.method, &uri, &parts.headers, body)
                .await
                .map_or_else(|e| upstream_failure(&e), relay);
        }
    };
    let stream = rewritten.stream;
    let response = match send(
        app,
        parts.method.clone(),
        &uri,
        &parts.headers,
        rewritten.body.clone(),
    )
    .await
    {
        Ok(response) => response,
        Err(err) => return upstream_failure(&err),
    };
    if !rewritten.expandable || !response.status().is_success() {
        if stream {
            app.stats.record_stream(StreamRelay::Streamed, None);
        }
        return relay_reporting(app, rewritten.session, response);
    }
    let call = Continuation {
        app: app.clone(),
        dialect,
        uri,
        headers: parts.headers,
        session: rewritten.session,
    };
    if stream {
        call.stream(rewritten.body, response)
    } else {
        call.buffered(rewritten.body, response).await
    }
}

/// Queues the shadow run of one request; a full queue drops it (counted), never waits.
fn observe(app: &App, observer: &Observer, dialect: Dialect, headers: &HeaderMap, body: &Bytes) {
    let key = {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        BuildHasherDefault::<DefaultHasher>::default().hash_one(body.as_ref())
    };
    let explicit = headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let amortize = app.config.cache.amortize;
    let (pipeline, stats, store, clock, sessions, body) = (
        app.pipeline.clone(),
        app.stats.clone(),
        observer.shadow_store.clone(),
        app.clock.clone(),
        app.sessions.clone(),
        body.clone(),
    );
    let _ = observer.pool.try_submit(key, move || {
        let started = Instant::now();
        let Ok(parsed) = wire::parse(&body, dialect) else {
            return;
        };
        if is_agent_compaction(&parsed) {
            return;
        }
        let session = session::for_request(explicit.as_deref(), &parsed);
        let cx = RunCx {
            dialect,
            session: session.clone(),
            store,
            clock,
            mutable_from: 0,
            cold: false,
            existing_breakpoints: parsed.existing_breakpoints(),
            models: None,
        };
        // The same tracker sync would use, so the projection respects the same boundary.
        let mut lease = sessions.lease_blocking(&session);
        let (applied, facts) = modes::run_turn(&mut lease, &parsed, &pipeline, cx, &amortize);
        drop(lease);
        stats.record_turn(facts.cold, facts.known, facts.diverged, facts.amortized);
        stats.record_projection(&applied.report, &applied.discarded, started.elapsed());
    });
}

/// What the expand loop needs to re-invoke upstream.
struct Continuation {
    app: Arc<App>,
    dialect: Dialect,
    uri: String,
    headers: HeaderMap,
    session: String,
}

impl Continuation {
    /// Resolves the calls and builds the next request, or `None` when the response is not an
    /// all-expand turn.
    fn next_request(&self, forwarded: &[u8], response: &[u8]) -> Option<Vec<u8>> {
        let calls = expand::expand_calls(response, self.dialect)?;
        let mut restored = 0;
        let mut missed = 0;
        let mut wasted = 0;
        let results: Vec<(String, String)> = calls
            .into_iter()
            .map(|call| {
                let original = match self.app.store.resolve(&self.session, &call.stash_id) {
                    Some(original) => {
                        restored += 1;
                        wasted += tokens::count(&original) as u64;
                        original.to_string()
                    }
                    None => {
                        missed += 1;
                        marker::expired_placeholder(&call.stash_id)
                    }
                };
                (call.call_id, original)
            })
            .collect();
        self.app.stats.record_expand_round(restored, missed, wasted);
        expand::continuation(forwarded, response, self.dialect, &results)
    }

    /// Sends the next request of the loop with the agent's own headers.
    async fn resend(&self, body: Bytes) -> Result<Response<Incoming>, UpstreamError> {
        send(&self.app, Method::POST, &self.uri, &self.headers, body).await
    }

    /// Non-streamed: read each response whole, loop while it is all expand calls.
    async fn buffered(
        self,
        mut forwarded: Bytes,
        mut response: Response<Incoming>,
    ) -> Response<Body> {
        for _ in 0..=MAX_EXPAND_ROUNDS {
            let (mut parts, body) = response.into_parts();
            let bytes = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(err) => {
                    return h::error(
                        StatusCode::BAD_GATEWAY,
                        "upstream_error",
                        &format!("upstream body failed: {err}"),
                    );
                }
            };
            strip_hop_by_hop(&mut parts.headers);
            let next = parts
                .status
                .is_success()
                .then(|| self.next_request(&forwarded, &bytes))
                .flatten();
            let Some(next) = next else {
                return Response::from_parts(parts, h::full(bytes));
            };
            forwarded = Bytes::from(next);
            response = match self.resend(forwarded.clone()).await {
                Ok(response) => response,
                Err(err) => return upstream_failure(&err),
            };
        }
        relay(response)
    }

    /// Streamed: everything streams as it arrives until an expand call starts. From there the
    /// rest of that response is held; when its calls are all expand calls they are answered
    /// from the store and the continuation streams on in the same response, so the client sees
    /// one coherent stream (text the model wrote before the call included). Anything else
    /// releases what was held, verbatim.
    fn stream(self, forwarded: Bytes, first: Response<Incoming>) -> Response<Body> {
        let (mut parts, body) = first.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(http::header::CONTENT_LENGTH);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(32);
        tokio::spawn(self.drive_stream(forwarded, body, tx));
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Response::from_parts(parts, BodyExt::boxed(StreamBody::new(stream)))
    }

    async fn drive_stream(
        self,
        mut forwarded: Bytes,
        mut body: Incoming,
        tx: tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
    ) {
        let started = Instant::now();
        let mut relay = sse::Relay::new(self.dialect);
        for round in 0..=MAX_EXPAND_ROUNDS {
            let mut first_byte = round == 0;
            let mut pending: Vec<u8> = Vec::new();
            // A round streams until an expand call starts, then holds.
            loop {
                let frame = match body.frame().await {
                    Some(Ok(frame)) => frame,
                    Some(Err(err)) => {
                        let _ = tx.send(Ok(Frame::data(relay.release_held()))).await;
                        let _ = tx.send(Err(Box::new(err))).await;
                        return;
                    }
                    None => break,
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                pending.extend_from_slice(&data);
                let out = relay.push_frames(sse::take_frames(&mut pending));
                if !out.is_empty() {
                    if first_byte {
                        self.app
                            .stats
                            .record_stream(StreamRelay::Streamed, Some(started.elapsed()));
                        first_byte = false;
                    }
                    if tx.send(Ok(Frame::data(out))).await.is_err() {
                        return; // The client went away: nothing left to deliver.
                    }
                }
            }
            if !relay.holding() {
                // Bytes after the last blank line (a stream cut short) go out as they are.
                if !pending.is_empty() {
                    let _ = tx.send(Ok(Frame::data(Bytes::from(pending)))).await;
                }
                return;
            }
            self.app.stats.record_stream(StreamRelay::Buffered, None);
            let aggregated = relay.take_turn().to_string();
            let next = if round < MAX_EXPAND_ROUNDS {
                self.next_request(&forwarded, aggregated.as_bytes())
            } else {
                None
            };
            let Some(next) = next else {
                // Not all expand calls, or out of rounds: the agent gets the turn as it was.
                let _ = tx.send(Ok(Frame::data(relay.release_held()))).await;
                return;
            };
            forwarded = Bytes::from(next);
            match self.resend(forwarded.clone()).await {
                Ok(response) if response.status().is_success() => {
                    relay.continue_in_place();
                    body = response.into_body();
                }
                // The continuation failed: the agent gets the held turn rather than nothing.
                _ => {
                    let _ = tx.send(Ok(Frame::data(relay.release_held()))).await;
                    return;
                }
            }
        }
    }
}

/// `GET /expand?id=HASH[&session=S]`: the exact original, for a person at a loopback address.
/// With a session (header or parameter) only that session's stashes resolve.
fn expand_route(app: &App, peer: SocketAddr, request: &Request<Incoming>) -> Response<Body> {
    if !peer.ip().is_loopback() {
        return h::error(
            StatusCode::FORBIDDEN,
            "permission_error",
            "stashed content is served to loopback addresses only",
        );
    }
    let query = request.uri().query().unwrap_or("");
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .map(str::to_owned)
    };
    let Some(id) = param("id") else {
        return h::error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "missing ?id=HASH",
        );
    };
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| param("session"));
    let original = match session.as_deref().and_then(session::sanitize_explicit) {
        // `POST /compact` stashes under `compact:<session>` (its freezes must never reach the
        // live session); a person asking with the session still gets those originals.
        Some(session) => app
            .store
            .resolve(session, &id)
            .or_else(|| app.store.resolve(&format!("compact:{session}"), &id)),
        None if session.is_some() => None,
        None => app.store.resolve_any(&id),
    };
    match original {
        Some(original) => h::text(StatusCode::OK, original.to_string()),
        None => h::text(
            StatusCode::NOT_FOUND,
            "expired, unknown, or not owned by this session",
        ),
    }
}

/// `POST /compact[?provider=anthropic|openai][&preset=NAME]`: the rewritten body, no upstream
/// call. Always 200: the rewrite, or the original when it cannot be rewritten.
async fn compact_route(app: &App, request: Request<Incoming>) -> Response<Body> {
    let query = request.uri().query().unwrap_or("").to_owned();
    let (parts, body) = request.into_parts();
    let body = match read_body(app, body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let dialect = param("provider")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| Dialect::detect(&body));
    let preset_pipeline =
        param("preset").and_then(|name| Config::from_preset(name).ok()?.build_pipeline().ok());
    let pipeline = preset_pipeline.as_ref().unwrap_or(&app.pipeline);
    let Ok(parsed) = wire::parse(&body, dialect) else {
        return h::json(StatusCode::OK, body);
    };
    let explicit = parts
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok());
    let cx = RunCx {
        dialect,
        // A namespace of its own: a one-off rewrite acts at any depth (mutable_from 0), and its
        // frozen decisions must never be replayed into a live session's cached prefix.
        session: format!("compact:{}", session::for_request(explicit, &parsed)),
        store: app.store.clone(),
        clock: app.clock.clone(),
        mutable_from: 0,
        cold: false,
        existing_breakpoints: parsed.existing_breakpoints(),
        models: None,
    };
    let applied = apply_parsed(&parsed, pipeline, &cx);
    h::json(StatusCode::OK, applied.body.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_uri_strips_the_dialect_prefix_and_keeps_the_query() {
        let uri: http::Uri = "/anthropic/v1/messages/count_tokens?beta=true"
            .parse()
            .unwrap();
        assert_eq!(
            upstream_uri("https://api.anthropic.com/", &uri),
            "https://api.anthropic.com/v1/messages/count_tokens?beta=true"
        );
        let uri: http::Uri = "/openai/v1/models".parse().unwrap();
        assert_eq!(
            upstream_uri("http://127.0.0.1:9", &uri),
            "http://127.0.0.1:9/v1/models"
        );
    }
}
