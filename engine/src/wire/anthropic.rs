//! Anthropic Messages bodies: blocks become OpenAI-shaped normalized messages.
//!
//! - A top-level `system` becomes a leading `Role::System` message.
//! - Each `tool_result` block becomes a synthetic `Role::Tool` message: string content is one
//!   message; an array content gives one message per text block (images and documents stay on the
//!   wire untouched and are never flattened). Synthetic messages come first, in block order, as the
//!   API requires tool results to lead a user turn.
//! - The remaining text of a user turn, if any, follows as one `Role::User` message. A user turn
//!   that only carries tool results yields no user message: it is not a turn the person wrote.
//! - Assistant `tool_use` blocks become tool calls whose arguments are the raw `input` object;
//!   `thinking` blocks become reasoning (signed, so never rewritten in place).
//! - A `system` (or `developer`) message inside `messages` (Claude Code 2.1) is a `Role::System`
//!   message that is read but never rewritten.
//! - Any other block (`redacted_thinking`, `compaction`, `server_tool_use`, a type added next
//!   month) makes its message's text non-rewritable and stays on the wire as it came; a message
//!   that cannot be read at all (an unknown role, a content of another shape) is one opaque
//!   entry (`ParsedBody::read_entry`), and the rest of the body is still compacted.

use std::borrow::Cow;

use super::json::{self, Kind, Span};
use super::{
    ArgsEncoding, ParsedBody, Slot, WireError, join_texts, malformed, message_head, string_field,
};
use crate::message::{Message, Role, ToolCall};

pub(super) fn normalize(parsed: &mut ParsedBody<'_>, doc: &json::Index) -> Result<(), WireError> {
    read_top_system(parsed, doc);
    parsed.read_transcript(doc, read_message);
    Ok(())
}

/// The top-level `system`, when there is one: the first normalized message, read before the
/// transcript wherever it sits in the body.
pub(super) fn read_top_system(parsed: &mut ParsedBody<'_>, doc: &json::Index) {
    let text = parsed.text;
    if let Some(system) = parsed.system_span {
        parsed.read_entry(None, system, |parsed| {
            let (message, slot) = read_system(text, doc, system, &mut parsed.existing_breakpoints)?;
            parsed.messages.push(message);
            parsed.slots.push(slot);
            Ok(())
        });
    }
}

pub(super) fn read_message(
    parsed: &mut ParsedBody<'_>,
    doc: &json::Index,
    index: usize,
    span: Span,
) -> Result<(), WireError> {
    let text = parsed.text;
    let (fields, role_name) = message_head(text, doc, span, index)?;
    let role = match &*role_name {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        // Claude Code 2.1 sends one inside `messages` (beta `mid-conversation-system-2026-04-07`):
        // the agent's own instructions, read (their text counts and fingerprints the turn) but
        // never rewritten.
        "system" | "developer" => Role::System,
        other => return Err(malformed(index, format!("unknown role `{other}`"))),
    };
    let content =
        json::lookup(text, fields, "content").ok_or_else(|| malformed(index, "no `content`"))?;
    let first = parsed.messages.len();
    match json::kind_of(text, content) {
        Kind::String => {
            let value = doc
                .string(text, content)
                .map_err(|e| malformed(index, e.to_string()))?;
            parsed
                .messages
                .push(Message::text(role, value.into_owned()));
            parsed.slots.push(Slot {
                content: Some(content),
                ..Slot::default()
            });
        }
        Kind::Array => read_blocks(parsed, doc, index, role, content)?,
        _ => {
            return Err(malformed(
                index,
                "`content` is neither a string nor an array",
            ));
        }
    }
    if role == Role::System {
        for message in &mut parsed.messages[first..] {
            message.rewritable = false;
        }
    }
    Ok(())
}

fn read_system(
    text: &str,
    doc: &json::Index,
    system: Span,
    breakpoints: &mut usize,
) -> Result<(Message, Slot), WireError> {
    let bad = |reason: &str| malformed(0, format!("`system` {reason}"));
    match json::kind_of(text, system) {
        Kind::String => {
            let value = doc.string(text, system).map_err(|e| bad(&e.to_string()))?;
            Ok((
                Message::text(Role::System, value.into_owned()),
                Slot {
                    content: Some(system),
                    ..Slot::default()
                },
            ))
        }
        Kind::Array => {
            let mut texts = Vec::new();
            let mut spans = Vec::new();
            let mut others = 0;
            let mut message = Message::text(Role::System, String::new());
            let mut slot = Slot::default();
            for block in doc.elements(system) {
                if json::kind_of(text, block) != Kind::Object {
                    return Err(bad("has a block that is not an object"));
                }
                let block_fields = doc.members(block);
                if json::lookup(text, block_fields, "cache_control").is_some() {
                    message.cache_control = true;
                    *breakpoints += 1;
                }
                match text_block(text, doc, block_fields, 0)? {
                    Some((value, span)) => {
                        texts.push(value);
                        spans.push(span);
                    }
                    None => others += 1,
                }
                slot.block_close = Some(block.end - 1);
            }
            message.rewritable = texts.len() == 1 && others == 0;
            message.content = join_texts(texts);
            message.can_cache_control = slot.block_close.is_some();
            if message.rewritable {
                slot.content = spans.first().copied();
            }
            Ok((message, slot))
        }
        _ => Err(bad("is neither a string nor an array")),
    }
}

/// The text and text-literal span of a `{"type":"text","text":...}` block, or `None` for any other block.
fn text_block(
    text: &str,
    doc: &json::Index,
    block: &[json::Entry],
    index: usize,
) -> Result<Option<(String, Span)>, WireError> {
    let is_text = string_field(text, doc, block, "type", index)?.is_some_and(|(t, _)| t == "text");
    if !is_text {
        return Ok(None);
    }
    Ok(string_field(text, doc, block, "text", index)?
        .map(|(value, span)| (value.into_owned(), span)))
}

fn block_type<'t>(
    text: &'t str,
    doc: &json::Index,
    block: &[json::Entry],
    index: usize,
) -> Result<Cow<'t, str>, WireError> {
    string_field(text, doc, block, "type", index)?
        .map(|(t, _)| t)
        .ok_or_else(|| malformed(index, "a content block has no `type`"))
}

fn read_blocks(
    parsed: &mut ParsedBody<'_>,
    doc: &json::Index,
    index: usize,
    role: Role,
    content: Span,
) -> Result<(), WireError> {
    let text = parsed.text;
    let mut own = Message::text(role, String::new());
    let mut own_slot = Slot::default();
    let mut texts = Vec::new();
    let mut text_spans = Vec::new();
    let mut other_blocks = 0;
    let mut has_own_blocks = false;

    for block in doc.elements(content) {
        if json::kind_of(text, block) != Kind::Object {
            return Err(malformed(index, "a content block is not an object"));
        }
        let block_fields = doc.members(block);
        let has_breakpoint = json::lookup(text, block_fields, "cache_control").is_some();
        if has_breakpoint {
            parsed.existing_breakpoints += 1;
        }
        let kind = block_type(text, doc, block_fields, index)?;
        if kind == "tool_result" && role == Role::User {
            read_tool_result(parsed, doc, index, block, block_fields, has_breakpoint)?;
            continue;
        }
        has_own_blocks = true;
        own.cache_control |= has_breakpoint;
        own_slot.block_close = Some(block.end - 1);
        match &*kind {
            "text" => match string_field(text, doc, block_fields, "text", index)? {
                Some((value, span)) => {
                    texts.push(value);
                    text_spans.push(span);
                }
                None => other_blocks += 1,
            },
            "thinking" if role == Role::Assistant => {
                if let Some((thinking, _)) =
                    string_field(text, doc, block_fields, "thinking", index)?
                {
                    own.reasoning.push(thinking.into_owned());
                }
            }
            "tool_use" if role == Role::Assistant => {
                let id = string_field(text, doc, block_fields, "id", index)?
                    .map(|(id, _)| id.into_owned())
                    .unwrap_or_default();
                let name = string_field(text, doc, block_fields, "name", index)?
                    .map(|(n, _)| n.into_owned())
                    .unwrap_or_default();
                let input = json::lookup(text, block_fields, "input");
                let arguments = input.map(|s| s.of(text).to_owned()).unwrap_or_default();
                own.tool_calls.push(ToolCall {
                    id,
                    name,
                    arguments,
                });
                own_slot
                    .args
                    .push((input.unwrap_or(Span::new(0, 0)), ArgsEncoding::RawObject));
            }
            _ => other_blocks += 1,
        }
    }
    if own_slot.args.iter().any(|(s, _)| s.is_empty()) {
        own_slot.args.clear();
    }
    if has_own_blocks {
        own.rewritable = texts.len() == 1 && other_blocks == 0;
        own.content = join_texts(texts);
        own.can_cache_control = own_slot.block_close.is_some();
        if own.rewritable {
            own_slot.content = text_spans.first().copied();
        }
        parsed.messages.push(own);
        parsed.slots.push(own_slot);
    }
    Ok(())
}

fn read_tool_result(
    parsed: &mut ParsedBody<'_>,
    doc: &json::Index,
    index: usize,
    block: Span,
    block_fields: &[json::Entry],
    has_breakpoint: bool,
) -> Result<(), WireError> {
    let text = parsed.text;
    let call_id =
        string_field(text, doc, block_fields, "tool_use_id", index)?.map(|(id, _)| id.into_owned());
    let is_error =
        json::lookup(text, block_fields, "is_error").is_some_and(|s| s.of(text) == "true");
    let template = Message {
        tool_call_id: call_id,
        is_error,
        ..Message::text(Role::Tool, String::new())
    };
    let first = parsed.messages.len();
    match json::lookup(text, block_fields, "content") {
        Some(content) if json::kind_of(text, content) == Kind::String => {
            let value = doc
                .string(text, content)
                .map_err(|e| malformed(index, e.to_string()))?;
            parsed.messages.push(Message {
                content: value.into_owned(),
                ..template.clone()
            });
            parsed.slots.push(Slot {
                content: Some(content),
                ..Slot::default()
            });
        }
        Some(content) if json::kind_of(text, content) == Kind::Array => {
            for inner in doc.elements(content) {
                if json::kind_of(text, inner) != Kind::Object {
                    continue;
                }
                let inner_fields = doc.members(inner);
                if json::lookup(text, inner_fields, "cache_control").is_some() {
                    parsed.existing_breakpoints += 1;
                }
                if let Some((value, span)) = text_block(text, doc, inner_fields, index)? {
                    parsed.messages.push(Message {
                        content: value,
                        ..template.clone()
                    });
                    parsed.slots.push(Slot {
                        content: Some(span),
                        ..Slot::default()
                    });
                }
            }
        }
        _ => {}
    }
    if parsed.messages.len() == first {
        // No text at all (an image-only result, or no content): keep the call paired with an
        // output the components can see but never rewrite.
        parsed.messages.push(Message {
            rewritable: false,
            ..template
        });
        parsed.slots.push(Slot::default());
    }
    // Only the last synthetic message of a result may carry the block's breakpoint, so two
    // messages never write the same key into one block.
    let last = parsed.messages.len() - 1;
    parsed.messages[last].cache_control = has_breakpoint;
    parsed.messages[last].can_cache_control = true;
    parsed.slots[last].block_close = Some(block.end - 1);
    Ok(())
}
