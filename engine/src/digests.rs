//! What every turn computes of each message: for the pipeline before it starts, the content's
//! hash, the message's token count and whether its content carries a marker; for the session
//! tracker, the message's fingerprint. A leaf, so the parse (`wire`, which carries them from
//! turn to turn) and the pipeline (which reads them) share it without depending on each other.

use crate::marker;
use crate::message::Message;
use crate::tokens;

/// What a run computes of each original message, once per body: a host that parsed it may
/// have them already (`wire::ParsedBody::digests`). Each slice is indexed like the messages.
#[derive(Debug, Clone, Copy)]
pub struct Digests<'a> {
    /// `tokens::content_hash` of each content.
    pub content: &'a [u64],
    /// [`message_tokens`] of each message, or [`UNCOUNTED`] for one a resumed parse left for
    /// the run to count when something asks (`wire::resume`).
    pub tokens: &'a [usize],
    /// `marker::contains_marker` of each content.
    pub marked: &'a [bool],
    /// Where a run leaves the counts it took of the [`UNCOUNTED`] messages, for the next turn's
    /// parse to carry; `None` for digests no later turn resumes from.
    pub late: Option<&'a LateCounts>,
}

/// A [`Digests::tokens`] entry not counted yet. A resumed parse leaves its new messages so: a
/// count only a report's totals read is taken after the request has gone upstream
/// (`pipeline::RunReport::count_deferred`), and one a component reads when it reads it.
pub const UNCOUNTED: usize = usize::MAX;

/// The token counts a body's run took late, by message index: shared between the body's
/// parse, which the parse memo keeps for the next turn (`wire::resume`), and the run's report,
/// which fills it once it has counted (`pipeline::RunReport::count_deferred`). The next turn carries
/// the counts it finds and counts what it does not: filled or not, the counts are the same.
#[derive(Debug, Clone, Default)]
pub struct LateCounts(std::sync::Arc<std::sync::OnceLock<Vec<(usize, usize)>>>);

impl LateCounts {
    /// Leaves `counts` (index, tokens), ascending by index; the first run to finish wins (every
    /// run of a body counts the same originals).
    pub(crate) fn leave(&self, counts: Vec<(usize, usize)>) {
        debug_assert!(counts.is_sorted_by_key(|(i, _)| *i));
        let _ = self.0.set(counts);
    }

    /// The count left for message `index`, if one was.
    pub(crate) fn get(&self, index: usize) -> Option<usize> {
        let counts = self.0.get()?;
        let at = counts.binary_search_by_key(&index, |(i, _)| *i).ok()?;
        Some(counts[at].1)
    }
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
            late: None,
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
    tokens::count_hashed(&message.content, content_hash) + tokens_beside_content(message)
}

/// The tokens of what the model reads of `message` beside its content: its reasoning and its
/// calls' arguments.
pub(crate) fn tokens_beside_content(message: &Message) -> usize {
    message.visible_texts().skip(1).map(tokens::count).sum()
}
