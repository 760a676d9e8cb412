//! The parse memo: each conversation's last parse, so its next body is read from where it stops
//! repeating the one before (`engine::wire::resume`) instead of whole.
//!
//! A parse is a pure function of the bytes, so the memo follows the bytes, not the session: it is
//! looked up before the body is parsed, when the session key (which may come from the body) is
//! not known yet. A body is found by its opening, the caller's credential scope (and the session
//! id it named in the header, when it named one) and the bytes before the transcript through its
//! first user message ([`json::opening_end`]): what every turn of a conversation repeats, and
//! what two conversations of one agent already differ in.
//! What is found is then proven, byte for byte at the same offsets, by the continuation's own
//! keys; a body that does not match, or that matches nothing kept, is parsed whole, which is
//! also what a replica that never saw the conversation does.
//!
//! Bounded by what it holds ([`ParseMemo::DEFAULT_BUDGET`], counted by
//! `Continuation::held_bytes`; one conversation at most an eighth); the least recently used
//! goes first. A turn takes the continuation it resumes from (its messages move
//! into the turn's body, uncopied) and leaves its own when it ends; a second turn of the
//! conversation in flight meanwhile finds none and parses whole.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use engine::session::UNSCOPED;
use engine::tokens::memory_key;
use engine::wire::prefix::Seen;
use engine::wire::{self, Continuation, Dialect, ParsedBody, Resumed, WireError, json};
use parking_lot::Mutex;

/// Continuations kept, by opening key.
#[derive(Debug)]
pub struct ParseMemo {
    kept: Mutex<Kept>,
    budget: usize,
    /// Parses that resumed, and the transcript entries they did not read again.
    resumed: AtomicU64,
    skipped: AtomicU64,
}

#[derive(Debug, Default)]
struct Kept {
    slots: HashMap<u128, Slot>,
    /// What the slots hold (`Continuation::held_bytes`).
    bytes: usize,
    /// A clock of uses, for least-recently-used eviction.
    tick: u64,
}

#[derive(Debug)]
struct Slot {
    continuation: Continuation,
    used: u64,
}

/// What a parse found in the memo, handed back with the parsed body to [`ParseMemo::keep`].
#[derive(Debug, Default)]
pub struct Ticket {
    /// The body's opening key; `None` when it has none (a dialect that does not resume, a body
    /// that does not open with a transcript).
    key: Option<u128>,
    /// The keys of the continuation the parse resumed from and how many of its entries it kept.
    earlier: Option<(Seen, usize)>,
}

impl Ticket {
    /// How many transcript entries the parse did not read again.
    pub fn kept(&self) -> usize {
        self.earlier.as_ref().map_or(0, |(_, kept)| *kept)
    }
}

/// Bodies smaller than this are parsed whole and not kept: a parse of them costs less than
/// keeping them.
const MIN_BODY: usize = 4 * 1024;

/// How many leading transcript entries the opening may span looking for the first user message.
const OPENING_ENTRIES: usize = 4;

impl ParseMemo {
    /// 32 MiB: the last turn of 64 conversations of half a megabyte of text each.
    pub const DEFAULT_BUDGET: usize = 32 * 1024 * 1024;

    pub fn new(budget: usize) -> ParseMemo {
        ParseMemo {
            kept: Mutex::new(Kept::default()),
            budget,
            resumed: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// Parses `body`, from where it stops matching the continuation its opening finds.
    /// `scope` is the caller's credential scope, with the session id the caller named (the
    /// header), when it named one: agents that open alike (one task run many times, one body
    /// sent under many ids) keep one continuation each.
    pub fn parse<'b>(
        &self,
        scope: &str,
        body: &'b [u8],
        dialect: Dialect,
    ) -> (Result<ParsedBody<'b>, WireError>, Ticket) {
        let text = match wire::utf8(body) {
            Ok(text) => text,
            Err(err) => return (Err(err), Ticket::default()),
        };
        let key = opening_key(scope, text, dialect);
        let found = key.and_then(|key| self.take(key));
        match found.and_then(|earlier| wire::parse_continuing(text, dialect, earlier)) {
            Some(Resumed { parsed, kept, seen }) => {
                self.resumed.fetch_add(1, Ordering::Relaxed);
                self.skipped.fetch_add(kept as u64, Ordering::Relaxed);
                let earlier = Some((seen, kept));
                (Ok(parsed), Ticket { key, earlier })
            }
            None => (
                wire::parse_text(text, dialect),
                Ticket { key, earlier: None },
            ),
        }
    }

    /// Keeps what the next body of `parsed`'s conversation resumes from.
    pub fn keep(&self, ticket: Ticket, parsed: ParsedBody<'_>) {
        let Some(key) = ticket.key else {
            return;
        };
        let earlier = ticket.earlier.as_ref().map(|(seen, kept)| (seen, *kept));
        let mut continuation = parsed.into_continuation(earlier);
        if continuation.held_bytes() > self.budget / 8 {
            // The carry only saves the next turn work; the rest is what it resumes from at all.
            continuation.drop_run_carry();
        }
        let len = continuation.held_bytes();
        // One conversation never takes more than an eighth: a 32 MiB body does not empty the
        // memo of everyone else's.
        if len > self.budget / 8 {
            return;
        }
        let mut kept = self.kept.lock();
        kept.tick += 1;
        let used = kept.tick;
        if let Some(old) = kept.slots.insert(key, Slot { continuation, used }) {
            kept.bytes -= old.continuation.held_bytes();
        }
        kept.bytes += len;
        while kept.bytes > self.budget {
            let Some(oldest) = kept
                .slots
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            if let Some(gone) = kept.slots.remove(&oldest) {
                kept.bytes -= gone.continuation.held_bytes();
            }
        }
    }

    /// Takes the continuation kept under `key`: the turn that resumes from it moves its
    /// messages into its own body instead of copying them, and keeps its own in its place.
    fn take(&self, key: u128) -> Option<Continuation> {
        let mut kept = self.kept.lock();
        let slot = kept.slots.remove(&key)?;
        kept.bytes -= slot.continuation.held_bytes();
        Some(slot.continuation)
    }

    /// Parses that resumed, and the transcript entries they did not read again.
    pub fn resumed(&self) -> (u64, u64) {
        (
            self.resumed.load(Ordering::Relaxed),
            self.skipped.load(Ordering::Relaxed),
        )
    }

    /// Conversations kept and the bytes they hold.
    pub fn held(&self) -> (usize, usize) {
        let kept = self.kept.lock();
        (kept.slots.len(), kept.bytes)
    }
}

impl Default for ParseMemo {
    fn default() -> ParseMemo {
        ParseMemo::new(ParseMemo::DEFAULT_BUDGET)
    }
}

/// The key a body is kept under: its caller's scope and its opening, through the first user
/// message. `None` for a body too small to keep or that does not resume.
fn opening_key(scope: &str, text: &str, dialect: Dialect) -> Option<u128> {
    // A caller without a credential shares its scope with every other such caller, and the
    // keys that prove a shared entry are fast, not collision-proof: one of them could plant a
    // crafted body where another's conversation would resume from it. Parsed whole.
    if text.len() < MIN_BODY || !wire::resumes(dialect) || scope.starts_with(UNSCOPED) {
        return None;
    }
    let user = |span: json::Span| {
        json::get(text, span, "role").is_some_and(|role| role.of(text) == "\"user\"")
    };
    let end = json::opening_end(text, dialect.transcript_key(), OPENING_ENTRIES, user)?;
    let opening = memory_key(&text.as_bytes()[..end]);
    // Mixed, not concatenated: the scope is the caller's, the opening the body's.
    Some(opening ^ memory_key(scope.as_bytes()).rotate_left(64).wrapping_mul(3))
}

#[cfg(test)]
mod tests;
