//! Token counting with the o200k_base BPE, memoized by content hash.
//!
//! Counts are taken on message text (what the model reads), never on the JSON envelope, so a
//! component that adds a `cache_control` key never looks worse. Agents re-send their whole
//! transcript every turn, so after the first turn nearly every count is a memo hit: the memo is
//! what keeps the pipeline within its latency budget on large bodies (see `benches/engine.rs`).

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::OnceLock;

use parking_lot::Mutex;

mod o200k;
mod split;

pub use o200k::tokenizer;

/// The memo is cleared when it grows past this many entries, bounding its memory to a few MiB.
const MEMO_MAX_ENTRIES: usize = 200_000;

type Memo = HashMap<u64, u32, IdentityBuild>;

/// A hasher for keys that are already uniform hashes ([`content_hash`] values).
pub(crate) type IdentityBuild = BuildHasherDefault<IdentityHasher>;

fn memo() -> &'static Mutex<Memo> {
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    MEMO.get_or_init(|| Mutex::new(Memo::default()))
}

/// Counts the o200k_base tokens of `text`, memoized by content hash. Every non-empty text goes
/// through the memo, even a short one: a direct count sets up a BPE encoder (a visible cost for
/// the many short call arguments and ids), which a hash does not.
pub fn count(text: &str) -> usize {
    count_hashed(text, content_hash(text))
}

/// [`count`] for a caller that already has `content_hash(text)`, so the text is not hashed
/// again (the pipeline hashes each message once per run and shares it).
pub fn count_hashed(text: &str, key: u64) -> usize {
    if text.is_empty() {
        return 0;
    }
    if let Some(&hit) = memo().lock().get(&key) {
        return hit as usize;
    }
    let n = count_uncached(text);
    remember(key, n);
    n
}

fn remember(key: u64, n: usize) {
    let mut memo = memo().lock();
    if memo.len() >= MEMO_MAX_ENTRIES {
        memo.clear();
    }
    memo.insert(key, u32::try_from(n).unwrap_or(u32::MAX));
}

/// How far a count that stopped at a limit got ([`count_until`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Partial {
    /// The end of the last piece counted.
    pub offset: usize,
    /// The tokens before it.
    pub tokens: usize,
}

/// Counts `text` on from where `partial` stopped: `Ok` with the whole count (memoized under
/// `key`, its [`content_hash`]) when the text ends before the count reaches `limit`, `Err`
/// with how far it got when it reaches it. A gate under a component's `min_tokens` so reads no
/// further into a long output, and the next, higher gate goes on from there: a text is cut
/// into pieces left to right, each from the text after the one before alone, and a count is
/// the sum of its pieces', so a count resumed at a piece's end is the count in one go.
pub fn count_until(text: &str, key: u64, partial: Partial, limit: usize) -> Result<usize, Partial> {
    if partial.offset == 0
        && let Some(&hit) = memo().lock().get(&key)
    {
        return Ok(hit as usize);
    }
    let counted = count_from(text, partial, limit);
    if let Ok(n) = counted {
        remember(key, n);
    }
    counted
}

/// [`count_until`] without the memo: the pieces from `partial` on, counted until `limit`.
fn count_from(text: &str, partial: Partial, limit: usize) -> Result<usize, Partial> {
    let bpe = &tokenizer().bpe;
    let count = |pieces: &mut PieceCounts| {
        let mut split = split::pieces_from(text, partial.offset);
        let mut n = partial.tokens;
        while n < limit {
            let Some(piece) = split.next() else {
                return Ok(n);
            };
            n += pieces.count(piece, |p| bpe.count(p.as_bytes()));
        }
        Err(Partial {
            offset: split.at(),
            tokens: n,
        })
    };
    with_piece_counts(count)
}

/// Inflates the tokenizer's tables now, and builds the set of its short tokens. Both are made on
/// first use, which takes about 170 ms on the machine in `docs/performance.md` (the set, 14 ms
/// more; `benches/tables.rs`): a server calls this before it listens, so that cost is not added
/// to the first request a client sends (it was the slowest turn of every run of
/// `benches/load.sh turns`).
pub fn warm_up() {
    count_uncached("warm up");
    single_tokens();
}

/// Empties the memo and the piece counts (the shared table's, and this thread's). For benches
/// that measure a first sight of every message in a process that has counted nothing before.
pub fn clear_memo() {
    memo().lock().clear();
    shared_pieces().lock().clear();
    PIECES.with_borrow_mut(PieceCounts::clear);
}

/// Counts without touching the memo.
///
/// The same count as `bpe_openai`'s `Tokenizer::count` (o200k does not normalize, so a text is
/// its pre-tokenizer's pieces, each encoded alone), with two differences in cost. The pieces come
/// from [`split`], which walks ASCII by hand where the crate runs a regex search per piece.
/// And that function sets up a fresh encoder, two heap allocations, for every piece, where a
/// piece is mostly one word: short pieces repeat endlessly in tool output (`self`, ` =`,
/// `\n    `), so their counts are remembered, and a piece seen before costs a lookup. This is
/// what a long output pays the first turn it appears, on the request path (issues #22 and #34).
///
/// The remembered counts are one table for the process, taken for a whole text: a connection
/// moves between the runtime's threads, and a table per thread learned every word once per
/// thread. A thread that finds the table taken counts with a table of its own instead of
/// waiting for a long text to be counted.
pub fn count_uncached(text: &str) -> usize {
    if text.is_empty() {
        return 0;
    }
    match count_from(text, Partial::default(), usize::MAX) {
        Ok(n) | Err(Partial { tokens: n, .. }) => n,
    }
}

/// Runs `f` with the process's piece counts, or, when another thread holds them, this
/// thread's own.
fn with_piece_counts<T>(f: impl FnOnce(&mut PieceCounts) -> T) -> T {
    match shared_pieces().try_lock() {
        Some(mut pieces) => f(&mut pieces),
        None => PIECES.with_borrow_mut(f),
    }
}

fn shared_pieces() -> &'static Mutex<PieceCounts> {
    static SHARED: OnceLock<Mutex<PieceCounts>> = OnceLock::new();
    SHARED.get_or_init(|| Mutex::new(PieceCounts::default()))
}

thread_local! {
    static PIECES: std::cell::RefCell<PieceCounts> = std::cell::RefCell::new(PieceCounts::default());
}

/// Token counts of short pre-tokenizer pieces. A piece of up to [`PACKED_MAX`] bytes is its
/// own key, packed with its length into two words, in a two-way table where a new piece
/// displaces the one put in first (a hit does not refresh); a longer one is keyed by
/// [`content_hash`] and checked against the piece itself. Either way a collision costs a count,
/// never a wrong one.
struct PieceCounts {
    packed: Box<[Packed]>,
    hashed: HashMap<u64, (Box<str>, u32), IdentityBuild>,
}

/// Pieces this long or shorter are packed: 15 bytes and the length fill 16.
const PACKED_MAX: usize = 15;
/// Longer pieces, up to `PieceCounts::MAX_PIECE_BYTES`, are keyed by their hash.
const HASHED_MIN: usize = PACKED_MAX + 1;
/// 2^16 entries of 24 bytes: 1.5 MiB a table, touched as it fills.
const PACKED_BITS: u32 = 16;

#[derive(Clone, Copy, Default)]
struct Packed {
    key: [u64; 2],
    count: u32,
}

impl Default for PieceCounts {
    fn default() -> PieceCounts {
        PieceCounts {
            packed: vec![Packed::default(); 1 << PACKED_BITS].into_boxed_slice(),
            hashed: HashMap::default(),
        }
    }
}

impl PieceCounts {
    /// Pieces longer than this are counted directly: they are rare, and remembering them would
    /// fill the map with one-off strings.
    const MAX_PIECE_BYTES: usize = 24;
    /// The map of longer pieces is cleared past this many: 7/8 of 8,192 buckets.
    const MAX_HASHED: usize = 7_168;

    fn count(&mut self, piece: &str, encode: impl FnOnce(&str) -> usize) -> usize {
        match piece.len() {
            0 => 0,
            // Each of the 256 bytes is a token of a byte-level BPE (and a one-byte piece is ASCII).
            1 => 1,
            2..=PACKED_MAX => self.count_packed(piece, encode),
            HASHED_MIN..=Self::MAX_PIECE_BYTES => self.count_hashed(piece, encode),
            _ => encode(piece),
        }
    }

    fn count_packed(&mut self, piece: &str, encode: impl FnOnce(&str) -> usize) -> usize {
        let key = pack(piece.as_bytes());
        let words = [key as u64, (key >> 64) as u64];
        let way = (mix(key) >> (64 - PACKED_BITS)) as usize & !1;
        let pair = &mut self.packed[way..way + 2];
        if let Some(hit) = pair.iter().find(|entry| entry.key == words) {
            return hit.count as usize;
        }
        let n = if single_tokens().contains(&key) {
            1
        } else {
            encode(piece)
        };
        pair[1] = pair[0];
        pair[0] = Packed {
            key: words,
            count: u32::try_from(n).unwrap_or(u32::MAX),
        };
        n
    }

    fn count_hashed(&mut self, piece: &str, encode: impl FnOnce(&str) -> usize) -> usize {
        let key = content_hash(piece);
        if let Some((known, n)) = self.hashed.get(&key)
            && **known == *piece
        {
            return *n as usize;
        }
        let n = encode(piece);
        if self.hashed.len() >= Self::MAX_HASHED {
            self.hashed.clear();
        }
        self.hashed
            .insert(key, (piece.into(), u32::try_from(n).unwrap_or(u32::MAX)));
        n
    }

    fn clear(&mut self) {
        self.packed.fill(Packed::default());
        self.hashed.clear();
    }
}

/// `bytes` (2 to [`PACKED_MAX`] of them) and their length in one key. The length makes the
/// key of a piece with trailing NULs differ from the shorter one's, and no key is the empty
/// entry's.
fn pack(bytes: &[u8]) -> u128 {
    let mut packed = [0u8; 16];
    packed[..bytes.len()].copy_from_slice(bytes);
    packed[15] = bytes.len() as u8;
    u128::from_le_bytes(packed)
}

/// A packed key folded to a word whose high bits (the table's index) and low bits (the
/// hash set's) both depend on every byte.
fn mix(key: u128) -> u64 {
    let folded = ((key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (key >> 64) as u64)
        .wrapping_mul(0x517c_c1b7_2722_0a95);
    folded ^ (folded >> 32)
}

/// o200k's tokens of 2 to [`PACKED_MAX`] bytes, packed. A piece that is one of them is one
/// token: `bpe` builds its dictionary only of tokens that encode to themselves. A lookup
/// answers it where the encoder took 0.6 µs, and three new pieces in five of the public
/// corpus's are single tokens (`docs/performance.md`). 194,250 keys, about 4 MiB,
/// built by [`warm_up`].
fn single_tokens() -> &'static HashSet<u128, BuildHasherDefault<PackedHasher>> {
    static SINGLE: OnceLock<HashSet<u128, BuildHasherDefault<PackedHasher>>> = OnceLock::new();
    SINGLE.get_or_init(|| {
        let bpe = &tokenizer().bpe;
        (0..bpe.num_tokens())
            .filter_map(|id| u32::try_from(id).ok())
            .map(|id| bpe.token_bytes(id))
            .filter(|bytes| (2..=PACKED_MAX).contains(&bytes.len()))
            .map(pack)
            .collect()
    })
}

/// Hashes a packed key with [`mix`].
#[derive(Default)]
struct PackedHasher(u64);

impl std::hash::Hasher for PackedHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u128(&mut self, key: u128) {
        self.0 = mix(key);
    }
}

/// A stable 64-bit hash of `text`, the same in every process (no random seed). Nothing
/// persists it, so a version may change it; values of texts under 64 bytes are pinned by a test.
///
/// A word-at-a-time multiply-rotate hash (the Fx construction), folded with the length. It is
/// not collision resistant against an adversary, and need not be: the memo only caches counts,
/// and a forged collision could at worst mis-state a token count, never change a byte forwarded.
/// It runs at several GB/s, where SipHash cost a millisecond per MB per pipeline stage.
pub fn content_hash(text: &str) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let bytes = text.as_bytes();
    let [mut hash] = fx(bytes, [(bytes.len() as u64).wrapping_mul(K)], [K], [5]);
    // Final avalanche so short inputs spread over the whole word.
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^ (hash >> 33)
}

/// A stable 128-bit key of `text`: two independent [`content_hash`] constructions. Freeze
/// decisions are looked up by it, so a collision would replay one message's replacement onto
/// another: 128 bits puts that out of reach for any real transcript, at the same GB/s speed
/// (SHA-256 cost 3 ms per MB per frozen component per turn).
pub fn content_key(text: &str) -> u128 {
    bytes_key(text.as_bytes())
}

/// [`content_key`] of raw bytes, for a slice that need not fall on character boundaries (a
/// span of one body taken at the offsets of another).
pub fn bytes_key(bytes: &[u8]) -> u128 {
    const K1: u64 = 0x517c_c1b7_2722_0a95;
    const K2: u64 = 0x9e37_79b9_7f4a_7c15;
    let len = bytes.len() as u64;
    let [a, b] = fx(
        bytes,
        [
            len.wrapping_mul(K1),
            len.wrapping_mul(K2) ^ 0x2545_f491_4f6c_dd1d,
        ],
        [K1, K2],
        [5, 23],
    );
    (u128::from(avalanche(a)) << 64) | u128::from(avalanche(b))
}

/// A 128-bit key of `bytes` for what never leaves the process: the prefix finder's keys of a
/// session's last body ([`crate::wire::prefix`]), the parse memo's opening key, and the keys of
/// the stash-id and output-kind memos. xxh3-128 reads at about twice [`bytes_key`]'s speed (29 against 14.5 GB/s on this
/// machine), and a resumed turn proves every byte it shares with the last turn by this key. A
/// key a store keeps (freeze records, summaries) stays [`bytes_key`]: changing it would re-key
/// every store.
pub fn memory_key(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

/// Texts this long are hashed in four lanes.
const LANES_MIN_BYTES: usize = 64;

/// Multiply-rotate over `bytes`, word by word: `N` independent hashes in one pass, hash `j`
/// from `seeds[j]` with multiplier `ks[j]` and rotation `rots[j]`. From [`LANES_MIN_BYTES`] on,
/// each hash runs four lanes over the 32-byte blocks, so the multiplies overlap (one chain waits
/// a multiply's latency per word: the hash was 7% of a 1 MiB pipeline run); the remaining words
/// go through one chain, which is all a shorter text sees.
fn fx<const N: usize>(bytes: &[u8], seeds: [u64; N], ks: [u64; N], rots: [u32; N]) -> [u64; N] {
    let word = |chunk: &[u8]| u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
    let step = |j: usize, h: u64, w: u64| (h.rotate_left(rots[j]) ^ w).wrapping_mul(ks[j]);
    let mut hashes = seeds;
    let mut rest = bytes;
    if bytes.len() >= LANES_MIN_BYTES {
        // Distinct seeds, so words swapped between lanes change the hash.
        let mut lanes = seeds.map(|seed| {
            [
                seed,
                seed ^ 0x243f_6a88_85a3_08d3,
                seed ^ 0x1319_8a2e_0370_7344,
                seed ^ 0xa409_3822_299f_31d0,
            ]
        });
        let mut blocks = bytes.chunks_exact(32);
        for block in &mut blocks {
            for (i, chunk) in block.chunks_exact(8).enumerate() {
                let w = word(chunk);
                for (j, lanes) in lanes.iter_mut().enumerate() {
                    lanes[i] = step(j, lanes[i], w);
                }
            }
        }
        for (j, hash) in hashes.iter_mut().enumerate() {
            for lane in lanes[j] {
                *hash = step(j, *hash, avalanche(lane));
            }
        }
        rest = blocks.remainder();
    }
    let mut chunks = rest.chunks_exact(8);
    for chunk in &mut chunks {
        let w = word(chunk);
        for (j, hash) in hashes.iter_mut().enumerate() {
            *hash = step(j, *hash, w);
        }
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    let w = u64::from_le_bytes(tail);
    for (j, hash) in hashes.iter_mut().enumerate() {
        *hash = step(j, *hash, w);
    }
    hashes
}

fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The memo keys are already uniform hashes; hashing them again would be wasted work.
#[derive(Default)]
pub(crate) struct IdentityHasher(u64);

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
        // Pinned: the same on every platform, and short texts as in every earlier version.
        assert_eq!(content_hash("hello world"), 15_204_164_978_921_311_060);
        let mut lane_words = "0123456789abcdef".repeat(8);
        // Words at the same offset of two lanes, swapped: still a different hash.
        lane_words.replace_range(0..16, "89abcdef01234567");
        assert_ne!(
            content_hash(&lane_words),
            content_hash(&"0123456789abcdef".repeat(8))
        );
        assert_ne!(content_hash("ab"), content_hash("ba"));
        assert_ne!(content_hash(""), content_hash("\0"));
    }

    /// The shortcut's premise: a piece that is a token's bytes encodes as that one token. Every
    /// 13th token the set holds, with text that could be a piece (valid UTF-8).
    #[test]
    fn a_piece_that_is_a_short_token_counts_one() {
        let bpe = &bpe_openai::o200k_base().bpe;
        let mut checked = 0;
        for id in (0..bpe.num_tokens() as u32).step_by(13) {
            let bytes = bpe.token_bytes(id);
            let Ok(text) = std::str::from_utf8(bytes) else {
                continue;
            };
            if (2..=PACKED_MAX).contains(&bytes.len()) {
                assert!(single_tokens().contains(&pack(bytes)), "{text:?}");
                assert_eq!(bpe.count(bytes), 1, "{text:?}");
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked}");
        // Not a token: counted by the encoder, not taken for one.
        assert!(!single_tokens().contains(&pack(b"qzxjvq_wkpf")));
        assert_eq!(count_uncached("qzxjvq_wkpf"), bpe.count(b"qzxjvq_wkpf"));
    }

    #[test]
    fn piecewise_counts_equal_the_tokenizers_on_varied_text() {
        let tokenizer = bpe_openai::o200k_base();
        let texts = [
            "def dump(value):\n    return value.isoformat()  # naive datetime\n".repeat(40),
            "tests/test_config.py::test_parse_config FAILED\n".repeat(30),
            "日本語のテキスト、絵文字 🚀🚀 and ASCII   spaces\t\ttabs\r\n".repeat(25),
            "x".repeat(5_000),
            "=".repeat(300) + &" ".repeat(300) + "\n\n\n",
            (0..2000).map(|i| format!("{i:x} ")).collect(),
        ];
        // Twice: the second pass is served from the piece counts.
        for _ in 0..2 {
            for text in &texts {
                assert_eq!(
                    count_uncached(text),
                    tokenizer.count(text.as_str()),
                    "{text:.40}"
                );
            }
        }
    }

    #[test]
    fn content_keys_differ_for_near_identical_texts() {
        let base = "line 1\nline 2\n".repeat(50);
        let mut seen = std::collections::HashSet::new();
        for i in 0..base.len() {
            let mut edited = base.clone().into_bytes();
            edited[i] ^= 1;
            assert!(seen.insert(content_key(std::str::from_utf8(&edited).unwrap())));
        }
        assert!(seen.insert(content_key(&base)));
        assert_eq!(content_key(&base), content_key(&base.clone()));
        assert_ne!(content_key(""), content_key("\0"));
    }
}
