//! Unit tests for normalization and byte-lossless write-back on hand-written bodies with every
//! awkward shape the providers allow (escapes, odd spacing, unknown fields, images, big numbers).

use super::*;

const OPENAI: &str = r#"{ "model":"gpt-4o",  "temperature": 1.0e0, "seed": 12345678901234567890,
 "messages": [
  {"role": "system", "content": "be brief"},
  {"role":"user","content":[{"type":"text","text":"look at caf\u00e9"},{"type":"image_url","image_url":{"url":"data:x"}}]},
  {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"cmd\": \"ls\"}"}}], "x_unknown": [1,2]},
  {"role":"tool","tool_call_id":"c1","content":"a\nb\tc \ud83d\ude00"}
 ], "stream": true }"#;

const ANTHROPIC: &str = r#"{"model":"claude","system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],
"messages":[
 {"role":"user","content":"hi"},
 {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"text","text":"reading"},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"/a.py"}}]},
 {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"file body","citations":null},
                           {"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"part one"},{"type":"image","source":{"type":"base64","data":"AAA"}},{"type":"text","text":"part two"}]},
                           {"type":"text","text":"now fix it"}]}
],"tools":[{"name":"Read","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]}"#;

#[test]
fn openai_normalizes_roles_calls_and_parts() {
    let parsed = parse(OPENAI.as_bytes(), Dialect::OpenAi).unwrap();
    let msgs = parsed.messages();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[0].role, Role::System);
    assert_eq!(msgs[1].content, "look at café");
    assert!(
        !msgs[1].rewritable,
        "a text+image content is never flattened"
    );
    assert_eq!(msgs[2].tool_calls[0].arguments, r#"{"cmd": "ls"}"#);
    assert_eq!(msgs[3].tool_name.as_deref(), Some("bash"));
    assert_eq!(msgs[3].tool_arguments.as_deref(), Some(r#"{"cmd": "ls"}"#));
    assert_eq!(msgs[3].content, "a\nb\tc 😀");
}

#[test]
fn anthropic_expands_tool_results_one_message_per_text_block() {
    let parsed = parse(ANTHROPIC.as_bytes(), Dialect::Anthropic).unwrap();
    let msgs = parsed.messages();
    let roles: Vec<_> = msgs.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::Tool,
            Role::User
        ]
    );
    assert_eq!(msgs[2].reasoning, ["hmm"]);
    assert_eq!(msgs[2].tool_calls[0].arguments, r#"{"path":"/a.py"}"#);
    assert_eq!(msgs[3].content, "file body");
    assert_eq!(msgs[3].tool_name.as_deref(), Some("Read"));
    assert_eq!(
        (msgs[4].content.as_str(), msgs[5].content.as_str()),
        ("part one", "part two")
    );
    assert!(msgs[4].is_error && msgs[5].is_error);
    assert_eq!(msgs[6].content, "now fix it");
    assert_eq!(parsed.existing_breakpoints(), 2, "system + tools");
}

#[test]
fn unchanged_write_back_returns_the_input_bytes() {
    for (body, dialect) in [(OPENAI, Dialect::OpenAi), (ANTHROPIC, Dialect::Anthropic)] {
        let parsed = parse(body.as_bytes(), dialect).unwrap();
        let out = parsed.write_back(parsed.messages());
        assert!(matches!(out.body, Cow::Borrowed(_)));
        assert_eq!(out.body.as_ref(), body.as_bytes());
        assert!(out.discarded.is_empty());
    }
}

#[test]
fn splice_changes_only_the_edited_values() {
    let parsed = parse(ANTHROPIC.as_bytes(), Dialect::Anthropic).unwrap();
    let mut msgs = parsed.messages().to_vec();
    msgs[3].content = "short \"quoted\"".into();
    msgs[5].content = "two".into();
    let out = parsed.write_back(&msgs);
    assert!(out.discarded.is_empty());
    let expected = ANTHROPIC
        .replace(
            r#""content":"file body""#,
            r#""content":"short \"quoted\"""#,
        )
        .replace(r#""text":"part two""#, r#""text":"two""#);
    assert_eq!(std::str::from_utf8(&out.body).unwrap(), expected);
    // The result re-parses to the rewritten messages.
    let again = parse(&out.body, Dialect::Anthropic).unwrap();
    assert_eq!(again.messages(), &msgs[..]);
}

#[test]
fn non_rewritable_changes_are_discarded_and_reported() {
    let parsed = parse(OPENAI.as_bytes(), Dialect::OpenAi).unwrap();
    let mut msgs = parsed.messages().to_vec();
    msgs[1].content = "flattened".into();
    msgs[0].role = Role::User;
    let out = parsed.write_back(&msgs);
    assert_eq!(out.body.as_ref(), OPENAI.as_bytes());
    assert_eq!(
        out.discarded,
        vec![
            (0, Discard::UnsupportedField),
            (1, Discard::ContentNotRewritable)
        ]
    );
}

#[test]
fn message_count_change_keeps_the_original() {
    let parsed = parse(OPENAI.as_bytes(), Dialect::OpenAi).unwrap();
    let mut msgs = parsed.messages().to_vec();
    msgs.pop();
    let out = parsed.write_back(&msgs);
    assert_eq!(out.body.as_ref(), OPENAI.as_bytes());
    assert!(
        out.discarded
            .iter()
            .all(|(_, d)| *d == Discard::MessageCountChanged)
    );
}

#[test]
fn added_breakpoint_uses_the_metadata_path() {
    let parsed = parse(ANTHROPIC.as_bytes(), Dialect::Anthropic).unwrap();
    let mut msgs = parsed.messages().to_vec();
    // The assistant turn has a signed thinking block and a tool_use; the breakpoint lands on its
    // last block without re-encoding anything else.
    msgs[2].cache_control = true;
    let out = parsed.write_back(&msgs);
    assert!(out.discarded.is_empty());
    let body = std::str::from_utf8(&out.body).unwrap();
    assert!(body.contains(r#""input":{"path":"/a.py"},"cache_control":{"type":"ephemeral"}}"#));
    let again = parse(out.body.as_ref(), Dialect::Anthropic).unwrap();
    assert!(again.messages()[2].cache_control);
    assert_eq!(again.existing_breakpoints(), 3);
}

#[test]
fn rewritten_arguments_are_spliced_in_their_encoding() {
    let parsed = parse(OPENAI.as_bytes(), Dialect::OpenAi).unwrap();
    let mut msgs = parsed.messages().to_vec();
    msgs[2].tool_calls[0].arguments = r#"{"cmd":"pwd"}"#.into();
    let out = parsed.write_back(&msgs);
    assert!(
        std::str::from_utf8(&out.body)
            .unwrap()
            .contains(r#""arguments":"{\"cmd\":\"pwd\"}""#)
    );

    let parsed = parse(ANTHROPIC.as_bytes(), Dialect::Anthropic).unwrap();
    let mut msgs = parsed.messages().to_vec();
    msgs[2].tool_calls[0].arguments = "not json".into();
    let out = parsed.write_back(&msgs);
    assert_eq!(out.discarded, vec![(2, Discard::ArgumentsNotJson)]);
}

#[test]
fn bad_bodies_are_errors_never_panics() {
    let cases: &[(&[u8], &str, &str)] = &[
        (b"\xff\xfe", "UTF-8", "not_utf8"),
        (b"{\"messages\": [", "not JSON", "not_json"),
        (b"[1,2]", "not a JSON object", "not_object"),
        (b"{\"model\": \"x\"}", "no `messages`", "no_messages"),
        (b"{\"messages\": {}}", "not an array", "messages_not_array"),
    ];
    for (body, expected, label) in cases {
        for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
            let err = parse(body, dialect).unwrap_err();
            assert!(
                err.to_string().contains(expected),
                "{dialect:?} {body:?}: {err}"
            );
            assert_eq!(err.label(), *label);
            assert!(WireError::LABELS.contains(label));
        }
    }
}

#[test]
fn a_message_it_cannot_read_is_kept_opaque_and_the_rest_is_read() {
    let cases: &[(&[u8], &str)] = &[
        (b"{\"messages\": [42, {\"role\":\"user\",\"content\":\"go\"}]}", "not an object"),
        (b"{\"messages\": [{\"content\": \"x\"}, {\"role\":\"user\",\"content\":\"go\"}]}", "no `role`"),
        (
            b"{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}, {\"role\":\"user\",\"content\":\"go\"}]}",
            "unknown role",
        ),
        (
            b"{\"messages\": [{\"role\": \"user\", \"content\": 7}, {\"role\":\"user\",\"content\":\"go\"}]}",
            "neither",
        ),
    ];
    for (body, expected) in cases {
        for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
            let parsed = parse(body, dialect).unwrap();
            let opaque = parsed.opaque_entries();
            assert_eq!(opaque.len(), 1, "{dialect:?} {body:?}");
            assert_eq!(opaque[0].index, Some(0));
            assert!(
                opaque[0].reason.contains(expected),
                "{dialect:?}: {}",
                opaque[0].reason
            );
            assert!(!parsed.messages()[0].rewritable);
            assert_eq!(parsed.messages()[1].content, "go");
            // Nothing to change in the opaque entry, so the rest rewrites and it stays as it was.
            let mut messages = parsed.messages().to_vec();
            messages[1].content = "gone".into();
            let out = parsed.write_back(&messages);
            let expected_body = std::str::from_utf8(body)
                .unwrap()
                .replace("\"go\"", "\"gone\"");
            assert_eq!(std::str::from_utf8(&out.body).unwrap(), expected_body);
        }
    }
}

#[test]
fn an_opaque_entry_keeps_its_breakpoints_counted() {
    let body = br#"{"messages":[{"role":"wizard","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"go"}]}"#;
    let parsed = parse(body, Dialect::Anthropic).unwrap();
    assert_eq!(parsed.existing_breakpoints(), 1);
}

#[test]
fn detects_dialect() {
    assert_eq!(Dialect::detect(ANTHROPIC.as_bytes()), Dialect::Anthropic);
    assert_eq!(Dialect::detect(OPENAI.as_bytes()), Dialect::OpenAi);
}

#[test]
fn breakpoint_on_an_empty_block_stays_valid_json() {
    let body = r#"{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{ }]}]}"#;
    let parsed = parse(body.as_bytes(), Dialect::OpenAi).unwrap();
    let mut msgs = parsed.messages().to_vec();
    msgs[0].cache_control = true;
    let out = parsed.write_back(&msgs);
    let text = std::str::from_utf8(&out.body).unwrap();
    serde_json::from_str::<serde_json::Value>(text).unwrap();
    assert!(
        text.contains(r#"{ "cache_control":{"type":"ephemeral"}}"#),
        "{text}"
    );
}

#[test]
fn duplicate_keys_read_the_last_one_like_the_provider() {
    let body = r#"{"messages":[{"role":"user","content":"first"}],"messages":[{"role":"user","content":"a","content":"seen"}]}"#;
    let parsed = parse(body.as_bytes(), Dialect::OpenAi).unwrap();
    assert_eq!(parsed.messages()[0].content, "seen");
    let mut msgs = parsed.messages().to_vec();
    msgs[0].content = "changed".into();
    let out = parsed.write_back(&msgs);
    let value: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(
        value["messages"][0]["content"], "changed",
        "the splice lands where the provider reads"
    );
}

#[test]
fn offsets_outside_the_rewritten_fields_map_into_the_rewrite() {
    let body = r#"{"model":"m","messages":[{"role":"tool","tool_call_id":"a","content":"long output"}],"tools":[],"stream":true}"#;
    let parsed = parse(body.as_bytes(), Dialect::OpenAi).unwrap();
    let mut msgs = parsed.messages().to_vec();
    msgs[0].content = "short".into();
    let out = parsed.write_back(&msgs);
    let tools_close = parsed.tools_span().unwrap().end - 1;
    let mapped = parsed.map_offset(tools_close, out.body.len()).unwrap();
    assert_eq!(out.body[mapped], b']');
    assert_eq!(
        parsed.map_offset(1, out.body.len()),
        Some(1),
        "before the messages nothing moves"
    );
    let inside = parsed.messages_span().start + 5;
    assert_eq!(parsed.map_offset(inside, out.body.len()), None);
    assert_eq!(parsed.field("stream").map(|s| s.of(body)), Some("true"));
}

/// Found by the fuzzer (`tests/it/fuzz.rs`, target `wire`): an array where an object belongs
/// (a tool, a message, a content part) is read as having no fields, never sliced as one.
#[test]
fn arrays_where_objects_belong_have_no_fields() {
    for body in [
        r#"{"messages":[],"tools":[[1],["cache_control"]]}"#,
        r#"{"messages":[[{"role":"user"}],{"role":"tool","content":[["x"]]}]}"#,
        r#"{"messages":[{"role":"user","content":[[],{"type":"text","text":"t"}]}],"system":[[]]}"#,
    ] {
        for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
            if let Ok(parsed) = parse(body.as_bytes(), dialect) {
                assert_eq!(&*parsed.write_back(parsed.messages()).body, body.as_bytes());
            }
        }
    }
}

/// A Codex-shaped Responses body: instructions, a typed and an untyped message, a reasoning item
/// with encrypted content, a function call and its output, a free-form custom call and hosted
/// tools.
const RESPONSES: &str = r#"{"model":"gpt-5-codex","instructions":"You are Codex.","store":false,
 "input":[
  {"type":"message","role":"developer","content":[{"type":"input_text","text":"sandbox: workspace-write"}]},
  {"role":"user","content":"fix the failing test"},
  {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"look first"}],"encrypted_content":"gAAAA=="},
  {"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"command\":[\"pytest\",\"-x\"]}"},
  {"type":"function_call_output","call_id":"call_1","output":"FAILED tests/test_a.py::test_b\n1 failed"},
  {"type":"custom_tool_call","call_id":"call_2","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"},
  {"type":"custom_tool_call_output","call_id":"call_2","output":"Done!"},
  {"type":"message","role":"user","content":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"data:x"}]}
 ],
 "tools":[{"type":"function","name":"shell","parameters":{"type":"object"}},{"type":"web_search"}],
 "previous_response_id":null,"stream":true}"#;

#[test]
fn responses_items_normalize_one_message_each() {
    let parsed = parse(RESPONSES.as_bytes(), Dialect::Responses).unwrap();
    let msgs = parsed.messages();
    let roles: Vec<_> = msgs.iter().map(|m| m.role).collect();
    use Role::*;
    assert_eq!(
        roles,
        [
            System, System, User, Assistant, Assistant, Tool, Assistant, Tool, User
        ]
    );
    assert_eq!(msgs[0].content, "You are Codex.");
    assert!(msgs[0].rewritable);
    assert_eq!(msgs[1].content, "sandbox: workspace-write");
    assert!(msgs[1].rewritable, "one input_text part is rewritable");
    assert!(!msgs[3].rewritable, "reasoning is opaque");
    assert_eq!(msgs[4].tool_calls[0].id, "call_1");
    assert_eq!(msgs[5].tool_name.as_deref(), Some("shell"));
    assert_eq!(
        msgs[5].tool_arguments.as_deref(),
        Some(r#"{"command":["pytest","-x"]}"#)
    );
    assert_eq!(msgs[5].content, "FAILED tests/test_a.py::test_b\n1 failed");
    assert_eq!(msgs[7].tool_name.as_deref(), Some("apply_patch"));
    assert!(!msgs[8].rewritable, "text with an image is never flattened");
    assert_eq!(Dialect::detect(RESPONSES.as_bytes()), Dialect::Responses);
}

#[test]
fn responses_write_back_touches_only_the_rewritten_values() {
    let parsed = parse(RESPONSES.as_bytes(), Dialect::Responses).unwrap();
    let mut rewritten = parsed.messages().to_vec();
    rewritten[5].content = "1 failed <<cg:abc>>".into();
    rewritten[4].tool_calls[0].arguments = r#"{"command":["pytest"]}"#.into();
    rewritten[3].content = "dropped".into();
    let out = parsed.write_back(&rewritten);
    assert_eq!(out.discarded, vec![(3, Discard::ContentNotRewritable)]);
    let body = std::str::from_utf8(&out.body).unwrap();
    let expected = RESPONSES
        .replace(
            r#""output":"FAILED tests/test_a.py::test_b\n1 failed""#,
            r#""output":"1 failed <<cg:abc>>""#,
        )
        .replace(
            r#""arguments":"{\"command\":[\"pytest\",\"-x\"]}""#,
            r#""arguments":"{\"command\":[\"pytest\"]}""#,
        );
    assert_eq!(body, expected);
}

#[test]
fn responses_bodies_without_an_item_list_are_errors() {
    let string_input = br#"{"model":"m","input":"hello"}"#;
    assert_eq!(
        parse(string_input, Dialect::Responses).unwrap_err(),
        WireError::MessagesNotArray
    );
    assert_eq!(
        parse(
            br#"{"model":"m","previous_response_id":"resp_1"}"#,
            Dialect::Responses
        )
        .unwrap_err(),
        WireError::NoMessages
    );
    // An item it cannot read is opaque, and the items after it are still read.
    let odd = parse(
        br#"{"input":[{"role":"robot","content":"x"},3,{"type":"function_call_output","call_id":"c","output":"out"}]}"#,
        Dialect::Responses,
    )
    .unwrap();
    let indices: Vec<_> = odd.opaque_entries().iter().map(|o| o.index).collect();
    assert_eq!(indices, [Some(0), Some(1)]);
    assert!(odd.opaque_entries()[0].reason.contains("robot"));
    assert!(!odd.messages()[0].rewritable && !odd.messages()[1].rewritable);
    assert_eq!(odd.messages()[2].content, "out");
    // An untyped item reference is opaque, not a message without a role.
    let reference = parse(
        br#"{"input":[{"id":"msg_1"},{"role":"user","content":"go"}]}"#,
        Dialect::Responses,
    )
    .unwrap();
    assert!(!reference.messages()[0].rewritable);
    assert_eq!(reference.messages()[1].content, "go");
}

#[test]
fn a_responses_output_in_parts_gives_one_rewritable_message_per_text_part() {
    let body = br#"{"input":[{"type":"custom_tool_call","call_id":"c1","name":"exec","input":"run()"},{"type":"custom_tool_call_output","call_id":"c1","output":[{"type":"input_text","text":"Script completed\nOutput:\n"},{"type":"input_image","image_url":"data:x"},{"type":"input_text","text":"line 1\nline 2"}]}]}"#;
    let parsed = parse(body, Dialect::Responses).unwrap();
    let msgs = parsed.messages();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[1].content, "Script completed\nOutput:\n");
    assert_eq!(msgs[2].content, "line 1\nline 2");
    assert!(msgs[2].rewritable && msgs[2].is_tool());
    assert_eq!(msgs[2].tool_name.as_deref(), Some("exec"));
    let mut rewritten = msgs.to_vec();
    rewritten[2].content = "cut <<cg:abc>>".into();
    let out = parsed.write_back(&rewritten);
    let expected = std::str::from_utf8(body)
        .unwrap()
        .replace(r#""line 1\nline 2""#, r#""cut <<cg:abc>>""#);
    assert_eq!(std::str::from_utf8(&out.body).unwrap(), expected);
}

/// gemini-cli 0.61's shape (recorded here with the npm package): a session context, a signed
/// model turn whose call carries the CLI's own id, an output in `response.output`, an
/// id-less call answered by name, an inline image, and a thought part.
const GEMINI: &str = r#"{"contents":[
 {"parts":[{"text":"<session_context>\nWorkspace\n</session_context>"}],"role":"user"},
 {"parts":[{"text":"run it"}],"role":"user"},
 {"parts":[{"text":"I'll run it."},{"functionCall":{"id":"run_shell_command_1796357324602_0","args":{"command":"make"},"name":"run_shell_command"},"thoughtSignature":"iL88+SJP"}],"role":"model"},
 {"parts":[{"functionResponse":{"id":"run_shell_command_1796357324602_0","name":"run_shell_command","response":{"output":"Output: ok\n\u00e9"}}}],"role":"user"},
 {"parts":[{"text":"thinking","thought":true},{"functionCall":{"name":"read_file","args":{"file_path":"a.py"}}},{"functionCall":{"name":"read_file","args":{"file_path":"b.py"}}}],"role":"model"},
 {"parts":[{"functionResponse":{"name":"read_file","response":{"output":"A","error":"partial"}}},{"functionResponse":{"name":"read_file","response":{"content":{"nested":1}}}},{"inlineData":{"mimeType":"image/png","data":"AAA"}}],"role":"user"},
 {"parts":[{"text":"done"}],"role":"model"}
],"systemInstruction":{"parts":[{"text":"You are an agent."}],"role":"user"},
"tools":[{"functionDeclarations":[{"name":"run_shell_command"},{"name":"read_file"}]}],"generationConfig":{"temperature":1}}"#;

#[test]
fn gemini_contents_normalize_with_calls_paired() {
    let parsed = parse(GEMINI.as_bytes(), Dialect::Gemini).unwrap();
    let msgs = parsed.messages();
    let roles: Vec<Role> = msgs.iter().map(|m| m.role).collect();
    use Role::{Assistant, System, Tool, User};
    assert_eq!(
        roles,
        [
            System, User, User, Assistant, Tool, Assistant, Tool, Tool, Tool, User, Assistant
        ]
    );
    assert!(msgs[0].rewritable, "one text part of systemInstruction");
    // A signed model turn is read, never rewritten.
    assert_eq!(msgs[3].content, "I'll run it.");
    assert!(!msgs[3].rewritable);
    assert_eq!(msgs[3].tool_calls[0].arguments, r#"{"command":"make"}"#);
    // Paired by the CLI's id, rewritable in place.
    assert_eq!(
        msgs[4].tool_call_id.as_deref(),
        Some("run_shell_command_1796357324602_0")
    );
    assert_eq!(msgs[4].tool_name.as_deref(), Some("run_shell_command"));
    assert_eq!(
        msgs[4].tool_arguments.as_deref(),
        Some(r#"{"command":"make"}"#)
    );
    assert_eq!(msgs[4].content, "Output: ok\né");
    assert!(msgs[4].rewritable);
    // A thought is reasoning; id-less calls get ids from their place and pair by name in order.
    assert_eq!(msgs[5].reasoning, ["thinking"]);
    assert_eq!(msgs[5].tool_calls[0].id, "read_file@4.1");
    assert_eq!(msgs[6].tool_call_id.as_deref(), Some("read_file@4.1"));
    assert_eq!(
        msgs[6].tool_arguments.as_deref(),
        Some(r#"{"file_path":"a.py"}"#)
    );
    assert_eq!(
        (msgs[7].content.as_str(), msgs[7].is_error),
        ("partial", true)
    );
    assert_eq!(
        msgs[7].tool_call_id, msgs[6].tool_call_id,
        "two strings of one response"
    );
    // Nested only: one output the components see and never rewrite.
    assert_eq!(msgs[8].tool_call_id.as_deref(), Some("read_file@4.2"));
    assert!(!msgs[8].rewritable);
    // The image makes the content's own text (none) non-rewritable.
    assert!(!msgs[9].rewritable);
    assert!(msgs.iter().all(|m| !m.can_cache_control));
}

#[test]
fn gemini_write_back_changes_only_the_output_string() {
    let parsed = parse(GEMINI.as_bytes(), Dialect::Gemini).unwrap();
    let mut rewritten = parsed.messages().to_vec();
    rewritten[4].content = "<<cg:0123456789abcdef>> cut".into();
    let out = parsed.write_back(&rewritten);
    assert!(out.discarded.is_empty());
    let text = String::from_utf8(out.body.into_owned()).unwrap();
    let expected = GEMINI.replace(
        r#""Output: ok\n\u00e9""#,
        r#""<<cg:0123456789abcdef>> cut""#,
    );
    assert_eq!(text, expected);
    // The signature and everything else stay byte-identical; a signed turn's text cannot change.
    let mut signed = parsed.messages().to_vec();
    signed[3].content = "shorter".into();
    let out = parsed.write_back(&signed);
    assert_eq!(out.discarded, vec![(3, Discard::ContentNotRewritable)]);
    assert_eq!(out.body.as_ref(), GEMINI.as_bytes());
}

#[test]
fn gemini_entries_it_cannot_read_stay_opaque() {
    let body = r#"{"contents":[{"role":"tool","parts":[{"text":"x"}]},{"role":"user","parts":"x"},{"role":"user","parts":[{"text":"kept"}]}]}"#;
    let parsed = parse(body.as_bytes(), Dialect::Gemini).unwrap();
    assert_eq!(parsed.opaque_entries().len(), 2);
    assert_eq!(parsed.messages()[2].content, "kept");
    assert_eq!(
        parse(br#"{"contents":{}}"#, Dialect::Gemini).unwrap_err(),
        WireError::MessagesNotArray
    );
    assert_eq!(
        parse(br#"{"messages":[]}"#, Dialect::Gemini).unwrap_err(),
        WireError::NoMessages
    );
    assert_eq!(Dialect::detect(GEMINI.as_bytes()), Dialect::Gemini);
}
