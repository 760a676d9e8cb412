//! `sluice replay --from codex` and `--from gemini`: the user's own Codex rollouts and
//! gemini-cli chats, found where each agent keeps them, read by `modes::replay::codex` and
//! `modes::replay::gemini`, and replayed on their recorded clock. What is the same as
//! `--from claude-code` (the filters, what the walk found, the headline, the per-project table
//! and the bill check) is `claude_code`'s. Only file names, line numbers and counts are ever
//! printed, never a log's text.

use std::path::{Path, PathBuf};

use engine::wire::Dialect;
use modes::replay::agent_log::{self, Call, Log};

use super::claude_code::{Filters, Found};
use super::{Recorded, RunError};

/// An agent whose own logs replay reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    Codex,
    Gemini,
}

impl Agent {
    /// The agent's name in messages.
    pub fn label(self) -> &'static str {
        match self {
            Agent::Codex => "Codex",
            Agent::Gemini => "gemini-cli",
        }
    }

    /// The dialect of the bodies its reader rebuilds.
    pub fn dialect(self) -> Dialect {
        match self {
            Agent::Codex => Dialect::Responses,
            Agent::Gemini => Dialect::Gemini,
        }
    }

    /// What the walk looks for, for a folder with none.
    fn layout(self) -> &'static str {
        match self {
            Agent::Codex => {
                "rollout-*.jsonl and rollout-*.jsonl.zst, as under sessions/YYYY/MM/DD/ and archived_sessions/"
            }
            Agent::Gemini => "<project>/chats/session-*.json and session-*.jsonl",
        }
    }

    /// Where the agent keeps its logs: Codex `$CODEX_HOME`, else `~/.codex` (its `sessions`
    /// and `archived_sessions`); gemini-cli `~/.gemini/tmp`. `None` with no variable set.
    pub fn default_root(self, env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
        match self {
            Agent::Codex => env("CODEX_HOME")
                .map(PathBuf::from)
                .or_else(|| env("HOME").map(|home| PathBuf::from(home).join(".codex"))),
            Agent::Gemini => {
                env("HOME").map(|home| PathBuf::from(home).join(".gemini").join("tmp"))
            }
        }
    }

    fn is_log(self, file: &Path) -> bool {
        let Some(name) = file.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        match self {
            Agent::Codex => {
                name.starts_with("rollout-")
                    && (name.ends_with(".jsonl") || name.ends_with(".jsonl.zst"))
            }
            Agent::Gemini => {
                name.starts_with("session-")
                    && (name.ends_with(".json") || name.ends_with(".jsonl"))
            }
        }
    }

    fn read(self, name: &str, bytes: &[u8]) -> Log {
        match self {
            Agent::Codex => modes::replay::codex::read(name, bytes),
            Agent::Gemini => modes::replay::gemini::read(name, bytes),
        }
    }
}

/// The agent's log files under `root` (a log file itself, or any folder above them), in name
/// order.
///
/// # Errors
/// A folder that cannot be read.
pub fn log_files(agent: Agent, root: &Path) -> Result<Vec<PathBuf>, RunError> {
    if root.is_file() {
        return Ok(vec![root.to_owned()]);
    }
    if !root.is_dir() {
        return Err(RunError::Missing(root.to_owned()));
    }
    let mut out = Vec::new();
    walk(agent, root, &mut out)?;
    Ok(out)
}

fn walk(agent: Agent, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), RunError> {
    for path in super::claude_code::entries(dir)? {
        // A link is not followed: a loop of them would walk forever, and one could lead out of
        // the folder named.
        if path.is_symlink() {
            continue;
        }
        if path.is_dir() {
            walk(agent, &path, out)?;
        } else if agent.is_log(&path) {
            out.push(path);
        }
    }
    Ok(())
}

/// A session's project: for Codex the working directory its log records, for gemini-cli the
/// folder above `chats/` (the project's hash, or the name newer versions give it).
fn project(agent: Agent, file: &Path, log: &Log) -> String {
    match agent {
        Agent::Codex => log.cwd.clone().unwrap_or_else(|| "(no cwd)".to_owned()),
        Agent::Gemini => {
            let chats = file.parent();
            let dir = match chats {
                Some(c) if c.file_name().is_some_and(|n| n == "chats") => c.parent(),
                other => other,
            };
            dir.and_then(Path::file_name).map_or_else(
                || "(unknown)".to_owned(),
                |n| n.to_string_lossy().into_owned(),
            )
        }
    }
}

/// The most a compressed rollout may unpack to.
const MAX_UNPACKED_BYTES: u64 = 1 << 30;

/// A file's bytes, a `.zst` one unpacked.
fn bytes_of(file: &Path) -> Result<Vec<u8>, RunError> {
    let raw = std::fs::read(file).map_err(|error| RunError::Io {
        path: file.to_owned(),
        error,
    })?;
    if file.extension().is_none_or(|e| e != "zst") {
        return Ok(raw);
    }
    let not_zstd = |error: std::io::Error| RunError::NotZstd {
        path: file.to_owned(),
        error,
    };
    let invalid = |e: &dyn std::fmt::Display| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
    };
    // A file may hold several frames one after another (concatenated `.zst` files are one):
    // each is read in turn. Only the first must parse; bytes after a frame that start no other
    // are left alone. Bounded: a rollout that unpacks past this is not one a replay can use
    // (nor a zip bomb's memory).
    let mut source: &[u8] = raw.as_slice();
    let mut out = Vec::new();
    let mut first = true;
    while !source.is_empty() && (out.len() as u64) < MAX_UNPACKED_BYTES {
        let before = source.len();
        let mut decoder = match ruzstd::decoding::StreamingDecoder::new(&mut source) {
            Ok(decoder) => decoder,
            Err(e) if first => return Err(not_zstd(invalid(&e))),
            Err(_) => break,
        };
        let room = MAX_UNPACKED_BYTES - out.len() as u64;
        std::io::Read::read_to_end(&mut std::io::Read::take(&mut decoder, room), &mut out)
            .map_err(not_zstd)?;
        drop(decoder);
        first = false;
        if source.len() == before {
            break;
        }
    }
    Ok(out)
}

/// Reads every session of `agent` under `root` that passes `filters`: one replayed session per
/// compaction segment, on its recorded clock.
///
/// # Errors
/// A folder or file that cannot be read, or a folder with no logs (the message says where it
/// looked).
pub fn load(agent: Agent, root: &Path, filters: &Filters) -> Result<Found, RunError> {
    let files = log_files(agent, root)?;
    if files.is_empty() {
        return Err(RunError::NoAgentLogs {
            path: root.to_owned(),
            agent: agent.label(),
            looked_for: agent.layout(),
        });
    }
    let mut found = Found::default();
    for file in files {
        let name = file.display().to_string();
        // One file that cannot be read is noted, and the others still replay.
        let bytes = match bytes_of(&file) {
            Ok(bytes) => bytes,
            Err(error) => {
                found.notes.push(format!("{name}: skipped: {error}"));
                continue;
            }
        };
        let log = agent.read(&name, &bytes);
        let project = project(agent, &file, &log);
        if filters
            .project
            .as_ref()
            .is_some_and(|p| !project.contains(p.as_str()))
        {
            continue;
        }
        found.files += 1;
        super::claude_code::note(
            &mut found.notes,
            &name,
            &log.malformed,
            log.half_written_line,
            &log.unknown,
        );
        if filters.too_old(log.calls().filter_map(|c| c.at_ms).max()) {
            found.filtered_out += 1;
            continue;
        }
        sessions_of(agent, &project, &name, log, &mut found);
    }
    Ok(found)
}

/// The log's segments as replayed sessions, each call billed with the preamble its recorded
/// usage tells (none when it tells none: what the log lacks is then left unbilled).
fn sessions_of(agent: Agent, project: &str, name: &str, log: Log, found: &mut Found) {
    let preamble = {
        let calls: Vec<&Call> = log.calls().collect();
        agent_log::preamble(&calls, agent.dialect())
    };
    for (k, segment) in log.segments.into_iter().enumerate() {
        found.calls += segment.calls.len();
        let first = segment.calls.iter().filter_map(|c| c.at_ms).min();
        found.first_ms = match (found.first_ms, first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let times = agent_log::times(&segment.calls).unwrap_or_default();
        let recorded_prompt = segment.calls.iter().map(Call::prompt_tokens).collect();
        let preambles = match preamble {
            Some(n) => vec![n; segment.calls.len()],
            None => Vec::new(),
        };
        found.preamble_from_record += usize::from(preamble.is_some());
        let models = segment.calls.iter().map(|c| c.model.clone()).collect();
        let mut turns: Vec<Vec<u8>> = segment.calls.into_iter().map(|c| c.body).collect();
        turns.extend(segment.record);
        let name = if k == 0 {
            name.to_owned()
        } else {
            format!("{name}#segment-{k}")
        };
        found.sessions.push(Recorded {
            name,
            dialect: agent.dialect(),
            turns,
            preamble_tokens: 0,
            preambles,
            times,
            recorded_prompt,
            models,
            project: Some(project.to_owned()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLLOUT_ZST: &[u8] = include_bytes!(
        "../../../tests/corpus/transcripts/codex/archived_sessions/rollout-2026-12-07T05-21-16-01a24ef2-f954-7630-ad7a-e446979ca790.jsonl.zst"
    );

    fn unpacked(name: &str, bytes: &[u8]) -> Result<Vec<u8>, RunError> {
        let dir = std::env::temp_dir().join(format!("sluice-zst-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = bytes_of(&path);
        let _ = std::fs::remove_file(&path);
        out
    }

    #[test]
    fn a_zst_rollout_unpacks_every_frame_and_refuses_what_is_not_one() {
        let one = unpacked("one.jsonl.zst", ROLLOUT_ZST).unwrap();
        assert!(
            one.starts_with(b"{") && one.ends_with(b"\n"),
            "a JSONL rollout"
        );
        // Two frames one after another: both come out.
        let twice = [ROLLOUT_ZST, ROLLOUT_ZST].concat();
        assert_eq!(
            unpacked("two.jsonl.zst", &twice).unwrap(),
            [one.as_slice(), &one].concat()
        );
        // Not zstd at all: an error naming the file, never a panic.
        let err = unpacked("bad.jsonl.zst", b"{\"type\":\"plain\"}\n").unwrap_err();
        assert!(matches!(err, RunError::NotZstd { .. }), "{err}");
    }
}
