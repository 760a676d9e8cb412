//! What the Codex and gemini-cli readers (`codex`, `gemini`) share: the shape of a session read
//! back as the requests the agent sent, one body per model call with its recorded time and
//! usage, and the line reader, the clock and the preamble estimate they use. Pure: bytes in.

use std::collections::BTreeMap;
use std::time::Duration;

use engine::pipeline::message_tokens;
use engine::wire::{self, Dialect};
use serde::Serialize;

pub(crate) use super::claude_code::jsonl;
pub use super::claude_code::{MalformedLine, parse_timestamp};

/// Tokens the provider reported for one call. `input_tokens` is every prompt token billed, the
/// cached ones among them (Codex's `input_tokens`, gemini-cli's `input`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    /// Codex's `reasoning_output_tokens`, gemini-cli's `thoughts`.
    pub reasoning_tokens: u64,
    pub total_tokens: u64,
}

impl Usage {
    /// Every prompt token billed, cached or not.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens
    }
}

/// One model call: the request the agent sent, when, and what it was billed.
#[derive(Debug, Clone)]
pub struct Call {
    pub model: String,
    /// The compaction segment (0 before the first compaction).
    pub segment: usize,
    /// When the request went out: the time of the last record before the reply.
    pub timestamp: String,
    /// The same, in milliseconds since the Unix epoch (`None`: not an RFC 3339 time).
    pub at_ms: Option<i64>,
    /// `None`: the log reported no usage for the call.
    pub usage: Option<Usage>,
    /// The request body (OpenAI Responses for Codex, Gemini `generateContent` for gemini-cli).
    pub body: Vec<u8>,
    /// Items (Codex) or contents (gemini-cli) in the body.
    pub items: usize,
}

impl Call {
    /// The prompt tokens billed, 0 when the log reported none.
    pub fn prompt_tokens(&self) -> u64 {
        self.usage.map_or(0, |u| u.prompt_tokens())
    }
}

/// The calls of one compaction segment, and its whole conversation when it ends with a reply
/// (replay reads each call's answer from it).
#[derive(Debug, Clone, Default)]
pub struct Segment {
    pub calls: Vec<Call>,
    pub record: Option<Vec<u8>>,
}

/// One session file, read.
#[derive(Debug, Clone, Default)]
pub struct Log {
    pub session_id: Option<String>,
    /// The working directory the session ran in, when the log says (Codex's `cwd`).
    pub cwd: Option<String>,
    pub segments: Vec<Segment>,
    /// Records that carry no request item, by type.
    pub skipped: BTreeMap<String, usize>,
    /// Records (or items) of a type this reader does not know, skipped.
    pub unknown: BTreeMap<String, usize>,
    pub malformed: Vec<MalformedLine>,
    /// The last line, cut off mid-record (a session still being written), skipped: its number.
    pub half_written_line: Option<usize>,
}

impl Log {
    /// Every call, segment after segment.
    pub fn calls(&self) -> impl Iterator<Item = &Call> {
        self.segments.iter().flat_map(|s| s.calls.iter())
    }
}

/// Each call's time since the first, for replay's clock: `None` when a call has no readable
/// time, so the replay keeps its fixed gap.
pub fn times(calls: &[Call]) -> Option<Vec<Duration>> {
    super::claude_code::times_at(calls.iter().map(|c| c.at_ms))
}

/// Replay's count of the messages of `call`'s body in `dialect`; `None` for a body that does
/// not parse.
pub fn counted(call: &Call, dialect: Dialect) -> Option<usize> {
    let parsed = wire::parse(&call.body, dialect).ok()?;
    Some(parsed.messages().iter().map(message_tokens).sum())
}

/// What the calls sent beside the messages the log keeps (gemini-cli's system instruction and
/// tools, `gpt-5-codex`'s tools): the median over the calls with usage of recorded prompt
/// tokens less replay's count of the body, as for Claude Code (`claude_code::preamble`).
/// `None` when no call has usage.
pub fn preamble(calls: &[&Call], dialect: Dialect) -> Option<usize> {
    super::claude_code::preamble::median_gap(
        calls
            .iter()
            .filter(|c| c.prompt_tokens() > 0)
            .map(|c| (c.prompt_tokens(), counted(c, dialect))),
    )
}

/// Adds one to a count by label.
pub(crate) fn count(map: &mut BTreeMap<String, usize>, label: impl Into<String>) {
    *map.entry(label.into()).or_default() += 1;
}
