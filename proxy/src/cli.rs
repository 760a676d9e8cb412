//! The `sluice` command line: `serve`, `compact`, `config check`, `presets`, `replay`, `tune`, `filters`.
//!
//! Exit codes: 0 success, 1 bad input or a failed check (on stderr, one line naming the problem,
//! or one line per problem when a config has several), 2 usage errors (from clap).
//!
//! Here: the clap definitions shared by every subcommand, the dispatch, and the one-line
//! failure. Each subcommand's flags and work live in a file of their own: `serve.rs`, `wrap.rs`,
//! `offline.rs` (`compact`, `config check`, `replay`, `tune`, `filters`) and `init.rs` (`init`,
//! `presets`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use engine::config::{self, Config};

mod ab;
mod init;
mod offline;
mod serve;
mod wrap;

use ab::{AbCommand, ab};
use init::{init, presets};
use offline::{
    CompactArgs, ConfigCommand, FiltersCommand, ReplayArgs, TuneCommand, compact, config_check,
    filters, replay, tune_cold_cache,
};
use serve::{ServeArgs, dashboard, serve, store_spec};
use wrap::{WrapArgs, wrap};

/// A sidecar proxy that cuts what LLM agents pay for context, without losing anything.
#[derive(Debug, Parser)]
#[command(name = "sluice", version = env!("SLUICE_BUILD"), about = "A sidecar proxy that cuts what LLM agents pay for context, without losing anything.", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The command line as clap sees it: `docs/configuration.md`'s reference is rendered from it.
#[cfg(test)]
pub(crate) fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// The dashboard `sluice serve ARGS` would start (`None`: off) and what its start-up log says
/// about it, decided as `serve` decides: the integration tests serve it through the real server.
///
/// # Errors
/// The arguments do not parse, or `serve` would refuse them (one line, as `sluice` prints it).
pub fn serve_dashboard(
    args: &[&str],
) -> Result<(Option<Arc<dashboard::Dashboard>>, String), String> {
    let argv = ["sluice", "serve"].into_iter().chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
    let Command::Serve(serve) = cli.command else {
        return Err("not `sluice serve`".into());
    };
    let failed = |Failure(why): Failure| why;
    let config = serve.config.load().map_err(failed)?;
    let spec =
        store_spec(serve.store.clone(), &config.store, serve.listen.listen).map_err(failed)?;
    let choice = dashboard(&serve.dashboard, &spec).map_err(failed)?;
    Ok((choice.dashboard, choice.said))
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy. Its routes, one per provider, and the base URL each agent takes are in
    /// docs/guide.md; `sluice wrap` sets them for a command.
    Serve(Box<ServeArgs>),
    /// Rewrite one request body offline: the result on stdout, the report on stderr or --report.
    Compact(CompactArgs),
    /// Check config files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// List the presets and their pipelines, and say what `serve` runs without `--config` or
    /// `--preset`: the embedded pipeline, which is no preset, unless SLUICE_PRESET or
    /// SLUICE_CONFIG names another.
    Presets,
    /// Run a command (an agent) through sluice: start `sluice serve` unless one answers on
    /// `--listen`, point the command's ANTHROPIC_BASE_URL, OPENAI_BASE_URL and
    /// GOOGLE_GEMINI_BASE_URL at it, and stop what was started when the command exits.
    /// `sluice wrap -- claude`.
    Wrap(WrapArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell), generated from this CLI.
    Completions {
        /// The shell to print them for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), generated from this CLI.
    Man,
    /// Write a commented config file with the embedded defaults (`-` for stdout).
    Init {
        /// Where to write it (`-` for stdout).
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
    /// A live A/B experiment (`serve --ab`): its report.
    Ab {
        #[command(subcommand)]
        command: AbCommand,
    },
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
    /// A preset's name, and where it was given (`--preset` or `SLUICE_PRESET`).
    Preset(String, &'static str),
    Embedded,
}

/// `--listen`, declared once for every subcommand that takes it.
#[derive(Debug, Args)]
struct ListenArg {
    /// Where sluice listens (for `wrap`: or is listening already).
    #[arg(long, env = "SLUICE_LISTEN", default_value = "127.0.0.1:4000")]
    listen: std::net::SocketAddr,
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
        Command::Ab { command } => ab(command),
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
            // An unknown name is said as such, with the known ones: no line or column of a
            // document the user never wrote.
            ConfigChoice::Preset(name, from) if config::find_preset(&name).is_none() => {
                return Err(Failure(format!(
                    "{from}: {}",
                    config::unknown_preset(&name, "")
                )));
            }
            ConfigChoice::Preset(name, from) => {
                Config::from_preset(&name).map_err(|errs| config_failure(Path::new(from), &errs))?
            }
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
            return Ok(ConfigChoice::Preset(name.clone(), "--preset"));
        }
        match (env("SLUICE_CONFIG"), env("SLUICE_PRESET")) {
            (Some(_), Some(_)) => Err(Failure(
                "SLUICE_CONFIG and SLUICE_PRESET are both set; unset one, or pass --config or --preset".into(),
            )),
            (Some(path), None) => Ok(ConfigChoice::File(path.into())),
            (None, Some(name)) => name
                .into_string()
                .map(|name| ConfigChoice::Preset(name, "SLUICE_PRESET"))
                .map_err(|_| Failure("SLUICE_PRESET is not valid UTF-8".into())),
            (None, None) => Ok(ConfigChoice::Embedded),
        }
    }
}

/// A config's problems: one on the line, or several counted, one a line below.
fn config_failure(origin: &Path, errors: &[config::ConfigError]) -> Failure {
    match errors {
        [one] => Failure(format!("{}: {one}", origin.display())),
        many => {
            let mut text = format!("{}: {}", origin.display(), counted(many.len(), "problem"));
            for error in many {
                text.push_str(&format!("\n  {error}"));
            }
            Failure(text)
        }
    }
}

/// `1 problem`, `3 problems`: a count and its noun, plural when it is not one.
fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
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
