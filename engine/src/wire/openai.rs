//! OpenAI chat-completions bodies: one wire message is one normalized message.
//!
//! `content` is a string (rewritable in place), `null`, or an array of parts (rewritable only when
//! it holds exactly one text part; images and audio are never touched). Tool outputs are
//! `role: "tool"` (or the legacy `"function"`) messages; assistant `tool_calls` carry their
//! arguments as a JSON-encoded string; `reasoning_content` (DeepSeek, vLLM) is reasoning.

use super::json::{self, Kind, Span};
use super::{
    ArgsEncoding, ParsedBody, Slot, WireError, join_texts, malformed, message_head, string_field,
};
use crate::message::{Message, Role, ToolCall};

pub(super) fn normalize(parsed: &mut ParsedBody<'_>, doc: &json::Index) -> Result<(), WireError> {
    parsed.read_transcript(doc, read_message);
    Ok(())
}

/// One wire message; an error makes it an opaque entry.
pub(super) fn read_message(
    parsed: &mut ParsedBody<'_>,
    doc: &json::Index,
    index: usize,
    span: Span,
) -> Result<(), WireError> {
    let text = parsed.text;
    let (fields, role_name) = message_head(text, doc, span, index)?;
    let role = match &*role_name {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" | "function" => Role::Tool,
        other => return Err(malformed(index, format!("unknown role `{other}`"))),
    };
    let mut message = Message::text(role, String::new());
    let mut slot = Slot::default();
    read_content(
        text,
        doc,
        fields,
        index,
        &mut message,
        &mut slot,
        &mut parsed.existing_breakpoints,
    )?;
    if role == Role::Tool {
        message.tool_call_id =
            string_field(text, doc, fields, "tool_call_id", index)?.map(|(id, _)| id.into_owned());
        if role_name == "function" {
            message.tool_name =
                string_field(text, doc, fields, "name", index)?.map(|(name, _)| name.into_owned());
        }
    }
    if let Some((reasoning, reasoning_span)) =
        string_field(text, doc, fields, "reasoning_content", index)?
    {
        message.reasoning.push(reasoning.into_owned());
        slot.reasoning.push(reasoning_span);
    }
    if let Some(calls) =
        json::lookup(text, fields, "tool_calls").filter(|s| json::kind_of(text, *s) == Kind::Array)
    {
        for call in doc.elements(calls) {
            let call_fields = doc.members(call);
            let function = json::lookup(text, call_fields, "function")
                .filter(|f| json::kind_of(text, *f) == Kind::Object)
                .ok_or_else(|| malformed(index, "a tool call has no `function` object"))?;
            let id = string_field(text, doc, call_fields, "id", index)?
                .map(|(id, _)| id.into_owned())
                .unwrap_or_default();
            let function_fields = doc.members(function);
            let name = string_field(text, doc, function_fields, "name", index)?
                .map(|(n, _)| n.into_owned())
                .unwrap_or_default();
            let (arguments, args_span) = match json::lookup(text, function_fields, "arguments") {
                Some(s) if json::kind_of(text, s) == Kind::String => {
                    let decoded = doc
                        .string(text, s)
                        .map_err(|e| malformed(index, e.to_string()))?;
                    (decoded.into_owned(), Some(s))
                }
                // Some gateways send arguments as a raw object; keep it readable but fixed.
                Some(s) => (s.of(text).to_owned(), None),
                None => (String::new(), None),
            };
            match args_span {
                Some(s) => slot.args.push((s, ArgsEncoding::JsonString)),
                None => slot.args.push((Span::new(0, 0), ArgsEncoding::JsonString)),
            }
            message.tool_calls.push(ToolCall {
                id,
                name,
                arguments,
            });
        }
        // A call without a real span must never be spliced: drop all arg slots in that case.
        if slot.args.iter().any(|(s, _)| s.is_empty()) {
            slot.args.clear();
        }
    }
    parsed.messages.push(message);
    parsed.slots.push(slot);
    Ok(())
}

fn read_content(
    text: &str,
    doc: &json::Index,
    message_fields: &[json::Entry],
    index: usize,
    message: &mut Message,
    slot: &mut Slot,
    breakpoints: &mut usize,
) -> Result<(), WireError> {
    let Some(content) = json::lookup(text, message_fields, "content") else {
        message.rewritable = false;
        return Ok(());
    };
    match json::kind_of(text, content) {
        Kind::String => {
            message.content = doc
                .string(text, content)
                .map_err(|e| malformed(index, e.to_string()))?
                .into_owned();
            slot.content = Some(content);
        }
        Kind::Null => message.rewritable = false,
        Kind::Array => {
            let mut texts = Vec::new();
            let mut text_spans = Vec::new();
            let mut other_parts = 0;
            let mut last_part = None;
            for part in doc.elements(content) {
                last_part = Some(part);
                if json::kind_of(text, part) != Kind::Object {
                    other_parts += 1;
                    continue;
                }
                let part_fields = doc.members(part);
                if json::lookup(text, part_fields, "cache_control").is_some() {
                    message.cache_control = true;
                    *breakpoints += 1;
                }
                let is_text = string_field(text, doc, part_fields, "type", index)?
                    .is_some_and(|(t, _)| t == "text");
                match string_field(text, doc, part_fields, "text", index)? {
                    Some((part_text, span)) if is_text => {
                        texts.push(part_text);
                        text_spans.push(span);
                    }
                    _ => other_parts += 1,
                }
            }
            message.rewritable = texts.len() == 1 && other_parts == 0;
            message.content = join_texts(texts);
            if message.rewritable {
                slot.content = text_spans.first().copied();
            }
            if let Some(last) = last_part.filter(|p| json::kind_of(text, *p) == Kind::Object) {
                message.can_cache_control = true;
                slot.block_close = Some(last.end - 1);
            }
        }
        _ => {
            return Err(malformed(
                index,
                "`content` is neither a string, null nor an array",
            ));
        }
    }
    Ok(())
}
