//! `sluice serve`: its flags, the logs, the state and dashboard stores, the sandbox, the server itself and reloading on SIGHUP.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use engine::config;
use engine::store::MemoryStore;

use super::{ConfigArgs, Failure, ListenArg, config_failure};
use crate::clock::SystemClock;

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    #[command(flatten)]
    pub(super) listen: ListenArg,
    /// Where sessions' state lives: `sqlite:PATH` (the default, under the user's state
    /// directory), `redis://HOST:PORT/DB` (shared by replicas),
    /// `redis+sentinel://HOST:PORT,.../PRIMARY/DB` (replicas, following a Sentinel failover),
    /// `memory` (this run only) or `off`. Beats `store.backend` in the config.
    #[arg(long, env = "SLUICE_STORE", hide_env_values = true)]
    pub(super) store: Option<store::StoreSpec>,
    /// Log lines as `text` or `json` (one object a line). What is logged: `SLUICE_LOG`, else
    /// `RUST_LOG`, else `info` (which includes one access line per request).
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(super) log_format: LogFormat,
    /// Where Anthropic Messages requests go.
    #[arg(
        long,
        env = "SLUICE_ANTHROPIC_UPSTREAM",
        default_value = "https://api.anthropic.com"
    )]
    pub(super) anthropic_upstream: String,
    /// Where OpenAI chat-completions requests go.
    #[arg(
        long,
        env = "SLUICE_OPENAI_UPSTREAM",
        default_value = "https://api.openai.com"
    )]
    pub(super) openai_upstream: String,
    /// Where Gemini `generateContent` requests go (`/gemini/...`).
    #[arg(
        long,
        env = "SLUICE_GEMINI_UPSTREAM",
        default_value = "https://generativelanguage.googleapis.com"
    )]
    pub(super) gemini_upstream: String,
    /// Where Vertex AI requests go (`/vertex/...`); unset, each goes to the region's endpoint
    /// its path names (`https://LOCATION-aiplatform.googleapis.com`).
    #[arg(long, env = "SLUICE_VERTEX_UPSTREAM")]
    pub(super) vertex_upstream: Option<String>,
    /// Where Bedrock requests go (`/bedrock/...`); unset, the signing region's endpoint
    /// (`https://bedrock-runtime.REGION.amazonaws.com`).
    #[arg(long, env = "SLUICE_BEDROCK_UPSTREAM")]
    pub(super) bedrock_upstream: Option<String>,
    /// The region Bedrock requests are signed for; unset, the AWS chain's (`AWS_REGION`,
    /// `AWS_DEFAULT_REGION`, the profile's), else us-east-1. Credentials come from the AWS
    /// chain (environment, profile, SSO, web identity, container, instance metadata).
    #[arg(long, env = "SLUICE_BEDROCK_REGION")]
    pub(super) bedrock_region: Option<String>,
    /// Seconds to wait for an upstream connection.
    #[arg(long, env = "SLUICE_CONNECT_TIMEOUT", default_value_t = 10)]
    pub(super) connect_timeout: u64,
    /// Seconds to wait for upstream response headers (there is no overall body timeout).
    #[arg(long, env = "SLUICE_FIRST_BYTE_TIMEOUT", default_value_t = 600)]
    pub(super) first_byte_timeout: u64,
    /// `sync` compacts; `observe` forwards untouched and measures what sync would save.
    /// Overrides the config's `mode:`.
    #[arg(long, env = "SLUICE_MODE")]
    pub(super) mode: Option<engine::config::Mode>,
    /// Runs an A/B experiment: this share of sessions (0 < share < 1) is forwarded untouched
    /// as the control arm, the rest compacted, and both arms' provider bills are recorded in
    /// the state store (`sluice ab report`, `GET /ab`). Overrides `experiment.control_share`.
    #[arg(long, env = "SLUICE_AB", value_name = "CONTROL_SHARE")]
    pub(super) ab: Option<f64>,
    /// Largest request body accepted, in MiB (413 beyond it, at once when declared).
    #[arg(long, env = "SLUICE_BODY_LIMIT_MB", default_value_t = 32)]
    pub(super) body_limit_mb: usize,
    /// Seconds a request body may send nothing before it is given up (408).
    #[arg(long, env = "SLUICE_BODY_IDLE_TIMEOUT", default_value_t = 30)]
    pub(super) body_idle_timeout: u64,
    /// Seconds a connection may take to send a request's headers, or sit idle between requests.
    #[arg(long, env = "SLUICE_HEADER_TIMEOUT", default_value_t = 10)]
    pub(super) header_timeout: u64,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS", default_value_t = 1024)]
    pub(super) max_connections: usize,
    /// Networks besides loopback whose callers may use /stats, /metrics, /expand and /compact,
    /// comma-separated CIDRs (`10.0.0.0/8,fd00::/8`). `SLUICE_ADMIN_TOKEN` adds a bearer token.
    #[arg(long, env = "SLUICE_TRUSTED", value_delimiter = ',')]
    pub(super) trusted: Vec<crate::admit::Cidr>,
    /// Where model-written filters run: `child` (a child process of this binary, which nothing
    /// a filter does can take down) or `in-process` (trusted programs only, logged at start).
    #[arg(long, env = "SLUICE_SANDBOX", value_enum, default_value_t = SandboxArg::Child)]
    pub(super) sandbox: SandboxArg,
    #[command(flatten)]
    pub(super) dashboard: DashboardArgs,
}

/// The dashboard (`/dashboard/`): what happened per request, session and component. On with
/// every state store: in its own file beside a `sqlite:` store, in memory (this run only) with
/// any other, or in the file `--dashboard-db` names.
#[derive(Debug, Clone, Args)]
pub(super) struct DashboardArgs {
    /// The dashboard is on with every store; this flag is kept for scripts that pass it.
    #[arg(long, env = "SLUICE_DASHBOARD", conflicts_with = "no_dashboard")]
    pub(super) dashboard: bool,
    /// No dashboard: nothing is captured, and /dashboard/ says how to turn it on.
    #[arg(long)]
    pub(super) no_dashboard: bool,
    /// The dashboard's SQLite file, or `:memory:` (this run only). Default: beside a `sqlite:`
    /// state store (`state.db` gives `state.dashboard.db`), in memory with any other store.
    #[arg(long, env = "SLUICE_DASHBOARD_DB")]
    pub(super) dashboard_db: Option<PathBuf>,
    /// Also keep the text of the messages sluice changed (redacted, 16 KiB each, 24 a request).
    /// Off by default; a caller opts out with `x-context-guru-capture: off`.
    #[arg(long, env = "SLUICE_DASHBOARD_CONTENT")]
    pub(super) dashboard_content: bool,
    /// Hours a request's row is kept (0: no age limit).
    #[arg(long, env = "SLUICE_DASHBOARD_RETENTION_HOURS", default_value_t = 168)]
    pub(super) dashboard_retention_hours: u64,
    /// MiB the rows may use before the oldest are deleted (0: no limit). Default: 512 in a
    /// file, 64 in memory.
    #[arg(long, env = "SLUICE_DASHBOARD_MAX_MB")]
    pub(super) dashboard_max_mb: Option<u64>,
    /// A host name the dashboard's content and config answer to besides IP literals and
    /// `localhost` (repeat, or comma-separate): the name an operator's browser uses.
    #[arg(
        long = "dashboard-host",
        env = "SLUICE_DASHBOARD_HOSTS",
        value_delimiter = ','
    )]
    pub(super) dashboard_hosts: Vec<String>,
}

/// `--dashboard-max-mb`'s default for a file.
const DASHBOARD_FILE_MB: u64 = 512;
/// `--dashboard-max-mb`'s default in memory: the rows share the process's memory.
const DASHBOARD_MEMORY_MB: u64 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum LogFormat {
    Text,
    Json,
}

/// Logs to stderr: the filter from `SLUICE_LOG`, else `RUST_LOG`, else `info`.
pub(super) fn init_logs(format: LogFormat) {
    let filter = ["SLUICE_LOG", "RUST_LOG"]
        .iter()
        .find_map(|key| std::env::var(key).ok().filter(|v| !v.is_empty()))
        .and_then(|v| tracing_subscriber::EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum SandboxArg {
    Child,
    InProcess,
}

/// The store `serve` keeps state in: `--store` / `SLUICE_STORE`, else `store.backend`, else
/// nothing kept when `store.enabled` is false, else SQLite under the user's state directory, in
/// a file of the listen address's own (`store::sqlite::default_path_for`).
pub(super) fn store_spec(
    flag: Option<store::StoreSpec>,
    config: &config::StoreConfig,
    listen: std::net::SocketAddr,
) -> Result<store::StoreSpec, Failure> {
    use store::StoreSpec;
    Ok(match (flag, &config.backend) {
        (Some(spec), _) => spec,
        (None, _) if !config.enabled => StoreSpec::Off,
        (None, Some(backend)) => backend
            .parse()
            .map_err(|e| Failure(format!("store.backend: {e}")))?,
        (None, None) => StoreSpec::Sqlite(store::sqlite::default_path_for(listen)),
    })
}

/// The dashboard `serve` starts, and the start-up log's words for where it keeps its rows (or
/// why there is none).
pub(super) struct DashboardChoice {
    pub(super) dashboard: Option<Arc<dashboard::Dashboard>>,
    pub(super) said: String,
}

/// The dashboard `serve` captures into. On with every store; `--no-dashboard` turns it off.
/// Its rows go to the file `--dashboard-db` names, else beside a `sqlite:` state store (its own
/// file: history never competes with sessions' state for the store's writer), else to memory
/// for this run: a state store in memory, off or in Redis writes nothing to disk for it.
pub(super) fn dashboard(
    args: &DashboardArgs,
    spec: &store::StoreSpec,
) -> Result<DashboardChoice, Failure> {
    use dashboard::{Dashboard, DashboardOptions, beside};
    use store::StoreSpec;
    // `--dashboard` asks for what every store now has; clap refuses it with `--no-dashboard`.
    debug_assert!(!(args.dashboard && args.no_dashboard));
    if args.no_dashboard {
        return Ok(DashboardChoice {
            dashboard: None,
            said: "off (--no-dashboard): nothing is captured; /dashboard/ says how to turn it on"
                .into(),
        });
    }
    let on_disk = match spec {
        StoreSpec::Sqlite(path) => Some(path.as_path()),
        _ => None,
    };
    if let (Some(db), Some(state)) = (&args.dashboard_db, on_disk)
        && db == state
    {
        return Err(Failure(
            "--dashboard-db names the state store's own file; give the dashboard a file of its own"
                .into(),
        ));
    }
    let (path, why) = match (&args.dashboard_db, on_disk) {
        (Some(path), _) if path.as_os_str() == ":memory:" => (None, "--dashboard-db :memory:"),
        (Some(path), _) => (Some(path.clone()), "--dashboard-db"),
        (None, Some(state)) => (Some(beside(state)), "beside the state store"),
        (None, None) => (
            None,
            match spec {
                StoreSpec::Memory => "the state store is in memory",
                StoreSpec::Off => "no state store is kept",
                _ => "the state store is not a file",
            },
        ),
    };
    let hours = |h: u64| (h > 0).then(|| std::time::Duration::from_secs(h.saturating_mul(3600)));
    let max_mb = |in_memory: bool| {
        args.dashboard_max_mb.unwrap_or(if in_memory {
            DASHBOARD_MEMORY_MB
        } else {
            DASHBOARD_FILE_MB
        })
    };
    let bytes = |mb: u64| (mb > 0).then_some(mb.saturating_mul(1 << 20));
    let options = DashboardOptions {
        path: path.clone(),
        retention: hours(args.dashboard_retention_hours),
        max_bytes: bytes(max_mb(path.is_none())),
        content: args.dashboard_content,
        ..DashboardOptions::default()
    };
    // History must never stop sluice from starting: a file that cannot be opened (a read-only
    // directory, say) leaves the dashboard in memory for this run, said out loud.
    let (dashboard, why) = match Dashboard::open(options.clone()) {
        Ok(dashboard) => (dashboard, why),
        Err(error) => {
            tracing::warn!(%error, "the dashboard's file cannot be used; keeping this run's rows in memory");
            let dashboard = Dashboard::open(DashboardOptions {
                path: None,
                max_bytes: bytes(max_mb(true)),
                ..options
            })
            .map_err(|e| Failure(format!("dashboard: {e}")))?;
            (dashboard, "its file cannot be used")
        }
    };
    // One label per session: the logs hash session keys with the dashboard's key (before any
    // request, so before the first log line that names a session), as its rows do.
    modes::loud::use_log_key(dashboard.session_key().to_vec());
    let bound = match args.dashboard_max_mb {
        Some(0) => "no size limit".to_owned(),
        _ => format!("at most {} MiB", max_mb(dashboard.path().is_none())),
    };
    let said = match dashboard.path() {
        Some(file) => format!("in {} ({why}), {bound}", file.display()),
        None => format!(
            "in memory, this run only ({why}), {bound}; --dashboard-db PATH keeps it in a file"
        ),
    };
    Ok(DashboardChoice {
        dashboard: Some(Arc::new(dashboard)),
        said,
    })
}

pub(super) fn state_store(
    spec: store::StoreSpec,
    config: &config::StoreConfig,
) -> Result<crate::state::StateStore, Failure> {
    use crate::state::StateStore;
    use std::time::Duration;
    use store::{DurableLimits, DurableStore, StoreSpec};

    tracing::info!(store = %spec, "state store");
    let limits = DurableLimits {
        ttl: Duration::from_secs(config.ttl_seconds),
        session_stashes: config.session_max_stashes,
        session_bytes: config.session_max_mb.saturating_mul(1 << 20),
        cache_bytes: config.rewind_reserve_mb.saturating_mul(1 << 20),
        lease_wait: Duration::from_millis(config.lease_wait_ms),
        outage_grace: Duration::from_secs(config.outage_grace_seconds),
        ..DurableLimits::DEFAULT
    };
    let backend: Arc<dyn store::Backend> = match spec {
        StoreSpec::Memory => {
            let clock = Arc::new(SystemClock);
            let store = MemoryStore::new(config.limits(), clock);
            return Ok(StateStore::Local(Arc::new(store)));
        }
        StoreSpec::Off => return Ok(StateStore::Local(Arc::new(engine::store::NopStore))),
        StoreSpec::Sqlite(path) => Arc::new(
            store::sqlite::SqliteBackend::open(&path)
                .map_err(|e| Failure(format!("store: {e}")))?,
        ),
        StoreSpec::Redis(url) => Arc::new(
            store::redis::RedisBackend::connect(&url)
                .map_err(|e| Failure(format!("store {}: {e}", store::redact_url(&url))))?,
        ),
    };
    Ok(StateStore::Durable(DurableStore::new(backend, limits)))
}

/// The sandbox `serve` runs filters in. The child is this binary; when it cannot be found the
/// proxy does not start, so the sandbox never weakens without the operator asking for it.
pub(super) fn sandbox_isolation(choice: SandboxArg) -> Result<llm::Isolation, Failure> {
    match choice {
        SandboxArg::InProcess => {
            tracing::warn!(
                "model-written filters run in this process (--sandbox in-process): a filter that allocates without bound can abort sluice"
            );
            Ok(llm::Isolation::InProcess)
        }
        SandboxArg::Child => {
            let command = std::env::current_exe().map_err(|e| {
                Failure(format!(
                    "cannot find sluice's own executable for the sandbox child ({e}); pass --sandbox in-process to run model-written filters in this process"
                ))
            })?;
            Ok(llm::Isolation::Child {
                command,
                args: vec![llm::sandbox::CHILD_ARG.to_owned()],
            })
        }
    }
}

pub(super) fn serve(args: &ServeArgs) -> Result<(), Failure> {
    use crate::state::{App, Settings};
    use crate::upstream::{Timeouts, Upstream};
    use std::time::Duration;

    init_logs(args.log_format);
    let mut config = args.config.load()?;
    overrides(&mut config, args.mode, args.ab)?;
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let spec = store_spec(args.store.clone(), &config.store, args.listen.listen)?;
        let DashboardChoice {
            dashboard,
            said: dashboard_said,
        } = dashboard(&args.dashboard, &spec)?;
        if config.experiment.running() && matches!(spec, store::StoreSpec::Memory | store::StoreSpec::Off) {
            return Err(Failure(format!(
                "an experiment keeps its records in the state store, so every replica and restart reads one report: it needs `--store sqlite:PATH` or `redis://`, not `{spec}`"
            )));
        }
        let state = state_store(spec, &config.store)?;
        let timeouts = Timeouts {
            connect: Duration::from_secs(args.connect_timeout),
            first_byte: Duration::from_secs(args.first_byte_timeout),
        };
        let settings = Settings {
            anthropic_upstream: args.anthropic_upstream.clone(),
            openai_upstream: args.openai_upstream.clone(),
            gemini_upstream: args.gemini_upstream.clone(),
            vertex_upstream: args.vertex_upstream.clone(),
            bedrock_upstream: args.bedrock_upstream.clone(),
            bedrock_region: args.bedrock_region.clone(),
            // The AWS chain, looked up on the first Bedrock request.
            bedrock_credentials: crate::bedrock::CredentialSource::Chain,
            body_limit: args.body_limit_mb.saturating_mul(1 << 20),
            body_idle: Duration::from_secs(args.body_idle_timeout.max(1)),
            header_timeout: Duration::from_secs(args.header_timeout.max(1)),
            max_connections: args.max_connections.max(1),
            admission: crate::admit::Admission {
                trusted: args.trusted.clone(),
                // From the environment only: a token on the command line shows in `ps`.
                token: std::env::var("SLUICE_ADMIN_TOKEN").ok().filter(|t| !t.is_empty()),
            },
            // Model-written filters run in a child process of this binary: nothing they do
            // (an allocation that aborts, an out-of-memory kill) can take the proxy down.
            sandbox: sandbox_isolation(args.sandbox)?,
            // From the environment only: a secret on the command line shows in `ps`.
            scope_secret: std::env::var("SLUICE_SCOPE_SECRET")
                .ok()
                .filter(|s| !s.is_empty())
                .map_or_else(
                    || modes::turn::DEFAULT_SCOPE_SECRET.to_vec(),
                    String::into_bytes,
                ),
            dashboard,
            dashboard_hosts: args.dashboard.dashboard_hosts.clone(),
            ..Settings::default()
        };
        let pipeline_names = config.pipeline.join(", ");
        let app = App::new(config, settings, Upstream::new(timeouts), state)
            .map_err(|errs| config_failure(Path::new("config"), &errs))?;
        // Before listening: the first request should not pay for building tables.
        engine::tokens::warm_up();
        let (listener, local) = crate::server::bind(args.listen.listen)
            .await
            .map_err(|e| Failure(format!("listen on {}: {e}", args.listen.listen)))?;
        tracing::info!(%local, pipeline = %pipeline_names, "sluice is listening.");
        tracing::info!(
            url = %format!("http://{local}/dashboard/"),
            kept = %dashboard_said,
            content = args.dashboard.dashboard_content,
            "dashboard"
        );
        if !local.ip().is_loopback() {
            tracing::warn!(
                %local,
                "listening beyond loopback: any host that reaches this port can send traffic through sluice; operator routes answer loopback and --trusted networks only"
            );
        }
        let app = Arc::new(app);
        reload_on_hangup(app.clone(), args.config.clone(), (args.mode, args.ab));
        crate::server::serve(
            listener,
            app,
            crate::server::stop_signal(),
            crate::server::DEFAULT_DRAIN,
        )
        .await;
        tracing::info!("sluice stopped.");
        Ok(())
    })
}

/// On SIGHUP, reads the config again (the same `--config` / `--preset` / environment) and applies
/// it; a config with problems is refused whole, every problem logged, and the running one stays.
/// What the command line says over the config file: `--mode`, `--ab`. A combination that
/// cannot run is refused here, at start (and a reload that would make one keeps the running
/// config).
pub(super) fn overrides(
    config: &mut config::Config,
    mode: Option<config::Mode>,
    ab: Option<f64>,
) -> Result<(), Failure> {
    if let Some(mode) = mode {
        config.mode = mode;
    }
    if let Some(share) = ab {
        if !(share > 0.0 && share < 1.0) {
            return Err(Failure(format!(
                "--ab {share}: the control arm's share must be strictly between 0 and 1 (0.5 splits sessions evenly)"
            )));
        }
        config.experiment.control_share = Some(share);
    }
    if config.experiment.running() && config.pipeline.is_empty() {
        return Err(Failure(
            "an A/B experiment compares sluice's pipeline with no sluice, and this pipeline is empty (`--preset off`, `pipeline: []`): choose a preset, or drop --ab".to_owned(),
        ));
    }
    if config.experiment.running() && config.mode == config::Mode::Observe {
        return Err(Failure(
            "an A/B experiment (--ab, experiment:) compacts its treatment arm and cannot run in observe mode: use --mode sync, or observe alone to measure without touching any request".to_owned(),
        ));
    }
    Ok(())
}

pub(super) fn reload_on_hangup(
    app: Arc<crate::state::App>,
    config: ConfigArgs,
    (mode, ab): (Option<config::Mode>, Option<f64>),
) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            return;
        };
        while hangups.recv().await.is_some() {
            let loaded = config
                .load()
                // One problem a line, as the command line prints them: one log line each.
                .map_err(|Failure(why)| {
                    why.lines()
                        .map(str::trim)
                        .map(str::to_owned)
                        .collect::<Vec<String>>()
                })
                .and_then(|mut c| {
                    // `--mode` and `--ab` on the command line beat the file, on a reload as at
                    // start.
                    overrides(&mut c, mode, ab).map_err(|Failure(why)| vec![why])?;
                    app.reload(&c)
                        .map(|restart| (c.pipeline.join(", "), restart))
                        .map_err(|errs| errs.iter().map(ToString::to_string).collect())
                });
            match loaded {
                Ok((pipeline, restart)) => {
                    tracing::info!(%pipeline, "config reloaded");
                    if !restart.is_empty() {
                        tracing::warn!(keys = %restart.join(", "), "changed, but only a restart applies them");
                    }
                }
                Err(problems) => {
                    for problem in &problems {
                        tracing::warn!(%problem, "config reload refused");
                    }
                }
            }
        }
    });
    #[cfg(not(unix))]
    let _ = (app, config);
}
