//! A chat-completions corpus as the other dialects would carry the same conversation, for
//! tests, benches and `sluice replay --as-dialect`. The corpus has no Responses or Gemini
//! recordings; converting real runs keeps measurements on real transcripts.

use serde_json::{Value, json};

/// The OpenAI Responses API body of the same conversation as a chat-completions corpus body, as
/// the official SDK would send it: the leading system message becomes `instructions`, text
/// messages become `message` items, each tool call a `function_call` item and each tool output a
/// `function_call_output` item, and chat tools become flat function tools. The corpus has no
/// Responses recordings; converting real runs keeps the tests on real transcripts.
/// `None` when `chat` is not a chat-completions body.
pub fn responses_from_chat(chat: &[u8]) -> Option<Vec<u8>> {
    let body: Value = serde_json::from_slice(chat).ok()?;
    let mut input = Vec::new();
    let mut instructions = Value::Null;
    for (i, message) in body["messages"].as_array()?.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("user");
        let text = match &message["content"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => None,
        };
        match role {
            "system" if i == 0 => instructions = json!(text.unwrap_or_default()),
            "tool" | "function" => input.push(json!({
                "type": "function_call_output",
                "call_id": message["tool_call_id"],
                "output": text.unwrap_or_default(),
            })),
            _ => {
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    let part = if role == "assistant" {
                        "output_text"
                    } else {
                        "input_text"
                    };
                    input.push(json!({ "type": "message", "role": role,
                                       "content": [{ "type": part, "text": text }] }));
                }
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    input.push(json!({
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }));
                }
            }
        }
    }
    let tools: Vec<Value> = functions(&body)
        .map(|f| {
            json!({ "type": "function", "name": f["name"], "description": f["description"],
                         "parameters": f["parameters"] })
        })
        .collect();
    let mut out = json!({ "model": body["model"], "input": input, "store": false });
    if !instructions.is_null() {
        out["instructions"] = instructions;
    }
    if !tools.is_empty() {
        out["tools"] = Value::Array(tools);
    }
    serde_json::to_vec(&out).ok()
}

/// A chat-completions body as gemini-cli would send the same transcript to `generateContent`:
/// the leading system message becomes `systemInstruction`, each assistant message a `model`
/// content (its text, then one `functionCall` part per call, `args` as an object), each run of
/// tool messages one `user` content of `functionResponse` parts (`response.output`, gemini-cli's
/// key), and chat tools one `functionDeclarations` entry. Calls and responses carry no `id`,
/// as in Google's own examples, so they pair by name. The corpus has no Gemini recordings;
/// converting real runs keeps the tests on real transcripts.
/// `None` when `chat` is not a chat-completions body.
pub fn gemini_from_chat(chat: &[u8]) -> Option<Vec<u8>> {
    let body: Value = serde_json::from_slice(chat).ok()?;
    let mut contents: Vec<Value> = Vec::new();
    let mut system = Value::Null;
    let mut names = std::collections::HashMap::new();
    for (i, message) in body["messages"].as_array()?.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("user");
        let text = match &message["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        match role {
            "system" if i == 0 => system = json!({ "parts": [{ "text": text }] }),
            "tool" | "function" => {
                let name = message["tool_call_id"]
                    .as_str()
                    .and_then(|id| names.get(id).cloned())
                    .or_else(|| message["name"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "tool".to_owned());
                let part =
                    json!({ "functionResponse": { "name": name, "response": { "output": text } } });
                match contents.last_mut() {
                    Some(last) if last["parts"][0].get("functionResponse").is_some() => {
                        if let Some(parts) = last["parts"].as_array_mut() {
                            parts.push(part);
                        }
                    }
                    _ => contents.push(json!({ "role": "user", "parts": [part] })),
                }
            }
            "assistant" => {
                let mut parts = Vec::new();
                if !text.is_empty() {
                    parts.push(json!({ "text": text }));
                }
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    let name = call["function"]["name"].as_str().unwrap_or("tool");
                    if let Some(id) = call["id"].as_str() {
                        names.insert(id.to_owned(), name.to_owned());
                    }
                    let args: Value = call["function"]["arguments"]
                        .as_str()
                        .and_then(|a| serde_json::from_str(a).ok())
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    parts.push(json!({ "functionCall": { "name": name, "args": args } }));
                }
                if parts.is_empty() {
                    parts.push(json!({ "text": "" }));
                }
                contents.push(json!({ "role": "model", "parts": parts }));
            }
            _ => contents.push(json!({ "role": "user", "parts": [{ "text": text }] })),
        }
    }
    let declarations: Vec<Value> = functions(&body)
        .map(|f| {
            json!({ "name": f["name"], "description": f["description"],
                         "parameters": f["parameters"] })
        })
        .collect();
    let mut out = json!({ "contents": contents });
    if !system.is_null() {
        out["systemInstruction"] = system;
    }
    if !declarations.is_empty() {
        out["tools"] = json!([{ "functionDeclarations": declarations }]);
    }
    serde_json::to_vec(&out).ok()
}

/// The `function` of each chat-completions tool.
fn functions(body: &Value) -> impl Iterator<Item = &Value> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| &t["function"])
}
