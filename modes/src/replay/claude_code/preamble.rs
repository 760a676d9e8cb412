//! The preamble a transcript lacks (Claude Code's system prompt and tools), read from its own
//! record: the prompt tokens the provider billed for a call, less replay's count of the
//! messages the call sent, is what the call sent beside them. Its size differs by Claude Code
//! version, by the tools a user has (MCP servers) and between a main session and its
//! sub-agents, so one stand-in size for every session misreads each one's bill; the record
//! tells each session's own.

use std::collections::BTreeMap;

use engine::pipeline::message_tokens;
use engine::wire::{self, Dialect};

use super::Call;

/// Replay's count of the messages of `call`'s body, as the cost model counts a request
/// (`Billable::tokens`: the rebuilt body has no `tools`, so its messages, the system block
/// among them, are all of it). `None` for a body that does not parse.
pub fn counted(call: &Call) -> Option<usize> {
    let parsed = wire::parse(&call.body, Dialect::Anthropic).ok()?;
    Some(parsed.messages().iter().map(message_tokens).sum())
}

/// Whether a call's record can tell its preamble: a stand-in reply (`<synthetic>`, which the
/// reader already leaves out) or a call recorded with no prompt tokens (an interrupted stream,
/// a log written without usage) says nothing about what was sent.
fn tells(call: &Call) -> bool {
    call.model != "<synthetic>" && call.usage.prompt_tokens() > 0
}

/// The preamble of calls, given each with replay's count of its messages ([`counted`]): the
/// median over the calls of (recorded prompt tokens − counted), clamped at 0. `None` when no
/// call tells it (the caller keeps its stand-in).
///
/// Why the median: recorded − counted is the preamble plus the gap between the provider's
/// tokenizer and replay's (o200k) on the messages, which grows as the conversation does, plus
/// the odd call whose record does not match the request rebuilt for it (a message the live
/// branch lost, say). The median ignores those few calls, where a
/// mean follows them; on a gap that grows steadily it sits at the session's middle call, so
/// early calls are over and late ones under and the session's total stays close. And unlike
/// the mean it does not make each session's total agree with its record by construction, so
/// the bill check still measures the cost model rather than repeating its input. Clamped at 0:
/// messages replay counts above their bill leave no preamble to find, and a stand-in cannot be
/// negative.
pub fn estimate<'a>(calls: impl IntoIterator<Item = (&'a Call, Option<usize>)>) -> Option<usize> {
    median_gap(
        calls
            .into_iter()
            .filter(|(call, _)| tells(call))
            .map(|(call, counted)| (call.usage.prompt_tokens(), counted)),
    )
}

/// More prompt tokens than any model takes in one request (the largest windows are 2M).
const MAX_PROMPT_TOKENS: u64 = 4_000_000;

/// The median of (recorded prompt tokens − counted) over samples that have a count, clamped at
/// 0 (see [`estimate`]); `None` with no sample. Shared with the Codex and gemini-cli readers
/// (`agent_log::preamble`).
pub fn median_gap(samples: impl IntoIterator<Item = (u64, Option<usize>)>) -> Option<usize> {
    let mut gaps: Vec<i64> = samples
        .into_iter()
        // A usage figure past any real prompt is a damaged record, not a preamble to bill
        // on every turn.
        .filter(|(recorded, _)| *recorded <= MAX_PROMPT_TOKENS)
        .filter_map(|(recorded, counted)| {
            let recorded = i64::try_from(recorded).ok()?;
            Some(recorded - i64::try_from(counted?).ok()?)
        })
        .collect();
    if gaps.is_empty() {
        return None;
    }
    gaps.sort_unstable();
    let mid = gaps.len() / 2;
    let median = if gaps.len() % 2 == 0 {
        gaps[mid - 1] + (gaps[mid] - gaps[mid - 1]) / 2
    } else {
        gaps[mid]
    };
    Some(usize::try_from(median.max(0)).unwrap_or(0))
}

/// Each call's preamble, `calls` being one transcript's (every compaction segment: the session
/// sends the same preamble across a compaction). Estimated per Claude Code version, since an
/// update mid-session changes the system prompt and tools from its first call on; a version no
/// call of which tells it takes the estimate over every call. `None` when no call tells it.
pub fn per_call(calls: &[&Call]) -> Option<Vec<usize>> {
    let counts: Vec<Option<usize>> = calls.iter().map(|c| counted(c)).collect();
    let samples = || calls.iter().copied().zip(counts.iter().copied());
    let whole = estimate(samples())?;
    let mut by_version: BTreeMap<&str, usize> = BTreeMap::new();
    for call in calls {
        let version = call.version.as_str();
        if !by_version.contains_key(version) {
            let own = estimate(samples().filter(|(c, _)| c.version == version));
            by_version.insert(version, own.unwrap_or(whole));
        }
    }
    Some(
        calls
            .iter()
            .map(|c| by_version.get(c.version.as_str()).copied().unwrap_or(whole))
            .collect(),
    )
}
