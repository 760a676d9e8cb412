//! Freeze and replay: the key a decision is frozen under (component, position, the prefix
//! before it, the content) and the replay of earlier decisions before a component runs.

use super::{ApplyCx, Freeze, StashKey, Transcript};
use crate::gate;
use crate::marker;
use crate::message::Message;
use crate::tokens;

/// What a freeze is keyed on: the content, or for a whole-message component every text the
/// model reads of the message (content, reasoning, call arguments).
pub(super) fn identity(message: &Message, whole: bool) -> std::borrow::Cow<'_, str> {
    if whole {
        let texts: Vec<&str> = message.visible_texts().collect();
        texts.join("\u{1f}").into()
    } else {
        message.content.as_str().into()
    }
}

/// The recorded form of a whole-message decision.
pub(super) fn frozen_value(message: &Message) -> String {
    serde_json::json!({
        "content": message.content,
        "reasoning": message.reasoning,
        "arguments": message.tool_calls.iter().map(|c| c.arguments.as_str()).collect::<Vec<_>>(),
    })
    .to_string()
}

/// Applies a recorded whole-message decision; false when it does not fit the message.
pub(super) fn apply_frozen(message: &mut Message, value: &str) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(value) else {
        return false;
    };
    let strings = |key: &str| -> Option<Vec<String>> {
        v.get(key)?
            .as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let (Some(content), Some(reasoning), Some(arguments)) = (
        v.get("content").and_then(|c| c.as_str()),
        strings("reasoning"),
        strings("arguments"),
    ) else {
        return false;
    };
    if reasoning.len() != message.reasoning.len() || arguments.len() != message.tool_calls.len() {
        return false;
    }
    content.clone_into(&mut message.content);
    message.reasoning = reasoning;
    for (call, args) in message.tool_calls.iter_mut().zip(arguments) {
        call.arguments = args;
    }
    true
}

/// Running hashes of a transcript: entry `i` covers messages `0..i` as the agent sent them
/// (role, text, call ids, names and arguments, reasoning), which never change from turn to turn.
/// `content` holds each original's content hash, already computed for the run.
pub(super) fn prefix_hashes(originals: &[Message], content: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(originals.len() + 1);
    let mut h = 0x243f_6a88_85a3_08d3_u64;
    let mix = |h: u64, x: u64| (h.rotate_left(17) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (m, &content_hash) in originals.iter().zip(content) {
        out.push(h);
        h = mix(h, tokens::content_hash(m.role.as_str()));
        h = mix(h, content_hash);
        h = m
            .identity_texts()
            .fold(h, |h, text| mix(h, tokens::content_hash(text)));
    }
    out.push(h);
    out
}

/// The replay key of `component`'s decision on the message at `index` holding `content`.
///
/// Position is part of it: whether a history-rewriting component acts depends on where a
/// message sits (mask keeps the newest outputs, dedup keeps the first copy), so a decision made
/// for one copy of a text must not replay onto another copy elsewhere. Transcripts only grow, so
/// a message keeps its index from turn to turn; one that moved (an edited history) is past the
/// point where the provider's cache diverged anyway. So is the hash of everything before it
/// (`prefix`): another transcript under the same session key (a subagent) with the same text
/// at the same index is a different message, and gets none of this one's decisions.
pub(super) fn freeze_key(component: &str, index: usize, prefix: u64, content: &str) -> String {
    format!(
        "frz:{component}:{index}:{prefix:016x}:{:032x}",
        tokens::content_key(content)
    )
}

/// Replays `name`'s earlier decisions onto `messages` and books what it finds in `cx`.
/// Returns the keys of the originals the replayed markers name (each checked or re-stashed, so
/// a replayed marker always resolves).
pub(super) fn reapply_frozen(
    name: &str,
    freeze: Freeze,
    whole: bool,
    repairable: bool,
    messages: &mut Transcript<'_, '_>,
    cx: &mut ApplyCx<'_>,
) -> Vec<StashKey> {
    let (store, session) = (cx.run.store.clone(), cx.run.session.clone());
    let mut keys = Vec::new();
    for index in 0..messages.len() {
        let message = &messages[index];
        let candidate = if whole {
            message.visible_texts().all(|t| !marker::contains_marker(t))
        } else {
            message.is_tool() && message.rewritable && !marker::contains_marker(&message.content)
        };
        if !candidate {
            continue;
        }
        let key = freeze_key(name, index, cx.prefix_at(index), &identity(message, whole));
        let Some(replacement) = store.get_frozen(&session, &key) else {
            cx.frozen.misses += 1;
            if store.was_lost(&session, &key) {
                cx.frozen.dropped += 1;
                if freeze == Freeze::Rederivable && repairable {
                    cx.repair.push(index);
                }
            }
            cx.fresh.push((index, key));
            continue;
        };
        // Replay also refreshes the originals its markers name: a marker that no longer
        // resolves would turn a lossless offload lossy.
        let mut named = Vec::new();
        let restored = marker::marker_ids(&replacement).all(|id| {
            if store.resolve(&session, id).is_none() {
                let original = std::iter::once(cx.wire_original(index))
                    .flatten()
                    .chain(message.visible_texts())
                    .find(|c| marker::stash_id(c) == id);
                if original.is_none_or(|o| store.stash(&session, id, o).is_err()) {
                    return false;
                }
            }
            named.push(StashKey { id: id.to_owned() });
            true
        });
        if !restored {
            // Forwarding the original flips the cached prefix once; forwarding a marker that
            // resolves to nothing would lose content. Losing nothing wins.
            cx.gate(gate::FREEZE_ORIGINAL_UNAVAILABLE);
            cx.frozen.dropped += 1;
            continue;
        }
        if whole {
            if !apply_frozen(messages.get_mut(index), &replacement) {
                cx.gate(gate::FREEZE_UNREADABLE);
                continue;
            }
        } else {
            messages.set_content(index, replacement.to_string());
        }
        cx.frozen.hits += 1;
        cx.reapplied.push(index);
        cx.reapplied_as.push((index, key, messages[index].clone()));
        keys.extend(named);
    }
    keys
}
