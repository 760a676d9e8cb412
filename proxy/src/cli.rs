//! The `sluice` command line: `serve`, `compact`, `config check`, `presets`, `replay`, `tune`, `filters`.
//!
//! Exit codes: 0 success, 1 bad input or a failed check (one line on stderr naming the problem),
//! 2 usage errors (from clap).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use engine::config::{self, Config};
use engine::store::{MemoryStore, Store};
use engine::wire::Dialect;

use crate::clock::SystemClock;

/// A sidecar proxy that cuts what LLM agents pay for context, without losing anything.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about = "A sidecar proxy that cuts what LLM agents pay for context, without losing anything.", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The command line as clap sees it: `docs/configuration.md`'s reference is rendered from it.
#[cfg(test)]
pub(crate) fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy: point agents at http://LISTEN/anthropic or http://LISTEN/openai/v1.
    Serve(Box<ServeArgs>),
    /// Rewrite one request body offline: the result on stdout, the report on stderr or --report.
    Compact(CompactArgs),
    /// Check config files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// List the presets and their pipelines.
    Presets,
    /// Run a command (an agent) through sluice: start `sluice serve` unless one answers on
    /// `--listen`, point the command's ANTHROPIC_BASE_URL and OPENAI_BASE_URL at it, and stop
    /// what was started when the command exits. `sluice wrap -- claude`.
    Wrap(WrapArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell), generated from this CLI.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff), generated from this CLI.
    Man,
    /// Write a commented config file with the embedded defaults (`-` for stdout).
    Init {
        #[arg(default_value = "sluice.yaml")]
        path: PathBuf,
        /// Replace a file that exists.
        #[arg(long)]
        force: bool,
    },
    /// Replay recorded sessions turn by turn and bill them with a prompt-cache cost model.
    Replay(ReplayArgs),
    /// Sweep settings over recorded sessions and recommend one.
    Tune {
        #[command(subcommand)]
        command: TuneCommand,
    },
    /// The command-output filters of `cmdfilter`: list, test, apply.
    Filters {
        #[command(subcommand)]
        command: FiltersCommand,
    },
}

#[derive(Debug, Args)]
struct ReplayArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// `md` (default) or `json` (with a `totals` object).
    #[arg(long, default_value = "md")]
    format: ReportFormat,
    /// Also write report.md, report.json and SVG charts here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seconds between turns on the simulated clock.
    #[arg(long, default_value_t = 30)]
    gap: u64,
    /// Bill the bodies as recorded, without the agent preamble a corpus's `replay.json` says its
    /// recordings lack (Claude Code's system prompt and tools).
    #[arg(long)]
    no_preamble: bool,
    /// How the model is billed for expanding a marker: `pattern` (the lines holding what its
    /// answer needed, as the expand tool's `pattern` returns them) or `whole` (the original).
    #[arg(long, default_value = "pattern")]
    expand: ExpandArg,
    /// Replay chat-completions sessions as another dialect's agents would send them
    /// (`responses` or `gemini`): the same conversations, converted turn by turn.
    #[arg(long)]
    as_dialect: Option<Dialect>,
    /// Request bodies (.json, split into turns), per-turn JSONL, or folders of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ExpandArg {
    Pattern,
    Whole,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ReportFormat {
    Md,
    Json,
}

#[derive(Debug, Subcommand)]
enum TuneCommand {
    /// Billed cost with cold_cache on and off, for each idle gap between turns.
    ColdCache {
        #[command(flatten)]
        config: ConfigArgs,
        /// Idle gaps to try, in seconds.
        #[arg(long, value_delimiter = ',', default_value = "60,300,600,3600")]
        gaps: Vec<u64>,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum FiltersCommand {
    /// List the builtin filters (and those of the given files), in selection order.
    List { files: Vec<PathBuf> },
    /// Run the inline tests of the builtins and of the given filter files.
    Test { files: Vec<PathBuf> },
    /// Apply filter NAME to a file (or stdin) and print the result.
    Apply {
        name: String,
        /// The output to filter; `-` or nothing reads stdin.
        input: Option<PathBuf>,
        /// Filter files to load besides the builtins.
        #[arg(long = "filters")]
        files: Vec<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a config file (layered on the embedded default) and print the pipeline it
    /// builds; every problem is listed.
    Check { file: PathBuf },
}

/// Where the pipeline comes from: a file, a preset, or the embedded default.
///
/// The environment variables are read by `ConfigArgs::choice`, not by clap: clap's
/// `conflicts_with` also fires on values from the environment, so `SLUICE_CONFIG` exported in a
/// shell made every `--preset` on the command line a usage error. Here the conflict covers the
/// command line only, and a flag on the command line beats either variable.
#[derive(Debug, Clone, Args)]
struct ConfigArgs {
    /// A YAML config file, layered on the embedded default (else `SLUICE_CONFIG`).
    #[arg(long, conflicts_with = "preset")]
    config: Option<PathBuf>,
    /// A preset name, see `sluice presets` (else `SLUICE_PRESET`).
    #[arg(long)]
    preset: Option<String>,
}

/// What `ConfigArgs` resolve to.
#[derive(Debug)]
enum ConfigChoice {
    File(PathBuf),
    Preset(String),
    Embedded,
}

/// `--listen`, declared once for every subcommand that takes it.
#[derive(Debug, Args)]
struct ListenArg {
    /// Where sluice listens (for `wrap`: or is listening already).
    #[arg(long, env = "SLUICE_LISTEN", default_value = "127.0.0.1:4000")]
    listen: std::net::SocketAddr,
}

#[derive(Debug, Args)]
struct WrapArgs {
    #[command(flatten)]
    listen: ListenArg,
    /// Arguments for the `sluice serve` it starts (`--preset agent`, `--store memory`, ...).
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_args: Vec<String>,
    /// Where the started sluice logs (else nowhere: the command owns the terminal).
    #[arg(long)]
    log: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    listen: ListenArg,
    /// Where sessions' state lives: `sqlite:PATH` (the default, under the user's state
    /// directory), `redis://HOST:PORT/DB` (shared by replicas), `memory` (this run only) or
    /// `off`. Beats `store.backend` in the config.
    #[arg(long, env = "SLUICE_STORE", hide_env_values = true)]
    store: Option<actors::store::StoreSpec>,
    /// Log lines as `text` or `json` (one object a line). What is logged: `SLUICE_LOG`, else
    /// `RUST_LOG`, else `info` (which includes one access line per request).
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Where Anthropic Messages requests go.
    #[arg(
        long,
        env = "SLUICE_ANTHROPIC_UPSTREAM",
        default_value = "https://api.anthropic.com"
    )]
    anthropic_upstream: String,
    /// Where OpenAI chat-completions requests go.
    #[arg(
        long,
        env = "SLUICE_OPENAI_UPSTREAM",
        default_value = "https://api.openai.com"
    )]
    openai_upstream: String,
    /// Where Gemini `generateContent` requests go (`/gemini/...`).
    #[arg(
        long,
        env = "SLUICE_GEMINI_UPSTREAM",
        default_value = "https://generativelanguage.googleapis.com"
    )]
    gemini_upstream: String,
    /// Where Vertex AI requests go (`/vertex/...`); unset, each goes to the region's endpoint
    /// its path names (`https://LOCATION-aiplatform.googleapis.com`).
    #[arg(long, env = "SLUICE_VERTEX_UPSTREAM")]
    vertex_upstream: Option<String>,
    /// Where Bedrock requests go (`/bedrock/...`); unset, the signing region's endpoint
    /// (`https://bedrock-runtime.REGION.amazonaws.com`).
    #[arg(long, env = "SLUICE_BEDROCK_UPSTREAM")]
    bedrock_upstream: Option<String>,
    /// The region Bedrock requests are signed for; unset, the AWS chain's (`AWS_REGION`,
    /// `AWS_DEFAULT_REGION`, the profile's), else us-east-1. Credentials come from the AWS
    /// chain (environment, profile, SSO, web identity, container, instance metadata).
    #[arg(long, env = "SLUICE_BEDROCK_REGION")]
    bedrock_region: Option<String>,
    /// Seconds to wait for an upstream connection.
    #[arg(long, env = "SLUICE_CONNECT_TIMEOUT", default_value_t = 10)]
    connect_timeout: u64,
    /// Seconds to wait for upstream response headers (there is no overall body timeout).
    #[arg(long, env = "SLUICE_FIRST_BYTE_TIMEOUT", default_value_t = 600)]
    first_byte_timeout: u64,
    /// `sync` compacts; `observe` forwards untouched and measures what sync would save.
    /// Overrides the config's `mode:`.
    #[arg(long, env = "SLUICE_MODE")]
    mode: Option<engine::config::Mode>,
    /// Largest request body accepted, in MiB (413 beyond it, at once when declared).
    #[arg(long, env = "SLUICE_BODY_LIMIT_MB", default_value_t = 32)]
    body_limit_mb: usize,
    /// Seconds a request body may send nothing before it is given up (408).
    #[arg(long, env = "SLUICE_BODY_IDLE_TIMEOUT", default_value_t = 30)]
    body_idle_timeout: u64,
    /// Seconds a connection may take to send a request's headers, or sit idle between requests.
    #[arg(long, env = "SLUICE_HEADER_TIMEOUT", default_value_t = 10)]
    header_timeout: u64,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// Networks besides loopback whose callers may use /stats, /metrics, /expand and /compact,
    /// comma-separated CIDRs (`10.0.0.0/8,fd00::/8`). `SLUICE_ADMIN_TOKEN` adds a bearer token.
    #[arg(long, env = "SLUICE_TRUSTED", value_delimiter = ',')]
    trusted: Vec<crate::admit::Cidr>,
    /// Where model-written filters run: `child` (a child process of this binary, which nothing
    /// a filter does can take down) or `in-process` (trusted programs only, logged at start).
    #[arg(long, env = "SLUICE_SANDBOX", value_enum, default_value_t = SandboxArg::Child)]
    sandbox: SandboxArg,
    #[command(flatten)]
    dashboard: DashboardArgs,
}

/// The dashboard (`/dashboard/`): what happened per request, session and component.
#[derive(Debug, Clone, Args)]
struct DashboardArgs {
    /// Capture every request for the dashboard (on by default when the state store is a file).
    #[arg(long, env = "SLUICE_DASHBOARD", conflicts_with = "no_dashboard")]
    dashboard: bool,
    /// No dashboard, whatever the store.
    #[arg(long)]
    no_dashboard: bool,
    /// The dashboard's SQLite file (default: beside the state store, `state.dashboard.db`), or
    /// `:memory:`.
    #[arg(long, env = "SLUICE_DASHBOARD_DB")]
    dashboard_db: Option<PathBuf>,
    /// Also keep the text of the messages sluice changed (redacted, 16 KiB each, 24 a request).
    /// Off by default; a caller opts out with `x-context-guru-capture: off`.
    #[arg(long, env = "SLUICE_DASHBOARD_CONTENT")]
    dashboard_content: bool,
    /// Hours a request's row is kept (0: no age limit).
    #[arg(long, env = "SLUICE_DASHBOARD_RETENTION_HOURS", default_value_t = 168)]
    dashboard_retention_hours: u64,
    /// MiB the rows may use before the oldest are deleted (0: no limit).
    #[arg(long, env = "SLUICE_DASHBOARD_MAX_MB", default_value_t = 512)]
    dashboard_max_mb: u64,
    /// A host name the dashboard's content and config answer to besides IP literals and
    /// `localhost` (repeat, or comma-separate): the name an operator's browser uses.
    #[arg(
        long = "dashboard-host",
        env = "SLUICE_DASHBOARD_HOSTS",
        value_delimiter = ','
    )]
    dashboard_hosts: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Logs to stderr: the filter from `SLUICE_LOG`, else `RUST_LOG`, else `info`.
fn init_logs(format: LogFormat) {
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
enum SandboxArg {
    Child,
    InProcess,
}

/// The store `serve` keeps state in: `--store` / `SLUICE_STORE`, else `store.backend`, else
/// nothing kept when `store.enabled` is false, else SQLite under the user's state directory, in
/// a file of the listen address's own (`actors::store::sqlite::default_path_for`).
fn store_spec(
    flag: Option<actors::store::StoreSpec>,
    config: &config::StoreConfig,
    listen: std::net::SocketAddr,
) -> Result<actors::store::StoreSpec, Failure> {
    use actors::store::StoreSpec;
    Ok(match (flag, &config.backend) {
        (Some(spec), _) => spec,
        (None, _) if !config.enabled => StoreSpec::Off,
        (None, Some(backend)) => backend
            .parse()
            .map_err(|e| Failure(format!("store.backend: {e}")))?,
        (None, None) => StoreSpec::Sqlite(actors::store::sqlite::default_path_for(listen)),
    })
}

/// The dashboard `serve` captures into: on by default when the state store is a file (its own
/// file beside it), else only with `--dashboard`; `--no-dashboard` turns it off.
fn dashboard(
    args: &DashboardArgs,
    spec: &actors::store::StoreSpec,
    listen: std::net::SocketAddr,
) -> Result<Option<Arc<actors::dashboard::Dashboard>>, Failure> {
    use actors::dashboard::{Dashboard, DashboardOptions, beside};
    use actors::store::StoreSpec;
    let on_disk = match spec {
        StoreSpec::Sqlite(path) => Some(path.as_path()),
        _ => None,
    };
    let wanted = if args.no_dashboard {
        false
    } else {
        args.dashboard || on_disk.is_some()
    };
    if !wanted {
        return Ok(None);
    }
    if let (Some(db), Some(state)) = (&args.dashboard_db, on_disk)
        && db == state
    {
        return Err(Failure(
            "--dashboard-db names the state store's own file; give the dashboard a file of its own"
                .into(),
        ));
    }
    let path = match (&args.dashboard_db, on_disk) {
        (Some(path), _) if path.as_os_str() == ":memory:" => None,
        (Some(path), _) => Some(path.clone()),
        (None, Some(state)) => Some(beside(state)),
        (None, None) => Some(beside(&actors::store::sqlite::default_path_for(listen))),
    };
    let hours = |h: u64| (h > 0).then(|| std::time::Duration::from_secs(h.saturating_mul(3600)));
    let options = DashboardOptions {
        path: path.clone(),
        retention: hours(args.dashboard_retention_hours),
        max_bytes: (args.dashboard_max_mb > 0)
            .then_some(args.dashboard_max_mb.saturating_mul(1 << 20)),
        content: args.dashboard_content,
        ..DashboardOptions::default()
    };
    // History must never stop sluice from starting: a file that cannot be opened (a read-only
    // directory, say) leaves the dashboard in memory for this run, said out loud.
    let mut shown = path
        .as_deref()
        .map_or_else(|| ":memory:".into(), |p| p.display().to_string());
    let dashboard = match Dashboard::open(options.clone()) {
        Ok(dashboard) => dashboard,
        Err(error) => {
            shown = ":memory:".into();
            tracing::warn!(%error, "the dashboard's file cannot be used; keeping this run's rows in memory");
            Dashboard::open(DashboardOptions {
                path: None,
                ..options
            })
            .map_err(|e| Failure(format!("dashboard: {e}")))?
        }
    };
    tracing::info!(
        db = %shown,
        content = args.dashboard_content,
        "dashboard at /dashboard/"
    );
    Ok(Some(Arc::new(dashboard)))
}

fn state_store(
    spec: actors::store::StoreSpec,
    config: &config::StoreConfig,
) -> Result<crate::app::StateStore, Failure> {
    use crate::app::StateStore;
    use actors::store::{DurableLimits, DurableStore, StoreSpec};
    use std::time::Duration;

    tracing::info!(store = %spec, "state store");
    let limits = DurableLimits {
        ttl: Duration::from_secs(config.ttl_seconds),
        session_stashes: config.session_max_stashes,
        session_bytes: config.session_max_mb.saturating_mul(1 << 20),
        cache_bytes: config.rewind_reserve_mb.saturating_mul(1 << 20),
        lease_wait: Duration::from_millis(config.lease_wait_ms),
        ..DurableLimits::DEFAULT
    };
    let backend: Arc<dyn actors::store::Backend> = match spec {
        StoreSpec::Memory => {
            let clock = Arc::new(SystemClock);
            let store = MemoryStore::new(config.limits(), clock);
            return Ok(StateStore::Local(Arc::new(store)));
        }
        StoreSpec::Off => return Ok(StateStore::Local(Arc::new(engine::store::NopStore))),
        StoreSpec::Sqlite(path) => Arc::new(
            actors::store::sqlite::SqliteBackend::open(&path)
                .map_err(|e| Failure(format!("store: {e}")))?,
        ),
        StoreSpec::Redis(url) => Arc::new(
            actors::store::redis::RedisBackend::connect(&url)
                .map_err(|e| Failure(format!("store {}: {e}", actors::store::redact_url(&url))))?,
        ),
    };
    Ok(StateStore::Durable(DurableStore::new(backend, limits)))
}

/// The sandbox `serve` runs filters in. The child is this binary; when it cannot be found the
/// proxy does not start, so the sandbox never weakens without the operator asking for it.
fn sandbox_isolation(choice: SandboxArg) -> Result<llm::Isolation, Failure> {
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

#[derive(Debug, Args)]
struct CompactArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Write the full per-component report (JSON, with the stashed originals) here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// The body's dialect; guessed from its shape when absent.
    #[arg(long)]
    dialect: Option<Dialect>,
    /// The request body (JSON); `-` or nothing reads stdin.
    body: Option<PathBuf>,
}

/// A failure to report on one line, with exit code 1.
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(err: E) -> Failure {
        Failure(err.to_string())
    }
}

/// A closed stdout (`sluice presets | head`) is the reader's choice, not a failure.
fn stdout_result(res: std::io::Result<()>) -> Result<(), Failure> {
    match res {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(Failure::from),
    }
}

pub fn main() -> ExitCode {
    // A sandbox child (see `sandbox::run_in_child`), not a command a person types.
    if std::env::args().nth(1).as_deref() == Some(llm::sandbox::CHILD_ARG) {
        return ExitCode::from(u8::try_from(llm::sandbox::child_main()).unwrap_or(2));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(&args),
        Command::Compact(args) => compact(&args),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => config_check(&file),
        Command::Presets => presets(),
        Command::Init { path, force } => init(&path, force),
        Command::Wrap(args) => wrap(&args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "sluice", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            let page = clap_mangen::Man::new(<Cli as clap::CommandFactory>::command());
            stdout_result(page.render(&mut std::io::stdout().lock()))
        }
        Command::Filters { command } => filters(command),
        Command::Replay(args) => replay(&args),
        Command::Tune {
            command:
                TuneCommand::ColdCache {
                    config,
                    gaps,
                    paths,
                },
        } => tune_cold_cache(&config, &gaps, &paths),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(message)) => {
            eprintln!("sluice: {message}");
            ExitCode::FAILURE
        }
    }
}

impl ConfigArgs {
    fn load(&self) -> Result<Config, Failure> {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let config = match self.choice(env)? {
            ConfigChoice::File(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| Failure(format!("{}: {e}", path.display())))?;
                Config::parse(&text).map_err(|errs| config_failure(&path, &errs))?
            }
            ConfigChoice::Preset(name) => Config::from_preset(&name)
                .map_err(|errs| config_failure(Path::new("--preset"), &errs))?,
            ConfigChoice::Embedded => Config::embedded(),
        };
        Ok(config)
    }

    /// The command line first (clap already refused both flags there), then the environment,
    /// where setting both variables is refused too: neither is more explicit than the other.
    /// An empty variable counts as unset.
    fn choice(
        &self,
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<ConfigChoice, Failure> {
        if let Some(path) = &self.config {
            return Ok(ConfigChoice::File(path.clone()));
        }
        if let Some(name) = &self.preset {
            return Ok(ConfigChoice::Preset(name.clone()));
        }
        match (env("SLUICE_CONFIG"), env("SLUICE_PRESET")) {
            (Some(_), Some(_)) => Err(Failure(
                "SLUICE_CONFIG and SLUICE_PRESET are both set; unset one, or pass --config or --preset".into(),
            )),
            (Some(path), None) => Ok(ConfigChoice::File(path.into())),
            (None, Some(name)) => name
                .into_string()
                .map(ConfigChoice::Preset)
                .map_err(|_| Failure("SLUICE_PRESET is not valid UTF-8".into())),
            (None, None) => Ok(ConfigChoice::Embedded),
        }
    }
}

fn serve(args: &ServeArgs) -> Result<(), Failure> {
    use crate::app::{App, Settings};
    use crate::upstream::{Timeouts, Upstream};
    use std::time::Duration;

    init_logs(args.log_format);
    let mut config = args.config.load()?;
    if let Some(mode) = args.mode {
        config.mode = mode;
    }
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let spec = store_spec(args.store.clone(), &config.store, args.listen.listen)?;
        let dashboard = dashboard(&args.dashboard, &spec, args.listen.listen)?;
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
        if !local.ip().is_loopback() {
            tracing::warn!(
                %local,
                "listening beyond loopback: any host that reaches this port can send traffic through sluice; operator routes answer loopback and --trusted networks only"
            );
        }
        let app = Arc::new(app);
        reload_on_hangup(app.clone(), args.config.clone(), args.mode);
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

fn config_failure(origin: &Path, errors: &[config::ConfigError]) -> Failure {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    Failure(format!("{}: {}", origin.display(), lines.join("; ")))
}

fn read_body(path: Option<&Path>) -> Result<Vec<u8>, Failure> {
    match path {
        None => read_stdin(),
        Some(p) if p == Path::new("-") => read_stdin(),
        Some(p) => std::fs::read(p).map_err(|e| Failure(format!("{}: {e}", p.display()))),
    }
}

fn read_stdin() -> Result<Vec<u8>, Failure> {
    let mut body = Vec::new();
    std::io::stdin().read_to_end(&mut body)?;
    Ok(body)
}

fn compact(args: &CompactArgs) -> Result<(), Failure> {
    let config = args.config.load()?;
    let pipeline = config
        .build_pipeline()
        .map_err(|errs| config_failure(Path::new("config"), &errs))?;
    let body = read_body(args.body.as_deref())?;
    let dialect = args.dialect.unwrap_or_else(|| Dialect::detect(&body));
    // Parse first so bad input fails loudly here; the proxy would forward it untouched instead.
    let rules = tool_rules_applied(&engine::wire::parse(&body, dialect)?, &config.tools);
    let clock = Arc::new(SystemClock);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(config.store.limits(), clock.clone()));
    let turns = modes::TurnService::new(Arc::new(pipeline), store.clone(), clock);
    let body = bytes::Bytes::from(body);
    let input = modes::TurnInput {
        dialect,
        body: &body,
        headers: &http::HeaderMap::new(),
        models: None,
    };
    // The same turn `POST /compact` runs: a body that carries a marker declares the expand tool.
    // No durable store and no session actors: the rewrite never waits, a small runtime drives it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| Failure(format!("start the runtime: {e}")))?;
    let applied = match runtime.block_on(turns.compact(&input, None)) {
        modes::Turn::Forward(forward) => *forward,
        // An agent compacting its own transcript: what the proxy forwards, the body as it came.
        modes::Turn::Untouched { reason, .. } => {
            stdout_result(std::io::stdout().lock().write_all(&body))?;
            eprintln!("forwarded untouched: {}", reason.label());
            return Ok(());
        }
    };
    let session = applied.session.clone();
    stdout_result(std::io::stdout().lock().write_all(&applied.body))?;
    let report = &applied.report;
    if let Some(path) = &args.report {
        // The stashed originals go into the report: offline there is no expand loop, and a
        // marker whose original is lost would break the nothing-is-lost promise.
        let stashes: BTreeMap<&str, String> = report
            .components
            .iter()
            .flat_map(|c| c.stashed.iter())
            .filter_map(|id| {
                store
                    .resolve(&session, id)
                    .map(|o| (id.as_str(), o.to_string()))
            })
            .collect();
        let json = serde_json::json!({
            "dialect": dialect,
            "session": session,
            "pipeline": turns.pipeline().names(),
            "report": report,
            "discarded": applied.discarded,
            "tool_rules": rules,
            "stashes": stashes,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)
            .map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    } else {
        eprintln!("{}", summary(report));
        for rule in &rules {
            eprintln!(
                "tool rule    message {} ({}): {}",
                rule["message"],
                rule["tool"],
                rule["rule"].as_str().unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// Each tool output a `tools:` rule applies to: its message index, its tool and the rule, so a
/// user can see why an output was or was not cut.
fn tool_rules_applied(
    parsed: &engine::wire::ParsedBody<'_>,
    rules: &engine::tools::ToolRules,
) -> Vec<serde_json::Value> {
    parsed
        .messages()
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_tool())
        .filter_map(|(i, m)| {
            let rule = rules.applies(m.tool_name.as_deref()).describe()?;
            Some(serde_json::json!({ "message": i, "tool": m.tool_name, "rule": rule }))
        })
        .collect()
}

/// One line per component that did something, then the total.
fn summary(report: &engine::pipeline::RunReport) -> String {
    let mut out = String::new();
    for c in &report.components {
        let what = match (&c.reverted, c.acted, c.mutated) {
            (Some(why), _, _) => format!("reverted ({why:?})"),
            (None, true, _) => format!("saved {} tokens", c.saved_tokens),
            (None, false, true) => "changed bytes, no token saving".to_owned(),
            (None, false, false) => {
                let gates: Vec<String> = c.gates.iter().map(|(g, n)| format!("{g}×{n}")).collect();
                if gates.is_empty() {
                    "idle".to_owned()
                } else {
                    format!("skipped: {}", gates.join(", "))
                }
            }
        };
        out.push_str(&format!("{:<12} {what}\n", c.name));
    }
    let pct = if report.tokens_before == 0 {
        0.0
    } else {
        100.0 * report.saved_tokens() as f64 / report.tokens_before as f64
    };
    out.push_str(&format!(
        "total        {} → {} content tokens ({pct:.1}% saved)",
        report.tokens_before, report.tokens_after
    ));
    out
}

fn config_check(path: &Path) -> Result<(), Failure> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    match Config::parse(&text) {
        Ok(config) => {
            let pipeline = config
                .build_pipeline()
                .map_err(|errs| config_failure(path, &errs))?;
            for warning in &config.warnings {
                eprintln!("warning: {warning}");
            }
            // `{}`: the mode as written in YAML (`sync`), not its Rust name.
            println!(
                "{}: ok (mode {}, pipeline: [{}])",
                path.display(),
                config.mode,
                pipeline.names().join(", ")
            );
            Ok(())
        }
        Err(errors) => {
            for err in &errors {
                eprintln!("{}: {err}", path.display());
            }
            Err(Failure(format!(
                "{}: {} problem(s)",
                path.display(),
                errors.len()
            )))
        }
    }
}

fn replay(args: &ReplayArgs) -> Result<(), Failure> {
    let config = args.config.load()?;
    let sessions = crate::replay::load(&args.paths)?;
    let options = modes::replay::Options {
        gap: std::time::Duration::from_secs(args.gap),
        expand: match args.expand {
            ExpandArg::Pattern => modes::replay::ExpandAsk::Pattern,
            ExpandArg::Whole => modes::replay::ExpandAsk::Whole,
        },
        ..modes::replay::Options::default()
    };
    let mut sessions = sessions;
    if let Some(to) = args.as_dialect {
        let left_out = crate::replay::convert(&mut sessions, to)?;
        if left_out > 0 {
            eprintln!(
                "sluice: replaying the chat-completions sessions as {}; {left_out} of another dialect left out",
                to.as_str()
            );
        }
    }
    if args.no_preamble {
        for session in &mut sessions {
            session.preamble_tokens = 0;
        }
    }
    let reports = crate::replay::run(&config, &sessions, &options)?;
    let totals = modes::replay::totals(&reports, &options.prices);
    if let Some(dir) = &args.out {
        crate::replay::write_out(dir, &reports, &totals, &options.prices)?;
    }
    let text = match args.format {
        ReportFormat::Md => crate::replay::markdown(&reports, &totals, &options.prices),
        ReportFormat::Json => crate::replay::json(&reports, &totals, &options.prices),
    };
    stdout_result(writeln!(std::io::stdout().lock(), "{text}"))
}

fn tune_cold_cache(config: &ConfigArgs, gaps: &[u64], paths: &[PathBuf]) -> Result<(), Failure> {
    let config = config.load()?;
    let sessions = crate::replay::load(paths)?;
    let table = crate::replay::tune_cold_cache(&config, &sessions, gaps)?;
    stdout_result(writeln!(std::io::stdout().lock(), "{table}"))
}

/// The builtins plus the filter files given, every problem reported at once.
fn filter_set(files: &[PathBuf]) -> Result<engine::dsl::FilterSet, Failure> {
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .map(|t| (p.display().to_string(), t))
                .map_err(|e| Failure(format!("{}: {e}", p.display())))
        })
        .collect::<Result<_, _>>()?;
    let documents: Vec<(&str, &str)> = texts
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    engine::dsl::FilterSet::builtins()
        .and_then(|set| set.extend(&documents))
        .map_err(|errors| {
            Failure(
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
        })
}

fn filters(command: FiltersCommand) -> Result<(), Failure> {
    use std::io::Read as _;
    let mut out = std::io::stdout().lock();
    match command {
        FiltersCommand::List { files } => {
            let set = filter_set(&files)?;
            for f in set.filters() {
                let line = format!(
                    "{:<16} {:<7} {:>4}  {}",
                    f.name, f.family, f.priority, f.description
                );
                stdout_result(writeln!(out, "{}", line.trim_end()))?;
            }
            Ok(())
        }
        FiltersCommand::Test { files } => {
            // Loading runs every inline test; a failure stops the load with its diff.
            let set = filter_set(&files)?;
            let tests: usize = set.filters().iter().map(|f| f.tests.len()).sum();
            stdout_result(writeln!(
                out,
                "{} filters, {tests} inline tests passed",
                set.filters().len()
            ))
        }
        FiltersCommand::Apply { name, input, files } => {
            let set = filter_set(&files)?;
            let filter = set
                .filters()
                .iter()
                .find(|f| f.name == name)
                .ok_or_else(|| {
                    Failure(format!(
                        "no filter named `{name}` (see `sluice filters list`)"
                    ))
                })?;
            let mut text = String::new();
            match input.as_deref().filter(|p| *p != Path::new("-")) {
                Some(path) => {
                    text = std::fs::read_to_string(path)
                        .map_err(|e| Failure(format!("{}: {e}", path.display())))?
                }
                None => {
                    std::io::stdin().read_to_string(&mut text)?;
                }
            }
            let filtered = filter.apply(&text);
            eprintln!("sluice: {name}: loss {:?}", filtered.loss);
            let newline = if filtered.text.ends_with('\n') {
                ""
            } else {
                "\n"
            };
            stdout_result(write!(out, "{}{newline}", filtered.text))
        }
    }
}

/// On SIGHUP, reads the config again (the same `--config` / `--preset` / environment) and applies
/// it; a config with problems is refused whole, every problem logged, and the running one stays.
fn reload_on_hangup(app: Arc<crate::app::App>, config: ConfigArgs, mode: Option<config::Mode>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            return;
        };
        while hangups.recv().await.is_some() {
            let loaded = config
                .load()
                .map_err(|Failure(why)| vec![why])
                .and_then(|mut c| {
                    // `--mode` on the command line beats the file, on a reload as at start.
                    if let Some(mode) = mode {
                        c.mode = mode;
                    }
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

/// Whether a sluice answers `/healthz` at `addr`.
fn sluice_answers(addr: std::net::SocketAddr) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(300))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    let asked =
        stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: sluice\r\nconnection: close\r\n\r\n");
    let mut answer = String::new();
    asked.is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

/// `sluice wrap`: see the subcommand's help. Exits with the command's own code.
fn wrap(args: &WrapArgs) -> Result<(), Failure> {
    let started = if sluice_answers(args.listen.listen) {
        None
    } else {
        let exe = std::env::current_exe()
            .map_err(|e| Failure(format!("cannot find sluice's own executable: {e}")))?;
        let log = match &args.log {
            Some(path) => std::process::Stdio::from(
                std::fs::File::create(path)
                    .map_err(|e| Failure(format!("{}: {e}", path.display())))?,
            ),
            None => std::process::Stdio::null(),
        };
        let child = std::process::Command::new(exe)
            .args(["serve", "--listen", &args.listen.listen.to_string()])
            .args(&args.serve_args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| Failure(format!("cannot start sluice serve: {e}")))?;
        let mut child = StopOnDrop(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while !sluice_answers(args.listen.listen) {
            if let Ok(Some(status)) = child.0.try_wait() {
                return Err(Failure(format!("sluice serve exited at start ({status})")));
            }
            if std::time::Instant::now() > deadline {
                return Err(Failure(format!(
                    "sluice serve did not answer on {}",
                    args.listen.listen
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Some(child)
    };
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure("wrap needs a command after --".into()))?;
    let status = std::process::Command::new(program)
        .args(rest)
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://{}/anthropic", args.listen.listen),
        )
        .env(
            "OPENAI_BASE_URL",
            format!("http://{}/openai/v1", args.listen.listen),
        )
        .status()
        .map_err(|e| Failure(format!("cannot run {program}: {e}")))?;
    drop(started);
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => std::process::exit(code),
        None => Err(Failure(format!("{program} ended by a signal ({status})"))),
    }
}

/// A `sluice serve` this process started: asked to stop (SIGTERM, so it drains) when dropped,
/// and waited for.
struct StopOnDrop(std::process::Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let asked = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .is_ok_and(|s| s.success());
        if !asked {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// What `sluice init` writes: the embedded default as it is (its comments explain it), then the
/// keys it leaves at their built-in values, commented out with those values.
fn init_text() -> String {
    let store = engine::config::StoreConfig::default();
    format!(
        "# sluice config, written by `sluice init`: the embedded default, which a file is layered on\n\
         # (a top-level key this file does not write keeps its default). Check it with\n\
         # `sluice config check FILE`; run with `sluice serve --config FILE`.\n\
         #\n\
         {default}\n\
         # Where state lives (`--store` wins): sqlite:PATH (the default, under the user's state\n\
         # directory), redis://HOST:PORT/DB (shared by replicas), memory, or off.\n\
         #   backend: sqlite:/var/lib/sluice/state.db\n\
         # Per session, and how long a turn waits for another replica's lease:\n\
         #   session_max_stashes: {stashes}\n\
         #   session_max_mb: {mb}\n\
         #   lease_wait_ms: {wait}\n\
         #\n\
         # observe: {{ workers: 1, max_queue: 256 }}   # the off-path measurement pool (mode: observe)\n\
         # cache:\n\
         #   amortize: {{ enabled: false, every_turns: 10 }}\n\
         #\n\
         # Per-tool rules, matched on the name of the tool that produced an output (`*`, `?`),\n\
         # written in place of the `tools:` above:\n\
         # tools:\n\
         #   exclude: [Task, Agent, read_secret]             # never cut, by any component\n\
         #   rules:\n\
         #     \"apply_*\": {{ components: [format] }}        # only these may act on its outputs\n",
        default = engine::config::EMBEDDED_DEFAULT.trim_end(),
        stashes = store.session_max_stashes,
        mb = store.session_max_mb,
        wait = store.lease_wait_ms,
    )
}

fn init(path: &Path, force: bool) -> Result<(), Failure> {
    let text = init_text();
    if path == Path::new("-") {
        return stdout_result(std::io::stdout().lock().write_all(text.as_bytes()));
    }
    if path.exists() && !force {
        return Err(Failure(format!(
            "{} exists; pass --force to replace it",
            path.display()
        )));
    }
    std::fs::write(path, text).map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn presets() -> Result<(), Failure> {
    stdout_result(write_presets(&mut std::io::stdout().lock()))
}

fn write_presets(out: &mut impl Write) -> std::io::Result<()> {
    for preset in config::PRESETS {
        let status = if config::preset_is_available(preset) {
            ""
        } else {
            "  (needs components not built yet)"
        };
        writeln!(
            out,
            "{:<11} [{}]{status}",
            preset.name,
            preset.pipeline.join(", ")
        )?;
        writeln!(out, "            {}", preset.description)?;
    }
    writeln!(out)?;
    writeln!(out, "components built in this version:")?;
    for factory in engine::components::ALL {
        writeln!(out, "  {:<10} {}", factory.name(), factory.summary())?;
    }
    Ok(())
}
