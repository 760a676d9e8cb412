//! Session keys: which conversation a request belongs to.
//!
//! An explicit id from the caller wins (the `x-context-guru-session` header), once sanitized:
//! it names store scopes and may end up in logs, so path characters and unbounded lengths are
//! refused. Otherwise the key is derived from what every turn of one conversation re-sends
//! unchanged: the system prompt and the first user message.

use sha2::{Digest, Sha256};

use crate::message::{Message, Role};

/// The longest explicit session id accepted.
pub const MAX_EXPLICIT_LEN: usize = 128;

/// The explicit id, if it is safe to use: `[A-Za-z0-9._:-]{1,128}` and not all dots.
pub fn sanitize_explicit(id: &str) -> Option<&str> {
    let ok = !id.is_empty()
        && id.len() <= MAX_EXPLICIT_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        && !id.bytes().all(|b| b == b'.');
    ok.then_some(id)
}

/// `sha256(system + "\0" + first user message)`, first 16 hex digits.
pub fn derive(messages: &[Message]) -> String {
    let system = messages
        .iter()
        .find(|m| m.role == Role::System)
        .map_or("", |m| m.content.as_str());
    let first_user = messages
        .iter()
        .find(|m| m.role == Role::User)
        .map_or("", |m| m.content.as_str());
    let mut hasher = Sha256::new();
    hasher.update(system.as_bytes());
    hasher.update([0u8]);
    hasher.update(first_user.as_bytes());
    let digest = hasher.finalize();
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The session key for a request: the sanitized explicit id, else the derived one.
pub fn resolve(explicit: Option<&str>, messages: &[Message]) -> String {
    match explicit.and_then(sanitize_explicit) {
        Some(id) => id.to_owned(),
        None => derive(messages),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_ids_are_sanitized() {
        assert_eq!(
            sanitize_explicit("agent-7:run.3_x"),
            Some("agent-7:run.3_x")
        );
        for bad in [
            "",
            "..",
            "../etc/passwd",
            "a/b",
            "a b",
            &"x".repeat(129),
            "é",
        ] {
            assert_eq!(sanitize_explicit(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn derived_key_is_stable_across_turns() {
        let turn1 = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "task"),
        ];
        let mut turn2 = turn1.clone();
        turn2.push(Message::text(Role::Assistant, "ok"));
        turn2.push(Message::text(Role::User, "more"));
        assert_eq!(derive(&turn1), derive(&turn2));
        assert_eq!(derive(&turn1).len(), 16);
        assert_ne!(
            derive(&turn1),
            derive(&[Message::text(Role::User, "other task")])
        );
        assert_eq!(resolve(Some("../x"), &turn1), derive(&turn1));
        assert_eq!(resolve(Some("mine"), &turn1), "mine");
    }
}
