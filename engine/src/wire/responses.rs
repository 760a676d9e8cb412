//! OpenAI Responses API bodies: `input` items become normalized messages, one item each.
//!
//! - `instructions`, when a string, becomes a leading `Role::System` message, rewritable in
//!   place like Anthropic's `system`.
//! - A `message` item (with `type` or, as the SDKs allow, without it) is a message of its role;
//!   `developer` and `system` are both `Role::System`. Its `content` is rewritable when it is one
//!   string or exactly one text part (`input_text`, `output_text`); images and files never are.
//! - A `function_call` item is an assistant message with one tool call whose arguments (a
//!   JSON-encoded string, as in chat completions) can be rewritten in place. A
//!   `custom_tool_call` (free-form input, Codex's `apply_patch`) is a call whose input is read,
//!   never rewritten.
//! - A `function_call_output` or `custom_tool_call_output` item is a tool message answering
//!   `call_id`; its `output` string is what components compact. An `output` that is a list of
//!   parts (Codex 0.171 sends a status line and the command's output as two `input_text` parts)
//!   gives one tool message per text part, each rewritable in place.
//! - Every other item (`reasoning` with its encrypted content, `item_reference`, hosted tool
//!   calls such as `web_search_call`) is an opaque assistant message with nothing rewritable, so
//!   it leaves byte-identical and keeps its place in the transcript's order.

use super::json::{self, Kind, Span};
use super::{ArgsEncoding, ParsedBody, Slot, WireError, join_texts, malformed, string_field};
use crate::message::{Message, Role, ToolCall};

pub(super) fn normalize(parsed: &mut ParsedBody<'_>, doc: &json::Index) -> Result<(), WireError> {
    let text = parsed.text;
    if let Some(instructions) = parsed.system_span {
        let mut message = Message::text(Role::System, String::new());
        let mut slot = Slot::default();
        match json::kind_of(text, instructions) {
            Kind::String => {
                message.content = doc
                    .string(text, instructions)
                    .map_err(|e| malformed(0, format!("`instructions`: {e}")))?
                    .into_owned();
                slot.content = Some(instructions);
            }
            // `null` is an SDK's "not set"; anything else is the provider's to reject.
            _ => message.rewritable = false,
        }
        parsed.messages.push(message);
        parsed.slots.push(slot);
    }
    parsed.read_transcript(doc, |parsed, doc, index, span| {
        for (message, slot) in read_item(text, doc, index, span)? {
            parsed.messages.push(message);
            parsed.slots.push(slot);
        }
        Ok(())
    });
    Ok(())
}

/// One `input` item: one message, or one per text part of an output in parts; an error makes
/// it an opaque entry.
fn read_item(
    text: &str,
    doc: &json::Index,
    index: usize,
    span: Span,
) -> Result<Vec<(Message, Slot)>, WireError> {
    if json::kind_of(text, span) != Kind::Object {
        return Err(malformed(index, "an `input` item is not an object"));
    }
    let fields = doc.members(span);
    let kind = string_field(text, doc, fields, "type", index)?.map(|(k, _)| k);
    // An untyped item is a message when it has a role; without one it is an
    // `item_reference` (`{"id": "msg_..."}`), which the API also accepts untyped.
    let untyped_message = kind.is_none() && json::lookup(text, fields, "role").is_some();
    let one = match kind.as_deref() {
        Some("message") => read_message(text, doc, fields, index)?,
        None if untyped_message => read_message(text, doc, fields, index)?,
        Some("function_call") => read_call(text, doc, fields, index, true)?,
        Some("custom_tool_call") => read_call(text, doc, fields, index, false)?,
        Some("function_call_output" | "custom_tool_call_output") => {
            return read_output(text, doc, fields, index);
        }
        // `reasoning`, `compaction` (with its `encrypted_content`), Codex's
        // `compaction_trigger`, hosted tool calls, item references: kept as they are.
        None | Some(_) => (opaque(), Slot::default()),
    };
    Ok(vec![one])
}

/// An item sluice does not read: kept in order, never rewritten.
fn opaque() -> Message {
    Message {
        rewritable: false,
        ..Message::text(Role::Assistant, String::new())
    }
}

fn read_message(
    text: &str,
    doc: &json::Index,
    fields: &[json::Entry],
    index: usize,
) -> Result<(Message, Slot), WireError> {
    let (role_name, _) = string_field(text, doc, fields, "role", index)?
        .ok_or_else(|| malformed(index, "a message item has no `role`"))?;
    let role = match &*role_name {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        other => return Err(malformed(index, format!("unknown role `{other}`"))),
    };
    let mut message = Message::text(role, String::new());
    let slot = read_text_value(text, doc, fields, "content", index, &mut message)?;
    Ok((message, slot))
}

/// Reads `key` (a message's `content`, an output's `output`) as text: a string is rewritable in
/// place, an array of parts only when it is exactly one text part.
fn read_text_value(
    text: &str,
    doc: &json::Index,
    fields: &[json::Entry],
    key: &str,
    index: usize,
    message: &mut Message,
) -> Result<Slot, WireError> {
    let mut slot = Slot::default();
    let Some(value) = json::lookup(text, fields, key) else {
        message.rewritable = false;
        return Ok(slot);
    };
    match json::kind_of(text, value) {
        Kind::String => {
            message.content = doc
                .string(text, value)
                .map_err(|e| malformed(index, e.to_string()))?
                .into_owned();
            slot.content = Some(value);
        }
        Kind::Array => {
            let mut texts = Vec::new();
            let mut spans: Vec<Span> = Vec::new();
            let mut others = 0;
            for part in doc.elements(value) {
                if json::kind_of(text, part) != Kind::Object {
                    others += 1;
                    continue;
                }
                let part_fields = doc.members(part);
                let is_text = string_field(text, doc, part_fields, "type", index)?
                    .is_some_and(|(t, _)| matches!(&*t, "input_text" | "output_text" | "text"));
                match string_field(text, doc, part_fields, "text", index)? {
                    Some((part_text, span)) if is_text => {
                        texts.push(part_text);
                        spans.push(span);
                    }
                    _ => others += 1,
                }
            }
            message.rewritable = texts.len() == 1 && others == 0;
            message.content = join_texts(texts);
            if message.rewritable {
                slot.content = spans.first().copied();
            }
        }
        _ => message.rewritable = false,
    }
    Ok(slot)
}

/// A `function_call` (`json_arguments`) or `custom_tool_call` item: one tool call.
fn read_call(
    text: &str,
    doc: &json::Index,
    fields: &[json::Entry],
    index: usize,
    json_arguments: bool,
) -> Result<(Message, Slot), WireError> {
    let field = |key: &str| -> Result<Option<(String, Span)>, WireError> {
        Ok(string_field(text, doc, fields, key, index)?.map(|(v, s)| (v.into_owned(), s)))
    };
    let id = field("call_id")?.map(|(id, _)| id).unwrap_or_default();
    let name = field("name")?.map(|(n, _)| n).unwrap_or_default();
    let mut slot = Slot::default();
    let arguments = if json_arguments {
        let arguments = field("arguments")?;
        if let Some((_, span)) = &arguments {
            slot.args.push((*span, ArgsEncoding::JsonString));
        }
        arguments.map(|(a, _)| a).unwrap_or_default()
    } else {
        field("input")?.map(|(i, _)| i).unwrap_or_default()
    };
    let message = Message {
        rewritable: false,
        tool_calls: vec![ToolCall {
            id,
            name,
            arguments,
        }],
        ..Message::text(Role::Assistant, String::new())
    };
    Ok((message, slot))
}

/// A tool output item whose `output` is a list of parts (Codex's `custom_tool_call_output`: a
/// status line, then the command's output): one tool message per text part, each rewritable in
/// place, as Anthropic's `tool_result` blocks are. Parts that are not text stay on the wire and
/// make no message.
fn read_parted_output(
    text: &str,
    doc: &json::Index,
    parts: Span,
    call_id: Option<String>,
    index: usize,
) -> Result<Vec<(Message, Slot)>, WireError> {
    let mut out = Vec::new();
    for part in doc.elements(parts) {
        if json::kind_of(text, part) != Kind::Object {
            continue;
        }
        let part_fields = doc.members(part);
        let is_text = string_field(text, doc, part_fields, "type", index)?
            .is_some_and(|(t, _)| matches!(&*t, "input_text" | "output_text" | "text"));
        if let (true, Some((part_text, span))) = (
            is_text,
            string_field(text, doc, part_fields, "text", index)?,
        ) {
            let mut message = Message::text(Role::Tool, part_text.into_owned());
            message.tool_call_id.clone_from(&call_id);
            out.push((
                message,
                Slot {
                    content: Some(span),
                    ..Slot::default()
                },
            ));
        }
    }
    if out.is_empty() {
        // No text at all (an image): the call keeps an output the components see, never rewrite.
        let mut message = Message::text(Role::Tool, String::new());
        message.tool_call_id = call_id;
        message.rewritable = false;
        out.push((message, Slot::default()));
    }
    Ok(out)
}

/// A `function_call_output` or `custom_tool_call_output` item: one tool message, or one per
/// text part when `output` is a list of parts.
fn read_output(
    text: &str,
    doc: &json::Index,
    fields: &[json::Entry],
    index: usize,
) -> Result<Vec<(Message, Slot)>, WireError> {
    let call_id = string_field(text, doc, fields, "call_id", index)?.map(|(id, _)| id.into_owned());
    if let Some(parts) =
        json::lookup(text, fields, "output").filter(|o| json::kind_of(text, *o) == Kind::Array)
    {
        return read_parted_output(text, doc, parts, call_id, index);
    }
    let mut message = Message::text(Role::Tool, String::new());
    message.tool_call_id = call_id;
    let slot = read_text_value(text, doc, fields, "output", index, &mut message)?;
    Ok(vec![(message, slot)])
}
