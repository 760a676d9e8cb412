//! The prefix finder: how much of a new turn's body is byte-identical to the session's last.
//!
//! An agent re-sends its whole transcript every turn, and all but the last message or two are
//! the bytes it sent a turn earlier. A session keeps a [`Seen`] of the body it last read: a
//! 128-bit key of everything before the messages array (the head), of each message with the
//! bytes that separate it from the one before, and of everything after the array. The next
//! body is checked against it at the same offsets, message by message, in one pass over the
//! matched bytes and with no parse; the first message whose bytes differ ends the prefix. That
//! message and everything after it are what the turn must read and decide again: the new
//! messages, and the message the agent touched (Claude Code moves its last `cache_control`
//! breakpoint every turn, so the last message of the previous turn is usually one of them).
//!
//! The keys after the array (`tools` in both corpora's bodies, `metadata`, `stream`) sit after
//! the new messages, whose end a turn only knows once it has read them: [`Seen::same_after`]
//! compares them then. A changed head shifts every offset, so nothing matches and the turn
//! takes the full path; a body shorter than a span ends the prefix there; an edit inside the
//! history (an agent's own compaction) ends it at the edit.
//!
//! Keys are [`memory_key`] (xxh3-128): fast, and out of reach of any accidental collision, but
//! not of a crafted one. A collision would make a turn resume from
//! another body's parse; the parse memo (`modes::parses`) keeps the conversations of a caller
//! only under its credential's scope, and none for a caller without one, so a forger can only
//! confuse conversations of its own credential.

use super::json::{self, Span};
use crate::tokens::memory_key;

/// What a session keeps of the last body it read, to recognise its own history next turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The key of everything before the messages array's `[`.
    head: u128,
    /// Where the array opens (the head's length).
    array_start: usize,
    /// Each message's bytes with what separates it from the one before (the `[` for the
    /// first): their span and key, in order. With the head they cover the body up to the last
    /// message, so a match proves every byte up to the end of the last matched message.
    messages: Vec<(Span, u128)>,
    /// The key of everything after the last message, the closing `]` included, and the body's
    /// length: a retry is recognised without reading its messages twice.
    rest: u128,
    len: usize,
    /// The length and key of everything after the array's `]`.
    after: (usize, u128),
}

/// How much of a new body matches a [`Seen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Common {
    /// The bytes before the messages array are the same (and so every offset after them).
    pub head_matches: bool,
    /// How many leading messages are byte-identical, at the same offsets.
    pub matched: usize,
    /// The whole body is the last one, byte for byte (a retry).
    pub identical: bool,
}

impl Seen {
    /// What to keep of `body`, whose messages array is at `array` (a span [`json`] validated,
    /// from the wire parse).
    pub fn of(body: &str, array: Span) -> Seen {
        let elements: Vec<Span> = json::elements(body, array).collect();
        Seen::of_elements(body, array, &elements, None)
    }

    /// [`Seen::of`] from the element spans a parse found. With `earlier`, a `Seen` whose first
    /// `kept` messages (at least one) [`Seen::common`] found in `body`, their keys and the
    /// head's are taken from it instead of hashed again.
    pub fn of_elements(
        body: &str,
        array: Span,
        elements: &[Span],
        earlier: Option<(&Seen, usize)>,
    ) -> Seen {
        let bytes = body.as_bytes();
        let earlier = earlier
            .map(|(seen, kept)| (seen, kept.min(seen.messages.len()).min(elements.len())))
            .filter(|(seen, kept)| *kept > 0 && seen.array_start == array.start);
        let mut messages = Vec::with_capacity(elements.len());
        if let Some((seen, kept)) = earlier {
            messages.extend_from_slice(&seen.messages[..kept]);
        }
        let mut from = messages.last().map_or(array.start, |(span, _)| span.end);
        for element in &elements[messages.len()..] {
            let covered = Span::new(from, element.end);
            from = element.end;
            messages.push((covered, memory_key(&bytes[covered.start..covered.end])));
        }
        Seen {
            head: earlier.map_or_else(|| memory_key(&bytes[..array.start]), |(s, _)| s.head),
            array_start: array.start,
            messages,
            rest: memory_key(&bytes[from..]),
            len: bytes.len(),
            after: (bytes.len() - array.end, memory_key(&bytes[array.end..])),
        }
    }

    /// Where the messages array opened in the body this was made of.
    pub fn array_start(&self) -> usize {
        self.array_start
    }

    /// How many messages the session kept.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The longest prefix of `body` that is this body's, in whole messages. Reads each matched
    /// byte once and parses nothing; stops at the first message that differs or that `body`
    /// is too short to hold.
    pub fn common(&self, body: &[u8]) -> Common {
        let mut common = Common {
            head_matches: false,
            matched: 0,
            identical: false,
        };
        let head = body.get(..self.array_start);
        if head.map(memory_key) != Some(self.head) || body.get(self.array_start) != Some(&b'[') {
            return common;
        }
        common.head_matches = true;
        for (span, key) in &self.messages {
            match body.get(span.start..span.end) {
                Some(bytes) if memory_key(bytes) == *key => common.matched += 1,
                _ => return common,
            }
        }
        let rest_start = self
            .messages
            .last()
            .map_or(self.array_start, |(span, _)| span.end);
        common.identical = body.len() == self.len && memory_key(&body[rest_start..]) == self.rest;
        common
    }

    /// How many bytes at the start of a body are proven this body's by a [`Common`] of it: the
    /// whole body when it is the same, else the head and the `matched` messages with what
    /// separates them.
    pub fn proven(&self, common: Common) -> usize {
        if common.identical {
            return self.len;
        }
        if !common.head_matches {
            return 0;
        }
        common
            .matched
            .checked_sub(1)
            .and_then(|last| self.messages.get(last))
            .map_or(self.array_start, |(span, _)| span.end)
    }

    /// Whether what follows the messages array of `body`, which ends at `array_end` (known once
    /// the turn has read its new messages), is what followed it last turn.
    pub fn same_after(&self, body: &[u8], array_end: usize) -> bool {
        body.get(array_end..)
            .is_some_and(|after| after.len() == self.after.0 && memory_key(after) == self.after.1)
    }
}

#[cfg(test)]
pub(crate) mod tests;
