//! What a pipeline run leaves for the next turn of its conversation: per stage, what the stage
//! did to each message (the content it forwarded, the gates it counted, the originals it
//! stashed, a note for its own look-back). A leaf, like `digests`, so the parse (`wire`, which
//! carries it from turn to turn with the messages it describes) and the pipeline (which makes
//! and reads it) share it without depending on each other.
//!
//! The next turn's messages that are the last turn's, byte for byte and at the same index (the
//! resumed parse proves them), are *carried over*: a stage whose decision on a message is a function
//! of that message and the ones before it ([`crate::pipeline::Freeze::Stateless`]) decides them
//! as it did, so the pipeline forwards the carried result instead of deciding again. See
//! `pipeline::carry_over` for when a carry is made and used.

use std::sync::Arc;

/// One run's records, made under one [`RunCarry::stamp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCarry {
    /// What the records depend on beside the messages (the pipeline, the session's learned
    /// rules, whether offloads ran): a run under another stamp decides afresh.
    pub(crate) stamp: u64,
    /// How many leading messages the records cover.
    pub(crate) covered: usize,
    /// Per stage, in pipeline order.
    pub(crate) stages: Vec<StageCarry>,
}

/// What one stage did, as sparse lists ascending by message index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StageCarry {
    /// The content the stage left in each message it changed, with its token count.
    pub(crate) outputs: Vec<(u32, Arc<str>, u32)>,
    /// Each gate the stage counted, by the message it was counted for.
    pub(crate) gates: Vec<(u32, &'static str)>,
    /// Each original the stage stashed, by stash id.
    pub(crate) stashed: Vec<(u32, String)>,
    /// Messages the stage noted for its own look-back (`ApplyCx::note`).
    pub(crate) noted: Vec<u32>,
}

impl RunCarry {
    pub(crate) fn new(stamp: u64, covered: usize, stages: usize) -> RunCarry {
        RunCarry {
            stamp,
            covered,
            stages: vec![StageCarry::default(); stages],
        }
    }

    /// The records of the first `messages` messages only: what the next turn shares.
    pub fn truncated(mut self, messages: usize) -> RunCarry {
        self.covered = self.covered.min(messages);
        let below = self.covered as u64;
        for stage in &mut self.stages {
            stage.outputs.retain(|(i, _, _)| u64::from(*i) < below);
            stage.gates.retain(|(i, _)| u64::from(*i) < below);
            stage.stashed.retain(|(i, _)| u64::from(*i) < below);
            stage.noted.retain(|i| u64::from(*i) < below);
        }
        self
    }

    /// About what it holds in memory, for a memo's budget.
    pub fn held_bytes(&self) -> usize {
        self.stages
            .iter()
            .map(|s| {
                s.outputs
                    .iter()
                    .map(|(_, c, _)| c.len() + 40)
                    .sum::<usize>()
                    + s.gates.len() * 24
                    + s.stashed.iter().map(|(_, id)| id.len() + 32).sum::<usize>()
                    + s.noted.len() * 4
            })
            .sum::<usize>()
            + 64
    }
}

impl StageCarry {
    /// The entries for messages below `carried_over`, in index order.
    pub(crate) fn below<T>(list: &[(u32, T)], carried_over: usize) -> &[(u32, T)] {
        &list[..list.partition_point(|(i, _)| (*i as usize) < carried_over)]
    }

    /// The outputs of messages below `carried_over`, in index order.
    pub(crate) fn outputs_below(&self, carried_over: usize) -> &[(u32, Arc<str>, u32)] {
        &self.outputs[..self
            .outputs
            .partition_point(|(i, _, _)| (*i as usize) < carried_over)]
    }

    /// The noted messages below `carried_over`, ascending.
    pub(crate) fn noted_below(&self, carried_over: usize) -> &[u32] {
        &self.noted[..self.noted.partition_point(|i| (*i as usize) < carried_over)]
    }

    /// Whether message `index` was noted.
    pub(crate) fn noted(&self, index: usize) -> bool {
        u32::try_from(index).is_ok_and(|i| self.noted.binary_search(&i).is_ok())
    }

    /// The carried output of message `index`, if the stage changed it.
    pub(crate) fn output(&self, index: usize) -> Option<(&Arc<str>, usize)> {
        let i = u32::try_from(index).ok()?;
        let at = self.outputs.binary_search_by_key(&i, |(j, _, _)| *j).ok()?;
        let (_, content, tokens) = &self.outputs[at];
        Some((content, *tokens as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_the_records_of_the_shared_messages_only() {
        let mut carry = RunCarry::new(7, 5, 1);
        let stage = &mut carry.stages[0];
        stage.outputs = vec![(1, Arc::from("cut"), 3), (4, Arc::from("late"), 2)];
        stage.gates = vec![(0, "below_min_size"), (3, "too_few_lines"), (4, "x")];
        stage.stashed = vec![(1, "abc".to_owned()), (4, "def".to_owned())];
        stage.noted = vec![0, 2, 4];
        let kept = carry.truncated(4);
        assert_eq!(kept.covered, 4);
        let stage = &kept.stages[0];
        assert_eq!(stage.outputs.len(), 1);
        assert_eq!(stage.output(1).map(|(c, n)| (&**c, n)), Some(("cut", 3)));
        assert_eq!(stage.output(4), None);
        assert_eq!(StageCarry::below(&stage.gates, 3).len(), 1);
        assert_eq!(stage.stashed, vec![(1, "abc".to_owned())]);
        assert!(stage.noted(2) && !stage.noted(4) && !stage.noted(1));
    }
}
