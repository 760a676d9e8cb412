//! The expand loop's wire work: recognise a response whose tool calls are all expand calls, and
//! build the continuation request. (Declaring the tool is `engine::way_back`, part of the turn.)
//!
//! Everything here splices into the forwarded bytes, like the engine's write-back: the
//! continuation appends two messages to `messages`, leaving everything else as it was.

use engine::marker::EXPAND_TOOL_NAME;
use engine::wire::Dialect;
use engine::wire::json::{self, Span};

/// One expand call the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpandCall {
    /// The provider's tool call id, which the result must answer.
    pub call_id: String,
    /// The stash id the model asked for (empty when it sent none).
    pub stash_id: String,
    /// The part of the original it asked for (`pattern`, `lines`); whole when it named none.
    pub ask: engine::way_back::Ask,
}

/// The assistant turn of a non-streamed response, as raw JSON pieces.
struct AssistantTurn<'a> {
    text: &'a str,
    /// Anthropic: the `content` array. OpenAI: the `message` object. Responses: the `output`
    /// array. Gemini: the first candidate's `content` object.
    content: Span,
    calls: Vec<(String, String, String)>,
}

fn assistant_turn(text: &str, dialect: Dialect) -> Option<AssistantTurn<'_>> {
    let root = json::parse_document(text).ok()?;
    let mut calls = Vec::new();
    let content = match dialect {
        Dialect::Anthropic => {
            let content = json::get(text, root, "content")?;
            for block in json::elements(text, content) {
                let kind =
                    json::get(text, block, "type").and_then(|t| json::decode_string(text, t).ok());
                if kind.as_deref() != Some("tool_use") {
                    continue;
                }
                let field = |k: &str| {
                    json::get(text, block, k)
                        .and_then(|v| json::decode_string(text, v).ok())
                        .map(|v| v.into_owned())
                };
                let input = json::get(text, block, "input")
                    .map(|s| s.of(text).to_owned())
                    .unwrap_or_default();
                calls.push((
                    field("id").unwrap_or_default(),
                    field("name").unwrap_or_default(),
                    input,
                ));
            }
            content
        }
        Dialect::OpenAi => {
            let choice = json::elements(text, json::get(text, root, "choices")?).next()?;
            let message = json::get(text, choice, "message")?;
            if let Some(tool_calls) = json::get(text, message, "tool_calls") {
                for call in json::elements(text, tool_calls) {
                    let id = json::get(text, call, "id")
                        .and_then(|v| json::decode_string(text, v).ok())
                        .unwrap_or_default();
                    let function = json::get(text, call, "function");
                    let get = |k: &str| {
                        function
                            .and_then(|f| json::get(text, f, k))
                            .and_then(|v| json::decode_string(text, v).ok())
                            .unwrap_or_default()
                    };
                    calls.push((
                        id.into_owned(),
                        get("name").into_owned(),
                        get("arguments").into_owned(),
                    ));
                }
            }
            message
        }
        Dialect::Responses => {
            let output = json::get(text, root, "output")?;
            for item in json::elements(text, output) {
                let field = |k: &str| {
                    json::get(text, item, k)
                        .and_then(|v| json::decode_string(text, v).ok())
                        .map(|v| v.into_owned())
                        .unwrap_or_default()
                };
                // Calls the client runs; hosted tools (`web_search_call`) ran at the provider.
                let arguments = match field("type").as_str() {
                    "function_call" => field("arguments"),
                    "custom_tool_call" => field("input"),
                    _ => continue,
                };
                calls.push((field("call_id"), field("name"), arguments));
            }
            output
        }
        Dialect::Gemini => {
            let candidate = json::elements(text, json::get(text, root, "candidates")?).next()?;
            let content = json::get(text, candidate, "content")?;
            for part in json::elements(text, json::get(text, content, "parts")?) {
                let Some(call) = json::get(text, part, "functionCall") else {
                    continue;
                };
                let field = |k: &str| {
                    json::get(text, call, k)
                        .and_then(|v| json::decode_string(text, v).ok())
                        .map(|v| v.into_owned())
                        .unwrap_or_default()
                };
                let args = json::get(text, call, "args").map_or("{}", |s| s.of(text));
                calls.push((field("id"), field("name"), args.to_owned()));
            }
            content
        }
    };
    Some(AssistantTurn {
        text,
        content,
        calls,
    })
}

/// The expand calls of a non-streamed response, when it made at least one tool call and every
/// one of them is an expand call. Any other tool means the agent must see the response as is.
pub fn expand_calls(response: &[u8], dialect: Dialect) -> Option<Vec<ExpandCall>> {
    let text = std::str::from_utf8(response).ok()?;
    let turn = assistant_turn(text, dialect)?;
    if turn.calls.is_empty()
        || turn
            .calls
            .iter()
            .any(|(_, name, _)| name != EXPAND_TOOL_NAME)
    {
        return None;
    }
    Some(
        turn.calls
            .iter()
            .map(|(call_id, _, args)| ExpandCall {
                call_id: call_id.clone(),
                stash_id: requested_id(args),
                ask: requested_part(args),
            })
            .collect(),
    )
}

/// The `pattern` and `lines` arguments of an expand call (`lines` also as a number).
fn requested_part(arguments: &str) -> engine::way_back::Ask {
    let Ok(root) = json::parse_document(arguments) else {
        return engine::way_back::Ask::default();
    };
    let text = |key: &str| {
        json::get(arguments, root, key).and_then(|v| match json::kind_of(arguments, v) {
            json::Kind::String => json::decode_string(arguments, v)
                .ok()
                .map(|s| s.into_owned()),
            json::Kind::Number => Some(v.of(arguments).to_owned()),
            _ => None,
        })
    };
    engine::way_back::Ask::parse(text("pattern").as_deref(), text("lines").as_deref())
}

/// The `id` argument of an expand call, tolerating a marker pasted whole (`<<cg:ID>>`).
fn requested_id(arguments: &str) -> String {
    let Ok(root) = json::parse_document(arguments) else {
        return String::new();
    };
    let id = json::get(arguments, root, "id")
        .and_then(|v| json::decode_string(arguments, v).ok())
        .unwrap_or_default();
    let id = id.trim();
    id.strip_prefix("<<cg:")
        .and_then(|s| s.strip_suffix(">>"))
        .unwrap_or(id)
        .to_owned()
}

/// The next request of the loop: `forwarded` plus the assistant turn of `response` and one tool
/// result per call, in call order. `None` when either body is unreadable.
pub fn continuation(
    forwarded: &[u8],
    response: &[u8],
    dialect: Dialect,
    results: &[(String, String)],
) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(forwarded).ok()?;
    let root = json::parse_document(text).ok()?;
    let messages = json::get(text, root, dialect.transcript_key())?;
    let response_text = std::str::from_utf8(response).ok()?;
    let turn = assistant_turn(response_text, dialect)?;
    let mut added = String::new();
    match dialect {
        Dialect::Anthropic => anthropic_turn(&mut added, &turn, results),
        Dialect::OpenAi => openai_turn(&mut added, &turn, results),
        Dialect::Responses => {
            let stateless = json::get(text, root, "store").is_some_and(|s| s.of(text) == "false");
            responses_turn(&mut added, &turn, stateless, results);
        }
        Dialect::Gemini => gemini_turn(&mut added, &turn, results),
    }
    let close = messages.end - 1;
    let empty = json::elements(text, messages).next().is_none();
    let mut out = Vec::with_capacity(forwarded.len() + added.len() + 1);
    out.extend_from_slice(&forwarded[..close]);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(added.as_bytes());
    out.extend_from_slice(&forwarded[close..]);
    Some(out)
}

/// Messages: the assistant's content verbatim, then one user turn of tool results.
fn anthropic_turn(added: &mut String, turn: &AssistantTurn<'_>, results: &[(String, String)]) {
    let raw = turn.content.of(turn.text);
    added.push_str(r#"{"role":"assistant","content":"#);
    added.push_str(raw);
    added.push_str(r#"},{"role":"user","content":["#);
    push_results(
        added,
        r#"{"type":"tool_result","tool_use_id":"#,
        "content",
        results,
    );
    added.push_str("]}");
}

/// Chat completions: a clean assistant message, then one tool message per call.
fn openai_turn(added: &mut String, turn: &AssistantTurn<'_>, results: &[(String, String)]) {
    // A clean assistant message: the response's message may carry response-only
    // fields (refusal, annotations) that a strict server rejects in a request.
    let message = turn.content;
    let content = json::get(turn.text, message, "content").map_or("null", |s| s.of(turn.text));
    let tool_calls = json::get(turn.text, message, "tool_calls").map_or("[]", |s| s.of(turn.text));
    added.push_str(&format!(
        r#"{{"role":"assistant","content":{content},"tool_calls":{tool_calls}}}"#
    ));
    for (call_id, original) in results {
        added.push(',');
        push_result(
            added,
            r#"{"role":"tool","tool_call_id":"#,
            call_id,
            "content",
            original,
        );
    }
}

/// Responses: the output items a stateless request may carry again, then the call outputs.
fn responses_turn(
    added: &mut String,
    turn: &AssistantTurn<'_>,
    stateless: bool,
    results: &[(String, String)],
) {
    for item in json::elements(turn.text, turn.content) {
        let Some(item) = replayable_item(turn.text, item, stateless) else {
            continue;
        };
        added.push_str(&item);
        added.push(',');
    }
    push_results(
        added,
        r#"{"type":"function_call_output","call_id":"#,
        "output",
        results,
    );
}

/// Gemini: the model's content, then one user turn of function responses.
fn gemini_turn(added: &mut String, turn: &AssistantTurn<'_>, results: &[(String, String)]) {
    let raw = turn.content.of(turn.text);
    // The model's content verbatim: its `thoughtSignature`s must come back as they were.
    // (A content without its role would read as the user's.)
    if json::get(turn.text, turn.content, "role").is_some() {
        added.push_str(raw);
    } else {
        let parts = json::get(turn.text, turn.content, "parts").map_or("[]", |p| p.of(turn.text));
        added.push_str(&format!(r#"{{"role":"model","parts":{parts}}}"#));
    }
    added.push_str(r#",{"role":"user","parts":["#);
    for (i, (call_id, original)) in results.iter().enumerate() {
        if i > 0 {
            added.push(',');
        }
        added.push_str(r#"{"functionResponse":{"name":"#);
        json::encode_string(EXPAND_TOOL_NAME, added);
        // An id answers the call that had one; without, calls pair by name and order.
        if !call_id.is_empty() {
            added.push_str(r#","id":"#);
            json::encode_string(call_id, added);
        }
        added.push_str(r#","response":{"output":"#);
        json::encode_string(original, added);
        added.push_str("}}}");
    }
    added.push_str("]}");
}

/// [`push_result`] for each of `results`, comma-separated.
fn push_results(out: &mut String, head: &str, key: &str, results: &[(String, String)]) {
    for (i, (call_id, original)) in results.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_result(out, head, call_id, key, original);
    }
}

/// Appends one tool result object: `head` (its opening up to the call id's key), the call id,
/// then the original under `key`.
fn push_result(out: &mut String, head: &str, call_id: &str, key: &str, original: &str) {
    out.push_str(head);
    json::encode_string(call_id, out);
    out.push_str(&format!(r#","{key}":"#));
    json::encode_string(original, out);
    out.push('}');
}

/// One output item of a Responses reply as the next request's input must carry it.
///
/// The documented loop feeds `response.output` back as input. A stored conversation resolves
/// item ids, so items go back verbatim (sluice withholds its cuts on stored requests, see
/// `way_back::Withheld::StoredResponse`, but a request may carry an older marker). With
/// `"store": false` nothing is kept upstream: an `id` would name an item the provider never
/// saved, so every item goes back without one, and a reasoning item survives only with its
/// `encrypted_content` (the only way stateless reasoning is carried over).
fn replayable_item(text: &str, item: Span, stateless: bool) -> Option<String> {
    let raw = item.of(text);
    if !stateless {
        return Some(raw.to_owned());
    }
    let mut value: serde_json::Value = serde_json::from_str(raw).ok()?;
    let object = value.as_object_mut()?;
    let reasoning = object.get("type").and_then(|t| t.as_str()) == Some("reasoning");
    if reasoning
        && !object
            .get("encrypted_content")
            .is_some_and(|c| c.is_string())
    {
        return None;
    }
    object.remove("id");
    Some(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_all_expand_responses_only() {
        let expand = br#"{"content":[{"type":"text","text":"let me look"},{"type":"tool_use","id":"tu1","name":"context_guru_expand","input":{"id":"<<cg:abc>>"}}],"stop_reason":"tool_use"}"#;
        let calls = expand_calls(expand, Dialect::Anthropic).unwrap();
        assert_eq!(
            calls,
            vec![ExpandCall {
                call_id: "tu1".into(),
                stash_id: "abc".into(),
                ask: engine::way_back::Ask::default(),
            }]
        );
        let partial = br#"{"content":[{"type":"tool_use","id":"tu2","name":"context_guru_expand","input":{"id":"abc","lines":"5-9","pattern":""}}]}"#;
        let calls = expand_calls(partial, Dialect::Anthropic).unwrap();
        assert_eq!(calls[0].ask.lines, Some((5, 9)));
        assert_eq!(
            calls[0].ask.pattern, None,
            "an empty pattern asks for nothing"
        );
        let mixed = br#"{"content":[{"type":"tool_use","id":"a","name":"context_guru_expand","input":{"id":"x"}},{"type":"tool_use","id":"b","name":"bash","input":{}}]}"#;
        assert_eq!(expand_calls(mixed, Dialect::Anthropic), None);
        let text_only = br#"{"choices":[{"message":{"role":"assistant","content":"done"}}]}"#;
        assert_eq!(expand_calls(text_only, Dialect::OpenAi), None);
        let openai = br#"{"choices":[{"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"context_guru_expand","arguments":"{\"id\":\"abc\"}"}}]}}]}"#;
        assert_eq!(
            expand_calls(openai, Dialect::OpenAi).unwrap()[0].stash_id,
            "abc"
        );
    }

    #[test]
    fn continuation_appends_the_turn_and_one_result_per_call() {
        let forwarded =
            br#"{"model":"m","messages":[{"role":"user","content":"q"}],"stream":false}"#;
        let response = br#"{"choices":[{"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"context_guru_expand","arguments":"{\"id\":\"abc\"}"}}]}}]}"#;
        let next = continuation(
            forwarded,
            response,
            Dialect::OpenAi,
            &[("c1".into(), "the \"original\"".into())],
        )
        .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&next).unwrap();
        let messages = value["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["tool_calls"][0]["id"], "c1");
        assert!(messages[1].get("refusal").is_none());
        assert_eq!(messages[2]["role"], "tool");
        assert_eq!(messages[2]["content"], "the \"original\"");
        assert_eq!(value["stream"], false);

        let forwarded = br#"{"messages":[{"role":"user","content":"q"}]}"#;
        let response = br#"{"content":[{"type":"tool_use","id":"tu1","name":"context_guru_expand","input":{"id":"abc"}}]}"#;
        let next = continuation(
            forwarded,
            response,
            Dialect::Anthropic,
            &[("tu1".into(), "orig".into())],
        )
        .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&next).unwrap();
        assert_eq!(value["messages"][1]["content"][0]["name"], EXPAND_TOOL_NAME);
        assert_eq!(value["messages"][2]["content"][0]["tool_use_id"], "tu1");
        assert_eq!(value["messages"][2]["content"][0]["content"], "orig");
    }

    const RESPONSES_EXPAND: &[u8] = br#"{"id":"resp_1","object":"response","status":"completed","output":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"context_guru_expand","arguments":"{\"id\":\"<<cg:abc>>\"}","status":"completed"}],"usage":{"input_tokens":10,"output_tokens":5}}"#;

    #[test]
    fn responses_expand_calls_and_continuation() {
        let calls = expand_calls(RESPONSES_EXPAND, Dialect::Responses).unwrap();
        assert_eq!(calls[0].call_id, "call_1");
        assert_eq!(calls[0].stash_id, "abc");
        let other = br#"{"output":[{"type":"function_call","call_id":"c","name":"context_guru_expand","arguments":"{}"},{"type":"custom_tool_call","call_id":"d","name":"apply_patch","input":"x"}]}"#;
        assert_eq!(expand_calls(other, Dialect::Responses), None);
        let hosted = br#"{"output":[{"type":"web_search_call","id":"ws"},{"type":"message","role":"assistant","content":[]}]}"#;
        assert_eq!(expand_calls(hosted, Dialect::Responses), None);

        let next = |forwarded: &[u8]| -> serde_json::Value {
            let next = continuation(
                forwarded,
                RESPONSES_EXPAND,
                Dialect::Responses,
                &[("call_1".into(), "orig".into())],
            )
            .unwrap();
            serde_json::from_slice(&next).unwrap()
        };
        let value = next(br#"{"model":"m","input":[{"role":"user","content":"q"}],"stream":true}"#);
        let input = value["input"].as_array().unwrap();
        assert_eq!(input.len(), 4, "question, reasoning, call, output");
        assert_eq!(input[1]["id"], "rs_1", "stored: items go back verbatim");
        assert_eq!(input[2]["id"], "fc_1");
        assert_eq!(input[3]["type"], "function_call_output");
        assert_eq!(input[3]["call_id"], "call_1");
        assert_eq!(input[3]["output"], "orig");
        assert_eq!(value["stream"], true);

        let value = next(br#"{"model":"m","store":false,"input":[{"role":"user","content":"q"}]}"#);
        let input = value["input"].as_array().unwrap();
        assert_eq!(
            input.len(),
            3,
            "reasoning without encrypted content is left out"
        );
        assert!(
            input[1].get("id").is_none(),
            "no id the provider never stored"
        );
        assert_eq!(input[1]["call_id"], "call_1");
    }
}
