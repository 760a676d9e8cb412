//! The memo on agent-shaped chat completions bodies: a conversation's next turn resumes, another
//! caller's or another conversation's does not, and the budget holds.

use super::*;

/// A mini-swe-agent-like body: its system prompt, a task, then `steps` command outputs.
fn body(task: &str, steps: usize) -> Vec<u8> {
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": "You are a helpful assistant that can interact with a computer shell."}),
        serde_json::json!({"role": "user", "content": task}),
    ];
    for i in 0..steps {
        messages.push(serde_json::json!({"role": "assistant", "content": format!("THOUGHT: look again\n```bash\nls -la src/{i}\n```")}));
        messages.push(serde_json::json!({"role": "user", "content": format!("<returncode>0</returncode>\n<output>\n{}</output>", "drwxr-xr-x 2 root root 4096 file.py\n".repeat(80))}));
    }
    serde_json::to_vec(&serde_json::json!({"model": "gpt-4o", "messages": messages})).unwrap()
}

fn turn(memo: &ParseMemo, scope: &str, body: &[u8]) -> usize {
    let (parsed, ticket) = memo.parse(scope, body, Dialect::OpenAi);
    let parsed = parsed.unwrap();
    assert_eq!(parsed, wire::parse(body, Dialect::OpenAi).unwrap());
    let kept = ticket.kept();
    memo.keep(ticket, parsed);
    kept
}

#[test]
fn a_conversation_resumes_from_its_last_turn() {
    let memo = ParseMemo::default();
    assert_eq!(turn(&memo, "k1:", &body("Fix issue 1", 2)), 0);
    assert_eq!(turn(&memo, "k1:", &body("Fix issue 1", 3)), 6);
    assert_eq!(turn(&memo, "k1:", &body("Fix issue 1", 4)), 8);
    // The same turn again (a retry) reads nothing again.
    assert_eq!(turn(&memo, "k1:", &body("Fix issue 1", 4)), 10);
}

#[test]
fn another_caller_or_task_finds_nothing() {
    let memo = ParseMemo::default();
    turn(&memo, "k1:", &body("Fix issue 1", 3));
    assert_eq!(turn(&memo, "k2:", &body("Fix issue 1", 4)), 0);
    assert_eq!(turn(&memo, "k1:", &body("Fix issue 2", 4)), 0);
    // Both are kept beside the first.
    assert_eq!(memo.held().0, 3);
    assert_eq!(turn(&memo, "k1:", &body("Fix issue 1", 5)), 8);
}

#[test]
fn small_bodies_and_other_dialects_are_not_kept() {
    let memo = ParseMemo::default();
    let small = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    turn(&memo, "k1:", small);
    // Large enough to keep, were it a dialect that resumes.
    let responses = serde_json::to_vec(&serde_json::json!({
        "model": "gpt-5",
        "input": [{"role": "user", "content": "Fix the failing test. ".repeat(400)}],
    }))
    .unwrap();
    let (parsed, ticket) = memo.parse("k1:", &responses, Dialect::Responses);
    memo.keep(ticket, parsed.unwrap());
    assert_eq!(memo.held(), (0, 0));
}

/// What the memo counts for a body's continuation.
fn held(body: &[u8]) -> usize {
    wire::parse(body, Dialect::OpenAi)
        .unwrap()
        .into_continuation(None)
        .held_bytes()
}

#[test]
fn the_budget_evicts_the_least_recently_used() {
    let issue = |n: usize| body(&format!("Fix issue {n}"), 3);
    let one = held(&issue(1));
    // Room for eight and a half: one conversation may take an eighth.
    let memo = ParseMemo::new(one * 8 + one / 2);
    for n in 1..=8 {
        turn(&memo, "k1:", &issue(n));
    }
    assert_eq!(memo.held().0, 8);
    // Issue 1 is used again, so issue 2 is the one to go when issue 9 comes.
    assert_eq!(turn(&memo, "k1:", &issue(1)), 8);
    turn(&memo, "k1:", &issue(9));
    let (count, bytes) = memo.held();
    assert_eq!(count, 8);
    assert!(bytes <= one * 8 + one / 2);
    assert_eq!(turn(&memo, "k1:", &issue(3)), 8);
    assert_eq!(turn(&memo, "k1:", &issue(2)), 0);
}

#[test]
fn one_conversation_takes_at_most_an_eighth() {
    let memo = ParseMemo::new(held(&body("Fix issue 1", 3)) * 4);
    turn(&memo, "k1:", &body("Fix issue 1", 3));
    assert_eq!(memo.held(), (0, 0));
}

#[test]
fn a_caller_without_a_credential_is_parsed_whole() {
    let memo = ParseMemo::default();
    turn(&memo, engine::session::UNSCOPED, &body("Fix issue 1", 3));
    assert_eq!(
        turn(&memo, engine::session::UNSCOPED, &body("Fix issue 1", 4)),
        0
    );
    assert_eq!(memo.held(), (0, 0));
}

#[test]
fn a_body_that_is_not_json_is_an_error_as_before() {
    let memo = ParseMemo::default();
    let mut broken = body("Fix issue 1", 3);
    turn(&memo, "k1:", &broken);
    broken.truncate(broken.len() - 10);
    let (parsed, ticket) = memo.parse("k1:", &broken, Dialect::OpenAi);
    assert_eq!(
        parsed.unwrap_err().label(),
        wire::parse(&broken, Dialect::OpenAi).unwrap_err().label()
    );
    assert_eq!(ticket.kept(), 0);
}

#[test]
fn agents_that_open_alike_keep_one_continuation_each() {
    // The turn service puts the session header into the scope: two agents sending the same
    // task under their own ids each resume their own.
    let memo = ParseMemo::default();
    turn(&memo, "k1:\0agent-1", &body("Fix issue 1", 3));
    turn(&memo, "k1:\0agent-2", &body("Fix issue 1", 5));
    assert_eq!(turn(&memo, "k1:\0agent-1", &body("Fix issue 1", 4)), 8);
    assert_eq!(turn(&memo, "k1:\0agent-2", &body("Fix issue 1", 6)), 12);
}
