//! Claude on Amazon Bedrock (`/bedrock/...`): the routes, the reply's event-stream framing,
//! and the SigV4 signature a rewritten body needs.
//!
//! Rewritten, everything else under the prefix goes upstream as it came:
//! - `POST /bedrock/model/{modelId}/invoke`: the Messages API without `model` and `stream` and
//!   with `anthropic_version`, answered with a Messages JSON reply;
//! - `POST /bedrock/model/{modelId}/invoke-with-response-stream`: the same body, answered with
//!   AWS's binary event-stream (`application/vnd.amazon.eventstream`), not SSE. Each `chunk`
//!   event carries `{"bytes": base64}` whose decoded bytes are one Messages stream event.
//!
//! Signing. A client's SigV4 signature covers the body and the host, so it cannot survive a
//! rewrite (nor, in fact, the hop: it names sluice's host). sluice signs what it forwards
//! itself, with AWS's own signer (`aws-sigv4`) and the standard credential chain
//! (`aws-config`: environment, profile, SSO, web identity, container, instance metadata),
//! looked up on the first Bedrock request, not at start-up, so no other user of sluice ever
//! probes the instance-metadata address. Which request is rewritten and how it is sent
//! ([`Auth`]):
//! - a Bedrock API key (`Authorization: Bearer`, Claude Code's `AWS_BEARER_TOKEN_BEDROCK`)
//!   binds no body: rewritten, sent as it came;
//! - with credentials, sluice signs what it forwards, rewritten or not (the client's signature
//!   named the wrong host), each expand round again with the latest credentials;
//! - without credentials, a request the client signed goes upstream untouched, and sluice says
//!   so once in its log (AWS will refuse it: its signature names sluice's host; a gateway may
//!   not); an unsigned one (Claude Code's `CLAUDE_CODE_SKIP_BEDROCK_AUTH`, a gateway that
//!   authenticates on its own) is rewritten and sent unsigned.
//! - sluice lends its signature only to the calls Claude Code makes (model calls, the listing
//!   of inference profiles and models) from a caller it trusts ([`signable`]).
//!
//! The reply. The expand loop and the cache report read Messages server-sent events, so an
//! event-stream reply is read through [`Unframe`] (each `chunk` event becomes the SSE event it
//! carries; any other frame, an exception say, becomes a `bedrock_frame` event holding its raw
//! bytes) and, when the expand loop read it, written back through [`Reframe`], event for event
//! (a raw frame as its own bytes; a `chunk` re-encoded, without Bedrock's `p` padding). A reply
//! the loop does not read (a request that could not reach the expand tool) reaches the agent as
//! its bytes came.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::ProvideCredentials;
use aws_smithy_eventstream::frame::{read_message_from, write_message_to};
use aws_smithy_types::event_stream::{Header, HeaderValue as FrameValue, Message};
use bytes::{Bytes, BytesMut};
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use tokio::sync::{OnceCell, watch};

/// The path prefix the routes live under.
pub const PREFIX: &str = "/bedrock";

/// The reply's content type when it is an event stream.
pub const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// The signing name of Bedrock's runtime API.
const SERVICE: &str = "bedrock";

/// AWS bounds one event-stream message at 16 MiB; a prelude that claims more is not one.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// The SSE event an unframed non-`chunk` frame becomes (its raw bytes, base64, in `raw`).
pub const RAW_FRAME_EVENT: &str = "bedrock_frame";

/// What a rewritten path asks for: the model id (percent-decoded, for labels and prices) and
/// whether the reply streams.
pub fn invokes(path: &str) -> Option<(Cow<'_, str>, bool)> {
    let rest = path.strip_prefix("/bedrock/model/")?;
    let (model, method) = rest.split_once('/')?;
    let stream = match method {
        "invoke" => false,
        "invoke-with-response-stream" => true,
        _ => return None,
    };
    if model.is_empty() || model.len() > 2048 {
        return None;
    }
    Some((percent_decoded(model), stream))
}

/// `%XX` escapes decoded (`us.anthropic.claude-sonnet-4-5-20250929-v1%3A0` is the model id
/// `...-v1:0`); a string that does not decode to UTF-8 is kept as it came.
fn percent_decoded(text: &str) -> Cow<'_, str> {
    if !text.contains('%') {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_or(Cow::Borrowed(text), Cow::Owned)
}

/// What `app::handle` learned of a Bedrock request's caller, for [`signable`].
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// A loopback or `--trusted` peer that named sluice by an address, `localhost` or a
    /// `--dashboard-host` name.
    pub trusted: bool,
}

/// Whether sluice may sign this call with its own credentials: only the calls Claude Code makes
/// (a model call; the inference profiles and models it lists at start-up), and only for a
/// trusted caller (see `app::handle`: loopback or `--trusted`, naming sluice as its own, not a
/// browser). Anything else (creating or deleting resources on the control plane, a web page
/// that posts to 127.0.0.1 or rebinds its own name to it) goes as it came: sluice lends its identity to its
/// own agents, not to whoever reaches its port.
pub fn signable(extensions: &http::Extensions, method: &Method, path: &str) -> bool {
    let trusted = extensions.get::<Caller>().is_some_and(|c| c.trusted);
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return false;
    };
    let call = if *method == Method::POST {
        rest.strip_prefix("/model/")
            .and_then(|r| r.split_once('/'))
            .is_some_and(|(model, action)| {
                !model.is_empty()
                    && matches!(
                        action,
                        "invoke"
                            | "invoke-with-response-stream"
                            | "converse"
                            | "converse-stream"
                            | "count-tokens"
                    )
            })
    } else if *method == Method::GET {
        let listing = |p: &str| rest == p || rest.starts_with(&format!("{p}/"));
        listing("/inference-profiles") || listing("/foundation-models")
    } else {
        false
    };
    trusted && call
}

/// How a Bedrock request goes upstream.
#[derive(Debug, Clone)]
pub enum Auth {
    /// As it came: a Bedrock API key, or no credentials of sluice's and no signature of the
    /// client's. May be rewritten.
    AsItCame,
    /// Signed by sluice, each send with the latest credentials (an expand round may outlive
    /// temporary ones). May be rewritten.
    Sign,
    /// The client signed it and sluice holds no credentials: it goes untouched.
    ClientSigned,
}

impl Auth {
    /// Whether the body may change.
    pub fn may_rewrite(&self) -> bool {
        !matches!(self, Auth::ClientSigned)
    }
}

/// An AWS region as AWS names them (`us-east-1`, `eu-central-2`, `us-gov-west-1`).
fn is_region(region: &str) -> bool {
    (1..=32).contains(&region.len())
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Where and when a signature is made.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The signing name (`bedrock`; AWS's test suite uses others).
    pub service: &'a str,
    pub region: &'a str,
    pub time: SystemTime,
}

/// Signs `headers` for `method uri body` with SigV4: the client's own signature headers go,
/// `Authorization`, `X-Amz-Date` and (for temporary credentials) `X-Amz-Security-Token` come.
/// Signed: the host (from `uri`, as the HTTP client will send it), `content-type` and the
/// client's other `x-amz-*` headers; whatever else a hop may add or reorder stays out of the
/// signature.
pub fn sign(
    credentials: &Credentials,
    scope: Scope<'_>,
    (method, uri): (&Method, &str),
    headers: &mut HeaderMap,
    body: &[u8],
) -> Result<(), SignError> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign as sigv4};
    use aws_sigv4::sign::v4;

    // An `x-amz-*` header the signature cannot cover (not text) does not go either.
    let unsignable: Vec<HeaderName> = headers
        .iter()
        .filter(|(name, value)| name.as_str().starts_with("x-amz-") && value.to_str().is_err())
        .map(|(name, _)| name.clone())
        .collect();
    for name in unsignable {
        headers.remove(name);
    }
    // The client's own signature (or part of it) goes.
    for name in [
        AUTHORIZATION.as_str(),
        "x-amz-date",
        "x-amz-security-token",
        "x-amz-content-sha256",
    ] {
        headers.remove(name);
    }
    let signed: Vec<(&str, &str)> = headers
        .iter()
        .filter(|(name, _)| *name == CONTENT_TYPE || name.as_str().starts_with("x-amz-"))
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(scope.region)
        .name(scope.service)
        .time(scope.time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| SignError(e.to_string()))?
        .into();
    let request = SignableRequest::new(
        method.as_str(),
        uri,
        signed.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| SignError(e.to_string()))?;
    let (instructions, _signature) = sigv4(request, &params)
        .map_err(|e| SignError(e.to_string()))?
        .into_parts();
    let (new_headers, _query) = instructions.into_parts();
    for header in new_headers {
        let name = HeaderName::from_static(header.name());
        let value = HeaderValue::from_str(header.value()).map_err(|e| SignError(e.to_string()))?;
        headers.insert(name, value);
    }
    Ok(())
}

/// A request sluice could not sign (a credential or URI the signer refuses); it is not sent.
#[derive(Debug, thiserror::Error)]
#[error("SigV4 signing failed: {0}")]
pub struct SignError(String);

/// Where the credentials Bedrock requests are signed with come from.
#[derive(Debug, Clone, Default)]
pub enum CredentialSource {
    /// AWS's chain, looked up on the first Bedrock request and kept fresh.
    #[default]
    Chain,
    /// These (an embedder's, a test's).
    Fixed(Credentials),
    /// None: sluice signs nothing.
    Off,
}

/// The region and credentials Bedrock requests are signed with, found on first use.
pub struct Bedrock {
    /// `--bedrock-upstream`; else the region's runtime endpoint.
    configured: Option<String>,
    /// `--bedrock-region`; else the AWS chain's (`AWS_REGION`, the profile's, ...).
    region: Option<String>,
    source: CredentialSource,
    aws: OnceCell<Aws>,
    said_unsigned: AtomicBool,
}

struct Aws {
    region: String,
    /// `--bedrock-upstream`, when set: every Bedrock call goes there.
    configured: Option<String>,
    credentials: watch::Receiver<Found>,
}

/// The credential chain's latest answer.
#[derive(Debug, Clone)]
enum Found {
    Looking,
    Nothing,
    Credentials(Credentials),
}

/// How long the first Bedrock request waits for the chain (instance metadata may time out).
const FIRST_LOOKUP: Duration = Duration::from_secs(5);

impl std::fmt::Debug for Bedrock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bedrock")
            .field("configured", &self.configured)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl Bedrock {
    pub fn new(
        configured: Option<String>,
        region: Option<String>,
        source: CredentialSource,
    ) -> Self {
        Self {
            configured,
            region,
            source,
            aws: OnceCell::new(),
            said_unsigned: AtomicBool::new(false),
        }
    }

    async fn aws(&self) -> &Aws {
        self.aws.get_or_init(|| self.load()).await
    }

    async fn load(&self) -> Aws {
        let (tx, credentials) = watch::channel(Found::Looking);
        let given = match &self.source {
            CredentialSource::Chain => None,
            CredentialSource::Fixed(fixed) => Some(Found::Credentials(fixed.clone())),
            CredentialSource::Off => Some(Found::Nothing),
        };
        if let Some(found) = given {
            let region = self.region.clone().unwrap_or_else(|| "us-east-1".into());
            let _ = tx.send(found);
            return self.with(region, credentials);
        }
        // The chain loads in the background and keeps refreshing there: a slow first lookup
        // (instance metadata off EC2) delays the first request at most FIRST_LOOKUP, and
        // credentials that arrive later are used from then on.
        let (region_tx, region_rx) = tokio::sync::oneshot::channel();
        let configured_region = self.region.clone();
        tokio::spawn(async move {
            let client = aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https();
            let mut loader =
                aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(client);
            if let Some(region) = configured_region {
                loader = loader.region(aws_config::Region::new(region));
            }
            let config = loader.load().await;
            let _ = region_tx.send(config.region().map(ToString::to_string));
            match config.credentials_provider() {
                Some(provider) => refresh(provider, tx).await,
                None => {
                    let _ = tx.send(Found::Nothing);
                }
            }
        });
        let region = match self.region.clone() {
            Some(region) => region,
            None => tokio::time::timeout(FIRST_LOOKUP, region_rx)
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
                .unwrap_or_else(|| {
                    tracing::warn!("Bedrock: no AWS region found; signing for us-east-1");
                    "us-east-1".into()
                }),
        };
        self.with(region, credentials)
    }

    fn with(&self, region: String, credentials: watch::Receiver<Found>) -> Aws {
        // The region becomes part of a host name: nothing else is one.
        let region = if is_region(&region) {
            region
        } else {
            tracing::warn!("Bedrock: `{region}` is not an AWS region; signing for us-east-1");
            "us-east-1".into()
        };
        Aws {
            region,
            configured: self.configured.clone(),
            credentials,
        }
    }

    /// Where `/bedrock{path}` goes: the configured upstream, else the region's runtime
    /// endpoint for a model call (`/model/...`) and its control plane for the rest. One base
    /// URL serves both for Claude Code, which lists `/inference-profiles` at start-up.
    pub async fn upstream(&self, path: &str) -> String {
        let aws = self.aws().await;
        if let Some(configured) = &aws.configured {
            return configured.clone();
        }
        let region = &aws.region;
        if path.starts_with("/bedrock/model/") {
            format!("https://bedrock-runtime.{region}.amazonaws.com")
        } else {
            format!("https://bedrock.{region}.amazonaws.com")
        }
    }

    /// The region requests are signed for.
    pub async fn region(&self) -> String {
        self.aws().await.region.clone()
    }

    /// How a request with `headers` goes upstream (see the module's list); `signable`: the
    /// call and its caller may have sluice's signature ([`signable`]).
    pub async fn auth(&self, headers: &HeaderMap, signable: bool) -> Auth {
        let authorization = headers.get(AUTHORIZATION).map(HeaderValue::as_bytes);
        if authorization.is_some_and(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ")) {
            return Auth::AsItCame;
        }
        if signable && self.credentials().await.is_some() {
            return Auth::Sign;
        }
        if authorization.is_none() {
            return Auth::AsItCame;
        }
        if !self.said_unsigned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "Bedrock: a request the agent signed goes upstream untouched and uncompacted \
                 (sluice found no AWS credentials in the environment, profile, SSO, container or \
                 instance metadata, or does not sign for this caller); its signature names \
                 sluice's host, so AWS refuses it: give sluice credentials and run the agent with \
                 CLAUDE_CODE_SKIP_BEDROCK_AUTH=1, or give the agent a Bedrock API key"
            );
        }
        Auth::ClientSigned
    }

    async fn credentials(&self) -> Option<Credentials> {
        let mut found = self.aws().await.credentials.clone();
        let settled = tokio::time::timeout(
            FIRST_LOOKUP,
            found.wait_for(|f| !matches!(f, Found::Looking)),
        )
        .await;
        match settled.ok()?.ok()?.clone() {
            Found::Credentials(credentials) => Some(credentials),
            Found::Looking | Found::Nothing => None,
        }
    }

    /// Signs a request sluice is about to send with `auth` (nothing to do unless it is
    /// [`Auth::Sign`]).
    pub async fn sign_for(
        &self,
        auth: &Auth,
        method: &Method,
        uri: &str,
        headers: &mut HeaderMap,
        body: &[u8],
    ) -> Result<(), SignError> {
        if !matches!(auth, Auth::Sign) {
            return Ok(());
        }
        let credentials = self
            .credentials()
            .await
            .ok_or_else(|| SignError("the AWS credentials are gone".into()))?;
        let region = self.region().await;
        let scope = Scope {
            service: SERVICE,
            region: &region,
            time: SystemTime::now(),
        };
        sign(&credentials, scope, (method, uri), headers, body)
    }
}

/// Keeps the chain's answer fresh: temporary credentials are renewed five minutes before they
/// expire, static ones re-read every fifteen minutes (a rotated profile), and a chain that
/// found nothing is asked again every minute (an `aws sso login` after sluice started).
async fn refresh(
    provider: aws_credential_types::provider::SharedCredentialsProvider,
    tx: watch::Sender<Found>,
) {
    loop {
        let found = match provider.provide_credentials().await {
            Ok(credentials) => Found::Credentials(credentials),
            Err(err) => {
                if matches!(*tx.borrow(), Found::Looking) {
                    tracing::info!(error = %err, "Bedrock: no AWS credentials found");
                }
                Found::Nothing
            }
        };
        let wait = match &found {
            Found::Credentials(c) => c
                .expiry()
                .and_then(|at| at.duration_since(SystemTime::now()).ok())
                .map_or(Duration::from_secs(900), |left| {
                    left.saturating_sub(Duration::from_secs(300))
                        .max(Duration::from_secs(30))
                }),
            Found::Looking | Found::Nothing => Duration::from_secs(60),
        };
        if tx.send(found).is_err() {
            return;
        }
        tokio::time::sleep(wait).await;
    }
}

/// The SSE event one frame becomes (see the module's doc).
fn sse_of(message: &Message, raw: &[u8], out: &mut Vec<u8>) {
    if let Some(data) = chunk_event(message) {
        let kind = serde_json::from_slice::<serde_json::Value>(&data)
            .ok()
            .and_then(|v| v.get("type")?.as_str().map(str::to_owned));
        // SSE carries one `data:` line here; a pretty-printed event is re-written compact.
        let data = if data.contains(&b'\n') {
            serde_json::from_slice::<serde_json::Value>(&data)
                .map_or(data, |v| v.to_string().into_bytes())
        } else {
            data
        };
        // The type becomes the `event:` line: one that is not a plain name stays raw.
        let kind = kind.filter(|k| {
            !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        });
        if let (Some(kind), false) = (kind, data.contains(&b'\n')) {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(kind.as_bytes());
            out.extend_from_slice(b"\ndata: ");
            out.extend_from_slice(&data);
            out.extend_from_slice(b"\n\n");
            return;
        }
    }
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(RAW_FRAME_EVENT.as_bytes());
    out.extend_from_slice(b"\ndata: {\"type\":\"");
    out.extend_from_slice(RAW_FRAME_EVENT.as_bytes());
    out.extend_from_slice(b"\",\"raw\":\"");
    out.extend_from_slice(aws_smithy_types::base64::encode(raw).as_bytes());
    out.extend_from_slice(b"\"}\n\n");
}

/// The Messages event a `chunk` frame carries, decoded.
fn chunk_event(message: &Message) -> Option<Vec<u8>> {
    let header = |name: &str| {
        message.headers().iter().find_map(|h| match h.value() {
            FrameValue::String(s) if h.name().as_str() == name => Some(s.as_str()),
            _ => None,
        })
    };
    if header(":message-type") != Some("event") || header(":event-type") != Some("chunk") {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Chunk {
        bytes: String,
    }
    let chunk: Chunk = serde_json::from_slice(message.payload()).ok()?;
    aws_smithy_types::base64::decode(&chunk.bytes).ok()
}

/// An event-stream reply that is not one: a bad prelude, a checksum that does not match, a
/// message over [`MAX_FRAME_BYTES`].
#[derive(Debug, thiserror::Error)]
#[error("the Bedrock reply is not a valid event stream: {0}")]
pub struct FramingError(String);

/// Event-stream bytes in, Messages SSE out, however the bytes are chunked.
#[derive(Debug, Default)]
pub struct Unframe {
    buf: BytesMut,
}

impl Unframe {
    /// The SSE text of every frame `data` completes.
    pub fn feed(&mut self, data: &[u8]) -> Result<Bytes, FramingError> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        while self.buf.len() >= 4 {
            let total =
                u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
            if !(16..=MAX_FRAME_BYTES).contains(&total) {
                return Err(FramingError(format!("a message of {total} bytes")));
            }
            if self.buf.len() < total {
                break;
            }
            let raw = self.buf.split_to(total).freeze();
            let message =
                read_message_from(raw.clone()).map_err(|e| FramingError(e.to_string()))?;
            sse_of(&message, &raw, &mut out);
        }
        Ok(Bytes::from(out))
    }

    /// The end of the reply: bytes of an unfinished frame are an error (a cut stream must not
    /// read as a whole one).
    pub fn finish(&mut self) -> Result<(), FramingError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            let left = std::mem::take(&mut self.buf).len();
            Err(FramingError(format!(
                "{left} bytes of an unfinished message"
            )))
        }
    }
}

/// Messages SSE in (whole events, as the expand loop sends them), event-stream bytes out.
#[derive(Debug, Default)]
pub struct Reframe {
    buf: Vec<u8>,
}

impl Reframe {
    /// The frames of every event `data` completes.
    pub fn feed(&mut self, data: &[u8]) -> Bytes {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(end) = crate::sse::frame_end(&self.buf, start) {
            frame_of(&self.buf[start..end], &mut out);
            start = end;
        }
        self.buf.drain(..start);
        Bytes::from(out)
    }
}

/// The event-stream message of one SSE event: a `bedrock_frame` is its raw frame again, any
/// other event a `chunk` whose bytes are the event's data; an event without data is dropped.
fn frame_of(event: &[u8], out: &mut Vec<u8>) {
    let mut data: Option<&[u8]> = None;
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(value) = line.strip_prefix(b"data:") {
            data = Some(value.strip_prefix(b" ").unwrap_or(value));
        }
    }
    let Some(data) = data else { return };
    if let Some(raw) = raw_frame(data) {
        out.extend_from_slice(&raw);
        return;
    }
    let payload = format!(
        "{{\"bytes\":\"{}\"}}",
        aws_smithy_types::base64::encode(data)
    );
    let message = Message::new(payload.into_bytes())
        .add_header(Header::new(
            ":event-type",
            FrameValue::String("chunk".into()),
        ))
        .add_header(Header::new(
            ":content-type",
            FrameValue::String("application/json".into()),
        ))
        .add_header(Header::new(
            ":message-type",
            FrameValue::String("event".into()),
        ));
    // Writing a message only fails over the format's limits, which one event cannot reach.
    let _ = write_message_to(&message, out);
}

/// The raw frame a `bedrock_frame` event holds.
fn raw_frame(data: &[u8]) -> Option<Vec<u8>> {
    #[derive(serde::Deserialize)]
    struct Raw<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        raw: &'a str,
    }
    let raw: Raw<'_> = serde_json::from_slice(data).ok()?;
    (raw.kind == RAW_FRAME_EVENT)
        .then(|| aws_smithy_types::base64::decode(raw.raw).ok())
        .flatten()
}

/// Whether a reply's headers say it is an event stream.
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(EVENT_STREAM))
}

/// One `chunk` frame carrying `event` (a Messages stream event's JSON), as Bedrock sends it:
/// for tests, the mock provider and the fuzz seeds.
pub fn chunk_frame(event: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame_of(&[b"data: ", event, b"\n\n"].concat(), &mut out);
    out
}

#[cfg(test)]
mod tests;
