//! The body type every handler returns, and the few responses sluice builds itself.
//!
//! Every error response sluice makes is JSON shaped like the providers' own errors, so an SDK
//! surfaces its message instead of failing to parse. Upstream responses never go through here:
//! they pass through verbatim.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body: a buffered one of ours, or an upstream stream passed through.
pub type Body = BoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    with_type(status, "text/plain; charset=utf-8", body)
}

pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    with_type(status, "application/json", body)
}

fn with_type(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An error of sluice's own (never an upstream one), as provider-shaped JSON.
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "type": "error",
        "error": { "type": kind, "message": message },
    });
    json(status, body.to_string())
}
