//! The dashboard's routes: the page, its API under `/dashboard/api/`, and the live feed.
//!
//! [`ROUTES`] is the one table of what is mounted and who it answers: aggregates are open to
//! whoever reaches the port (as the reference serves them); message content and the effective
//! config answer loopback and `--trusted` networks only (with the admin token when one is set),
//! and everyone else gets `content_visible: false` or 403. A test walks the table.
//!
//! Reads run on the blocking pool (SQLite is synchronous); the page is three files embedded in
//! the binary, served with a Content-Security-Policy that allows nothing outside this origin.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dashboard::query::{self, RowFilter};
use dashboard::{Dashboard, Subscription};
use engine::wire::Dialect;
use futures::StreamExt;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};

use crate::respond::{self as h, Body, BoxError, ProxyError};
use crate::state::App;

/// Who a route answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Anyone who reaches the port: aggregates and the page.
    Open,
    /// Open, but message content only for trusted callers.
    OpenWithContent,
    /// Loopback and trusted networks only.
    Trusted,
}

/// Every dashboard route: method, path (a trailing `*` takes one more segment), audience, and
/// what it serves.
pub const ROUTES: &[(&str, &str, Audience, &str)] = &[
    (
        "GET",
        "/dashboard",
        Audience::Open,
        "redirect to /dashboard/",
    ),
    ("GET", "/dashboard/", Audience::Open, "the page"),
    (
        "GET",
        "/dashboard/app.js",
        Audience::Open,
        "the page's script",
    ),
    (
        "GET",
        "/dashboard/app.css",
        Audience::Open,
        "the page's styles",
    ),
    (
        "GET",
        "/dashboard/api/overview",
        Audience::Open,
        "totals for the window, and the capture's own counters",
    ),
    (
        "GET",
        "/dashboard/api/series",
        Audience::Open,
        "time buckets (`bucket_ms`) computed in SQL",
    ),
    (
        "GET",
        "/dashboard/api/sessions",
        Audience::Open,
        "sessions, most recent first, keyset pages",
    ),
    (
        "GET",
        "/dashboard/api/requests",
        Audience::Open,
        "requests, newest first, filters and keyset pages",
    ),
    (
        "GET",
        "/dashboard/api/requests/*",
        Audience::OpenWithContent,
        "one request: component decisions, skip reasons, content",
    ),
    (
        "GET",
        "/dashboard/api/components",
        Audience::Open,
        "per component: runs, acts, reverts, saved, why not",
    ),
    (
        "GET",
        "/dashboard/api/cost",
        Audience::Open,
        "money by model, net beside every cost",
    ),
    (
        "GET",
        "/dashboard/api/experiment",
        Audience::Open,
        "a running A/B experiment's report (as `GET /ab`), or that none runs",
    ),
    (
        "GET",
        "/dashboard/api/keepalive",
        Audience::Open,
        "the cache keep-alive's pings, gaps kept and their money (the `/stats` `keepalive_*` keys), or that it is off",
    ),
    (
        "GET",
        "/dashboard/api/config",
        Audience::Trusted,
        "the effective config, allowlisted and redacted",
    ),
    (
        "GET",
        "/dashboard/api/events",
        Audience::Open,
        "live summary rows (SSE), never content",
    ),
];

/// The rewritten routes, each of whose requests is one row: the `route` the row carries (the
/// dialect sluice read the request in, which is also what the `route` filter takes), who sends
/// it, and its `POST` paths (`{...}` a caller's segment). The router decides with
/// `app::rewritten`; a test sends every path here through it and checks every dialect
/// is listed, and `docs/dashboard.md`'s list is rendered from this table.
pub const CAPTURED: &[(Dialect, &str, &[&str])] = &[
    (
        Dialect::Anthropic,
        "Anthropic Messages",
        &["/anthropic/v1/messages"],
    ),
    (
        Dialect::Anthropic,
        "Claude on Vertex AI",
        &[
            "/vertex/{version}/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:rawPredict",
            "/vertex/{version}/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:streamRawPredict",
        ],
    ),
    (
        Dialect::Anthropic,
        "Claude on Bedrock",
        &[
            "/bedrock/model/{model}/invoke",
            "/bedrock/model/{model}/invoke-with-response-stream",
        ],
    ),
    (
        Dialect::OpenAi,
        "OpenAI chat completions",
        &["/openai/v1/chat/completions"],
    ),
    (
        Dialect::OpenAi,
        "Azure OpenAI",
        &["/openai/deployments/{deployment}/chat/completions"],
    ),
    (
        Dialect::Responses,
        "OpenAI Responses",
        &["/openai/v1/responses"],
    ),
    (
        Dialect::Gemini,
        "Gemini API",
        &[
            "/gemini/{version}/models/{model}:generateContent",
            "/gemini/{version}/models/{model}:streamGenerateContent?alt=sse",
        ],
    ),
    (
        Dialect::Gemini,
        "Gemini on Vertex AI",
        &[
            "/vertex/{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:generateContent",
            "/vertex/{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:streamGenerateContent?alt=sse",
        ],
    ),
];

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLES: &str = include_str!("dashboard/app.css");
/// What `/dashboard` and `/dashboard/` answer, with 404, when the dashboard is off.
const OFF_PAGE: &str = include_str!("dashboard/off.html");
/// What the dashboard's other routes answer, with 404, when it is off.
const OFF_WHY: &str = "the dashboard is off in this sluice (`sluice serve --no-dashboard`): start it without --no-dashboard; the dashboard is on with every state store";

/// Nothing outside this origin: no CDN, no inline script, no framing, no form posts.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The route in [`ROUTES`] that `path` is, if any.
pub fn route(
    method: &Method,
    path: &str,
) -> Option<&'static (&'static str, &'static str, Audience, &'static str)> {
    ROUTES.iter().find(|(m, pattern, ..)| {
        *m == method.as_str()
            && match pattern.strip_suffix('*') {
                Some(prefix) => path
                    .strip_prefix(prefix)
                    .is_some_and(|rest| !rest.is_empty() && !rest.contains('/')),
                None => path == *pattern,
            }
    })
}

/// Answers a dashboard route (`route` found it in [`ROUTES`]).
pub(crate) async fn handle(
    app: &Arc<App>,
    peer: SocketAddr,
    request: &Request<Incoming>,
    audience: Audience,
) -> Response<Body> {
    let Some(dashboard) = app.dashboard().cloned() else {
        return secured(off(request.uri().path()));
    };
    let trusted = app
        .settings()
        .admission
        .check(peer.ip(), request.headers())
        .is_ok()
        && host_is_ours(
            request.uri(),
            request.headers(),
            &app.settings().dashboard_hosts,
        );
    if audience == Audience::Trusted && !trusted {
        return secured(
            ProxyError::Forbidden(
                "the dashboard's config answers loopback and trusted networks, named by an address, localhost or a --dashboard-host name",
            )
            .into_response(),
        );
    }
    let path = request.uri().path();
    let query = request.uri().query().unwrap_or("");
    let response = match path {
        "/dashboard" => Response::builder()
            .status(StatusCode::MOVED_PERMANENTLY)
            .header(LOCATION, "/dashboard/")
            .body(h::full(Bytes::new()))
            .unwrap_or_else(|_| h::text(StatusCode::OK, "")),
        "/dashboard/" => asset("text/html; charset=utf-8", INDEX),
        "/dashboard/app.js" => asset("text/javascript; charset=utf-8", SCRIPT),
        "/dashboard/app.css" => asset("text/css; charset=utf-8", STYLES),
        "/dashboard/api/events" => events(&dashboard, request.headers(), query),
        "/dashboard/api/config" => api_json(config_view(app)),
        "/dashboard/api/experiment" => experiment(app).await,
        "/dashboard/api/keepalive" => api_json(keepalive(app)),
        api => match read(dashboard, api, query, trusted).await {
            Ok(Some(value)) => api_json(value),
            Ok(None) => ProxyError::Missing("no such request").into_response(),
            Err(response) => response,
        },
    };
    secured(response)
}

/// The Experiment tab's report: read from the store now, as `GET /ab` (aggregates only: no
/// session is named).
async fn experiment(app: &App) -> Response<Body> {
    let Some(book) = app.book() else {
        return api_json(serde_json::json!({ "running": false }));
    };
    match book.report().await {
        Ok(report) => {
            let mut value = serde_json::to_value(&*report).unwrap_or_default();
            value["running"] = book.recording().into();
            value["ended"] = (!book.recording()).into();
            api_json(value)
        }
        Err(error) => ProxyError::Busy {
            why: format!("the state store did not answer: {error}"),
            retry_after: 5,
        }
        .into_response(),
    }
}

/// The overview's keep-alive tile: the `/stats` rows (one table), and whether it is on.
fn keepalive(app: &App) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    object.insert("enabled".into(), app.keeper().is_some().into());
    let counts = app.keeper().map(|k| k.counts()).unwrap_or_default();
    let fields = crate::keepalive_stats::KEEPALIVE_FIELDS;
    modes::stats::table::write_json(fields, &counts, &mut object);
    serde_json::Value::Object(object)
}

/// A dashboard route's answer when the dashboard is off: 404, never a bare "no route": the page
/// says how to turn it on, and the API says so in its error.
fn off(path: &str) -> Response<Body> {
    if matches!(path, "/dashboard" | "/dashboard/") {
        let mut response = asset("text/html; charset=utf-8", OFF_PAGE);
        *response.status_mut() = StatusCode::NOT_FOUND;
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    } else {
        ProxyError::Missing(OFF_WHY).into_response()
    }
}

/// Whether the request named this server by a name it answers to: an IP literal, `localhost`,
/// or a name in `--dashboard-host`. A browser page on another site that re-points its own name
/// at 127.0.0.1 (DNS rebinding) reaches the port from loopback, but sends its own name here,
/// so content and config stay out of its reach.
pub(crate) fn host_is_ours(uri: &http::Uri, headers: &HeaderMap, allowed: &[String]) -> bool {
    // HTTP/2 (and an absolute-form request) carries the authority in the URI.
    let host = uri.authority().map(|a| a.as_str().to_owned()).or_else(|| {
        headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let Some(host) = host else {
        // HTTP/1.0 without Host: no browser sends that.
        return true;
    };
    let host = host.as_str();
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| {
            let a = a.trim();
            let a = a.rsplit_once(':').map_or(a, |(name, _)| name);
            a.eq_ignore_ascii_case(name)
        })
}

/// Reads running at once; more wait up to [`READ_WAIT`] for a turn, then get 429, rather than
/// park threads on the reader.
const READS_AT_ONCE: usize = 2;
const READ_WAIT: Duration = Duration::from_secs(5);

fn read_permits() -> &'static tokio::sync::Semaphore {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    PERMITS.get_or_init(|| tokio::sync::Semaphore::new(READS_AT_ONCE))
}

/// A read of the store, off the async threads.
async fn read(
    dashboard: Arc<Dashboard>,
    path: &str,
    query: &str,
    trusted: bool,
) -> Result<Option<serde_json::Value>, Response<Body>> {
    let params = Params::parse(query).map_err(bad_request)?;
    let filter = params.filter();
    let path = path.to_owned();
    // A read cannot be cancelled once it runs, and an open route must not pile them up on
    // blocking threads: reads wait their turn here (a page asks for three at once), briefly.
    let waited = tokio::time::timeout(READ_WAIT, read_permits().acquire()).await;
    let Ok(Ok(permit)) = waited else {
        return Err(ProxyError::Busy {
            why: "the dashboard is answering other reads".into(),
            retry_after: 1,
        }
        .into_response());
    };
    let read = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        dashboard.read(|c| {
            Ok(match path.as_str() {
                "/dashboard/api/overview" => {
                    let mut overview = query::overview(c, &filter)?;
                    overview["capture"] = capture_counts(&dashboard);
                    Some(overview)
                }
                "/dashboard/api/series" => Some(query::series(
                    c,
                    &filter,
                    params.number("bucket_ms").unwrap_or(60_000),
                )?),
                "/dashboard/api/sessions" => Some(query::sessions(
                    c,
                    &filter,
                    params.number("before"),
                    params.number("limit").map(|l| l as u32),
                )?),
                "/dashboard/api/requests" => Some(query::requests(
                    c,
                    &filter,
                    params.number("before"),
                    params.number("limit").map(|l| l as u32),
                )?),
                "/dashboard/api/components" => Some(query::components(c, &filter)?),
                "/dashboard/api/cost" => Some(query::cost(c, &filter)?),
                one => match one
                    .strip_prefix("/dashboard/api/requests/")
                    .and_then(|id| id.parse::<u64>().ok())
                {
                    Some(id) => query::request(c, id, trusted)?,
                    None => None,
                },
            })
        })
    })
    .await;
    match read {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => {
            tracing::warn!(%error, "dashboard read failed");
            Err(ProxyError::Unavailable("the dashboard store could not be read").into_response())
        }
        Err(_) => Err(ProxyError::Unavailable("the dashboard read was cancelled").into_response()),
    }
}

fn capture_counts(dashboard: &Dashboard) -> serde_json::Value {
    use std::sync::atomic::Ordering::Relaxed;
    let c = dashboard.counts();
    // Where the rows are kept: "file", or "memory" (this run only). Never the path: the
    // overview is open to whoever reaches the port.
    let kept = if dashboard.path().is_some() {
        "file"
    } else {
        "memory"
    };
    serde_json::json!({
        "captured": c.captured.load(Relaxed),
        "dropped": c.dropped.load(Relaxed),
        "write_errors": c.write_errors.load(Relaxed),
        "evicted_rows": c.evicted_rows.load(Relaxed),
        "subscribers": dashboard.subscribers(),
        "subscribers_evicted": c.subscribers_evicted.load(Relaxed),
        "content_enabled": dashboard.content_enabled(),
        "kept": kept,
    })
}

/// The effective config, allowlisted and scrubbed (`dashboard::redact::config_view`).
fn config_view(app: &App) -> serde_json::Value {
    let config = &app.config;
    let raw = serde_json::json!({
        "mode": app.mode(),
        "preset": config.preset,
        "pipeline": config.pipeline,
        "count_tokens": format!("{:?}", config.count_tokens).to_ascii_lowercase(),
        "store": { "backend": app.store_backend() },
        "tools": {
            "exclude": config.tools.exclude,
            "rules": config.tools.rules.iter()
                .map(|(tool, rule)| (tool.clone(), rule.components.clone().into()))
                .collect::<serde_json::Map<String, serde_json::Value>>(),
        },
    });
    dashboard::redact::config_view(&raw)
}

fn asset(content_type: &'static str, text: &'static str) -> Response<Body> {
    let mut response = h::text(StatusCode::OK, text);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn api_json(value: serde_json::Value) -> Response<Body> {
    let mut response = h::json(StatusCode::OK, value.to_string());
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn bad_request(why: &'static str) -> Response<Body> {
    ProxyError::BadRequest(why).into_response()
}

/// The headers every dashboard response carries.
fn secured(mut response: Response<Body>) -> Response<Body> {
    let headers = response.headers_mut();
    headers.insert("content-security-policy", HeaderValue::from_static(CSP));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// A query string's parameters, percent-decoded.
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(query: &str) -> Result<Params, &'static str> {
        let mut pairs = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            pairs.push((decode(key)?, decode(value)?));
        }
        Ok(Params(pairs))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }

    fn filter(&self) -> RowFilter {
        let text = |key| self.get(key).map(str::to_owned);
        RowFilter {
            since: self.number("since"),
            until: self.number("until"),
            session: text("session"),
            model: text("model"),
            route: text("route"),
            mode: text("mode"),
            component: text("component"),
            status: text("status"),
        }
    }
}

fn decode(text: &str) -> Result<String, &'static str> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("a query parameter has a bad %-escape")?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "a query parameter is not UTF-8")
}

/// How often an idle live feed sends a comment, so proxies and the page know it is alive.
const KEEPALIVE: Duration = Duration::from_secs(20);

/// The live feed: rows since `Last-Event-ID` from the ring, then each new row as it is stored.
fn events(dashboard: &Dashboard, headers: &HeaderMap, query: &str) -> Response<Body> {
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            Params::parse(query)
                .ok()?
                .get("last_event_id")
                .map(str::to_owned)
        })
        .and_then(|v| v.trim().parse().ok());
    let subscription = match dashboard.subscribe(last) {
        Ok(subscription) => subscription,
        Err(full) => {
            return ProxyError::Busy {
                why: full.to_string(),
                retry_after: 5,
            }
            .into_response();
        }
    };
    let mut response = Response::new(sse_body(subscription));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn frame(id: u64, data: &str) -> Bytes {
    Bytes::from(format!("id: {id}\nevent: request\ndata: {data}\n\n"))
}

fn sse_body(subscription: Subscription) -> Body {
    let Subscription { replay, .. } = &subscription;
    let first: Vec<Bytes> = std::iter::once(Bytes::from_static(b"retry: 3000\n\n"))
        .chain(replay.iter().map(|(id, data)| frame(*id, data)))
        .collect();
    let head = futures::stream::iter(first.into_iter().map(|b| Ok::<_, BoxError>(Frame::data(b))));
    let live = futures::stream::unfold(subscription, |mut sub| async move {
        tokio::select! {
            row = sub.next() => {
                let (id, data) = row?;
                Some((Ok::<_, BoxError>(Frame::data(frame(id, &data))), sub))
            }
            () = tokio::time::sleep(KEEPALIVE) => {
                Some((Ok(Frame::data(Bytes::from_static(b": keepalive\n\n"))), sub))
            }
        }
    });
    BodyExt::boxed(StreamBody::new(head.chain(live)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_and_config_are_the_only_routes_beyond_aggregates() {
        for (method, path, audience, what) in ROUTES {
            let serves_content = what.contains("content") && !what.contains("never content");
            let serves_config = what.contains("config");
            match audience {
                Audience::Open => assert!(
                    !serves_content && !serves_config,
                    "{method} {path} is open but serves {what}"
                ),
                Audience::OpenWithContent => assert!(serves_content, "{path}"),
                Audience::Trusted => assert!(serves_config || serves_content, "{path}"),
            }
        }
        assert_eq!(
            route(&Method::GET, "/dashboard/api/requests/42").map(|r| r.2),
            Some(Audience::OpenWithContent)
        );
        assert!(route(&Method::GET, "/dashboard/api/requests/42/x").is_none());
        assert!(route(&Method::POST, "/dashboard/api/overview").is_none());
        assert_eq!(
            route(&Method::GET, "/dashboard/api/config").map(|r| r.2),
            Some(Audience::Trusted)
        );
    }

    #[test]
    fn the_page_fetches_nothing_off_origin_and_names_only_real_routes() {
        for text in [INDEX, SCRIPT, STYLES, OFF_PAGE] {
            // The SVG namespace is a name, never fetched.
            let text = text.replace("'http://www.w3.org/2000/svg'", "");
            for off in ["http://", "https://", "//cdn", "@import"] {
                assert!(!text.contains(off), "{off} in an embedded asset");
            }
        }
        for page in [INDEX, OFF_PAGE] {
            assert!(
                !page.contains("<script>") && !page.contains("style="),
                "nothing inline"
            );
        }
        assert!(
            OFF_PAGE.contains("--no-dashboard") && OFF_WHY.contains("--no-dashboard"),
            "the off page says how to turn the dashboard on"
        );
        // Every API path the script calls is mounted.
        for (at, _) in SCRIPT.match_indices("'/dashboard/api/") {
            let path: String = SCRIPT[at + 1..]
                .chars()
                .take_while(|c| *c != '\'' && *c != '?')
                .collect();
            let probe = if path.ends_with('/') {
                format!("{path}1")
            } else {
                path.clone()
            };
            assert!(
                route(&Method::GET, &probe).is_some(),
                "{path} is not mounted"
            );
        }
    }

    /// A path of a [`CAPTURED`] template: each caller's segment filled in.
    fn example(template: &str) -> (String, Option<String>) {
        let (path, query) = match template.split_once('?') {
            Some((path, query)) => (path, Some(query.to_owned())),
            None => (template, None),
        };
        let path = path
            .replace("{version}", "v1")
            .replace("{p}", "my-project")
            .replace("{l}", "us-east5")
            .replace("{deployment}", "gpt-4o")
            .replace("{model}", "some-model-1");
        assert!(
            !path.contains('{'),
            "{template}: a segment the test does not fill"
        );
        (path, query)
    }

    #[test]
    fn every_captured_route_is_rewritten_in_its_dialect_and_every_dialect_is_listed() {
        for (dialect, who, paths) in CAPTURED {
            for template in *paths {
                let (path, query) = example(template);
                assert_eq!(
                    crate::app::rewritten(&path, query.as_deref()),
                    Some(*dialect),
                    "{who}: {template}"
                );
            }
        }
        for dialect in Dialect::ALL {
            assert!(
                CAPTURED.iter().any(|(d, ..)| *d == dialect),
                "{} is rewritten but not in CAPTURED",
                dialect.as_str()
            );
        }
        // A path the router forwards as it came is no row's.
        for (path, query) in [
            ("/anthropic/v1/messages/count_tokens", None),
            ("/openai/v1/models", None),
            ("/gemini/v1beta/models/m:countTokens", None),
            ("/gemini/v1beta/models/m:streamGenerateContent", None),
            ("/bedrock/model/m/converse", None),
            ("/bedrock/model/../invoke", None),
        ] {
            assert_eq!(crate::app::rewritten(path, query), None, "{path}");
        }
    }

    /// `docs/dashboard.md`'s captured routes: one row per [`CAPTURED`] entry, then the values the
    /// `route` filter takes.
    fn captured_markdown() -> String {
        let mut out = String::from("| `route` | sent by | `POST` paths |\n|---|---|---|\n");
        for (dialect, who, paths) in CAPTURED {
            let paths: Vec<String> = paths.iter().map(|p| format!("`{p}`")).collect();
            out += &format!(
                "| `{}` | {who} | {} |\n",
                dialect.as_str(),
                paths.join(", ")
            );
        }
        let mut values: Vec<&str> = Vec::new();
        for (dialect, ..) in CAPTURED {
            if !values.contains(&dialect.as_str()) {
                values.push(dialect.as_str());
            }
        }
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        out += &format!(
            "\nThe `route` filter takes these values: {}.\n",
            values.join(", ")
        );
        out
    }

    /// `docs/dashboard.md`'s route, price and redaction tables, its captured routes and its
    /// flags are rendered from the code's tables and the command line.
    /// `SLUICE_BLESS=1 cargo test -p proxy dashboard_doc` rewrites them.
    #[test]
    fn dashboard_doc_matches_the_tables() {
        use dashboard::{prices::PRICES, redact::PATTERNS};
        let audience = |a: Audience| match a {
            Audience::Open => "anyone who reaches the port",
            Audience::OpenWithContent => "anyone; content only to loopback and `--trusted`",
            Audience::Trusted => "loopback and `--trusted` only",
        };
        let routes: String = std::iter::once("| route | who | what |\n|---|---|---|\n".to_owned())
            .chain(ROUTES.iter().map(|(method, path, who, what)| {
                format!(
                    "| `{method} {}` | {} | {what} |\n",
                    path.replace('*', "{id}"),
                    audience(*who)
                )
            }))
            .collect();
        let prices: String = std::iter::once(
            "| model prefix | input | output | cache read | cache write |\n|---|--:|--:|--:|--:|\n"
                .to_owned(),
        )
        .chain(PRICES.iter().map(|(prefix, p)| {
            format!(
                "| `{prefix}` | {:.3} | {:.3} | {:.4} | {:.4} |\n",
                p.input, p.output, p.cache_read, p.cache_write
            )
        }))
        .collect();
        let patterns: String = PATTERNS
            .iter()
            .map(|(name, _)| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", ")
            + "\n";
        let captured = captured_markdown();
        let flags = crate::reference::dashboard_flags();
        crate::generated::check_doc("dashboard.md", "dashboard_doc", |doc| {
            let doc = crate::generated::splice(doc, "flags", &flags);
            let doc = crate::generated::splice(&doc, "captured", &captured);
            let doc = crate::generated::splice(&doc, "routes", &routes);
            let doc = crate::generated::splice(&doc, "prices", &prices);
            crate::generated::splice(&doc, "redaction", &patterns)
        });
    }

    #[test]
    fn content_answers_only_a_host_that_names_sluice() {
        let ours = |host: &str, allowed: &[&str]| {
            let mut headers = HeaderMap::new();
            headers.insert(http::header::HOST, HeaderValue::from_str(host).unwrap());
            let allowed: Vec<String> = allowed.iter().map(|a| (*a).to_owned()).collect();
            host_is_ours(&http::Uri::from_static("/dashboard/"), &headers, &allowed)
        };
        for host in [
            "127.0.0.1:4000",
            "[::1]:4000",
            "localhost",
            "LOCALHOST.:4000",
            "10.0.0.7",
        ] {
            assert!(ours(host, &[]), "{host}");
        }
        for host in [
            "attacker.example:4000",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
        ] {
            assert!(!ours(host, &[]), "{host}");
        }
        assert!(ours("sluice.internal:4000", &[" sluice.internal:4000"]));
        // HTTP/2: the authority is in the URI, and it wins over any Host header.
        let mut headers = HeaderMap::new();
        headers.insert(http::header::HOST, HeaderValue::from_static("localhost"));
        let h2 = http::Uri::from_static("http://attacker.example:4000/dashboard/");
        assert!(!host_is_ours(&h2, &headers, &[]));
    }

    #[test]
    fn query_parameters_decode_and_bad_ones_are_refused() {
        let p = Params::parse("model=claude%2Dsonnet&since=10&status=&q=a+b").unwrap();
        assert_eq!(p.get("model"), Some("claude-sonnet"));
        assert_eq!(p.number("since"), Some(10));
        assert_eq!(p.get("status"), None);
        assert_eq!(p.get("q"), Some("a b"));
        assert!(Params::parse("x=%zz").is_err());
        assert!(Params::parse("x=%ff").is_err());
    }
}
