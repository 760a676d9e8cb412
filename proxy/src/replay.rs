//! `sluice replay` and `sluice tune cold-cache`: recorded sessions through the session machinery,
//! billed by the prompt-cache cost model of `modes::replay`, reported as Markdown, JSON and SVG.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engine::config::{Config, ConfigError};
use engine::wire::Dialect;
use modes::replay::{
    Loss, Options, Prices, ReplayError, SessionReport, Totals, replay_session, totals, turns_of,
};

use crate::chart::{saved_pct, what_was_replayed};

pub mod agents;
pub mod claude_code;

/// Why `sluice replay` or `sluice tune cold-cache` stopped: the file or session, and why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A file or folder that cannot be read, or a report file that cannot be written.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A path that is neither a file nor a folder.
    #[error("{}: no such file or directory", .0.display())]
    Missing(PathBuf),
    /// A `.gz` file that does not decompress.
    #[error("{}: not gzip: {error}", path.display())]
    NotGzip {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A triage event log with a line that cannot be read.
    #[error("{}: {error}", path.display())]
    EventLog { path: PathBuf, error: EventLogError },
    /// A file named on the command line that is not a request body.
    #[error("{}: {error}", path.display())]
    NotARequest { path: PathBuf, error: ReplayError },
    /// `--from claude-code` found no session file (the path is where it looked).
    #[error(
        "{}: no Claude Code transcripts here (looked for <project>/<session>.jsonl and <project>/<session>/subagents/agent-<id>.jsonl)", .0.display()
    )]
    NoTranscripts(PathBuf),
    /// `--from codex` or `--from gemini` found no log file.
    #[error("{}: no {agent} sessions here (looked for {looked_for})", path.display())]
    NoAgentLogs {
        path: PathBuf,
        agent: &'static str,
        looked_for: &'static str,
    },
    /// A `.zst` file that does not decompress.
    #[error("{}: not zstd: {error}", path.display())]
    NotZstd {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The config's pipeline does not build.
    #[error("{0:?}")]
    Pipeline(Vec<ConfigError>),
    /// A session that does not replay.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// `--as-dialect` names a dialect sessions do not convert to (`responses` and `gemini`
    /// do), found no chat-completions session to convert, or a turn of one that is not a
    /// chat-completions body.
    #[error(
        "{session}: no chat-completions body to convert to {to} (`responses` and `gemini` are converted to)"
    )]
    NotConvertible { session: String, to: &'static str },
}

/// The chat-completions sessions converted to `to`'s bodies (`modes::replay::convert`): the
/// same conversations as that dialect's agents would send them, for a corpus recorded without
/// them. Sessions of other dialects are left out (the public corpus carries each run in both
/// chat completions and Messages; its Messages twin would be the same run twice); returns how
/// many.
///
/// # Errors
/// A turn that is not a chat-completions body, or no session to convert.
pub fn convert(sessions: &mut Vec<Recorded>, to: Dialect) -> Result<usize, RunError> {
    use modes::replay::convert::{gemini_from_chat, responses_from_chat};
    let convert_one: fn(&[u8]) -> Option<Vec<u8>> = match to {
        Dialect::Gemini => gemini_from_chat,
        Dialect::Responses => responses_from_chat,
        Dialect::OpenAi | Dialect::Anthropic => {
            return Err(RunError::NotConvertible {
                session: "--as-dialect".into(),
                to: to.as_str(),
            });
        }
    };
    let before = sessions.len();
    sessions.retain(|s| s.dialect == Dialect::OpenAi);
    if sessions.is_empty() {
        return Err(RunError::NotConvertible {
            session: "(every path)".into(),
            to: to.as_str(),
        });
    }
    for session in sessions.iter_mut() {
        let turns: Option<Vec<Vec<u8>>> =
            session.turns.iter().map(|turn| convert_one(turn)).collect();
        session.turns = turns.ok_or_else(|| RunError::NotConvertible {
            session: session.name.clone(),
            to: to.as_str(),
        })?;
        session.dialect = to;
    }
    Ok(before - sessions.len())
}

/// A line of a triage event log that cannot be read (1-based line numbers).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventLogError {
    /// The line is not JSON.
    #[error("line {line}: {error}")]
    NotJson {
        line: usize,
        error: serde_json::Error,
    },
    /// The event's `type` is none sluice knows (or it has none).
    #[error("line {line}: unknown event type {kind:?}")]
    UnknownType { line: usize, kind: Option<String> },
}

/// One recorded session: its name, dialect and per-turn bodies.
pub struct Recorded {
    pub name: String,
    pub dialect: Dialect,
    pub turns: Vec<Vec<u8>>,
    /// Tokens of the agent preamble its recording lacks (the nearest `replay.json`'s
    /// `preamble_tokens`), billed as a stand-in on every turn (`modes::replay::with_preamble`).
    pub preamble_tokens: usize,
    /// Per turn, the preamble's size read from the recording's own usage (a Claude Code
    /// transcript's, `modes::replay::claude_code::preamble`), billed instead of the stand-in;
    /// empty when the recording has no usage to read it from.
    pub preambles: Vec<usize>,
    /// When each turn was sent, from the first (a Claude Code transcript records it): replay
    /// runs on this clock; empty, on `--gap`.
    pub times: Vec<Duration>,
    /// Prompt tokens the provider billed each turn (input, cache reads, cache writes), when the
    /// recording kept them.
    pub recorded_prompt: Vec<u64>,
    /// Each call's model, as the recording names it (gemini-cli's bodies do not: the model is
    /// in the request's path); empty, read from each body's `model`.
    pub models: Vec<String>,
    /// The project the session belongs to (Claude Code's project folder, Codex's working
    /// directory, gemini-cli's project folder).
    pub project: Option<String>,
}

/// The file beside a corpus that says how to bill it: `{"preamble_tokens": N, "why": "..."}`.
const CORPUS_SETTINGS: &str = "replay.json";

/// `preamble_tokens` from the `replay.json` nearest to `file` (its folder, then each parent).
fn preamble_tokens(file: &Path) -> usize {
    file.ancestors()
        .skip(1)
        .map(|dir| dir.join(CORPUS_SETTINGS))
        .find(|settings| settings.is_file())
        .and_then(|settings| std::fs::read(settings).ok())
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .and_then(|value| value["preamble_tokens"].as_u64())
        .map_or(0, |n| usize::try_from(n).unwrap_or(0))
}

/// Reads every session under `paths`: a request body (`.json`, `.json.gz`, split into turns), a
/// JSONL of per-turn bodies (`.jsonl`, `.jsonl.gz`), or a folder of these (searched recursively,
/// in name order). In a folder, a recorded `turns.<dialect>.jsonl[.gz]` replaces the
/// `<dialect>.json[.gz]` final request beside it: the real per-turn bodies beat turns cut from
/// the last one.
///
/// # Errors
/// An unreadable file or a body that is not a request.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Recorded>, RunError> {
    // (file, named by the user): a file found in a folder that is not a request (a run's
    // metadata, say) is skipped; one named on the command line is an error.
    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    for path in paths {
        if path.is_file() {
            files.push((path.clone(), true));
        } else {
            let mut found = Vec::new();
            collect(path, &mut found)?;
            files.extend(found.into_iter().map(|f| (f, false)));
        }
    }
    let mut out = Vec::new();
    for (file, named) in files {
        let name = file.display().to_string();
        let mut bytes = std::fs::read(&file).map_err(|error| RunError::Io {
            path: file.clone(),
            error,
        })?;
        let mut ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
        if ext == "gz" {
            use std::io::Read as _;
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut plain)
                .map_err(|error| RunError::NotGzip {
                    path: file.clone(),
                    error,
                })?;
            bytes = plain;
            ext = file
                .file_stem()
                .and_then(|s| Path::new(s).extension())
                .and_then(|e| e.to_str())
                .unwrap_or("");
        }
        let turns = match ext {
            "jsonl" if is_event_log(&bytes) => {
                events_to_turns(&bytes).map_err(|error| RunError::EventLog {
                    path: file.clone(),
                    error,
                })?
            }
            "jsonl" => bytes
                .split(|b| *b == b'\n')
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .map(<[u8]>::to_vec)
                .collect(),
            _ => match turns_of(&bytes) {
                Ok(turns) => turns,
                Err(error) if named => {
                    return Err(RunError::NotARequest {
                        path: file.clone(),
                        error,
                    });
                }
                Err(_) => continue,
            },
        };
        let Some(first) = turns.first() else {
            continue;
        };
        out.push(Recorded {
            dialect: Dialect::detect(first),
            preamble_tokens: preamble_tokens(&file),
            preambles: Vec::new(),
            name,
            turns,
            times: Vec::new(),
            recorded_prompt: Vec::new(),
            models: Vec::new(),
            project: None,
        });
    }
    Ok(out)
}

/// Whether a JSONL file is the triage replay event format (`{"type":"user/message",...}` per
/// line) rather than one request body per line.
fn is_event_log(bytes: &[u8]) -> bool {
    let first = bytes
        .split(|b| *b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace));
    first
        .and_then(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .and_then(|v| {
            v.get("type")
                .and_then(|t| t.as_str())
                .map(|t| t.contains('/'))
        })
        .unwrap_or(false)
}

/// Turns from the triage replay event format: `user/message` (`text`), `assistant/message`
/// (`text`, `reasoning`, `calls` of `{id, name, arguments}`) and `tool/result` (`callId`,
/// `text`, `isError`), one per line in order. Each assistant message is an answer, so the
/// request before it is a turn; the bodies are OpenAI chat-completions requests.
///
/// # Errors
/// A line that is not JSON or an event of an unknown type.
pub fn events_to_turns(bytes: &[u8]) -> Result<Vec<Vec<u8>>, EventLogError> {
    use serde_json::{Value, json};
    let text = |v: &Value| {
        v.get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut messages: Vec<Value> = Vec::new();
    let mut turns = Vec::new();
    let body = |messages: &[Value]| {
        serde_json::to_vec(&json!({"model": "replay", "messages": messages})).unwrap_or_default()
    };
    for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let event: Value = serde_json::from_slice(line)
            .map_err(|error| EventLogError::NotJson { line: n + 1, error })?;
        match event.get("type").and_then(Value::as_str) {
            Some("user/message") => messages.push(json!({"role": "user", "content": text(&event)})),
            Some("assistant/message") => {
                if !messages.is_empty() {
                    turns.push(body(&messages));
                }
                let calls: Vec<Value> = event
                    .get("calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        json!({"id": c["id"], "type": "function", "function": {
                            "name": c["name"], "arguments": c["arguments"].as_str().map_or_else(|| c["arguments"].to_string(), str::to_owned)}})
                    })
                    .collect();
                let mut m = json!({"role": "assistant", "content": text(&event)});
                if !calls.is_empty() {
                    m["tool_calls"] = Value::Array(calls);
                }
                messages.push(m);
            }
            Some("tool/result") => messages.push(json!({
                "role": "tool", "tool_call_id": event["callId"], "content": text(&event)})),
            other => {
                return Err(EventLogError::UnknownType {
                    line: n + 1,
                    kind: other.map(str::to_owned),
                });
            }
        }
    }
    if !messages.is_empty() {
        turns.push(body(&messages));
    }
    Ok(turns)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), RunError> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|error| RunError::Io {
                path: path.to_owned(),
                error,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        let recorded = |dialect: &str| {
            entries.iter().any(|e| {
                e.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n == format!("turns.{dialect}.jsonl")
                        || n == format!("turns.{dialect}.jsonl.gz")
                })
            })
        };
        let (openai_turns, anthropic_turns) = (recorded("openai"), recorded("anthropic"));
        // The final body may be stored gzipped (the test corpus in the repository is).
        entries.retain(|e| match e.file_name().and_then(|n| n.to_str()) {
            Some("openai.json" | "openai.json.gz") => !openai_turns,
            Some("anthropic.json" | "anthropic.json.gz") => !anthropic_turns,
            _ => true,
        });
        for entry in entries {
            let is_body = entry
                .extension()
                .is_some_and(|e| e == "json" || e == "jsonl" || e == "gz");
            if entry.is_dir() || is_body {
                collect(&entry, out)?;
            }
        }
        Ok(())
    } else if path.is_file() {
        out.push(path.to_owned());
        Ok(())
    } else {
        Err(RunError::Missing(path.to_owned()))
    }
}

/// Replays every session, with a progress line on a terminal.
///
/// # Errors
/// The first session that does not replay.
pub fn run(
    config: &Config,
    sessions: &[Recorded],
    options: &Options,
) -> Result<Vec<SessionReport>, RunError> {
    let pipeline = Arc::new(config.build_pipeline().map_err(RunError::Pipeline)?);
    let progress = std::io::stderr().is_terminal() && sessions.len() > 1;
    let mut reports = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        if progress {
            eprint!("\rreplay: {}/{} sessions", i + 1, sessions.len());
        }
        let options = Options {
            preamble_tokens: s.preamble_tokens,
            preambles: s.preambles.clone(),
            times: s.times.clone(),
            ..options.clone()
        };
        reports.push(replay_session(
            &s.name,
            &s.turns,
            s.dialect,
            config,
            pipeline.clone(),
            &options,
        )?);
    }
    if progress {
        eprintln!();
    }
    Ok(reports)
}

/// One component over every session: turns acted, saved (cumulative, unique), gates.
type ComponentSum<'a> = (usize, usize, usize, BTreeMap<&'a str, u64>);

/// The Markdown report.
pub fn markdown(reports: &[SessionReport], t: &Totals, prices: &Prices) -> String {
    let mut out = String::new();
    write_totals(&mut out, t);
    write_sessions(&mut out, reports, prices);
    write_components(&mut out, reports);
    write_largest(&mut out, reports);
    out
}

/// The headline, the sessions that lost and why, and the billed table.
fn write_totals(out: &mut String, t: &Totals) {
    let _ = writeln!(out, "# sluice replay\n\n{}.\n", what_was_replayed(t));
    let _ = writeln!(
        out,
        "**Billed input saved, net: {}**, as `/stats` `billed_savings_pct` reads it live: each request's bill as the provider reports it (every token of the request, the agent's preamble and the expand tool's declaration too, at its cache read, cache write or fresh price), against that bill with sluice's cuts put back, and {} expand rounds ({} of them repeats) billed. Before expand rounds: {}. Both arms billed on the prompt-cache cost model, as a check: {} ({} before rounds). Cache writes: {:+.2}%. Flips: **{}** (frozen flips {}). Visible recall: **{:.2}%**; recall with one expand: **{:.2}%** ({} of {} identifiers visible, {} one expand away).\n",
        saved_pct(t.billed_savings_pct),
        t.expand_rounds,
        t.expand_repeats,
        saved_pct(t.billed_savings_pct_gross),
        saved_pct(t.two_arm_savings_pct),
        saved_pct(t.two_arm_savings_pct_gross),
        t.cache_write_change_pct,
        t.flips,
        t.frozen_flips,
        t.visible_recall_pct,
        t.recall_pct,
        t.recall.visible,
        t.recall.referenced,
        t.recall.behind_marker
    );
    let _ = writeln!(
        out,
        "Content tokens saved, net: {} ({} before expand rounds): what `/stats` `net_savings_pct` reads live for the same requests. It counts tokens, not their price, so it is not the bill's change: a cut token a provider would have read from its cache saved a tenth of a fresh one.\n",
        saved_pct(t.net_savings_pct),
        saved_pct(t.savings_pct_gross),
    );
    write_losses(out, t);
    if let Some(ledger) = &t.keepalive {
        let _ = writeln!(
            out,
            "**Keep-alive** (`cache.keepalive`): {} pings in {} quiet gaps; {} gaps kept (the session came back after its entry would have expired). Pings read {} prefix tokens, kept turns read {} instead of writing them: {:+.0} input-token equivalents net. Billed input saved, net, with the keep-alive: **{}**.\n",
            ledger.pings,
            ledger.gaps_pinged,
            ledger.kept,
            ledger.ping_tokens,
            ledger.kept_tokens,
            t.keepalive_net,
            saved_pct(t.billed_savings_pct_with_keepalive),
        );
    }
    let _ = writeln!(
        out,
        "| | content tokens | cache reads | cache writes | billed (relative) |\n|---|--:|--:|--:|--:|"
    );
    let _ = writeln!(
        out,
        "| baseline | {} | {} | {} | {:.0} |",
        t.baseline.content_tokens, t.baseline.cache_read, t.baseline.cache_write, t.baseline_cost
    );
    let _ = writeln!(
        out,
        "| sluice | {} | {} | {} | {:.0} |",
        t.sluice.content_tokens, t.sluice.cache_read, t.sluice.cache_write, t.sluice_cost
    );
    let _ = writeln!(
        out,
        "| sluice's expand rounds | {} | {} | {} | {:.0} |\n",
        t.expand.content_tokens, t.expand.cache_read, t.expand.cache_write, t.expand_cost
    );
}

/// The sessions sluice cost more than it saved (net saved below zero), their share, and why.
fn write_losses(out: &mut String, t: &Totals) {
    let Some((name, worst)) = &t.worst_session else {
        return;
    };
    if t.losing_sessions == 0 {
        let _ = writeln!(
            out,
            "No session cost more than without sluice; the lowest billed input saved, net: {} ({}).\n",
            saved_pct(*worst),
            short(name)
        );
        return;
    }
    let causes: Vec<String> = t
        .losses
        .iter()
        .map(|(cause, l)| {
            format!(
                "{} because {} (median {}, worst {})",
                l.sessions,
                Loss::why(cause),
                saved_pct(l.median_pct),
                saved_pct(l.worst_pct)
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "Sessions that cost more than without sluice (billed input saved below 0%): **{} of {} ({:.1}%)**: {}. Worst session: **{}** ({}).\n",
        t.losing_sessions,
        t.sessions,
        t.losing_sessions_pct,
        causes.join("; "),
        saved_pct(*worst),
        short(name)
    );
}

/// A row per session.
fn write_sessions(out: &mut String, reports: &[SessionReport], prices: &Prices) {
    let _ = writeln!(
        out,
        "## Sessions\n\n| session | dialect | turns | cold | billed saved, net | before expand rounds | content tokens saved, net | expand rounds | cache writes | flips | visible recall | recall | suggested range (last turn) |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"
    );
    for r in reports {
        let s = totals(std::slice::from_ref(r), prices);
        let cold = r.turns.iter().filter(|t| t.cold).count();
        let range = r.suggested_range.map_or_else(
            || "none".to_owned(),
            |(lo, hi, n)| format!("messages {lo}-{hi} ({n} tokens)"),
        );
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:+.2}% | {} | {:.1}% | {:.1}% | {range} |",
            short(&r.name),
            r.dialect,
            s.turns,
            cold,
            saved_pct(s.billed_savings_pct),
            saved_pct(s.billed_savings_pct_gross),
            saved_pct(s.net_savings_pct),
            s.expand_rounds,
            s.cache_write_change_pct,
            s.flips,
            s.visible_recall_pct,
            s.recall_pct
        );
    }
}

/// A row per component, summed over every session.
fn write_components(out: &mut String, reports: &[SessionReport]) {
    let mut components: BTreeMap<&str, ComponentSum<'_>> = BTreeMap::new();
    for r in reports {
        for (name, c) in &r.components {
            let e = components.entry(name).or_default();
            e.0 += c.acted;
            e.1 += c.saved_tokens;
            e.2 += c.saved_tokens_unique;
            for (g, n) in &c.gates {
                *e.3.entry(g).or_default() += n;
            }
        }
    }
    let _ = writeln!(
        out,
        "\n## Components\n\n| component | turns acted | saved (cumulative) | saved (unique) | top reasons for not acting |\n|---|--:|--:|--:|---|"
    );
    for (name, (acted, saved, unique, gates)) in &components {
        let mut g: Vec<(&&str, &u64)> = gates.iter().collect();
        g.sort_by(|a, b| b.1.cmp(a.1));
        let top: Vec<String> = g.iter().take(3).map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            out,
            "| {name} | {acted} | {saved} | {unique} | {} |",
            top.join(", ")
        );
    }
}

/// The ten items that saved the most.
fn write_largest(out: &mut String, reports: &[SessionReport]) {
    let mut largest: Vec<(&str, usize, usize, usize, &str)> = reports
        .iter()
        .flat_map(|r| {
            r.largest
                .iter()
                .map(move |(k, i, n, c)| (r.name.as_str(), *k, *i, *n, c.as_str()))
        })
        .collect();
    largest.sort_by_key(|item| std::cmp::Reverse(item.3));
    let _ = writeln!(
        out,
        "\n## Largest items\n\n| session | turn | message | tokens saved | component |\n|---|--:|--:|--:|---|"
    );
    for (s, k, i, n, c) in largest.iter().take(10) {
        let _ = writeln!(out, "| {} | {k} | {i} | {n} | {c} |", short(s));
    }
}

fn short(name: &str) -> &str {
    let parts: Vec<&str> = name.rsplitn(3, '/').collect();
    match parts.as_slice() {
        [_, dir, _] => &name[name.len() - parts[0].len() - dir.len() - 1..],
        _ => name,
    }
}

/// The JSON report: `totals` and `sessions`, each session with its own `totals` (billed with
/// the same prices as the whole).
pub fn json(reports: &[SessionReport], t: &Totals, prices: &Prices) -> String {
    json_value(reports, t, prices).to_string()
}

/// [`json`] as a value, for a caller that adds to it (`--from claude-code`'s headline,
/// projects and bill check).
pub fn json_value(reports: &[SessionReport], t: &Totals, prices: &Prices) -> serde_json::Value {
    let sessions: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            let mut session = serde_json::to_value(r).unwrap_or_default();
            if let Some(object) = session.as_object_mut() {
                let own = totals(std::slice::from_ref(r), prices);
                object.insert(
                    "totals".into(),
                    serde_json::to_value(own).unwrap_or_default(),
                );
            }
            session
        })
        .collect();
    serde_json::json!({ "totals": t, "sessions": sessions })
}

/// Writes `report.md`, `report.json`, one chart per session and the corpus chart under `dir`;
/// `report.md` links the charts.
///
/// # Errors
/// A file that cannot be written.
pub fn write_out(
    dir: &Path,
    reports: &[SessionReport],
    t: &Totals,
    prices: &Prices,
    head: Option<&claude_code::Report>,
) -> Result<(), RunError> {
    let charts = dir.join("charts");
    std::fs::create_dir_all(&charts).map_err(|error| RunError::Io {
        path: charts.clone(),
        error,
    })?;
    let write = |path: PathBuf, text: String| {
        std::fs::write(&path, text).map_err(|error| RunError::Io { path, error })
    };
    let named: Vec<(String, &SessionReport)> = reports
        .iter()
        .map(|r| (short(&r.name).to_owned(), r))
        .collect();
    let mut links = String::from(
        "\n## Charts\n\n![the corpus: billed input saved, net, and content tokens saved, net, per session](charts/corpus.svg)\n\n",
    );
    write(
        charts.join("corpus.svg"),
        crate::chart::corpus(&named, t, prices),
    )?;
    for (i, (name, r)) in named.iter().enumerate() {
        let file: String = name
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { '-' })
            .collect();
        let file = format!("{i:03}-{file}.svg");
        write(charts.join(&file), crate::chart::session(r, name, prices))?;
        let _ = writeln!(links, "- [{name}](charts/{file})");
    }
    // An agent's own logs (`--from`): the headline, the projects and the bill check lead, as on
    // stdout.
    let lead = head.map(|h| h.markdown() + "\n").unwrap_or_default();
    write(
        dir.join("report.md"),
        lead + &markdown(reports, t, prices) + &links,
    )?;
    let mut value = json_value(reports, t, prices);
    if let Some(head) = head {
        head.add_to(&mut value);
    }
    write(dir.join("report.json"), value.to_string())?;
    Ok(())
}

/// `sluice tune cold-cache`: billed input saved (net of expand rounds, the report's headline)
/// for each idle-gap assumption, cold detection on and off, and the setting that saves most.
///
/// # Errors
/// A session that does not replay.
pub fn tune_cold_cache(
    config: &Config,
    sessions: &[Recorded],
    gaps: &[u64],
) -> Result<String, RunError> {
    let mut out = String::from(
        "| idle gap | cold_cache | billed input saved, net | before expand rounds | cache writes change | flips |\n|--:|---|--:|--:|--:|--:|\n",
    );
    // Summed over the gaps: the gap is the user's habit, the setting is what to choose.
    let mut sums = [(0.0_f64, true), (0.0_f64, false)];
    for &gap in gaps {
        for cold in [true, false] {
            let options = Options {
                gap: Duration::from_secs(gap),
                cold_detection: cold,
                ..Options::default()
            };
            let reports = run(config, sessions, &options)?;
            let t = totals(&reports, &options.prices);
            let _ = writeln!(
                out,
                "| {gap} s | {} | {} | {} | {:+.2}% | {} |",
                if cold { "on" } else { "off" },
                saved_pct(t.billed_savings_pct),
                saved_pct(t.billed_savings_pct_gross),
                t.cache_write_change_pct,
                t.flips
            );
            sums[usize::from(!cold)].0 += t.billed_savings_pct;
        }
    }
    let n = gaps.len().max(1) as f64;
    let (on, off) = (sums[0].0 / n, sums[1].0 / n);
    let _ = writeln!(
        out,
        "\nMean billed input saved, net, over these gaps: cold_cache on {}, off {}. Recommended: cold_cache {}.",
        saved_pct(on),
        saved_pct(off),
        if on >= off { "on (the default)" } else { "off" }
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_triage_event_format_becomes_turns() {
        let log = br#"{"type":"user/message","text":"the build fails"}
{"type":"assistant/message","reasoning":"check","calls":[{"id":"c1","name":"bash","arguments":"{\"cmd\":\"npm run build\"}"}]}
{"type":"tool/result","callId":"c1","text":"npm ERR! missing script: build","isError":true}
{"type":"assistant/message","text":"there is no build script; adding one"}
"#;
        assert!(is_event_log(log));
        let turns = events_to_turns(log).unwrap();
        assert_eq!(turns.len(), 3, "two requests, then the full record");
        let second: serde_json::Value = serde_json::from_slice(&turns[1]).unwrap();
        let messages = second["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["tool_calls"][0]["function"]["name"], "bash");
        assert_eq!(messages[2]["tool_call_id"], "c1");
        let parsed = engine::wire::parse(&turns[1], Dialect::OpenAi).unwrap();
        assert!(parsed.messages()[2].is_tool());
        assert!(events_to_turns(b"{\"type\":\"x/y\"}").is_err());
        assert!(!is_event_log(b"{\"model\":\"m\",\"messages\":[]}"));
    }
}
