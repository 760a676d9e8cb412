//! `sluice replay --from claude-code`: the user's own Claude Code transcripts, found where
//! Claude Code keeps them, read by `modes::replay::claude_code`, and replayed on their recorded
//! clock, each session's preamble read from its recorded usage. Only file names, line numbers
//! and counts are ever printed, never a transcript's text.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use engine::wire::Dialect;
use modes::replay::claude_code::{self, SessionLog};
use modes::replay::{Prices, SessionReport};
use serde::Serialize;

use super::{Recorded, RunError};

/// Claude Code's preamble (system prompt and tools), which its transcripts lack, for a session
/// whose transcript has no usage to read its own from (`claude_code::preamble`): the size
/// `tests/corpus/claude-code/replay.json` bills for the same reason.
pub const PREAMBLE_TOKENS: usize = 18_000;

/// Which sessions to replay.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    /// Sessions whose last call is at or after this time (ms since the Unix epoch).
    pub since_ms: Option<i64>,
    /// Project folders whose name contains this.
    pub project: Option<String>,
}

impl Filters {
    /// Whether a session whose last call was at `last` is older than `--since` (one with no
    /// readable time cannot be shown to be recent, so it goes too when `--since` is given).
    pub fn too_old(&self, last: Option<i64>) -> bool {
        self.since_ms
            .is_some_and(|since| last.is_none_or(|l| l < since))
    }
}

/// What the walk found, besides the sessions: for the user, on stderr.
#[derive(Default)]
pub struct Found {
    pub sessions: Vec<Recorded>,
    pub files: usize,
    pub calls: usize,
    pub filtered_out: usize,
    /// Problems and counts, one a line (file names, line numbers, record types).
    pub notes: Vec<String>,
    /// The earliest call replayed (ms since the Unix epoch).
    pub first_ms: Option<i64>,
    /// Sessions billed with the preamble their recorded usage tells; the rest bill the
    /// stand-in.
    pub preamble_from_record: usize,
}

/// Where Claude Code keeps its projects: `$CLAUDE_CONFIG_DIR/projects`, else
/// `~/.claude/projects`. `None` with neither variable set.
pub fn default_root(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    if let Some(dir) = env("CLAUDE_CONFIG_DIR") {
        return Some(PathBuf::from(dir).join("projects"));
    }
    env("HOME").map(|home| PathBuf::from(home).join(".claude").join("projects"))
}

/// `--since`: a date (`2025-06-01`, midnight UTC) or a number of days back from `now_ms`
/// (`30d`). `None` when it is neither.
pub fn parse_since(text: &str, now_ms: i64) -> Option<i64> {
    if let Some(days) = text.strip_suffix('d') {
        let days: i64 = days.parse().ok().filter(|d| *d >= 0)?;
        // A window longer than the clock can count is no window: refused as a bad --since.
        return days
            .checked_mul(86_400_000)
            .and_then(|span| now_ms.checked_sub(span));
    }
    claude_code::parse_timestamp(&format!("{text}T00:00:00Z"))
}

/// The session files under `root`: a `.jsonl` file itself; else each project folder's
/// `<session>.jsonl` (and the `agent-<id>.jsonl` older versions wrote beside it) and its
/// sessions' `<session>/subagents/agent-<id>.jsonl`; a folder that holds session files itself
/// is read as one project. In name order, with each file's project.
///
/// # Errors
/// A folder that cannot be read.
pub fn session_files(root: &Path) -> Result<Vec<(String, PathBuf)>, RunError> {
    if root.is_file() {
        let project = project_name(root.parent().unwrap_or(root));
        return Ok(vec![(project, root.to_owned())]);
    }
    if !root.is_dir() {
        return Err(RunError::Missing(root.to_owned()));
    }
    let mut out = Vec::new();
    if !jsonl_in(root)?.is_empty() {
        project_files(root, &mut out)?;
        return Ok(out);
    }
    for project in entries(root)?.into_iter().filter(|p| p.is_dir()) {
        project_files(&project, &mut out)?;
    }
    Ok(out)
}

fn project_files(project: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<(), RunError> {
    let name = project_name(project);
    for file in jsonl_in(project)? {
        out.push((name.clone(), file));
    }
    for session in entries(project)?.into_iter().filter(|p| p.is_dir()) {
        let subagents = session.join("subagents");
        if subagents.is_dir() {
            for file in jsonl_in(&subagents)? {
                out.push((name.clone(), file));
            }
        }
    }
    Ok(())
}

fn project_name(dir: &Path) -> String {
    dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// A folder's entries, in name order (the walks of every agent's logs read folders so).
pub(crate) fn entries(dir: &Path) -> Result<Vec<PathBuf>, RunError> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| RunError::Io {
            path: dir.to_owned(),
            error,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    Ok(entries)
}

fn jsonl_in(dir: &Path) -> Result<Vec<PathBuf>, RunError> {
    Ok(entries(dir)?
        .into_iter()
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "jsonl"))
        .collect())
}

/// Reads every session under `root` that passes `filters`: one replayed session per
/// compaction segment, on its recorded clock.
///
/// # Errors
/// A folder or file that cannot be read, or a folder with no transcripts (the message says
/// where it looked).
pub fn load(root: &Path, filters: &Filters) -> Result<Found, RunError> {
    let files = session_files(root)?;
    let mut found = Found::default();
    for (project, file) in files {
        if filters
            .project
            .as_ref()
            .is_some_and(|p| !project.contains(p.as_str()))
        {
            continue;
        }
        found.files += 1;
        let name = file.display().to_string();
        // One file that cannot be read is noted, and the others still replay.
        let bytes = match std::fs::read(&file) {
            Ok(bytes) => bytes,
            Err(error) => {
                found.notes.push(format!("{name}: skipped: {error}"));
                continue;
            }
        };
        let mut transcript = claude_code::read(&name, &bytes);
        note(
            &mut found.notes,
            &name,
            &transcript.malformed,
            transcript.half_written_line,
            &transcript.unknown,
        );
        if filters.too_old(transcript.calls().filter_map(|c| c.at_ms).max()) {
            found.filtered_out += 1;
            continue;
        }
        // Sub-agents an older Claude Code wrote into this file replay as sessions of their own,
        // as a newer one's `subagents/` files do.
        let sidechains = std::mem::take(&mut transcript.sidechains);
        sessions_of(&project, &name, transcript, &mut found);
        for (k, sidechain) in sidechains.into_iter().enumerate() {
            let name = format!("{name}#sidechain-{k}");
            sessions_of(&project, &name, sidechain, &mut found);
        }
    }
    if found.files == 0 {
        return Err(RunError::NoTranscripts(root.to_owned()));
    }
    Ok(found)
}

/// The transcript's segments as replayed sessions, each call billed with the preamble its
/// recorded usage tells, or the stand-in when it tells none.
fn sessions_of(project: &str, name: &str, transcript: SessionLog, found: &mut Found) {
    // Read over the whole transcript: a compaction changes the messages, not what the session
    // sends beside them, and more calls make a steadier median.
    let preambles = {
        let calls: Vec<&claude_code::Call> = transcript.calls().collect();
        claude_code::preamble::per_call(&calls)
    };
    let mut preambles = preambles.unwrap_or_default().into_iter();
    for (k, segment) in transcript.segments.into_iter().enumerate() {
        found.calls += segment.calls.len();
        let first = segment.calls.iter().filter_map(|c| c.at_ms).min();
        found.first_ms = match (found.first_ms, first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let times = claude_code::times(&segment.calls).unwrap_or_default();
        let recorded_prompt = segment
            .calls
            .iter()
            .map(|c| c.usage.prompt_tokens())
            .collect();
        let own: Vec<usize> = preambles.by_ref().take(segment.calls.len()).collect();
        found.preamble_from_record += usize::from(!own.is_empty());
        let mut turns: Vec<Vec<u8>> = segment.calls.into_iter().map(|c| c.body).collect();
        turns.extend(segment.record);
        let name = if k == 0 {
            name.to_owned()
        } else {
            format!("{name}#segment-{k}")
        };
        found.sessions.push(Recorded {
            name,
            dialect: Dialect::Anthropic,
            turns,
            preamble_tokens: PREAMBLE_TOKENS,
            preambles: own,
            times,
            recorded_prompt,
            models: Vec::new(),
            project: Some(project.to_owned()),
        });
    }
}

/// What a file's reading noted: counts and positions only.
pub(crate) fn note(
    notes: &mut Vec<String>,
    name: &str,
    malformed: &[claude_code::MalformedLine],
    half_written_line: Option<usize>,
    unknown: &std::collections::BTreeMap<String, usize>,
) {
    for line in malformed {
        notes.push(line.to_string());
    }
    if let Some(line) = half_written_line {
        notes.push(format!(
            "{name} line {line}: half-written last line skipped"
        ));
    }
    if !unknown.is_empty() {
        // A record type is the transcript's own text: only a short, plain one is shown, so a
        // damaged or hostile file cannot put its content on stderr through it.
        let shown = |k: &str| {
            let plain = !k.is_empty()
                && k.len() <= 40
                && k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b"_-/".contains(&b));
            if plain {
                k.to_owned()
            } else {
                "(other)".to_owned()
            }
        };
        let kinds: Vec<String> = unknown
            .iter()
            .map(|(k, n)| format!("{}×{n}", shown(k)))
            .collect();
        notes.push(format!(
            "{name}: unknown record types skipped: {}",
            kinds.join(", ")
        ));
    }
}

/// A session off the recorded bill by more than this (percent, either way) is named.
pub const OFF_BY_PCT: f64 = 10.0;

/// What `--from claude-code` leads with, for the Markdown report and the JSON one alike.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub headline: Headline,
    pub projects: Vec<ProjectRow>,
    pub bill_check: BillCheck,
}

/// Over the last `days` days, the billed input sluice would have saved, net.
#[derive(Debug, Clone, Serialize)]
pub struct Headline {
    pub days: i64,
    /// Billed input saved, net (the report's own headline figure), in percent, savings positive.
    pub billed_saved_net_pct: f64,
    pub calls: usize,
    pub sessions: usize,
    /// The same bills in US dollars, at each call's own model's list price.
    pub money: Money,
}

/// Billed input in US dollars, each call at its own model's list price (the dashboard's table,
/// `dashboard::prices`): what the requests as sent would have billed, and what sluice's
/// requests and expand rounds billed. A call whose model the table does not price is counted
/// apart, never as $0.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Money {
    pub baseline_usd: f64,
    pub with_sluice_usd: f64,
    pub priced_calls: usize,
    pub unpriced_calls: usize,
}

impl Money {
    /// What sluice would have saved, in dollars (below zero for a loss).
    pub fn saved_usd(&self) -> f64 {
        self.baseline_usd - self.with_sluice_usd
    }

    /// "$0.42 of $3.10" for a table cell; "unknown" when no call could be priced.
    fn shown(&self) -> String {
        if self.priced_calls == 0 {
            "unknown".to_owned()
        } else {
            format!("{} of {}", usd(self.saved_usd()), usd(self.baseline_usd))
        }
    }

    fn of<'a>(sessions: impl IntoIterator<Item = (&'a Recorded, &'a SessionReport)>) -> Money {
        let mut m = Money::default();
        for (s, r) in sessions {
            for (k, (body, turn)) in s.turns.iter().zip(&r.turns).enumerate() {
                let model = s.models.get(k).filter(|m| !m.is_empty()).cloned();
                let Some(price) = model
                    .or_else(|| model_of(body))
                    .and_then(|m| dashboard::prices::price(&m))
                else {
                    m.unpriced_calls += 1;
                    continue;
                };
                // The ledger's terms are in fresh-input tokens (a cache read a tenth of one, a
                // write 1.25: Claude's ratios, and GPT-5's reads), so the model's input price
                // turns them into its money, and the dollars read as the headline does.
                let usd = |tokens: f64| tokens * price.input / 1e6;
                m.baseline_usd += usd(turn.billed.baseline());
                m.with_sluice_usd += usd(turn.billed.billed + turn.billed.rounds);
                m.priced_calls += 1;
            }
        }
        m
    }
}

/// A name from a log (a project's folder, Codex's `cwd`) as a Markdown table cell: a `|` or a
/// control character would break the table, so each is shown as `?`.
fn table_cell(name: &str) -> String {
    name.chars()
        .map(|c| if c == '|' || c.is_control() { '?' } else { c })
        .collect()
}

/// Dollars to the cent, a loss with its sign before the `$` and a rounding of zero unsigned:
/// `$1.45`, `-$0.07`, `$0.00`.
fn usd(v: f64) -> String {
    let cents = (v * 100.0).round();
    if cents == 0.0 {
        "$0.00".to_owned()
    } else if cents < 0.0 {
        format!("-${:.2}", -cents / 100.0)
    } else {
        format!("${:.2}", cents / 100.0)
    }
}

/// A body's `model`, found without building its tree (a rebuilt call can be large).
fn model_of(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let root = engine::wire::json::parse_document(text).ok()?;
    let span = engine::wire::json::get(text, root, "model")?;
    engine::wire::json::decode_string(text, span)
        .ok()
        .map(|m| m.into_owned())
}

/// One project's sessions.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectRow {
    pub project: String,
    pub sessions: usize,
    pub calls: usize,
    pub billed_saved_net_pct: f64,
    pub content_saved_net_pct: f64,
    /// The project's bills in dollars, each call at its model's list price.
    pub money: Money,
}

/// Where the preamble billed on a session's calls came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PreambleSource {
    /// Read from the session's recorded usage.
    Record,
    /// The stand-in (the transcript has no usage to read it from).
    StandIn,
    /// None billed (`--no-preamble`).
    Off,
}

/// Replay's baseline against the recorded bill, over some calls.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Checked {
    /// Calls with a recorded bill (one recorded without usage is left out of both sides).
    pub calls: usize,
    pub recorded_prompt_tokens: u64,
    pub baseline_tokens: u64,
    /// (baseline − recorded) / recorded, in percent: above 0, replay bills more than the
    /// provider did. `None` with nothing recorded.
    pub error_pct: Option<f64>,
}

impl Checked {
    fn add(&mut self, other: &Checked) {
        self.calls += other.calls;
        self.recorded_prompt_tokens = self
            .recorded_prompt_tokens
            .saturating_add(other.recorded_prompt_tokens);
        self.baseline_tokens = self.baseline_tokens.saturating_add(other.baseline_tokens);
        self.error_pct = error_pct(self.baseline_tokens, self.recorded_prompt_tokens);
    }

    fn off(&self) -> bool {
        self.error_pct.is_some_and(|e| e.abs() > OFF_BY_PCT)
    }
}

/// One session's check.
#[derive(Debug, Clone, Serialize)]
pub struct BillRow {
    /// The session's name, as `sessions[].name` has it.
    pub session: String,
    #[serde(flatten)]
    pub checked: Checked,
    /// The preamble billed on the session's first call, and where it came from.
    pub preamble_tokens: usize,
    pub preamble: PreambleSource,
    /// The session's bills in dollars, each call at its model's list price.
    pub money: Money,
}

/// Replay's baseline bill of each call beside the prompt tokens the provider billed for it
/// (input, cache reads and cache writes): how far the cost model, with its preamble, is from
/// the recorded bill, per session and in total.
#[derive(Debug, Clone, Serialize)]
pub struct BillCheck {
    pub sessions: Vec<BillRow>,
    pub total: Checked,
    /// The error beyond which a session is named in `off`, in percent, either way.
    pub off_by_pct: f64,
    /// The sessions off by more than that.
    pub off: Vec<String>,
}

/// The headline, the per-project rows and the bill check.
pub fn report(
    sessions: &[Recorded],
    reports: &[SessionReport],
    prices: &Prices,
    days: i64,
) -> Report {
    let all = modes::replay::totals(reports, prices);
    let headline = Headline {
        days,
        billed_saved_net_pct: all.billed_savings_pct,
        calls: all.turns,
        sessions: all.sessions,
        money: Money::of(sessions.iter().zip(reports)),
    };
    // One row per project, however its sessions are interleaved (Codex's come by date).
    let mut names: Vec<&str> = sessions
        .iter()
        .filter_map(|s| s.project.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    let projects = names
        .into_iter()
        .map(|project| {
            let (recorded, mine): (Vec<&Recorded>, Vec<SessionReport>) = sessions
                .iter()
                .zip(reports)
                .filter(|(s, _)| s.project.as_deref() == Some(project))
                .map(|(s, r)| (s, r.clone()))
                .unzip();
            let t = modes::replay::totals(&mine, prices);
            ProjectRow {
                project: project.to_owned(),
                sessions: t.sessions,
                calls: t.turns,
                billed_saved_net_pct: t.billed_savings_pct,
                content_saved_net_pct: t.net_savings_pct,
                money: Money::of(recorded.into_iter().zip(&mine)),
            }
        })
        .collect();
    Report {
        headline,
        projects,
        bill_check: bill_check(sessions, reports),
    }
}

fn bill_check(sessions: &[Recorded], reports: &[SessionReport]) -> BillCheck {
    let mut total = Checked::default();
    let rows: Vec<BillRow> = sessions
        .iter()
        .zip(reports)
        .map(|(s, r)| {
            let checked = check_session(s, r);
            total.add(&checked);
            let (preamble_tokens, preamble) = match s.preambles.first() {
                Some(n) => (*n, PreambleSource::Record),
                None if s.preamble_tokens > 0 => (s.preamble_tokens, PreambleSource::StandIn),
                None => (0, PreambleSource::Off),
            };
            BillRow {
                session: r.name.clone(),
                checked,
                preamble_tokens,
                preamble,
                money: Money::of(std::iter::once((s, r))),
            }
        })
        .collect();
    let off = rows
        .iter()
        .filter(|row| row.checked.off())
        .map(|row| row.session.clone())
        .collect();
    BillCheck {
        sessions: rows,
        total,
        off_by_pct: OFF_BY_PCT,
        off,
    }
}

/// One session's calls that have a recorded bill, both sides summed.
fn check_session(s: &Recorded, r: &SessionReport) -> Checked {
    let mut c = Checked::default();
    for (recorded, turn) in s.recorded_prompt.iter().zip(&r.turns) {
        // A call recorded without usage has no bill to check against.
        if *recorded == 0 {
            continue;
        }
        c.calls += 1;
        c.recorded_prompt_tokens = c.recorded_prompt_tokens.saturating_add(*recorded);
        c.baseline_tokens = c
            .baseline_tokens
            .saturating_add(turn.baseline.content_tokens as u64);
    }
    c.error_pct = error_pct(c.baseline_tokens, c.recorded_prompt_tokens);
    c
}

fn error_pct(baseline: u64, recorded: u64) -> Option<f64> {
    (recorded > 0).then(|| (baseline as f64 - recorded as f64) / recorded as f64 * 100.0)
}

impl Report {
    /// Adds `headline`, `projects` and `bill_check` to the JSON report, beside its `totals` and
    /// `sessions`: a script reads them where the Markdown report leads with them.
    pub fn add_to(&self, report: &mut serde_json::Value) {
        let Some(object) = report.as_object_mut() else {
            return;
        };
        let fields = [
            ("headline", serde_json::to_value(&self.headline)),
            ("projects", serde_json::to_value(&self.projects)),
            ("bill_check", serde_json::to_value(&self.bill_check)),
        ];
        for (key, value) in fields {
            object.insert(key.to_owned(), value.unwrap_or_default());
        }
    }

    /// The headline, the per-project table and the bill check, in Markdown.
    pub fn markdown(&self) -> String {
        let h = &self.headline;
        // A loss reads as one, not as a negative saving.
        let verdict = if h.billed_saved_net_pct < 0.0 {
            format!("cost {:.2}% more billed input", -h.billed_saved_net_pct)
        } else {
            format!(
                "saved {} of the billed input",
                crate::chart::saved_pct(h.billed_saved_net_pct)
            )
        };
        let m = &h.money;
        let dollars = if m.priced_calls == 0 {
            "no call's model is in the price table, so no dollars".to_owned()
        } else {
            // The percentage weighs every model's token alike (the ledger's unit, as `/stats`
            // keeps it); dollars weigh each by its price. Where the mix of models makes them
            // differ, both are said, and why.
            let share = 100.0 * m.saved_usd() / m.baseline_usd.max(f64::MIN_POSITIVE);
            let weighed = if (share - h.billed_saved_net_pct).abs() >= 0.005 {
                format!(
                    " ({:.2}% of the dollars: calls on dearer models saved {} than the rest)",
                    share,
                    if share < h.billed_saved_net_pct {
                        "less"
                    } else {
                        "more"
                    }
                )
            } else {
                String::new()
            };
            format!(
                "{} of {} at each call's model's list price{weighed}{}",
                usd(m.saved_usd()),
                usd(m.baseline_usd),
                if m.unpriced_calls > 0 {
                    format!(", {} calls of unknown price left out", m.unpriced_calls)
                } else {
                    String::new()
                }
            )
        };
        let mut out = format!(
            "**Over the last {} days sluice would have {verdict}**: {dollars} (billed input saved, net, on {} calls in {} sessions).\n\n## Projects\n\n| project | sessions | calls | billed saved, net | at list prices: saved of billed | content tokens saved, net |\n|---|--:|--:|--:|--:|--:|\n",
            h.days, h.calls, h.sessions,
        );
        for p in &self.projects {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                table_cell(&p.project),
                p.sessions,
                p.calls,
                crate::chart::saved_pct(p.billed_saved_net_pct),
                p.money.shown(),
                crate::chart::saved_pct(p.content_saved_net_pct),
            );
        }
        out.push('\n');
        self.bill_check.write_markdown(&mut out);
        out
    }
}

impl BillCheck {
    fn write_markdown(&self, out: &mut String) {
        out.push_str(
            "## Recorded bill check\n\nReplay's baseline bill of each call (the preamble read from the session's recorded usage: prompt tokens billed less replay's count of the messages, the median over its calls; the stand-in where the transcript has no usage) against the prompt tokens the provider billed for it (input, cache reads, cache writes). Error: (baseline − recorded) / recorded.\n\n| session | calls | preamble | recorded prompt tokens | replay's baseline | error | at list prices: saved of billed |\n|---|--:|--:|--:|--:|--:|--:|\n",
        );
        for row in &self.sessions {
            let preamble = match row.preamble {
                PreambleSource::Record => format!("{} (recorded)", row.preamble_tokens),
                PreambleSource::StandIn => format!("{} (stand-in)", row.preamble_tokens),
                PreambleSource::Off => "none".to_owned(),
            };
            let c = &row.checked;
            let _ = writeln!(
                out,
                "| {} | {} | {preamble} | {} | {} | {} | {} |",
                super::short(&row.session),
                c.calls,
                c.recorded_prompt_tokens,
                c.baseline_tokens,
                pct(c.error_pct),
                row.money.shown(),
            );
        }
        let t = &self.total;
        let _ = writeln!(
            out,
            "| **total** | {} | | {} | {} | **{}** | |\n",
            t.calls,
            t.recorded_prompt_tokens,
            t.baseline_tokens,
            pct(t.error_pct),
        );
        let checked = self
            .sessions
            .iter()
            .filter(|r| r.checked.error_pct.is_some())
            .count();
        if self.off.is_empty() {
            let _ = writeln!(
                out,
                "No session is off the recorded bill by more than {}%.\n",
                self.off_by_pct
            );
        } else {
            let names: Vec<&str> = self.off.iter().map(|n| super::short(n)).collect();
            let _ = writeln!(
                out,
                "Off the recorded bill by more than {}%: **{} of {checked} sessions**: {}.\n",
                self.off_by_pct,
                self.off.len(),
                names.join(", ")
            );
        }
    }
}

fn pct(error: Option<f64>) -> String {
    error.map_or_else(|| "n/a".to_owned(), |e| format!("{e:+.1}%"))
}

/// Days from `first_ms` to `now_ms`, at least 1, rounded up: the headline's window when no
/// `--since` was given.
pub fn days_between(first_ms: i64, now_ms: i64) -> i64 {
    let span = now_ms.saturating_sub(first_ms).max(0);
    (span.saturating_add(86_399_999) / 86_400_000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_days_and_dates_and_refuses_the_rest() {
        let now = 1_750_000_000_000;
        assert_eq!(parse_since("0d", now), Some(now));
        assert_eq!(parse_since("30d", now), Some(now - 30 * 86_400_000));
        assert_eq!(parse_since("2025-06-01", now), Some(1_748_736_000_000));
        // Too many days for the clock: a bad --since, not a panic or a wrapped window.
        assert_eq!(parse_since("99999999999999d", now), None);
        for bad in ["-3d", "d", "2025-02-30", "june", ""] {
            assert_eq!(parse_since(bad, now), None, "{bad}");
        }
        assert_eq!(days_between(now, now), 1);
        assert_eq!(days_between(now - 86_400_001, now), 2);
        assert_eq!(days_between(i64::MIN, i64::MAX), i64::MAX / 86_400_000);
    }

    /// Each call is priced at the model its recording names (gemini-cli's bodies name none),
    /// else the body's; a model the table does not know is counted apart, never as $0.
    #[test]
    fn money_prices_each_call_at_its_own_model() {
        use modes::replay::{Bill, Recall, TurnRecord};
        let turn = |written: usize, kept: usize| TurnRecord {
            baseline: Bill {
                content_tokens: written,
                cache_write: written,
                ..Bill::default()
            },
            sluice: Bill {
                content_tokens: kept,
                cache_write: kept,
                ..Bill::default()
            },
            expand: Bill::default(),
            expand_rounds: 0,
            expand_repeats: 0,
            cold: false,
            amortized: false,
            flipped_messages: 0,
            recall: Recall::default(),
            saving: engine::savings::NetSaving::default(),
            // On the ledger, in fresh-input tokens: what was sent billed, the cut kept off.
            billed: engine::savings::BilledSaving {
                requests: 1,
                billed: kept as f64,
                cut: (written - kept) as f64,
                ..engine::savings::BilledSaving::default()
            },
        };
        let recorded = Recorded {
            name: "s".into(),
            dialect: Dialect::Gemini,
            turns: vec![
                b"{}".to_vec(),
                br#"{"model":"claude-sonnet-4-5"}"#.to_vec(),
                b"{}".to_vec(),
            ],
            preamble_tokens: 0,
            preambles: Vec::new(),
            times: Vec::new(),
            recorded_prompt: Vec::new(),
            // The first from the record, the second from its body, the third unknown.
            models: vec![
                "gemini-2.5-pro".into(),
                String::new(),
                "gemini-9-unknown".into(),
            ],
            project: None,
        };
        let report = SessionReport {
            turns: vec![
                turn(1_000_000, 800_000),
                turn(1_000_000, 500_000),
                turn(1_000_000, 0),
            ],
            ..SessionReport::default()
        };
        let m = Money::of(std::iter::once((&recorded, &report)));
        assert_eq!((m.priced_calls, m.unpriced_calls), (2, 1));
        // Fresh input: gemini-2.5-pro's $1.25 a million, Sonnet's $3.
        let expected_base = 1.25 + 3.0;
        let expected_with = 0.8 * 1.25 + 0.5 * 3.0;
        assert!((m.baseline_usd - expected_base).abs() < 1e-9, "{m:?}");
        assert!((m.with_sluice_usd - expected_with).abs() < 1e-9, "{m:?}");
        assert!((m.saved_usd() - (expected_base - expected_with)).abs() < 1e-9);
    }

    #[test]
    fn dollars_read_as_a_person_writes_them() {
        assert_eq!(usd(1.454), "$1.45");
        assert_eq!(usd(-0.0704), "-$0.07");
        assert_eq!(usd(-0.001), "$0.00");
        assert_eq!(usd(0.0), "$0.00");
    }
}
