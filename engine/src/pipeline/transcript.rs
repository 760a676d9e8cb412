//! The messages one component works on: read any, and the first write to a message saves a
//! copy, so the guard restores only what the component touched.

use super::*;

/// The messages one component works on: read any, write through [`Transcript::get_mut`].
pub struct Transcript<'a> {
    pub(super) messages: &'a mut [Message],
    /// Copies of the messages as they were before this component's first write to each.
    pub(super) saved: Vec<(usize, Message)>,
    /// `saved` as a membership test, indexed like `messages`; reset after each component.
    pub(super) touched: &'a mut [bool],
}

impl<'a> Transcript<'a> {
    pub(super) fn new(messages: &'a mut [Message], touched: &'a mut [bool]) -> Transcript<'a> {
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
        self.messages.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Message> {
        self.messages.iter()
    }

    /// Message `index` for writing. The first call for an index saves its prior state.
    ///
    /// # Panics
    /// When `index` is out of range, like slice indexing (the guard reverts the component).
    pub fn get_mut(&mut self, index: usize) -> &mut Message {
        if !self.touched[index] {
            self.touched[index] = true;
            self.saved.push((index, self.messages[index].clone()));
        }
        &mut self.messages[index]
    }

    /// Replaces message `index`'s content, like `get_mut(index).content = content`, but saves
    /// the prior state by moving the old content instead of copying it: an offload replaces
    /// outputs of up to megabytes on every turn.
    ///
    /// # Panics
    /// When `index` is out of range, like slice indexing (the guard reverts the component).
    pub fn set_content(&mut self, index: usize, content: String) {
        let message = &mut self.messages[index];
        let old = std::mem::take(&mut message.content);
        if !self.touched[index] {
            self.touched[index] = true;
            // Cloned while the content is empty, so neither text is copied.
            let mut saved = message.clone();
            saved.content = old;
            self.saved.push((index, saved));
        }
        message.content = content;
    }
}

impl std::ops::Index<usize> for Transcript<'_> {
    type Output = Message;

    fn index(&self, index: usize) -> &Message {
        &self.messages[index]
    }
}
