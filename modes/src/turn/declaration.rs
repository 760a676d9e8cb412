//! The way back: where a turn's body declares the expand tool (beside a marker, or on every
//! turn of an agent a lossy pipeline may cut), and the turn it then forwards.

use std::time::Duration;

use bytes::Bytes;
use engine::apply::Applied;
use engine::pipeline::Pipeline;
use engine::savings::NetSaving;
use engine::way_back::{self, Placement, Withheld};
use engine::wire::ParsedBody;
use store::Flush;

use super::{Forward, Turn, is_stream, model_of};
use crate::tracker::TurnFacts;

/// How the forwarded body gives the model its way back.
#[derive(Debug)]
pub(super) enum WayBack {
    /// No marker in the body: nothing to declare.
    NotNeeded,
    /// The body with the tool inserted (into the body write-back made, in place, when it made
    /// one: `way_back::Insertion`).
    Injected(Vec<u8>),
    /// The request already declares it.
    Declared,
    /// The body still carries a marker sluice did not cut (the agent's own history) and the
    /// tool cannot be declared: nothing more can be done, and it is counted.
    Unavailable,
}

/// Declares the expand tool when the body carries a marker, or on every turn of an agent
/// (`declare`, see [`declares_from_the_start`]).
///
/// # Errors
/// Why it could not.
fn place_way_back(
    parsed: &ParsedBody<'_>,
    applied: &mut Applied<'_>,
    declare: bool,
) -> Result<WayBack, Withheld> {
    if declare {
        let placement = way_back::declare_at(parsed, &applied.body)?;
        return Ok(made(placement, applied));
    }
    // A stash this run made is a marker in the body (write-back may have discarded it, and then
    // the tool is declared for nothing, as harmless as it is rare); otherwise the body itself is
    // read, for replays of a reverted component and markers the agent's history brought in. A
    // live session stashes on most turns, so the scan runs on few of them.
    let stashed = applied
        .report
        .components
        .iter()
        .any(|c| !c.stashed.is_empty());
    if !stashed && !way_back::carries_marker(&applied.body) {
        return Ok(WayBack::NotNeeded);
    }
    let placement = way_back::inject_at(parsed, &applied.body)?;
    Ok(made(placement, applied))
}

/// The way back once placed: an insertion is made now, into the run's body (taken from it), so
/// the turn's added time counts it.
fn made(placement: Placement, applied: &mut Applied<'_>) -> WayBack {
    match placement {
        Placement::Insert(insertion) => {
            WayBack::Injected(insertion.into_body(std::mem::take(&mut applied.body)))
        }
        Placement::AlreadyDeclared => WayBack::Declared,
    }
}

impl Forward {
    /// What this request adds to the net saving (`engine::savings`) once its upstream has
    /// completed it, its declaration charged; a host that saw it fail counts it apart
    /// (`Stats::record_outcome`). Read after the counts settled.
    pub fn saving(&self) -> NetSaving {
        NetSaving {
            tokens_before: self.report.tokens_before as u64,
            tokens_after: self.report.tokens_after as u64,
            declared_tokens: self.declared_tokens as u64,
            ..NetSaving::default()
        }
    }
}

/// Whether a turn declares the expand tool whether or not it carries a marker: an agent's
/// request (it declares tools of its own) that a pipeline with a lossy offload may cut.
///
/// `tools` opens the provider's cached prefix (Anthropic and OpenAI alike), so a tool that
/// appears on the turn of the first marker re-writes the whole prompt once per session. Declared
/// from the first turn, in the same bytes and the same place, the list never changes within a
/// session and the marker's way back is there before any marker is. A request without tools of
/// its own (a plain chat) keeps the old rule, the tool only beside a marker: adding a tool list
/// where there was none would change what the model is asked, and such a request has no tool
/// outputs for the offloads to cut.
pub(super) fn declares_from_the_start(parsed: &ParsedBody<'_>, pipeline: &Pipeline) -> bool {
    use engine::wire::json;
    let text = parsed.text();
    pipeline.cuts()
        && parsed.tools_span().is_some_and(|tools| {
            json::kind_of(text, tools) == json::Kind::Array
                && json::elements(text, tools).next().is_some()
        })
}

/// A run whose way back is placed: the body to forward and how it declares the expand tool.
pub(super) struct Placed<'a> {
    applied: Applied<'a>,
    way: WayBack,
    /// Why lossy offloads did not run, if they did not.
    withheld: Option<Withheld>,
}

impl<'a> Placed<'a> {
    /// The run as it is, its way back placed.
    ///
    /// # Errors
    /// Why the way back could not be placed: the caller runs the turn again without lossy
    /// offloads and places that with [`Placed::lossless`].
    pub(super) fn placed(
        parsed: &ParsedBody<'_>,
        mut applied: Applied<'a>,
        reach: Result<(), Withheld>,
        declare: bool,
    ) -> Result<Placed<'a>, Withheld> {
        // A `tool_choice` that keeps the model from calling it still gets the declaration (the
        // same `tools` as the session's other turns); a stored request or a `tools` that is not
        // an array gets none.
        let declare = declare
            && !matches!(
                reach,
                Err(Withheld::StoredResponse | Withheld::ToolsNotArray)
            );
        let way = place_way_back(parsed, &mut applied, declare)?;
        Ok(Placed {
            applied,
            way,
            withheld: reach.err(),
        })
    }

    /// The run again without lossy offloads. A marker it still carries came with the agent's
    /// history; the tool is declared when it can be, and the turn goes either way.
    pub(super) fn lossless(
        parsed: &ParsedBody<'_>,
        mut applied: Applied<'a>,
        reason: Withheld,
    ) -> Placed<'a> {
        let way = place_way_back(parsed, &mut applied, false).unwrap_or(WayBack::Unavailable);
        Placed {
            applied,
            way,
            withheld: Some(reason),
        }
    }

    pub(super) fn forward(
        self,
        original: &Bytes,
        parsed: &ParsedBody<'_>,
        session: String,
        mut facts: TurnFacts,
        added: Duration,
        flushed: Flush,
    ) -> Turn {
        let expandable = matches!(self.way, WayBack::Injected(_) | WayBack::Declared);
        // Only a declaration sluice made costs the agent anything: one its request carried
        // (`Declared`) was there without sluice too.
        let declared_tokens = match self.way {
            WayBack::Injected(_) => way_back::tool_tokens(parsed.dialect()),
            _ => 0,
        };
        if let Some(turn) = facts.ledger_turn.as_mut() {
            turn.declared = declared_tokens as u64;
        }
        let body = match (self.way, self.applied.body) {
            (WayBack::Injected(body), _) => Bytes::from(body),
            (_, std::borrow::Cow::Owned(bytes)) => Bytes::from(bytes),
            (_, std::borrow::Cow::Borrowed(_)) => original.clone(),
        };
        Turn::Forward(Box::new(Forward {
            body,
            session,
            expandable,
            declared_tokens,
            stream: is_stream(parsed),
            model: model_of(parsed),
            messages: self.applied.messages,
            facts,
            report: self.applied.report,
            discarded: self.applied.discarded,
            withheld: self.withheld,
            opaque: parsed.opaque_entries().len(),
            added,
            flushed,
        }))
    }
}
