//! Gemini `generateContent` bodies (gemini-cli, Google's SDKs, Vertex AI's Gemini routes): the
//! `contents` array becomes normalized messages.
//!
//! - `systemInstruction` (`{parts: [{text}]}`) becomes a leading `Role::System` message,
//!   rewritable in place when it is exactly one text part.
//! - A `user` content (or one with no `role`, which the API reads as the user's) gives one
//!   `Role::Tool` message per string member of each `functionResponse.response` object, in part
//!   order: gemini-cli puts a command's output or a file in `response.output`, so that string is
//!   what components compact, and the marker sits inside it. A response with no string member
//!   (nested objects only) is one tool message that is read and never rewritten. The content's
//!   text parts, if any, follow as one `Role::User` message.
//! - A `model` content is an assistant message: text parts are its text, `thought: true` parts
//!   its reasoning, `functionCall` parts its tool calls (arguments read as the raw `args` object).
//!   Nothing in a model content is rewritable once any of its parts carries a
//!   `thoughtSignature`: Gemini 3 refuses a request whose signed parts changed or moved, so they
//!   leave byte-identical. Arguments are never rewritten here for the same reason.
//! - Calls and responses pair by `id` when the client sends one (the API allows it), else by
//!   name in order within the preceding model content; a call without an id gets one made from
//!   its place (`name@content.part`), so `dedup` and the tool-name lookup still pair them.
//! - Any other part (`inlineData`, `fileData`, `executableCode`, a kind added next month) keeps
//!   its content's text non-rewritable and stays on the wire as it came; a content that cannot be
//!   read at all is one opaque entry, and the rest of the body is still compacted.
//! - Gemini has no `cache_control`: its implicit prefix cache needs no breakpoint, so no message
//!   can take one.

use super::json::{self, Kind, Span};
use super::{ParsedBody, Slot, WireError, join_texts, malformed, string_field};
use crate::message::{Message, Role, ToolCall};

pub(super) fn normalize(parsed: &mut ParsedBody<'_>, doc: &json::Index) -> Result<(), WireError> {
    let text = parsed.text;
    if let Some(system) = parsed.system_span {
        parsed.read_entry(None, system, |parsed| {
            let (message, slot) = read_system(text, doc, system)?;
            parsed.messages.push(message);
            parsed.slots.push(slot);
            Ok(())
        });
    }
    let mut contents = Contents {
        doc,
        pending: Vec::new(),
    };
    parsed.read_transcript(doc, |parsed, _, index, span| {
        contents.read_content(parsed, index, span)
    });
    Ok(())
}

fn read_system(text: &str, doc: &json::Index, system: Span) -> Result<(Message, Slot), WireError> {
    let fields = object(text, doc, system, 0, "`systemInstruction`")?;
    let parts = json::lookup(text, fields, "parts")
        .filter(|p| json::kind_of(text, *p) == Kind::Array)
        .ok_or_else(|| malformed(0, "`systemInstruction` has no `parts` array"))?;
    let mut texts = Texts::default();
    for part in doc.elements(parts) {
        texts.read(text, doc, object(text, doc, part, 0, "a part")?, 0)?;
    }
    Ok(texts.into_message(Role::System))
}

/// The members of an object, or why `what` is not one.
fn object<'i>(
    text: &str,
    doc: &'i json::Index,
    span: Span,
    index: usize,
    what: &str,
) -> Result<&'i [json::Entry], WireError> {
    if json::kind_of(text, span) != Kind::Object {
        return Err(malformed(index, format!("{what} is not an object")));
    }
    Ok(doc.members(span))
}

/// The text parts of one content as they are read: the message's text is all of them, and it
/// is rewritable in place only as exactly one part that is nothing but `text`.
#[derive(Default)]
struct Texts {
    texts: Vec<String>,
    spans: Vec<Span>,
    /// Parts that are not plain text (an image, a signed text, a part of a kind sluice does
    /// not know).
    others: usize,
}

impl Texts {
    /// Reads one part that is not a call, a response or a thought.
    fn read(
        &mut self,
        text: &str,
        doc: &json::Index,
        fields: &[json::Entry],
        index: usize,
    ) -> Result<(), WireError> {
        match string_field(text, doc, fields, "text", index)? {
            Some((value, span)) => {
                // A text part with anything beside `text` (a signature) is not plain.
                if fields.len() != 1 {
                    self.others += 1;
                }
                self.texts.push(value.into_owned());
                self.spans.push(span);
            }
            None => self.others += 1,
        }
        Ok(())
    }

    fn into_message(self, role: Role) -> (Message, Slot) {
        let mut message = Message::text(role, String::new());
        let mut slot = Slot::default();
        message.rewritable = self.texts.len() == 1 && self.others == 0;
        if message.rewritable {
            slot.content = self.spans.first().copied();
        }
        message.content = join_texts(self.texts);
        (message, slot)
    }
}

/// Reads `contents` in order, pairing each response with the call it answers.
struct Contents<'d> {
    doc: &'d json::Index,
    /// Calls of the latest model content not yet answered: (name, id).
    pending: Vec<(String, String)>,
}

impl Contents<'_> {
    fn read_content(
        &mut self,
        parsed: &mut ParsedBody<'_>,
        index: usize,
        span: Span,
    ) -> Result<(), WireError> {
        let doc = self.doc;
        let text = parsed.text;
        let fields = object(text, doc, span, index, "a content")?;
        let role = match string_field(text, doc, fields, "role", index)? {
            None => Role::User,
            Some((role, _)) => match &*role {
                "user" => Role::User,
                "model" => Role::Assistant,
                other => return Err(malformed(index, format!("unknown role `{other}`"))),
            },
        };
        let parts =
            json::lookup(text, fields, "parts").ok_or_else(|| malformed(index, "no `parts`"))?;
        if json::kind_of(text, parts) != Kind::Array {
            return Err(malformed(index, "`parts` is not an array"));
        }
        match role {
            Role::Assistant => {
                self.pending.clear();
                self.read_model(parsed, index, parts)
            }
            _ => self.read_user(parsed, index, parts),
        }
    }

    fn read_model(
        &mut self,
        parsed: &mut ParsedBody<'_>,
        index: usize,
        parts: Span,
    ) -> Result<(), WireError> {
        let doc = self.doc;
        let text = parsed.text;
        let (mut texts, mut calls, mut reasoning) = (Texts::default(), Vec::new(), Vec::new());
        let mut signed = false;
        for (at, part) in doc.elements(parts).enumerate() {
            let fields = object(text, doc, part, index, "a part")?;
            signed |= json::lookup(text, fields, "thoughtSignature").is_some();
            let thought =
                json::lookup(text, fields, "thought").is_some_and(|t| t.of(text) == "true");
            if let Some(call) = json::lookup(text, fields, "functionCall") {
                let call = read_call(text, doc, call, index, at)?;
                self.pending.push((call.name.clone(), call.id.clone()));
                calls.push(call);
            } else if thought {
                if let Some((value, _)) = string_field(text, doc, fields, "text", index)? {
                    reasoning.push(value.into_owned());
                }
            } else {
                texts.read(text, doc, fields, index)?;
            }
        }
        let (mut message, mut slot) = texts.into_message(Role::Assistant);
        if signed {
            message.rewritable = false;
            slot.content = None;
        }
        message.tool_calls = calls;
        message.reasoning = reasoning;
        parsed.messages.push(message);
        parsed.slots.push(slot);
        Ok(())
    }

    fn read_user(
        &mut self,
        parsed: &mut ParsedBody<'_>,
        index: usize,
        parts: Span,
    ) -> Result<(), WireError> {
        let doc = self.doc;
        let text = parsed.text;
        let mut texts = Texts::default();
        let mut own_parts = false;
        for part in doc.elements(parts) {
            let fields = object(text, doc, part, index, "a part")?;
            if let Some(response) = json::lookup(text, fields, "functionResponse") {
                self.read_response(parsed, index, response)?;
            } else {
                own_parts = true;
                texts.read(text, doc, fields, index)?;
            }
        }
        if own_parts {
            let (message, slot) = texts.into_message(Role::User);
            parsed.messages.push(message);
            parsed.slots.push(slot);
        }
        Ok(())
    }

    /// One `functionResponse` part: a tool message per string member of its `response`.
    fn read_response(
        &mut self,
        parsed: &mut ParsedBody<'_>,
        index: usize,
        response: Span,
    ) -> Result<(), WireError> {
        let doc = self.doc;
        let text = parsed.text;
        let fields = object(text, doc, response, index, "`functionResponse`")?;
        let name = string_field(text, doc, fields, "name", index)?.map(|(n, _)| n.into_owned());
        let id = match string_field(text, doc, fields, "id", index)? {
            Some((id, _)) => {
                self.pending.retain(|(_, call)| *call != id);
                Some(id.into_owned())
            }
            None => name.as_ref().and_then(|name| {
                let at = self.pending.iter().position(|(call, _)| call == name)?;
                Some(self.pending.remove(at).1)
            }),
        };
        let template = Message {
            tool_call_id: id,
            tool_name: name,
            ..Message::text(Role::Tool, String::new())
        };
        let first = parsed.messages.len();
        if let Some(body) = json::lookup(text, fields, "response")
            .filter(|body| json::kind_of(text, *body) == Kind::Object)
        {
            for member in doc.members(body) {
                if json::kind_of(text, member.value) != Kind::String {
                    continue;
                }
                let value = doc
                    .string(text, member.value)
                    .map_err(|e| malformed(index, e.to_string()))?;
                let is_error = json::key_is(text, member.key, "error");
                parsed.messages.push(Message {
                    content: value.into_owned(),
                    is_error,
                    ..template.clone()
                });
                parsed.slots.push(Slot {
                    content: Some(member.value),
                    ..Slot::default()
                });
            }
        }
        if parsed.messages.len() == first {
            // No string to read (nested objects, parts): the call keeps an output the components
            // can see but never rewrite.
            parsed.messages.push(Message {
                rewritable: false,
                ..template
            });
            parsed.slots.push(Slot::default());
        }
        Ok(())
    }
}

/// One `functionCall` part: its id (made from its place when the client sent none), name and
/// raw `args`.
fn read_call(
    text: &str,
    doc: &json::Index,
    call: Span,
    index: usize,
    at: usize,
) -> Result<ToolCall, WireError> {
    let fields = object(text, doc, call, index, "`functionCall`")?;
    let name = string_field(text, doc, fields, "name", index)?
        .map(|(n, _)| n.into_owned())
        .unwrap_or_default();
    let id = string_field(text, doc, fields, "id", index)?
        .map_or_else(|| format!("{name}@{index}.{at}"), |(id, _)| id.into_owned());
    let arguments = json::lookup(text, fields, "args")
        .map(|s| s.of(text).to_owned())
        .unwrap_or_default();
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
}
