//! Gemini's `generateContent` and Vertex AI through the real server: a public corpus run
//! converted to the shape gemini-cli sends (`integration_tests::gemini_from_chat`, with signed
//! model turns as Gemini 3 returns them), streamed and not. Compaction, markers with the tool
//! declared among the agent's functions, the expand loop in place, signatures byte-identical,
//! the paths that pass through untouched, and Vertex's publisher paths for Gemini and Claude.

use engine::wire::Dialect;
use integration_tests::mock::{GEMINI_SIGNATURE, Reply};
use serde_json::Value;

use crate::proxy::{Sluice, answer_text, call, corpus, first_marker, start, streamed_text};

const MODEL_PATH: &str = "/gemini/v1beta/models/gemini-2.5-pro";

/// A corpus run as gemini-cli would send it, each model turn's first call signed.
fn signed_body() -> (Vec<u8>, Vec<String>) {
    let mut value: Value = serde_json::from_slice(&corpus(
        "gemini3pro-miniswe-pytest-dev-pytest-6197",
        Dialect::Gemini,
    ))
    .unwrap();
    let mut signatures = Vec::new();
    for (i, content) in value["contents"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        if content["role"] != "model" {
            continue;
        }
        if let Some(call) = content["parts"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|p| p.get("functionCall").is_some())
        {
            let signature = format!("c2lnbmF0dXJl{i:04}+/==");
            call["thoughtSignature"] = Value::String(signature.clone());
            signatures.push(signature);
        }
    }
    (serde_json::to_vec(&value).unwrap(), signatures)
}

async fn generate(
    sluice: &Sluice,
    stream: bool,
    headers: &[(&str, &str)],
    body: &[u8],
) -> crate::proxy::Reply_ {
    let url = if stream {
        format!("{}{MODEL_PATH}:streamGenerateContent?alt=sse", sluice.url)
    } else {
        format!("{}{MODEL_PATH}:generateContent", sluice.url)
    };
    call("POST", &url, headers, body.to_vec()).await
}

#[tokio::test]
async fn gemini_bodies_are_compacted_with_the_way_back_declared() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let (body, signatures) = signed_body();
    assert!(signatures.len() > 3);
    let reply = generate(&sluice, false, &[("x-goog-api-key", "AIza-one")], &body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(answer_text(&reply.body, Dialect::Gemini), "ok");
    let recorded = sluice.mock.recorded();
    let sent = recorded.last().unwrap();
    assert_eq!(sent.path, "/v1beta/models/gemini-2.5-pro:generateContent");
    assert_eq!(sent.headers["x-goog-api-key"], "AIza-one");
    let forwarded = sent.body.clone();
    assert!(forwarded.len() < body.len(), "compacted");
    first_marker(&forwarded, &body, Dialect::Gemini);
    let text = String::from_utf8(forwarded.to_vec()).unwrap();
    // Every signed model content leaves as it came, byte for byte.
    let sent_value: Value = serde_json::from_slice(&body).unwrap();
    let signed: Vec<String> = sent_value["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.to_string().contains("thoughtSignature"))
        .map(Value::to_string)
        .collect();
    assert_eq!(signed.len(), signatures.len());
    for content in &signed {
        assert!(
            text.contains(content.as_str()),
            "a signed content changed: {content:.200}"
        );
    }
    let value: Value = serde_json::from_slice(&forwarded).unwrap();
    let declarations = value["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap();
    assert_eq!(declarations.last().unwrap()["name"], "context_guru_expand");
    // Everything but the transcript and the tools is the agent's bytes.
    let original = std::str::from_utf8(&body).unwrap();
    assert_eq!(
        integration_tests::top_level_fields(&text, "contents")
            .into_iter()
            .filter(|(k, _)| *k != "\"tools\"")
            .collect::<Vec<_>>(),
        integration_tests::top_level_fields(original, "contents")
            .into_iter()
            .filter(|(k, _)| *k != "\"tools\"")
            .collect::<Vec<_>>(),
    );
    let stats = sluice.stats().await;
    assert_eq!(
        stats["untouched"]["unparsed_malformed"],
        Value::Null,
        "{stats}"
    );
}

#[tokio::test]
async fn gemini_expand_rounds_are_answered_in_place_streamed_and_not() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let (body, _) = signed_body();
    for stream in [false, true] {
        generate(&sluice, stream, &[], &body).await;
        let (id, original) = first_marker(
            &sluice.mock.recorded().last().unwrap().body,
            &body,
            Dialect::Gemini,
        );
        let before = sluice.mock.recorded().len();
        sluice.mock.script([
            Reply::Expand {
                text: Some("Let me look.".into()),
                ids: vec![id],
            },
            Reply::Text("final answer".into()),
        ]);
        let reply = generate(&sluice, stream, &[], &body).await;
        assert_eq!(reply.status, 200);
        let raw = String::from_utf8_lossy(&reply.body).into_owned();
        if stream {
            assert_eq!(
                streamed_text(&reply.body),
                "Let me look.final answer",
                "{raw}"
            );
        } else {
            assert_eq!(
                answer_text(&reply.body, Dialect::Gemini),
                "final answer",
                "{raw}"
            );
        }
        assert!(
            !raw.contains("context_guru_expand"),
            "the agent never sees the round"
        );
        let recorded = sluice.mock.recorded();
        assert_eq!(recorded.len(), before + 2, "one continuation round");
        let continuation: Value = serde_json::from_slice(&recorded.last().unwrap().body).unwrap();
        let contents = continuation["contents"].as_array().unwrap();
        let (call, answer) = (&contents[contents.len() - 2], &contents[contents.len() - 1]);
        assert_eq!(call["role"], "model");
        // The model's signed call goes back as it came.
        let signed = call["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p.get("functionCall").is_some())
            .unwrap();
        assert_eq!(signed["thoughtSignature"], GEMINI_SIGNATURE);
        assert_eq!(answer["role"], "user");
        let response = &answer["parts"][0]["functionResponse"];
        assert_eq!(response["name"], "context_guru_expand");
        assert_eq!(response["response"]["output"], original);
        // The usage the agent reads counts both rounds (the mock sends the last piece of
        // text in the chunk that carries the call: the agent still reads it).
        let billed = sluice.mock.billed();
        let rounds: u64 = billed[billed.len() - 2..]
            .iter()
            .map(|u| u["promptTokenCount"].as_u64().unwrap())
            .sum();
        let usage = last_usage(&reply.body, stream);
        assert_eq!(usage["promptTokenCount"], rounds, "{usage}");
    }
    let stats = sluice.stats().await;
    assert_eq!(stats["expand_rounds"], 2);
    assert_eq!(stats["requests_by_dialect"]["gemini"], 4, "{stats}");
}

/// The `usageMetadata` of a reply, or of a stream's last chunk.
fn last_usage(body: &[u8], stream: bool) -> Value {
    if !stream {
        return serde_json::from_slice::<Value>(body).unwrap()["usageMetadata"].clone();
    }
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("usageMetadata").cloned())
        .next_back()
        .unwrap()
}

#[tokio::test]
async fn other_gemini_calls_pass_through_untouched() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let (body, _) = signed_body();
    for path in [
        // A JSON-array stream, which the expand loop does not read.
        ":streamGenerateContent",
        ":countTokens",
    ] {
        let url = format!("{}{MODEL_PATH}{path}?key=AIza-query", sluice.url);
        let reply = call("POST", &url, &[], body.clone()).await;
        assert_eq!(reply.status, 200, "{path}");
        let sent = sluice.mock.recorded().last().unwrap().clone();
        assert_eq!(sent.body.as_ref(), &body[..], "{path}: byte-identical");
    }
    // The router's JSON classification gets no function declared, so nothing lossy is cut.
    let mut value: Value = serde_json::from_slice(&body).unwrap();
    value["generationConfig"] = serde_json::json!({"responseMimeType": "application/json"});
    let classify = serde_json::to_vec(&value).unwrap();
    generate(&sluice, false, &[], &classify).await;
    let sent = sluice.mock.recorded().last().unwrap().body.clone();
    assert!(!String::from_utf8_lossy(&sent).contains("context_guru_expand"));
    assert!(!String::from_utf8_lossy(&sent).contains("<<cg:"));
    let stats = sluice.stats().await;
    assert_eq!(stats["way_back_withheld"]["json_response"], 1, "{stats}");
}

#[tokio::test]
async fn vertex_paths_rewrite_gemini_and_claude_and_forward_the_token() {
    let sluice = start(engine::config::EMBEDDED_DEFAULT).await;
    let base = "/vertex/v1/projects/sluice-test/locations/us-east5/publishers";
    let bearer = [("authorization", "Bearer ya29.token")];

    let (gemini, signatures) = signed_body();
    let url = format!(
        "{}{base}/google/models/gemini-2.5-pro:generateContent",
        sluice.url
    );
    let reply = call("POST", &url, &bearer, gemini.clone()).await;
    assert_eq!(reply.status, 200);
    let sent = sluice.mock.recorded().last().unwrap().clone();
    assert_eq!(
        sent.path,
        "/v1/projects/sluice-test/locations/us-east5/publishers/google/models/gemini-2.5-pro:generateContent"
    );
    assert_eq!(sent.headers["authorization"], "Bearer ya29.token");
    first_marker(&sent.body, &gemini, Dialect::Gemini);
    assert!(String::from_utf8_lossy(&sent.body).contains(&signatures[0]));

    // Claude Code on Vertex: Messages without `model`, with Vertex's `anthropic_version`.
    let mut claude: Value = serde_json::from_slice(&corpus(
        "gemini3pro-miniswe-pytest-dev-pytest-6197",
        Dialect::Anthropic,
    ))
    .unwrap();
    let object = claude.as_object_mut().unwrap();
    object.remove("model");
    object.insert("anthropic_version".into(), "vertex-2023-10-16".into());
    object.insert("stream".into(), true.into());
    let claude = serde_json::to_vec(&claude).unwrap();
    let url = format!(
        "{}{base}/anthropic/models/claude-sonnet-4-5:streamRawPredict",
        sluice.url
    );
    let reply = call("POST", &url, &bearer, claude.clone()).await;
    assert_eq!(streamed_text(&reply.body), "ok");
    let sent = sluice.mock.recorded().last().unwrap().clone();
    assert!(
        sent.path
            .ends_with("/publishers/anthropic/models/claude-sonnet-4-5:streamRawPredict")
    );
    let (id, original) = first_marker(&sent.body, &claude, Dialect::Anthropic);
    let forwarded: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(forwarded["anthropic_version"], "vertex-2023-10-16");
    assert!(forwarded.get("model").is_none());
    // The expand loop runs in place on Vertex's stream too.
    sluice.mock.script([
        Reply::Expand {
            text: None,
            ids: vec![id],
        },
        Reply::Text("vertex final".into()),
    ]);
    let reply = call("POST", &url, &bearer, claude).await;
    assert_eq!(streamed_text(&reply.body), "vertex final");
    let continuation =
        String::from_utf8_lossy(&sluice.mock.recorded().last().unwrap().body).into_owned();
    assert!(continuation.contains(&serde_json::to_string(&original).unwrap()[1..200]));

    // A caller-chosen segment may not climb out of the upstream's path.
    let climbing = format!(
        "{}/vertex/v1/projects/%2e%2e/locations/us-east5/publishers/google/models/g:generateContent",
        sluice.url
    );
    assert_eq!(
        call("POST", &climbing, &bearer, gemini.clone())
            .await
            .status,
        400
    );

    // Token counting and other Vertex paths pass through.
    let count = format!(
        "{}{base}/anthropic/models/count-tokens:rawPredict",
        sluice.url
    );
    let body = br#"{"anthropic_version":"vertex-2023-10-16","messages":[]}"#.to_vec();
    call("POST", &count, &bearer, body.clone()).await;
    assert_eq!(
        sluice.mock.recorded().last().unwrap().body.as_ref(),
        &body[..]
    );
}
