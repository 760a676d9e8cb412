//! The prefix finder on Claude Code-shaped Messages bodies: what an agent's next turn does to
//! the one before (appends, touches the last message's breakpoint, compacts, reorders).

use super::{Common, Seen};
use crate::wire::{self, Dialect};

pub(crate) const SYSTEM: &str = r#"[{"type":"text","text":"You are Claude Code, Anthropic's official CLI for Claude."},{"type":"text","text":"Working directory: /repo\nIs git repo: yes","cache_control":{"type":"ephemeral"}}]"#;
pub(crate) const TOOLS: &str = r#"[{"name":"Bash","description":"Runs a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}},{"name":"Read","description":"Reads a file","input_schema":{"type":"object","properties":{"file_path":{"type":"string"}}}}]"#;

pub(crate) fn user(text: &str) -> String {
    format!(r#"{{"role":"user","content":[{{"type":"text","text":{text:?}}}]}}"#)
}

pub(crate) fn call(id: &str, command: &str) -> String {
    format!(
        r#"{{"role":"assistant","content":[{{"type":"text","text":"Let me look."}},{{"type":"tool_use","id":"{id}","name":"Bash","input":{{"command":{command:?}}}}}]}}"#
    )
}

pub(crate) fn result(id: &str, output: &str, breakpoint: bool) -> String {
    let cache = if breakpoint {
        r#","cache_control":{"type":"ephemeral"}"#
    } else {
        ""
    };
    format!(
        r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","content":{output:?}{cache}}}]}}"#
    )
}

/// A Messages body: model first (or after the messages), then the transcript, then metadata.
pub(crate) fn body(messages: &[String], model_first: bool) -> String {
    let messages = messages.join(",");
    let (before, after) = if model_first {
        (r#""model":"claude-sonnet-4-5","max_tokens":32000,"#, "")
    } else {
        ("", r#","model":"claude-sonnet-4-5","max_tokens":32000"#)
    };
    format!(
        r#"{{{before}"system":{SYSTEM},"tools":{TOOLS},"messages":[{messages}]{after},"metadata":{{"user_id":"user_abc_account_1_session_2"}},"stream":true}}"#
    )
}

/// Four messages, the last tool result carrying the turn's breakpoint, as Claude Code sends it.
pub(crate) fn history(breakpoint_on_last: bool) -> Vec<String> {
    vec![
        user("Fix the failing test in parser.rs"),
        call("toolu_01", "cargo test -p parser"),
        result(
            "toolu_01",
            "running 12 tests\ntest parse_empty ... FAILED\n\nfailures:\n  left: 0\n right: 1",
            false,
        ),
        result(
            "toolu_02",
            "pub fn parse(input: &str) -> usize {\n    0\n}",
            breakpoint_on_last,
        ),
    ]
}

fn seen(text: &str) -> Seen {
    let parsed = wire::parse(text.as_bytes(), Dialect::Anthropic).unwrap();
    Seen::of(text, parsed.messages_span())
}

fn common(last: &str, next: &str) -> Common {
    seen(last).common(next.as_bytes())
}

#[test]
fn a_new_turn_matches_every_message_it_appends_to() {
    let last = body(&history(false), true);
    let mut next = history(false);
    next.push(call("toolu_03", "cargo test -p parser"));
    next.push(result("toolu_03", "test result: ok. 12 passed", false));
    let common = common(&last, &body(&next, true));
    assert_eq!(
        (common.head_matches, common.matched, common.identical),
        (true, 4, false)
    );
}

#[test]
fn the_same_body_again_matches_whole() {
    let last = body(&history(true), true);
    let common = common(&last, &last);
    assert_eq!(
        (common.head_matches, common.matched, common.identical),
        (true, 4, true)
    );
}

#[test]
fn a_change_inside_a_message_ends_the_prefix_there() {
    let last = body(&history(false), true);
    let mut next = history(false);
    next[2] = next[2].replace("left: 0", "left: 2");
    assert_eq!(common(&last, &body(&next, true)).matched, 2);
}

#[test]
fn keys_reordered_before_the_messages_match_nothing() {
    let last = body(&history(false), true);
    let common = common(&last, &body(&history(false), false));
    assert_eq!((common.head_matches, common.matched), (false, 0));
}

#[test]
fn keys_reordered_inside_a_message_end_the_prefix_at_it() {
    let last = body(&history(false), true);
    let mut next = history(false);
    next[1] = r#"{"content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_01","name":"Bash","input":{"command":"cargo test -p parser"}}],"role":"assistant"}"#
        .to_owned();
    assert_eq!(common(&last, &body(&next, true)).matched, 1);
}

#[test]
fn a_message_removed_ends_the_prefix_where_it_was() {
    let last = body(&history(false), true);
    let mut next = history(false);
    next.remove(1);
    assert_eq!(common(&last, &body(&next, true)).matched, 1);
}

#[test]
fn a_moved_breakpoint_ends_the_prefix_at_the_message_it_left() {
    // Claude Code puts its last cache_control on the newest message: next turn, the message
    // that carried it loses it and the new last message gains it.
    let last = body(&history(true), true);
    let mut next = history(false);
    next.push(call("toolu_03", "cargo test -p parser"));
    next.push(result("toolu_03", "test result: ok. 12 passed", true));
    let common = common(&last, &body(&next, true));
    assert_eq!((common.head_matches, common.matched), (true, 3));
}

#[test]
fn a_body_shorter_than_the_last_turn_matches_what_it_holds() {
    let last = body(&history(false), true);
    // Compacted to its first two messages (the rest of the body follows sooner).
    let shorter = body(&history(false)[..2], true);
    let common = common(&last, &shorter);
    assert_eq!(
        (common.head_matches, common.matched, common.identical),
        (true, 2, false)
    );
    // Cut off inside the head: nothing matches, nothing panics.
    let cut = &last[..40];
    assert_eq!(seen(&last).common(cut.as_bytes()).matched, 0);
    assert!(!seen(&last).common(b"").head_matches);
}

#[test]
fn the_bytes_between_messages_are_part_of_the_match() {
    // `}, {` and `} ,{` put the next message at the same offset with the same bytes: only the
    // separator differs, and the match still ends there, so every byte it vouches for is equal.
    let base = body(&history(false), true);
    let between = r#"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_02""#;
    assert!(base.contains(between));
    let last = base.replacen(between, &between.replacen("},{", "}, {", 1), 1);
    let next = base.replacen(between, &between.replacen("},{", "} ,{", 1), 1);
    assert_eq!((last.len(), common(&last, &next).matched), (next.len(), 3));
}

#[test]
fn an_empty_transcript_matches_its_first_message_nowhere() {
    let empty = body(&[], true);
    let seen = seen(&empty);
    assert!(seen.is_empty());
    assert!(seen.common(empty.as_bytes()).identical);
    let first = body(&history(false)[..1], true);
    let common = seen.common(first.as_bytes());
    assert_eq!(
        (common.head_matches, common.matched, common.identical),
        (true, 0, false)
    );
}

/// A body laid out as both corpora's are: the tools after the messages.
fn tools_after(messages: &[String], tools: &str) -> String {
    format!(
        r#"{{"model":"claude-sonnet-4-5","system":{SYSTEM},"messages":[{}],"tools":{tools},"stream":true}}"#,
        messages.join(",")
    )
}

#[test]
fn the_keys_after_the_messages_are_compared_once_the_array_ends() {
    let array_end = |text: &str| {
        let parsed = wire::parse(text.as_bytes(), Dialect::Anthropic).unwrap();
        parsed.messages_span().end
    };
    let seen = seen(&tools_after(&history(false), TOOLS));
    let mut longer = history(false);
    longer.push(call("toolu_03", "cargo test -p parser"));
    let next = tools_after(&longer, TOOLS);
    assert_eq!(seen.common(next.as_bytes()).matched, 4);
    assert!(seen.same_after(next.as_bytes(), array_end(&next)));
    // A changed tool list is not history: the messages still match, what follows does not.
    let retooled = tools_after(
        &longer,
        &TOOLS.replace("Reads a file", "Reads a file or a directory"),
    );
    assert_eq!(seen.common(retooled.as_bytes()).matched, 4);
    assert!(!seen.same_after(retooled.as_bytes(), array_end(&retooled)));
}
