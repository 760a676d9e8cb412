//! Body in, body out: parse, run the pipeline, splice back, and fail open on every path.
//!
//! This is the one function the proxy, `sluice compact` and `sluice replay` call. Whatever goes
//! wrong (a body we cannot parse, a panic anywhere), the pristine input is returned: it is always
//! a valid thing to forward.

use crate::gate::{self, Gate};
use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::components::cachesplit::split_system;
use crate::message::Role;
use crate::pipeline::{Forwarded, Pipeline, RunCx, RunReport, message_tokens};
use crate::wire::{self, Discard, ParsedBody, WireError};

/// A change the wire layer could not express, charged to the component that made it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Discarded {
    pub index: usize,
    pub component: Option<&'static str>,
    pub reason: Discard,
}

/// The result of [`apply_body`].
#[derive(Debug)]
pub struct Applied<'a> {
    /// The body to forward (the input itself when nothing changed or anything failed).
    pub body: Cow<'a, [u8]>,
    pub report: RunReport,
    pub discarded: Vec<Discarded>,
    /// Why the body was forwarded untouched without running the pipeline, if it was.
    pub error: Option<ApplyError>,
    /// The normalized messages as forwarded (after discards), for hosts that track turns: what
    /// differs from the parsed ones.
    pub messages: Forwarded,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The body could not be normalized.
    #[error(transparent)]
    Wire(WireError),
    /// Something panicked outside a component guard: the panic's message (a panic carries no
    /// error value to chain).
    #[error("internal error (body forwarded untouched): {0}")]
    Panicked(String),
}

/// Runs `pipeline` over `body` and returns the body to forward.
pub fn apply_body<'a>(body: &'a [u8], pipeline: &Pipeline, cx: &RunCx) -> Applied<'a> {
    guarded(body, || {
        let parsed = wire::parse(body, cx.dialect)?;
        Ok(run_parsed(&parsed, pipeline, cx))
    })
}

/// [`apply_body`] for a host that already parsed the body (to derive its session key, say),
/// so the body is not parsed twice.
pub fn apply_parsed<'a>(parsed: &ParsedBody<'a>, pipeline: &Pipeline, cx: &RunCx) -> Applied<'a> {
    guarded(parsed.text().as_bytes(), || {
        Ok(run_parsed(parsed, pipeline, cx))
    })
}

/// Fails open: a wire error or a panic anywhere returns the input untouched.
fn guarded<'a>(
    body: &'a [u8],
    run: impl FnOnce() -> Result<Applied<'a>, WireError>,
) -> Applied<'a> {
    let untouched = |error: ApplyError| Applied {
        body: Cow::Borrowed(body),
        report: RunReport::default(),
        discarded: Vec::new(),
        error: Some(error),
        messages: Forwarded::default(),
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(applied)) => applied,
        Ok(Err(err)) => untouched(ApplyError::Wire(err)),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".to_owned());
            untouched(ApplyError::Panicked(msg))
        }
    }
}

fn run_parsed<'a>(parsed: &ParsedBody<'a>, pipeline: &Pipeline, cx: &RunCx) -> Applied<'a> {
    let body = parsed.text().as_bytes();
    let mut cx = cx.clone();
    cx.existing_breakpoints = parsed.existing_breakpoints();
    let originals = parsed.messages();
    if pipeline.is_empty() {
        return Applied {
            body: Cow::Borrowed(body),
            report: RunReport::default(),
            discarded: Vec::new(),
            error: None,
            messages: Forwarded::unchanged(originals.len()),
        };
    }
    // What the last turn's run did to the messages this body shares with it goes in as it
    // was; what this run does goes with the body to the next turn (`pipeline::carry_over`).
    let (report, mut messages, carry) =
        pipeline.run_carrying(originals, parsed.digests(), &cx, parsed.run_carry());
    if let Some(carry) = carry {
        parsed.leave_run_carry(carry);
    }
    debug_assert!(
        {
            let reported = report.changed();
            messages
                .changed()
                .iter()
                .all(|(i, _)| reported.binary_search(i).is_ok())
        },
        "a message differs that no component reports changing"
    );
    let written = parsed.write_back_changed(&messages);
    let discarded: Vec<Discarded> = written
        .discarded
        .iter()
        .map(|&(index, reason)| Discarded {
            index,
            component: last_toucher(&report, index),
            reason,
        })
        .collect();
    // What actually went out: discarded messages are the originals again.
    for d in &discarded {
        messages.revert(d.index);
    }
    let mut report = report;
    if !discarded.is_empty() {
        // The total is taken whole again here: the rest of the report must be too.
        report.count_deferred();
        report.tokens_after = messages.iter(originals).map(message_tokens).sum();
    }
    let mut body = written.body;
    split_system_block(parsed, &messages, &mut body, &mut report);
    restructure(parsed, pipeline, &cx, &mut body, &mut report);
    Applied {
        body,
        report,
        discarded,
        error: None,
        messages,
    }
}

/// `cachesplit` (or `cacheinject`) moves the system prompt's volatile tail out of its cached
/// block, on the written body; counted on the component that asked for it.
fn split_system_block(
    parsed: &ParsedBody<'_>,
    messages: &Forwarded,
    body: &mut Cow<'_, [u8]>,
    report: &mut RunReport,
) {
    if let Some(at) = report
        .components
        .iter()
        .position(|c| c.name == "cachesplit")
        .or_else(|| {
            report
                .components
                .iter()
                .position(|c| c.name == "cacheinject")
        })
    {
        // Only a changed message is in `messages.changed()`.
        let system_changed = parsed
            .messages()
            .first()
            .is_some_and(|first| first.role == Role::System)
            && messages.changed().first().is_some_and(|(i, _)| *i == 0);
        let component = &mut report.components[at];
        match split_system(parsed, body, system_changed) {
            Ok(split) => {
                *body = Cow::Owned(split);
                component.mutated = true;
                *component.gates.entry(gate::SYSTEM_SPLIT.name).or_insert(0) += 1;
            }
            Err(reason) => *component.gates.entry(reason.name).or_insert(0) += 1,
        }
    }
}

/// The offloaders that restructure the body itself (a span summary), after the messages are
/// written back; each held to the same `tools:` rules as a message-level cut.
fn restructure(
    parsed: &ParsedBody<'_>,
    pipeline: &Pipeline,
    cx: &RunCx,
    body: &mut Cow<'_, [u8]>,
    report: &mut RunReport,
) {
    for stage in pipeline.stages() {
        let crate::pipeline::Component::Offload(offload) = stage.component() else {
            continue;
        };
        if !cx.offloads || !offload.restructures() {
            continue;
        }
        // A span summary would take protected outputs with it: it is held to the same rules.
        let protected = protected_output(parsed.messages(), pipeline, cx, stage.name());
        let outcome = match protected {
            Some(reason) => Err(reason),
            None => match offload.restructure(body, cx) {
                Some(outcome) => outcome,
                None => continue,
            },
        };
        if outcome.is_ok() {
            // A saving taken off the totals, floored at zero, needs them whole.
            report.count_deferred();
        }
        let Some(component) = report
            .components
            .iter_mut()
            .find(|c| c.name == stage.name())
        else {
            continue;
        };
        match outcome {
            Ok(done) => {
                *body = Cow::Owned(done.body);
                component.saved_tokens += done.saved_tokens;
                component.tokens_after = component.tokens_after.saturating_sub(done.saved_tokens);
                component.acted = true;
                component.mutated = true;
                component.stashed.push(done.stashed);
                report.tokens_after = report.tokens_after.saturating_sub(done.saved_tokens);
            }
            Err(gate) => *component.gates.entry(gate.name).or_insert(0) += 1,
        }
    }
}

/// Why a body-level restructure by `component` may not run: some tool output in `messages` is
/// protected from it by a `tools:` rule or by the session's `lossless_tools`.
fn protected_output(
    messages: &[crate::message::Message],
    pipeline: &Pipeline,
    cx: &RunCx,
    component: &str,
) -> Option<Gate> {
    let rules = pipeline.tool_rules();
    if rules.is_empty() && cx.lossless_tools.is_empty() {
        return None;
    }
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_tool())
        .find_map(|(i, m)| {
            let tool = m.tool_name.as_deref();
            if let Err(reason) = rules.applies(tool).allows(component) {
                return Some(reason);
            }
            let kind = crate::tools::output_kind(tool?, m.tool_arguments.as_deref());
            cx.lossless_tools
                .get(&kind)
                .filter(|from| i >= **from)
                .map(|_| gate::RETRIED_AFTER_COMPACTION)
        })
}

/// The last component whose kept change touched message `index`: a discard is charged to exactly
/// one component, never to a reverted one.
fn last_toucher(report: &RunReport, index: usize) -> Option<&'static str> {
    report
        .components
        .iter()
        .rev()
        .find(|c| c.reverted.is_none() && c.changed.contains(&index))
        .map(|c| c.name)
}
