//! The offline subcommands: `compact` (one body), `config check`, `replay`, `tune` and `filters`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use engine::config::Config;
use engine::store::{MemoryStore, Store};
use engine::wire::Dialect;

use super::{ConfigArgs, Failure, config_failure, counted, read_body, stdout_result};
use crate::clock::SystemClock;

#[derive(Debug, Args)]
pub(super) struct ReplayArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// `md` (default) or `json` (with a `totals` object).
    #[arg(long, default_value = "md")]
    pub(super) format: ReportFormat,
    /// Also write report.md, report.json and SVG charts here.
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Seconds between turns on the simulated clock, for recordings that do not say when each
    /// turn was sent (`--from claude-code` replays on the recorded times).
    #[arg(long, default_value_t = 30)]
    pub(super) gap: u64,
    /// Bill the bodies as recorded, without the agent preamble a corpus's `replay.json` says its
    /// recordings lack (Claude Code's system prompt and tools).
    #[arg(long)]
    pub(super) no_preamble: bool,
    /// Bill the cache keep-alive's pings on each session's clock, as `cache.keepalive: true`
    /// would send them (the config's other `keepalive_*` keys apply): the report adds what they
    /// cost, what they spared, and the headline with them.
    #[arg(long)]
    pub(super) keepalive: bool,
    /// How the model is billed for expanding a marker: `pattern` (the lines holding what its
    /// answer needed, as the expand tool's `pattern` returns them) or `whole` (the original).
    #[arg(long, default_value = "pattern")]
    pub(super) expand: ExpandArg,
    /// Replay chat-completions sessions as another dialect's agents would send them
    /// (`responses` or `gemini`): the same conversations, converted turn by turn.
    #[arg(long)]
    pub(super) as_dialect: Option<Dialect>,
    /// Where the sessions come from: `claude-code` reads Claude Code's own transcripts (PATH,
    /// else `$CLAUDE_CONFIG_DIR/projects`, else `~/.claude/projects`), `codex` Codex's rollouts
    /// (PATH, else `$CODEX_HOME`, else `~/.codex`), `gemini` gemini-cli's chats (PATH, else
    /// `~/.gemini/tmp`), and replays each call at its recorded time.
    #[arg(long)]
    pub(super) from: Option<ReplaySource>,
    /// With `--from`: sessions active since a date (`2025-06-01`, UTC) or a number
    /// of days back (`30d`).
    #[arg(long, requires = "from")]
    pub(super) since: Option<String>,
    /// With `--from`: only projects whose name contains NAME (Claude Code's and gemini-cli's
    /// project folders, Codex's working directory).
    #[arg(long, requires = "from")]
    pub(super) project: Option<String>,
    /// Request bodies (.json, split into turns), per-turn JSONL, or folders of them; with
    /// `--from`, the agent's folder, any folder under it, or one session file.
    #[arg(required_unless_present = "from")]
    pub(super) paths: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(super) enum ReplaySource {
    ClaudeCode,
    Codex,
    Gemini,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(super) enum ExpandArg {
    Pattern,
    Whole,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(super) enum ReportFormat {
    Md,
    Json,
}

#[derive(Debug, Subcommand)]
pub(super) enum TuneCommand {
    /// Billed cost with cold_cache on and off, for each idle gap between turns.
    ColdCache {
        #[command(flatten)]
        config: ConfigArgs,
        /// Idle gaps to try, in seconds.
        #[arg(long, value_delimiter = ',', default_value = "60,300,600,3600")]
        gaps: Vec<u64>,
        /// Recorded sessions, as `sluice replay` reads them: request bodies, per-turn JSONL, or
        /// folders of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum FiltersCommand {
    /// List the builtin filters (and those of the given files), in selection order.
    List {
        /// Filter files (YAML) to load besides the builtins.
        files: Vec<PathBuf>,
    },
    /// Run the inline tests of the builtins and of the given filter files.
    Test {
        /// Filter files (YAML) whose inline tests run besides the builtins'.
        files: Vec<PathBuf>,
    },
    /// Apply filter NAME to a file (or stdin) and print the result.
    Apply {
        /// The filter to apply, as `sluice filters list` names it.
        name: String,
        /// The output to filter; `-` or nothing reads stdin.
        input: Option<PathBuf>,
        /// Filter files to load besides the builtins.
        #[arg(long = "filters")]
        files: Vec<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum ConfigCommand {
    /// Validate a config file (layered on the embedded default) and print the pipeline it
    /// builds; every problem is listed.
    Check {
        /// The YAML config file to check.
        file: PathBuf,
    },
}

#[derive(Debug, Args)]
pub(super) struct CompactArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Write the full per-component report (JSON, with the stashed originals) here.
    #[arg(long)]
    pub(super) report: Option<PathBuf>,
    /// The body's dialect; guessed from its shape when absent.
    #[arg(long)]
    pub(super) dialect: Option<Dialect>,
    /// The request body (JSON); `-` or nothing reads stdin.
    pub(super) body: Option<PathBuf>,
}

pub(super) fn compact(args: &CompactArgs) -> Result<(), Failure> {
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
        defer_counts: false,
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
pub(super) fn tool_rules_applied(
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
pub(super) fn summary(report: &engine::pipeline::RunReport) -> String {
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

pub(super) fn config_check(path: &Path) -> Result<(), Failure> {
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
                "{}: {}",
                path.display(),
                counted(errors.len(), "problem")
            )))
        }
    }
}

pub(super) fn replay(args: &ReplayArgs) -> Result<(), Failure> {
    let config = args.config.load()?;
    let (sessions, window) = match args.from {
        Some(source) => {
            let (sessions, days) = agent_sessions(args, source)?;
            (sessions, Some(days))
        }
        None => (crate::replay::load(&args.paths)?, None),
    };
    let options = modes::replay::Options {
        gap: std::time::Duration::from_secs(args.gap),
        expand: match args.expand {
            ExpandArg::Pattern => modes::replay::ExpandAsk::Pattern,
            ExpandArg::Whole => modes::replay::ExpandAsk::Whole,
        },
        keepalive: engine::config::CacheConfig {
            keepalive: config.cache.keepalive || args.keepalive,
            ..config.cache
        }
        .keepalive(),
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
            session.preambles.clear();
        }
    }
    let reports = crate::replay::run(&config, &sessions, &options)?;
    let totals = modes::replay::totals(&reports, &options.prices);
    let head = window
        .map(|days| crate::replay::claude_code::report(&sessions, &reports, &options.prices, days));
    if let Some(dir) = &args.out {
        crate::replay::write_out(dir, &reports, &totals, &options.prices, head.as_ref())?;
    }
    let text = match args.format {
        ReportFormat::Md => {
            let report = crate::replay::markdown(&reports, &totals, &options.prices);
            // The projects and the headline lead; the usual report follows.
            match &head {
                Some(head) => format!("{}\n{report}", head.markdown()),
                None => report,
            }
        }
        ReportFormat::Json => {
            let mut value = crate::replay::json_value(&reports, &totals, &options.prices);
            if let Some(head) = &head {
                head.add_to(&mut value);
            }
            value.to_string()
        }
    };
    stdout_result(writeln!(std::io::stdout().lock(), "{text}"))
}

/// `--from claude-code|codex|gemini`: the agent's logs under PATH (else where the agent keeps
/// them), what reading them noted on stderr, and the headline's window in days.
fn agent_sessions(
    args: &ReplayArgs,
    source: ReplaySource,
) -> Result<(Vec<crate::replay::Recorded>, i64), Failure> {
    use crate::replay::agents::Agent;
    use crate::replay::claude_code::{self as cc, Filters};
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let (agent, flag, label, variables) = match source {
        ReplaySource::ClaudeCode => (
            None,
            "claude-code",
            "Claude Code",
            "neither CLAUDE_CONFIG_DIR nor HOME is",
        ),
        ReplaySource::Codex => (
            Some(Agent::Codex),
            "codex",
            Agent::Codex.label(),
            "neither CODEX_HOME nor HOME is",
        ),
        ReplaySource::Gemini => (
            Some(Agent::Gemini),
            "gemini",
            Agent::Gemini.label(),
            "HOME is not",
        ),
    };
    let root = match args.paths.as_slice() {
        [] => match agent {
            None => cc::default_root(env),
            Some(agent) => agent.default_root(env),
        }
        .ok_or_else(|| Failure(format!("no PATH, and {variables} set")))?,
        [one] => one.clone(),
        _ => return Err(Failure(format!("--from {flag} takes one PATH"))),
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let since_ms = match &args.since {
        Some(text) => Some(cc::parse_since(text, now_ms).ok_or_else(|| {
            Failure(format!(
                "--since {text}: expected a date (2025-06-01) or days (30d)"
            ))
        })?),
        None => None,
    };
    let filters = Filters {
        since_ms,
        project: args.project.clone(),
    };
    let found = match agent {
        None => cc::load(&root, &filters)?,
        Some(agent) => crate::replay::agents::load(agent, &root, &filters)?,
    };
    // What a session's log lacks and its usage cannot tell: Claude Code's stand-in; none for
    // Codex and gemini-cli (their bodies carry most of what they sent).
    let stand_in = if agent.is_none() {
        cc::PREAMBLE_TOKENS
    } else {
        0
    };
    say_found(&found, label, &root, stand_in, args.no_preamble);
    if found.sessions.is_empty() {
        return Err(Failure(format!(
            "{}: no {label} session with a model call to replay{}",
            root.display(),
            if since_ms.is_some() {
                " in the --since window"
            } else {
                ""
            }
        )));
    }
    // The window the headline names covers every call it replayed: `--since` keeps a session
    // active since then whole, so its earliest call may come before the date.
    let start = found.first_ms.or(since_ms).unwrap_or(now_ms);
    Ok((found.sessions, cc::days_between(start, now_ms)))
}

/// What reading an agent's logs found, on stderr: counts, file names and line numbers, never a
/// transcript's text.
fn say_found(
    found: &crate::replay::claude_code::Found,
    label: &str,
    root: &std::path::Path,
    stand_in: usize,
    no_preamble: bool,
) {
    for note in &found.notes {
        eprintln!("sluice: {note}");
    }
    eprintln!(
        "sluice: {} {label} sessions ({} calls) from {} files under {}{}",
        found.sessions.len(),
        found.calls,
        found.files,
        root.display(),
        if found.filtered_out > 0 {
            format!("; {} older than --since left out", found.filtered_out)
        } else {
            String::new()
        }
    );
    if !found.sessions.is_empty() && !no_preamble {
        eprintln!(
            "sluice: preamble read from the recorded usage for {} of {} sessions{}",
            found.preamble_from_record,
            found.sessions.len(),
            if found.preamble_from_record < found.sessions.len() && stand_in > 0 {
                format!("; the rest bill a {stand_in}-token stand-in")
            } else if found.preamble_from_record < found.sessions.len() {
                "; the rest bill none".to_owned()
            } else {
                String::new()
            }
        );
    }
}

pub(super) fn tune_cold_cache(
    config: &ConfigArgs,
    gaps: &[u64],
    paths: &[PathBuf],
) -> Result<(), Failure> {
    let config = config.load()?;
    let sessions = crate::replay::load(paths)?;
    let table = crate::replay::tune_cold_cache(&config, &sessions, gaps)?;
    stdout_result(writeln!(std::io::stdout().lock(), "{table}"))
}

/// The builtins plus the filter files given, every problem reported at once.
pub(super) fn filter_set(files: &[PathBuf]) -> Result<engine::dsl::FilterSet, Failure> {
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

pub(super) fn filters(command: FiltersCommand) -> Result<(), Failure> {
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
                "{}, {} passed",
                counted(set.filters().len(), "filter"),
                counted(tests, "inline test")
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
