//! Learning from retries: a session stops cutting a tool's outputs lossily once the model shows
//! it needed what was cut.
//!
//! Two signals, both cheap and both unambiguous:
//! - the model re-issues a call (same tool, same arguments, a new call id) whose output the
//!   previous request carried cut: it could not work from what it was shown;
//! - the model expands the same marker a second time in a session: the cut keeps costing an
//!   expand round.
//!
//! Either puts the output's kind (`engine::tools::output_kind`: the tool, or for a shell tool the
//! program it ran, so one re-run `pytest` leaves `ls` alone) into the session's
//! `lossless_tools` with the index of the first message
//! the previous request did not have: from there on offloaders' cuts on its outputs are put
//! back by the pipeline's guard (skip reason `retried_after_compaction`), lossless repacking
//! still runs, and outputs before it keep what the components decide for them (so the cached
//! prefix never moves because of this, on this turn or any later one). The set lives in [`SessionState`], so it is
//! saved with the session and survives restarts and replicas like the tracker.

use std::collections::BTreeMap;

use engine::marker;
use engine::message::{Forwarded, Message, Role};

use crate::session::SessionState;

/// At most this many marker ids are remembered per session (the oldest half goes first).
const MAX_MARKERS: usize = 4096;

/// A call's identity without its id: tool and arguments.
fn call_key(tool: &str, arguments: &str) -> String {
    format!(
        "{:032x}",
        engine::tokens::content_key(&format!("{tool}\u{0}{arguments}"))
    )
}

/// Looks at the calls the model made since the previous request (the messages past its
/// length); each that re-issues a call whose output that request carried cut is a retry.
/// Returns how many there were.
pub fn detect(state: &mut SessionState, messages: &[Message]) -> u32 {
    let newest = messages
        .get(state.seen_messages..)
        .unwrap_or_default()
        .iter()
        .filter(|m| m.role == Role::Assistant);
    let mut retries = 0;
    for call in newest.flat_map(|m| &m.tool_calls) {
        let key = call_key(&call.name, &call.arguments);
        if state
            .cut_calls
            .get(&key)
            .is_some_and(|earlier| *earlier != call.id)
        {
            retries += 1;
            let from = state.frontier.max(state.seen_messages);
            let kind = engine::tools::output_kind(&call.name, Some(&call.arguments));
            state.lossless_tools.entry(kind).or_insert(from);
        }
    }
    retries
}

/// Remembers what the forwarded request cut: the calls behind the cut outputs it ends with (for
/// [`detect`]) and the output kind behind each marker id (for [`note_expand`]).
///
/// Only the messages `forwarded` changed are compared: the others left as they came, which on
/// a long session is most of the transcript.
pub fn remember(state: &mut SessionState, original: &[Message], forwarded: &Forwarded) {
    let mut cut_calls = BTreeMap::new();
    // "Right after": only the outputs the request ends with (the answers to the model's
    // latest calls) can be retried on the next turn. An agent re-running a test after editing
    // code, turns later, is working, not retrying.
    let newest = original.len() - original.iter().rev().take_while(|m| m.is_tool()).count();
    for (index, after) in forwarded.changed() {
        let index = *index;
        let Some(before) = original.get(index) else {
            continue;
        };
        if !after.is_tool() || before.content == after.content {
            continue;
        }
        let (Some(tool), Some(id)) = (&after.tool_name, &after.tool_call_id) else {
            continue;
        };
        let mut ids = marker::marker_ids(&after.content).peekable();
        if ids.peek().is_none() {
            continue;
        }
        let arguments = after.tool_arguments.as_deref().unwrap_or("");
        if index >= newest {
            cut_calls.insert(call_key(tool, arguments), id.clone());
        }
        if state.marker_tools.len() >= MAX_MARKERS {
            let keep: BTreeMap<String, String> = state
                .marker_tools
                .split_off(&middle_key(&state.marker_tools));
            state.marker_tools = keep;
        }
        let kind = engine::tools::output_kind(tool, Some(arguments));
        for marker in ids {
            state.restore.remember_marker(marker, id, index);
            // A marker carried over from the last turn is on record with this kind already:
            // looked up before a key and a kind are copied to insert it again.
            match state.marker_tools.get_mut(marker) {
                Some(known) if *known == kind => {}
                Some(known) => known.clone_from(&kind),
                None => {
                    state.marker_tools.insert(marker.to_owned(), kind.clone());
                }
            }
        }
    }
    state.cut_calls = cut_calls;
    state.seen_messages = original.len();
    state.frontier = state.frontier.max(original.len());
}

/// Any key from the middle of the map, so about half is dropped when it is full.
fn middle_key(map: &BTreeMap<String, String>) -> String {
    map.keys().nth(map.len() / 2).cloned().unwrap_or_default()
}

/// The model expanded marker `id`; a second expand of it in this session makes its tool
/// lossless. Returns whether it was a repeat (counted as a retry).
pub fn note_expand(state: &mut SessionState, id: &str) -> bool {
    if state.expanded.insert(id.to_owned()) {
        if state.expanded.len() > MAX_MARKERS {
            state.expanded.clear();
            state.expanded.insert(id.to_owned());
        }
        return false;
    }
    if let Some(tool) = state.marker_tools.get(id).cloned() {
        // The turn that carried the marker has run: its request's length is the first index
        // the next turn adds.
        let from = state.frontier;
        state.lossless_tools.entry(tool).or_insert(from);
    }
    true
}

/// The tools the pipeline holds to on this turn, shared without copying per component.
pub fn lossless(state: &SessionState) -> std::sync::Arc<BTreeMap<String, usize>> {
    std::sync::Arc::new(state.lossless_tools.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::message::ToolCall;

    fn call(id: &str, name: &str, args: &str) -> Message {
        Message {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: args.into(),
            }],
            ..Message::text(Role::Assistant, "")
        }
    }

    fn output(id: &str, name: &str, args: &str, content: &str) -> Message {
        Message {
            tool_arguments: Some(args.into()),
            ..Message::tool(id, name, content)
        }
    }

    #[test]
    fn a_reissued_call_after_a_cut_makes_its_tool_lossless() {
        let mut state = SessionState::default();
        let original = vec![
            Message::text(Role::User, "fix it"),
            call("c1", "bash", r#"{"cmd":"pytest"}"#),
            output("c1", "bash", r#"{"cmd":"pytest"}"#, "a long log"),
        ];
        let cut = original[2].with_content("a long [cut] <<cg:0123456789abcdef>>".into());
        let forwarded = Forwarded::new(original.len(), vec![(2, cut)]);
        assert_eq!(detect(&mut state, &original), 0);
        remember(&mut state, &original, &forwarded);
        assert_eq!(state.marker_tools["0123456789abcdef"], "bash:pytest");

        // The next turn: the same call with a new id is a retry; another call is not, and
        // neither is anything the previous request already held.
        let mut next = original.clone();
        next.insert(1, call("c0", "bash", r#"{"cmd":"pytest"}"#));
        next.truncate(3);
        next.push(output("c1", "bash", r#"{"cmd":"pytest"}"#, "a long log"));
        next.push(call("c2", "bash", r#"{"cmd":"pytest"}"#));
        next.push(call("c3", "read", r#"{"path":"a.py"}"#));
        assert_eq!(detect(&mut state, &next), 1);
        assert_eq!(
            state.lossless_tools.get("bash:pytest"),
            Some(&3),
            "from the first new message"
        );
        assert!(!state.lossless_tools.contains_key("read"));
        // The call that produced the cut output itself is not a retry of it.
        let mut fresh = SessionState::default();
        remember(&mut fresh, &original, &forwarded);
        assert_eq!(detect(&mut fresh, &original), 0);
    }

    #[test]
    fn a_marker_expanded_twice_makes_its_tool_lossless() {
        let mut state = SessionState::default();
        state
            .marker_tools
            .insert("0123456789abcdef".into(), "grep".into());
        assert!(!note_expand(&mut state, "0123456789abcdef"));
        assert!(state.lossless_tools.is_empty());
        assert!(note_expand(&mut state, "0123456789abcdef"));
        assert!(state.lossless_tools.contains_key("grep"));
    }
}
