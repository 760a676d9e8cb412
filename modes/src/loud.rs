//! Loud when sluice does nothing: a body forwarded untouched, or one with parts kept opaque, is
//! logged at warn once per session and reason, naming the JSON path that failed and never its
//! content. Every occurrence is counted in `/stats` (`untouched`, `opaque_entries`); the log
//! only says it started, so a busy agent that sluice cannot read fills no disk.

use std::collections::HashSet;

use parking_lot::Mutex;

/// (session or caller scope, reason) pairs remembered before the set starts over: past it a
/// pair may warn again, which is the right failure for a log of first sightings.
const REMEMBERED: usize = 4096;

/// The pairs already warned about.
#[derive(Debug, Default)]
pub struct WarnOnce {
    seen: Mutex<HashSet<(String, &'static str)>>,
}

impl WarnOnce {
    /// Whether this is the first time `who` met `reason` (and remembers it).
    pub fn first(&self, who: &str, reason: &'static str) -> bool {
        let mut seen = self.seen.lock();
        if seen.contains(&(who.to_owned(), reason)) {
            return false;
        }
        if seen.len() >= REMEMBERED {
            seen.clear();
        }
        seen.insert((who.to_owned(), reason))
    }
}

/// A session key (or a caller's scope) as logs show it: [`engine::session::label`] with this
/// process's log key, so a line cannot be reversed by guessing user ids, yet one session reads
/// the same in every line of this process (the access log's `session` included). With a
/// dashboard the key is the dashboard's ([`use_log_key`]), so a session's label in the logs is
/// its label on the dashboard; without one it is drawn at random, and logs do not link across
/// restarts.
pub fn log_id(session: &str) -> String {
    engine::session::label(log_key(), session)
}

/// The key [`log_id`] hashes with, set once.
static LOG_KEY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// Makes [`log_id`] hash with `key` (the dashboard's session key, so the logs and the dashboard
/// label a session alike). It must come before the first [`log_id`]: false, and the key in use
/// kept, when one was already set or drawn.
pub fn use_log_key(key: Vec<u8>) -> bool {
    LOG_KEY.set(key).is_ok()
}

/// This process's key for [`log_id`]: the one [`use_log_key`] set, else two SipHash keys the
/// standard library draws from the operating system's randomness.
fn log_key() -> &'static [u8] {
    LOG_KEY.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let draw = || {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u8(0);
            h.finish().to_le_bytes()
        };
        let (a, b) = (draw(), draw());
        let mut key = Vec::with_capacity(16);
        key.extend_from_slice(&a);
        key.extend_from_slice(&b);
        key
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_once_per_who_and_reason() {
        let warn = WarnOnce::default();
        assert!(warn.first("s1", "unparsed_not_json"));
        assert!(!warn.first("s1", "unparsed_not_json"));
        assert!(warn.first("s1", "opaque_entry"));
        assert!(warn.first("s2", "unparsed_not_json"));
    }

    #[test]
    fn the_memory_is_bounded() {
        let warn = WarnOnce::default();
        for i in 0..REMEMBERED + 10 {
            warn.first(&format!("s{i}"), "r");
        }
        assert!(warn.seen.lock().len() <= REMEMBERED);
    }
}
