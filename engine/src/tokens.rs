//! Token counting with the o200k_base BPE, memoized by content hash.
//!
//! Counts are taken on message text (what the model reads), never on the JSON envelope, so a
//! component that adds a `cache_control` key never looks worse. Agents re-send their whole
//! transcript every turn, so after the first turn nearly every count is a memo hit: the memo is
//! what keeps the pipeline within its latency budget on large bodies (see `benches/engine.rs`).

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::OnceLock;

use parking_lot::Mutex;

/// Strings shorter than this are counted directly: hashing them costs about as much.
const MEMO_MIN_BYTES: usize = 24;
/// The memo is cleared when it grows past this many entries, bounding its memory to a few MiB.
const MEMO_MAX_ENTRIES: usize = 200_000;

type Memo = HashMap<u64, u32, BuildHasherDefault<IdentityHasher>>;

fn memo() -> &'static Mutex<Memo> {
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    MEMO.get_or_init(|| Mutex::new(Memo::default()))
}

/// Counts the o200k_base tokens of `text`.
pub fn count(text: &str) -> usize {
    if text.len() < MEMO_MIN_BYTES {
        return count_uncached(text);
    }
    let key = content_hash(text);
    if let Some(&hit) = memo().lock().get(&key) {
        return hit as usize;
    }
    let n = count_uncached(text);
    let mut memo = memo().lock();
    if memo.len() >= MEMO_MAX_ENTRIES {
        memo.clear();
    }
    memo.insert(key, u32::try_from(n).unwrap_or(u32::MAX));
    n
}

/// Empties the memo. For benches that measure a first sight of every message.
pub fn clear_memo() {
    memo().lock().clear();
}

/// Counts without touching the memo.
pub fn count_uncached(text: &str) -> usize {
    if text.is_empty() {
        return 0;
    }
    bpe_openai::o200k_base().count(text)
}

/// A stable 64-bit hash of `text` (SipHash with fixed keys: the same in every process).
pub fn content_hash(text: &str) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(text)
}

/// The memo keys are already uniform hashes; hashing them again would be wasted work.
#[derive(Default)]
struct IdentityHasher(u64);

impl std::hash::Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_match_o200k_and_memo_is_transparent() {
        assert_eq!(count(""), 0);
        assert_eq!(count("hello world"), 2);
        let long = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let first = count(&long);
        assert_eq!(first, count_uncached(&long));
        assert_eq!(count(&long), first);
        assert_eq!(content_hash(&long), content_hash(&long.clone()));
    }
}
