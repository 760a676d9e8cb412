//! The prefix finder: how much of a new turn's body is byte-identical to the session's last.
//!
//! An agent re-sends its whole transcript every turn, and all but the last message or two are
//! the bytes it sent a turn earlier. A session keeps a [`Seen`] of the body it last read: the
//! span and a 128-bit key of everything before the messages array (the head: model, system,
//! tools), of each message, and of everything after the array (the tail). The next body is
//! checked against it at the same offsets, message by message, in one pass over the matched
//! bytes and with no parse; the first message whose bytes differ ends the prefix. That message
//! and everything after it are what the turn must read and decide again: the new messages, and
//! the message the agent touched (Claude Code moves its last `cache_control` breakpoint every
//! turn, so the last message of the previous turn is usually one of them).
//!
//! Nothing here trusts a match it cannot prove. A different head (a key reordered, a system
//! prompt edited) shifts every offset, so nothing matches and the turn takes the full path;
//! a body shorter than a span ends the prefix there; an edit inside the history (an agent's
//! own compaction) ends it at the edit. Keys are [`bytes_key`]: two independent 64-bit hashes,
//! where a collision would make sluice reuse the forwarded bytes of another message, which
//! 128 bits put out of reach for any real transcript.

use crate::tokens::bytes_key;
use crate::wire::json::{self, Span};

/// What a session keeps of the last body it read, to recognise its own history next turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Everything before the messages array's `[`: its key.
    head: u128,
    /// Where the array opens (the head's length).
    array_start: usize,
    /// Each message's bytes with what separates it from the one before (the `[` for the
    /// first): their span and key, in order. Together with the head and the tail they cover
    /// the body exactly, so a match proves every byte up to the end of the last matched message.
    messages: Vec<(Span, u128)>,
    /// Everything after the last message (the closing `]` and the keys after it): its key.
    tail: u128,
}

/// How much of a new body matches a [`Seen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Common {
    /// The bytes before the messages array are the same (and so every offset after them).
    pub head: bool,
    /// How many leading messages are byte-identical, at the same offsets.
    pub messages: usize,
    /// Every message matched, and the bytes after the last are the same too: the whole body
    /// is the last one (a retry).
    pub whole: bool,
}

impl Seen {
    /// What to keep of `body`, whose messages array is at `array` (a span [`json`] validated,
    /// from the wire parse).
    pub fn of(body: &str, array: Span) -> Seen {
        let bytes = body.as_bytes();
        let mut from = array.start;
        let messages: Vec<(Span, u128)> = json::elements(body, array)
            .map(|element| {
                let covered = Span::new(from, element.end);
                from = element.end;
                (covered, bytes_key(&bytes[covered.start..covered.end]))
            })
            .collect();
        let tail_start = from;
        Seen {
            head: bytes_key(&bytes[..array.start]),
            array_start: array.start,
            messages,
            tail: bytes_key(&bytes[tail_start..]),
        }
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
            head: false,
            messages: 0,
            whole: false,
        };
        let head = body.get(..self.array_start);
        if head.map(bytes_key) != Some(self.head) || body.get(self.array_start) != Some(&b'[') {
            return common;
        }
        common.head = true;
        for (span, key) in &self.messages {
            match body.get(span.start..span.end) {
                Some(bytes) if bytes_key(bytes) == *key => common.messages += 1,
                _ => return common,
            }
        }
        let tail_start = self
            .messages
            .last()
            .map_or(self.array_start, |(span, _)| span.end);
        common.whole = body.get(tail_start..).map(bytes_key) == Some(self.tail);
        common
    }
}

#[cfg(test)]
mod tests;
