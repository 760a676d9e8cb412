//! The application's routes: pass-through, and the operator routes (`/healthz`, `/stats`,
//! `/metrics`, `/expand`, `/compact`). What every request shares ([`App`]) is `state.rs`; the
//! rewritten routes are `chat.rs`; the turn itself is `modes::turn`; the expand loop is
//! `expand_loop.rs`.
//!
//! Failure rule: sluice never answers 5xx for a problem it caused. A body it cannot parse is
//! forwarded untouched; a panic in the engine forwards the original (the engine's own guard);
//! only an upstream that cannot be reached gives 502/504, and an upstream error status passes
//! through verbatim.

use std::borrow::Cow;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use engine::config::Config;
use engine::session;
use engine::wire::Dialect;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use modes::turn::{SESSION_HEADER, Turn, TurnInput};

use crate::chat::rewritten_route;
use crate::forward::{FLUSH_WAIT, Outbound, read_body, relay, send, upstream_uri};
use crate::respond::{self as h, Body, ProxyError};
use crate::sections::SECTIONS;
use crate::state::{App, Settings};

/// `cg_build_info` (the version as a label, value 1, as Prometheus exporters do) and the
/// process's uptime: `cg_` like every series, one scheme for sluice's own and context-guru's.
fn write_build_info(out: &mut String, uptime: std::time::Duration) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "# HELP cg_build_info The running sluice's version.\n# TYPE cg_build_info gauge\ncg_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        out,
        "# HELP cg_uptime_seconds Seconds since this process started.\n# TYPE cg_uptime_seconds gauge\ncg_uptime_seconds {}",
        uptime.as_secs()
    );
}

/// The service function: never fails, every outcome is a response.
pub async fn handle(
    app: Arc<App>,
    peer: SocketAddr,
    mut request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let started = std::time::Instant::now();
    let path = request.uri().path().to_owned();
    if path.starts_with("/bedrock/") {
        let caller = bedrock_caller(&app, peer, &request);
        request.extensions_mut().insert(caller);
    }
    let method = request.method().clone();
    let response = match (&method, path.as_str()) {
        (&Method::GET, "/healthz") => h::text(StatusCode::OK, "ok"),
        // Claude Code checks its base URL with `HEAD` at start-up; sluice's roots answer it
        // themselves (a provider's path below them is relayed like any other).
        (
            &Method::HEAD,
            "/" | "/healthz" | "/anthropic" | "/anthropic/" | "/openai" | "/openai/" | "/gemini"
            | "/gemini/" | "/vertex" | "/vertex/" | "/bedrock" | "/bedrock/",
        ) => h::text(StatusCode::OK, ""),
        (method, dash) if dash.starts_with("/dashboard") => {
            match crate::dashboard::route(method, dash) {
                Some(&(_, _, audience, _)) => {
                    crate::dashboard::handle(&app, peer, &request, audience).await
                }
                None => ProxyError::NotFound {
                    method: method.clone(),
                    path: path.clone(),
                }
                .into_response(),
            }
        }
        (&Method::GET, "/favicon.ico") => h::text(StatusCode::NO_CONTENT, ""),
        (&Method::GET, "/stats" | "/metrics" | "/expand" | "/ab")
        | (&Method::POST, "/compact" | "/v1/compress")
            if let Err(refused) = app.settings().admission.check(peer.ip(), request.headers()) =>
        {
            refused.into_response()
        }
        (&Method::GET, "/stats") => stats_route(&app),
        (&Method::GET, "/metrics") => metrics_route(&app),
        (&Method::GET, "/ab") => ab_route(&app, request.uri().query()).await,
        (&Method::GET, "/expand") => expand_route(&app, peer, &request).await,
        (&Method::POST, "/compact") => compact_route(&app, request).await,
        (&Method::POST, "/v1/compress") => crate::sidecar::compress_route(&app, request).await,
        (&Method::GET, retrieve) if retrieve.starts_with("/v1/retrieve/") => {
            match app.settings().admission.check(peer.ip(), request.headers()) {
                Err(refused) => refused.into_response(),
                Ok(()) => {
                    let hash = retrieve.trim_start_matches("/v1/retrieve/");
                    crate::sidecar::retrieve_route(&app, hash).await
                }
            }
        }
        (&Method::POST, "/anthropic/v1/messages/count_tokens")
            if app.config.count_tokens == engine::config::CountTokens::Compacted =>
        {
            count_tokens_route(&app, request).await
        }
        (&Method::POST, chat_path)
            if let Some(dialect) = rewritten(chat_path, request.uri().query()) =>
        {
            rewritten_route(&app, dialect, request).await
        }
        _ if has_dot_segment(&path) => {
            ProxyError::BadRequest("a path with `.` or `..` segments is not forwarded")
                .into_response()
        }
        _ if path.starts_with("/bedrock/") => bedrock_passthrough(&app, request).await,
        _ => match upstream_for(app.settings(), &path) {
            Some(base) => passthrough(&app, &base, request).await,
            None => ProxyError::NotFound {
                method: method.clone(),
                path: path.clone(),
            }
            .into_response(),
        },
    };
    crate::access::log(
        &method,
        crate::access::route_label(&path),
        &response,
        started,
    );
    Ok(response)
}

/// The dialect a `POST` to `path` is rewritten as, when it is one of the rewritten routes (the
/// `route` the dashboard records it under; `crate::dashboard::CAPTURED` lists them for the doc):
/// the fixed paths, Azure's deployments, then, for a path without `.` or `..` segments (a
/// Google or Bedrock path carries caller-chosen ones), Gemini and Vertex calls and Bedrock
/// invocations.
pub(crate) fn rewritten(path: &str, query: Option<&str>) -> Option<Dialect> {
    match path {
        "/anthropic/v1/messages" => Some(Dialect::Anthropic),
        "/openai/v1/chat/completions" => Some(Dialect::OpenAi),
        "/openai/v1/responses" => Some(Dialect::Responses),
        azure if is_azure_chat(azure) => Some(Dialect::OpenAi),
        _ if has_dot_segment(path) => None,
        _ => crate::google::generates(path, query)
            .map(|call| call.dialect)
            .or_else(|| crate::bedrock::invokes(path).map(|_| Dialect::Anthropic)),
    }
}

/// Whether sluice may sign this caller's Bedrock calls with its own credentials: a loopback or
/// --trusted peer, naming sluice by an address, localhost or a --dashboard-host name (not a web
/// page that re-points its own name at 127.0.0.1), and not a browser (a page on any site may
/// POST to 127.0.0.1 blind; browsers say so with `Origin` and `Sec-Fetch-Site`, agents send
/// neither).
fn bedrock_caller(
    app: &App,
    peer: SocketAddr,
    request: &Request<Incoming>,
) -> crate::bedrock::Caller {
    let headers = request.headers();
    let browser = headers.contains_key(http::header::ORIGIN)
        || headers
            .get("sec-fetch-site")
            .is_some_and(|site| site.as_bytes() != b"none");
    let trusted = !browser
        && app.settings().admission.trusts(peer.ip())
        && crate::dashboard::host_is_ours(request.uri(), headers, &app.settings().dashboard_hosts);
    crate::bedrock::Caller { trusted }
}

/// `GET /stats`: the counters, every section's, and what this process is.
fn stats_route(app: &App) -> Response<Body> {
    let mut stats = app.stats.to_json(
        app.mode(),
        app.observer().map(|o| o.pool.stats()),
        Some(app.live_sessions().stats()),
    );
    if let Some(object) = stats.as_object_mut() {
        for section in SECTIONS {
            (section.json)(app, object);
        }
        object.insert("store_backend".into(), app.store_backend().into());
        object.insert("version".into(), env!("CARGO_PKG_VERSION").into());
        object.insert("uptime_seconds".into(), app.uptime().as_secs().into());
    }
    h::json(StatusCode::OK, stats.to_string())
}

/// `GET /ab`: the running experiment's report, read from the store now (JSON; `?format=text`
/// as `sluice ab report` prints it).
async fn ab_route(app: &App, query: Option<&str>) -> Response<Body> {
    let Some(book) = app.book() else {
        return h::json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "no experiment runs here: start sluice with --ab CONTROL_SHARE (docs/guide.md, \"Is it saving me money?\")"}).to_string(),
        );
    };
    match book.report().await {
        Ok(report) if query.is_some_and(|q| q.split('&').any(|kv| kv == "format=text")) => {
            h::text(StatusCode::OK, modes::experiment::render(&report))
        }
        Ok(report) => h::json(
            StatusCode::OK,
            serde_json::to_string(&*report).unwrap_or_default(),
        ),
        // The store's failure, not sluice's: a gateway's status, and what failed.
        Err(error) => h::json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"error": format!("the state store did not answer: {error}")})
                .to_string(),
        ),
    }
}

/// `GET /metrics`: the same in Prometheus's text format.
fn metrics_route(app: &App) -> Response<Body> {
    let mut text = app.stats.to_prometheus();
    for section in SECTIONS {
        (section.prometheus)(app, &mut text);
    }
    write_build_info(&mut text, app.uptime());
    h::text(StatusCode::OK, text)
}

/// The upstream base for a path under `/anthropic/`, `/openai/`, `/gemini/` or `/vertex/`.
fn upstream_for<'a>(settings: &'a Settings, path: &str) -> Option<Cow<'a, str>> {
    if path.starts_with("/anthropic/") {
        Some(Cow::Borrowed(&settings.anthropic_upstream))
    } else if path.starts_with("/openai/") {
        Some(Cow::Borrowed(&settings.openai_upstream))
    } else if path.starts_with("/gemini/") {
        Some(Cow::Borrowed(&settings.gemini_upstream))
    } else if path.starts_with("/vertex/") {
        crate::google::vertex_upstream(settings.vertex_upstream.as_deref(), path)
    } else {
        None
    }
}

/// Whether a path has a `.` or `..` segment, plain or percent-encoded: forwarded raw, it could
/// leave the upstream's base path, so such a request is refused.
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|segment| {
        let decoded = segment.replace("%2e", ".").replace("%2E", ".");
        decoded == "." || decoded == ".."
    })
}

async fn passthrough(app: &App, base: &str, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match crate::forward::read_chunks(app, &parts.headers, body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    app.stats.record_passthrough(false);
    let uri = upstream_uri(base, &parts.uri);
    send(app, parts.method, &uri, &parts.headers, body)
        .await
        .map_or_else(|e| ProxyError::Upstream(e).into_response(), relay)
}

/// Any other Bedrock call goes as it came; sluice signs the ones Claude Code makes besides model
/// calls (`GET /inference-profiles`, `/foundation-models`), for a caller it trusts, when it holds
/// credentials (the client's signature named sluice's host). See `bedrock::signable`.
async fn bedrock_passthrough(app: &App, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match read_body(app, &parts.headers, body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    app.stats.record_passthrough(false);
    let uri = upstream_uri(&app.bedrock.upstream(parts.uri.path()).await, &parts.uri);
    let signable = crate::bedrock::signable(&parts.extensions, &parts.method, parts.uri.path());
    let auth = app.bedrock.auth(&parts.headers, signable).await;
    let outbound = Outbound {
        method: parts.method,
        uri: &uri,
        headers: &parts.headers,
        body: body.into(),
        auth: &auth,
    };
    outbound
        .send(app)
        .await
        .map_or_else(|e| ProxyError::Upstream(e).into_response(), relay)
}

/// `GET /expand?id=HASH[&session=S]`: the exact original, for a person at a loopback address.
/// With a session (header or parameter) only that session's stashes resolve.
async fn expand_route(app: &App, peer: SocketAddr, request: &Request<Incoming>) -> Response<Body> {
    // Who may ask was checked with the other operator routes (`admit.rs`).
    let _ = peer;
    let query = request.uri().query().unwrap_or("");
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .map(str::to_owned)
    };
    let Some(id) = param("id") else {
        return ProxyError::BadRequest("missing ?id=HASH").into_response();
    };
    // A session header that is not text is refused, never read as absent: absent means an
    // unscoped lookup.
    let header = match request.headers().get(SESSION_HEADER).map(|v| v.to_str()) {
        Some(Err(_)) => {
            return ProxyError::BadRequest("the session header must be ASCII text").into_response();
        }
        Some(Ok(value)) => Some(value.to_owned()),
        None => None,
    };
    let session = header.or_else(|| param("session"));
    // Sessions live under the caller's credential scope: asking for one takes the same
    // credential the agent's requests carried.
    let scope = app.turns().scope(request.headers());
    let original = match session.as_deref().and_then(session::sanitize_explicit) {
        // `POST /compact` stashes under `compact:<session>` (its freezes must never reach the
        // live session); a person asking with the session still gets those originals.
        Some(session) => match app.resolve(&format!("{scope}{session}"), &id).await {
            Some(original) => Some(original),
            None => app.resolve(&format!("compact:{scope}{session}"), &id).await,
        },
        None if session.is_some() => None,
        None => app.resolve_any(&id).await,
    };
    match original {
        Some(original) => h::text(StatusCode::OK, original.to_string()),
        None => {
            ProxyError::Missing("expired, unknown, or not owned by this session").into_response()
        }
    }
}

/// `POST /compact[?provider=anthropic|openai][&preset=NAME]`: the rewritten body, no upstream
/// call. Always 200: the rewrite, or the original when it cannot be rewritten.
async fn compact_route(app: &App, request: Request<Incoming>) -> Response<Body> {
    let query = request.uri().query().unwrap_or("").to_owned();
    let (parts, body) = request.into_parts();
    let body = match read_body(app, &parts.headers, body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let dialect = param("provider")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| Dialect::detect(&body));
    let preset_pipeline =
        param("preset").and_then(|name| Config::from_preset(name).ok()?.build_pipeline().ok());
    let input = TurnInput {
        dialect,
        body: &body,
        headers: &parts.headers,
        models: None,
        defer_counts: false,
    };
    // The same turn the proxy would forward, without a tracker; the original when it cannot be
    // rewritten.
    match one_off_rewrite(app, &input, preset_pipeline.as_ref()).await {
        Some(rewritten) => h::json(StatusCode::OK, rewritten),
        None => h::json(StatusCode::OK, body),
    }
}

/// The one-off rewrite of `input` (no tracker, the `compact:` namespace), its originals kept
/// before it is returned, since the caller may hand its markers on at once; `None` when the
/// body goes as it came.
async fn one_off_rewrite(
    app: &App,
    input: &TurnInput<'_>,
    pipeline: Option<&engine::pipeline::Pipeline>,
) -> Option<Bytes> {
    let turn = app.turns().compact(input, pipeline).await;
    match turn {
        Turn::Forward(forward) => {
            let forward = *forward;
            forward.flushed.wait(FLUSH_WAIT).await;
            Some(forward.body)
        }
        Turn::Untouched { .. } => None,
    }
}

/// `POST /anthropic/v1/messages/count_tokens` with `count_tokens: compacted`: the provider
/// counts the body sluice would forward for this transcript, so an agent's context accounting
/// sees the savings. Counting is stateless, so this is a one-off rewrite, like `/compact`.
async fn count_tokens_route(app: &App, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match read_body(app, &parts.headers, body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    let input = TurnInput {
        dialect: Dialect::Anthropic,
        body: &body,
        headers: &parts.headers,
        models: None,
        defer_counts: false,
    };
    // A session in an experiment's control arm is counted as the agent sent it: that arm's
    // agent must see no sign of sluice, its context accounting included.
    let control = app.turns().arm(&input) == Some(engine::config::Arm::Control);
    let counted = if control {
        body
    } else {
        one_off_rewrite(app, &input, None).await.unwrap_or(body)
    };
    let uri = upstream_uri(&app.settings().anthropic_upstream, &parts.uri);
    match send(app, parts.method, &uri, &parts.headers, counted.into()).await {
        Ok(response) => relay(response),
        Err(err) => ProxyError::Upstream(err).into_response(),
    }
}

/// Azure OpenAI's chat route, `/openai/deployments/{name}/chat/completions` (its query, the
/// `api-version`, goes upstream as it came).
fn is_azure_chat(path: &str) -> bool {
    !has_dot_segment(path)
        && path
            .strip_prefix("/openai/deployments/")
            .and_then(|rest| rest.split_once('/'))
            .is_some_and(|(name, rest)| !name.is_empty() && rest == "chat/completions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_found_plain_and_encoded() {
        for bad in [
            "/openai/v1/../../admin",
            "/openai/v1/%2e%2e/admin",
            "/anthropic/./v1/messages",
            "/openai/v1/%2E%2e",
        ] {
            assert!(has_dot_segment(bad), "{bad}");
        }
        for good in [
            "/openai/v1/models",
            "/anthropic/v1/messages/count_tokens",
            "/openai/v1/a..b",
        ] {
            assert!(!has_dot_segment(good), "{good}");
        }
    }

    #[test]
    fn upstream_uri_strips_the_dialect_prefix_and_keeps_the_query() {
        let uri: http::Uri = "/anthropic/v1/messages/count_tokens?beta=true"
            .parse()
            .unwrap();
        assert_eq!(
            upstream_uri("https://api.anthropic.com/", &uri),
            "https://api.anthropic.com/v1/messages/count_tokens?beta=true"
        );
        let uri: http::Uri = "/openai/v1/models".parse().unwrap();
        assert_eq!(
            upstream_uri("http://127.0.0.1:9", &uri),
            "http://127.0.0.1:9/v1/models"
        );
    }
}
