//! Claude on Bedrock through the real server, against a mock that refuses any request whose
//! SigV4 signature AWS's own signer does not reproduce: a public corpus run as Claude Code
//! sends it on Bedrock (Messages without `model` and `stream`, with `anthropic_version`),
//! invoked whole and streamed as AWS's event-stream. Compaction, markers and the expand loop in
//! place with every round signed again; a client's own signature when sluice holds no
//! credentials (untouched), a Bedrock API key (rewritten, sent as it came), an unsigned request
//! (rewritten), the other Bedrock paths (untouched), and a stream exception frame relayed whole.

use aws_credential_types::Credentials;
use engine::wire::Dialect;
use integration_tests::mock::Reply;
use proxy::bedrock::{CredentialSource, Unframe};
use serde_json::Value;

use crate::proxy::{Sluice, answer_text, call, corpus, first_marker, start_tuned, streamed_text};

const MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0";

/// A stale client signature, as Claude Code sends without `CLAUDE_CODE_SKIP_BEDROCK_AUTH`.
const CLIENT_SIGNED: [(&str, &str); 2] = [
    (
        "authorization",
        "AWS4-HMAC-SHA256 Credential=AKIACLIENT/20260101/us-west-2/bedrock/aws4_request, \
         SignedHeaders=host;x-amz-date, Signature=00",
    ),
    ("x-amz-date", "20260101T000000Z"),
];

fn credentials() -> Credentials {
    Credentials::new(
        "AKIASLUICETEST",
        "c2x1aWNlIHRlc3Qgc2VjcmV0IGtleQ",
        Some("session-token-1".into()),
        None,
        "test",
    )
}

/// The corpus run as Claude Code's Bedrock client sends it.
fn bedrock_body() -> Vec<u8> {
    let mut body: Value = serde_json::from_slice(&corpus(
        "gemini3pro-miniswe-pytest-dev-pytest-6197",
        Dialect::Anthropic,
    ))
    .unwrap();
    let object = body.as_object_mut().unwrap();
    object.remove("model");
    object.remove("stream");
    object.insert("anthropic_version".into(), "bedrock-2023-05-31".into());
    serde_json::to_vec(&body).unwrap()
}

/// sluice with Bedrock at the mock, signing for us-west-2 with credentials from `source`.
async fn start(source: CredentialSource) -> Sluice {
    start_tuned(
        |_| engine::config::EMBEDDED_DEFAULT.to_owned(),
        |settings| {
            settings.bedrock_upstream = Some(settings.anthropic_upstream.clone());
            settings.bedrock_region = Some("us-west-2".into());
            settings.bedrock_credentials = source;
        },
    )
    .await
}

async fn start_signing() -> Sluice {
    let sluice = start(CredentialSource::Fixed(credentials())).await;
    sluice.mock.require_sigv4(credentials(), "us-west-2");
    sluice
}

fn url(sluice: &Sluice, method: &str) -> String {
    format!("{}/bedrock/model/{MODEL}/{method}", sluice.url)
}

/// Calls `method` of the model with `headers`; the reply must be a 200.
async fn invoke(
    sluice: &Sluice,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> crate::proxy::Reply_ {
    let reply = call("POST", &url(sluice, method), headers, body.to_vec()).await;
    let text = String::from_utf8_lossy(&reply.body);
    assert_eq!(reply.status, 200, "{text}");
    reply
}

/// The SSE an event-stream reply carries.
fn unframed(body: &[u8]) -> String {
    let mut unframe = Unframe::default();
    let text = unframe.feed(body).expect("a valid event stream");
    unframe.finish().expect("no unfinished frame");
    String::from_utf8(text.to_vec()).unwrap()
}

#[tokio::test]
async fn bedrock_invoke_is_compacted_signed_and_expanded() {
    let sluice = start_signing().await;
    let body = bedrock_body();
    let reply = invoke(&sluice, "invoke", &CLIENT_SIGNED, &body).await;
    assert_eq!(answer_text(&reply.body, Dialect::Anthropic), "ok");
    let sent = sluice.mock.recorded().last().unwrap().clone();
    assert_eq!(sent.path, format!("/model/{MODEL}/invoke"));
    let authorization = sent.headers["authorization"].to_str().unwrap();
    assert!(
        authorization.contains("Credential=AKIASLUICETEST/"),
        "{authorization}"
    );
    assert_eq!(sent.headers["x-amz-security-token"], "session-token-1");
    assert!(sent.body.len() < body.len(), "compacted");
    let (id, original) = first_marker(&sent.body, &body, Dialect::Anthropic);
    let forwarded: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(forwarded["anthropic_version"], "bedrock-2023-05-31");
    assert!(forwarded.get("model").is_none() && forwarded.get("stream").is_none());

    // The expand loop: each round's new body is signed again (the mock refuses otherwise).
    sluice.mock.script([
        Reply::Expand {
            text: None,
            ids: vec![id.clone()],
        },
        Reply::Text("bedrock final".into()),
    ]);
    let reply = invoke(&sluice, "invoke", &CLIENT_SIGNED, &body).await;
    assert_eq!(
        answer_text(&reply.body, Dialect::Anthropic),
        "bedrock final"
    );
    let continuation =
        String::from_utf8_lossy(&sluice.mock.recorded().last().unwrap().body).into_owned();
    assert!(continuation.contains(&serde_json::to_string(&original).unwrap()[1..200]));

    // Streamed: the reply is an event stream, the expand round inside it never shows.
    sluice.mock.script([
        Reply::Expand {
            text: None,
            ids: vec![id],
        },
        Reply::Text("streamed final".into()),
    ]);
    let stream_url = url(&sluice, "invoke-with-response-stream");
    let reply = call("POST", &stream_url, &[], body.clone()).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(
        reply.headers["content-type"],
        "application/vnd.amazon.eventstream"
    );
    let text = unframed(&reply.body);
    assert_eq!(streamed_text(text.as_bytes()), "streamed final");
    assert!(!text.contains("context_guru_expand"), "{text}");
    assert_eq!(text.matches("event: message_start").count(), 1);

    // sluice's identity is for its own agents' calls: not for a page that rebinds its own name
    // to 127.0.0.1 (the mock refuses the unsigned request, as AWS would), nor for the control
    // plane's writes.
    let rebound = [("host", "rebound.example")];
    let reply = call("POST", &url(&sluice, "invoke"), &rebound, body.clone()).await;
    assert_eq!(reply.status, 403);
    // Nor for a page on another site that POSTs to 127.0.0.1 blind (`mode: "no-cors"`).
    let page = [
        ("origin", "https://elsewhere.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    let reply = call("POST", &url(&sluice, "invoke"), &page, body.clone()).await;
    assert_eq!(reply.status, 403);
    let provision = format!("{}/bedrock/provisioned-model-throughput", sluice.url);
    call("POST", &provision, &[], b"{}".to_vec()).await;
    let sent = sluice.mock.recorded().last().unwrap().clone();
    assert_eq!(sent.path, "/provisioned-model-throughput");
    assert!(!sent.headers.contains_key("authorization"));

    // A stream exception frame reaches the agent as its bytes came.
    let exception =
        integration_tests::aws::exception_frame("throttlingException", "Too many tokens");
    let head = integration_tests::aws::event_stream(&[
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n".to_owned(),
    ]);
    let raw = [head[0].clone(), exception.clone()].concat();
    sluice.mock.script([Reply::Raw {
        status: 200,
        headers: vec![("content-type", "application/vnd.amazon.eventstream")],
        body: raw.into(),
        piece: 7,
    }]);
    let reply = call("POST", &stream_url, &[], body).await;
    assert!(
        reply
            .body
            .windows(exception.len())
            .any(|w| w == exception.as_ref()),
        "the exception frame is relayed byte for byte"
    );
}

#[tokio::test]
async fn without_credentials_a_client_signature_goes_untouched() {
    let sluice = start(CredentialSource::Off).await;
    let body = bedrock_body();
    let reply = call(
        "POST",
        &url(&sluice, "invoke"),
        &CLIENT_SIGNED,
        body.clone(),
    )
    .await;
    assert_eq!(reply.status, 200);
    let sent = sluice.mock.recorded().last().unwrap().clone();
    assert_eq!(sent.body, body, "byte-identical: its signature covers it");
    assert_eq!(sent.headers["authorization"], CLIENT_SIGNED[0].1);
    let stats: Value = serde_json::from_slice(
        &call("GET", &format!("{}/stats", sluice.url), &[], vec![])
            .await
            .body,
    )
    .unwrap();
    assert_eq!(stats["untouched"]["client_signed"], 1);

    // A Bedrock API key binds no body: compacted, the key forwarded as it came.
    let bearer = [("authorization", "Bearer ABSKQmVkcm9ja0FQSUtleQ==")];
    call("POST", &url(&sluice, "invoke"), &bearer, body.clone()).await;
    let sent = sluice.mock.recorded().last().unwrap().clone();
    assert!(sent.body.len() < body.len());
    assert_eq!(sent.headers["authorization"], bearer[0].1);

    // Unsigned (CLAUDE_CODE_SKIP_BEDROCK_AUTH, a gateway that signs): compacted, unsigned.
    call("POST", &url(&sluice, "invoke"), &[], body.clone()).await;
    let sent = sluice.mock.recorded().last().unwrap().clone();
    assert!(sent.body.len() < body.len());
    assert!(!sent.headers.contains_key("authorization"));

    // Other Bedrock calls pass through untouched.
    let converse = format!("{}/bedrock/model/{MODEL}/converse", sluice.url);
    call("POST", &converse, &[], body.clone()).await;
    let sent = sluice.mock.recorded().last().unwrap().clone();
    assert_eq!(sent.path, format!("/model/{MODEL}/converse"));
    assert_eq!(sent.body, body);
}
