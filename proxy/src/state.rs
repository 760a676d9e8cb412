//! What every request shares: [`App`] (the config, the turn service, the upstream client, the
//! counters, the LLM actor, Bedrock's credentials), the [`Settings`] it was started with, and
//! where live turns keep their state ([`StateStore`]). Everything above it in the proxy reads it;
//! it reads nothing above it.

use std::borrow::Cow;
use std::sync::Arc;

use actors::pool::WorkerPool;
use actors::sessions::{SessionLimits, Sessions};
use engine::config::Config;
use engine::store::{MemoryStore, Store};
use engine::wire::Dialect;
use modes::stats::Stats;
use modes::turn::TurnService;
use modes::{SessionState, StorePersist};
use store::DurableStore;

use crate::clock::SystemClock;
use crate::experiment::Book;
use crate::keepalive::Keeper;
use crate::store_stats::StoreView;
use crate::upstream::Upstream;

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
    /// The dashboard store; `None` with `--no-dashboard` (its routes then say how to turn it on).
    pub dashboard: Option<Arc<dashboard::Dashboard>>,
    /// Host names the dashboard's content answers besides IP literals and `localhost`
    /// (`--dashboard-host`).
    pub dashboard_hosts: Vec<String>,
    /// The provider's cache-entry lifetime the keep-alive works against
    /// (`engine::config::KeepAlive::LIFETIME`, Anthropic's five minutes). Not a flag: it is the
    /// provider's, and only tests, which cannot wait five minutes, shorten it.
    pub keepalive_lifetime: std::time::Duration,
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
            keepalive_lifetime: engine::config::KeepAlive::LIFETIME,
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
    /// The off-path measurement: observe mode's, or an experiment's control arm's; `None` in
    /// sync mode without an experiment.
    observer: Option<Observer>,
    /// A running experiment's records (`crate::experiment`).
    book: Option<Arc<Book>>,
    /// The LLM actor: model jobs for `extract_llm`, `extract` (`strategy: code`), `summarize`.
    pub llm: llm::LlmService,
    /// For `uptime_seconds`.
    started: std::time::Instant,
    /// Bedrock's region and credentials, looked up on its first request.
    pub(crate) bedrock: crate::bedrock::Bedrock,
    /// The cache keep-alive's pings (`cache.keepalive`, sync mode).
    keeper: Option<Arc<Keeper>>,
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
    /// Where the shadow runs are counted: `/stats` itself in observe mode (what it measures);
    /// a table of their own for an experiment's control arm, so that what sync did is never
    /// mixed with what it would have done.
    pub(crate) stats: Arc<Stats>,
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
        // never write the live store. An experiment's control arm is measured as observe mode
        // measures, beside the treatment's live turns.
        let stats = Arc::new(Stats::new());
        let observe = config.mode == engine::config::Mode::Observe;
        let observer = (observe || config.experiment.enabled()).then(|| {
            let shadow_store: Arc<dyn Store> =
                Arc::new(MemoryStore::new(config.store.limits(), clock.clone()));
            let shadow = TurnService::new(pipeline.clone(), shadow_store.clone(), clock.clone())
                .with_scope_secret(&settings.scope_secret)
                .with_sessions(sessions_over(shadow_store), amortize);
            Observer {
                pool: WorkerPool::new(
                    "sluice-observe",
                    config.observe.workers,
                    config.observe.max_queue,
                ),
                shadow: Arc::new(shadow),
                stats: if observe {
                    stats.clone()
                } else {
                    Arc::new(Stats::new())
                },
            }
        });
        let turns = if observe {
            live
        } else {
            live.with_sessions(sessions_over(store.clone()), amortize)
                .with_preparer()
                .with_experiment(config.experiment.clone())
        };
        // The experiment's records need a store every replica and restart shares.
        let book = durable
            .as_ref()
            .and_then(|d| Book::start(&config.experiment, d, &runtime));
        // Model calls go through the agent's own pooled client; with a durable store, accepted
        // results are kept there too, for every replica and the next process.
        let results = durable
            .clone()
            .map(|d| Arc::new(DurableResults(d)) as Arc<dyn llm::ResultStore>);
        let llm = llm::LlmService::start_with(
            Arc::new(upstream.clone()),
            llm::CheapModelEnv::from_env(),
            llm::ServiceOptions {
                isolation: settings.sandbox.clone(),
                ..llm::ServiceOptions::default()
            },
            results,
        );
        Ok(App {
            keeper: Keeper::start(&config, settings.keepalive_lifetime, &upstream, &turns),
            bedrock: crate::bedrock::Bedrock::new(
                settings.bedrock_upstream.clone(),
                settings.bedrock_region.clone(),
                settings.bedrock_credentials.clone(),
            ),
            config,
            turns,
            stats,
            upstream,
            settings,
            observer,
            book,
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
            ("experiment", config.experiment != running.experiment),
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

    /// Time since the process started (`uptime_seconds`).
    pub(crate) fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// Observe mode's measurement (every request forwarded untouched); `None` in sync mode.
    pub(crate) fn observing(&self) -> Option<&Observer> {
        self.observer
            .as_ref()
            .filter(|_| self.config.mode == engine::config::Mode::Observe)
    }

    /// The shadow run of an experiment's control sessions (and of observe mode).
    pub(crate) fn observer(&self) -> Option<&Observer> {
        self.observer.as_ref()
    }

    /// A running experiment's records.
    pub(crate) fn book(&self) -> Option<&Arc<Book>> {
        self.book.as_ref()
    }

    pub(crate) fn ab_view(&self) -> crate::ab_stats::AbView {
        let Some(book) = &self.book else {
            return crate::ab_stats::AbView::default();
        };
        let (written, lost) = book.writes();
        crate::ab_stats::AbView {
            report: book.latest(),
            running: book.recording(),
            written,
            lost,
        }
    }

    /// The keep-alive's keeper, when `cache.keepalive` is on in sync mode.
    pub(crate) fn keeper(&self) -> Option<&Arc<Keeper>> {
        self.keeper.as_ref()
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
        let service = self.observing().map_or(&self.turns, |o| &o.shadow);
        service
            .sessions()
            .expect("the turn service of the running mode has session actors")
    }

    /// The dashboard store, when it is on.
    pub fn dashboard(&self) -> Option<&Arc<dashboard::Dashboard>> {
        self.settings.dashboard.as_ref()
    }

    pub(crate) fn mode(&self) -> &'static str {
        match self.config.mode {
            engine::config::Mode::Sync => "sync",
            engine::config::Mode::Observe => "observe",
        }
    }
}
