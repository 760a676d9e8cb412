//! Write-back: a rewritten transcript spliced into the original bytes, so every byte a
//! component did not change leaves as it came.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

use super::{ArgsEncoding, ParsedBody, Slot, json};
use crate::memo::PureMemo;
use crate::message::{Forwarded, Message};

/// What a write-back produced.
#[derive(Debug)]
pub struct WriteBack<'a> {
    /// The body to forward: the input itself when nothing was spliced.
    pub body: Cow<'a, [u8]>,
    /// Indices of messages whose change had to be discarded, with why.
    pub discarded: Vec<(usize, Discard)>,
}

/// Why a change to a message could not reach the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Discard {
    /// The message count changed, so the slot map no longer aligns; the whole body is kept.
    MessageCountChanged,
    /// Content changed but does not map to one wire string (multi-part or non-text content).
    ContentNotRewritable,
    /// A field other than content, reasoning, arguments or an added breakpoint changed.
    UnsupportedField,
    /// Rewritten tool-call arguments are not a JSON object (Anthropic `input` must be one).
    ArgumentsNotJson,
}

/// Spare capacity a rewritten body is made with: the expand tool's declaration (about 700
/// bytes in every dialect) fits without moving the body.
pub(crate) const DECLARATION_ROOM: usize = 1024;

impl<'a> ParsedBody<'a> {
    /// Splices every expressible change in `rewritten` back into the original bytes.
    ///
    /// Messages are compared with the parsed ones field by field. A message whose change cannot be
    /// expressed keeps its original bytes entirely, and its index is reported in `discarded`.
    pub fn write_back(&self, rewritten: &[Message]) -> WriteBack<'a> {
        if rewritten.len() != self.messages.len() {
            return self.count_changed();
        }
        if std::ptr::eq(self.messages.as_slice(), rewritten) {
            // Handed our own messages back: nothing can have changed.
            return WriteBack {
                body: Cow::Borrowed(self.text.as_bytes()),
                discarded: Vec::new(),
            };
        }
        self.write_back_at(rewritten.iter().enumerate())
    }

    /// [`ParsedBody::write_back`] for a run's result, told as the messages it changed (a
    /// pipeline run never copies the rest): only those are compared and spliced, which on a
    /// long session is a handful of hundreds.
    pub fn write_back_changed(&self, forwarded: &Forwarded) -> WriteBack<'a> {
        if forwarded.len() != self.messages.len() {
            return self.count_changed();
        }
        self.write_back_at(forwarded.changed().iter().map(|(i, m)| (*i, m)))
    }

    /// The body as it came, every message discarded: the count changed, so no slot aligns.
    fn count_changed(&self) -> WriteBack<'a> {
        WriteBack {
            body: Cow::Borrowed(self.text.as_bytes()),
            discarded: (0..self.messages.len())
                .map(|i| (i, Discard::MessageCountChanged))
                .collect(),
        }
    }

    /// The write-back of `rewritten`, each message with its index (ascending, in range).
    fn write_back_at<'m>(
        &self,
        rewritten: impl Iterator<Item = (usize, &'m Message)>,
    ) -> WriteBack<'a> {
        let mut edits: Vec<Edit> = Vec::new();
        let mut discarded = Vec::new();
        for (index, new) in rewritten {
            let Some(old) = self.messages.get(index) else {
                continue;
            };
            if old == new {
                continue;
            }
            match self.edits_for(&self.slots[index], old, new) {
                Ok(mut message_edits) => edits.append(&mut message_edits),
                Err(why) => discarded.push((index, why)),
            }
        }
        if edits.is_empty() {
            return WriteBack {
                body: Cow::Borrowed(self.text.as_bytes()),
                discarded,
            };
        }
        edits.sort_by_key(|e| e.start);
        let extra: usize = edits.iter().map(|e| e.replacement.len()).sum();
        // Room for the expand tool's declaration, which the turn inserts into this body in
        // place (`way_back::Insertion`): without it, that insertion copies the body again.
        let mut out = String::with_capacity(self.text.len() + extra + DECLARATION_ROOM);
        let mut cursor = 0;
        for edit in &edits {
            out.push_str(&self.text[cursor..edit.start]);
            out.push_str(&edit.replacement);
            cursor = edit.end;
        }
        out.push_str(&self.text[cursor..]);
        WriteBack {
            body: Cow::Owned(out.into_bytes()),
            discarded,
        }
    }

    /// The edits that express `new` over `old`, or why they cannot.
    fn edits_for(&self, slot: &Slot, old: &Message, new: &Message) -> Result<Vec<Edit>, Discard> {
        let same_identity = old.role == new.role
            && old.tool_call_id == new.tool_call_id
            && old.tool_name == new.tool_name
            && old.tool_arguments == new.tool_arguments
            && old.is_error == new.is_error
            && old.rewritable == new.rewritable
            && old.can_cache_control == new.can_cache_control
            && old.tool_calls.len() == new.tool_calls.len()
            && old.reasoning.len() == new.reasoning.len()
            && old
                .tool_calls
                .iter()
                .zip(&new.tool_calls)
                .all(|(a, b)| a.id == b.id && a.name == b.name);
        if !same_identity || (old.cache_control && !new.cache_control) {
            return Err(Discard::UnsupportedField);
        }
        let mut edits = Vec::new();
        if old.content != new.content {
            let span = slot
                .content
                .filter(|_| old.rewritable)
                .ok_or(Discard::ContentNotRewritable)?;
            edits.push(Edit {
                start: span.start,
                end: span.end,
                replacement: content_literal(&new.content),
            });
        }
        for (i, (a, b)) in old.reasoning.iter().zip(&new.reasoning).enumerate() {
            if a != b {
                let span = slot.reasoning.get(i).ok_or(Discard::UnsupportedField)?;
                edits.push(Edit {
                    start: span.start,
                    end: span.end,
                    replacement: Replacement::Owned(json::to_literal(b)),
                });
            }
        }
        for (i, (a, b)) in old.tool_calls.iter().zip(&new.tool_calls).enumerate() {
            if a.arguments == b.arguments {
                continue;
            }
            let (span, encoding) = *slot.args.get(i).ok_or(Discard::UnsupportedField)?;
            let replacement = match encoding {
                ArgsEncoding::JsonString => Replacement::Owned(json::to_literal(&b.arguments)),
                ArgsEncoding::RawObject => {
                    let valid = json::parse_document(&b.arguments)
                        .is_ok_and(|root| json::kind_of(&b.arguments, root) == json::Kind::Object);
                    if !valid {
                        return Err(Discard::ArgumentsNotJson);
                    }
                    Replacement::Owned(b.arguments.clone())
                }
            };
            edits.push(Edit {
                start: span.start,
                end: span.end,
                replacement,
            });
        }
        if !old.cache_control && new.cache_control {
            // The metadata-only path: the key is written onto the original block, so a breakpoint
            // reaches the wire even on messages whose other content cannot round-trip.
            let close = slot.block_close.ok_or(Discard::UnsupportedField)?;
            // An empty block `{}` takes the member without a leading comma.
            let empty = self.text[..close].trim_end().ends_with('{');
            let full = if new.cache_ttl_1h {
                CACHE_CONTROL_MEMBER_1H
            } else {
                CACHE_CONTROL_MEMBER
            };
            let member = if empty { &full[1..] } else { full };
            edits.push(Edit {
                start: close,
                end: close,
                replacement: Replacement::Static(member),
            });
        }
        Ok(edits)
    }
}

/// The member `cacheinject` adds, inserted just before a block's closing brace.
const CACHE_CONTROL_MEMBER: &str = r#","cache_control":{"type":"ephemeral"}"#;
/// The same, asking for the one-hour cache.
const CACHE_CONTROL_MEMBER_1H: &str = r#","cache_control":{"type":"ephemeral","ttl":"1h"}"#;

#[derive(Debug)]
struct Edit {
    start: usize,
    end: usize,
    replacement: Replacement,
}

/// The bytes an edit puts in: made for this edit, a constant, or a literal remembered from an
/// earlier write-back ([`content_literal`]).
#[derive(Debug)]
enum Replacement {
    Owned(String),
    Static(&'static str),
    Shared(Arc<str>),
}

impl std::ops::Deref for Replacement {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Replacement::Owned(text) => text,
            Replacement::Static(text) => text,
            Replacement::Shared(text) => text,
        }
    }
}

/// The JSON literal of a rewritten content, remembered by content.
///
/// A message a component cut is cut the same way on every later turn of its session, and each
/// turn's write-back splices it again: encoding the same cut outputs turn after turn was 2% of
/// the hop's growing arm (`benches/hop.sh`, issue #34), where a hit costs a hash and a compare.
/// The memo is the components' [`PureMemo`]: shared by every session, so a hit counts only for
/// the same content, compared whole, and bounded in bytes.
fn content_literal(content: &str) -> Replacement {
    /// Contents shorter than this are encoded each time: the hash and the lock cost about as
    /// much as the encoding.
    const MIN_BYTES: usize = 256;
    /// A content longer than this (a whole file the agent wrote) is encoded each time, not kept.
    const MAX_BYTES: usize = 64 << 10;
    static LITERALS: LazyLock<PureMemo> = LazyLock::new(PureMemo::default);
    if !(MIN_BYTES..=MAX_BYTES).contains(&content.len()) {
        return Replacement::Owned(json::to_literal(content));
    }
    let hash = crate::tokens::content_hash(content);
    match LITERALS.reduce(content, hash, |c| Some(json::to_literal(c))) {
        Some(literal) => Replacement::Shared(literal),
        None => Replacement::Owned(json::to_literal(content)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A remembered literal is the literal of the same content, and only of it: contents of one
    /// length that differ in one byte, escapes, a content at each bound.
    #[test]
    fn remembered_literals_are_the_contents_own() {
        let base = "line \"quoted\"\tand a backslash \\ and é\n".repeat(12);
        let mut other = base.clone();
        other.replace_range(0..1, "L");
        let short = "x".repeat(255);
        let long = "y\n".repeat(40 << 10);
        for content in [&base, &other, &base, &short, &long, &other] {
            let made = content_literal(content);
            assert_eq!(&*made, json::to_literal(content), "{}", &content[..20]);
            let shared = matches!(made, Replacement::Shared(_));
            assert_eq!(shared, (256..=64 << 10).contains(&content.len()));
        }
    }
}
