//! Session keys: which conversation a request belongs to.
//!
//! An explicit id from the caller wins (the `x-context-guru-session` header), once sanitized:
//! it names store scopes and may end up in logs, so path characters and unbounded lengths are
//! refused. Otherwise the key is derived from what every turn of one conversation re-sends
//! unchanged: the system prompt and the first user message.

use sha2::{Digest, Sha256};

use crate::message::{Message, Role};
use crate::wire::{ParsedBody, json};

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

/// The scope a caller's credential gives its sessions: `k` and 16 hex digits of
/// SHA-256(`secret`, NUL, credential), then `:`; `u:` without a credential.
///
/// Every session key starts with its scope, so no caller can name another's key: an explicit
/// session id is appended to the caller's own scope, and `u:`, `k…:` and a one-off rewrite's
/// `compact:` prefix never overlap.
///
/// Stashes, frozen decisions and expands live under the session key, so the key must say who is
/// asking: two tenants sending the same opening (or claiming the same session id) get different
/// scopes, and one cannot expand the other's marker. The credential itself is never kept or
/// logged, only this hash; `secret` (a deployment's own, or a fixed default) keys it.
pub fn credential_scope(secret: &[u8], credential: Option<&[u8]>) -> String {
    let Some(credential) = credential.filter(|c| !c.is_empty()) else {
        return UNSCOPED.to_owned();
    };
    let mut hasher = Sha256::new();
    hasher.update(secret);
    hasher.update([0]);
    hasher.update(credential);
    let digest = hasher.finalize();
    let mut scope = String::with_capacity(18);
    scope.push('k');
    crate::hex::push(&mut scope, &digest[..8]);
    scope.push(':');
    scope
}

/// The scope of a caller that sent no credential.
pub const UNSCOPED: &str = "u:";

/// A session key as people see it, in the logs and on the dashboard: 16 hex digits of
/// SHA-256(`key`, NUL, session) (the digits of [`credential_scope`]), so it cannot be reversed
/// by guessing session ids. The one function both use: with the same `key`, a session reads the
/// same in an access line and in a dashboard row.
pub fn label(key: &[u8], session: &str) -> String {
    credential_scope(key, Some(session.as_bytes()))
        .trim_start_matches('k')
        .trim_end_matches(':')
        .to_owned()
}

/// `sha256(system + "\0" + first user message)`, first 16 hex digits.
pub fn derive(messages: &[Message]) -> String {
    let system = system_text(messages);
    let first_user = messages
        .iter()
        .find(|m| m.role == Role::User)
        .map_or("", |m| m.content.as_str());
    key_of(system, std::iter::once(first_user))
}

/// The first system message's text ("" without one).
fn system_text(messages: &[Message]) -> &str {
    messages
        .iter()
        .find(|m| m.role == Role::System)
        .map_or("", |m| m.content.as_str())
}

/// The derived key's hash: the system prompt, then each user text after a zero byte.
fn key_of<'a>(system: &str, users: impl Iterator<Item = &'a str>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(system.as_bytes());
    for user in users {
        hasher.update([0u8]);
        hasher.update(user.as_bytes());
    }
    let digest = hasher.finalize();
    crate::hex::encode(&digest[..8])
}

/// The session key for a request: the sanitized explicit id, else the derived one.
pub fn resolve(explicit: Option<&str>, messages: &[Message]) -> String {
    match explicit.and_then(sanitize_explicit) {
        Some(id) => id.to_owned(),
        None => derive(messages),
    }
}

/// Longer `metadata.user_id` values are ignored rather than truncated: a cut id could alias.
const MAX_METADATA_ID_BYTES: usize = 1024;

/// The session id a body names itself: `metadata.user_id` (Claude Code; when it is a JSON
/// object in a string, its `session_id`), else `metadata.taskId`. Explicit ids survive the
/// agent's own compaction of its transcript, which a derived key does not.
pub fn from_body(parsed: &ParsedBody<'_>) -> Option<String> {
    let text = parsed.text();
    let metadata = parsed
        .field("metadata")
        .filter(|m| json::kind_of(text, *m) == json::Kind::Object)?;
    let string = |key: &str| {
        json::get(text, metadata, key)
            .filter(|v| json::kind_of(text, *v) == json::Kind::String)
            .and_then(|v| json::decode_string(text, v).ok())
            .map(|v| v.into_owned())
    };
    if let Some(user_id) = string("user_id").filter(|u| u.len() <= MAX_METADATA_ID_BYTES) {
        let unwrapped = json::parse_document(&user_id)
            .ok()
            .filter(|root| json::kind_of(&user_id, *root) == json::Kind::Object)
            .and_then(|root| json::get(&user_id, root, "session_id"))
            .and_then(|v| json::decode_string(&user_id, v).ok())
            .map(|v| v.into_owned());
        let id = unwrapped.unwrap_or(user_id);
        if sanitize_explicit(&id).is_some() {
            return Some(id);
        }
    }
    string("taskId").filter(|id| sanitize_explicit(id).is_some())
}

/// The key for a proxied request, in order: the caller's header, the body's own id, derived.
pub fn for_request(header: Option<&str>, parsed: &ParsedBody<'_>) -> String {
    if let Some(id) = header.and_then(sanitize_explicit) {
        return id.to_owned();
    }
    from_body(parsed).unwrap_or_else(|| match parsed.dialect() {
        // gemini-cli opens every session with a `<session_context>` user content (date, OS,
        // workspace tree) that sessions of one workspace share on a day; the task follows it
        // in the same leading run of user contents, which every later turn repeats.
        crate::wire::Dialect::Gemini => derive_leading(parsed.messages(), 2),
        _ => match cache_key(parsed) {
            // OpenAI's `prompt_cache_key`, which a client sets per conversation (Codex: its
            // session id): two conversations that open alike (the same task in the same
            // workspace) stay two sessions. Folded into the derived key, never in place of it,
            // so a client that sends one key for all its conversations splits them as before.
            Some(key) => key_of(&derive(parsed.messages()), std::iter::once(key.as_str())),
            None => derive(parsed.messages()),
        },
    })
}

/// The body's top-level `prompt_cache_key` (OpenAI chat completions and Responses), when it is
/// a string an explicit session id could be.
fn cache_key(parsed: &ParsedBody<'_>) -> Option<String> {
    let text = parsed.text();
    let value = parsed
        .field("prompt_cache_key")
        .filter(|v| json::kind_of(text, *v) == json::Kind::String)?;
    let key = json::decode_string(text, value).ok()?;
    sanitize_explicit(&key).map(str::to_owned)
}

/// [`derive`] over the system prompt and up to `users` user messages of the transcript's
/// leading run of user messages (the run before the first answer, the same on every turn).
fn derive_leading(messages: &[Message], users: usize) -> String {
    let system = system_text(messages);
    let leading = messages
        .iter()
        .filter(|m| m.role != Role::System)
        .take_while(|m| m.role == Role::User)
        .take(users)
        .map(|m| m.content.as_str());
    key_of(system, leading)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_scopes_its_sessions_without_being_kept() {
        let (secret, key) = (
            b"s3cret".as_slice(),
            b"Bearer sk-live-0123456789".as_slice(),
        );
        let scope = credential_scope(secret, Some(key));
        assert_eq!(scope.len(), 1 + 16 + 1);
        assert!(scope.starts_with('k') && scope.ends_with(':'));
        assert!(
            sanitize_explicit(&format!("{scope}agent-1")).is_some(),
            "a valid session key"
        );
        assert!(
            !scope.contains("sk-live"),
            "the credential itself never appears"
        );
        assert_eq!(
            scope,
            credential_scope(secret, Some(key)),
            "stable across processes"
        );
        assert_ne!(scope, credential_scope(secret, Some(b"Bearer sk-other")));
        assert_ne!(scope, credential_scope(b"other secret", Some(key)), "keyed");
        assert_eq!(credential_scope(secret, None), "u:");
        assert_eq!(credential_scope(secret, Some(b"")), "u:");
    }

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

    /// Codex's runs of one task in one workspace open alike; each names its conversation in
    /// `prompt_cache_key`, which keeps them two sessions. One key for every conversation (a
    /// gateway's) still splits them by their openings.
    #[test]
    fn a_prompt_cache_key_splits_conversations_that_open_alike() {
        use crate::wire::{Dialect, parse};
        let body = |key: Option<&str>, task: &str| {
            let key = key.map_or(String::new(), |k| format!(r#""prompt_cache_key":"{k}","#));
            format!(
                r#"{{{key}"model":"gpt-5","input":[{{"role":"user","content":"{task}"}}],"instructions":"be brief"}}"#
            )
        };
        let key = |text: String| {
            let parsed = parse(text.as_bytes(), Dialect::Responses).unwrap();
            for_request(None, &parsed)
        };
        let (run_a, run_b) = (Some("0199a-run-a"), Some("0199a-run-b"));
        assert_ne!(key(body(run_a, "fix it")), key(body(run_b, "fix it")));
        assert_eq!(key(body(run_a, "fix it")), key(body(run_a, "fix it")));
        assert_ne!(key(body(run_a, "fix it")), key(body(run_a, "other")));
        assert_ne!(key(body(None, "fix it")), key(body(None, "other")));
        assert_eq!(key(body(Some("bad key/../"), "x")), key(body(None, "x")));
    }

    #[test]
    fn body_ids_come_from_metadata_in_order() {
        use crate::wire::{Dialect, parse};
        let body = |metadata: &str| {
            format!(r#"{{"metadata":{metadata},"messages":[{{"role":"user","content":"task"}}]}}"#)
        };
        let cases = [
            (
                r#"{"user_id":"user_abc_account__session_07f2"}"#,
                Some("user_abc_account__session_07f2"),
            ),
            (
                r#"{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s-42\"}"}"#,
                Some("s-42"),
            ),
            (r#"{"taskId":"task.9"}"#, Some("task.9")),
            (r#"{"user_id":"has spaces","taskId":"t1"}"#, Some("t1")),
            (r#"{"user_id":"../../etc"}"#, None),
            ("[]", None),
        ];
        for (metadata, expected) in cases {
            let text = body(metadata);
            let parsed = parse(text.as_bytes(), Dialect::Anthropic).unwrap();
            assert_eq!(from_body(&parsed).as_deref(), expected, "{metadata}");
        }
        let text = body(r#"{"user_id":"u1"}"#);
        let parsed = parse(text.as_bytes(), Dialect::Anthropic).unwrap();
        assert_eq!(for_request(Some("hdr"), &parsed), "hdr", "the header wins");
        assert_eq!(
            for_request(Some("bad/id"), &parsed),
            "u1",
            "a bad header falls back"
        );
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

    /// gemini-cli's first content is a session context two sessions of a workspace share on a
    /// day; the task after it tells them apart, and the key holds for every later turn.
    #[test]
    fn gemini_sessions_are_told_apart_by_the_task_after_the_context() {
        use crate::wire::{Dialect, parse};
        let turn = |task: &str, more: &str| {
            format!(
                r#"{{"contents":[{{"role":"user","parts":[{{"text":"<session_context>same day</session_context>"}}]}},{{"role":"user","parts":[{{"text":"{task}"}}]}}{more}]}}"#
            )
        };
        let key =
            |body: String| for_request(None, &parse(body.as_bytes(), Dialect::Gemini).unwrap());
        let first = key(turn("fix the tests", ""));
        assert_ne!(first, key(turn("write the docs", "")));
        let later = r#",{"role":"model","parts":[{"text":"ok"}]},{"role":"user","parts":[{"text":"and more"}]}"#;
        assert_eq!(first, key(turn("fix the tests", later)));
    }
}
