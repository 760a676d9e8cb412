//! Carried-over messages: a turn forwards what each stage did last turn to the messages it shares
//! with the last turn, instead of deciding them again (issue #34).
//!
//! An agent re-sends its whole transcript every turn, and a stage whose decision on a message is
//! a function of that message and the ones before it ([`Freeze::Stateless`]: `linecap`,
//! `collapse`, `dedup`, `delta` and the lossless repackers without a window) decides a message
//! it saw last turn exactly as it did then, when everything before it is the same. So a run
//! leaves a [`RunCarry`]: per stage, per message, the content it forwarded, the gates it
//! counted, the originals it stashed and a note for its own look-back. The next turn's resumed
//! parse carries it for the messages it proves byte-identical ([`ParsedBody::run_carry`]), and
//! the run puts those in before each stage runs: it stashes the originals again (a marker never
//! leaves without its original in the store, whatever the store dropped since), writes the
//! outputs, counts the gates; the component decides only the rest ([`ApplyCx::carried_over`]),
//! reading the carried-over messages only to rebuild its look-back ([`ApplyCx::noted`]).
//!
//! A carry is made and used only under one stamp ([`Pipeline::carry_stamp`]): the same built
//! pipeline (a reload builds another), the same session rules (the learned lossless tools, the
//! cut floor and the markers restored in place), offloads on or off alike; and only when every stage carries over. A run makes none
//! when a stage was reverted, when the store refused an original (the outcome depends on the
//! store then, not on the messages), or when something was counted for no message. When the
//! store refuses an original being stashed again, that stage and every later one decide every
//! message, as a full run does. The parity tests (`tests/it/prefix.rs`) hold the result to the
//! full run's, forwarded bytes and report, on every turn of both corpora.
//!
//! [`ParsedBody::run_carry`]: crate::wire::ParsedBody::run_carry

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{
    ApplyCx, Freeze, NO_MESSAGE, Pipeline, RunCx, Saved, Stage, StageLog, StashKey, Transcript,
    Working,
};
use crate::carry::{RunCarry, StageCarry};
use crate::gate;
use crate::tokens;

/// A fresh identity for each built pipeline: part of every carry's stamp.
pub(super) fn next_pipeline_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Pipeline {
    /// The stamp a run under `cx` makes and reads carries with, or `None` when this pipeline
    /// cannot carry: a stage that is frozen or windowed (whether it acts depends on later
    /// messages), or one not written to carry over ([`Offload::carries_over`]).
    pub(super) fn carry_stamp(&self, cx: &RunCx) -> Option<u64> {
        let carries_over = |s: &Stage| s.carries_over() && s.freeze() == Freeze::Stateless;
        if self.stages.is_empty() || !self.stages.iter().all(carries_over) {
            return None;
        }
        let mix = |h: u64, x: u64| (h.rotate_left(23) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut h = mix(self.id, u64::from(cx.offloads));
        h = mix(h, cx.dialect as u64);
        for (kind, from) in cx.lossless_tools.iter() {
            h = mix(mix(h, tokens::content_hash(kind)), *from as u64);
        }
        if let Some(floor) = cx.cut_floor {
            h = mix(mix(mix(h, 1), floor.from as u64), floor.min_saved as u64);
        }
        for id in cx.restored.iter() {
            h = mix(mix(h, 2), tokens::content_hash(id));
        }
        Some(h)
    }
}

/// A run's carrying over: what it reads of the last turn's carry and the carry it makes.
pub(super) struct CarryOver<'c> {
    /// Messages below this are carried over for the stage about to run; 0 from the first stage
    /// whose originals the store refused.
    carried_over: usize,
    carried: Option<&'c RunCarry>,
    /// The carry this run makes, while it still can.
    next: Option<RunCarry>,
}

impl<'c> CarryOver<'c> {
    pub(super) fn new(
        stamp: Option<u64>,
        carried: Option<&'c RunCarry>,
        messages: usize,
        stages: usize,
    ) -> CarryOver<'c> {
        let carried = carried.filter(|c| {
            Some(c.stamp) == stamp && c.stages.len() == stages && c.covered <= messages
        });
        CarryOver {
            carried_over: carried.map_or(0, |c| c.covered),
            carried,
            next: stamp.map(|stamp| RunCarry::new(stamp, messages, stages)),
        }
    }

    /// The carry this run made, if it could make one.
    pub(super) fn into_carry(self) -> Option<RunCarry> {
        self.next
    }

    /// Whether stage `s` runs with carried-over messages put in.
    pub(super) fn carrying_over(&self, s: usize) -> bool {
        self.stage(s).is_some()
    }

    fn stage(&self, s: usize) -> Option<&'c StageCarry> {
        self.carried
            .and_then(|c| c.stages.get(s))
            .filter(|_| self.carried_over > 0)
    }

    /// The carried-over tokens of message `index` after stage `s`, when the stage changed it.
    pub(super) fn tokens_after(&self, s: usize, index: usize) -> Option<usize> {
        if index >= self.carried_over {
            return None;
        }
        self.stage(s)?.output(index).map(|(_, tokens)| tokens)
    }

    /// Puts in what stage `s` did last turn to the carried-over messages, before the component
    /// runs: their originals stashed again, their outputs written, their gates counted. Returns
    /// the stash keys, in message order (a component returns its own in message order too).
    /// When the store refuses an original, nothing is put in and nothing is carried over from this
    /// stage on.
    pub(super) fn prefill<'x>(
        &mut self,
        s: usize,
        transcript: &mut Transcript<'_, '_>,
        acx: &mut ApplyCx<'x>,
    ) -> Vec<StashKey>
    where
        'c: 'x,
    {
        let recording = self.next.is_some();
        let Some(stage) = self.stage(s) else {
            acx.log = recording.then(StageLog::default);
            return Vec::new();
        };
        let carried_over = self.carried_over;
        let mut keys = Vec::new();
        for (i, id) in StageCarry::below(&stage.stashed, carried_over) {
            let i = *i as usize;
            // What `offload_with` stashed: the wire original, or the text as the stage found
            // it when the original carries a marker.
            let wire = acx.wire_original(i);
            let original: &str = match wire {
                Some(wire) => wire,
                None => &transcript[i].content,
            };
            match acx.stash_as(original, id.clone()) {
                Ok(key) => keys.push(key),
                Err(_) => {
                    self.carried_over = 0;
                    acx.log = recording.then(StageLog::default);
                    return Vec::new();
                }
            }
        }
        for (i, content, _) in stage.outputs_below(carried_over) {
            transcript.set_content(*i as usize, String::from(&**content));
        }
        count_gates(StageCarry::below(&stage.gates, carried_over), acx);
        acx.carried_over = carried_over;
        acx.carried = Some(stage);
        acx.log = recording.then(StageLog::default);
        keys
    }

    /// Records what stage `s` did for the next turn: the carried-over messages' records carried
    /// over, the rest from what the component logged and the changes the guard kept. Makes no
    /// carry when the stage was reverted, when the store refused an original, or when something
    /// was counted for no message or for a carried-over one.
    pub(super) fn record(
        &mut self,
        s: usize,
        kept: bool,
        log: Option<StageLog>,
        changes: (&Saved<'_>, &[(usize, usize)]),
        messages: &Working<'_>,
    ) {
        if !kept {
            // The revert put the carried-over messages back to what the stage found: what later
            // stages did to them last turn was done to this stage's output, which is gone.
            self.carried_over = 0;
            self.next = None;
            return;
        }
        let carried = self.stage(s);
        let carried_over = carried.map_or(0, |_| self.carried_over);
        if self.next.is_none() {
            return;
        }
        let (saved, counts) = changes;
        // A carry holds a changed message's content alone.
        let content_only = saved
            .iter()
            .filter(|(i, _)| *i >= carried_over)
            .all(|(i, old)| old.with_content(messages[*i].content.clone()) == messages[*i]);
        let Some(next) = &mut self.next else {
            return;
        };
        let Some(log) = log.filter(|log| content_only && recordable(log, carried_over)) else {
            self.next = None;
            return;
        };
        let record = &mut next.stages[s];
        if let Some(stage) = carried {
            record.outputs = stage.outputs_below(carried_over).to_vec();
            record.gates = StageCarry::below(&stage.gates, carried_over).to_vec();
            record.stashed = StageCarry::below(&stage.stashed, carried_over).to_vec();
            record.noted = stage.noted_below(carried_over).to_vec();
        }
        let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        let StageLog {
            mut gates,
            mut stashed,
            mut noted,
        } = log;
        // A component may count for a message after deciding later ones (`delta` cuts after it
        // has decided every output): stable sorts keep each message's order.
        gates.sort_by_key(|(i, _)| *i);
        stashed.sort_by_key(|(i, _)| *i);
        noted.sort_unstable();
        record
            .gates
            .extend(gates.into_iter().map(|(i, g)| (index(i), g)));
        record
            .stashed
            .extend(stashed.into_iter().map(|(i, id)| (index(i), id)));
        record.noted.extend(noted.into_iter().map(index));
        for &(i, tokens) in counts.iter().filter(|(i, _)| *i >= carried_over) {
            let content: Arc<str> = Arc::from(messages[i].content.as_str());
            record
                .outputs
                .push((index(i), content, u32::try_from(tokens).unwrap_or(u32::MAX)));
        }
    }
}

/// Counts carried-over gates into the run's. They come in message order, mostly one or two kinds
/// over and over, so they are counted in runs: the map is touched once per run, where once per
/// message was a sixth of putting a stage's carry in on a long session.
fn count_gates(gates: &[(u32, &'static str)], acx: &mut ApplyCx<'_>) {
    let mut run: Option<(&'static str, u32)> = None;
    for &(_, gate) in gates {
        match &mut run {
            Some((kind, n)) if *kind == gate => *n += 1,
            _ => {
                if let Some((kind, n)) = run.replace((gate, 1)) {
                    *acx.gates.entry(kind).or_insert(0) += n;
                }
            }
        }
    }
    if let Some((kind, n)) = run {
        *acx.gates.entry(kind).or_insert(0) += n;
    }
}

/// Whether a stage's log can stand for its decisions next turn: everything counted for a
/// message it decided this turn, and no original the store refused.
fn recordable(log: &StageLog, carried_over: usize) -> bool {
    let decided = |i: usize| i != NO_MESSAGE && i >= carried_over;
    log.gates
        .iter()
        .all(|(i, g)| decided(*i) && *g != gate::STORE_FULL.name)
        && log.stashed.iter().all(|(i, _)| decided(*i))
        && log.noted.iter().all(|i| decided(*i))
}

#[cfg(test)]
mod tests;
