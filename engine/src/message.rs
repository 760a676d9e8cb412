//! The normalized message model every component reads and rewrites, whatever the wire dialect.
//!
//! Components see OpenAI-shaped messages: tool outputs are `Role::Tool` messages with text
//! content. Anthropic `tool_result` blocks become synthetic tool messages (see `wire::anthropic`).
//! The wire layer keeps a private slot map from each message back to its exact bytes, so only the
//! fields below that a component changes are spliced back; everything else leaves byte-identical.

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One tool call an assistant message makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The call's arguments as JSON text: OpenAI's `arguments` string decoded, or Anthropic's
    /// `input` object verbatim.
    pub arguments: String,
}

/// A normalized message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    /// The model-visible text. For block content this is the text blocks joined with `\n`.
    pub content: String,
    /// Whether `content` maps to exactly one wire string, so a change to it can be spliced back.
    /// Multi-part and non-text content is never flattened: a change to it is discarded.
    pub rewritable: bool,
    /// For tool messages: the id of the call this output answers.
    pub tool_call_id: Option<String>,
    /// For tool messages: the name of the tool that produced it, resolved from the call.
    pub tool_name: Option<String>,
    /// For tool messages: the arguments of the call that produced it, resolved from the call.
    pub tool_arguments: Option<String>,
    /// For assistant messages: the calls it makes.
    pub tool_calls: Vec<ToolCall>,
    /// For tool messages: the provider marked the output as an error (`is_error`).
    pub is_error: bool,
    /// Reasoning or thinking text the message carries, one entry per block.
    pub reasoning: Vec<String>,
    /// Whether the message (or its tool_result block) carries a `cache_control` breakpoint.
    pub cache_control: bool,
    /// Whether a breakpoint can be added on the wire (the message has block content).
    pub can_cache_control: bool,
    /// A breakpoint this message gains asks for the one-hour cache (`"ttl":"1h"`). Only read
    /// when `cache_control` turns on; a caller's own breakpoint is never rewritten.
    pub cache_ttl_1h: bool,
}

impl Message {
    /// A plain text message, rewritable, with no tool metadata. Used by tests and by synthetic
    /// messages a host injects.
    pub fn text(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            rewritable: true,
            tool_call_id: None,
            tool_name: None,
            tool_arguments: None,
            tool_calls: Vec::new(),
            is_error: false,
            reasoning: Vec::new(),
            cache_control: false,
            can_cache_control: false,
            cache_ttl_1h: false,
        }
    }

    /// A tool output answering `call_id`.
    pub fn tool(call_id: &str, name: &str, content: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(call_id.to_owned()),
            tool_name: Some(name.to_owned()),
            ..Message::text(Role::Tool, content)
        }
    }

    /// This message with `content` in place of its own: every other field copied, the old
    /// content not (an offload replaces outputs of up to megabytes).
    pub fn with_content(&self, content: String) -> Message {
        Message {
            role: self.role,
            content,
            rewritable: self.rewritable,
            tool_call_id: self.tool_call_id.clone(),
            tool_name: self.tool_name.clone(),
            tool_arguments: self.tool_arguments.clone(),
            tool_calls: self.tool_calls.clone(),
            is_error: self.is_error,
            reasoning: self.reasoning.clone(),
            cache_control: self.cache_control,
            can_cache_control: self.can_cache_control,
            cache_ttl_1h: self.cache_ttl_1h,
        }
    }

    /// What tells the message apart besides its role and content, in the order the hashes that
    /// identify it (the tracker's fingerprint, a freeze key's prefix) fold it: its call id,
    /// each call's id, name and arguments, then its reasoning.
    pub fn identity_texts(&self) -> impl Iterator<Item = &str> {
        self.tool_call_id
            .as_deref()
            .into_iter()
            .chain(
                self.tool_calls
                    .iter()
                    .flat_map(|c| [c.id.as_str(), c.name.as_str(), c.arguments.as_str()]),
            )
            .chain(self.reasoning.iter().map(String::as_str))
    }

    pub fn is_tool(&self) -> bool {
        self.role == Role::Tool
    }

    /// Every piece of text the model reads from this message, in order. Token counts are taken
    /// over these pieces, so a change to reasoning or call arguments counts as much as content.
    pub fn visible_texts(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.content.as_str())
            .chain(self.reasoning.iter().map(String::as_str))
            .chain(self.tool_calls.iter().map(|c| c.arguments.as_str()))
    }
}

/// The messages as a run forwards them, told as what differs from the originals it was given:
/// the messages a component changed, by index. Every other message is its original.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// How many messages the transcript holds.
    len: usize,
    /// Each changed message with its index, ascending.
    changed: Vec<(usize, Message)>,
}

impl Forwarded {
    /// `changed`, each message with its index, in a transcript of `len` messages.
    pub fn new(len: usize, mut changed: Vec<(usize, Message)>) -> Forwarded {
        changed.sort_by_key(|(index, _)| *index);
        Forwarded { len, changed }
    }

    /// Nothing changed in a transcript of `len` messages.
    pub fn unchanged(len: usize) -> Forwarded {
        Forwarded {
            len,
            changed: Vec::new(),
        }
    }

    /// How many messages were forwarded.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The changed messages with their indices, ascending.
    pub fn changed(&self) -> &[(usize, Message)] {
        &self.changed
    }

    /// Message `index` as forwarded, `originals` being what the run was given; `None` past
    /// [`Forwarded::len`] (a run that failed forwarded the body untouched and reports none).
    pub fn get<'m>(&'m self, originals: &'m [Message], index: usize) -> Option<&'m Message> {
        if index >= self.len {
            return None;
        }
        match self.changed.binary_search_by_key(&index, |(i, _)| *i) {
            Ok(at) => Some(&self.changed[at].1),
            Err(_) => originals.get(index),
        }
    }

    /// Every message as forwarded, in order.
    pub fn iter<'m>(&'m self, originals: &'m [Message]) -> impl Iterator<Item = &'m Message> {
        (0..self.len.min(originals.len())).filter_map(move |i| self.get(originals, i))
    }

    /// Every message as forwarded, copied (replay and tests; a turn never needs them all).
    pub fn to_vec(&self, originals: &[Message]) -> Vec<Message> {
        self.iter(originals).cloned().collect()
    }

    /// Writes the changed messages over `messages`, which held the originals.
    pub fn write_into(self, messages: &mut [Message]) {
        for (index, message) in self.changed {
            if let Some(slot) = messages.get_mut(index) {
                *slot = message;
            }
        }
    }

    /// Forwards message `index` as its original after all (the wire could not express the
    /// change).
    pub fn revert(&mut self, index: usize) {
        self.changed.retain(|(i, _)| *i != index);
    }
}
