//! What every turn computes of each message: for the pipeline before it starts, the content's
//! hash, the message's token count and whether its content carries a marker; for the session
//! tracker, the message's fingerprint. A leaf, so the parse (`wire`, which carries them from
//! turn to turn) and the pipeline (which reads them) share it without depending on each other.

use crate::marker;
use crate::message::Message;
use crate::tokens;

/// What a run computes of each original message, once per body: a host that parsed it may
/// have them already (`wire::ParsedBody::digests`). Each slice is indexed like the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digests<'a> {
    /// `tokens::content_hash` of each content.
    pub content: &'a [u64],
    /// [`message_tokens`] of each message.
    pub tokens: &'a [usize],
    /// `marker::contains_marker` of each content.
    pub marked: &'a [bool],
}

/// [`Digests`] computed and owned, for a host that has none to carry.
#[derive(Debug, Clone, Default)]
pub struct Computed {
    pub content: Vec<u64>,
    pub tokens: Vec<usize>,
    pub marked: Vec<bool>,
}

impl Computed {
    /// Every digest of every message, each content hashed once.
    pub fn of(messages: &[Message]) -> Computed {
        let content: Vec<u64> = messages.iter().map(content_hash).collect();
        let tokens = messages
            .iter()
            .zip(&content)
            .map(|(m, &hash)| message_tokens_hashed(m, hash))
            .collect();
        let marked = messages.iter().map(marked).collect();
        Computed {
            content,
            tokens,
            marked,
        }
    }

    pub fn digests(&self) -> Digests<'_> {
        Digests {
            content: &self.content,
            tokens: &self.tokens,
            marked: &self.marked,
        }
    }
}

/// A message's [`Digests::content`] entry.
pub(crate) fn content_hash(message: &Message) -> u64 {
    tokens::content_hash(&message.content)
}

/// A message's [`Digests::marked`] entry.
pub(crate) fn marked(message: &Message) -> bool {
    marker::contains_marker(&message.content)
}

/// A message's identity for the session tracker's prefix matching: everything the model reads
/// of it, plus its role and tool ids, folded from `content_hash`, the hash of its content.
/// Content it does not cover (an image) can only make two different messages look equal,
/// which makes the prefix look longer: the safe direction. Carried from turn to turn like the
/// other digests (`wire::ParsedBody::fingerprints`), so a turn folds only its new messages.
pub fn fingerprint_hashed(message: &Message, content_hash: u64) -> u64 {
    let h = tokens::content_hash(message.role.as_str()).rotate_left(17) ^ content_hash;
    message
        .identity_texts()
        .fold(h, |h, text| h.rotate_left(17) ^ tokens::content_hash(text))
}

/// Content tokens of one message: every piece of text the model reads.
pub fn message_tokens(message: &Message) -> usize {
    message.visible_texts().map(tokens::count).sum()
}

/// [`message_tokens`] for a message whose content hash is known.
pub(crate) fn message_tokens_hashed(message: &Message, content_hash: u64) -> usize {
    tokens::count_hashed(&message.content, content_hash)
        + message
            .visible_texts()
            .skip(1)
            .map(tokens::count)
            .sum::<usize>()
}
