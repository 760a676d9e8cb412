//! Claude Code's own transcripts (`~/.claude/projects/<project>/<session>.jsonl`) read back as
//! the requests Claude Code sent: one Anthropic Messages body per model call, with the call's
//! recorded time and the usage the provider reported for it. Pure: text in, requests out; the
//! proxy finds the files.
//!
//! A transcript is a tree of records linked by `uuid`/`parentUuid`: a retried or edited prompt
//! leaves its abandoned branch in the file, so only the chain of the last message record is
//! read (a sub-agent's file is a session of its own; its records all say `isSidechain`). One
//! response is written as several records (one per content block) that repeat its
//! `message.id`, `requestId` and usage; newer versions interleave them with the tool results
//! they caused. Each becomes one assistant message and one call, its usage counted once. A
//! `compact_boundary` starts a segment whose requests hold only the messages after it (the
//! summary first), and the walk crosses it through `logicalParentUuid`.
//!
//! The rules that shape each request (string content as one text block, whitespace-only text
//! dropped, `tool_use` reduced to what the API takes, `is_error: false` left out, tool results
//! in the order of their calls, a parallel call's result recovered from the branch beside it)
//! are the ones `tests/corpus/claude-code` was rebuilt with, so on its 20 sessions the
//! messages here are that corpus's messages (`tests/it/claude_code.rs`).
//!
//! The system prompt and tools are not in a transcript (`preamble` reads their size from the
//! recorded usage); a request carries `model`,
//! `max_tokens` and `messages`, and, for a session whose usage reports one-hour cache writes, a
//! one-line stand-in system block asking for that lifetime (so replay's tracker reads the
//! cache as the session did). Nothing of a transcript's content reaches an error or a count.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value, json};

/// `max_tokens` of every rebuilt request: the log does not keep it (Claude Code sent 32,000 in
/// the versions the corpus covers).
const MAX_TOKENS: u64 = 32_000;

/// Record types Claude Code writes that carry no message: skipped, but not unknown.
const KNOWN: &[&str] = &[
    "user",
    "assistant",
    "system",
    "summary",
    "progress",
    "file-history-snapshot",
    "queue-operation",
    "attachment",
    "permission-mode",
    "last-prompt",
    "custom-title",
];

/// Tokens the provider reported for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub output_tokens: u64,
    /// Of the cache writes, those asked for the one-hour lifetime.
    pub one_hour_writes: u64,
}

impl Usage {
    fn of(usage: &Value) -> Usage {
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        Usage {
            input_tokens: n(&usage["input_tokens"]),
            cache_creation_input_tokens: n(&usage["cache_creation_input_tokens"]),
            cache_read_input_tokens: n(&usage["cache_read_input_tokens"]),
            output_tokens: n(&usage["output_tokens"]),
            one_hour_writes: n(&usage["cache_creation"]["ephemeral_1h_input_tokens"]),
        }
    }

    /// Every prompt token billed: fresh input, cache reads and cache writes.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.cache_read_input_tokens)
    }
}

/// One model call: the request Claude Code sent, when, and what it was billed.
#[derive(Debug, Clone)]
pub struct Call {
    pub message_id: String,
    pub request_id: String,
    pub model: String,
    /// The Claude Code version that made the call (the record's `version`): the system prompt
    /// and tools it sent, which the transcript lacks, differ by version (`preamble`).
    pub version: String,
    /// The compaction segment (0 before the first `compact_boundary`).
    pub segment: usize,
    /// When the request went out: the time of the last message record before the reply (the
    /// reply's own records are stamped as they streamed in).
    pub timestamp: String,
    /// The same, in milliseconds since the Unix epoch (`None`: not an RFC 3339 time).
    pub at_ms: Option<i64>,
    /// Usage as the response's last record reported it (the earlier ones of a split response
    /// repeat its input side with a partial output count).
    pub usage: Usage,
    /// The Anthropic Messages body.
    pub body: Vec<u8>,
    /// Messages in the body.
    pub messages: usize,
}

/// The calls of one compaction segment, and its whole conversation when it ends with a reply
/// (replay reads each call's answer from it).
#[derive(Debug, Clone, Default)]
pub struct Segment {
    pub calls: Vec<Call>,
    pub record: Option<Vec<u8>>,
}

/// A line that is not a JSON record (the rest of the file still reads).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file} line {line}: not a JSON record ({why})")]
pub struct MalformedLine {
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// The parser's complaint (a position and what it expected, never the line's text).
    pub why: String,
}

/// One session file, read.
#[derive(Debug, Clone, Default)]
pub struct SessionLog {
    /// `sessionId` of the live branch.
    pub session_id: Option<String>,
    /// A sub-agent's transcript (every record on its branch says `isSidechain`).
    pub sidechain: bool,
    pub segments: Vec<Segment>,
    /// Records that carry no message, by `type` (`system/compact_boundary` by subtype).
    pub skipped: BTreeMap<String, usize>,
    /// Of those, the types this reader does not know.
    pub unknown: BTreeMap<String, usize>,
    pub malformed: Vec<MalformedLine>,
    /// The last line, cut off mid-record (a session still being written), skipped: its number.
    pub half_written_line: Option<usize>,
    /// Sub-agents whose records sit in this file beside the main conversation (Claude Code
    /// before 2.1.2 wrote them there), each a transcript of its own, in file order. Empty for
    /// a sub-agent's own file.
    pub sidechains: Vec<SessionLog>,
}

impl SessionLog {
    /// Every call, segment after segment.
    pub fn calls(&self) -> impl Iterator<Item = &Call> {
        self.segments.iter().flat_map(|s| s.calls.iter())
    }
}

/// Reads one session file's bytes; `file` names it in errors.
pub fn read(file: &str, bytes: &[u8]) -> SessionLog {
    let mut transcript = SessionLog::default();
    let records = records(file, bytes, &mut transcript);
    for r in &records {
        let kind = r["type"].as_str().unwrap_or("(none)");
        if matches!(kind, "user" | "assistant") {
            continue;
        }
        let label = match r["subtype"].as_str() {
            Some(sub) if kind == "system" => format!("system/{sub}"),
            _ => kind.to_owned(),
        };
        *transcript.skipped.entry(label).or_default() += 1;
        if !KNOWN.contains(&kind) {
            *transcript.unknown.entry(kind.to_owned()).or_default() += 1;
        }
    }
    let branch = live_branch(&records);
    if !branch
        .last()
        .is_some_and(|r| r["isSidechain"].as_bool() == Some(true))
    {
        transcript.sidechains = sidechains(&records)
            .into_iter()
            .map(|chain| conversation(&records, chain))
            .filter(|t| !t.segments.is_empty())
            .collect();
    }
    transcript.sidechain = branch
        .last()
        .is_some_and(|r| r["isSidechain"].as_bool() == Some(true));
    transcript.session_id = branch
        .last()
        .and_then(|r| r["sessionId"].as_str())
        .map(str::to_owned);
    let one_hour = branch
        .iter()
        .any(|r| Usage::of(&r["message"]["usage"]).one_hour_writes > 0);
    let mut builder = Builder::new(&records, one_hour);
    for r in branch {
        builder.take(r);
    }
    transcript.segments = builder.finish();
    transcript
}

/// The file's records: one JSON object a line. A line that is not one is noted; the last,
/// unterminated, is taken as half-written rather than malformed.
fn records(file: &str, bytes: &[u8], transcript: &mut SessionLog) -> Vec<Value> {
    jsonl(
        file,
        bytes,
        &mut transcript.malformed,
        &mut transcript.half_written_line,
    )
}

/// The records of a JSONL file (shared with the Codex and gemini-cli readers): one JSON object
/// a line. A line that is not one is noted; the
/// last, unterminated, is taken as half-written rather than malformed.
pub(crate) fn jsonl(
    file: &str,
    bytes: &[u8],
    malformed: &mut Vec<MalformedLine>,
    half_written_line: &mut Option<usize>,
) -> Vec<Value> {
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let unterminated = lines.len() - 1;
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let why = match serde_json::from_slice::<Value>(line) {
            Ok(record @ Value::Object(_)) => {
                out.push(record);
                continue;
            }
            Ok(_) => "not an object".to_owned(),
            Err(_) if i == unterminated => {
                *half_written_line = Some(i + 1);
                continue;
            }
            Err(error) => error.to_string(),
        };
        malformed.push(MalformedLine {
            file: file.to_owned(),
            line: i + 1,
            why,
        });
    }
    out
}

fn is_message(r: &Value) -> bool {
    matches!(r["type"].as_str(), Some("user" | "assistant"))
}

fn is_boundary(r: &Value) -> bool {
    r["type"] == "system" && r["subtype"] == "compact_boundary"
}

/// A chain of records as a transcript of its own (a sub-agent found in its parent's file).
fn conversation<'a>(records: &'a [Value], chain: Vec<&'a Value>) -> SessionLog {
    let one_hour = chain
        .iter()
        .any(|r| Usage::of(&r["message"]["usage"]).one_hour_writes > 0);
    let mut builder = Builder::new(records, one_hour);
    let session_id = chain
        .last()
        .and_then(|r| r["sessionId"].as_str())
        .map(str::to_owned);
    for r in chain {
        builder.take(r);
    }
    SessionLog {
        session_id,
        sidechain: true,
        segments: builder.finish(),
        ..SessionLog::default()
    }
}

/// The sub-agent conversations among a file's records, each root first: for every sidechain
/// root, the chain of its last leaf (a message record no other sidechain message answers).
/// A branch the sub-agent abandoned ends in an earlier leaf and is not taken, as for the main
/// conversation.
fn sidechains(records: &[Value]) -> Vec<Vec<&Value>> {
    let side: Vec<&Value> = records
        .iter()
        .filter(|r| is_message(r) && r["isSidechain"].as_bool() == Some(true))
        .filter(|r| r["uuid"].is_string())
        .collect();
    if side.is_empty() {
        return Vec::new();
    }
    let by_uuid: HashMap<&str, &Value> = records
        .iter()
        .filter_map(|r| Some((r["uuid"].as_str()?, r)))
        .collect();
    let parents: HashSet<&str> = side
        .iter()
        .filter_map(|r| r["parentUuid"].as_str())
        .collect();
    // The last leaf of each root, in the order the roots' last leaves come in the file.
    let mut last_leaf: Vec<(&str, &Value)> = Vec::new();
    for leaf in side
        .iter()
        .filter(|r| r["uuid"].as_str().is_some_and(|u| !parents.contains(u)))
    {
        let chain = chain_from(Some(leaf), &by_uuid);
        let Some(root) = chain.last().and_then(|r| r["uuid"].as_str()) else {
            continue;
        };
        last_leaf.retain(|(r, _)| *r != root);
        last_leaf.push((root, leaf));
    }
    last_leaf
        .into_iter()
        .map(|(_, leaf)| {
            let mut chain = chain_from(Some(leaf), &by_uuid);
            chain.reverse();
            chain
        })
        .collect()
}

/// The chain of parents from `leaf` up, leaf first, across compaction boundaries; a record
/// that links back into the chain ends it.
fn chain_from<'a>(leaf: Option<&'a Value>, by_uuid: &HashMap<&str, &'a Value>) -> Vec<&'a Value> {
    let mut chain = Vec::new();
    let mut seen = HashSet::new();
    let mut at = leaf;
    while let Some(r) = at {
        // A damaged file could link a record to itself: stop rather than loop.
        if r["uuid"].as_str().is_none_or(|uuid| !seen.insert(uuid)) {
            break;
        }
        chain.push(r);
        let parent = match r["parentUuid"].as_str() {
            Some(p) => Some(p),
            None if is_boundary(r) => r["logicalParentUuid"].as_str(),
            None => None,
        };
        at = parent.and_then(|p| by_uuid.get(p).copied());
    }
    chain
}

/// The live branch, root first: the chain of parents of the last message record (the last of
/// the main conversation, when a file holds sub-agent records beside it, as before 2.1.2),
/// across compaction boundaries.
fn live_branch(records: &[Value]) -> Vec<&Value> {
    let by_uuid: HashMap<&str, &Value> = records
        .iter()
        .filter_map(|r| Some((r["uuid"].as_str()?, r)))
        .collect();
    let messages = || {
        records
            .iter()
            .filter(|r| is_message(r) && r["uuid"].is_string())
    };
    let leaf = messages()
        .filter(|r| r["isSidechain"].as_bool() != Some(true))
        .last()
        .or_else(|| messages().last());
    let mut chain = chain_from(leaf, &by_uuid);
    chain.reverse();
    chain
}

/// The content blocks of a message record as the API takes them.
fn blocks(content: &Value) -> Vec<Value> {
    let all = match content {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(blocks) => blocks.iter().map(api_block).collect(),
        _ => Vec::new(),
    };
    // The API refuses a text block of only whitespace; Claude Code leaves them out.
    all.into_iter()
        .filter(|b| {
            !(b["type"] == "text" && b["text"].as_str().is_none_or(|t| t.trim().is_empty()))
        })
        .collect()
}

/// A block as sent: `tool_use` without the log's own fields (`caller`), `tool_result` without
/// a false `is_error`; everything else (thinking with its signature, images) as written.
fn api_block(block: &Value) -> Value {
    match block["type"].as_str() {
        Some("tool_use") => {
            let mut kept = Map::new();
            for key in ["type", "id", "name", "input"] {
                if let Some(v) = block.get(key) {
                    kept.insert(key.to_owned(), v.clone());
                }
            }
            Value::Object(kept)
        }
        Some("tool_result") if block["is_error"] == false => {
            let mut kept = block.clone();
            if let Some(object) = kept.as_object_mut() {
                object.remove("is_error");
            }
            kept
        }
        _ => block.clone(),
    }
}

/// The response a record belongs to.
type CallKey = (String, String);

/// The open call: its key, its assistant message's index, and its index in `calls`.
struct Open {
    key: CallKey,
    message: usize,
    call: usize,
}

/// Builds the requests along the branch.
struct Builder<'a> {
    /// Every tool result in the file by call id, for a parallel call whose result sits on a
    /// sibling branch (older versions chained parallel results one under another's call).
    results: HashMap<&'a str, Value>,
    one_hour: bool,
    messages: Vec<Value>,
    model: String,
    open: Option<Open>,
    sent_at: Option<&'a str>,
    segment: usize,
    calls: Vec<Call>,
    done: Vec<Segment>,
}

impl<'a> Builder<'a> {
    fn new(records: &'a [Value], one_hour: bool) -> Builder<'a> {
        let mut results = HashMap::new();
        for r in records.iter().filter(|r| r["type"] == "user") {
            for b in r["message"]["content"].as_array().into_iter().flatten() {
                if let (Some("tool_result"), Some(id)) =
                    (b["type"].as_str(), b["tool_use_id"].as_str())
                {
                    results.entry(id).or_insert_with(|| api_block(b));
                }
            }
        }
        Builder {
            results,
            one_hour,
            messages: Vec::new(),
            model: String::new(),
            open: None,
            sent_at: None,
            segment: 0,
            calls: Vec::new(),
            done: Vec::new(),
        }
    }

    fn take(&mut self, r: &'a Value) {
        match r["type"].as_str() {
            Some("user") => {
                let blocks = blocks(&r["message"]["content"]);
                self.sent_at = r["timestamp"].as_str().or(self.sent_at);
                if blocks.is_empty() {
                    return;
                }
                match self.messages.last_mut() {
                    Some(last) if last["role"] == "user" => extend(last, blocks),
                    _ => self
                        .messages
                        .push(json!({"role": "user", "content": blocks})),
                }
            }
            // Claude Code's own stand-ins (an interrupted or failed call) were never a call,
            // and it does not send them back.
            Some("assistant") if r["message"]["model"] == "<synthetic>" => {}
            Some("assistant") => self.reply(r),
            _ if is_boundary(r) => self.close_segment(),
            _ => {}
        }
    }

    /// One record of a response: a new call, or more of the open one's message.
    fn reply(&mut self, r: &'a Value) {
        let message = &r["message"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let key = (text(&message["id"]), text(&r["requestId"]));
        let blocks = blocks(&message["content"]);
        // A record with neither id names no response: it never continues the open one.
        let named = !(key.0.is_empty() && key.1.is_empty());
        if let Some(open) = self.open.as_ref().filter(|o| named && o.key == key) {
            extend(&mut self.messages[open.message], blocks);
            if message["usage"].is_object() {
                self.calls[open.call].usage = Usage::of(&message["usage"]);
            }
            self.sent_at = r["timestamp"].as_str().or(self.sent_at);
            return;
        }
        self.order_results();
        self.model = text(&message["model"]);
        let body = self.body();
        let timestamp = self
            .sent_at
            .or(r["timestamp"].as_str())
            .unwrap_or_default()
            .to_owned();
        self.calls.push(Call {
            message_id: key.0.clone(),
            request_id: key.1.clone(),
            model: self.model.clone(),
            version: text(&r["version"]),
            segment: self.segment,
            at_ms: parse_timestamp(&timestamp),
            timestamp,
            usage: Usage::of(&message["usage"]),
            body,
            messages: self.messages.len(),
        });
        match self.messages.last_mut() {
            Some(last) if last["role"] == "assistant" => extend(last, blocks),
            _ => self
                .messages
                .push(json!({"role": "assistant", "content": blocks})),
        }
        self.open = Some(Open {
            key,
            message: self.messages.len() - 1,
            call: self.calls.len() - 1,
        });
        self.sent_at = r["timestamp"].as_str().or(self.sent_at);
    }

    /// The user message after a reply holds a result for each of its calls, in the calls'
    /// order (the log keeps them in the order the tools finished).
    fn order_results(&mut self) {
        let n = self.messages.len();
        if n < 2
            || self.messages[n - 1]["role"] != "user"
            || self.messages[n - 2]["role"] != "assistant"
        {
            return;
        }
        let calls: Vec<String> = self.messages[n - 2]["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .filter_map(|b| b["id"].as_str().map(str::to_owned))
            .collect();
        let Some(content) = self.messages[n - 1]["content"].as_array_mut() else {
            return;
        };
        for id in &calls {
            let answered = content.iter().any(|b| b["tool_use_id"] == id.as_str());
            if let Some(result) = self.results.get(id.as_str()).filter(|_| !answered) {
                content.push(result.clone());
            }
        }
        let rank = |b: &Value| {
            let at = b["tool_use_id"]
                .as_str()
                .and_then(|id| calls.iter().position(|c| c == id));
            (b["type"] != "tool_result", at.unwrap_or(calls.len()))
        };
        content.sort_by_key(rank);
    }

    fn body(&self) -> Vec<u8> {
        let mut body = json!({
            "model": self.model,
            "max_tokens": MAX_TOKENS,
            "messages": self.messages,
        });
        if self.one_hour {
            body["system"] = json!([{
                "type": "text",
                "text": "Claude Code's system prompt is not in its transcript.",
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            }]);
        }
        serde_json::to_vec(&body).unwrap_or_default()
    }

    fn close_segment(&mut self) {
        self.order_results();
        let ends_in_reply = self
            .messages
            .last()
            .is_some_and(|m| m["role"] == "assistant");
        let record = (ends_in_reply && !self.calls.is_empty()).then(|| self.body());
        let calls = std::mem::take(&mut self.calls);
        if !calls.is_empty() {
            self.done.push(Segment { calls, record });
        }
        self.messages.clear();
        self.open = None;
        self.segment += 1;
    }

    fn finish(mut self) -> Vec<Segment> {
        self.close_segment();
        self.done
    }
}

/// Appends blocks to a message's content.
fn extend(message: &mut Value, blocks: Vec<Value>) {
    if let Some(content) = message["content"].as_array_mut() {
        content.extend(blocks);
    }
}

/// Milliseconds since the Unix epoch of an RFC 3339 time (`2025-06-18T23:17:59.336Z`, or with
/// an offset).
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(range)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    let mut i = 19;
    let mut millis = 0;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let fraction = text.get(start..i)?;
        let padded = format!("{fraction:0<3}");
        millis = padded.get(..3)?.parse::<i64>().ok()?;
    }
    let (offset, end) = match b.get(i)? {
        b'Z' | b'z' => (0, i + 1),
        sign @ (b'+' | b'-') => {
            if b.get(i + 3) != Some(&b':') {
                return None;
            }
            let (hours, mins) = (digits(i + 1..i + 3)?, digits(i + 4..i + 6)?);
            if hours > 23 || mins > 59 {
                return None;
            }
            let minutes = hours * 60 + mins;
            (if *sign == b'+' { minutes } else { -minutes }, i + 6)
        }
        _ => return None,
    };
    // Nothing may follow the offset, and the date must exist (no 31 February).
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if end != b.len()
        || !(1..=12).contains(&month)
        || !(1..=month_days[(month - 1) as usize]).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset * 60;
    Some(seconds * 1000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Each call's time since the segment's first, for replay's clock ([`super::Options::times`]):
/// `None` when a call has no readable time, so the replay keeps its fixed gap.
pub fn times(calls: &[Call]) -> Option<Vec<Duration>> {
    times_at(calls.iter().map(|c| c.at_ms))
}

/// [`times`] from each call's time in milliseconds since the Unix epoch, whatever the agent's
/// log (`agent_log::times` reads Codex's and gemini-cli's calls through it).
pub fn times_at(at_ms: impl IntoIterator<Item = Option<i64>>) -> Option<Vec<Duration>> {
    let mut first = None;
    at_ms
        .into_iter()
        .map(|at| {
            let at = at?;
            let first = *first.get_or_insert(at);
            Some(Duration::from_millis(
                u64::try_from(at.saturating_sub(first)).unwrap_or(0),
            ))
        })
        .collect::<Option<Vec<Duration>>>()
        .filter(|times| !times.is_empty())
}

pub mod preamble;

#[cfg(test)]
mod tests;
