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

/// A session key (or a caller's scope) as logs show it: hashed with a key drawn at random for
/// this process, so a line cannot be reversed by guessing user ids and does not link logs
/// across restarts, yet one session reads the same in every line of this process (the access
/// log's `session` included).
pub fn log_id(session: &str) -> String {
    let scope = engine::session::credential_scope(log_key(), Some(session.as_bytes()));
    scope
        .trim_start_matches('k')
        .trim_end_matches(':')
        .to_owned()
}

/// This process's random key for [`log_id`]: two SipHash keys the standard library draws from
/// the operating system's randomness.
fn log_key() -> &'static [u8] {
    static KEY: std::sync::OnceLock<[u8; 16]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let draw = || {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u8(0);
            h.finish().to_le_bytes()
        };
        let (a, b) = (draw(), draw());
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&a);
        key[8..].copy_from_slice(&b);
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
