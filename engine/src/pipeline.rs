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

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::marker;
use crate::message::Message;
use crate::store::{Store, StoreError};
use crate::tokens;
use crate::wire::Dialect;

/// What a component reports when it fails. The pipeline reverts it and carries on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ComponentError(pub String);

/// Proof that an original was stashed: only [`ApplyCx::stash`] makes one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StashKey {
    id: String,
}

impl StashKey {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `<<cg:ID>>`.
    pub fn marker(&self) -> String {
        marker::marker(&self.id)
    }
}

/// A lossless component: repacks text in place, nothing leaves the wire.
pub trait Reformat: Send + Sync {
    fn name(&self) -> &'static str;

    /// How its decisions carry across turns. Stateless unless it skips by position (a
    /// `keep_recent` window): then whether it acts depends on later history, and its decisions
    /// are frozen like an offloader's.
    fn freeze(&self) -> Freeze {
        Freeze::Stateless
    }

    /// # Errors
    /// Any error reverts this component for this request.
    fn reformat(
        &self,
        messages: &mut Transcript<'_>,
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

/// A lossy but reversible component: replaces content with a marker and stashes the original.
pub trait Offload: Send + Sync {
    fn name(&self) -> &'static str;

    /// How its decisions carry across turns. Defaults to [`Freeze::Stateless`].
    fn freeze(&self) -> Freeze {
        Freeze::Stateless
    }

    /// Whether it may make new decisions inside the cached prefix on a provably cold turn.
    /// Only meaningful for [`Freeze::Rederivable`]: a cold decision must be re-derivable later.
    fn cold_cache(&self) -> bool {
        false
    }

    /// Whether it changes more than tool-output text (an assistant's call arguments or
    /// reasoning): then its frozen decisions record and replay whole messages.
    fn whole_messages(&self) -> bool {
        false
    }

    /// Whether a lost decision may be re-derived (a [`Freeze::Rederivable`] component whose
    /// act-or-not choice can differ with age, such as trimming a block that would later be
    /// removed, answers false).
    fn repairable(&self) -> bool {
        true
    }

    /// Work on one message that can be done before any turn needs it, off the request path:
    /// the host calls [`Pipeline::prepare`] on a worker after forwarding a turn, for the
    /// messages that turn added. Whatever it computes must be memoized by content, so a later
    /// `offload` finds it; it must never change what `offload` decides. Defaults to nothing.
    fn prepare(&self, message: &Message) {
        let _ = message;
    }

    /// Whether [`Offload::restructure`] is implemented: the host checks what the body-level
    /// rewrite may not touch (`tools:` rules) only for components that have one.
    fn restructures(&self) -> bool {
        false
    }

    /// A body-level rewrite that changes the message count (`summarize`): runs after every
    /// component and the splice, on the body about to be forwarded. `None` (the default) for
    /// every component that works on messages; `Err` is the gate that says why it did nothing.
    fn restructure(&self, body: &[u8], cx: &RunCx) -> Option<Result<Restructured, &'static str>> {
        let _ = (body, cx);
        None
    }

    /// Returns the keys of every original it stashed.
    ///
    /// # Errors
    /// Any error reverts this component for this request.
    fn offload(
        &self,
        messages: &mut Transcript<'_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<Vec<StashKey>, ComponentError>;
}

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

/// A built component, as the pipeline holds it.
pub enum Stage {
    Reformat(Box<dyn Reformat>),
    Offload(Box<dyn Offload>),
}

impl Stage {
    pub fn name(&self) -> &'static str {
        match self {
            Stage::Reformat(c) => c.name(),
            Stage::Offload(c) => c.name(),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Stage::Reformat(_) => Kind::Reformat,
            Stage::Offload(_) => Kind::Offload,
        }
    }

    pub fn freeze(&self) -> Freeze {
        match self {
            Stage::Reformat(c) => c.freeze(),
            Stage::Offload(c) => c.freeze(),
        }
    }

    fn whole_messages(&self) -> bool {
        match self {
            Stage::Reformat(_) => false,
            Stage::Offload(c) => c.whole_messages(),
        }
    }

    fn repairable(&self) -> bool {
        match self {
            Stage::Reformat(_) => true,
            Stage::Offload(c) => c.repairable(),
        }
    }

    fn cold_cache(&self) -> bool {
        match self {
            // A lossless repacking is always re-derivable, so a cold turn may apply it anywhere.
            Stage::Reformat(c) => c.freeze() == Freeze::Rederivable,
            Stage::Offload(c) => c.freeze() == Freeze::Rederivable && c.cold_cache(),
        }
    }
}

impl fmt::Debug for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}({})", self.kind(), self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Reformat,
    Offload,
}

/// Per-request facts the host hands the pipeline.
#[derive(Clone)]
pub struct RunCx {
    pub dialect: Dialect,
    pub session: String,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    /// History-rewriting offloaders ([`Freeze`] other than stateless) may make new decisions
    /// only at or after this index: the cached-prefix boundary. 0 lets them act anywhere, which
    /// is right offline; a host that does not know the boundary passes the message count.
    pub mutable_from: usize,
    /// The session's prompt cache is provably cold on this turn.
    pub cold: bool,
    /// `cache_control` breakpoints already on the wire (system + tools + messages).
    pub existing_breakpoints: usize,
    /// The host's model service for LLM components; `None` where there is none (offline
    /// tools, tests), and those components then do what the spec says for no model.
    pub models: Option<Arc<dyn crate::model::Models>>,
    /// Lossy offloads may run. False on a turn whose request gives the model no way to call the
    /// expand tool (see [`crate::way_back`]): only lossless repacking runs then, so no marker
    /// can leave without its way back.
    pub offloads: bool,
    /// Output kinds (`tools::output_kind`: a tool, or a shell tool's program) this session
    /// learned not to cut lossily (the model re-ran a call whose output had been cut, or
    /// expanded the same marker twice), each with the first message index it applies from: offloaders' cuts on its outputs from there on are put
    /// back, lossless repacking still runs. Outputs before that index keep whatever the
    /// components decide for them, so the cached prefix never moves.
    pub lossless_tools: Arc<std::collections::BTreeMap<String, usize>>,
    /// The least a lossy cut of a tool output must save, from a message index on: a session
    /// whose expand rounds cost more than its cuts saved keeps only the cuts that would pay
    /// for a round on their own (see `modes::guard`). `None`: no floor.
    pub cut_floor: Option<CutFloor>,
}

/// A floor under lossy cuts: an offloader's cut of a tool output at or after `from` that saves
/// fewer than `min_saved` tokens is put back (skip reason `below_cost_floor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CutFloor {
    pub from: usize,
    pub min_saved: usize,
}

impl RunCx {
    /// The one way to build a run's facts: everything a host does not set reads "offline",
    /// acting at any depth on a warm cache, no model, every component allowed.
    pub fn new(
        dialect: Dialect,
        session: impl Into<String>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> RunCx {
        RunCx {
            dialect,
            session: session.into(),
            store,
            clock,
            mutable_from: 0,
            cold: false,
            existing_breakpoints: 0,
            models: None,
            offloads: true,
            lossless_tools: Arc::default(),
            cut_floor: None,
        }
    }

    /// The cached-prefix boundary and coldness the session's tracker answered.
    #[must_use]
    pub fn at_boundary(mut self, mutable_from: usize, cold: bool) -> RunCx {
        self.mutable_from = mutable_from;
        self.cold = cold;
        self
    }

    #[must_use]
    pub fn with_models(mut self, models: Option<Arc<dyn crate::model::Models>>) -> RunCx {
        self.models = models;
        self
    }

    #[must_use]
    pub fn with_offloads(mut self, offloads: bool) -> RunCx {
        self.offloads = offloads;
        self
    }

    /// The tools the session keeps whole, each from its message index on.
    #[must_use]
    pub fn with_lossless_tools(
        mut self,
        tools: Arc<std::collections::BTreeMap<String, usize>>,
    ) -> RunCx {
        self.lossless_tools = tools;
        self
    }

    /// The floor under this session's lossy cuts, if its cost guard set one.
    #[must_use]
    pub fn with_cut_floor(mut self, floor: Option<CutFloor>) -> RunCx {
        self.cut_floor = floor;
        self
    }
}

impl fmt::Debug for RunCx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunCx")
            .field("dialect", &self.dialect)
            .field("session", &self.session)
            .field("mutable_from", &self.mutable_from)
            .field("cold", &self.cold)
            .field("offloads", &self.offloads)
            .finish_non_exhaustive()
    }
}

/// What one component sees while it runs: the request facts, a stash, and a gate recorder.
pub struct ApplyCx<'a> {
    run: &'a RunCx,
    /// The messages as the pipeline received them (the wire originals).
    initial: &'a [Message],
    /// Tokens of each message as this component found it.
    counts: &'a [usize],
    gates: BTreeMap<&'static str, u32>,
    stashed: usize,
    /// The running component may act at depth on a cold turn.
    cold_cache: bool,
    /// Indices whose freeze was lost and may be re-derived at any depth, ascending.
    repair: Vec<usize>,
    /// Indices replayed from a freeze before the component ran, ascending.
    reapplied: Vec<usize>,
    /// Indices a late model result may change inside the cached prefix, ascending.
    late: Vec<usize>,
    /// Per replayed index: its freeze key and the message as replayed, so a revert keeps the
    /// replay and a further change by the component is checked and recorded like a new one.
    reapplied_as: Vec<(usize, String, Message)>,
    /// Freeze keys of the candidates replay looked up and did not find, by index.
    fresh: Vec<(usize, String)>,
    frozen: FrozenCounts,
    /// Per index, a hash of every wire-original message before it (empty when no component is
    /// frozen): part of a freeze key, so a decision never lands on another transcript that
    /// happens to hold the same text at the same index.
    prefix: &'a [u64],
    /// `tokens::content_hash` of each wire-original content, computed once per run.
    hashes: &'a [u64],
    /// Whether an earlier component changed the message (its hash in `hashes` is then stale).
    dirty: &'a [bool],
}

impl<'a> ApplyCx<'a> {
    fn new(
        run: &'a RunCx,
        initial: &'a [Message],
        counts: &'a [usize],
        cold_cache: bool,
        hashes: &'a RunHashes,
    ) -> ApplyCx<'a> {
        ApplyCx {
            run,
            initial,
            counts,
            prefix: &hashes.prefix,
            hashes: &hashes.content,
            dirty: &hashes.dirty,
            gates: BTreeMap::new(),
            stashed: 0,
            cold_cache,
            repair: Vec::new(),
            late: Vec::new(),
            reapplied: Vec::new(),
            reapplied_as: Vec::new(),
            fresh: Vec::new(),
            frozen: FrozenCounts::default(),
        }
    }

    /// Tokens of message `index` as this component found it (every text the model reads; for a
    /// tool output, its content). Counted once per run and kept current between components, so
    /// a gate costs a lookup, not another pass over the text.
    pub fn tokens(&self, index: usize) -> usize {
        self.counts.get(index).copied().unwrap_or(0)
    }

    /// `tokens::content_hash(content)` for `content`, the content of message `index` as this
    /// component received it: looked up when no earlier component changed the message (every
    /// message is hashed once per run, for its token count), computed otherwise. Components key
    /// their per-output work by it instead of hashing megabytes again.
    pub fn content_hash(&self, index: usize, content: &str) -> u64 {
        let unchanged = !self.dirty.get(index).copied().unwrap_or(true)
            && self
                .initial
                .get(index)
                .is_some_and(|m| m.content.len() == content.len())
            // A replay of this stage's own frozen decision is not in `dirty` yet.
            && !self.reapplied_as.iter().any(|(j, _, _)| *j == index);
        match self.hashes.get(index) {
            Some(&hash) if unchanged => hash,
            _ => tokens::content_hash(content),
        }
    }

    /// What the model would read at `index` had nothing run: the text to stash when an
    /// offloader replaces content that only lossless reformats touched, so a marker always
    /// resolves to the exact bytes the agent sent, not to our repacking of them.
    pub fn wire_original(&self, index: usize) -> Option<&'a str> {
        self.initial
            .get(index)
            .map(|m| m.content.as_str())
            .filter(|c| !marker::contains_marker(c))
    }

    pub fn dialect(&self) -> Dialect {
        self.run.dialect
    }

    pub fn session(&self) -> &str {
        &self.run.session
    }

    pub fn existing_breakpoints(&self) -> usize {
        self.run.existing_breakpoints
    }

    /// The host's model service, when it has one.
    pub fn models(&self) -> Option<&dyn crate::model::Models> {
        self.run.models.as_deref()
    }

    /// The session's prompt cache is provably cold on this turn.
    pub fn is_cold(&self) -> bool {
        self.run.cold
    }

    /// Records a model ask that is still running: the host may wait for it and run again.
    pub fn model_pending(&mut self) {
        self.gate("model_pending");
    }

    /// Lets this component change message `index` inside the cached prefix on this run: a
    /// model result that arrived after its request went without it ([`Answer::Late`]).
    ///
    /// [`Answer::Late`]: crate::model::Answer::Late
    pub fn allow_late(&mut self, index: usize) {
        if let Err(at) = self.late.binary_search(&index) {
            self.late.insert(at, index);
        }
    }

    /// Whether a history-rewriting offloader may make a new decision on message `index` on this
    /// turn: it is beyond the cached prefix, or the turn is cold and the component opted into
    /// `cold_cache`, or its earlier decision was lost and is being re-derived. The guard enforces
    /// the same rule, so asking only saves work and records the right gate.
    pub fn may_mutate(&self, index: usize) -> bool {
        index >= self.run.mutable_from
            || (self.cold_cache && self.run.cold)
            || self.repair.binary_search(&index).is_ok()
            || self.late.binary_search(&index).is_ok()
    }

    /// Records why the component declined an item (a named skip reason, shown in `/stats`).
    pub fn gate(&mut self, reason: &'static str) {
        *self.gates.entry(reason).or_insert(0) += 1;
    }

    /// Stashes `original` for this session and returns its key.
    ///
    /// # Errors
    /// When the store refuses; the caller must then leave the content alone.
    pub fn stash(&mut self, original: &str) -> Result<StashKey, StoreError> {
        self.stash_as(original, marker::stash_id(original))
    }

    /// [`ApplyCx::stash`] for a caller that already holds `marker::stash_id(original)` (it
    /// built the marker first), so a megabyte original is not keyed twice.
    pub fn stash_as(&mut self, original: &str, id: String) -> Result<StashKey, StoreError> {
        debug_assert_eq!(id, marker::stash_id(original));
        self.run.store.stash(&self.run.session, &id, original)?;
        self.stashed += 1;
        Ok(StashKey { id })
    }
}

/// The messages one component works on: read any, write through [`Transcript::get_mut`].
pub struct Transcript<'a> {
    messages: &'a mut [Message],
    /// Copies of the messages as they were before this component's first write to each.
    saved: Vec<(usize, Message)>,
    /// `saved` as a membership test, indexed like `messages`; reset after each component.
    touched: &'a mut [bool],
}

impl<'a> Transcript<'a> {
    fn new(messages: &'a mut [Message], touched: &'a mut [bool]) -> Transcript<'a> {
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

/// Why a component's change was thrown away.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "reason", content = "detail")]
pub enum Revert {
    Panicked(String),
    Failed(String),
    /// An offload shrank the messages but returned no stash key: reversibility would break.
    NoStashKey,
    /// The component grew the token count.
    Grew,
    /// A history-rewriting offload made a new decision inside the cached prefix on a warm turn.
    CachedPrefix,
}

impl Revert {
    /// How the dashboard and logs name it.
    pub fn label(&self) -> &'static str {
        match self {
            Revert::Panicked(_) => "panicked",
            Revert::Failed(_) => "failed",
            Revert::NoStashKey => "no_stash_key",
            Revert::Grew => "grew",
            Revert::CachedPrefix => "cached_prefix",
        }
    }
}

/// Freeze lookups by one component on one request (`frozen_*` in `/stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FrozenCounts {
    /// Earlier decisions replayed byte-identically.
    pub hits: u64,
    /// Candidates with no decision on record.
    pub misses: u64,
    /// Candidates whose decision was on record and had been dropped by the store.
    pub dropped: u64,
    /// Dropped decisions re-derived (byte-identical by construction: the component is
    /// [`Freeze::Rederivable`]). `dropped - repaired` is the number of flips.
    pub repaired: u64,
}

impl FrozenCounts {
    pub fn add(&mut self, other: FrozenCounts) {
        self.hits += other.hits;
        self.misses += other.misses;
        self.dropped += other.dropped;
        self.repaired += other.repaired;
    }
}

/// What one component did on one request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ComponentReport {
    pub name: &'static str,
    pub kind: Kind,
    pub tokens_before: usize,
    pub tokens_after: usize,
    /// Content tokens saved (0 when reverted or when it only moved bytes).
    pub saved_tokens: usize,
    /// It changed at least one message and the change was kept.
    pub mutated: bool,
    /// It saved content tokens.
    pub acted: bool,
    pub reverted: Option<Revert>,
    /// Named reasons it declined items, with counts.
    pub gates: BTreeMap<&'static str, u32>,
    /// Indices of the messages it changed (empty when reverted).
    pub changed: Vec<usize>,
    /// Stash ids it returned.
    pub stashed: Vec<String>,
    /// Per changed message: what it saved, keyed by the content it replaced, so a host can
    /// count a saving once however many turns re-send the same message (`saved_tokens_unique`).
    pub savings: Vec<MessageSaving>,
    /// Freeze lookups (all zero for a stateless component).
    pub frozen: FrozenCounts,
    pub duration_us: u64,
}

/// One message a component changed, and what that saved.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MessageSaving {
    pub index: usize,
    /// `tokens::content_hash` of the content before this component changed it.
    pub content_key: u64,
    /// Content tokens saved on this message (0 when it grew or only moved bytes).
    pub saved_tokens: usize,
}

/// What the whole pipeline did on one request.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunReport {
    pub tokens_before: usize,
    pub tokens_after: usize,
    pub components: Vec<ComponentReport>,
    pub duration_us: u64,
}

impl RunReport {
    pub fn saved_tokens(&self) -> usize {
        self.tokens_before.saturating_sub(self.tokens_after)
    }

    /// Freeze lookups of every component together.
    pub fn frozen(&self) -> FrozenCounts {
        let mut total = FrozenCounts::default();
        for c in &self.components {
            total.add(c.frozen);
        }
        total
    }
}

/// What a freeze is keyed on: the content, or for a whole-message component every text the
/// model reads of the message (content, reasoning, call arguments).
fn identity(message: &Message, whole: bool) -> std::borrow::Cow<'_, str> {
    if whole {
        let texts: Vec<&str> = message.visible_texts().collect();
        texts.join("\u{1f}").into()
    } else {
        message.content.as_str().into()
    }
}

/// The recorded form of a whole-message decision.
fn frozen_value(message: &Message) -> String {
    serde_json::json!({
        "content": message.content,
        "reasoning": message.reasoning,
        "arguments": message.tool_calls.iter().map(|c| c.arguments.as_str()).collect::<Vec<_>>(),
    })
    .to_string()
}

/// Applies a recorded whole-message decision; false when it does not fit the message.
fn apply_frozen(message: &mut Message, value: &str) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(value) else {
        return false;
    };
    let strings = |key: &str| -> Option<Vec<String>> {
        v.get(key)?
            .as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let (Some(content), Some(reasoning), Some(arguments)) = (
        v.get("content").and_then(|c| c.as_str()),
        strings("reasoning"),
        strings("arguments"),
    ) else {
        return false;
    };
    if reasoning.len() != message.reasoning.len() || arguments.len() != message.tool_calls.len() {
        return false;
    }
    content.clone_into(&mut message.content);
    message.reasoning = reasoning;
    for (call, args) in message.tool_calls.iter_mut().zip(arguments) {
        call.arguments = args;
    }
    true
}

/// What a run hashes once and every component reuses.
struct RunHashes {
    /// `tokens::content_hash` of each original content.
    content: Vec<u64>,
    /// See [`ApplyCx::prefix`]; empty when no component is frozen.
    prefix: Vec<u64>,
    /// Messages an earlier stage wrote to (kept, reverted or replayed), so their `content` hash
    /// may be stale.
    dirty: Vec<bool>,
}

/// Running hashes of a transcript: entry `i` covers messages `0..i` as the agent sent them
/// (role, text, call ids, names and arguments, reasoning), which never change from turn to turn.
/// `content` holds each original's content hash, already computed for the run.
fn prefix_hashes(originals: &[Message], content: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(originals.len() + 1);
    let mut h = 0x243f_6a88_85a3_08d3_u64;
    let mix = |h: u64, x: u64| (h.rotate_left(17) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (m, &content_hash) in originals.iter().zip(content) {
        out.push(h);
        h = mix(h, tokens::content_hash(m.role.as_str()));
        h = mix(h, content_hash);
        let mut fold = |text: &str| h = mix(h, tokens::content_hash(text));
        if let Some(id) = &m.tool_call_id {
            fold(id);
        }
        for c in &m.tool_calls {
            fold(&c.id);
            fold(&c.name);
            fold(&c.arguments);
        }
        for r in &m.reasoning {
            fold(r);
        }
    }
    out.push(h);
    out
}

impl ApplyCx<'_> {
    fn prefix_at(&self, index: usize) -> u64 {
        self.prefix.get(index).copied().unwrap_or(0)
    }
}

/// The replay key of `component`'s decision on the message at `index` holding `content`.
///
/// Position is part of it: whether a history-rewriting component acts depends on where a
/// message sits (mask keeps the newest outputs, dedup keeps the first copy), so a decision made
/// for one copy of a text must not replay onto another copy elsewhere. Transcripts only grow, so
/// a message keeps its index from turn to turn; one that moved (an edited history) is past the
/// point where the provider's cache diverged anyway. So is the hash of everything before it
/// (`prefix`): another transcript under the same session key (a subagent) with the same text
/// at the same index is a different message, and gets none of this one's decisions.
fn freeze_key(component: &str, index: usize, prefix: u64, content: &str) -> String {
    format!(
        "frz:{component}:{index}:{prefix:016x}:{:032x}",
        tokens::content_key(content)
    )
}

/// Replays `name`'s earlier decisions onto `messages` and books what it finds in `cx`.
/// Returns the keys of the originals the replayed markers name (each checked or re-stashed, so
/// a replayed marker always resolves).
fn reapply_frozen(
    name: &str,
    freeze: Freeze,
    whole: bool,
    repairable: bool,
    messages: &mut Transcript<'_>,
    cx: &mut ApplyCx<'_>,
) -> Vec<StashKey> {
    let (store, session) = (cx.run.store.clone(), cx.run.session.clone());
    let mut keys = Vec::new();
    for index in 0..messages.len() {
        let message = &messages[index];
        let candidate = if whole {
            message.visible_texts().all(|t| !marker::contains_marker(t))
        } else {
            message.is_tool() && message.rewritable && !marker::contains_marker(&message.content)
        };
        if !candidate {
            continue;
        }
        let key = freeze_key(name, index, cx.prefix_at(index), &identity(message, whole));
        let Some(replacement) = store.get_frozen(&session, &key) else {
            cx.frozen.misses += 1;
            if store.was_lost(&session, &key) {
                cx.frozen.dropped += 1;
                if freeze == Freeze::Rederivable && repairable {
                    cx.repair.push(index);
                }
            }
            cx.fresh.push((index, key));
            continue;
        };
        // Replay also refreshes the originals its markers name: a marker that no longer
        // resolves would turn a lossless offload lossy.
        let mut named = Vec::new();
        let restored = marker::marker_ids(&replacement).all(|id| {
            if store.resolve(&session, id).is_none() {
                let original = std::iter::once(cx.wire_original(index))
                    .flatten()
                    .chain(message.visible_texts())
                    .find(|c| marker::stash_id(c) == id);
                if original.is_none_or(|o| store.stash(&session, id, o).is_err()) {
                    return false;
                }
            }
            named.push(StashKey { id: id.to_owned() });
            true
        });
        if !restored {
            // Forwarding the original flips the cached prefix once; forwarding a marker that
            // resolves to nothing would lose content. Losing nothing wins.
            cx.gate("freeze_original_unavailable");
            cx.frozen.dropped += 1;
            continue;
        }
        if whole {
            if !apply_frozen(messages.get_mut(index), &replacement) {
                cx.gate("freeze_unreadable");
                continue;
            }
        } else {
            messages.set_content(index, replacement.to_string());
        }
        cx.frozen.hits += 1;
        cx.reapplied.push(index);
        cx.reapplied_as.push((index, key, messages[index].clone()));
        keys.extend(named);
    }
    keys
}

/// An ordered list of built components.
#[derive(Debug, Default)]
pub struct Pipeline {
    stages: Vec<Stage>,
    /// `tools:`: outputs some components may not change (see `tools.rs`).
    tool_rules: crate::tools::ToolRules,
}

/// Content tokens of one message: every piece of text the model reads.
pub fn message_tokens(message: &Message) -> usize {
    message.visible_texts().map(tokens::count).sum()
}

/// [`message_tokens`] for a message whose content hash is known.
fn message_tokens_hashed(message: &Message, content_hash: u64) -> usize {
    tokens::count_hashed(&message.content, content_hash)
        + message
            .visible_texts()
            .skip(1)
            .map(tokens::count)
            .sum::<usize>()
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Pipeline {
    pub fn new(stages: Vec<Stage>) -> Pipeline {
        Pipeline {
            stages,
            tool_rules: crate::tools::ToolRules::default(),
        }
    }

    /// The pipeline with per-tool rules, enforced by each stage's guard.
    pub fn with_tool_rules(mut self, rules: crate::tools::ToolRules) -> Pipeline {
        self.tool_rules = rules;
        self
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

    /// Runs every component over `messages` in order, each behind its guard.
    /// Lets each offloader precompute what it will need for `messages` (see
    /// [`Offload::prepare`]). A panic in one is contained: preparing is only ever an
    /// optimization, and the turn that needs the result computes it itself.
    pub fn prepare(&self, messages: &[Message]) {
        for stage in &self.stages {
            if let Stage::Offload(offload) = stage {
                for message in messages {
                    let _ = catch_unwind(AssertUnwindSafe(|| offload.prepare(message)));
                }
            }
        }
    }

    pub fn run(&self, messages: &mut [Message], cx: &RunCx) -> RunReport {
        let originals = messages.to_vec();
        self.run_from(&originals, messages, cx)
    }

    /// [`Pipeline::run`] for a host that still holds the messages as parsed (`originals`,
    /// equal to `messages` on entry), which saves a copy of the transcript.
    pub fn run_from(
        &self,
        originals: &[Message],
        messages: &mut [Message],
        cx: &RunCx,
    ) -> RunReport {
        let started = cx.clock.now();
        debug_assert!(
            originals == messages,
            "run_from: messages differ from originals"
        );
        let mut state = self.begin_run(originals, messages);
        let mut report = RunReport {
            tokens_before: state.total,
            ..RunReport::default()
        };
        for stage in &self.stages {
            if !cx.offloads && stage.kind() == Kind::Offload {
                continue;
            }
            let component = run_stage(stage, cx, originals, messages, &mut state, &self.tool_rules);
            report.components.push(component);
        }
        report.tokens_after = state.total;
        report.duration_us = duration_us(cx.clock.now().saturating_sub(started));
        report
    }

    /// Hashes each original once (token counts, freeze keys and components share the hash)
    /// and counts every message's tokens.
    fn begin_run(&self, originals: &[Message], messages: &[Message]) -> RunState {
        let content: Vec<u64> = originals
            .iter()
            .map(|m| tokens::content_hash(&m.content))
            .collect();
        let counts: Vec<usize> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| match (originals.get(i), content.get(i)) {
                // The contract says equal; a caller that broke it gets a correct count, not the
                // cached count of another text.
                (Some(original), Some(&hash)) if original.content.len() == m.content.len() => {
                    message_tokens_hashed(m, hash)
                }
                _ => message_tokens(m),
            })
            .collect();
        let prefix = if self.stages.iter().any(|s| s.freeze() != Freeze::Stateless) {
            prefix_hashes(originals, &content)
        } else {
            Vec::new()
        };
        RunState {
            total: counts.iter().sum(),
            counts,
            touched: vec![false; messages.len()],
            hashes: RunHashes {
                content,
                prefix,
                dirty: vec![false; messages.len()],
            },
        }
    }
}

/// What a run carries from one stage to the next.
struct RunState {
    /// Tokens of each message as the next stage finds it.
    counts: Vec<usize>,
    total: usize,
    /// Messages the running stage has written to (reset after each stage).
    touched: Vec<bool>,
    hashes: RunHashes,
}

/// One stage behind its guard: run it, judge what it did, keep it or revert it.
fn run_stage(
    stage: &Stage,
    cx: &RunCx,
    originals: &[Message],
    messages: &mut [Message],
    state: &mut RunState,
    tool_rules: &crate::tools::ToolRules,
) -> ComponentReport {
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
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        invoke(stage, freeze, &mut transcript, &mut acx)
    }));
    let mut saved = std::mem::take(&mut transcript.saved);
    drop(transcript);
    saved.sort_unstable_by_key(|(i, _)| *i);
    for (i, _) in &saved {
        state.touched[*i] = false;
    }
    // Every message written to, replays included, whether the change is kept, reverted or
    // undone by the component itself: the shared hash of the original no longer vouches for any
    // of them (a revert puts replays back). Taken before the filter below, which drops a message
    // written back to its state before the stage.
    let written: Vec<usize> = saved.iter().map(|(i, _)| *i).collect();
    // Written to is not changed: keep only messages that differ from their saved copy.
    saved.retain(|(i, old)| messages[*i] != *old);
    if !tool_rules.is_empty() {
        let component = stage.name();
        hold_outputs(&mut saved, &mut acx, messages, |_, m| {
            tool_rules.applies(m.tool_name.as_deref()).allows(component)
        });
    }
    if stage.kind() == Kind::Offload && (!cx.lossless_tools.is_empty() || cx.cut_floor.is_some()) {
        let every = cx.lossless_tools.get(crate::tools::EVERY_TOOL);
        let counts = &state.counts;
        // Measured against the output as it reached this stage: a lossless repack before it
        // is not the cut's saving.
        let below_floor = |i: usize, m: &Message| {
            cx.cut_floor.is_some_and(|floor| {
                i >= floor.from && counts[i].saturating_sub(message_tokens(m)) < floor.min_saved
            })
        };
        let retried = |i: usize, m: &Message| {
            m.tool_name.as_ref().is_some_and(|tool| {
                let kind = crate::tools::output_kind(tool, m.tool_arguments.as_deref());
                cx.lossless_tools.get(&kind).is_some_and(|from| i >= *from)
            })
        };
        hold_outputs(&mut saved, &mut acx, messages, |i, m| {
            if m.is_tool() && every.is_some_and(|from| i >= *from) {
                Err("cost_guard")
            } else if retried(i, m) {
                Err("retried_after_compaction")
            } else if m.is_tool() && below_floor(i, m) {
                Err("below_cost_floor")
            } else {
                Ok(())
            }
        });
    }
    let new_counts: Vec<(usize, usize)> = saved
        .iter()
        .map(|(i, _)| (*i, message_tokens(&messages[*i])))
        .collect();
    let after = new_counts
        .iter()
        .fold(state.total, |acc, &(i, n)| acc - state.counts[i] + n);
    let revert = verdict(
        stage,
        freeze,
        &outcome,
        &saved,
        &acx,
        messages,
        after,
        state.total,
    );
    let mut component = ComponentReport {
        name: stage.name(),
        kind: stage.kind(),
        tokens_before: state.total,
        tokens_after: state.total,
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

/// Puts back every tool output the stage changed that `allowed` keeps from it (a `tools:`
/// rule, a tool the session learned to keep whole), counting each as a skip. A replay of a
/// frozen decision is left as it is: only new decisions are held to the rule.
fn hold_outputs(
    saved: &mut Vec<(usize, Message)>,
    acx: &mut ApplyCx<'_>,
    messages: &mut [Message],
    allowed: impl Fn(usize, &Message) -> Result<(), &'static str>,
) {
    let mut held_calls: Vec<String> = Vec::new();
    let mut held: Vec<usize> = Vec::new();
    for (i, _) in saved.iter() {
        let message = &messages[*i];
        if !message.is_tool() || !is_new(acx, messages, *i) {
            continue;
        }
        if let Err(reason) = allowed(*i, message) {
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
                messages[*i] = replayed.clone();
                messages[*i] != *old
            }
            None => {
                messages[*i] = old.clone();
                false
            }
        }
    });
}

/// Runs the component: a frozen one first replays its earlier decisions.
fn invoke(
    stage: &Stage,
    freeze: Freeze,
    transcript: &mut Transcript<'_>,
    acx: &mut ApplyCx<'_>,
) -> Result<Vec<StashKey>, ComponentError> {
    match stage {
        Stage::Reformat(c) if freeze == Freeze::Stateless => {
            c.reformat(transcript, acx).map(|()| Vec::new())
        }
        Stage::Reformat(c) => {
            // A replayed repacking names no stash; its keys are not needed.
            reapply_frozen(c.name(), freeze, false, true, transcript, acx);
            c.reformat(transcript, acx).map(|()| Vec::new())
        }
        Stage::Offload(c) if freeze == Freeze::Stateless => c.offload(transcript, acx),
        Stage::Offload(c) => {
            let mut keys = reapply_frozen(
                c.name(),
                freeze,
                c.whole_messages(),
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
fn is_new(acx: &ApplyCx<'_>, messages: &[Message], i: usize) -> bool {
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
    outcome: &std::thread::Result<Result<Vec<StashKey>, ComponentError>>,
    saved: &[(usize, Message)],
    acx: &ApplyCx<'_>,
    messages: &[Message],
    after: usize,
    total: usize,
) -> Option<Revert> {
    let in_cached_prefix = freeze != Freeze::Stateless
        && saved
            .iter()
            .any(|(i, _)| is_new(acx, messages, *i) && !acx.may_mutate(*i));
    match outcome {
        Err(panic) => Some(Revert::Panicked(panic_message(panic.as_ref()))),
        Ok(Err(err)) => Some(Revert::Failed(err.0.clone())),
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
fn revert_stage(
    why: Revert,
    saved: Vec<(usize, Message)>,
    reapplied: Vec<(usize, String, Message)>,
    messages: &mut [Message],
    state: &mut RunState,
    component: &mut ComponentReport,
) {
    for (i, old) in saved {
        messages[i] = old;
    }
    for (i, _, reapplied) in reapplied {
        let n = message_tokens(&reapplied);
        component.savings.push(MessageSaving {
            index: i,
            content_key: tokens::content_hash(&messages[i].content),
            saved_tokens: state.counts[i].saturating_sub(n),
        });
        state.total = state.total - state.counts[i] + n;
        state.counts[i] = n;
        messages[i] = reapplied;
        component.changed.push(i);
    }
    component.tokens_after = state.total;
    component.saved_tokens = component.tokens_before.saturating_sub(state.total);
    component.acted = component.saved_tokens > 0;
    component.mutated = !component.changed.is_empty();
    component.reverted = Some(why);
}

/// Records each new decision of a frozen stage in the store's replay namespace, so every later
/// turn forwards the same bytes for the message.
fn record_freezes(
    stage: &Stage,
    cx: &RunCx,
    saved: &[(usize, Message)],
    acx: &ApplyCx<'_>,
    messages: &[Message],
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
    saved: &[(usize, Message)],
    new_counts: &[(usize, usize)],
    after: usize,
    state: &mut RunState,
    component: &mut ComponentReport,
) {
    for (&(i, n), (_, old)) in new_counts.iter().zip(saved) {
        component.savings.push(MessageSaving {
            index: i,
            content_key: tokens::content_hash(&old.content),
            saved_tokens: state.counts[i].saturating_sub(n),
        });
        state.counts[i] = n;
    }
    component.tokens_after = after;
    component.saved_tokens = state.total - after;
    component.acted = after < state.total;
    component.mutated = !saved.is_empty();
    component.changed = saved.iter().map(|(i, _)| *i).collect();
    component.stashed = keys.into_iter().map(|k| k.id).collect();
    state.total = after;
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
