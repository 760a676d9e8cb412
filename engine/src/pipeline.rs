//! The pipeline: components run in config order, each behind a fail-open, never-worse guard.
//!
//! Two component kinds, split by lossiness so reversibility is enforced by types:
//!
//! - [`Reformat`]: lossless repacking in place; nothing to stash.
//! - [`Offload`]: drops bytes and must return the [`StashKey`]s of the originals it stashed. A
//!   `StashKey` can only be made by [`ApplyCx::stash`], so holding one proves the store accepted
//!   the original.
//!
//! Each component works on a [`Transcript`]: reading is free, and the first write to a message
//! saves a copy of it. The guard diffs and, when needed, restores only those messages, so a
//! component that touches three outputs costs three copies, not a copy of the transcript. A
//! component is reverted alone, and the run goes on, when it panics or errors, when it is an
//! offload that shrank the messages without returning a key, when it grew the token count, or
//! when a history-rewriting offload changed a message inside the cached prefix on a warm turn.
//! Components cannot add or remove messages.
//!
//! **Freeze and replay.** An offload whose decisions depend on more than the message itself
//! (mask keeps the newest outputs; an LLM samples) declares a [`Freeze`] policy other than
//! [`Freeze::Stateless`]. Before it runs, every earlier decision it made in this session is
//! replayed byte-identically (before any gate, at any depth); each new decision is recorded in
//! the store's replay namespace, keyed by component and content. A decision whose record was
//! lost is re-derived only by a [`Freeze::Rederivable`] component, whose replacement is a pure
//! function of content and config; a [`Freeze::Sampled`] one forwards the message verbatim.

//!
//! The module in files: `component` (the traits), `context` (`RunCx`, `ApplyCx`),
//! `transcript`, `report`, `freeze` (keys and replay), and the run itself here.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use crate::message::Forwarded;
use crate::message::Message;
use crate::tokens;

mod carry_over;
mod component;
mod context;
mod counts;
mod freeze;
mod report;
mod transcript;

pub use crate::digests::{Digests, message_tokens};
use crate::gate;
pub use crate::gate::Gate;
use carry_over::CarryOver;
pub use component::{
    Component, ComponentError, Freeze, Offload, Policy, Reformat, Restructured, Stage, Stashed,
};
pub use context::{ApplyCx, CutFloor, RunCx, StashKey};
use context::{NO_MESSAGE, RunHashes, StageLog};
use counts::Counts;
pub use counts::Pending;
use freeze::{freeze_key, frozen_value, identity, prefix_hashes, reapply_frozen};
pub use report::{ComponentReport, FrozenCounts, Kind, MessageSaving, Revert, RunReport};
pub use transcript::Transcript;
use transcript::{Saved, Working};

/// An ordered list of built components.
#[derive(Debug, Default)]
pub struct Pipeline {
    /// This build's identity, part of every carry's stamp (see `carry_over`).
    id: u64,
    stages: Vec<Stage>,
    /// `tools:`: outputs some components may not change (see `tools.rs`).
    tool_rules: crate::tools::ToolRules,
    /// Runs that put in the last turn's records for at least one message (`carry_over`).
    carried_over_runs: AtomicU64,
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Pipeline {
    pub fn new(stages: Vec<Stage>) -> Pipeline {
        Pipeline {
            id: carry_over::next_pipeline_id(),
            stages,
            tool_rules: crate::tools::ToolRules::default(),
            carried_over_runs: AtomicU64::new(0),
        }
    }

    /// The pipeline with per-tool rules, enforced by each stage's guard.
    pub fn with_tool_rules(mut self, rules: crate::tools::ToolRules) -> Pipeline {
        self.tool_rules = rules;
        // Other rules, other decisions: a carry made under the old ones does not hold.
        self.id = carry_over::next_pipeline_id();
        self
    }

    /// Runs that put in the last turn's records for at least one message instead of deciding
    /// it again (`carry_over`): how a host or a test sees that carries are used.
    pub fn carried_over_runs(&self) -> u64 {
        self.carried_over_runs.load(Ordering::Relaxed)
    }

    /// The per-tool rules this pipeline enforces.
    pub fn tool_rules(&self) -> &crate::tools::ToolRules {
        &self.tool_rules
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.stages.iter().map(Stage::name).collect()
    }

    /// Whether any stage is a lossy offload, so a turn may leave a marker.
    pub fn cuts(&self) -> bool {
        self.stages.iter().any(|s| s.kind() == Kind::Offload)
    }

    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Whether some offloader prepares ([`Offload::prepares`]): [`Pipeline::prepare`] does
    /// nothing otherwise.
    pub fn prepares(&self) -> bool {
        self.stages.iter().any(|s| match s.component() {
            Component::Offload(offload) => offload.prepares(),
            Component::Reformat(_) => false,
        })
    }

    /// Lets each offloader precompute what it will need for `messages` (see
    /// [`Offload::prepare`]). A panic in one is contained: preparing is only ever an
    /// optimization, and the turn that needs the result computes it itself.
    pub fn prepare(&self, messages: &[Message]) {
        for stage in &self.stages {
            if let Component::Offload(offload) = stage.component() {
                for message in messages {
                    let _ = catch_unwind(AssertUnwindSafe(|| offload.prepare(message)));
                }
            }
        }
    }

    /// Runs every component over `messages` in order, each behind its guard.
    pub fn run(&self, messages: &mut [Message], cx: &RunCx) -> RunReport {
        let originals = messages.to_vec();
        self.run_from(&originals, messages, cx)
    }

    /// [`Pipeline::run`] for a host that still holds the messages as parsed (`originals`,
    /// equal to `messages` on entry): the changed ones are written over `messages`.
    pub fn run_from(
        &self,
        originals: &[Message],
        messages: &mut [Message],
        cx: &RunCx,
    ) -> RunReport {
        debug_assert!(
            originals == messages,
            "run_from: messages differ from originals"
        );
        let computed = crate::digests::Computed::of(originals);
        let (report, forwarded) = self.run_digested(originals, computed.digests(), cx);
        forwarded.write_into(messages);
        report
    }

    /// Runs every component over `originals`, which it never copies whole, given what every
    /// run computes of each of them (`ParsedBody::digests`, carried from turn to turn for the
    /// messages a conversation repeats). Returns the report and the messages it changed.
    pub fn run_digested(
        &self,
        originals: &[Message],
        digests: Digests<'_>,
        cx: &RunCx,
    ) -> (RunReport, Forwarded) {
        let (report, forwarded, _) = self.run_carrying(originals, digests, cx, None);
        (report, forwarded)
    }

    /// [`Pipeline::run_digested`] for a host that carries the pipeline's records from turn to
    /// turn (`carry_over`): `carried` is what the last turn's run did to the messages this turn
    /// shares with it ([`crate::wire::ParsedBody::run_carry`]), and the carry this run makes
    /// comes back beside the report, when it could make one.
    pub fn run_carrying(
        &self,
        originals: &[Message],
        digests: Digests<'_>,
        cx: &RunCx,
        carried: Option<&crate::carry::RunCarry>,
    ) -> (RunReport, Forwarded, Option<crate::carry::RunCarry>) {
        let started = cx.clock.now();
        let mut messages = Working::new(originals);
        let mut state = self.begin_run(originals, digests, cx.defer_counts);
        let mut report = RunReport {
            tokens_before: state.counts.total(),
            ..RunReport::default()
        };
        // Where the counts stood when each total was taken (`counts::Counts::fix`).
        let begun = state.counts.late();
        let mut taken_at = Vec::with_capacity(self.stages.len());
        let stamp = self.carry_stamp(cx);
        let mut carry_over = CarryOver::new(stamp, carried, originals.len(), self.stages.len());
        if carry_over.carrying_over(0) {
            self.carried_over_runs.fetch_add(1, Ordering::Relaxed);
        }
        for (s, stage) in self.stages.iter().enumerate() {
            if !cx.offloads && stage.kind() == Kind::Offload {
                continue;
            }
            let run = StageRun {
                stage,
                index: s,
                cx,
                rules: &self.tool_rules,
            };
            let carrying_over = carry_over.carrying_over(s);
            let mut component =
                run_stage(&run, originals, &mut messages, &mut state, &mut carry_over);
            if carrying_over && component.reverted.is_some() {
                // Run again deciding every message (the revert stopped the carrying over): what a
                // failing component counts before it fails depends on where it fails, and the
                // report must be the one a full run makes.
                component = run_stage(&run, originals, &mut messages, &mut state, &mut carry_over);
            }
            taken_at.push(state.counts.late());
            report.components.push(component);
        }
        report.tokens_after = state.counts.total();
        report.duration_us = duration_us(cx.clock.now().saturating_sub(started));
        let counts = &state.counts;
        counts.fix(&mut report.tokens_before, begun);
        for (component, &at) in report.components.iter_mut().zip(&taken_at) {
            counts.fix(&mut component.tokens_before, at);
            counts.fix(&mut component.tokens_after, at);
        }
        let RunState { counts, hashes, .. } = state;
        report.pending = counts.into_pending(originals, &hashes.content, digests.late);
        if !cx.defer_counts {
            report.count_deferred();
        }
        (report, messages.into_forwarded(), carry_over.into_carry())
    }

    /// Takes each original's digests: hash (freeze keys and components share it), token count
    /// and marker. A run that does not `defer` counts what the digests left uncounted now.
    fn begin_run(&self, originals: &[Message], digests: Digests<'_>, defer: bool) -> RunState {
        // The contract says the digests are the originals'; a caller that broke it gets
        // correct values, not the cached ones of other texts.
        let n = originals.len();
        let whole =
            digests.content.len() == n && digests.tokens.len() == n && digests.marked.len() == n;
        let (content, counts, marked) = if whole {
            (
                digests.content.to_vec(),
                digests.tokens.to_vec(),
                digests.marked.to_vec(),
            )
        } else {
            let computed = crate::digests::Computed::of(originals);
            (computed.content, computed.tokens, computed.marked)
        };
        let prefix = if self.stages.iter().any(|s| s.freeze() != Freeze::Stateless) {
            prefix_hashes(originals, &content)
        } else {
            Vec::new()
        };
        let counts = Counts::new(&counts);
        if !defer {
            counts.count_all(originals, &content);
        }
        RunState {
            counts,
            touched: vec![false; n],
            hashes: RunHashes {
                content,
                marked,
                prefix,
                dirty: vec![false; n],
            },
        }
    }
}

/// What a run carries from one stage to the next.
struct RunState {
    /// Tokens of each message as the next stage finds it, and their total.
    counts: Counts,
    /// Messages the running stage has written to (reset after each stage).
    touched: Vec<bool>,
    hashes: RunHashes,
}

/// What one stage runs with beside the messages.
struct StageRun<'r> {
    stage: &'r Stage,
    /// Its place in the pipeline.
    index: usize,
    cx: &'r RunCx,
    /// `tools:`: outputs some components may not change.
    rules: &'r crate::tools::ToolRules,
}

/// One stage behind its guard: run it, judge what it did, keep it or revert it.
fn run_stage<'a>(
    run: &StageRun<'_>,
    originals: &'a [Message],
    messages: &mut Working<'a>,
    state: &mut RunState,
    carry_over: &mut CarryOver<'_>,
) -> ComponentReport {
    let (stage, s, cx) = (run.stage, run.index, run.cx);
    let stage_started = cx.clock.now();
    let freeze = stage.freeze();
    let mut acx = ApplyCx::new(
        cx,
        originals,
        &state.counts,
        stage.cold_cache(),
        &state.hashes,
    );
    let mut transcript = Transcript::new(messages, &mut state.touched);
    // Inside the guard: a store that panics on an original stashed again fails the stage, as
    // it would fail the component stashing it on a full run.
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let carried = carry_over.prefill(s, &mut transcript, &mut acx);
        invoke(stage, freeze, &mut transcript, &mut acx).map(|keys| [carried, keys].concat())
    }));
    let mut saved = std::mem::take(&mut transcript.saved);
    drop(transcript);
    saved.sort_unstable_by_key(|(i, _)| *i);
    // The guard weighs every change against the message as the stage found it: count each
    // message it wrote to (and each replay, which a revert keeps) if no one has.
    let written_to = saved.iter().map(|(i, _)| *i);
    for i in written_to.chain(acx.reapplied_as.iter().map(|(i, _, _)| *i)) {
        if let (Some(original), Some(&hash)) = (originals.get(i), state.hashes.content.get(i)) {
            state.counts.get(i, original, hash);
        }
    }
    state.counts.absorb();
    for (i, _) in &saved {
        state.touched[*i] = false;
    }
    // Every message written to, replays included, whether the change is kept, reverted or
    // undone by the component itself: the shared hash of the original no longer vouches for any
    // of them (a revert puts replays back). Taken before the filter below, which drops a message
    // written back to its state before the stage.
    let written: Vec<usize> = saved.iter().map(|(i, _)| *i).collect();
    let new_counts = kept_changes(
        run,
        &mut saved,
        &mut acx,
        messages,
        &state.counts,
        carry_over,
    );
    let total = state.counts.total();
    let after = new_counts
        .iter()
        .fold(total, |acc, &(i, n)| acc - state.counts.known(i) + n);
    let revert = verdict(
        stage, freeze, &outcome, &saved, &acx, messages, after, total,
    );
    let mut component = ComponentReport {
        name: stage.name(),
        kind: stage.kind(),
        tokens_before: total,
        tokens_after: total,
        saved_tokens: 0,
        mutated: false,
        acted: false,
        reverted: None,
        gates: std::mem::take(&mut acx.gates),
        changed: Vec::new(),
        stashed: Vec::new(),
        savings: Vec::new(),
        frozen: acx.frozen,
        duration_us: 0,
    };
    let log = acx.log.take();
    carry_over.record(s, revert.is_none(), log, (&saved, &new_counts), messages);
    match revert {
        Some(why) => {
            let reapplied = std::mem::take(&mut acx.reapplied_as);
            drop(acx);
            revert_stage(why, saved, reapplied, messages, state, &mut component);
        }
        None => {
            if freeze != Freeze::Stateless {
                record_freezes(stage, cx, &saved, &acx, messages, &mut component);
            }
            drop(acx);
            let keys = outcome.ok().and_then(Result::ok).unwrap_or_default();
            keep_stage(keys, &saved, &new_counts, after, state, &mut component);
        }
    }
    component.duration_us = duration_us(cx.clock.now().saturating_sub(stage_started));
    for i in written {
        if let Some(dirty) = state.hashes.dirty.get_mut(i) {
            *dirty = true;
        }
    }
    component
}

/// Narrows `saved` to the changes the stage may keep (written to is not changed; `tools:` rules
/// and the session's learned rules hold some back) and counts each kept message's tokens.
fn kept_changes<'a>(
    run: &StageRun<'_>,
    saved: &mut Saved<'a>,
    acx: &mut ApplyCx<'_>,
    messages: &mut Working<'a>,
    counts: &Counts,
    carry_over: &CarryOver<'_>,
) -> Vec<(usize, usize)> {
    saved.retain(|(i, old)| messages[*i] != **old);
    if !run.rules.is_empty() {
        let component = run.stage.name();
        hold_outputs(saved, acx, messages, |_, m| {
            run.rules.applies(m.tool_name.as_deref()).allows(component)
        });
    }
    if run.stage.kind() == Kind::Offload {
        hold_learned(run.cx, counts, saved, acx, messages);
        hold_restored(run.cx, saved, acx, messages);
    }
    saved
        .iter()
        .map(|(i, _)| {
            let carried = carry_over.tokens_after(run.index, *i);
            (*i, carried.unwrap_or_else(|| message_tokens(&messages[*i])))
        })
        .collect()
}

/// Puts back the offloader's cuts the session learned not to make: any tool output once the
/// cost guard stopped cuts, a tool the model needed whole again, and a cut under the guard's
/// floor.
fn hold_learned<'a>(
    cx: &RunCx,
    counts: &Counts,
    saved: &mut Saved<'a>,
    acx: &mut ApplyCx<'_>,
    messages: &mut Working<'a>,
) {
    if cx.lossless_tools.is_empty() && cx.cut_floor.is_none() {
        return;
    }
    let every = cx.lossless_tools.get(crate::tools::EVERY_TOOL);
    // Measured against the output as it reached this stage: a lossless repack before it
    // is not the cut's saving.
    let below_floor = |i: usize, m: &Message| {
        cx.cut_floor.is_some_and(|floor| {
            i >= floor.from && counts.known(i).saturating_sub(message_tokens(m)) < floor.min_saved
        })
    };
    let retried = |i: usize, m: &Message| {
        m.tool_name.as_ref().is_some_and(|tool| {
            let kind = crate::tools::output_kind(tool, m.tool_arguments.as_deref());
            cx.lossless_tools.get(&kind).is_some_and(|from| i >= *from)
        })
    };
    hold_outputs(saved, acx, messages, |i, m| {
        if m.is_tool() && every.is_some_and(|from| i >= *from) {
            Err(gate::COST_GUARD)
        } else if retried(i, m) {
            Err(gate::RETRIED_AFTER_COMPACTION)
        } else if m.is_tool() && below_floor(i, m) {
            Err(gate::BELOW_COST_FLOOR)
        } else {
            Ok(())
        }
    });
}

/// Puts back the outputs the session restored in place, as they reached this stage: a new cut
/// and a frozen decision's replay alike (the one re-write happened on the turn that restored
/// them; from then on every turn forwards the same original).
fn hold_restored<'a>(
    cx: &RunCx,
    saved: &mut Saved<'a>,
    acx: &mut ApplyCx<'_>,
    messages: &mut Working<'a>,
) {
    if cx.restored.is_empty() {
        return;
    }
    saved.retain(|(i, old)| {
        let message = &messages[*i];
        let restored = message.is_tool()
            && crate::marker::marker_ids(&message.content).any(|id| cx.restored.contains(id));
        if !restored {
            return true;
        }
        acx.at(*i);
        acx.gate(gate::RESTORED_IN_PLACE);
        messages.restore(*i, old.clone());
        false
    });
}

/// Puts back every tool output the stage changed that `allowed` keeps from it (a `tools:`
/// rule, a tool the session learned to keep whole), counting each as a skip. A replay of a
/// frozen decision is left as it is: only new decisions are held to the rule.
fn hold_outputs<'a>(
    saved: &mut Saved<'a>,
    acx: &mut ApplyCx<'_>,
    messages: &mut Working<'a>,
    allowed: impl Fn(usize, &Message) -> Result<(), Gate>,
) {
    let mut held_calls: Vec<String> = Vec::new();
    let mut held: Vec<usize> = Vec::new();
    for (i, _) in saved.iter() {
        let message = &messages[*i];
        if !message.is_tool() || !is_new(acx, messages, *i) {
            continue;
        }
        if let Err(reason) = allowed(*i, message) {
            acx.at(*i);
            acx.gate(reason);
            held.push(*i);
            held_calls.extend(message.tool_call_id.clone());
        }
    }
    if held.is_empty() {
        return;
    }
    // A component that cuts a call and its output together (`failed_call`) is held to both:
    // the call whose output stays whole stays whole too.
    for (i, _) in saved.iter() {
        let message = &messages[*i];
        let pairs = message
            .tool_calls
            .iter()
            .any(|call| held_calls.contains(&call.id));
        if pairs && !message.is_tool() && is_new(acx, messages, *i) {
            held.push(*i);
        }
    }
    saved.retain(|(i, old)| {
        if !held.contains(i) {
            return true;
        }
        // A message replayed from a freeze before the component changed it again goes back
        // to the replay, not to the wire original: the replay is what the cached prefix holds.
        match acx.reapplied_as.iter().find(|(j, _, _)| j == i) {
            Some((_, _, replayed)) => {
                messages.set(*i, replayed.clone());
                messages[*i] != **old
            }
            None => {
                messages.restore(*i, old.clone());
                false
            }
        }
    });
}

/// Runs the component: a frozen one first replays its earlier decisions.
fn invoke(
    stage: &Stage,
    freeze: Freeze,
    transcript: &mut Transcript<'_, '_>,
    acx: &mut ApplyCx<'_>,
) -> Stashed {
    match stage.component() {
        Component::Reformat(c) if freeze == Freeze::Stateless => {
            c.reformat(transcript, acx).map(|()| Vec::new())
        }
        Component::Reformat(c) => {
            // A replayed repacking names no stash; its keys are not needed.
            reapply_frozen(stage.name(), freeze, false, true, transcript, acx);
            c.reformat(transcript, acx).map(|()| Vec::new())
        }
        Component::Offload(c) if freeze == Freeze::Stateless => c.offload(transcript, acx),
        Component::Offload(c) => {
            let mut keys = reapply_frozen(
                stage.name(),
                freeze,
                stage.whole_messages(),
                stage.repairable(),
                transcript,
                acx,
            );
            keys.extend(c.offload(transcript, acx)?);
            Ok(keys)
        }
    }
}

/// Whether a replayed message was changed again after its replay: then it is a decision of
/// this turn, checked against the prefix and recorded like any other.
fn is_new(acx: &ApplyCx<'_>, messages: &Working<'_>, i: usize) -> bool {
    match acx.reapplied_as.iter().find(|(j, _, _)| *j == i) {
        Some((_, _, reapplied)) => messages[i] != *reapplied,
        None => true,
    }
}

/// Why a stage must be reverted, if it must: a panic, an error, growth, a new decision inside
/// the cached prefix, or a shrinking offload that names no stash.
#[allow(clippy::too_many_arguments)]
fn verdict(
    stage: &Stage,
    freeze: Freeze,
    outcome: &std::thread::Result<Stashed>,
    saved: &Saved<'_>,
    acx: &ApplyCx<'_>,
    messages: &Working<'_>,
    after: usize,
    total: usize,
) -> Option<Revert> {
    let in_cached_prefix = freeze != Freeze::Stateless
        && saved
            .iter()
            .any(|(i, _)| is_new(acx, messages, *i) && !acx.may_mutate(*i));
    match outcome {
        Err(panic) => Some(Revert::Panicked(panic_message(panic.as_ref()))),
        Ok(Err(err)) => Some(Revert::Failed(err.with_causes())),
        Ok(Ok(_)) if after > total => Some(Revert::Grew),
        Ok(Ok(_)) if in_cached_prefix => Some(Revert::CachedPrefix),
        Ok(Ok(keys)) if stage.kind() == Kind::Offload && after < total && keys.is_empty() => {
            Some(Revert::NoStashKey)
        }
        Ok(Ok(_)) => None,
    }
}

/// Puts back what the stage changed, but keeps its replays: they are what the provider cached,
/// and dropping them because the component failed at something else would flip the prefix.
fn revert_stage<'a>(
    why: Revert,
    saved: Saved<'a>,
    reapplied: Vec<(usize, String, Message)>,
    messages: &mut Working<'a>,
    state: &mut RunState,
    component: &mut ComponentReport,
) {
    for (i, old) in saved {
        messages.restore(i, old);
    }
    for (i, _, reapplied) in reapplied {
        let n = message_tokens(&reapplied);
        let was = state.counts.known(i);
        component.savings.push(MessageSaving {
            index: i,
            content_key: tokens::content_hash(&messages[i].content),
            saved_tokens: was.saturating_sub(n),
        });
        state.counts.set_total(state.counts.total() - was + n);
        state.counts.set(i, n);
        messages.set(i, reapplied);
        component.changed.push(i);
    }
    component.tokens_after = state.counts.total();
    component.saved_tokens = component
        .tokens_before
        .saturating_sub(component.tokens_after);
    component.acted = component.saved_tokens > 0;
    component.mutated = !component.changed.is_empty();
    component.reverted = Some(why);
}

/// Records each new decision of a frozen stage in the store's replay namespace, so every later
/// turn forwards the same bytes for the message.
fn record_freezes(
    stage: &Stage,
    cx: &RunCx,
    saved: &Saved<'_>,
    acx: &ApplyCx<'_>,
    messages: &Working<'_>,
    component: &mut ComponentReport,
) {
    let whole = stage.whole_messages();
    for (i, old) in saved.iter().filter(|(i, _)| is_new(acx, messages, *i)) {
        let replayed_key = acx
            .reapplied_as
            .iter()
            .find(|(j, _, _)| j == i)
            .map(|(_, key, _)| key.clone());
        let key = match acx.fresh.binary_search_by_key(i, |(j, _)| *j) {
            Ok(at) => acx.fresh[at].1.clone(),
            Err(_) => replayed_key.unwrap_or_else(|| {
                freeze_key(stage.name(), *i, acx.prefix_at(*i), &identity(old, whole))
            }),
        };
        let value = if whole {
            frozen_value(&messages[*i])
        } else {
            messages[*i].content.clone()
        };
        cx.store.put_frozen(&cx.session, &key, &value);
        if acx.repair.binary_search(i).is_ok() {
            component.frozen.repaired += 1;
        }
    }
}

/// Keeps the stage's changes: per-message savings, the new counts, and the stash ids.
fn keep_stage(
    keys: Vec<StashKey>,
    saved: &Saved<'_>,
    new_counts: &[(usize, usize)],
    after: usize,
    state: &mut RunState,
    component: &mut ComponentReport,
) {
    for (&(i, n), (_, old)) in new_counts.iter().zip(saved) {
        // A message no earlier stage wrote to is its original, whose hash the run carries: a
        // long session's cut outputs are not hashed again on every turn.
        let content_key = match (state.hashes.dirty.get(i), state.hashes.content.get(i)) {
            (Some(false), Some(&hash)) => hash,
            _ => tokens::content_hash(&old.content),
        };
        component.savings.push(MessageSaving {
            index: i,
            content_key,
            saved_tokens: state.counts.known(i).saturating_sub(n),
        });
        state.counts.set(i, n);
    }
    let total = state.counts.total();
    component.tokens_after = after;
    component.saved_tokens = total - after;
    component.acted = after < total;
    component.mutated = !saved.is_empty();
    component.changed = saved.iter().map(|(i, _)| *i).collect();
    component.stashed = keys.into_iter().map(|k| k.id).collect();
    state.counts.set_total(after);
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}

#[cfg(test)]
mod tests;
