//! The upstream client: pooled HTTP/1.1 and h2 over rustls (ring, compiled-in roots), and the
//! header rules for what may cross.
//!
//! The caller's auth headers go upstream as they are. Hop-by-hop headers, `Host`,
//! `Content-Length` (recomputed), `Cookie` and every `x-context-guru-*` header never do. There
//! is a connect timeout and a first-byte (response header) timeout, and no overall body
//! timeout, so a ten-minute stream is never cut.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, Request, Response, Uri, header};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Why an upstream call produced no response.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Connecting or sending failed; the client's error, with its causes (`tcp connect error`,
    /// `Connection refused`), is the source: [`crate::respond::ProxyError`] writes the chain.
    /// The message names where the call went and what sets that, so the person reading a 502
    /// knows what to fix: `upstream request to https://api.anthropic.com failed (set by
    /// --anthropic-upstream or SLUICE_ANTHROPIC_UPSTREAM): client error (Connect): ...`.
    #[error("upstream request to {} failed{}", .to.base, set_by(.to.set_by.as_deref()))]
    Transport {
        to: Destination,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    /// No response headers within the first-byte timeout.
    #[error("upstream sent no response headers in time")]
    Timeout,
    /// The configured upstream plus the path is not a valid URI.
    #[error("bad upstream URI: {0}")]
    BadUri(String),
    /// A Bedrock request sluice had to sign and could not.
    #[error(transparent)]
    Sign(#[from] crate::bedrock::SignError),
}

/// Where an upstream call went, as its error says it: the base URL with no credentials, query
/// or fragment, and what sets it (a `sluice serve` flag and its variable) when sluice knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub base: String,
    pub set_by: Option<String>,
}

impl Destination {
    /// Only the scheme and host of `uri` (the path past a base is the agent's, not a setting),
    /// and nothing said of what sets it: what [`Upstream::send`] knows. The proxy's own calls
    /// name their setting (`forward.rs`).
    pub fn of(uri: &str) -> Destination {
        Destination {
            base: shown_url(origin(uri)),
            set_by: None,
        }
    }
}

fn set_by(what: Option<&str>) -> String {
    what.map(|w| format!(" (set by {w})")).unwrap_or_default()
}

/// A URL as an error or a log may show it: no `user:password@`, no query, no fragment, no
/// trailing `/`.
pub fn shown_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |i| after_scheme + i);
    let host = url[after_scheme..authority_end]
        .rsplit_once('@')
        .map_or(&url[after_scheme..authority_end], |(_, host)| host);
    let shown = format!("{}{host}{}", &url[..after_scheme], &url[authority_end..]);
    shown.trim_end_matches('/').to_owned()
}

/// The scheme and authority of `uri` (`https://host:port`), its path, query and fragment left
/// out.
fn origin(uri: &str) -> &str {
    let after_scheme = uri.find("://").map_or(0, |i| i + 3);
    let end = uri[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(uri.len(), |i| after_scheme + i);
    &uri[..end]
}

/// Timeouts for upstream calls.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// Until the response headers arrive. Defaults to 10 minutes: a model may think long before
    /// its first byte.
    pub first_byte: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(600),
        }
    }
}

/// A pooled client shared by every request.
#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpsConnector<HttpConnector>, Chunks>,
    timeouts: Timeouts,
}

impl Upstream {
    pub fn new(timeouts: Timeouts) -> Upstream {
        // Both rustls providers must never be linked (docs/dev/concerns.md); installing ring
        // explicitly makes the choice independent of feature unification. A second call fails
        // harmlessly when another part of the process installed it first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(timeouts.connect));
        http.enforce_http(false);
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(https);
        Upstream { client, timeouts }
    }

    /// Sends one request and waits for the response headers (not the body).
    ///
    /// # Errors
    /// [`UpstreamError`] on a transport failure, a timeout or a bad URI.
    pub async fn send(
        &self,
        method: Method,
        to: &str,
        headers: &HeaderMap,
        body: Chunks,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let uri: Uri = to
            .parse()
            .map_err(|e: http::uri::InvalidUri| UpstreamError::BadUri(e.to_string()))?;
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(out) = request.headers_mut() {
            copy_forwardable(headers, out);
        }
        let request = request
            .body(body)
            .map_err(|e| UpstreamError::BadUri(e.to_string()))?;
        match tokio::time::timeout(self.timeouts.first_byte, self.client.request(request)).await {
            Err(_) => Err(UpstreamError::Timeout),
            Ok(Err(source)) => Err(UpstreamError::Transport {
                to: Destination::of(to),
                source,
            }),
            Ok(Ok(response)) => Ok(response),
        }
    }
}

/// A request body as the agent's connection delivered it, its chunks kept apart: a request that
/// goes upstream as it came is written from them, never copied into one buffer first (on a
/// 120 KB body, that copy was a tenth of `--preset off`'s CPU in `benches/hop.sh`).
#[derive(Debug, Clone, Default)]
pub struct Chunks {
    parts: VecDeque<Bytes>,
    len: usize,
}

impl Chunks {
    /// Appends a chunk (an empty one is dropped).
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.len += chunk.len();
            self.parts.push_back(chunk);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The body in one buffer: its one chunk as it is, or the chunks copied together.
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.len() {
            0 => Bytes::new(),
            1 => self.parts[0].clone(),
            _ => {
                let mut whole = Vec::with_capacity(self.len);
                for part in &self.parts {
                    whole.extend_from_slice(part);
                }
                Bytes::from(whole)
            }
        }
    }
}

impl From<Bytes> for Chunks {
    fn from(bytes: Bytes) -> Chunks {
        let mut chunks = Chunks::default();
        chunks.push(bytes);
        chunks
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = self.parts.pop_front();
        if let Some(chunk) = &next {
            self.len -= chunk.len();
        }
        Poll::Ready(next.map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len as u64)
    }
}

/// An error's message followed by each of its causes, `: `-separated: what a client reading a
/// 502 needs to tell a refused connection from a TLS failure.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether a request header may go upstream.
pub fn forwardable(name: &HeaderName) -> bool {
    !matches!(
        *name,
        header::CONNECTION
            | header::TRANSFER_ENCODING
            | header::TE
            | header::TRAILER
            | header::UPGRADE
            | header::HOST
            | header::CONTENT_LENGTH
            | header::COOKIE
            | header::PROXY_AUTHORIZATION
            // sluice reads the whole body before it forwards: a 100-continue was answered here.
            | header::EXPECT
    ) && name.as_str() != "keep-alive"
        && name.as_str() != "proxy-connection"
        && !name.as_str().starts_with("x-context-guru-")
}

fn copy_forwardable(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if forwardable(name) {
            to.append(name.clone(), value.clone());
        }
    }
}

/// Removes the response headers that describe the upstream hop rather than the content,
/// including every header the upstream's `Connection:` names as hop-by-hop (RFC 9110 §7.6.1).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::TRAILER,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

/// The model clients' HTTP: the same pooled client, TLS setup and header rules as the agent's
/// traffic. A model reply is small; one over 8 MiB is refused rather than buffered.
#[async_trait::async_trait]
impl llm::Transport for Upstream {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(u16, Vec<u8>), llm::TransportError> {
        use http_body_util::BodyExt;
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(value),
            ) {
                map.append(name, value);
            }
        }
        let call = async {
            let response = self
                .send(Method::POST, url, &map, Bytes::from(body).into())
                .await
                .map_err(|e| llm::TransportError::Send(error_chain(&e)))?;
            let status = response.status().as_u16();
            let bytes = http_body_util::Limited::new(response.into_body(), 8 << 20)
                .collect()
                .await
                .map_err(|_| llm::TransportError::Body)?
                .to_bytes();
            Ok((status, bytes.to_vec()))
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| llm::TransportError::Timeout)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_url_has_no_credentials_query_or_fragment() {
        for (url, shown) in [
            ("https://api.anthropic.com", "https://api.anthropic.com"),
            ("https://api.anthropic.com/", "https://api.anthropic.com"),
            (
                "https://user:sk-secret@gateway.example:8443/openai/?key=sk-2#x",
                "https://gateway.example:8443/openai",
            ),
            ("http://127.0.0.1:9?x=1", "http://127.0.0.1:9"),
        ] {
            assert_eq!(shown_url(url), shown, "{url}");
        }
        assert_eq!(
            Destination::of("https://k:s@host.example/v1/messages?beta=true").base,
            "https://host.example"
        );
    }

    #[test]
    fn headers_the_connection_header_names_are_hop_by_hop() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, "x-hop, Keep-Alive".parse().unwrap());
        headers.insert("x-hop", "1".parse().unwrap());
        headers.insert("x-request-id", "r1".parse().unwrap());
        strip_hop_by_hop(&mut headers);
        assert!(headers.get("x-hop").is_none() && headers.get(header::CONNECTION).is_none());
        assert_eq!(headers.get("x-request-id").unwrap(), "r1");
        assert!(
            !forwardable(&header::EXPECT),
            "100-continue is answered by sluice"
        );
    }

    #[test]
    fn forbidden_headers_never_cross() {
        for name in [
            "cookie",
            "x-context-guru-session",
            "x-context-guru-bypass",
            "connection",
            "host",
            "content-length",
            "keep-alive",
        ] {
            assert!(!forwardable(&HeaderName::from_static(name)), "{name}");
        }
        for name in [
            "authorization",
            "x-api-key",
            "anthropic-version",
            "anthropic-beta",
            "openai-organization",
        ] {
            assert!(forwardable(&HeaderName::from_static(name)), "{name}");
        }
    }
}
