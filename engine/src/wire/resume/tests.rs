//! The resumed parse against the whole one, on Claude Code-shaped Messages bodies and chat
//! completions bodies: every turn an agent sends reads the same either way.

use super::*;
use crate::wire::prefix::tests::{SYSTEM, TOOLS, body, call, history, result, user};
use crate::wire::{self, Mention, parse_text};

/// What a live turn leaves: its digests were asked for (the tracker and the pipeline do).
fn continuation(text: &str, dialect: Dialect) -> Continuation {
    let parsed = parse_text(text, dialect).unwrap();
    parsed.digests();
    let _ = Mention::ALL.map(|m| parsed.mentions(m));
    parsed.into_continuation(None)
}

/// Resumes `next` from `last` and checks it reads as the whole parse does; the entries kept.
fn resumed(last: &str, next: &str, dialect: Dialect) -> Option<usize> {
    // The shared messages' hashes are carried over, the rest computed.
    let Resumed { parsed, kept, seen } =
        parse_continuing(next, dialect, continuation(last, dialect))?;
    let whole = parse_text(next, dialect).unwrap();
    assert_eq!(parsed, whole);
    let (digests, full) = (parsed.digests(), whole.digests());
    assert_eq!(digests.content, full.content);
    assert_eq!(digests.marked, full.marked);
    // Counts are carried for the shared messages; the rest are left to the run.
    assert_eq!(digests.tokens.len(), full.tokens.len());
    for (i, (&n, &whole_n)) in digests.tokens.iter().zip(full.tokens).enumerate() {
        assert!(
            n == whole_n || n == UNCOUNTED,
            "message {i}: {n} against {whole_n}"
        );
    }
    // The mentions the tracker looks for, searched past the shared bytes only.
    for mention in Mention::ALL {
        assert_eq!(
            parsed.mentions(mention),
            whole.mentions(mention),
            "{mention:?}"
        );
    }
    // And what it leaves for the turn after is what a whole parse leaves, counts aside.
    let left = parsed.into_continuation(Some((&seen, kept)));
    assert_eq!(
        counts_aside(&format!("{left:?}")),
        counts_aside(&format!("{:?}", continuation(next, dialect)))
    );
    Some(kept)
}

/// A continuation's `Debug` without its token counts.
fn counts_aside(debug: &str) -> String {
    let at = debug
        .find("tokens: ")
        .expect("a continuation shows its counts");
    let end = at + debug[at..].find(']').map_or(0, |e| e + 1);
    format!("{}{}", &debug[..at], &debug[end..])
}

#[test]
fn a_new_turn_reads_only_what_it_appends() {
    let last = body(&history(false), true);
    let mut next = history(false);
    next.push(call("toolu_03", "cargo test -p parser"));
    next.push(result("toolu_03", "test result: ok. 12 passed", false));
    assert_eq!(
        resumed(&last, &body(&next, true), Dialect::Anthropic),
        Some(4)
    );
}

#[test]
fn a_moved_breakpoint_rereads_the_message_it_left() {
    let last = body(&history(true), true);
    let mut next = history(false);
    next.push(call("toolu_03", "cargo test -p parser"));
    next.push(result("toolu_03", "test result: ok. 12 passed", true));
    let next = body(&next, true);
    assert_eq!(resumed(&last, &next, Dialect::Anthropic), Some(3));
    // Breakpoints are counted as on the wire: the system's, and the new last message's.
    let parsed = parse_continuing(
        &next,
        Dialect::Anthropic,
        continuation(&last, Dialect::Anthropic),
    )
    .unwrap()
    .parsed;
    assert_eq!(parsed.existing_breakpoints(), 2);
}

#[test]
fn a_retry_reads_nothing_again() {
    let last = body(&history(true), true);
    assert_eq!(resumed(&last, &last, Dialect::Anthropic), Some(4));
}

#[test]
fn an_edited_history_rereads_from_the_edit() {
    // An agent's own compaction: the second message summarized, the rest kept.
    let last = body(&history(false), true);
    let mut next = history(false);
    next[1] = user("Summary: ran the parser tests, one failed.");
    assert_eq!(
        resumed(&last, &body(&next, true), Dialect::Anthropic),
        Some(1)
    );
}

#[test]
fn a_changed_head_is_read_whole() {
    let last = body(&history(false), true);
    // Keys reordered before the transcript: no offset holds.
    let reordered = body(&history(false), false);
    assert_eq!(resumed(&last, &reordered, Dialect::Anthropic), None);
}

/// Claude Code's key order: the system prompt after the transcript.
fn late_system(messages: &[String], system: &str) -> String {
    format!(
        r#"{{"model":"m","messages":[{}],"system":{system},"tools":{TOOLS},"stream":true}}"#,
        messages.join(",")
    )
}

#[test]
fn a_system_prompt_after_the_messages_is_read_fresh() {
    let mut longer = history(false);
    longer.push(user("and the docs"));
    let last = late_system(&history(false), SYSTEM);
    assert_eq!(
        resumed(&last, &late_system(&longer, SYSTEM), Dialect::Anthropic),
        Some(4)
    );
    // Its breakpoint moved off, its text changed: counted and read as the whole parse does.
    let changed = SYSTEM
        .replace(r#","cache_control":{"type":"ephemeral"}"#, "")
        .replace("/repo", "/repo/sub");
    assert_eq!(
        resumed(&last, &late_system(&longer, &changed), Dialect::Anthropic),
        Some(4)
    );
    // One it cannot read is opaque, and the entries after it keep their places.
    let unreadable = r#"[{"type":"text","text":"x"},7]"#;
    assert_eq!(
        resumed(&last, &late_system(&longer, unreadable), Dialect::Anthropic),
        Some(4)
    );
    // Dropped altogether, the messages no longer line up: read whole.
    let none = format!(
        r#"{{"model":"m","messages":[{}],"tools":{TOOLS}}}"#,
        longer.join(",")
    );
    assert_eq!(resumed(&last, &none, Dialect::Anthropic), None);
}

#[test]
fn the_keys_after_the_messages_are_read_fresh() {
    let last = late_system(&history(false), SYSTEM);
    let mut next = history(false);
    next.push(user("go on"));
    let next = late_system(&next, SYSTEM)
        .replace(r#""stream":true"#, r#""stream":false"#)
        .replace("Runs a command", "Runs a shell command");
    assert_eq!(resumed(&last, &next, Dialect::Anthropic), Some(4));
}

#[test]
fn a_broken_new_message_fails_as_the_whole_parse_does() {
    let last = body(&history(false), true);
    let next =
        body(&history(false), true).replace("]}],\"metadata\"", "]},{\"role\":}],\"metadata\"");
    assert!(next.contains(r#"{"role":}"#), "the test breaks the body");
    let earlier = continuation(&last, Dialect::Anthropic);
    assert!(parse_continuing(&next, Dialect::Anthropic, earlier).is_none());
    assert!(wire::parse(next.as_bytes(), Dialect::Anthropic).is_err());
}

#[test]
fn an_unreadable_entry_stays_opaque_across_turns() {
    let mut first = history(false);
    first.insert(1, r#"{"role":"narrator","content":"meanwhile"}"#.to_owned());
    let last = body(&first, true);
    let mut next = first.clone();
    next.push(user("go on"));
    assert_eq!(
        resumed(&last, &body(&next, true), Dialect::Anthropic),
        Some(5)
    );
}

/// A chat completions body: system, user, then `calls` exchanges of a call and its output.
fn chat(calls: usize, tool_first: bool) -> String {
    let mut messages = vec![
        r#"{"role":"system","content":"You are a coding agent."}"#.to_owned(),
        r#"{"role":"user","content":"Fix the failing test."}"#.to_owned(),
    ];
    for i in 0..calls {
        messages.push(format!(
            r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{i}","type":"function","function":{{"name":"bash","arguments":"{{\"command\":\"pytest -k t{i}\"}}"}}}}]}}"#
        ));
        messages.push(format!(
            r#"{{"role":"tool","tool_call_id":"c{i}","content":"{i} passed"}}"#
        ));
    }
    let tools = r#""tools":[{"type":"function","function":{"name":"bash","parameters":{}}}]"#;
    if tool_first {
        format!(
            r#"{{{tools},"model":"gpt-4o","messages":[{}]}}"#,
            messages.join(",")
        )
    } else {
        format!(
            r#"{{"model":"gpt-4o","messages":[{}],{tools}}}"#,
            messages.join(",")
        )
    }
}

#[test]
fn chat_completions_resume_and_name_new_outputs_from_earlier_calls() {
    assert_eq!(
        resumed(&chat(2, false), &chat(3, false), Dialect::OpenAi),
        Some(6)
    );
    assert_eq!(
        resumed(&chat(2, true), &chat(3, true), Dialect::OpenAi),
        Some(6)
    );
    // The call is in the shared part and its output is new: the output still names its tool.
    let mut last = chat(3, false);
    let cut = last.rfind(r#",{"role":"tool""#).unwrap();
    last.replace_range(cut..last.rfind(']').unwrap(), "");
    assert_eq!(resumed(&last, &chat(3, false), Dialect::OpenAi), Some(7));
    let next = chat(3, false);
    let parsed = parse_text(&next, Dialect::OpenAi).unwrap();
    assert_eq!(parsed.messages()[7].tool_name.as_deref(), Some("bash"));
}

#[test]
fn other_dialects_are_read_whole() {
    let last = r#"{"input":[{"role":"user","content":"hi"}],"model":"gpt-5"}"#;
    let earlier = parse_text(last, Dialect::Responses)
        .unwrap()
        .into_continuation(None);
    assert!(parse_continuing(last, Dialect::Responses, earlier).is_none());
}

#[test]
fn a_run_carry_rides_with_the_shared_messages_and_can_be_let_go() {
    let last = body(&history(false), true);
    let parsed = parse_text(&last, Dialect::Anthropic).unwrap();
    let messages = parsed.messages().len();
    let mut carry = crate::carry::RunCarry::new(7, messages, 1);
    carry.stages[0].outputs = vec![(1, std::sync::Arc::from("x".repeat(10_000)), 3)];
    carry.stages[0].noted = vec![0, u32::try_from(messages - 1).unwrap()];
    parsed.leave_run_carry(carry);
    let mut left = parsed.into_continuation(None);
    let with_carry = left.held_bytes();
    let bare = continuation(&last, Dialect::Anthropic).held_bytes();
    assert!(with_carry >= bare + 10_000, "{with_carry} against {bare}");
    // The next turn gets the records of the messages it shares, cut to them.
    let mut next = history(false);
    next.push(call("toolu_03", "cargo test -p parser"));
    let next = body(&next, true);
    let resumed = parse_continuing(&next, Dialect::Anthropic, left.clone()).unwrap();
    let carried = resumed.parsed.run_carry().expect("carried");
    assert!(carried.covered <= messages);
    assert_eq!(carried.stages[0].outputs.len(), 1);
    // A memo short of room keeps what the next body resumes from without the records.
    left.drop_run_carry();
    assert_eq!(left.held_bytes(), bare);
}
