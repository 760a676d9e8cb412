//! The AWS side of the mock provider: Bedrock's event-stream framing, written with AWS's own
//! encoder (not sluice's), and a SigV4 check that recomputes the signature a request carries
//! with AWS's own signer and compares.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::Bytes;
use http::HeaderMap;

/// One `chunk` frame per SSE event, as Bedrock's `invoke-with-response-stream` sends them:
/// `{"bytes": base64(event data)}`, with the `p` padding field Bedrock adds.
pub fn event_stream(sse_events: &[String]) -> Vec<Bytes> {
    sse_events
        .iter()
        .filter_map(|event| {
            let data = event.lines().find_map(|line| line.strip_prefix("data: "))?;
            let payload = serde_json::json!({
                "bytes": aws_smithy_types::base64::encode(data),
                "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0"[..data.len() % 50 + 1],
            });
            Some(frame(
                &[
                    (":event-type", "chunk"),
                    (":content-type", "application/json"),
                    (":message-type", "event"),
                ],
                payload.to_string().into_bytes(),
            ))
        })
        .collect()
}

/// A Bedrock stream exception (`throttlingException`, ...), as an event-stream frame.
pub fn exception_frame(kind: &'static str, message: &str) -> Bytes {
    let payload = serde_json::json!({ "message": message }).to_string();
    frame(
        &[
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload.into_bytes(),
    )
}

fn frame(headers: &[(&'static str, &'static str)], payload: Vec<u8>) -> Bytes {
    let mut message = Message::new(payload);
    for (name, value) in headers {
        message = message.add_header(Header::new(*name, HeaderValue::String((*value).into())));
    }
    let mut out = Vec::new();
    write_message_to(&message, &mut out).expect("an event-stream frame");
    Bytes::from(out)
}

/// Why a request's signature was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum SignatureRefused {
    Missing,
    Malformed(&'static str),
    /// The credential scope names another key, region or service.
    WrongScope(String),
    Mismatch,
}

/// Checks the SigV4 signature of a request the mock received: the scope names `credentials`'
/// key, `region` and `bedrock`, and AWS's signer, given the same signed headers, time and body,
/// computes the same signature.
pub fn verify_sigv4(
    credentials: &Credentials,
    region: &str,
    (method, path): (&str, &str),
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), SignatureRefused> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};

    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let authorization = header("authorization").ok_or(SignatureRefused::Missing)?;
    let rest = authorization
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or(SignatureRefused::Malformed("not AWS4-HMAC-SHA256"))?;
    let field = |name: &str| {
        rest.split(", ")
            .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
            .ok_or(SignatureRefused::Malformed("a missing field"))
    };
    let (scope, signed_headers, signature) = (
        field("Credential")?,
        field("SignedHeaders")?,
        field("Signature")?,
    );
    let amz_date = header("x-amz-date").ok_or(SignatureRefused::Malformed("no x-amz-date"))?;
    let time = parse_amz_date(amz_date).ok_or(SignatureRefused::Malformed("bad x-amz-date"))?;
    let expected_scope = format!(
        "{}/{}/{region}/bedrock/aws4_request",
        credentials.access_key_id(),
        &amz_date[..8]
    );
    if scope != expected_scope {
        return Err(SignatureRefused::WrongScope(scope.to_owned()));
    }
    let host = header("host").ok_or(SignatureRefused::Malformed("no host"))?;
    // The signer adds host, the date and the token itself; the others are given as received.
    let given: Vec<(&str, &str)> = signed_headers
        .split(';')
        .filter(|name| !matches!(*name, "host" | "x-amz-date" | "x-amz-security-token"))
        .map(|name| Ok((name, header(name).ok_or(SignatureRefused::Mismatch)?)))
        .collect::<Result<_, _>>()?;
    let identity = credentials.clone().into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("bedrock")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|_| SignatureRefused::Malformed("signing parameters"))?
        .into();
    let uri = format!("http://{host}{path}");
    let request = SignableRequest::new(method, &uri, given.into_iter(), SignableBody::Bytes(body))
        .map_err(|_| SignatureRefused::Malformed("request"))?;
    let (instructions, computed) = sign(request, &params)
        .map_err(|_| SignatureRefused::Mismatch)?
        .into_parts();
    let recomputed_headers = instructions
        .headers()
        .find(|(name, _)| *name == "authorization")
        .map(|(_, value)| value.to_owned())
        .unwrap_or_default();
    let same_headers = recomputed_headers.contains(&format!("SignedHeaders={signed_headers},"));
    if computed == signature && same_headers {
        Ok(())
    } else {
        Err(SignatureRefused::Mismatch)
    }
}

/// `20231114T221320Z` as a time.
fn parse_amz_date(text: &str) -> Option<SystemTime> {
    let digits = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    if text.len() != 16 || &text[8..9] != "T" || !text.ends_with('Z') {
        return None;
    }
    let (y, m, d) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (hh, mm, ss) = (digits(9..11)?, digits(11..13)?, digits(13..15)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_amz_dates() {
        let at = parse_amz_date("20231114T221320Z").unwrap();
        assert_eq!(
            at,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        );
        assert!(parse_amz_date("2023-11-14").is_none());
    }
}
