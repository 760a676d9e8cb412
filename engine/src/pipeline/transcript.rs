//! The messages one run works on, and the messages one component works on.
//!
//! A run never copies the transcript: [`Working`] reads the originals as parsed and keeps a
//! copy only of a message some component writes to (an agent's transcript is hundreds of
//! messages and a few hundred kilobytes, and a turn changes a handful of them). What the run
//! hands back, [`Forwarded`], is those copies alone. A [`Transcript`] is one component's view:
//! the first write to a message saves its prior state, so the guard restores only what the
//! component touched.

use std::borrow::Cow;

use crate::message::Forwarded;
use crate::message::Message;

/// No copy: the message is its original.
const ORIGINAL: u32 = u32::MAX;

/// The messages as a run has made them so far: the originals, with a copy of each message a
/// component wrote to in its place.
pub(super) struct Working<'a> {
    originals: &'a [Message],
    /// Per index, where its copy is in `copies`, or [`ORIGINAL`].
    slot: Vec<u32>,
    /// The copies, each with its index, in the order they were made. A copy put back to its
    /// original is left here unreferenced until the run ends.
    copies: Vec<(usize, Message)>,
}

impl<'a> Working<'a> {
    pub(super) fn new(originals: &'a [Message]) -> Working<'a> {
        Working {
            originals,
            slot: vec![ORIGINAL; originals.len()],
            copies: Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.originals.len()
    }

    /// Message `index` as it was parsed.
    pub(super) fn original(&self, index: usize) -> &'a Message {
        &self.originals[index]
    }

    /// Message `index` for writing, copied from its original on the first write.
    fn get_mut(&mut self, index: usize) -> &mut Message {
        let slot = match self.slot[index] {
            ORIGINAL => self.copy(index, self.originals[index].clone()),
            slot => slot as usize,
        };
        &mut self.copies[slot].1
    }

    /// Makes `message` the copy of `index`; returns where it is.
    fn copy(&mut self, index: usize, message: Message) -> usize {
        let slot = self.copies.len();
        // A transcript of four billion messages is not a request anyone can send.
        self.slot[index] = u32::try_from(slot).expect("fewer than 2^32 copies");
        self.copies.push((index, message));
        slot
    }

    /// Puts `message` at `index`.
    pub(super) fn set(&mut self, index: usize, message: Message) {
        match self.slot[index] {
            ORIGINAL => {
                self.copy(index, message);
            }
            slot => self.copies[slot as usize].1 = message,
        }
    }

    /// Puts `prior` (a state [`Transcript`] saved) back at `index`: the original is put back
    /// by unlinking the copy, not by copying the original again.
    pub(super) fn restore(&mut self, index: usize, prior: Cow<'a, Message>) {
        match prior {
            Cow::Borrowed(_) => self.slot[index] = ORIGINAL,
            Cow::Owned(message) => self.set(index, message),
        }
    }

    /// What the run changed, by index: the copies that differ from their originals.
    pub(super) fn into_forwarded(self) -> Forwarded {
        let Working {
            originals,
            slot,
            copies,
        } = self;
        let changed: Vec<(usize, Message)> = copies
            .into_iter()
            .enumerate()
            .filter(|(at, (index, message))| {
                slot[*index] as usize == *at && *message != originals[*index]
            })
            .map(|(_, copy)| copy)
            .collect();
        Forwarded::new(originals.len(), changed)
    }
}

impl std::ops::Index<usize> for Working<'_> {
    type Output = Message;

    fn index(&self, index: usize) -> &Message {
        match self.slot[index] {
            ORIGINAL => &self.originals[index],
            slot => &self.copies[slot as usize].1,
        }
    }
}

/// What [`Transcript`] saved of each message a component wrote to, by index: its state before
/// the first write, the original itself (borrowed) or an earlier component's copy.
pub(super) type Saved<'a> = Vec<(usize, Cow<'a, Message>)>;

/// The messages one component works on: read any, write through [`Transcript::get_mut`].
pub struct Transcript<'a, 't> {
    pub(super) messages: &'t mut Working<'a>,
    /// The messages as they were before this component's first write to each: the original
    /// itself (borrowed) or the copy an earlier component made.
    pub(super) saved: Saved<'a>,
    /// `saved` as a membership test, indexed like `messages`; reset after each component.
    pub(super) touched: &'t mut [bool],
}

impl<'a, 't> Transcript<'a, 't> {
    pub(super) fn new(
        messages: &'t mut Working<'a>,
        touched: &'t mut [bool],
    ) -> Transcript<'a, 't> {
        Transcript {
            messages,
            saved: Vec::new(),
            touched,
        }
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.len() == 0
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Message> + ExactSizeIterator + '_ {
        (0..self.messages.len()).map(|i| &self.messages[i])
    }

    /// Saves message `index`'s state before this component's first write to it.
    fn save(&mut self, index: usize) {
        if self.touched[index] {
            return;
        }
        self.touched[index] = true;
        let prior = match self.messages.slot[index] {
            ORIGINAL => Cow::Borrowed(self.messages.original(index)),
            slot => Cow::Owned(self.messages.copies[slot as usize].1.clone()),
        };
        self.saved.push((index, prior));
    }

    /// Message `index` for writing. The first call for an index saves its prior state.
    ///
    /// # Panics
    /// When `index` is out of range, like slice indexing (the guard reverts the component).
    pub fn get_mut(&mut self, index: usize) -> &mut Message {
        self.save(index);
        self.messages.get_mut(index)
    }

    /// Replaces message `index`'s content, like `get_mut(index).content = content`, but
    /// without copying the old content: an offload replaces outputs of up to megabytes on
    /// every turn.
    ///
    /// # Panics
    /// When `index` is out of range, like slice indexing (the guard reverts the component).
    pub fn set_content(&mut self, index: usize, content: String) {
        if self.touched[index] {
            self.messages.get_mut(index).content = content;
            return;
        }
        self.touched[index] = true;
        match self.messages.slot[index] {
            ORIGINAL => {
                // The prior state is the original, borrowed; the copy takes every field but
                // the content from it.
                let original = self.messages.original(index);
                self.saved.push((index, Cow::Borrowed(original)));
                self.messages.copy(index, original.with_content(content));
            }
            slot => {
                let message = &mut self.messages.copies[slot as usize].1;
                let old = std::mem::take(&mut message.content);
                // Cloned while the content is empty, so neither text is copied.
                let mut saved = message.clone();
                saved.content = old;
                message.content = content;
                self.saved.push((index, Cow::Owned(saved)));
            }
        }
    }
}

impl std::ops::Index<usize> for Transcript<'_, '_> {
    type Output = Message;

    fn index(&self, index: usize) -> &Message {
        &self.messages[index]
    }
}
