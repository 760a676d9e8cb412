//! The way back on every key order, both dialects, and every `tool_choice` shape.

use super::*;
use crate::wire;
use serde_json::Value;

const LONG: &str = "line of a long tool output that a component would cut down\n";

/// The three top-level members in `order`, `system` as a string or an array.
fn anthropic_body(order: [&str; 3], system_array: bool) -> String {
    let system = if system_array {
        r#"[{"type":"text","text":"You are a coding agent."}]"#.to_owned()
    } else {
        r#""You are a coding agent.""#.to_owned()
    };
    let output = json::to_literal(&LONG.repeat(40));
    let members: Vec<String> = order
        .iter()
        .map(|key| match *key {
            "system" => format!(r#""system":{system}"#),
            "tools" => r#""tools":[{"name":"bash","input_schema":{"type":"object"}}]"#.to_owned(),
            _ => format!(
                r#""messages":[{{"role":"user","content":"run it"}},{{"role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"bash","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":{output}}}]}}]"#
            ),
        })
        .collect();
    format!(r#"{{"model":"m","max_tokens":10,{}}}"#, members.join(","))
}

fn openai_body(tools_first: bool) -> String {
    let output = json::to_literal(&LONG.repeat(40));
    let tools = r#""tools":[{"type":"function","function":{"name":"bash","parameters":{}}}]"#;
    let messages = format!(
        r#""messages":[{{"role":"system","content":"You are a coding agent."}},{{"role":"user","content":"run it"}},{{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"bash","arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"c1","content":{output}}}]"#
    );
    if tools_first {
        format!(r#"{{"model":"m",{tools},{messages}}}"#)
    } else {
        format!(r#"{{"model":"m",{messages},{tools}}}"#)
    }
}

/// What write-back would produce: the long output cut to a marker, and (Anthropic) the system
/// text changed in length too, so every region moves.
fn rewrite(body: &str) -> String {
    let long = json::to_literal(&LONG.repeat(40));
    body.replace(
        &long,
        r#""<<cg:0123456789abcdef>> [full output: call context_guru_expand]""#,
    )
    .replace(
        "You are a coding agent.",
        "You are a coding agent. Be brief.",
    )
}

fn expand_tool_is_last(out: &[u8], dialect: Dialect) {
    let value: Value = serde_json::from_slice(out).expect("the injected body is JSON");
    let tools = value["tools"].as_array().expect("tools");
    let last = tools.last().unwrap();
    let name = match dialect {
        Dialect::Anthropic => &last["name"],
        Dialect::OpenAi => &last["function"]["name"],
        Dialect::Responses => &last["name"],
        Dialect::Gemini => unreachable!("Gemini declares inside `functionDeclarations`"),
    };
    assert_eq!(name, EXPAND_TOOL_NAME);
    assert_eq!(tools.len(), 2, "the agent's tool is kept");
}

#[test]
fn the_tool_is_placed_for_every_key_order_and_system_shape() {
    let orders = [
        ["system", "tools", "messages"],
        ["system", "messages", "tools"],
        ["tools", "system", "messages"],
        ["tools", "messages", "system"],
        ["messages", "system", "tools"],
        ["messages", "tools", "system"],
    ];
    for order in orders {
        for system_array in [false, true] {
            let body = anthropic_body(order, system_array);
            let parsed = wire::parse(body.as_bytes(), Dialect::Anthropic).unwrap();
            let rewritten = rewrite(&body);
            assert_ne!(rewritten, body);
            let Ok(Injected::Added(out)) = inject(&parsed, rewritten.as_bytes()) else {
                panic!("{order:?} system_array={system_array}: not injected");
            };
            expand_tool_is_last(&out, Dialect::Anthropic);
            // Everything but the insertion is the rewrite, byte for byte.
            let tool = tool_json(Dialect::Anthropic);
            let without = String::from_utf8(out)
                .unwrap()
                .replace(&format!(",{tool}"), "");
            assert_eq!(without, rewritten, "{order:?}");
        }
    }
    for tools_first in [true, false] {
        let body = openai_body(tools_first);
        let parsed = wire::parse(body.as_bytes(), Dialect::OpenAi).unwrap();
        let Ok(Injected::Added(out)) = inject(&parsed, rewrite(&body).as_bytes()) else {
            panic!("openai tools_first={tools_first}: not injected");
        };
        expand_tool_is_last(&out, Dialect::OpenAi);
    }
}

#[test]
fn a_body_without_tools_gets_an_array_and_a_declared_tool_is_not_repeated() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#;
    let parsed = wire::parse(body.as_bytes(), Dialect::OpenAi).unwrap();
    let Ok(Injected::Added(out)) = inject(&parsed, body.as_bytes()) else {
        panic!("not injected");
    };
    let value: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value["tools"][0]["function"]["name"], EXPAND_TOOL_NAME);
    let again = wire::parse(&out, Dialect::OpenAi).unwrap();
    assert_eq!(inject(&again, &out), Ok(Injected::AlreadyDeclared));
    // Deterministic: the same bytes every turn, so the cached tools prefix never changes.
    assert_eq!(inject(&parsed, body.as_bytes()), Ok(Injected::Added(out)));
}

#[test]
fn tool_choice_decides_whether_the_model_can_reach_the_tool() {
    let cases = [
        (Dialect::Anthropic, r#"{"type":"auto"}"#, Ok(())),
        (Dialect::Anthropic, r#"{"type":"any"}"#, Ok(())),
        (
            Dialect::Anthropic,
            r#"{"type":"tool","name":"bash"}"#,
            Err(Withheld::ToolChoiceNamed),
        ),
        (
            Dialect::Anthropic,
            r#"{"type":"none"}"#,
            Err(Withheld::ToolChoiceNone),
        ),
        (Dialect::OpenAi, r#""auto""#, Ok(())),
        (Dialect::OpenAi, r#""required""#, Ok(())),
        (Dialect::OpenAi, "null", Ok(())),
        (Dialect::OpenAi, r#""none""#, Err(Withheld::ToolChoiceNone)),
        (
            Dialect::OpenAi,
            r#"{"type":"function","function":{"name":"bash"}}"#,
            Err(Withheld::ToolChoiceNamed),
        ),
        (
            Dialect::OpenAi,
            r#"{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}"#,
            Err(Withheld::ToolChoiceUnknown),
        ),
    ];
    for (dialect, choice, expected) in cases {
        let body = format!(
            r#"{{"model":"m","tool_choice":{choice},"tools":[],"messages":[{{"role":"user","content":"x"}}]}}"#
        );
        let parsed = wire::parse(body.as_bytes(), dialect).unwrap();
        assert_eq!(reach(&parsed), expected, "{choice}");
        assert_eq!(
            inject(&parsed, body.as_bytes()).is_ok(),
            expected.is_ok(),
            "{choice}"
        );
    }
    let odd = r#"{"model":"m","tools":{"name":"bash"},"messages":[{"role":"user","content":"x"}]}"#;
    let parsed = wire::parse(odd.as_bytes(), Dialect::Anthropic).unwrap();
    assert_eq!(reach(&parsed), Err(Withheld::ToolsNotArray));
}

#[test]
fn a_marker_anywhere_in_the_body_asks_for_the_way_back() {
    assert!(carries_marker(
        br#"{"messages":[{"content":"<<cg:0123456789abcdef>>"}]}"#
    ));
    assert!(!carries_marker(br#"{"messages":[{"content":"<<cg"}]}"#));
}

#[test]
fn responses_bodies_get_a_flat_tool_wherever_tools_sit() {
    let input = r#""input":[{"role":"user","content":"run it"},{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"a long output"}]"#;
    let tools = r#""tools":[{"type":"function","name":"shell","parameters":{"type":"object"}}]"#;
    for body in [
        format!(r#"{{"model":"m","store":false,"instructions":"be brief",{input},{tools}}}"#),
        format!(r#"{{"model":"m",{tools},"instructions":"be brief",{input},"store":false}}"#),
        format!(r#"{{{input},{tools},"instructions":"be brief","store":false}}"#),
    ] {
        let parsed = wire::parse(body.as_bytes(), Dialect::Responses).unwrap();
        let rewritten = body
            .replace("a long output", "cut <<cg:0123456789abcdef>>")
            .replace("be brief", "be very brief");
        let Ok(Injected::Added(out)) = inject(&parsed, rewritten.as_bytes()) else {
            panic!("{body}: not injected");
        };
        expand_tool_is_last(&out, Dialect::Responses);
        let value: Value = serde_json::from_slice(&out).unwrap();
        assert!(value["tools"][1].get("function").is_none(), "flat shape");
        assert_eq!(value["tools"][1]["type"], "function");
    }
    for (choice, expected) in [
        (r#""auto""#, Ok(())),
        (r#""required""#, Ok(())),
        (
            r#"{"type":"function","name":"shell"}"#,
            Err(Withheld::ToolChoiceNamed),
        ),
        (
            r#"{"type":"file_search"}"#,
            Err(Withheld::ToolChoiceUnknown),
        ),
    ] {
        let body = format!(r#"{{"tool_choice":{choice},"store":false,{input}}}"#);
        let parsed = wire::parse(body.as_bytes(), Dialect::Responses).unwrap();
        assert_eq!(reach(&parsed), expected, "{choice}");
    }
    for (fields, expected) in [
        (r#""stream":true"#, Err(Withheld::StoredResponse)),
        (
            r#""stream":true,"store":true"#,
            Err(Withheld::StoredResponse),
        ),
        (r#""store":true"#, Err(Withheld::StoredResponse)),
        (r#""stream":false"#, Err(Withheld::StoredResponse)),
        (
            r#""store":false,"conversation":"conv_1""#,
            Err(Withheld::StoredResponse),
        ),
        (r#""stream":true,"store":false"#, Ok(())),
        (r#""store":false,"previous_response_id":null"#, Ok(())),
    ] {
        let body = format!(r#"{{{fields},{input}}}"#);
        let parsed = wire::parse(body.as_bytes(), Dialect::Responses).unwrap();
        assert_eq!(reach(&parsed), expected, "{fields}");
    }
}

fn numbered_log(n: usize) -> String {
    (1..=n)
        .map(|i| match i {
            500 => "ERROR: disk full on /var/data".to_owned(),
            _ => format!("line {i}: ok"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_partial_expand_returns_exactly_the_lines_asked_for_numbered() {
    let log = numbered_log(2000);
    let range = excerpt(&log, &Ask::parse(None, Some("10-12")));
    assert_eq!(
        range,
        "[lines 10-12 of 2000]\n10\tline 10: ok\n11\tline 11: ok\n12\tline 12: ok"
    );
    let one = excerpt(&log, &Ask::parse(None, Some("7")));
    assert_eq!(one, "[lines 7-7 of 2000]\n7\tline 7: ok");
    let past = excerpt(&log, &Ask::parse(None, Some("1999-5000")));
    assert_eq!(
        past,
        "[lines 1999-2000 of 2000]\n1999\tline 1999: ok\n2000\tline 2000: ok"
    );
    let found = excerpt(&log, &Ask::parse(Some("disk FULL"), None));
    assert!(
        found.starts_with("[1 of 2000 lines contain \"disk FULL\""),
        "{found}"
    );
    assert!(found.contains("\n500\tERROR: disk full on /var/data"));
    assert_eq!(
        found.lines().count(),
        1 + 2 * PATTERN_CONTEXT + 1,
        "{found}"
    );
    let none = excerpt(&log, &Ask::parse(Some("segfault"), None));
    assert_eq!(none, "[no line of the 2000 contains \"segfault\"]");
    // Anything unreadable asks for the whole original.
    for (pattern, lines) in [
        (None, None),
        (Some("  "), None),
        (None, Some("x-y")),
        (None, Some("9-3")),
        (None, Some("0")),
    ] {
        assert_eq!(excerpt(&log, &Ask::parse(pattern, lines)), log);
    }
}

#[test]
fn separate_matches_are_marked_apart_and_many_are_capped() {
    let text: String = (1..=300)
        .map(|i| {
            if i % 5 == 0 {
                format!("hit {i}")
            } else {
                format!("miss {i}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let out = excerpt(&text, &Ask::parse(Some("hit"), None));
    assert!(
        out.contains(&format!("the first {MAX_PATTERN_MATCHES} are shown")),
        "{out:.200}"
    );
    assert!(out.contains("20 left out"));
    let far = excerpt(
        &numbered_log(40)
            .replace("line 5:", "needle 5:")
            .replace("line 30:", "needle 30:"),
        &Ask::parse(Some("needle"), None),
    );
    assert!(far.contains("\n--\n"), "two matches far apart: {far}");
}

#[test]
fn a_long_line_a_pattern_finds_is_shown_around_the_match() {
    let blob = format!(
        "{{\"flights\":[{}]}}",
        (0..200)
            .map(|i| format!("{{\"id\":\"HAT{i:03}\",\"price\":{}}}", 100 + i))
            .collect::<Vec<_>>()
            .join(",")
    );
    let original = format!("header\n{blob}\nfooter é");
    let out = excerpt(&original, &Ask::parse(Some("hat150"), None));
    assert!(out.contains("\"id\":\"HAT150\",\"price\":250"), "{out}");
    assert!(
        out.len() < 2 * LINE_WINDOW + 200,
        "{} bytes: {out}",
        out.len()
    );
    assert!(
        out.contains("\n2\t…") && out.contains("…\n3\tfooter é"),
        "{out}"
    );
    // A range returns whole lines, long or not.
    let range = excerpt(&original, &Ask::parse(None, Some("2-2")));
    assert!(range.ends_with(&blob));
    let near_context = excerpt(
        &format!("needle here\n{blob}"),
        &Ask::parse(Some("needle"), None),
    );
    assert!(
        near_context.contains(&format!("… [{} bytes]", blob.len())),
        "{near_context}"
    );
}

#[test]
fn a_partial_expand_of_a_json_output_is_of_the_text_in_its_string() {
    let output: String = (1..=100).map(|i| format!("{i}\n")).collect();
    let original = serde_json::json!({"returncode": 0, "output": output}).to_string();
    assert_eq!(original.lines().count(), 1);
    let part = excerpt(&original, &Ask::parse(None, Some("3-4")));
    assert_eq!(part, "[lines 3-4 of 100]\n3\t3\n4\t4");
    let found = excerpt(&original, &Ask::parse(Some("57"), None));
    assert!(found.contains("\n57\t57"), "{found}");
    assert_eq!(
        excerpt(&original, &Ask::default()),
        original,
        "whole: the stash as it is"
    );
}

/// gemini-cli's shape: one `tools` entry holding every declaration, after `contents` and
/// `systemInstruction`; a signed model turn; the output in `response.output`.
fn gemini_body(tools: &str) -> String {
    let output = json::to_literal(&LONG.repeat(40));
    format!(
        r#"{{"contents":[{{"role":"user","parts":[{{"text":"run it"}}]}},{{"role":"model","parts":[{{"functionCall":{{"name":"run_shell_command","args":{{"command":"make"}}}},"thoughtSignature":"c2lnbmVk"}}]}},{{"role":"user","parts":[{{"functionResponse":{{"name":"run_shell_command","response":{{"output":{output}}}}}}}]}}],"systemInstruction":{{"parts":[{{"text":"You are a coding agent."}}]}}{tools},"generationConfig":{{"temperature":1}}}}"#
    )
}

#[test]
fn gemini_declares_the_tool_among_the_agents_functions() {
    let declarations = r#","tools":[{"functionDeclarations":[{"name":"run_shell_command","parameters":{"type":"OBJECT"}}]},{"googleSearch":{}}]"#;
    let body = gemini_body(declarations);
    let parsed = wire::parse(body.as_bytes(), Dialect::Gemini).unwrap();
    let rewritten = rewrite(&body);
    assert_ne!(rewritten, body);
    let Ok(Injected::Added(out)) = inject(&parsed, rewritten.as_bytes()) else {
        panic!("not injected");
    };
    let value: Value = serde_json::from_slice(&out).unwrap();
    let list = value["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1]["name"], EXPAND_TOOL_NAME);
    assert_eq!(list[1]["parameters"]["type"], "OBJECT");
    assert_eq!(value["tools"][1], serde_json::json!({"googleSearch": {}}));
    // The insertion is the only change to the rewrite.
    let tool = tool_json(Dialect::Gemini);
    let without = String::from_utf8(out.clone())
        .unwrap()
        .replace(&format!(",{tool}"), "");
    assert_eq!(without, rewritten);
    let again = wire::parse(&out, Dialect::Gemini).unwrap();
    assert_eq!(inject(&again, &out), Ok(Injected::AlreadyDeclared));

    // Declarations under the proto name are found too: the tool joins them, once.
    let body =
        gemini_body(r#","tools":[{"function_declarations":[{"name":"run_shell_command"}]}]"#);
    let parsed = wire::parse(body.as_bytes(), Dialect::Gemini).unwrap();
    let Ok(Injected::Added(out)) = inject(&parsed, body.as_bytes()) else {
        panic!("not injected");
    };
    let value: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        value["tools"][0]["function_declarations"][1]["name"],
        EXPAND_TOOL_NAME
    );
    assert_eq!(value["tools"].as_array().unwrap().len(), 1);
    let again = wire::parse(&out, Dialect::Gemini).unwrap();
    assert_eq!(inject(&again, &out), Ok(Injected::AlreadyDeclared));
    // Only built-in tools: no function is mixed in. No tools: a `tools` member.
    let body = gemini_body(r#","tools":[{"googleSearch":{}}]"#);
    let parsed = wire::parse(body.as_bytes(), Dialect::Gemini).unwrap();
    assert_eq!(
        inject(&parsed, body.as_bytes()),
        Err(Withheld::BuiltinTools)
    );
    let body = gemini_body("");
    let parsed = wire::parse(body.as_bytes(), Dialect::Gemini).unwrap();
    let Ok(Injected::Added(out)) = inject(&parsed, rewrite(&body).as_bytes()) else {
        panic!("not injected");
    };
    let value: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        value["tools"][0]["functionDeclarations"][0]["name"],
        EXPAND_TOOL_NAME
    );
    assert!(
        String::from_utf8(out)
            .unwrap()
            .contains(r#""thoughtSignature":"c2lnbmVk""#)
    );
}

#[test]
fn gemini_withholds_where_the_model_could_not_call_it() {
    let cases = [
        (
            r#""toolConfig":{"functionCallingConfig":{"mode":"NONE"}}"#,
            Err(Withheld::ToolChoiceNone),
        ),
        (
            r#""toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["run_shell_command"]}}"#,
            Err(Withheld::ToolChoiceNamed),
        ),
        (
            r#""toolConfig":{"functionCallingConfig":{"mode":"ANY"}}"#,
            Ok(()),
        ),
        (
            r#""toolConfig":{"functionCallingConfig":{"mode":"AUTO"}}"#,
            Ok(()),
        ),
        (
            r#""toolConfig":{"functionCallingConfig":{"mode":"LATER"}}"#,
            Err(Withheld::ToolChoiceUnknown),
        ),
        // gemini-cli's router asks for a JSON classification: no function may be declared.
        (
            r#""generationConfig":{"responseMimeType":"application/json"}"#,
            Err(Withheld::JsonResponse),
        ),
        (
            r#""generationConfig":{"responseJsonSchema":{"type":"object"}}"#,
            Err(Withheld::JsonResponse),
        ),
        (
            r#""toolConfig":{"functionCallingConfig":{"mode":"VALIDATED","allowedFunctionNames":["f"]}}"#,
            Err(Withheld::ToolChoiceNamed),
        ),
        // The proto names Google's JSON reads as well.
        (
            r#""tool_config":{"function_calling_config":{"mode":"NONE"}}"#,
            Err(Withheld::ToolChoiceNone),
        ),
        (
            r#""generation_config":{"response_mime_type":"application/json"}"#,
            Err(Withheld::JsonResponse),
        ),
        (
            r#""cachedContent":"cachedContents/abc""#,
            Err(Withheld::CachedContent),
        ),
    ];
    for (member, expected) in cases {
        let body =
            format!(r#"{{"contents":[{{"role":"user","parts":[{{"text":"x"}}]}}],{member}}}"#);
        let parsed = wire::parse(body.as_bytes(), Dialect::Gemini).unwrap();
        assert_eq!(reach(&parsed), expected, "{member}");
    }
}

/// The turn inserts the declaration into the body write-back made, in place: the same bytes as
/// a copy, and without moving the body, because write-back leaves room for the largest one.
#[test]
fn a_declaration_goes_into_an_owned_body_in_place() {
    for dialect in [
        Dialect::OpenAi,
        Dialect::Anthropic,
        Dialect::Responses,
        Dialect::Gemini,
    ] {
        // The largest insertion: a `tools` member made where there was none.
        let made = format!(
            r#","tools":[{{"functionDeclarations":[{}]}}]"#,
            tool_json(dialect)
        );
        assert!(made.len() <= crate::wire::DECLARATION_ROOM, "{dialect:?}");
    }
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"tool","tool_call_id":"c","content":{}}}],"tools":[{{"type":"function","function":{{"name":"bash","parameters":{{}}}}}}]}}"#,
        json::to_literal(&LONG.repeat(40))
    );
    let parsed = wire::parse(body.as_bytes(), Dialect::OpenAi).unwrap();
    let mut rewritten = parsed.messages().to_vec();
    rewritten[0].content = "cut <<cg:0123456789abcdef>>".into();
    let written = parsed.write_back(&rewritten).body;
    let std::borrow::Cow::Owned(owned) = &written else {
        panic!("write-back rewrote the body");
    };
    let (start, capacity) = (owned.as_ptr(), owned.capacity());
    let Ok(Placement::Insert(insertion)) = inject_at(&parsed, &written) else {
        panic!("placed");
    };
    let copied = insertion
        .clone()
        .into_body(std::borrow::Cow::Borrowed(&written));
    let in_place = insertion.into_body(written);
    assert_eq!(in_place, copied);
    assert_eq!((in_place.as_ptr(), in_place.capacity()), (start, capacity));
    expand_tool_is_last(&in_place, Dialect::OpenAi);
}

/// An expand tool the agent declared itself is found however its name is spelled: the quick
/// look for the name's bytes must not miss one written with `\u` escapes, and a `tools` array
/// with neither gets the declaration after its last entry.
#[test]
fn a_declared_expand_tool_is_found_in_any_spelling() {
    let escaped: String = EXPAND_TOOL_NAME
        .chars()
        .map(|c| {
            if c == '_' {
                "\\u005f".to_owned()
            } else {
                c.to_string()
            }
        })
        .collect();
    for (name, declared) in [
        (EXPAND_TOOL_NAME.to_owned(), true),
        (escaped, true),
        ("context_guru_expander".to_owned(), false),
        ("Read".to_owned(), false),
        ("Wr\\u0069te".to_owned(), false),
    ] {
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"x"}}],"tools":[{{"name":"Bash","description":"Runs a command","input_schema":{{"type":"object"}}}},{{"name":"{name}","input_schema":{{}}}}]}}"#
        );
        let parsed = wire::parse(body.as_bytes(), Dialect::Anthropic).unwrap();
        let placed = inject(&parsed, body.as_bytes());
        if declared {
            assert_eq!(placed, Ok(Injected::AlreadyDeclared), "{name}");
            continue;
        }
        let Ok(Injected::Added(out)) = placed else {
            panic!("{name}: not injected");
        };
        let value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["tools"][2]["name"], EXPAND_TOOL_NAME, "{name}");
        assert_eq!(value["tools"].as_array().map(Vec::len), Some(3), "{name}");
    }
}
