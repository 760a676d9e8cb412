//! The body type every handler returns, and the few responses sluice builds itself.
//!
//! Every error response sluice makes is a [`ProxyError`], turned into JSON shaped like the
//! providers' own errors by [`ProxyError::into_response`], so an SDK surfaces its message instead
//! of failing to parse. Upstream responses never go through here: they pass through verbatim.

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode, header};
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

/// Why sluice answers a request itself with an error (never an upstream's own error status,
/// which passes through verbatim).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The request body is over `Settings::body_limit` (413).
    #[error("request body is over sluice's limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The request body could not be read (400).
    #[error("could not read the request body")]
    BodyUnreadable,
    /// The client stopped sending its body (408).
    #[error("the request body stalled for {seconds} s")]
    BodyStalled { seconds: u64 },
    /// No route for this method and path (404), with the prefix a provider path needs.
    #[error("sluice has no route {method} {path}{}", route_hint(path))]
    NotFound { method: Method, path: String },
    /// The route is not served to this client (403).
    #[error("{0}")]
    Forbidden(&'static str),
    /// The request lacks what the route needs (400).
    #[error("{0}")]
    BadRequest(&'static str),
    /// The route exists, the thing it names does not (404).
    #[error("{0}")]
    Missing(&'static str),
    /// Sluice is serving enough of these already (429, with `Retry-After`).
    #[error("{why}; try again in {retry_after} s")]
    Busy { why: String, retry_after: u32 },
    /// A store sluice reads for this route failed (503); the log has why.
    #[error("{0}")]
    Unavailable(&'static str),
    /// The upstream could not be reached (502) or sent no headers in time (504).
    #[error(transparent)]
    Upstream(crate::upstream::UpstreamError),
    /// The upstream's response body failed while sluice read it whole (502).
    #[error("upstream body failed: {0}")]
    UpstreamBody(hyper::Error),
}

/// What a client that called a provider path directly should call instead: the base URL it
/// was given lacks sluice's dialect prefix.
fn route_hint(path: &str) -> String {
    let google = path.contains(":generateContent") || path.contains(":streamGenerateContent");
    let (prefix, base) = if path.starts_with("/v1/projects/") {
        (
            "/vertex",
            "ANTHROPIC_VERTEX_BASE_URL=http://HOST:PORT/vertex/v1",
        )
    } else if path.starts_with("/model/") {
        (
            "/bedrock",
            "ANTHROPIC_BEDROCK_BASE_URL=http://HOST:PORT/bedrock",
        )
    } else if path.starts_with("/v1beta/") || google {
        ("/gemini", "GOOGLE_GEMINI_BASE_URL=http://HOST:PORT/gemini")
    } else if path.starts_with("/v1/messages") {
        (
            "/anthropic",
            "ANTHROPIC_BASE_URL=http://HOST:PORT/anthropic",
        )
    } else if path.starts_with("/v1/") {
        ("/openai", "OPENAI_BASE_URL=http://HOST:PORT/openai/v1")
    } else {
        return String::new();
    };
    format!(
        "; provider paths take a dialect prefix: {prefix}{path} (set {base}; the prefixes are /anthropic, /openai, /gemini, /vertex and /bedrock)"
    )
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::BodyUnreadable | ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::BodyStalled { .. } => StatusCode::REQUEST_TIMEOUT,
            ProxyError::NotFound { .. } | ProxyError::Missing(_) => StatusCode::NOT_FOUND,
            ProxyError::Forbidden(_) => StatusCode::FORBIDDEN,
            ProxyError::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Upstream(crate::upstream::UpstreamError::Timeout) => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ProxyError::Upstream(_) | ProxyError::UpstreamBody(_) => StatusCode::BAD_GATEWAY,
        }
    }

    /// The provider-shaped `error.type`.
    pub fn kind(&self) -> &'static str {
        match self {
            ProxyError::BodyTooLarge { .. } => "request_too_large",
            ProxyError::BodyUnreadable | ProxyError::BadRequest(_) => "invalid_request_error",
            ProxyError::BodyStalled { .. } => "request_timeout",
            ProxyError::NotFound { .. } | ProxyError::Missing(_) => "not_found_error",
            ProxyError::Forbidden(_) => "permission_error",
            ProxyError::Busy { .. } => "rate_limit_error",
            ProxyError::Unavailable(_) => "unavailable",
            ProxyError::Upstream(crate::upstream::UpstreamError::Timeout) => "upstream_timeout",
            ProxyError::Upstream(_) | ProxyError::UpstreamBody(_) => "upstream_error",
        }
    }

    /// The one place sluice's own error responses are made: status, provider-shaped JSON with
    /// the error's type and message.
    pub fn into_response(self) -> Response<Body> {
        let mut response = error(
            self.status(),
            self.kind(),
            &crate::upstream::error_chain(&self),
        );
        if let ProxyError::Busy { retry_after, .. } = self {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, retry_after.into());
        }
        response
    }
}

impl From<ProxyError> for Response<Body> {
    fn from(err: ProxyError) -> Response<Body> {
        err.into_response()
    }
}

/// An error of sluice's own (never an upstream one), as provider-shaped JSON.
fn error(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "type": "error",
        "error": { "type": kind, "message": message },
    });
    json(status, body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::UpstreamError;

    fn read(response: Response<Body>) -> (StatusCode, serde_json::Value) {
        let status = response.status();
        let bytes = futures::executor::block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[test]
    fn a_busy_route_says_when_to_come_back() {
        let response = ProxyError::Busy {
            why: "the dashboard is answering other reads".into(),
            retry_after: 1,
        }
        .into_response();
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "1");
        let (status, body) = read(response);
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(body["error"]["type"], "rate_limit_error");
        assert_eq!(
            body["error"]["message"],
            "the dashboard is answering other reads; try again in 1 s"
        );
        let (status, body) = read(ProxyError::Unavailable("the store is down").into_response());
        assert_eq!(
            (status, &body["error"]["type"]),
            (StatusCode::SERVICE_UNAVAILABLE, &"unavailable".into())
        );
        let (status, _) = read(ProxyError::Missing("no such request").into_response());
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[test]
    fn a_provider_path_without_its_prefix_is_told_which_one_to_use() {
        let (status, body) = read(
            ProxyError::NotFound {
                method: Method::POST,
                path: "/v1/messages".into(),
            }
            .into_response(),
        );
        assert_eq!(status, 404);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("/anthropic/v1/messages"), "{message}");
        assert!(
            message.contains("ANTHROPIC_BASE_URL=http://HOST:PORT/anthropic"),
            "{message}"
        );
        let (_, body) = read(
            ProxyError::NotFound {
                method: Method::POST,
                path: "/v1/chat/completions".into(),
            }
            .into_response(),
        );
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("/openai/v1/chat/completions"), "{message}");
        // gemini-cli pointed at sluice's root, and Claude Code's Vertex base without /vertex.
        for (path, wanted) in [
            (
                "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
                "GOOGLE_GEMINI_BASE_URL=http://HOST:PORT/gemini",
            ),
            (
                "/v1/projects/p/locations/us-east5/publishers/anthropic/models/m:rawPredict",
                "/vertex/v1/projects/p/",
            ),
        ] {
            let (_, body) = read(
                ProxyError::NotFound {
                    method: Method::POST,
                    path: path.into(),
                }
                .into_response(),
            );
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains(wanted), "{message}");
        }
        let (_, body) = read(
            ProxyError::NotFound {
                method: Method::GET,
                path: "/elsewhere".into(),
            }
            .into_response(),
        );
        assert_eq!(
            body["error"]["message"],
            "sluice has no route GET /elsewhere"
        );
    }

    #[test]
    fn each_error_keeps_its_status_type_and_message() {
        for (err, status, kind, message) in [
            (
                ProxyError::BodyTooLarge { limit: 1024 },
                413,
                "request_too_large",
                "request body is over sluice's limit of 1024 bytes",
            ),
            (
                ProxyError::BodyUnreadable,
                400,
                "invalid_request_error",
                "could not read the request body",
            ),
            (
                ProxyError::BodyStalled { seconds: 30 },
                408,
                "request_timeout",
                "the request body stalled for 30 s",
            ),
            (
                ProxyError::NotFound {
                    method: Method::GET,
                    path: "/nope".into(),
                },
                404,
                "not_found_error",
                "sluice has no route GET /nope",
            ),
            (
                ProxyError::Forbidden("loopback only"),
                403,
                "permission_error",
                "loopback only",
            ),
            (
                ProxyError::BadRequest("missing ?id=HASH"),
                400,
                "invalid_request_error",
                "missing ?id=HASH",
            ),
            (
                ProxyError::Upstream(UpstreamError::Timeout),
                504,
                "upstream_timeout",
                "upstream sent no response headers in time",
            ),
        ] {
            let (got, body) = read(err.into_response());
            assert_eq!(got.as_u16(), status, "{message}");
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], kind);
            assert_eq!(body["error"]["message"], message);
        }
    }
}
