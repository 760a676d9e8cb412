//! The run's token counts: each message's as the next stage finds it, an original's taken when
//! something first reads it.
//!
//! A resumed parse leaves its new messages uncounted ([`UNCOUNTED`]): on a turn new to sluice,
//! counting them was a quarter of the request path, and no default component reads the count
//! of an assistant's text or of its tool calls; only the report's totals do. So an original is
//! counted when a component reads its count ([`ApplyCx::tokens`]) or a stage changes it (the
//! guard weighs the change against it), and the rest after the host has sent the request
//! ([`RunReport::count_deferred`]), or before the run starts when the run does not defer
//! ([`RunCx::defer_counts`]).
//!
//! The totals leave out what is not counted yet. Every decision reads differences only (a
//! stage's saving, the never-worse guard, the cost floor), and a difference is exact: both
//! sides count the messages the stage changed. The absolute totals a report holds are made
//! short by one and the same amount when the run ends ([`Counts::fix`]), the counts no one
//! took, which `count_deferred` adds.

use std::cell::{Cell, RefCell};

use crate::digests::{LateCounts, UNCOUNTED};
use crate::message::Message;
use crate::tokens;

pub(super) struct Counts {
    /// Each message's count as the next stage finds it; [`UNCOUNTED`] for an original no one
    /// has counted (an uncounted message is always its original: a stage that changes one
    /// counts it first).
    cells: Vec<Cell<usize>>,
    /// How far a gate's bounded count of each uncounted original's content got, for the next
    /// one to go on from ([`tokens::count_until`]).
    partial: Vec<Cell<tokens::Partial>>,
    /// Originals counted during the run, in the order they were, each once.
    taken: RefCell<Vec<(usize, usize)>>,
    /// How many of `taken` the total includes.
    absorbed: Cell<usize>,
    /// Sum of the counts the total took in from `taken`, so far: what a later total includes
    /// that an earlier one does not.
    late: Cell<usize>,
    /// The sum of every known count: the run's total, short by the uncounted.
    total: Cell<usize>,
}

impl Counts {
    pub(super) fn new(counts: &[usize]) -> Counts {
        let total = counts.iter().filter(|&&n| n != UNCOUNTED).sum();
        Counts {
            cells: counts.iter().copied().map(Cell::new).collect(),
            partial: vec![Cell::default(); counts.len()],
            taken: RefCell::default(),
            absorbed: Cell::new(0),
            late: Cell::new(0),
            total: Cell::new(total),
        }
    }

    /// The count of message `index` as the running stage found it; for an original no one has
    /// counted, `original`'s (whose content hash is `hash`), counted now. 0 past the end.
    pub(super) fn get(&self, index: usize, original: &Message, hash: u64) -> usize {
        let Some(cell) = self.cells.get(index) else {
            return 0;
        };
        match cell.get() {
            UNCOUNTED => {
                let content = tokens::count_until(
                    &original.content,
                    hash,
                    self.partial[index].get(),
                    usize::MAX,
                );
                let n =
                    content.unwrap_or(usize::MAX) + crate::digests::tokens_beside_content(original);
                self.take(index, n);
                n
            }
            n => n,
        }
    }

    /// Keeps `n`, the count of uncounted original `index`.
    fn take(&self, index: usize, n: usize) {
        self.cells[index].set(n);
        self.taken.borrow_mut().push((index, n));
    }

    /// Whether message `index` counts fewer than `limit` tokens as the running stage found it,
    /// told for an uncounted original from its length when that is shorter, and otherwise
    /// without counting it whole when it does not: a count it finishes is kept, as
    /// [`Counts::get`] keeps one. Past the end a message counts 0.
    pub(super) fn below(&self, index: usize, original: &Message, hash: u64, limit: usize) -> bool {
        let Some(cell) = self.cells.get(index) else {
            return 0 < limit;
        };
        match cell.get() {
            // Every token is at least a byte: fewer bytes than the limit are fewer tokens, and
            // the count is left for later.
            UNCOUNTED if original.visible_texts().map(str::len).sum::<usize>() < limit => true,
            UNCOUNTED => {
                let partial = &self.partial[index];
                match tokens::count_until(&original.content, hash, partial.get(), limit) {
                    Ok(content) => {
                        let n = content + crate::digests::tokens_beside_content(original);
                        self.take(index, n);
                        n < limit
                    }
                    Err(far) => {
                        partial.set(far);
                        false
                    }
                }
            }
            n => n < limit,
        }
    }

    /// The count of message `index`, which something has counted ([`Counts::get`]).
    pub(super) fn known(&self, index: usize) -> usize {
        let n = self.cells[index].get();
        debug_assert_ne!(n, UNCOUNTED, "message {index} read before it was counted");
        n
    }

    /// Message `index` now counts `n` (a stage changed it); the total is the caller's to set.
    pub(super) fn set(&self, index: usize, n: usize) {
        self.cells[index].set(n);
    }

    /// The run's total, short by the uncounted.
    pub(super) fn total(&self) -> usize {
        self.total.get()
    }

    /// Sets the total (a stage's changes, weighed).
    pub(super) fn set_total(&self, total: usize) {
        self.total.set(total);
    }

    /// Takes the counts taken since the last call into the total.
    pub(super) fn absorb(&self) {
        let taken = self.taken.borrow();
        let added: usize = taken[self.absorbed.get()..].iter().map(|(_, n)| n).sum();
        self.absorbed.set(taken.len());
        self.late.set(self.late.get() + added);
        self.total.set(self.total.get() + added);
    }

    /// How much the totals have taken in of counts taken during the run ([`Counts::fix`]).
    pub(super) fn late(&self) -> usize {
        self.late.get()
    }

    /// Counts every original no one has: a run that does not defer.
    pub(super) fn count_all(&self, originals: &[Message], hashes: &[u64]) {
        for (i, (m, &hash)) in originals.iter().zip(hashes).enumerate() {
            self.get(i, m, hash);
        }
        self.absorb();
    }

    /// Makes `total`, taken when the run's [`Counts::late`] was `at`, short by what the run's
    /// last total is: the uncounted, which [`RunReport::count_deferred`] adds to all alike.
    pub(super) fn fix(&self, total: &mut usize, at: usize) {
        *total += self.late.get() - at;
    }

    /// What the run leaves to count: the originals no one counted, and, for the next turn's
    /// parse, the ones it did. `None` when every message is counted and no parse waits for the
    /// counts.
    pub(super) fn into_pending(
        self,
        originals: &[Message],
        hashes: &[u64],
        late: Option<&LateCounts>,
    ) -> Option<Pending> {
        debug_assert_eq!(self.absorbed.get(), self.taken.borrow().len());
        let uncounted: Vec<(usize, u64, Message)> = self
            .cells
            .iter()
            .enumerate()
            .filter(|(_, n)| n.get() == UNCOUNTED)
            .map(|(i, _)| (i, hashes[i], originals[i].clone()))
            .collect();
        let mut taken = self.taken.into_inner();
        if uncounted.is_empty() && (taken.is_empty() || late.is_none()) {
            return None;
        }
        taken.sort_unstable_by_key(|(i, _)| *i);
        Some(Pending {
            uncounted,
            taken,
            late: late.cloned(),
        })
    }
}

/// Counts a run left for [`RunReport::count_deferred`]: the originals no one counted, and the ones it
/// did, for the next turn's parse ([`LateCounts`]).
#[derive(Debug, Clone)]
pub struct Pending {
    /// Index, content hash and the original, of each message not counted yet.
    uncounted: Vec<(usize, u64, Message)>,
    /// Originals the run counted, ascending by index.
    taken: Vec<(usize, usize)>,
    late: Option<LateCounts>,
}

impl Pending {
    /// Counts the uncounted; leaves every late count for the next turn; returns the sum of
    /// the ones it counted, which every total of the run's report lacked.
    pub(super) fn count(self) -> usize {
        let Pending {
            uncounted,
            mut taken,
            late,
        } = self;
        let mut missing = 0;
        for (i, hash, original) in &uncounted {
            let n = crate::digests::message_tokens_hashed(original, *hash);
            missing += n;
            taken.push((*i, n));
        }
        if let Some(late) = late {
            taken.sort_unstable_by_key(|(i, _)| *i);
            late.leave(taken);
        }
        missing
    }
}

#[cfg(test)]
mod tests;
