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
