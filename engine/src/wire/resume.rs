//! The resumed parse: a body that opens with the bytes of one already parsed is read from where
//! they end.
//!
//! An agent re-sends its whole transcript every turn, and every message but the newest one or
//! two is, byte for byte and at the same offset, what it sent a turn earlier. A parse leaves a
//! [`Continuation`]: the body's [`Seen`] keys and what it read from each transcript entry (the
//! normalized messages, their slots, the breakpoints and opaque entries before each). The next
//! body is checked against it ([`Seen::common`]) and, for the entries it shares, validated and
//! read no further: the scan steps over them ([`json::parse_indexed_resuming`]) and their
//! messages are the continuation's. The head before the array and everything after the last
//! shared entry are scanned and read as in a full parse, so `tools`, `metadata` and a changed
//! `stream` are read fresh, and the result equals [`super::parse_text`]'s (`ParsedBody`'s
//! `PartialEq`, checked on every corpus turn in both dialects by the tests).
//!
//! The top-level system prompt is read fresh every time, wherever it sits (Claude Code sends it
//! after the transcript, where no key covers it); the shared entries' marks are shifted by what
//! it changed (its breakpoints, whether it could be read). Only chat completions and Messages
//! bodies resume; any other, and any body whose resumed scan fails, is parsed whole.

use super::mentions::{Found, Mentions};
use super::prefix::Seen;
use super::{Dialect, EntryMark, Mark, Opaque, ParsedBody, Slot, anthropic, json, openai};
use crate::digests::{LateCounts, UNCOUNTED};
use crate::message::Message;

/// What a parse leaves for the next body of the same conversation.
#[derive(Debug, Clone)]
pub struct Continuation {
    dialect: Dialect,
    seen: Seen,
    messages: Vec<Message>,
    slots: Vec<Slot>,
    opaque: Vec<Opaque>,
    entries: Vec<EntryMark>,
    read: Mark,
    /// The messages' digests (content hashes, token counts, markers, fingerprints), each when
    /// the turn asked for it.
    hashes: Option<Vec<u64>>,
    tokens: Option<Vec<usize>>,
    marked: Option<Vec<bool>>,
    fingerprints: Option<Vec<u64>>,
    /// The counts the turn's run took after it was made, of the messages `tokens` holds as
    /// [`UNCOUNTED`].
    late: LateCounts,
    /// What the turn's pipeline run did to each message (`crate::carry`), when one ran.
    run_carry: Option<crate::carry::RunCarry>,
    /// Where the strings the turn looked for occur in its body.
    mentions: Found,
    /// What it holds, counted once when it is made (see [`Continuation::held_bytes`]).
    held: usize,
}

/// What a message costs beside its text: the struct, its slot and entry, allocator slack.
const PER_MESSAGE: usize = 256;

/// What a message's carried digests hold: its content hash, token count, marker flag and
/// fingerprint.
const DIGEST_BYTES: usize =
    2 * std::mem::size_of::<u64>() + std::mem::size_of::<usize>() + std::mem::size_of::<bool>();

impl Continuation {
    /// About what it holds in memory: every text of every message (a tool output's call
    /// arguments are copied onto it, so they count twice when they are), a fixed cost per
    /// message, and its keys. What a memo of continuations counts against its budget.
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// Lets go of the pipeline's records it carries, keeping what the next body resumes from.
    pub fn drop_run_carry(&mut self) {
        if let Some(carry) = self.run_carry.take() {
            self.held = self.held.saturating_sub(carry.held_bytes());
        }
    }

    /// How many transcript entries it knows.
    pub fn entries(&self) -> usize {
        self.entries.len()
    }
}

/// Whether bodies of `dialect` can resume.
pub fn resumes(dialect: Dialect) -> bool {
    matches!(dialect, Dialect::OpenAi | Dialect::Anthropic)
}

/// A parse that resumed: the body, how many of the continuation's transcript entries it kept,
/// and the continuation's keys, which the next continuation reuses for them.
#[derive(Debug)]
pub struct Resumed<'a> {
    pub parsed: ParsedBody<'a>,
    pub kept: usize,
    pub seen: Seen,
}

/// Parses `text` from where it stops matching `earlier`. `None` when it cannot resume (another
/// dialect, a changed head, a system prompt added or dropped, no entry in common, a scan that
/// fails): parse it whole. `earlier` is consumed: its messages become the body's.
pub fn parse_continuing(
    text: &str,
    dialect: Dialect,
    earlier: Continuation,
) -> Option<Resumed<'_>> {
    if !resumes(dialect) || dialect != earlier.dialect {
        return None;
    }
    let common = earlier.seen.common(text.as_bytes());
    let kept = common.matched.min(earlier.entries.len());
    if !common.head_matches || kept == 0 {
        return None;
    }
    let proven = earlier.seen.proven(common);
    let array_start = earlier.seen.array_start();
    let known = earlier.entries[..kept].iter().map(|e| e.span).collect();
    let (root, index) = json::parse_indexed_resuming(text, array_start, known).ok()?;
    let mut parsed = ParsedBody::framed(text, dialect, root, &index).ok()?;
    if parsed.messages_span.start != array_start {
        return None;
    }
    // The system prompt is read fresh: after the transcript (Claude Code sends it there) no
    // key covers it, and before it reading it again costs less than telling it apart.
    if dialect == Dialect::Anthropic {
        anthropic::read_top_system(&mut parsed, &index);
    }
    let fresh = parsed.mark();
    let was = earlier.entries.first().map_or(earlier.read, |e| e.before);
    if fresh.messages != was.messages {
        // A system prompt added or dropped: the normalized messages no longer line up.
        return None;
    }
    // Earlier marks counted the earlier system's breakpoints and opaque entry: this one's
    // stand in for them.
    let shift = |mark: Mark| Mark {
        messages: mark.messages,
        breakpoints: mark.breakpoints - was.breakpoints + fresh.breakpoints,
        opaque: mark.opaque - was.opaque + fresh.opaque,
    };
    let at = earlier.entries.get(kept).map_or(earlier.read, |e| e.before);
    // The run's records hold for the shared messages only while every message before them is
    // the last turn's too: the system prompt, read fresh, must be the one they were made with.
    let same_system = parsed.messages[..was.messages] == earlier.messages[..was.messages];
    let Continuation {
        seen,
        messages,
        slots,
        opaque,
        hashes,
        tokens,
        marked,
        fingerprints,
        late,
        run_carry,
        mentions,
        ..
    } = earlier;
    parsed.mentions = Mentions::resuming(proven, mentions);
    parsed.run_carry.carried = run_carry
        .filter(|_| same_system)
        .map(|carry| carry.truncated(at.messages));
    // Moved, not copied: the continuation was the memo's, and this turn now holds its messages.
    let shared = was.messages..at.messages;
    parsed
        .messages
        .extend(messages.into_iter().take(shared.end).skip(shared.start));
    parsed
        .slots
        .extend(slots.into_iter().take(shared.end).skip(shared.start));
    parsed
        .opaque
        .extend(opaque.into_iter().take(at.opaque).skip(was.opaque));
    parsed.existing_breakpoints = shift(at).breakpoints;
    parsed.entries = earlier.entries[..kept]
        .iter()
        .map(|e| EntryMark {
            span: e.span,
            before: shift(e.before),
        })
        .collect();
    match dialect {
        Dialect::OpenAi => parsed.read_transcript_from(&index, kept, openai::read_message),
        Dialect::Anthropic => parsed.read_transcript_from(&index, kept, anthropic::read_message),
        Dialect::Responses | Dialect::Gemini => return None,
    }
    parsed.finish(&index, at.messages);
    let carried = Carried {
        hashes,
        tokens,
        late,
        marked,
        fingerprints,
    };
    carry_digests(&parsed, carried, was.messages..at.messages);
    Some(Resumed { parsed, kept, seen })
}

/// Sets the resumed body's digests from the continuation's, for the `shared` messages, and
/// computes them for the rest: the system prompt (read fresh) and the new messages. A digest
/// the last turn did not ask for is left to be computed when this one does.
///
/// Token counts are the exception: the rest are left [`UNCOUNTED`], for the run to count when a
/// component reads one and the report after the request has gone (`pipeline::RunReport::count_deferred`).
/// A shared message the last turn left uncounted takes the count its run took late, if it did.
fn carry_digests(parsed: &ParsedBody<'_>, carried: Carried, shared: std::ops::Range<usize>) {
    let Carried {
        hashes,
        tokens,
        late,
        marked,
        fingerprints,
    } = carried;
    let messages = &parsed.messages;
    let Some(hashes) = stitch(hashes, &shared, messages, |_, m| {
        crate::digests::content_hash(m)
    }) else {
        return;
    };
    let tokens = stitch(tokens, &shared, messages, |_, _| UNCOUNTED).map(|mut tokens| {
        for (i, n) in tokens[shared.clone()].iter_mut().enumerate() {
            if *n == UNCOUNTED {
                *n = late.get(shared.start + i).unwrap_or(UNCOUNTED);
            }
        }
        tokens
    });
    let marked = stitch(marked, &shared, messages, |_, m| crate::digests::marked(m));
    let fingerprints = stitch(fingerprints, &shared, messages, |i, m| {
        crate::digests::fingerprint_hashed(m, hashes[i])
    });
    let _ = parsed.digests.hashes.set(hashes);
    if let Some(tokens) = tokens {
        let _ = parsed.digests.tokens.set(tokens);
    }
    if let Some(marked) = marked {
        let _ = parsed.digests.marked.set(marked);
    }
    if let Some(fingerprints) = fingerprints {
        let _ = parsed.digests.fingerprints.set(fingerprints);
    }
}

/// The digests a continuation carries, each `None` when its turn did not compute it.
struct Carried {
    hashes: Option<Vec<u64>>,
    tokens: Option<Vec<usize>>,
    late: LateCounts,
    marked: Option<Vec<bool>>,
    fingerprints: Option<Vec<u64>>,
}

/// One digest of every message: `carried` for the `shared` ones (where the last turn had
/// them), `fresh(index, message)` for the others; `None` when the last turn did not compute it.
fn stitch<T: Copy>(
    carried: Option<Vec<T>>,
    shared: &std::ops::Range<usize>,
    messages: &[Message],
    fresh: impl Fn(usize, &Message) -> T,
) -> Option<Vec<T>> {
    let carried = carried.filter(|c| c.len() >= shared.end)?;
    let fresh = |(i, m): (usize, &Message)| fresh(i, m);
    let system = messages[..shared.start].iter().enumerate().map(fresh);
    let new = messages[shared.end..]
        .iter()
        .enumerate()
        .map(|(i, m)| fresh((shared.end + i, m)));
    Some(
        system
            .chain(carried[shared.clone()].iter().copied())
            .chain(new)
            .collect(),
    )
}

impl ParsedBody<'_> {
    /// What the next body of this conversation resumes from. `earlier` is the keys of the
    /// continuation this parse resumed from and how many of its entries it kept: they are reused.
    pub fn into_continuation(self, earlier: Option<(&Seen, usize)>) -> Continuation {
        let elements: Vec<_> = self.entries.iter().map(|e| e.span).collect();
        let seen = Seen::of_elements(self.text, self.messages_span, &elements, earlier);
        let held = self
            .messages
            .iter()
            .map(|m| {
                let calls: usize = m
                    .tool_calls
                    .iter()
                    .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                    .sum();
                let reasoning: usize = m.reasoning.iter().map(String::len).sum();
                let copied = m.tool_name.as_ref().map_or(0, String::len)
                    + m.tool_arguments.as_ref().map_or(0, String::len)
                    + m.tool_call_id.as_ref().map_or(0, String::len);
                m.content.len() + calls + reasoning + copied + PER_MESSAGE
            })
            .sum::<usize>()
            + elements.len() * 48
            + self.messages.len() * DIGEST_BYTES;
        let run_carry = self.run_carry.left.into_inner();
        let held = held
            + run_carry
                .as_ref()
                .map_or(0, crate::carry::RunCarry::held_bytes);
        Continuation {
            run_carry,
            mentions: self.mentions.found(),
            dialect: self.dialect,
            seen,
            held,
            messages: self.messages,
            slots: self.slots,
            opaque: self.opaque,
            entries: self.entries,
            read: self.read,
            hashes: self.digests.hashes.into_inner(),
            tokens: self.digests.tokens.into_inner(),
            marked: self.digests.marked.into_inner(),
            fingerprints: self.digests.fingerprints.into_inner(),
            late: self.digests.late,
        }
    }
}

#[cfg(test)]
mod tests;
