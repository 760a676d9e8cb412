//! The cost model's bill for one request: the cached prefix read (from the start of the
//! request, `tools` first), the rest written.

use engine::message::Message;
use engine::pipeline::message_tokens;
use engine::wire::{self, Dialect};

use super::Bill;

/// A request as the cost model bills it: the `tools` value (the start of the provider's cached
/// prefix, before the system prompt and the messages), then the messages.
#[derive(Debug, Clone, Default)]
pub(super) struct Billable {
    /// The `tools` value's bytes, when the body has one.
    tools: Option<String>,
    tools_tokens: usize,
    pub(super) messages: Vec<Message>,
}

impl Billable {
    pub(super) fn of(body: &[u8], messages: Vec<Message>) -> Billable {
        let tools = std::str::from_utf8(body).ok().and_then(|text| {
            let root = engine::wire::json::parse_document(text).ok()?;
            engine::wire::json::get(text, root, "tools").map(|s| s.of(text).to_owned())
        });
        let tools_tokens = tools.as_deref().map_or(0, engine::tokens::count);
        Billable {
            tools,
            tools_tokens,
            messages,
        }
    }

    /// Every token of the request: tools, system prompt, messages.
    pub(super) fn tokens(&self) -> usize {
        self.tools_tokens + self.messages.iter().map(message_tokens).sum::<usize>()
    }
}

/// Bills `now` given what the previous turn sent. The cached prefix runs from the start of the
/// request: a `tools` value that changed (the expand tool declared on a later turn) caches
/// nothing after it.
pub(super) fn bill(now: &Billable, previous: Option<&Billable>, warm: bool) -> Bill {
    let counts: Vec<usize> = now.messages.iter().map(message_tokens).collect();
    let total = now.tools_tokens + counts.iter().sum::<usize>();
    let read = match previous {
        Some(prev) if warm && prev.tools == now.tools => {
            let prefix = now
                .messages
                .iter()
                .zip(&prev.messages)
                .take_while(|(a, b)| a == b)
                .count();
            now.tools_tokens + counts[..prefix].iter().sum::<usize>()
        }
        _ => 0,
    };
    Bill {
        content_tokens: total,
        cache_read: read,
        cache_write: total - read,
        fresh: 0,
    }
}

/// What a provider that caches as the cost model assumes reports for `forwarded`, sent within
/// the cache's lifetime after `previous` in the same session: the cached prefix read, the rest
/// new, in the dialect's own terms. Anthropic reports the new part as a cache write; OpenAI and
/// Gemini report no writes, so theirs is fresh input, as the proxy reads it off their replies.
/// Replay settles each turn's reply with it, and the parity test's mock provider reports it, so
/// both sides of that test judge a session on the same numbers. `None` for a body that does not
/// parse.
pub fn billed_usage(
    forwarded: &[u8],
    previous: Option<&[u8]>,
    dialect: Dialect,
) -> Option<crate::tracker::CacheUsage> {
    let billable = |body: &[u8]| {
        wire::parse(body, dialect)
            .ok()
            .map(|parsed| Billable::of(body, parsed.messages().to_vec()))
    };
    let now = billable(forwarded)?;
    let previous = previous.and_then(billable);
    let bill = bill(&now, previous.as_ref(), previous.is_some());
    let (read, new) = (bill.cache_read as u64, bill.cache_write as u64);
    Some(match dialect {
        Dialect::Anthropic => crate::tracker::CacheUsage {
            read,
            written: Some(new),
            fresh: 0,
        },
        Dialect::OpenAi | Dialect::Responses | Dialect::Gemini => crate::tracker::CacheUsage {
            read,
            written: None,
            fresh: new,
        },
    })
}
