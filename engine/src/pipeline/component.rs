//! The two component kinds ([`Reformat`], [`Offload`]), the proof of a stash
//! ([`StashKey`]), how decisions carry across turns ([`Freeze`]), and a built [`Stage`].

use std::fmt;

use super::{ApplyCx, Kind, RunCx, StashKey, Transcript};
use crate::gate::Gate;
use crate::message::Message;
use crate::store::StoreError;

/// What a component reports when it fails. The pipeline reverts it and carries on; the run
/// report keeps the message with its causes ([`ComponentError::with_causes`]).
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// The store would not keep an original the component meant to cut.
    #[error("stashing an original failed")]
    Stash(#[from] StoreError),
    /// Anything else the component found wrong.
    #[error("{0}")]
    Other(String),
}

impl ComponentError {
    /// The message and each of its causes, `: `-joined.
    pub fn with_causes(&self) -> String {
        let mut out = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            out.push_str(": ");
            out.push_str(&error.to_string());
            cause = error.source();
        }
        out
    }
}

/// A lossless component: repacks text in place, nothing leaves the wire.
pub trait Reformat: Send + Sync {
    /// How the pipeline treats its decisions. Stateless unless it skips by position (a
    /// `keep_recent` window, [`Policy::keep_recent`]): then whether it acts depends on later
    /// history, and its decisions are frozen like an offloader's.
    fn policy(&self) -> Policy {
        Policy::STATELESS
    }

    /// Whether it carries over (see [`Offload::carries_over`]). Defaults to no.
    fn carries_over(&self) -> bool {
        false
    }

    /// # Errors
    /// Any error reverts this component for this request.
    fn reformat(
        &self,
        messages: &mut Transcript<'_, '_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError>;
}

/// How an offloader's decisions carry across the turns of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Freeze {
    /// Whether and how it rewrites a message is a pure function of that message and the ones
    /// before it (linecap, dedup): every turn re-derives the same bytes, at any depth, so there
    /// is nothing to remember and no cached prefix to respect.
    Stateless,
    /// Whether it acts depends on position or later history (mask acts once an output is old),
    /// but the replacement is a pure function of content and config. New decisions only beyond
    /// the cached prefix (or on a cold turn, when opted in); decisions are frozen and replayed;
    /// a lost freeze is re-derived at any depth, since the bytes come out the same.
    Rederivable,
    /// The replacement is sampled (an LLM wrote it): frozen and replayed, never re-derived.
    Sampled,
}

/// How the pipeline treats a component's decisions, in one value: how they carry across turns,
/// what it may do on a provably cold turn, and what a frozen decision records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub freeze: Freeze,
    /// Whether it may make new decisions inside the cached prefix on a provably cold turn.
    /// Only meaningful for [`Freeze::Rederivable`]: a cold decision must be re-derivable later.
    pub cold_cache: bool,
    /// Whether it changes more than tool-output text (an assistant's call arguments or
    /// reasoning): then its frozen decisions record and replay whole messages.
    pub whole_messages: bool,
    /// Whether a lost decision may be re-derived (a [`Freeze::Rederivable`] component whose
    /// act-or-not choice can differ with age, such as trimming a block that would later be
    /// removed, answers false).
    pub repairable: bool,
}

impl Policy {
    /// A pure function of the message and the ones before it: nothing remembered.
    pub const STATELESS: Policy = Policy {
        freeze: Freeze::Stateless,
        cold_cache: false,
        whole_messages: false,
        repairable: true,
    };

    /// A model wrote the replacement: frozen and replayed, never re-derived.
    pub const SAMPLED: Policy = Policy {
        freeze: Freeze::Sampled,
        ..Policy::STATELESS
    };

    /// Frozen and re-derivable; `cold_cache` as the component's config says.
    pub const fn rederivable(cold_cache: bool) -> Policy {
        Policy {
            freeze: Freeze::Rederivable,
            cold_cache,
            ..Policy::STATELESS
        }
    }

    /// A `keep_recent` window makes whether a component acts depend on later outputs: frozen
    /// then (and, being re-derivable, free to act on a cold turn); stateless without one.
    pub const fn keep_recent(keep_recent: usize) -> Policy {
        if keep_recent > 0 {
            Policy::rederivable(true)
        } else {
            Policy::STATELESS
        }
    }

    /// Its frozen decisions record whole messages.
    pub const fn whole_messages(self) -> Policy {
        Policy {
            whole_messages: true,
            ..self
        }
    }

    /// A lost decision is not re-derived.
    pub const fn unrepairable(self) -> Policy {
        Policy {
            repairable: false,
            ..self
        }
    }
}

/// A lossy but reversible component: replaces content with a marker and stashes the original.
pub trait Offload: Send + Sync {
    /// How the pipeline treats its decisions. Defaults to [`Policy::STATELESS`].
    fn policy(&self) -> Policy {
        Policy::STATELESS
    }

    /// Work on one message that can be done before any turn needs it, off the request path:
    /// the host calls [`Pipeline::prepare`] on a worker after forwarding a turn, for the
    /// messages that turn added. Whatever it computes must be memoized by content, so a later
    /// `offload` finds it; it must never change what `offload` decides. Defaults to nothing.
    fn prepare(&self, message: &Message) {
        let _ = message;
    }

    /// Whether [`Offload::prepare`] is implemented: a host hands a turn's new outputs to a
    /// worker only for a pipeline with a component that prepares (the copy and the worker's
    /// wake-up are the request's otherwise).
    fn prepares(&self) -> bool {
        false
    }

    /// Whether [`Offload::restructure`] is implemented: the host checks what the body-level
    /// rewrite may not touch (`tools:` rules) only for components that have one.
    fn restructures(&self) -> bool {
        false
    }

    /// A body-level rewrite that changes the message count (`summarize`): runs after every
    /// component and the splice, on the body about to be forwarded. `None` (the default) for
    /// every component that works on messages; `Err` is the gate that says why it did nothing.
    fn restructure(&self, body: &[u8], cx: &RunCx) -> Option<Result<Restructured, Gate>> {
        let _ = (body, cx);
        None
    }

    /// Whether it carries over: it skips the messages [`ApplyCx::carried_over`] names (the pipeline put
    /// in what it did to them last turn), rebuilding its look-back from them with
    /// [`ApplyCx::noted`], and it names each message it decides with [`ApplyCx::at`] before it
    /// counts a gate or stashes for it (the shared candidate helpers do). Only a stateless
    /// component may say yes, and a pipeline carries its records from turn to turn only when
    /// every stage does. Defaults to no.
    fn carries_over(&self) -> bool {
        false
    }

    /// Returns the keys of every original it stashed.
    ///
    /// # Errors
    /// Any error reverts this component for this request.
    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed;
}

/// What [`Offload::offload`] returns: the key of every original it stashed, or the error that
/// reverts it for this request.
pub type Stashed = Result<Vec<StashKey>, ComponentError>;

/// What a body-level restructure produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restructured {
    /// The whole body to forward: untouched bytes outside the replaced span.
    pub body: Vec<u8>,
    /// Tokens of the replaced messages minus the tokens of their replacement.
    pub saved_tokens: usize,
    /// The stash id of what was replaced.
    pub stashed: String,
}

/// A built component: what a factory makes.
pub enum Component {
    Reformat(Box<dyn Reformat>),
    Offload(Box<dyn Offload>),
}

/// A built component under its name, as the pipeline holds it. The name is the factory's
/// (`ComponentFactory::stage`): a component does not name itself, so `/stats`, the config and
/// the freeze keys cannot disagree about it.
pub struct Stage {
    name: &'static str,
    component: Component,
}

impl Stage {
    pub fn new(name: &'static str, component: Component) -> Stage {
        Stage { name, component }
    }

    /// A stage of one offloader (tests build pipelines by hand this way).
    pub fn offload(name: &'static str, offload: impl Offload + 'static) -> Stage {
        Stage::new(name, Component::Offload(Box::new(offload)))
    }

    /// A stage of one reformatter.
    pub fn reformat(name: &'static str, reformat: impl Reformat + 'static) -> Stage {
        Stage::new(name, Component::Reformat(Box::new(reformat)))
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn component(&self) -> &Component {
        &self.component
    }

    pub fn kind(&self) -> Kind {
        match &self.component {
            Component::Reformat(_) => Kind::Reformat,
            Component::Offload(_) => Kind::Offload,
        }
    }

    pub fn policy(&self) -> Policy {
        match &self.component {
            Component::Reformat(c) => c.policy(),
            Component::Offload(c) => c.policy(),
        }
    }

    pub fn freeze(&self) -> Freeze {
        self.policy().freeze
    }

    /// Whether the component carries over ([`Offload::carries_over`]).
    pub fn carries_over(&self) -> bool {
        match &self.component {
            Component::Reformat(c) => c.carries_over(),
            Component::Offload(c) => c.carries_over(),
        }
    }

    pub(super) fn whole_messages(&self) -> bool {
        self.policy().whole_messages
    }

    pub(super) fn repairable(&self) -> bool {
        self.policy().repairable
    }

    /// Whether a provably cold turn may make new decisions inside the cached prefix: only a
    /// re-derivable component that opts in (a lossless repacking with a window always does).
    pub(super) fn cold_cache(&self) -> bool {
        let policy = self.policy();
        policy.freeze == Freeze::Rederivable && policy.cold_cache
    }
}

impl fmt::Debug for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}({})", self.kind(), self.name())
    }
}
