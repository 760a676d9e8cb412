//! `PureMemo`: remembers what a pure text-to-text reduction made of each output.
//!
//! Agents re-send every earlier tool output on every turn, and components such as `linecap` and
//! `textclean` are pure functions of one output's text: on a long session almost all of their
//! work is recomputing answers they already gave. The memo keeps those answers, bounded in
//! memory, per component instance (so per pipeline, shared by every session that uses it:
//! answers depend on the text and the component's config only, never on a session). Write-back
//! keeps one too, for the JSON literals of the contents it splices (`wire::write_back`): a leaf
//! of the crate, so both reach it without `wire` depending on `components`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::tokens;

/// Bound on remembered "nothing to do" answers (8 bytes each); the set is emptied when full.
const UNCHANGED_MAX: usize = 1 << 16;
/// Bound on the bytes of remembered results; emptied when a new one would pass it.
const REDUCED_BYTES: usize = 16 << 20;

#[derive(Default)]
pub(crate) struct PureMemo {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Texts the reduction left alone, by content hash folded with the length. A 64-bit
    /// collision here can only skip a reduction, never apply a wrong one.
    unchanged: HashSet<u64, tokens::IdentityBuild>,
    /// Results by the same key, each with the text it was computed from. The memo is shared by
    /// every session of a pipeline and the hash is not collision resistant, so a hit counts only
    /// when the text is byte-equal (one `memcmp`): a crafted collision can never hand one
    /// session another session's output.
    reduced: HashMap<u64, (Arc<str>, Arc<str>), tokens::IdentityBuild>,
    /// Bytes held in `reduced`, texts and results.
    reduced_bytes: usize,
}

impl PureMemo {
    /// `reduce(text)`, remembered. `hash` is `tokens::content_hash(text)`, which the pipeline
    /// already has for every message ([`crate::pipeline::ApplyCx::content_hash`]); `reduce`
    /// must depend on `text` alone, and returns `None` when it leaves the text as it is.
    pub(crate) fn reduce(
        &self,
        text: &str,
        hash: u64,
        reduce: impl FnOnce(&str) -> Option<String>,
    ) -> Option<Arc<str>> {
        let seen = hash ^ (text.len() as u64).rotate_left(32);
        if self.inner.lock().unchanged.contains(&seen) {
            return None;
        }
        // Compared outside the lock: the text can be megabytes and every session shares it.
        let remembered = self.inner.lock().reduced.get(&seen).cloned();
        if let Some((original, reduced)) = remembered
            && *original == *text
        {
            return Some(reduced);
        }
        let Some(reduced) = reduce(text) else {
            let mut inner = self.inner.lock();
            if inner.unchanged.len() >= UNCHANGED_MAX {
                inner.unchanged.clear();
            }
            inner.unchanged.insert(seen);
            return None;
        };
        let reduced: Arc<str> = reduced.into();
        let size = text.len() + reduced.len();
        // One entry bigger than a quarter of the budget would evict everything else.
        if size <= REDUCED_BYTES / 4 {
            let mut inner = self.inner.lock();
            if inner.reduced_bytes + size > REDUCED_BYTES {
                inner.reduced.clear();
                inner.reduced_bytes = 0;
            }
            inner.reduced_bytes += size;
            let entry = (Arc::from(text), reduced.clone());
            if let Some((old, old_reduced)) = inner.reduced.insert(seen, entry) {
                inner.reduced_bytes -= old.len() + old_reduced.len();
            }
        }
        Some(reduced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_come_back_without_recomputing_and_stay_bounded() {
        let memo = PureMemo::default();
        let calls = std::cell::Cell::new(0);
        let upper = |text: &str| {
            calls.set(calls.get() + 1);
            (text.contains('x')).then(|| text.to_uppercase())
        };
        for _ in 0..3 {
            let reduced = memo.reduce("axb", tokens::content_hash("axb"), upper);
            assert_eq!(reduced.as_deref(), Some("AXB"));
            assert_eq!(memo.reduce("ab", tokens::content_hash("ab"), upper), None);
        }
        assert_eq!(calls.get(), 2, "each text reduced once");

        let big = "x".repeat(REDUCED_BYTES / 10);
        for i in 0..12 {
            let text = format!("{i}{big}");
            let reduced = memo.reduce(&text, tokens::content_hash(&text), |t| Some(t.to_owned()));
            assert_eq!(reduced.as_deref(), Some(text.as_str()));
        }
        assert!(memo.inner.lock().reduced_bytes <= REDUCED_BYTES);
    }

    #[test]
    fn a_colliding_hash_never_returns_another_texts_result() {
        let memo = PureMemo::default();
        let secret = "session A: token=abc123";
        let probe = "session B: crafted_wxyz";
        assert_eq!(secret.len(), probe.len());
        let forged = 42; // both texts claim the same hash, as a crafted collision would
        let echo = |t: &str| Some(t.to_owned());
        assert_eq!(memo.reduce(secret, forged, echo).as_deref(), Some(secret));
        assert_eq!(memo.reduce(probe, forged, echo).as_deref(), Some(probe));
        assert_eq!(memo.reduce(secret, forged, echo).as_deref(), Some(secret));
    }
}
