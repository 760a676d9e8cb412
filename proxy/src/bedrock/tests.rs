//! Bedrock: SigV4 against AWS's published vectors, the routes and upstreams, and the event-stream framing read and written at every chunking.

use super::*;

fn test_credentials(token: Option<&str>) -> Credentials {
    Credentials::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        token.map(str::to_owned),
        None,
        "test",
    )
}

fn at(rfc3339_secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(rfc3339_secs)
}

fn signature(headers: &HeaderMap) -> String {
    let auth = headers[AUTHORIZATION].to_str().unwrap();
    auth.rsplit_once("Signature=").unwrap().1.to_owned()
}

/// Signs through [`sign`] and returns the headers it set.
fn signed(
    credentials: &Credentials,
    scope: Scope<'_>,
    method: Method,
    uri: &str,
    body: &[u8],
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    sign(credentials, scope, (&method, uri), &mut headers, body).unwrap();
    headers
}

/// AWS's SigV4 test suite (the vectors `aws-sigv4` ships), through [`sign`].
#[test]
fn signs_aws_test_vectors() {
    // `double-url-encode`: a path with `%3A`, as Bedrock model ids have (`...-v1%3A0`).
    let headers = signed(
        &test_credentials(None),
        Scope {
            service: "lambda",
            region: "us-east-2",
            time: at(1_620_747_645), // 2021-05-11T15:40:45Z
        },
        Method::POST,
        "https://lambda.us-east-2.amazonaws.com/2015-03-31/functions/\
         arn%3Aaws%3Alambda%3Aus-west-2%3A892717189312%3Afunction%3Amy-rusty-fun/invocations",
        b"",
    );
    assert_eq!(
        headers[AUTHORIZATION],
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20210511/us-east-2/lambda/aws4_request, \
         SignedHeaders=host;x-amz-date, \
         Signature=4b93abbcc68be32bd64c18e2c71150660ab4c29bbd6c32a383a7517a88fc1804"
    );
    let vanilla = Scope {
        service: "service",
        region: "us-east-1",
        time: at(1_440_938_160), // 2015-08-30T12:36:00Z
    };
    // `post-vanilla`.
    let headers = signed(
        &test_credentials(None),
        vanilla,
        Method::POST,
        "https://example.amazonaws.com/",
        b"",
    );
    assert_eq!(
        signature(&headers),
        "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
    );
    assert_eq!(headers["x-amz-date"], "20150830T123600Z");
    // `get-vanilla-with-session-token`.
    let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
    let headers = signed(
        &test_credentials(Some(token)),
        vanilla,
        Method::GET,
        "https://example.amazonaws.com/",
        b"",
    );
    assert_eq!(
        signature(&headers),
        "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"
    );
    assert_eq!(headers["x-amz-security-token"], token);
}

#[test]
fn sign_replaces_the_clients_signature() {
    let mut headers = HeaderMap::new();
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_static("AWS4-HMAC-SHA256 old"),
    );
    headers.insert("x-amz-date", HeaderValue::from_static("20000101T000000Z"));
    headers.insert("x-amz-content-sha256", HeaderValue::from_static("UNSIGNED"));
    headers.insert("anthropic-beta", HeaderValue::from_static("x"));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let credentials = test_credentials(Some("token-1"));
    let scope = Scope {
        service: SERVICE,
        region: "us-west-2",
        time: at(1_700_000_000),
    };
    let uri = "https://bedrock-runtime.us-west-2.amazonaws.com/model/m/invoke";
    sign(
        &credentials,
        scope,
        (&Method::POST, uri),
        &mut headers,
        b"{}",
    )
    .unwrap();
    let auth = headers[AUTHORIZATION].to_str().unwrap();
    assert!(auth.starts_with(
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20231114/us-west-2/bedrock/aws4_request"
    ));
    assert!(
        auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,"),
        "{auth}"
    );
    assert_eq!(headers["x-amz-date"], "20231114T221320Z");
    assert_eq!(headers["x-amz-security-token"], "token-1");
    assert!(!headers.contains_key("x-amz-content-sha256"));
    assert_eq!(headers["anthropic-beta"], "x");
    // A different body is a different signature.
    let first = signature(&headers);
    sign(
        &credentials,
        scope,
        (&Method::POST, uri),
        &mut headers,
        b"{ }",
    )
    .unwrap();
    assert_ne!(first, signature(&headers));
}

#[tokio::test]
async fn upstreams_follow_the_region_and_the_call() {
    let bedrock = Bedrock::new(None, Some("eu-west-3".into()), CredentialSource::Off);
    assert_eq!(
        bedrock.upstream("/bedrock/model/m/invoke").await,
        "https://bedrock-runtime.eu-west-3.amazonaws.com"
    );
    assert_eq!(
        bedrock.upstream("/bedrock/inference-profiles").await,
        "https://bedrock.eu-west-3.amazonaws.com"
    );
    let configured = Bedrock::new(Some("http://gw".into()), None, CredentialSource::Off);
    assert_eq!(
        configured.upstream("/bedrock/inference-profiles").await,
        "http://gw"
    );
    assert!(matches!(
        configured.auth(&HeaderMap::new(), true).await,
        Auth::AsItCame
    ));
}

#[test]
fn routes() {
    assert_eq!(
        invokes("/bedrock/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"),
        Some((
            Cow::Borrowed("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            false
        ))
    );
    assert_eq!(
        invokes("/bedrock/model/m/invoke-with-response-stream"),
        Some((Cow::Borrowed("m"), true))
    );
    assert_eq!(invokes("/bedrock/model/m/converse"), None);
    assert_eq!(invokes("/bedrock/model//invoke"), None);
    assert_eq!(invokes("/bedrock/model/a/b/invoke"), None);
    assert_eq!(percent_decoded("a%ZZ%3a"), "a%ZZ:");
    assert_eq!(percent_decoded("%ff"), "%ff");
}

fn exception_frame() -> Vec<u8> {
    let message = Message::new(&b"{\"message\":\"slow down\"}"[..])
        .add_header(Header::new(
            ":exception-type",
            FrameValue::String("throttlingException".into()),
        ))
        .add_header(Header::new(
            ":message-type",
            FrameValue::String("exception".into()),
        ));
    let mut out = Vec::new();
    write_message_to(&message, &mut out).unwrap();
    out
}

#[test]
fn unframes_chunks_and_keeps_other_frames_raw() {
    let start = br#"{"type":"message_start","message":{"id":"m"}}"#;
    let stream = [
        chunk_frame(start),
        exception_frame(),
        chunk_frame(br#"{"type":"message_stop"}"#),
    ]
    .concat();
    // Any chunking gives the same text.
    let whole = Unframe::default().feed(&stream).unwrap();
    for size in [1, 3, 17, 100] {
        let mut unframe = Unframe::default();
        let mut text = Vec::new();
        for piece in stream.chunks(size) {
            text.extend_from_slice(&unframe.feed(piece).unwrap());
        }
        unframe.finish().unwrap();
        assert_eq!(text, whole);
    }
    let text = std::str::from_utf8(&whole).unwrap();
    assert!(text.starts_with(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n"
    ));
    assert!(text.contains("event: bedrock_frame\ndata: {\"type\":\"bedrock_frame\""));
    assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    // And back: the exception frame is its own bytes again, the chunks decode the same.
    let mut reframe = Reframe::default();
    let again = reframe.feed(&whole);
    assert_eq!(Unframe::default().feed(&again).unwrap(), whole);
    assert!(
        again
            .windows(exception_frame().len())
            .any(|w| w == exception_frame().as_slice())
    );
}

#[test]
fn refuses_broken_frames() {
    let mut frame = chunk_frame(br#"{"type":"ping"}"#);
    let last = frame.len() - 1;
    frame[last] ^= 1;
    assert!(Unframe::default().feed(&frame).is_err());
    // A prelude claiming 4 GiB is refused at once, not waited for.
    assert!(
        Unframe::default()
            .feed(&[0xff, 0xff, 0xff, 0xff, 0, 0])
            .is_err()
    );
    let mut cut = Unframe::default();
    cut.feed(&chunk_frame(b"{}")[..10]).unwrap();
    assert!(cut.finish().is_err());
}

#[test]
fn sluice_signs_only_claude_codes_calls_for_a_trusted_caller() {
    let mut trusted = http::Extensions::new();
    trusted.insert(Caller { trusted: true });
    let mut stranger = http::Extensions::new();
    stranger.insert(Caller { trusted: false });
    let post = Method::POST;
    for (method, path, expected) in [
        (&post, "/bedrock/model/m/invoke", true),
        (&post, "/bedrock/model/m/invoke-with-response-stream", true),
        (&post, "/bedrock/model/m/converse-stream", true),
        (&post, "/bedrock/model/m/count-tokens", true),
        (&Method::GET, "/bedrock/inference-profiles", true),
        (&Method::GET, "/bedrock/foundation-models/x", true),
        // The control plane's writes, and anything else: never with sluice's identity.
        (&post, "/bedrock/provisioned-model-throughput", false),
        (&Method::DELETE, "/bedrock/custom-models/x", false),
        (&Method::PUT, "/bedrock/logging/modelinvocations", false),
        (&post, "/bedrock/model//invoke", false),
        (&Method::GET, "/bedrock/inference-profiles-x", false),
    ] {
        assert_eq!(
            signable(&trusted, method, path),
            expected,
            "{method} {path}"
        );
        assert!(!signable(&stranger, method, path), "{method} {path}");
        assert!(!signable(&http::Extensions::new(), method, path));
    }
}

#[test]
fn regions_and_event_names_stay_plain() {
    assert!(is_region("us-gov-west-1") && is_region("eu-central-2"));
    assert!(!is_region("evil.example.com/x") && !is_region("") && !is_region("US-EAST-1"));
    // A chunk whose `type` would inject an SSE line stays a raw frame.
    let frame = chunk_frame(br#"{"type":"ping\ndata: x"}"#);
    let text = Unframe::default().feed(&frame).unwrap();
    assert!(text.starts_with(b"event: bedrock_frame\n"), "{text:?}");
}
