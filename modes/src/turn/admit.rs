//! Whether a turn runs at all, and under which session: the body parsed, a bypass (the header,
//! an agent summarizing its own transcript) or an unreadable body left untouched, and the
//! session key under the caller's credential scope.

use engine::message::Role;
use engine::session;
use engine::wire::{ParsedBody, WireError};
use http::HeaderMap;

use super::{BYPASS_HEADER, SESSION_HEADER, Turn, TurnInput, Untouched, unparsed_label};

/// The headers that carry a caller's credential, in the order they are read: Anthropic,
/// OpenAI (and LiteLLM, and Vertex AI's bearer token), Azure OpenAI, Gemini.
const CREDENTIAL_HEADERS: [&str; 4] = ["x-api-key", "authorization", "api-key", "x-goog-api-key"];

/// The scope of the caller's credential (see `engine::session::credential_scope`): the first
/// credential header present.
pub fn caller_scope(headers: &HeaderMap, secret: &[u8]) -> String {
    let credential = CREDENTIAL_HEADERS
        .iter()
        .find_map(|name| headers.get(*name))
        .map(http::HeaderValue::as_bytes);
    session::credential_scope(secret, credential)
}

/// Phrases that open an agent's request to summarize its own conversation (Claude Code, and
/// IBM Bob). Compacting that request would summarize our markers instead of the content.
const AGENT_COMPACTION_PROMPTS: [&str; 2] = [
    "Your task is to create a detailed summary of the ",
    "First, reason in your scratchpad. Then, generate the ",
];

/// Names the session of the body as `parsed` (under `namespace`: the credential scope, and
/// `compact:` for a one-off rewrite), or says why it goes untouched
/// (a bypass header on a body that does not parse is still a bypass).
pub(super) fn admit<'b>(
    input: &TurnInput<'b>,
    parsed: Result<ParsedBody<'b>, WireError>,
    namespace: &str,
    warned: &crate::loud::WarnOnce,
) -> Result<(ParsedBody<'b>, String), Turn> {
    let untouched = |reason| Turn::Untouched {
        reason,
        session: None,
        facts: None,
    };
    let parsed = match parsed {
        Ok(parsed) => parsed,
        Err(_) if bypass_header(input.headers) => {
            return Err(untouched(Untouched::Bypassed("header")));
        }
        Err(error) => {
            let label = unparsed_label(&error);
            // No session without a parse: the caller's credential scope stands for it.
            if warned.first(namespace, label) {
                tracing::warn!(
                    scope = %crate::loud::log_id(namespace),
                    dialect = input.dialect.as_str(),
                    reason = label,
                    path = %error.path(input.dialect),
                    "a request body sluice cannot read goes upstream untouched (counted in /stats as untouched.{label})"
                );
            }
            return Err(untouched(Untouched::Unparsed(label)));
        }
    };
    let explicit = input
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok());
    let session = format!("{namespace}{}", session::for_request(explicit, &parsed));
    Ok((parsed, session))
}

fn bypass_header(headers: &HeaderMap) -> bool {
    headers
        .get(BYPASS_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}

pub(super) fn bypass_reason(headers: &HeaderMap, parsed: &ParsedBody<'_>) -> Option<&'static str> {
    if bypass_header(headers) {
        Some("header")
    } else if is_agent_compaction(parsed) {
        Some("agent_compaction")
    } else {
        None
    }
}

/// Whether the last user turn asks the model to summarize the conversation.
pub fn is_agent_compaction(parsed: &ParsedBody<'_>) -> bool {
    parsed.messages().last().is_some_and(|m| {
        m.role == Role::User
            && AGENT_COMPACTION_PROMPTS
                .iter()
                .any(|p| m.content.contains(p))
    })
}
