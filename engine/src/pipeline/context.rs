//! What a run knows ([`RunCx`]: the dialect, the session, the store, the cache boundary) and
//! what one component gets while it runs ([`ApplyCx`]: stashing, gates, the cut floor).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::{Counts, FrozenCounts};
use crate::clock::Clock;
use crate::gate::{self, Gate};
use crate::marker;
use crate::message::Message;
use crate::store::Store;
use crate::store::StoreError;
use crate::tokens;
use crate::wire::Dialect;

/// What a run hashes once and every component reuses.
pub(super) struct RunHashes {
    /// `tokens::content_hash` of each original content.
    pub(super) content: Vec<u64>,
    /// Whether each original content carries a marker.
    pub(super) marked: Vec<bool>,
    /// See [`ApplyCx::prefix`]; empty when no component is frozen.
    pub(super) prefix: Vec<u64>,
    /// Messages an earlier stage wrote to (kept, reverted or replayed), so their `content` hash
    /// may be stale.
    pub(super) dirty: Vec<bool>,
}

/// Proof that an original was stashed: only [`ApplyCx::stash`] makes one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StashKey {
    pub(super) id: String,
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
    /// Markers whose outputs the session put back in place (see `modes::restore`): an
    /// offloader's cut that leaves one of them is undone, a frozen decision's replay too, so
    /// the original stays where it was on every turn from the one that restored it. By
    /// marker, not by call id: agents reuse call ids, and a marker names its original.
    pub restored: Arc<std::collections::BTreeSet<String>>,
    /// Counts no decision reads are left for [`RunReport::count_deferred`], which the host calls once
    /// the request has gone upstream (see `pipeline::counts`); until then the report's totals
    /// are short. False: the run counts everything first and its report is complete.
    pub defer_counts: bool,
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
            restored: Arc::default(),
            defer_counts: false,
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

    /// Leaves what no decision counts for [`RunReport::count_deferred`] (see [`RunCx::defer_counts`]).
    #[must_use]
    pub fn with_deferred_counts(mut self, defer: bool) -> RunCx {
        self.defer_counts = defer;
        self
    }

    /// The markers whose outputs this session put back in place.
    #[must_use]
    pub fn with_restored(mut self, restored: Arc<std::collections::BTreeSet<String>>) -> RunCx {
        self.restored = restored;
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
    pub(super) run: &'a RunCx,
    /// The messages as the pipeline received them (the wire originals).
    pub(super) initial: &'a [Message],
    /// Tokens of each message as this component found it, an original's counted when first
    /// read.
    pub(super) counts: &'a Counts,
    pub(super) gates: BTreeMap<&'static str, u32>,
    pub(super) stashed: usize,
    /// The running component may act at depth on a cold turn.
    pub(super) cold_cache: bool,
    /// Indices whose freeze was lost and may be re-derived at any depth, ascending.
    pub(super) repair: Vec<usize>,
    /// Indices replayed from a freeze before the component ran, ascending.
    pub(super) reapplied: Vec<usize>,
    /// Indices a late model result may change inside the cached prefix, ascending.
    pub(super) late: Vec<usize>,
    /// Per replayed index: its freeze key and the message as replayed, so a revert keeps the
    /// replay and a further change by the component is checked and recorded like a new one.
    pub(super) reapplied_as: Vec<(usize, String, Message)>,
    /// Freeze keys of the candidates replay looked up and did not find, by index.
    pub(super) fresh: Vec<(usize, String)>,
    pub(super) frozen: FrozenCounts,
    /// Per index, a hash of every wire-original message before it (empty when no component is
    /// frozen): part of a freeze key, so a decision never lands on another transcript that
    /// happens to hold the same text at the same index.
    pub(super) prefix: &'a [u64],
    /// `tokens::content_hash` of each wire-original content, computed once per run.
    pub(super) hashes: &'a [u64],
    /// Whether each wire-original content carries a marker, computed once per body.
    pub(super) marked: &'a [bool],
    /// Whether an earlier component changed the message (its hash in `hashes` is then stale).
    pub(super) dirty: &'a [bool],
    /// Messages below this are carried over: the pipeline put in what this stage did to them last
    /// turn, and the component decides only the rest (see `carry_over`).
    pub(super) carried_over: usize,
    /// The last turn's records of this stage, for [`ApplyCx::noted`].
    pub(super) carried: Option<&'a crate::carry::StageCarry>,
    /// The message the component is deciding, which [`ApplyCx::gate`] and
    /// [`ApplyCx::stash_as`] count for (see [`ApplyCx::at`]).
    pub(super) cursor: usize,
    /// What the component did, by message, for the next turn's carry; `None` when no carry is
    /// being made.
    pub(super) log: Option<StageLog>,
}

/// What one stage did, by message, as it ran (the raw form of a `carry::StageCarry`).
#[derive(Debug, Default)]
pub(super) struct StageLog {
    pub(super) gates: Vec<(usize, &'static str)>,
    pub(super) stashed: Vec<(usize, String)>,
    pub(super) noted: Vec<usize>,
}

/// [`ApplyCx::cursor`] before the component names a message: what is counted then belongs to
/// none, and the run makes no carry.
pub(super) const NO_MESSAGE: usize = usize::MAX;

impl<'a> ApplyCx<'a> {
    pub(super) fn new(
        run: &'a RunCx,
        initial: &'a [Message],
        counts: &'a Counts,
        cold_cache: bool,
        hashes: &'a RunHashes,
    ) -> ApplyCx<'a> {
        ApplyCx {
            run,
            initial,
            counts,
            prefix: &hashes.prefix,
            hashes: &hashes.content,
            marked: &hashes.marked,
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
            carried_over: 0,
            carried: None,
            cursor: NO_MESSAGE,
            log: None,
        }
    }

    /// Whether message `index` is carried over: the pipeline already put in what this component
    /// did to it last turn (its output, gates and stashes), so the component must not decide
    /// it again, and reads it only to rebuild its look-back (see [`ApplyCx::noted`]).
    pub fn carried_over(&self, index: usize) -> bool {
        index < self.carried_over
    }

    /// Names the message the component is deciding now: the gates it counts and the originals
    /// it stashes until the next call are that message's. Every component that carries over calls
    /// it (through the shared candidate helpers) before it counts anything for a message.
    pub fn at(&mut self, index: usize) {
        self.cursor = index;
    }

    /// Notes message `index` for the component's own look-back on later turns (a base `delta`
    /// may diff against, an output `dedup` saw first): [`ApplyCx::noted`] answers it when the
    /// message is carried over.
    pub fn note(&mut self, index: usize) {
        if let Some(log) = &mut self.log {
            log.noted.push(index);
        }
    }

    /// Whether carried-over message `index` was noted when the component decided it.
    pub fn noted(&self, index: usize) -> bool {
        self.carried.is_some_and(|carried| carried.noted(index))
    }

    /// Tokens of message `index` as this component found it (every text the model reads; for a
    /// tool output, its content). Counted once per run, when first read, and kept current
    /// between components, so a gate costs a lookup, not another pass over the text.
    pub fn tokens(&self, index: usize) -> usize {
        match (self.initial.get(index), self.hashes.get(index)) {
            (Some(original), Some(&hash)) => self.counts.get(index, original, hash),
            _ => 0,
        }
    }

    /// Whether message `index` counts fewer than `limit` tokens as this component found it:
    /// `tokens(index) < limit`, without counting a long output to its end when no one has (a
    /// `min_tokens` gate; see `pipeline::counts`).
    pub fn tokens_below(&self, index: usize, limit: usize) -> bool {
        match (self.initial.get(index), self.hashes.get(index)) {
            (Some(original), Some(&hash)) => self.counts.below(index, original, hash, limit),
            _ => 0 < limit,
        }
    }

    /// `tokens::content_hash(content)` for `content`, the content of message `index` as this
    /// component received it: looked up when no earlier component changed the message (every
    /// message is hashed once per run, for its token count), computed otherwise. Components key
    /// their per-output work by it instead of hashing megabytes again.
    pub fn content_hash(&self, index: usize, content: &str) -> u64 {
        match self.hashes.get(index) {
            Some(&hash) if self.unchanged(index, content) => hash,
            _ => tokens::content_hash(content),
        }
    }

    /// `marker::contains_marker(content)` for `content`, the content of message `index` as
    /// this component received it: looked up, like [`ApplyCx::content_hash`], when no earlier
    /// component changed the message. Every offload asks it of every output on every turn.
    pub fn has_marker(&self, index: usize, content: &str) -> bool {
        match self.marked.get(index) {
            Some(&marked) if self.unchanged(index, content) => marked,
            _ => marker::contains_marker(content),
        }
    }

    /// Whether `content`, message `index` as this component received it, is still the wire
    /// original, so what the run computed of the original holds for it.
    fn unchanged(&self, index: usize, content: &str) -> bool {
        !self.dirty.get(index).copied().unwrap_or(true)
            && self
                .initial
                .get(index)
                .is_some_and(|m| m.content.len() == content.len())
            // A replay of this stage's own frozen decision is not in `dirty` yet.
            && !self.reapplied_as.iter().any(|(j, _, _)| *j == index)
    }

    /// What the model would read at `index` had nothing run: the text to stash when an
    /// offloader replaces content that only lossless reformats touched, so a marker always
    /// resolves to the exact bytes the agent sent, not to our repacking of them.
    pub fn wire_original(&self, index: usize) -> Option<&'a str> {
        let marked = |c: &str| match self.marked.get(index) {
            Some(&marked) => marked,
            None => marker::contains_marker(c),
        };
        self.initial
            .get(index)
            .map(|m| m.content.as_str())
            .filter(|c| !marked(c))
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
        self.gate(gate::MODEL_PENDING);
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
    pub fn gate(&mut self, gate: Gate) {
        *self.gates.entry(gate.name).or_insert(0) += 1;
        if let Some(log) = &mut self.log {
            log.gates.push((self.cursor, gate.name));
        }
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
        if let Some(log) = &mut self.log {
            log.stashed.push((self.cursor, id.clone()));
        }
        Ok(StashKey { id })
    }

    /// The hash of everything before the message at `index` (0 past the end).
    pub(super) fn prefix_at(&self, index: usize) -> u64 {
        self.prefix.get(index).copied().unwrap_or(0)
    }
}
