//! The application: what every request shares ([`App`]), the routes, pass-through, and the
//! operator routes (`/healthz`, `/stats`, `/metrics`, `/expand`, `/compact`). The rewritten
//! routes are `chat.rs`; the turn itself is `modes::turn`; the expand loop is `expand_loop.rs`.
//!
//! Failure rule: sluice never answers 5xx for a problem it caused. A body it cannot parse is
//! forwarded untouched; a panic in the engine forwards the original (the engine's own guard);
//! only an upstream that cannot be reached gives 502/504, and an upstream error status passes
//! through verbatim.

use std::borrow::Cow;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use actors::pool::WorkerPool;
use actors::sessions::{SessionLimits, Sessions};
use actors::store::DurableStore;
use bytes::Bytes;
use engine::config::Config;
use engine::session;
use engine::store::{MemoryStore, Store};
use engine::wire::Dialect;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use modes::stats::Stats;
use modes::turn::{Turn, TurnInput, TurnService};
use modes::{SessionState, StorePersist};

use crate::chat::{FLUSH_WAIT, chat, relay, send};
use crate::clock::SystemClock;
use crate::respond::{self as h, Body, ProxyError};
use crate::sections::SECTIONS;
use crate::store_stats::StoreView;
use crate::upstream::Upstream;

pub use crate::expand_loop::MAX_EXPAND_ROUNDS;
pub use modes::turn::{BYPASS_HEADER, SESSION_HEADER};

/// Where requests go and how big they may be.
#[derive(Debug, Clone)]
pub struct Settings {
    pub anthropic_upstream: String,
    pub openai_upstream: String,
    pub gemini_upstream: String,
    /// Where `/vertex/...` goes; `None`: the region's own endpoint the path names.
    pub vertex_upstream: Option<String>,
    /// Where `/bedrock/...` goes; `None`: the signing region's runtime endpoint.
    pub bedrock_upstream: Option<String>,
    /// The region Bedrock requests are signed for; `None`: the AWS chain's (`AWS_REGION`, the
    /// profile's), else `us-east-1`.
    pub bedrock_region: Option<String>,
    /// Where the credentials Bedrock requests are signed with come from.
    pub bedrock_credentials: crate::bedrock::CredentialSource,
    /// Request bodies over this are refused with 413 (at once when declared).
    pub body_limit: usize,
    /// A request body that sends nothing for this long is given up with 408.
    pub body_idle: std::time::Duration,
    /// How long a connection may take to send a request's headers, and may sit idle between
    /// requests, before it is closed.
    pub header_timeout: std::time::Duration,
    /// Connections served at once; past it new ones wait in the listen backlog.
    pub max_connections: usize,
    /// Who the operator routes answer (loopback, trusted networks, an optional token).
    pub admission: crate::admit::Admission,
    /// Where model-written filters run: `sluice serve` uses a child process of itself.
    pub sandbox: llm::Isolation,
    /// Keys the credential scope of session keys (`SLUICE_SCOPE_SECRET`); replicas sharing a
    /// store must share it.
    pub scope_secret: Vec<u8>,
    /// The dashboard store, when `--dashboard` is on.
    pub dashboard: Option<Arc<actors::dashboard::Dashboard>>,
    /// Host names the dashboard's content answers besides IP literals and `localhost`
    /// (`--dashboard-host`).
    pub dashboard_hosts: Vec<String>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            anthropic_upstream: "https://api.anthropic.com".into(),
            openai_upstream: "https://api.openai.com".into(),
            gemini_upstream: "https://generativelanguage.googleapis.com".into(),
            vertex_upstream: None,
            bedrock_upstream: None,
            bedrock_region: None,
            bedrock_credentials: crate::bedrock::CredentialSource::Chain,
            body_limit: 32 << 20,
            body_idle: std::time::Duration::from_secs(30),
            header_timeout: std::time::Duration::from_secs(10),
            max_connections: 1024,
            admission: crate::admit::Admission::default(),
            sandbox: llm::Isolation::InProcess,
            scope_secret: modes::turn::DEFAULT_SCOPE_SECRET.to_vec(),
            dashboard: None,
            dashboard_hosts: Vec::new(),
        }
    }
}

/// Where the live turns keep their state.
#[derive(Clone)]
pub enum StateStore {
    /// This process only (`memory`, `off`, tests).
    Local(Arc<dyn Store>),
    /// SQLite or Redis: sessions survive restarts and are shared by replicas.
    Durable(Arc<DurableStore>),
}

impl StateStore {
    fn store(&self) -> Arc<dyn Store> {
        match self {
            StateStore::Local(store) => store.clone(),
            StateStore::Durable(durable) => durable.clone(),
        }
    }
}

/// `sluice_build_info` (the version as a label, value 1, as Prometheus exporters do) and the
/// process's uptime.
fn write_build_info(out: &mut String, uptime: std::time::Duration) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "# HELP sluice_build_info The running sluice's version.\n# TYPE sluice_build_info gauge\nsluice_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        out,
        "# HELP sluice_uptime_seconds Seconds since this process started.\n# TYPE sluice_uptime_seconds gauge\nsluice_uptime_seconds {}",
        uptime.as_secs()
    );
}

/// The cheap model's accepted results, kept in the durable store under their session (frozen
/// key `llm:<content key>`): loaded with the session, written at once.
struct DurableResults(Arc<DurableStore>);

impl DurableResults {
    fn key(key: u128) -> String {
        format!("llm:{key:032x}")
    }
}

impl llm::ResultStore for DurableResults {
    fn load(&self, session: &str, key: u128) -> Option<String> {
        self.0
            .get_frozen(session, &Self::key(key))
            .map(|v| v.to_string())
    }

    fn save(&self, session: &str, key: u128, text: &str) {
        // Not waited for: a result that does not land is asked for again, nothing worse.
        let _ = self.0.put_now(session, &Self::key(key), text);
    }
}

/// Everything a request needs, shared by all of them.
pub struct App {
    pub config: Config,
    /// The turn: sync mode's live turns, and `POST /compact` in either mode.
    turns: TurnService,
    pub stats: Arc<Stats>,
    upstream: Upstream,
    settings: Settings,
    /// Observe mode's off-path measurement; `None` in sync mode.
    observer: Option<Observer>,
    /// The LLM actor: model jobs for `extract_llm`, `extract` (`strategy: code`), `summarize`.
    pub llm: llm::LlmService,
    /// For `uptime_seconds`.
    started: std::time::Instant,
    /// Bedrock's region and credentials, looked up on its first request.
    pub(crate) bedrock: crate::bedrock::Bedrock,
}

/// Observe mode: forward untouched, and measure what sync would have saved on a bounded pool.
///
/// The shadow turn has its own store and session actors, disjoint from the live ones, so no
/// decision observe made can ever be resolved or replayed for a real request. Jobs hold only what
/// they need (never the `App`), so the last reference to the pool is never dropped on one of its
/// own threads.
pub(crate) struct Observer {
    pub(crate) pool: WorkerPool,
    pub(crate) shadow: Arc<TurnService>,
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
        state: StateStore,
    ) -> Result<App, Vec<engine::config::ConfigError>> {
        let store = state.store();
        let durable = match state {
            StateStore::Durable(durable) => Some(durable),
            StateStore::Local(_) => None,
        };
        let pipeline = Arc::new(config.build_pipeline()?);
        let clock = Arc::new(SystemClock);
        let runtime = tokio::runtime::Handle::current();
        let sessions_over = |state_store: Arc<dyn Store>| {
            Sessions::new(
                SessionLimits {
                    max_sessions: config.store.max_sessions,
                    ..SessionLimits::DEFAULT
                },
                Arc::new(StorePersist::new(state_store)),
                runtime.clone(),
            )
        };
        let amortize = config.cache.amortize;
        let live = TurnService::new(pipeline.clone(), store.clone(), clock.clone())
            .with_scope_secret(&settings.scope_secret);
        // Live turns and one-off rewrites keep their state in the durable store, if there is one.
        let live = match &durable {
            Some(durable) => live.with_durable(durable.clone()),
            None => live,
        };
        // Session state is saved in the store of the mode that runs the pipeline: observe must
        // never write the live store.
        let (turns, observer) = match config.mode {
            engine::config::Mode::Sync => {
                let live = live
                    .with_sessions(sessions_over(store.clone()), amortize)
                    .with_preparer();
                (live, None)
            }
            engine::config::Mode::Observe => {
                let shadow_store: Arc<dyn Store> =
                    Arc::new(MemoryStore::new(config.store.limits(), clock.clone()));
                let shadow = TurnService::new(pipeline, shadow_store.clone(), clock)
                    .with_scope_secret(&settings.scope_secret)
                    .with_sessions(sessions_over(shadow_store), amortize);
                let observer = Observer {
                    pool: WorkerPool::new(
                        "sluice-observe",
                        config.observe.workers,
                        config.observe.max_queue,
                    ),
                    shadow: Arc::new(shadow),
                };
                (live, Some(observer))
            }
        };
        // Model calls go through the agent's own pooled client; with a durable store, accepted
        // results are kept there too, for every replica and the next process.
        let results = durable
            .clone()
            .map(|d| Arc::new(DurableResults(d)) as Arc<dyn llm::ResultStore>);
        let llm = llm::LlmService::start_with(
            Arc::new(upstream.clone()),
            llm::CheapModelEnv::from_env(),
            llm::Options {
                isolation: settings.sandbox.clone(),
                ..llm::Options::default()
            },
            results,
        );
        let bedrock = crate::bedrock::Bedrock::new(
            settings.bedrock_upstream.clone(),
            settings.bedrock_region.clone(),
            settings.bedrock_credentials.clone(),
        );
        Ok(App {
            bedrock,
            config,
            turns,
            stats: Arc::new(Stats::new()),
            upstream,
            settings,
            observer,
            llm,
            started: std::time::Instant::now(),
        })
    }

    pub(crate) fn store_view(&self) -> StoreView {
        StoreView {
            store: self.store().stats(),
            durable: self
                .turns
                .durable()
                .map(|d| d.durable_stats())
                .unwrap_or_default(),
        }
    }

    /// `sqlite:PATH`, a redacted Redis URL, `memory` or `off`.
    pub(crate) fn store_backend(&self) -> String {
        match self.turns.durable() {
            Some(durable) => durable.describe(),
            None if self.store().persists() => "memory".to_owned(),
            None => "off".to_owned(),
        }
    }

    /// Applies a reloaded config (SIGHUP): its pipeline and component settings take effect for
    /// every later turn, atomically. What the running process cannot change (`mode`, `store`,
    /// `observe`, `count_tokens`, `cache`) is named in the result and keeps its running value.
    ///
    /// # Errors
    /// The new pipeline's problems; the running one stays.
    pub fn reload(
        &self,
        config: &Config,
    ) -> Result<Vec<&'static str>, Vec<engine::config::ConfigError>> {
        let pipeline = Arc::new(config.build_pipeline()?);
        self.turns.set_pipeline(pipeline.clone());
        if let Some(observer) = &self.observer {
            observer.shadow.set_pipeline(pipeline);
        }
        let running = &self.config;
        let needs_restart = [
            ("mode", config.mode != running.mode),
            ("store", config.store != running.store),
            ("observe", config.observe != running.observe),
            ("count_tokens", config.count_tokens != running.count_tokens),
            ("cache", config.cache != running.cache),
        ];
        Ok(needs_restart
            .into_iter()
            .filter_map(|(key, changed)| changed.then_some(key))
            .collect())
    }

    /// The original behind `id` in `session`: from memory, else (a replica that did not cut it,
    /// a restart) from the durable store.
    pub(crate) async fn resolve(&self, session: &str, id: &str) -> Option<Arc<str>> {
        match self.turns.durable() {
            Some(durable) => durable.fetch(Some(session), id).await,
            None => self.store().resolve(session, id),
        }
    }

    /// The original behind `id` in any session (a person at a trusted address, a gateway's
    /// retrieve).
    pub(crate) async fn resolve_any(&self, id: &str) -> Option<Arc<str>> {
        match self.turns.durable() {
            Some(durable) => durable.fetch(None, id).await,
            None => self.store().resolve_any(id),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn turns(&self) -> &TurnService {
        &self.turns
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        self.turns.store()
    }

    pub(crate) fn observer(&self) -> Option<&Observer> {
        self.observer.as_ref()
    }

    pub(crate) fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Where a rewritten request of `dialect` to `path` goes: the dialect's upstream, or for a
    /// path under `/vertex/` the Vertex AI one.
    pub(crate) fn upstream_of(&self, dialect: Dialect, path: &str) -> Option<Cow<'_, str>> {
        if path.starts_with("/vertex/") {
            return crate::google::vertex_upstream(self.settings.vertex_upstream.as_deref(), path);
        }
        Some(Cow::Borrowed(self.upstream_base(dialect)))
    }

    pub(crate) fn upstream_base(&self, dialect: Dialect) -> &str {
        match dialect {
            Dialect::Anthropic => &self.settings.anthropic_upstream,
            Dialect::OpenAi | Dialect::Responses => &self.settings.openai_upstream,
            Dialect::Gemini => &self.settings.gemini_upstream,
        }
    }

    /// The session actors whose trackers run turns: the live ones in sync mode, the shadow ones
    /// in observe mode.
    pub(crate) fn live_sessions(&self) -> &Sessions<SessionState> {
        let service = self.observer.as_ref().map_or(&self.turns, |o| &o.shadow);
        service
            .sessions()
            .expect("the turn service of the running mode has session actors")
    }

    /// The dashboard store, when it is on.
    pub fn dashboard(&self) -> Option<&Arc<actors::dashboard::Dashboard>> {
        self.settings.dashboard.as_ref()
    }

    pub(crate) fn mode(&self) -> &'static str {
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
    mut request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let started = std::time::Instant::now();
    let path = request.uri().path().to_owned();
    if path.starts_with("/bedrock/") {
        // Whether sluice may sign this caller's Bedrock calls with its own credentials: a
        // loopback or --trusted peer, naming sluice by an address, localhost or a
        // --dashboard-host name (not a web page that re-points its own name at 127.0.0.1), and
        // not a browser (a page on any site may POST to 127.0.0.1 blind; browsers say so with
        // `Origin` and `Sec-Fetch-Site`, agents send neither).
        let headers = request.headers();
        let browser = headers.contains_key(http::header::ORIGIN)
            || headers
                .get("sec-fetch-site")
                .is_some_and(|site| site.as_bytes() != b"none");
        let trusted = !browser
            && app.settings.admission.trusts(peer.ip())
            && crate::dashboard::host_is_ours(
                request.uri(),
                headers,
                &app.settings.dashboard_hosts,
            );
        request
            .extensions_mut()
            .insert(crate::bedrock::Caller { trusted });
    }
    let method = request.method().clone();
    let response = match (&method, path.as_str()) {
        (&Method::GET, "/healthz") => h::text(StatusCode::OK, "ok"),
        // Claude Code checks its base URL with `HEAD` at start-up; sluice's roots answer it
        // themselves (a provider's path below them is relayed like any other).
        (
            &Method::HEAD,
            "/" | "/healthz" | "/anthropic" | "/anthropic/" | "/openai" | "/openai/" | "/gemini"
            | "/gemini/" | "/vertex" | "/vertex/" | "/bedrock" | "/bedrock/",
        ) => h::text(StatusCode::OK, ""),
        (method, dash) if dash.starts_with("/dashboard") => {
            match crate::dashboard::route(method, dash) {
                Some(&(_, _, audience, _)) => {
                    crate::dashboard::handle(&app, peer, &request, audience).await
                }
                None => ProxyError::NotFound {
                    method: method.clone(),
                    path: path.clone(),
                }
                .into_response(),
            }
        }
        (&Method::GET, "/favicon.ico") => h::text(StatusCode::NO_CONTENT, ""),
        (&Method::GET, "/stats" | "/metrics" | "/expand")
        | (&Method::POST, "/compact" | "/v1/compress")
            if let Err(refused) = app.settings.admission.check(peer.ip(), request.headers()) =>
        {
            refused.into_response()
        }
        (&Method::GET, "/stats") => {
            let mut stats = app.stats.to_json(
                app.mode(),
                app.observer.as_ref().map(|o| o.pool.stats()),
                Some(app.live_sessions().stats()),
            );
            if let Some(object) = stats.as_object_mut() {
                for section in SECTIONS {
                    (section.json)(&app, object);
                }
                object.insert("store_backend".into(), app.store_backend().into());
                object.insert("version".into(), env!("CARGO_PKG_VERSION").into());
                object.insert(
                    "uptime_seconds".into(),
                    app.started.elapsed().as_secs().into(),
                );
            }
            h::json(StatusCode::OK, stats.to_string())
        }
        (&Method::GET, "/metrics") => {
            let mut text = app.stats.to_prometheus();
            for section in SECTIONS {
                (section.prometheus)(&app, &mut text);
            }
            write_build_info(&mut text, app.started.elapsed());
            h::text(StatusCode::OK, text)
        }
        (&Method::GET, "/expand") => expand_route(&app, peer, &request).await,
        (&Method::POST, "/compact") => compact_route(&app, request).await,
        (&Method::POST, "/v1/compress") => crate::sidecar::compress_route(&app, request).await,
        (&Method::GET, retrieve) if retrieve.starts_with("/v1/retrieve/") => {
            match app.settings.admission.check(peer.ip(), request.headers()) {
                Err(refused) => refused.into_response(),
                Ok(()) => {
                    let hash = retrieve.trim_start_matches("/v1/retrieve/");
                    crate::sidecar::retrieve_route(&app, hash).await
                }
            }
        }
        (&Method::POST, "/anthropic/v1/messages") => chat(&app, Dialect::Anthropic, request).await,
        (&Method::POST, "/anthropic/v1/messages/count_tokens")
            if app.config.count_tokens == engine::config::CountTokens::Compacted =>
        {
            count_tokens_route(&app, request).await
        }
        (&Method::POST, azure) if is_azure_chat(azure) => {
            chat(&app, Dialect::OpenAi, request).await
        }
        (&Method::POST, "/openai/v1/chat/completions") => {
            chat(&app, Dialect::OpenAi, request).await
        }
        (&Method::POST, "/openai/v1/responses") => chat(&app, Dialect::Responses, request).await,
        _ if has_dot_segment(&path) => {
            ProxyError::BadRequest("a path with `.` or `..` segments is not forwarded")
                .into_response()
        }
        // After the dot-segment guard: a Google path carries caller-chosen segments.
        (&Method::POST, google)
            if let Some(call) = crate::google::generates(google, request.uri().query()) =>
        {
            chat(&app, call.dialect, request).await
        }
        (&Method::POST, bedrock) if crate::bedrock::invokes(bedrock).is_some() => {
            chat(&app, Dialect::Anthropic, request).await
        }
        _ if path.starts_with("/bedrock/") => bedrock_passthrough(&app, request).await,
        _ => match upstream_for(&app.settings, &path) {
            Some(base) => passthrough(&app, &base, request).await,
            None => ProxyError::NotFound {
                method: method.clone(),
                path: path.clone(),
            }
            .into_response(),
        },
    };
    crate::access::log(
        &method,
        crate::access::route_label(&path),
        &response,
        started,
    );
    Ok(response)
}

/// The upstream base for a path under `/anthropic/`, `/openai/`, `/gemini/` or `/vertex/`.
fn upstream_for<'a>(settings: &'a Settings, path: &str) -> Option<Cow<'a, str>> {
    if path.starts_with("/anthropic/") {
        Some(Cow::Borrowed(&settings.anthropic_upstream))
    } else if path.starts_with("/openai/") {
        Some(Cow::Borrowed(&settings.openai_upstream))
    } else if path.starts_with("/gemini/") {
        Some(Cow::Borrowed(&settings.gemini_upstream))
    } else if path.starts_with("/vertex/") {
        crate::google::vertex_upstream(settings.vertex_upstream.as_deref(), path)
    } else {
        None
    }
}

/// Whether a path has a `.` or `..` segment, plain or percent-encoded: forwarded raw, it could
/// leave the upstream's base path, so such a request is refused.
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|segment| {
        let decoded = segment.replace("%2e", ".").replace("%2E", ".");
        decoded == "." || decoded == ".."
    })
}

/// `/anthropic/v1/x?q` → `<base>/v1/x?q`.
pub(crate) fn upstream_uri(base: &str, request_uri: &http::Uri) -> String {
    let path = request_uri.path();
    let rest = path
        .strip_prefix("/anthropic")
        .or_else(|| path.strip_prefix("/openai"))
        .or_else(|| path.strip_prefix("/gemini"))
        .or_else(|| path.strip_prefix("/vertex"))
        .or_else(|| path.strip_prefix(crate::bedrock::PREFIX))
        .unwrap_or(path);
    let query = request_uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    format!("{}{rest}{query}", base.trim_end_matches('/'))
}

/// Reads a request body whole: refused at once (413) when its declared length is over the
/// limit, and given up (408) when the client sends nothing for `body_idle`, so a client that
/// declares a body and stalls does not hold a connection open indefinitely.
pub(crate) async fn read_body(
    app: &App,
    headers: &http::HeaderMap,
    mut body: Incoming,
) -> Result<Bytes, ProxyError> {
    let limit = app.settings.body_limit;
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ProxyError::BodyTooLarge { limit });
    }
    let idle = app.settings.body_idle;
    let mut out = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => {
                return Err(ProxyError::BodyStalled {
                    seconds: idle.as_secs(),
                });
            }
            Ok(None) => return Ok(Bytes::from(out)),
            Ok(Some(Err(_))) => return Err(ProxyError::BodyUnreadable),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(ProxyError::BodyTooLarge { limit });
            }
            out.extend_from_slice(&data);
        }
    }
}

async fn passthrough(app: &App, base: &str, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match read_body(app, &parts.headers, body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    app.stats.record_passthrough(false);
    let uri = upstream_uri(base, &parts.uri);
    send(app, parts.method, &uri, &parts.headers, body)
        .await
        .map_or_else(|e| ProxyError::Upstream(e).into_response(), relay)
}

/// Any other Bedrock call goes as it came; sluice signs the ones Claude Code makes besides model
/// calls (`GET /inference-profiles`, `/foundation-models`), for a caller it trusts, when it holds
/// credentials (the client's signature named sluice's host). See `bedrock::signable`.
async fn bedrock_passthrough(app: &App, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match read_body(app, &parts.headers, body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    app.stats.record_passthrough(false);
    let uri = upstream_uri(&app.bedrock.upstream(parts.uri.path()).await, &parts.uri);
    let signable = crate::bedrock::signable(&parts.extensions, &parts.method, parts.uri.path());
    let auth = app.bedrock.auth(&parts.headers, signable).await;
    crate::chat::send_as(app, &auth, parts.method, &uri, &parts.headers, body)
        .await
        .map_or_else(|e| ProxyError::Upstream(e).into_response(), relay)
}

/// `GET /expand?id=HASH[&session=S]`: the exact original, for a person at a loopback address.
/// With a session (header or parameter) only that session's stashes resolve.
async fn expand_route(app: &App, peer: SocketAddr, request: &Request<Incoming>) -> Response<Body> {
    // Who may ask was checked with the other operator routes (`admit.rs`).
    let _ = peer;
    let query = request.uri().query().unwrap_or("");
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .map(str::to_owned)
    };
    let Some(id) = param("id") else {
        return ProxyError::BadRequest("missing ?id=HASH").into_response();
    };
    // A session header that is not text is refused, never read as absent: absent means an
    // unscoped lookup.
    let header = match request.headers().get(SESSION_HEADER).map(|v| v.to_str()) {
        Some(Err(_)) => {
            return ProxyError::BadRequest("the session header must be ASCII text").into_response();
        }
        Some(Ok(value)) => Some(value.to_owned()),
        None => None,
    };
    let session = header.or_else(|| param("session"));
    // Sessions live under the caller's credential scope: asking for one takes the same
    // credential the agent's requests carried.
    let scope = app.turns().scope(request.headers());
    let original = match session.as_deref().and_then(session::sanitize_explicit) {
        // `POST /compact` stashes under `compact:<session>` (its freezes must never reach the
        // live session); a person asking with the session still gets those originals.
        Some(session) => match app.resolve(&format!("{scope}{session}"), &id).await {
            Some(original) => Some(original),
            None => app.resolve(&format!("compact:{scope}{session}"), &id).await,
        },
        None if session.is_some() => None,
        None => app.resolve_any(&id).await,
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
    let body = match read_body(app, &parts.headers, body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
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
    let input = TurnInput {
        dialect,
        body: &body,
        headers: &parts.headers,
        models: None,
    };
    // The same turn the proxy would forward, without a tracker; the original when it cannot be
    // rewritten.
    match one_off_rewrite(app, &input, preset_pipeline.as_ref()).await {
        Some(rewritten) => h::json(StatusCode::OK, rewritten),
        None => h::json(StatusCode::OK, body),
    }
}

/// The one-off rewrite of `input` (no tracker, the `compact:` namespace), its originals kept
/// before it is returned, since the caller may hand its markers on at once; `None` when the
/// body goes as it came.
async fn one_off_rewrite(
    app: &App,
    input: &TurnInput<'_>,
    pipeline: Option<&engine::pipeline::Pipeline>,
) -> Option<Bytes> {
    let turn = app.turns().compact(input, pipeline).await;
    match turn {
        Turn::Forward(forward) => {
            let forward = *forward;
            forward.flushed.wait(FLUSH_WAIT).await;
            Some(forward.body)
        }
        Turn::Untouched { .. } => None,
    }
}

/// `POST /anthropic/v1/messages/count_tokens` with `count_tokens: compacted`: the provider
/// counts the body sluice would forward for this transcript, so an agent's context accounting
/// sees the savings. Counting is stateless, so this is a one-off rewrite, like `/compact`.
async fn count_tokens_route(app: &App, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match read_body(app, &parts.headers, body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    let input = TurnInput {
        dialect: Dialect::Anthropic,
        body: &body,
        headers: &parts.headers,
        models: None,
    };
    let counted = one_off_rewrite(app, &input, None).await.unwrap_or(body);
    let uri = upstream_uri(&app.settings.anthropic_upstream, &parts.uri);
    match send(app, parts.method, &uri, &parts.headers, counted).await {
        Ok(response) => relay(response),
        Err(err) => ProxyError::Upstream(err).into_response(),
    }
}

/// Azure OpenAI's chat route, `/openai/deployments/{name}/chat/completions` (its query, the
/// `api-version`, goes upstream as it came).
fn is_azure_chat(path: &str) -> bool {
    !has_dot_segment(path)
        && path
            .strip_prefix("/openai/deployments/")
            .and_then(|rest| rest.split_once('/'))
            .is_some_and(|(name, rest)| !name.is_empty() && rest == "chat/completions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_found_plain_and_encoded() {
        for bad in [
            "/openai/v1/../../admin",
            "/openai/v1/%2e%2e/admin",
            "/anthropic/./v1/messages",
            "/openai/v1/%2E%2e",
        ] {
            assert!(has_dot_segment(bad), "{bad}");
        }
        for good in [
            "/openai/v1/models",
            "/anthropic/v1/messages/count_tokens",
            "/openai/v1/a..b",
        ] {
            assert!(!has_dot_segment(good), "{good}");
        }
    }

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
