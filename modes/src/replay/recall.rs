//! Whether a compacted request still had what the model's answer used: the identifiers the
//! answer names that earlier tool outputs carried, visible or one expand away, and the expand
//! round the answer needed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use engine::marker;
use engine::message::{Message, Role};
use engine::store::Store;
use regex::Regex;

use super::bill::Billable;
use super::{Bill, ExpandAsk, Recall};

/// Tokens the model's expand call itself takes in the continuation (name, id, framing).
const EXPAND_CALL_TOKENS: usize = 24;

fn identifier() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // Paths, dotted or snake/camel symbols, error names, numbers of 3+ digits.
        Regex::new(
            r"(?:[\w.-]*/[\w./-]*\w)|(?:\b[A-Za-z_]\w*(?:\.\w+)+\b)|(?:\b[a-z]+_\w+\b)|(?:\b[a-z]+[A-Z]\w*\b)|(?:\b\w*(?:Error|Exception)\b)|(?:\b\d{3,}\b)",
        )
        .expect("identifier regex is valid")
    })
}

fn identifiers(text: &str) -> BTreeSet<&str> {
    identifier()
        .find_iter(text)
        .map(|m| m.as_str())
        .filter(|s| s.len() >= 3)
        .collect()
}

/// The expand round an answer needed: what it is billed, and the markers it expanded.
pub(super) struct Round {
    pub(super) bill: Bill,
    /// Tokens of the originals (or excerpts) it restored, without the model's calls: what the
    /// proxy's expand loop counts as restored (`wasted_tokens`).
    pub(super) restored: usize,
    pub(super) markers: Vec<String>,
}

/// Where the identifiers of `answer` that earlier tool outputs carried are in `forwarded`, and
/// the expand round the answer needed: the originals (each once) that held the identifiers only
/// a marker kept.
pub(super) fn recall(
    answer: &str,
    original: &[Message],
    request: &Billable,
    store: &dyn Store,
    session: &str,
    ask: ExpandAsk,
) -> (Recall, Option<Round>) {
    let forwarded = &request.messages;
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for m in original.iter().filter(|m| m.is_tool()) {
        seen.extend(identifiers(&m.content));
    }
    let visible_text: String = forwarded
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let stashed: Vec<(&str, Arc<str>)> = forwarded
        .iter()
        .flat_map(|m| marker::marker_ids(&m.content))
        .filter_map(|id| Some((id, store.resolve(session, id)?)))
        .collect();
    let mut r = Recall::default();
    // Each original needed, with the identifiers the answer needed from it.
    let mut needed: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for id in identifiers(answer)
        .into_iter()
        .filter(|id| seen.contains(id))
    {
        r.referenced += 1;
        if visible_text.contains(id) {
            r.visible += 1;
        } else if let Some(at) = stashed.iter().position(|(_, s)| s.contains(id)) {
            r.behind_marker += 1;
            needed.entry(at).or_default().push(id);
        }
    }
    let round = (!needed.is_empty()).then(|| {
        // The round re-sends the whole request: tools, system prompt and messages.
        let prompt = request.tokens();
        // Each call's restored tokens; the bill adds the call itself to each.
        let parts: Vec<usize> = needed
            .iter()
            .flat_map(|(&i, ids)| match ask {
                ExpandAsk::Whole => vec![engine::tokens::count(&stashed[i].1)],
                ExpandAsk::Pattern => ids
                    .iter()
                    .map(|id| {
                        let part = engine::way_back::Ask::parse(Some(id), None);
                        engine::tokens::count(&engine::way_back::excerpt(&stashed[i].1, &part))
                    })
                    .collect(),
            })
            .collect();
        let restored: usize = parts.iter().sum();
        let written = restored + parts.len() * EXPAND_CALL_TOKENS;
        Round {
            bill: Bill {
                content_tokens: prompt + written,
                cache_read: prompt,
                cache_write: written,
                fresh: 0,
            },
            restored,
            markers: needed.keys().map(|&i| stashed[i].0.to_owned()).collect(),
        }
    });
    (r, round)
}

/// The assistant message that answered a turn of `len` messages, with its call arguments.
pub(super) fn answer_after(full: &[Message], len: usize) -> Option<String> {
    full.get(len)
        .filter(|m| m.role == Role::Assistant)
        .map(|m| {
            let calls: Vec<&str> = m.tool_calls.iter().map(|c| c.arguments.as_str()).collect();
            format!("{}\n{}", m.content, calls.join("\n"))
        })
}
