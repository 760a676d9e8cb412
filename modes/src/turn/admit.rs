//! Whether a turn runs at all, and under which session: the body parsed, a bypass (the header,
//! an agent summarizing its own transcript) or an unreadable body left untouched, and the
//! session key under the caller's credential scope.

use engine::config::{Arm, ExperimentConfig};
use engine::message::Role;
use engine::session;
use engine::wire::ParsedBody;
use http::HeaderMap;

use super::{BYPASS_HEADER, SESSION_HEADER, Turn, TurnInput};
use engine::wire::WireError;

/// Why a request goes upstream exactly as it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untouched {
    /// The body could not be normalized, and why (`unparsed_not_json`, ...: see
    /// [`unparsed_label`]).
    Unparsed(&'static str),
    /// The caller asked (`header`), or the request is the agent compacting its own transcript
    /// (`agent_compaction`), where a summary must see everything.
    Bypassed(&'static str),
    /// The state store could not be used (`lease_timeout`: another replica held the session
    /// too long; `store_unavailable`: the backend failed): a turn whose decisions could not be
    /// recorded must not make any.
    Held(&'static str),
    /// The session is in an A/B experiment's control arm (`ab_control`).
    Control,
}

impl Untouched {
    /// How logs and `/stats` name it.
    pub fn label(self) -> &'static str {
        match self {
            Untouched::Unparsed(why) | Untouched::Bypassed(why) | Untouched::Held(why) => why,
            Untouched::Control => "ab_control",
        }
    }
}

/// How `/stats` and the logs name a body that could not be read: `unparsed_` and the wire
/// layer's reason.
pub fn unparsed_label(error: &WireError) -> &'static str {
    match error.label() {
        "not_utf8" => "unparsed_not_utf8",
        "not_json" => "unparsed_not_json",
        "not_object" => "unparsed_not_object",
        "no_messages" => "unparsed_no_messages",
        "messages_not_array" => "unparsed_messages_not_array",
        _ => "unparsed_malformed",
    }
}

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
/// `compact:` for a one-off rewrite), or says why it goes untouched (a bypass header on a body
/// that does not parse is still a bypass; a session in an `experiment`'s control arm, before
/// any of its state is touched).
pub(super) fn admit<'b>(
    input: &TurnInput<'b>,
    parsed: Result<ParsedBody<'b>, WireError>,
    namespace: &str,
    warned: &crate::loud::WarnOnce,
    experiment: Option<&ExperimentConfig>,
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
    if experiment.and_then(|e| e.arm(&session)) == Some(Arm::Control) {
        return Err(Turn::Untouched {
            reason: Untouched::Control,
            session: Some(session),
            facts: None,
        });
    }
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
