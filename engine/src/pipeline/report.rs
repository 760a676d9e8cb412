//! What a run reports: per component (acted, reverted and why, frozen decisions) and per
//! message (what each saved).

use std::collections::BTreeMap;

/// A component's kind: it reformats a message, or offloads (cuts) it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Reformat,
    Offload,
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
    /// Counts the run left for [`RunReport::count_deferred`] (a run that defers them,
    /// [`super::RunCx::defer_counts`]): until then every total above is short by the same
    /// amount, and every difference is exact.
    #[serde(skip)]
    pub pending: Option<super::counts::Pending>,
}

impl RunReport {
    /// Counts what the run left uncounted and adds it to every total: the report is then the
    /// one a run that counted everything first makes. A host that asked the run to defer calls
    /// it once the request has gone upstream; calling it again does nothing.
    pub fn count_deferred(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        // Fail-open like the run it completes: the request has gone, and a count that panics
        // leaves the totals short rather than failing the reply.
        let counted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pending.count()));
        let missing = counted.unwrap_or(0);
        if missing == 0 {
            return;
        }
        self.tokens_before += missing;
        self.tokens_after += missing;
        for c in &mut self.components {
            c.tokens_before += missing;
            c.tokens_after += missing;
        }
    }

    /// Whether every total is complete ([`RunReport::count_deferred`]).
    pub fn is_counted(&self) -> bool {
        self.pending.is_none()
    }

    pub fn saved_tokens(&self) -> usize {
        self.tokens_before.saturating_sub(self.tokens_after)
    }

    /// Every message some component changed (kept or replayed), ascending, once each: the
    /// only messages the run can have forwarded differently from how they came.
    pub fn changed(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self
            .components
            .iter()
            .flat_map(|c| c.changed.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
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
