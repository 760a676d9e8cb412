//! The `<<cg:HASH>>` marker every lossy drop leaves behind, and the texts that go with it.
//!
//! HASH is the first 16 hex digits of the SHA-256 of the original text: the same for the same
//! bytes in every process, run and platform, so a marker written by one sluice resolves in another
//! that shares the store, and a replayed decision writes the same marker again.

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;

use sha2::{Digest, Sha256};

/// The name of the tool the model calls to get an original back.
pub const EXPAND_TOOL_NAME: &str = "context_guru_expand";

/// Hint after a marker when a whole output was replaced.
pub const HINT_FULL_OUTPUT: &str = " [full output: call context_guru_expand]";
/// Hint after a marker when items of a JSON array were dropped.
pub const HINT_FULL_ARRAY: &str = " [full array: call context_guru_expand]";
/// Hint after the summary marker.
pub const HINT_FULL_TRAJECTORY: &str = " [full earlier trajectory: call context_guru_expand]";

/// What every marker starts with, as it appears in a body sluice wrote.
pub const MARKER_PREFIX: &str = "<<cg:";

/// Stash ids are this many hex digits of SHA-256.
pub const ID_HEX_LEN: usize = 16;

/// The id an original is stashed under: its content hash.
///
/// Memoized by a 128-bit content key for originals of a kilobyte or more: agents re-send the
/// same outputs every turn, and hashing them again was a visible share of an offloader's time.
pub fn stash_id(original: &str) -> String {
    const MEMO_MIN_BYTES: usize = 1024;
    const MEMO_MAX_ENTRIES: usize = 1 << 16;
    static MEMO: OnceLock<Mutex<HashMap<u128, String>>> = OnceLock::new();
    if original.len() < MEMO_MIN_BYTES {
        return sha256_id(original);
    }
    let key = crate::tokens::memory_key(original.as_bytes());
    let memo = MEMO.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(id) = memo.lock().get(&key) {
        return id.clone();
    }
    let id = sha256_id(original);
    let mut memo = memo.lock();
    if memo.len() >= MEMO_MAX_ENTRIES {
        memo.clear();
    }
    memo.insert(key, id.clone());
    id
}

fn sha256_id(original: &str) -> String {
    let digest = Sha256::digest(original.as_bytes());
    crate::hex::encode(&digest[..ID_HEX_LEN / 2])
}

/// `<<cg:ID>>`.
pub fn marker(id: &str) -> String {
    format!("<<cg:{id}>>")
}

/// The text an expand call gets for an id that is unknown, expired or not owned by the session.
/// The provider requires one result per tool call, so a miss is answered, never omitted.
pub fn expired_placeholder(id: &str) -> String {
    format!("[expand: original for id {id} is no longer available]")
}

/// A marker's opening, before its id.
const OPEN: &[u8] = b"<<cg:";
/// The longest id a marker names.
const MAX_ID: usize = 64;

/// Whether `text` already carries a marker (components never offload content twice).
pub fn contains_marker(text: &str) -> bool {
    marker_ids(text).next().is_some()
}

/// Every marker id in `text`, in order: each `<<cg:ID>>` whose id is 1 to 64 of
/// `[A-Za-z0-9_-]`, the matches not overlapping, as the regex `<<cg:([A-Za-z0-9_-]{1,64})>>`
/// finds them (a test holds the two to the same answers). A vectorized search for the opening
/// instead of the regex's captures: the retry memory reads every cut output of every turn.
pub fn marker_ids(text: &str) -> impl Iterator<Item = &str> {
    static FINDER: OnceLock<memchr::memmem::Finder<'static>> = OnceLock::new();
    let finder = FINDER.get_or_init(|| memchr::memmem::Finder::new(OPEN));
    let bytes = text.as_bytes();
    let mut from = 0;
    std::iter::from_fn(move || {
        while let Some(found) = finder.find(bytes.get(from..)?) {
            let at = from + found;
            let id_start = at + OPEN.len();
            let id_len = bytes[id_start..]
                .iter()
                .take(MAX_ID + 1)
                .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
                .count();
            let id_end = id_start + id_len;
            if (1..=MAX_ID).contains(&id_len) && bytes[id_end..].starts_with(b">>") {
                from = id_end + 2;
                // The id is ASCII between ASCII delimiters: on character boundaries.
                return text.get(id_start..id_end);
            }
            // No marker opens here; one may open at the next `<` (`<<<cg:ID>>`).
            from = at + 1;
        }
        None
    })
}

/// Whether a raw JSON body carries a marker, plainly or with `<` and `>` escaped as `\u003c`/`\u003e`.
pub fn raw_contains_marker(raw: &str) -> bool {
    raw.contains("<<cg:") || raw.to_ascii_lowercase().contains("\\u003c\\u003ccg:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_ids_finds_what_the_marker_regex_finds() {
        let regex = regex::Regex::new(r"<<cg:([A-Za-z0-9_-]{1,64})>>").unwrap();
        let long = "a".repeat(64);
        let too_long = "a".repeat(65);
        let texts = [
            String::new(),
            "no marker".to_owned(),
            "<<cg:abc>>".to_owned(),
            "x <<cg:2cf24dba5fb0a30e>> y <<cg:e3b0c44298fc1c14>>".to_owned(),
            "<<<cg:abc>>>".to_owned(),
            "<<cg:<<cg:ab_c-9>>".to_owned(),
            "<<cg:>> <<cg:a b>> <<cg:a>".to_owned(),
            format!("<<cg:{long}>> <<cg:{too_long}>> <<cg:b>>"),
            "<<cg:é>> <<cg:ok>>>> <<cg:".to_owned(),
            "<<cg:a>><<cg:b>>".to_owned(),
        ];
        for text in &texts {
            let want: Vec<&str> = regex
                .captures_iter(text)
                .map(|c| c.get(1).unwrap().as_str())
                .collect();
            let got: Vec<&str> = marker_ids(text).collect();
            assert_eq!(got, want, "{text:?}");
            assert_eq!(contains_marker(text), !want.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn ids_are_stable_content_hashes() {
        // Pinned: the id of a given text must never change across versions or platforms.
        assert_eq!(stash_id("hello"), "2cf24dba5fb0a30e");
        assert_eq!(stash_id(""), "e3b0c44298fc1c14");
        assert_eq!(marker("2cf24dba5fb0a30e"), "<<cg:2cf24dba5fb0a30e>>");
        // Large originals go through the memo and get the same id, first time and again.
        let big = "x".repeat(4096);
        let direct = sha256_id(&big);
        assert_eq!(stash_id(&big), direct);
        assert_eq!(stash_id(&big), direct);
        assert_ne!(stash_id(&format!("{big}y")), direct);
    }

    #[test]
    fn finds_markers_and_escaped_markers() {
        let text = "a <<cg:abc123>> b <<cg:def>> <<cg:>> <<cg:bad id>>";
        assert_eq!(marker_ids(text).collect::<Vec<_>>(), ["abc123", "def"]);
        assert!(contains_marker(text));
        assert!(!contains_marker("<<cg: nope"));
        assert!(raw_contains_marker(r#""\u003c\u003cCG:abc\u003e\u003e""#));
    }
}
