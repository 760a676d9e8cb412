//! The way back: the `context_guru_expand` tool a request must declare whenever it carries a
//! `<<cg:HASH>>` marker, and the rules for when it can.
//!
//! **Invariant:** a request never leaves sluice carrying a marker for which the model has no way
//! back in that request. [`reach`] decides, before the pipeline runs, whether the request lets
//! the model call the tool at all; when it does not, the turn runs without lossy offloads.
//! [`inject`] then splices the tool into the rewritten body; when that fails for any reason the
//! turn is run again without lossy offloads. Both say why in a [`Withheld`] reason, which the
//! host counts.
//!
//! `tool_choice` decides reachability:
//! - absent, `auto` (every dialect), Anthropic `{"type":"any"}` and OpenAI `"required"`: the
//!   tool is declared with the others and stays reachable (a forced "some tool" choice includes
//!   it);
//! - `none`, a named tool or function, a hosted tool forced by the Responses API
//!   (`{"type":"file_search"}`), or a shape sluice does not know: the model cannot call
//!   the expand tool on this turn, so nothing lossy is cut on it.
//!
//! Everything here splices bytes like the wire layer: the tool is appended last to `tools` with
//! deterministic bytes, so the cached tools prefix is the same turn after turn.

use crate::marker::{EXPAND_TOOL_NAME, MARKER_PREFIX};
use crate::wire::json::{self, Kind, Span};
use crate::wire::{Dialect, ParsedBody};

/// The tool's description, as the reference wrote it.
pub const EXPAND_DESCRIPTION: &str =
    "Retrieve the full original content that was compressed and replaced by a <<cg:HASH>> marker.";

/// Why a turn's lossy offloads were withheld: the model could not have called the expand tool.
/// The names are `/stats` and `/metrics` labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Withheld {
    /// `tool_choice` is `none`.
    ToolChoiceNone,
    /// `tool_choice` names one tool or function: the model must call that one.
    ToolChoiceNamed,
    /// `tool_choice` has a shape sluice does not know (OpenAI `allowed_tools`, say).
    ToolChoiceUnknown,
    /// `tools` is present but not an array.
    ToolsNotArray,
    /// The tool could not be spliced into the rewritten body.
    Unplaced,
    /// A Responses request the provider stores (no `"store": false`, or a `conversation`).
    /// Its markers would live on upstream, where a later turn that chains on it
    /// (`previous_response_id`) carries no marker of its own and so declares no way back; an
    /// expand round would also be stored into the conversation; and a streamed round hands the
    /// client the first response's id (the SDKs check it never changes), whose stored
    /// conversation ends on an unanswered expand call. Stateless requests (Codex sends
    /// `"store": false` and the whole transcript) keep the way back.
    StoredResponse,
}

impl Withheld {
    /// Every reason, in label order: the counters' table.
    pub const ALL: [Withheld; 6] = [
        Withheld::ToolChoiceNone,
        Withheld::ToolChoiceNamed,
        Withheld::ToolChoiceUnknown,
        Withheld::ToolsNotArray,
        Withheld::Unplaced,
        Withheld::StoredResponse,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Withheld::ToolChoiceNone => "tool_choice_none",
            Withheld::ToolChoiceNamed => "tool_choice_named",
            Withheld::ToolChoiceUnknown => "tool_choice_unknown",
            Withheld::ToolsNotArray => "tools_not_array",
            Withheld::Unplaced => "unplaced",
            Withheld::StoredResponse => "stored_response",
        }
    }
}

/// The tool's JSON in `dialect`'s shape.
pub fn tool_json(dialect: Dialect) -> String {
    let description = json::to_literal(EXPAND_DESCRIPTION);
    let schema = r#"{"type":"object","properties":{"id":{"type":"string","description":"The HASH inside the <<cg:HASH>> marker."}},"required":["id"]}"#;
    match dialect {
        Dialect::Anthropic => {
            format!(
                r#"{{"name":"{EXPAND_TOOL_NAME}","description":{description},"input_schema":{schema}}}"#
            )
        }
        Dialect::OpenAi => format!(
            r#"{{"type":"function","function":{{"name":"{EXPAND_TOOL_NAME}","description":{description},"parameters":{schema}}}}}"#
        ),
        // Responses tools are flat: no `function` wrapper.
        Dialect::Responses => format!(
            r#"{{"type":"function","name":"{EXPAND_TOOL_NAME}","description":{description},"parameters":{schema}}}"#
        ),
    }
}

/// Whether the model could call the expand tool on this request once it is declared.
///
/// # Errors
/// Why it could not: then the turn must not cut anything lossy.
pub fn reach(parsed: &ParsedBody<'_>) -> Result<(), Withheld> {
    let text = parsed.text();
    if let Some(tools) = parsed.tools_span()
        && json::kind_of(text, tools) != Kind::Array
    {
        return Err(Withheld::ToolsNotArray);
    }
    if parsed.dialect() == Dialect::Responses {
        let is =
            |key: &str, literal: &str| parsed.field(key).is_some_and(|s| s.of(text) == literal);
        let conversation = parsed
            .field("conversation")
            .is_some_and(|s| s.of(text) != "null");
        if !is("store", "false") || conversation {
            return Err(Withheld::StoredResponse);
        }
    }
    let Some(choice) = parsed.field("tool_choice") else {
        return Ok(());
    };
    let kind = match json::kind_of(text, choice) {
        Kind::String => json::decode_string(text, choice)
            .ok()
            .map(|c| c.into_owned()),
        Kind::Object => json::get(text, choice, "type")
            .and_then(|t| json::decode_string(text, t).ok())
            .map(|t| t.into_owned()),
        // `null` is what an SDK sends for "not set".
        Kind::Null => return Ok(()),
        _ => None,
    };
    match kind.as_deref() {
        Some("auto" | "any" | "required") => Ok(()),
        Some("none") => Err(Withheld::ToolChoiceNone),
        Some("tool" | "function") => Err(Withheld::ToolChoiceNamed),
        _ => Err(Withheld::ToolChoiceUnknown),
    }
}

/// Whether `body` carries a marker, and so must declare the way back.
///
/// Looks at the whole body, not at what a component reported stashing: a replayed decision of a
/// component that was then reverted keeps its marker, and so does a marker the agent's own
/// history brought in (a gateway that stored sluice's output).
pub fn carries_marker(body: &[u8]) -> bool {
    memchr::memmem::find(body, MARKER_PREFIX.as_bytes()).is_some()
}

/// What [`inject`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injected {
    /// The tool was appended: the body to forward.
    Added(Vec<u8>),
    /// The request already declares a tool of that name (a second sluice hop, say).
    AlreadyDeclared,
}

fn tool_name(text: &str, tool: Span) -> Option<String> {
    let name = json::get(text, tool, "name")
        .or_else(|| json::get(text, tool, "function").and_then(|f| json::get(text, f, "name")))?;
    json::decode_string(text, name).ok().map(|n| n.into_owned())
}

/// Appends the expand tool to `rewritten`, a rewrite of `parsed`'s body (the body itself when
/// nothing changed), reading `tools` and `tool_choice` from the parse already done.
///
/// # Errors
/// Why the tool cannot be declared on this request.
pub fn inject(parsed: &ParsedBody<'_>, rewritten: &[u8]) -> Result<Injected, Withheld> {
    reach(parsed)?;
    let text = parsed.text();
    let tool = tool_json(parsed.dialect());
    let Some(tools) = parsed.tools_span() else {
        let at = parsed
            .map_offset(parsed.root().end - 1, rewritten.len())
            .ok_or(Withheld::Unplaced)?;
        return Ok(Injected::Added(splice(
            rewritten,
            at,
            &format!(r#","tools":[{tool}]"#),
        )));
    };
    let mut empty = true;
    for existing in json::elements(text, tools) {
        empty = false;
        if tool_name(text, existing).as_deref() == Some(EXPAND_TOOL_NAME) {
            return Ok(Injected::AlreadyDeclared);
        }
    }
    let close = locate_tools(parsed, tools, rewritten).ok_or(Withheld::Unplaced)?;
    let insert = if empty { tool } else { format!(",{tool}") };
    Ok(Injected::Added(splice(rewritten, close, &insert)))
}

/// Where `tools`' closing bracket is in `rewritten`.
///
/// Write-back only edits `messages` and `system`, so a `tools` array before both keeps its offset
/// and one after both moves by the whole length change. One between them (LiteLLM sends
/// `messages, max_tokens, tools, system`) is found by walking the rewritten body's top-level
/// members, which skips values without validating them again; the array found must be the very
/// bytes parsed, or nothing is placed.
fn locate_tools(parsed: &ParsedBody<'_>, tools: Span, rewritten: &[u8]) -> Option<usize> {
    if let Some(close) = parsed.map_offset(tools.end - 1, rewritten.len()) {
        return Some(close);
    }
    let rewritten = std::str::from_utf8(rewritten).ok()?;
    let start = rewritten.find('{')?;
    let root = Span::new(start, rewritten.len());
    let found = json::get(rewritten, root, "tools")?;
    (found.of(rewritten) == tools.of(parsed.text())).then(|| found.end - 1)
}

fn splice(body: &[u8], at: usize, insert: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + insert.len());
    out.extend_from_slice(&body[..at]);
    out.extend_from_slice(insert.as_bytes());
    out.extend_from_slice(&body[at..]);
    out
}

#[cfg(test)]
mod tests;
