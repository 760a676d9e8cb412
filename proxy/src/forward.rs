//! The two ends of a hop: the agent's request body read under its limits, the call upstream
//! (signed first for Bedrock, timed, its failure logged without a secret), and the reply relayed
//! back as it streams, its usage and the provider's cache report handed to the session's tracker
//! and the dashboard on the way.

use std::sync::Arc;
use std::time::Instant;

use actors::sessions::Sessions;
use bytes::Bytes;
use dashboard::ReplyUsage;
use http::{HeaderMap, Method, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use modes::stats::Stats;
use modes::tracker::LedgerTurn;
use modes::{CacheUsage, SessionState};
use parking_lot::Mutex;

use crate::access::Access;
use crate::bedrock::Auth;
use crate::capture::Capture;
use crate::decode::{Decoder, Encoding};
use crate::respond::{Body, BoxError, ProxyError};
use crate::state::{App, Settings};
use crate::upstream::{Chunks, Destination, UpstreamError, strip_hop_by_hop};
use crate::usage::{UsageScanner, cache_report};

/// The scheme and host of an upstream URI, for logs: the path, the query and any credentials
/// in the authority (`https://user:key@host`) stay out.
fn uri_authority(uri: &str) -> String {
    let after_scheme = uri.find("://").map_or(0, |i| i + 3);
    let end = uri[after_scheme..]
        .find('/')
        .map_or(uri.len(), |i| after_scheme + i);
    let authority = &uri[after_scheme..end];
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{}{host}", &uri[..after_scheme])
}

/// How long a reply waits for the state store to acknowledge its turn's writes (they started
/// before the request went upstream, so this is almost never waited).
pub(crate) const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `/anthropic/v1/x?q` → `<base>/v1/x?q`.
pub(crate) fn upstream_uri(base: &str, request_uri: &http::Uri) -> String {
    let path = request_uri.path();
    let rest = path
        .strip_prefix("/anthropic")
        .or_else(|| path.strip_prefix("/openai"))
        .or_else(|| path.strip_prefix("/gemini"))
        .or_else(|| path.strip_prefix("/vertex"))
        .or_else(|| path.strip_prefix(crate::bedrock::PREFIX))
        .unwrap_or(path);
    let query = request_uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    format!("{}{rest}{query}", base.trim_end_matches('/'))
}

/// Reads a request body whole: refused at once (413) when its declared length is over the
/// limit, and given up (408) when the client sends nothing for `body_idle`, so a client that
/// declares a body and stalls does not hold a connection open indefinitely.
pub(crate) async fn read_body(
    app: &App,
    headers: &http::HeaderMap,
    body: Incoming,
) -> Result<Bytes, ProxyError> {
    Ok(read_chunks(app, headers, body).await?.to_bytes())
}

/// [`read_body`], the chunks kept as they came: for a request that may go upstream as it came.
pub(crate) async fn read_chunks(
    app: &App,
    headers: &http::HeaderMap,
    mut body: Incoming,
) -> Result<Chunks, ProxyError> {
    let limit = app.settings().body_limit;
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ProxyError::BodyTooLarge { limit });
    }
    let idle = app.settings().body_idle;
    let mut out = Chunks::default();
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => {
                return Err(ProxyError::BodyStalled {
                    seconds: idle.as_secs(),
                });
            }
            Ok(None) => return Ok(out),
            Ok(Some(Err(_))) => return Err(ProxyError::BodyUnreadable),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(ProxyError::BodyTooLarge { limit });
            }
            out.push(data);
        }
    }
}

/// A request on its way upstream: where, with what, and whether sluice signs it.
pub(crate) struct Outbound<'a> {
    pub(crate) method: Method,
    pub(crate) uri: &'a str,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: Chunks,
    pub(crate) auth: &'a Auth,
}

impl Outbound<'_> {
    /// [`send`], signed first when `auth` says sluice signs (a Bedrock request).
    pub(crate) async fn send(self, app: &App) -> Result<Response<Incoming>, UpstreamError> {
        if !matches!(self.auth, Auth::Sign) {
            return send(app, self.method, self.uri, self.headers, self.body).await;
        }
        let mut headers = self.headers.clone();
        app.bedrock
            .sign_for(
                self.auth,
                &self.method,
                self.uri,
                &mut headers,
                &self.body.to_bytes(),
            )
            .await?;
        send(app, self.method, self.uri, &headers, self.body).await
    }

    /// [`Outbound::send`], with the time to the response head in `access`.
    pub(crate) async fn send_timed(
        self,
        app: &App,
        access: &mut Access,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let started = Instant::now();
        let sent = self.send(app).await;
        access.upstream = Some(started.elapsed());
        sent
    }
}

pub(crate) async fn send(
    app: &App,
    method: Method,
    uri: &str,
    headers: &HeaderMap,
    body: Chunks,
) -> Result<Response<Incoming>, UpstreamError> {
    let started = Instant::now();
    let result = app
        .upstream()
        .send(method, uri, headers, body)
        .await
        .map_err(|error| named(error, app.settings(), uri));
    if let Err(error) = &result {
        // The agent gets a 502 or 504; the operator gets the why (never a header or a body).
        let error = crate::upstream::error_chain(error);
        tracing::warn!(%error, upstream = %uri_authority(uri), "upstream call failed");
    }
    app.stats
        .record_upstream(started.elapsed(), result.is_err());
    result
}

/// `error` naming the setting its call's base came from, when it is a transport failure.
fn named(error: UpstreamError, settings: &Settings, uri: &str) -> UpstreamError {
    match error {
        UpstreamError::Transport { source, .. } => UpstreamError::Transport {
            to: destination(settings, uri),
            source,
        },
        other => other,
    }
}

/// The `sluice serve` flags (and variables) that set an upstream base, as an error names them.
const ANTHROPIC: &str = "--anthropic-upstream or SLUICE_ANTHROPIC_UPSTREAM";
const OPENAI: &str = "--openai-upstream or SLUICE_OPENAI_UPSTREAM";
const GEMINI: &str = "--gemini-upstream or SLUICE_GEMINI_UPSTREAM";
const VERTEX: &str = "--vertex-upstream or SLUICE_VERTEX_UPSTREAM";
const BEDROCK: &str = "--bedrock-upstream or SLUICE_BEDROCK_UPSTREAM";

/// Where a call to `uri` went and what set it: the configured base `uri` was built on (the
/// longest that fits; two settings with one base are both named), else a region's own endpoint
/// for Vertex AI or Bedrock when theirs is unset, else only the scheme and host.
fn destination(settings: &Settings, uri: &str) -> Destination {
    let configured = [
        (Some(settings.anthropic_upstream.as_str()), ANTHROPIC),
        (Some(settings.openai_upstream.as_str()), OPENAI),
        (Some(settings.gemini_upstream.as_str()), GEMINI),
        (settings.vertex_upstream.as_deref(), VERTEX),
        (settings.bedrock_upstream.as_deref(), BEDROCK),
    ];
    let fits: Vec<(&str, &str)> = configured
        .iter()
        .filter_map(|&(base, flag)| {
            let base = base?.trim_end_matches('/');
            let rest = uri.strip_prefix(base)?;
            (!base.is_empty() && (rest.is_empty() || rest.starts_with(['/', '?'])))
                .then_some((base, flag))
        })
        .collect();
    if let Some(longest) = fits.iter().map(|(base, _)| base.len()).max() {
        let (bases, flags): (Vec<&str>, Vec<&str>) =
            fits.into_iter().filter(|(b, _)| b.len() == longest).unzip();
        return Destination {
            base: crate::upstream::shown_url(bases[0]),
            set_by: Some(flags.join("; or ")),
        };
    }
    let mut to = Destination::of(uri);
    let host = to
        .base
        .split_once("://")
        .map_or(to.base.as_str(), |(_, host)| host);
    if settings.vertex_upstream.is_none() && host.ends_with("aiplatform.googleapis.com") {
        to.set_by = Some(format!("{VERTEX}; unset, the region's endpoint"));
    } else if settings.bedrock_upstream.is_none()
        && host.starts_with("bedrock")
        && host.ends_with(".amazonaws.com")
    {
        to.set_by = Some(format!(
            "{BEDROCK}; unset, the region's endpoint (--bedrock-region)"
        ));
    }
    to
}

/// An upstream response passed through as it streams in.
pub(crate) fn relay(response: Response<Incoming>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed())
}

/// A reply to a body sluice could not read, relayed as it came; the dashboard reads its usage
/// when it is not compressed.
pub(crate) fn relay_counted(
    response: Response<Incoming>,
    capture: Option<Capture>,
) -> Response<Body> {
    let Some(capture) = capture else {
        return relay(response);
    };
    if response
        .headers()
        .contains_key(http::header::CONTENT_ENCODING)
    {
        return relay(response);
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let mut scanner = UsageScanner::new(move |usage| capture.usage(usage));
    let body = body
        .map_err(|e| Box::new(e) as BoxError)
        .map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                scanner.scan(data);
            }
            frame
        })
        .boxed();
    Response::from_parts(parts, body)
}

/// Where a reply's cache report goes.
pub(crate) enum Report {
    /// The session's tracker, known now, the cost guard's turn this reply settles, and the
    /// keep-alive's ticket for the turn (`crate::keepalive`).
    Live(String, Option<LedgerTurn>, Option<crate::keepalive::Ticket>),
    /// Observe mode's shadow tracker, once the shadow run has named the session.
    Observed(Arc<Meet>),
}

/// Relays `response` and, once its body is done, hands the provider's cache report for this
/// turn to the session's tracker and its usage to the dashboard. A compressed reply is decoded
/// on the way (sluice asked for identity); one it cannot decode goes through as it came,
/// unread.
pub(crate) fn relay_reporting(
    app: &Arc<App>,
    to: Report,
    response: Response<Incoming>,
    capture: Option<Capture>,
) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let decoder = match Encoding::take(&mut parts.headers) {
        Encoding::Identity => None,
        Encoding::Decode(decoder) => Some(decoder),
        Encoding::Unknown => {
            return Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed());
        }
    };
    let (sessions, stats) = (app.live_sessions().clone(), app.stats.clone());
    let scanner = UsageScanner::new(move |usage: ReplyUsage| {
        let cache = cache_report(&usage);
        let model = usage.model.clone();
        if let Some(capture) = &capture {
            capture.usage(usage);
        }
        match to {
            Report::Live(session, turn, ticket) => {
                let kept = Kept::of(ticket, model, cache.is_some());
                if let Some(cache) = cache {
                    apply_usage(&sessions, &stats, &session, cache, turn, capture, kept);
                }
            }
            Report::Observed(meet) => {
                if let Some(cache) = cache {
                    meet.usage(cache);
                }
            }
        }
    });
    let body = match decoder {
        None => {
            let mut scan = framed_scan(&parts.headers, scanner);
            body.map_err(|e| Box::new(e) as BoxError)
                .map_frame(move |frame| {
                    if let Some(data) = frame.data_ref() {
                        scan(data);
                    }
                    frame
                })
                .boxed()
        }
        Some(decoder) => decoding(body, decoder, scanner),
    };
    Response::from_parts(parts, body)
}

/// The reply an experiment's request gets, scanned on its way to the agent: its usage (every
/// upstream call's: the expand loop adds its rounds into the reply) is what the request cost,
/// and a body that breaks off is a failed request.
pub(crate) fn delivering(response: Response<Body>, capture: Capture) -> Response<Body> {
    let (parts, body) = response.into_parts();
    let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let broke = cut.clone();
    let scanner = UsageScanner::new(move |usage: ReplyUsage| {
        capture.delivered(usage, cut.load(std::sync::atomic::Ordering::Relaxed));
    });
    let mut scan = framed_scan(&parts.headers, scanner);
    let body = body
        .map_err(move |error| {
            broke.store(true, std::sync::atomic::Ordering::Relaxed);
            error
        })
        .map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                scan(data);
            }
            frame
        })
        .boxed();
    Response::from_parts(parts, body)
}

/// Feeds each chunk of a reply with `headers` to `scanner`: an event stream (Bedrock) as the
/// SSE it carries; the agent gets its bytes either way.
fn framed_scan<F>(
    headers: &http::HeaderMap,
    mut scanner: UsageScanner<F>,
) -> impl FnMut(&Bytes) + use<F>
where
    F: FnOnce(ReplyUsage),
{
    let mut unframe =
        crate::bedrock::is_event_stream(headers).then(crate::bedrock::Unframe::default);
    move |data| match unframe.as_mut().map(|u| u.feed(data)) {
        None => scanner.scan(data),
        Some(Ok(text)) => scanner.scan(&text),
        // Unreadable: the agent still gets every byte; the report is lost.
        Some(Err(_)) => unframe = None,
    }
}

/// `body` decoded as it streams, scanned for the cache report; the scanner reports when the
/// stream ends and it is dropped.
fn decoding<F>(body: Incoming, decoder: Box<Decoder>, scanner: UsageScanner<F>) -> Body
where
    F: FnOnce(ReplyUsage) + Send + Sync + 'static,
{
    let stream =
        futures::stream::unfold(Some((body, Some(decoder), scanner)), |state| async move {
            let (mut body, mut decoder, mut scanner) = state?;
            match body.frame().await {
                Some(Ok(frame)) => {
                    let frame = match frame.into_data() {
                        Ok(data) => {
                            let data = match decoder.as_mut().map(|d| d.feed(&data)) {
                                None => data,
                                Some(Ok(decoded)) => decoded,
                                // Corrupt, or a bomb: decoded bytes have gone out without
                                // `Content-Encoding`, so the rest cannot follow raw. The stream
                                // ends in an error the agent sees as a cut reply.
                                Some(Err(err)) => {
                                    return Some((Err(Box::new(err) as BoxError), None));
                                }
                            };
                            scanner.scan(&data);
                            Frame::data(data)
                        }
                        Err(frame) => frame,
                    };
                    Some((Ok(frame), Some((body, decoder, scanner))))
                }
                Some(Err(err)) => Some((Err(Box::new(err) as BoxError), None)),
                None => match decoder?.finish() {
                    Ok(tail) if tail.is_empty() => None,
                    Ok(tail) => {
                        scanner.scan(&tail);
                        Some((Ok(Frame::data(tail)), None))
                    }
                    // A truncated or corrupt end (a failed gzip check): the agent must not take
                    // the reply for whole.
                    Err(err) => Some((Err(Box::new(err) as BoxError), None)),
                },
            }
        });
    BodyExt::boxed(StreamBody::new(stream))
}

/// A scanner that hands the cache report it finds to `session`'s tracker, and the usage to the
/// dashboard, when dropped (the expand loop scans its first reply with it: that reply's report
/// describes the turn).
pub(crate) fn live_report(
    app: &App,
    session: String,
    (ledger_turn, ticket): (Option<LedgerTurn>, Option<crate::keepalive::Ticket>),
    capture: Option<Capture>,
) -> UsageScanner<impl FnOnce(ReplyUsage) + Send + use<>> {
    let (sessions, stats) = (app.live_sessions().clone(), app.stats.clone());
    UsageScanner::new(move |usage: ReplyUsage| {
        let cache = cache_report(&usage);
        let kept = Kept::of(ticket, usage.model.clone(), cache.is_some());
        if let Some(capture) = &capture {
            capture.usage(usage);
        }
        if let Some(cache) = cache {
            apply_usage(
                &sessions,
                &stats,
                &session,
                cache,
                ledger_turn,
                capture,
                kept,
            );
        }
    })
}

/// The turn's keep-alive ticket, and the model the reply named (what its pings are priced at).
struct Kept(crate::keepalive::Ticket, Option<String>);

impl Kept {
    /// What the report hands the keeper, when the turn has a ticket. A reply without a cache
    /// report (refused, failed, cut off) drops the ticket here, and the turn's request goes.
    fn of(
        ticket: Option<crate::keepalive::Ticket>,
        model: Option<String>,
        reported: bool,
    ) -> Option<Kept> {
        reported.then_some(Kept(ticket?, model))
    }
}

/// The provider's cache report for a session's latest turn, to its tracker, and to its cost
/// guard for `ledger_turn` (the turn that sent this request, when one ran the pipeline).
fn apply_usage(
    sessions: &Sessions<SessionState>,
    stats: &Arc<Stats>,
    session: &str,
    usage: CacheUsage,
    ledger_turn: Option<LedgerTurn>,
    capture: Option<Capture>,
    kept: Option<Kept>,
) {
    let stats = stats.clone();
    // The request's dashboard row waits for the settlement (it is sent when its last
    // `Capture` goes, here), so it carries the same billed terms as `/stats`.
    sessions.apply(session, move |state: &mut SessionState| {
        // The turn's reply half, the one replay runs too (`modes::turn::settle_state`).
        let settled = modes::turn::settle_state(state, usage, ledger_turn);
        if settled.cold_mispredicted {
            stats.record_cold_mispredicted();
        }
        if let Some(why) = settled.backoff {
            stats.record_cost_guard_backoff(why.label());
        }
        stats.record_billed(&settled.billed);
        if let Some(capture) = capture {
            capture.billed(&settled.billed);
        }
        // A closure the actor never runs (its mailbox full) drops the ticket instead.
        if let Some(Kept(ticket, model)) = kept {
            ticket.settled(usage, state.tracker.counts.turns, model.as_deref());
        }
    });
}

/// Observe mode learns a turn's session off the request path (the shadow run parses the body)
/// and its cache report from the relayed reply, in either order; whichever arrives second hands
/// the report to the shadow tracker, after the shadow run recorded the turn it belongs to.
pub(crate) struct Meet {
    /// The shadow run's session actors, whose trackers the report goes to, and where it counts.
    sessions: Sessions<SessionState>,
    stats: Arc<Stats>,
    state: Mutex<(Option<String>, Option<CacheUsage>)>,
}

impl std::fmt::Debug for Meet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meet").finish_non_exhaustive()
    }
}

impl Meet {
    pub(crate) fn new(sessions: Sessions<SessionState>, stats: Arc<Stats>) -> Meet {
        Meet {
            sessions,
            stats,
            state: Mutex::default(),
        }
    }

    pub(crate) fn session(&self, session: &str) {
        let stats = &self.stats;
        let usage = {
            let mut state = self.state.lock();
            state.0 = Some(session.to_owned());
            state.1.take()
        };
        if let Some(usage) = usage {
            // Observe's shadow ledger would judge untouched traffic: it settles nothing.
            apply_usage(&self.sessions, stats, session, usage, None, None, None);
        }
    }

    pub(crate) fn usage(&self, usage: CacheUsage) {
        let stats = &self.stats;
        let session = {
            let mut state = self.state.lock();
            if state.0.is_none() {
                state.1 = Some(usage);
                return;
            }
            state.0.clone()
        };
        if let Some(session) = session {
            apply_usage(&self.sessions, stats, &session, usage, None, None, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_call_names_its_base_and_the_flag_that_sets_it() {
        let settings = Settings {
            openai_upstream: "https://user:sk-secret@gateway.example/openai/".into(),
            ..Settings::default()
        };
        let to = destination(&settings, "https://api.anthropic.com/v1/messages?beta=true");
        assert_eq!(to.base, "https://api.anthropic.com");
        assert_eq!(to.set_by.as_deref(), Some(ANTHROPIC));
        // A base with a path and credentials: the base as configured, without the secrets.
        let to = destination(
            &settings,
            "https://user:sk-secret@gateway.example/openai/v1/chat/completions",
        );
        assert_eq!(to.base, "https://gateway.example/openai");
        assert_eq!(to.set_by.as_deref(), Some(OPENAI));
        // One base for two providers: both settings are named.
        let shared = Settings {
            anthropic_upstream: "http://127.0.0.1:9".into(),
            openai_upstream: "http://127.0.0.1:9/".into(),
            ..Settings::default()
        };
        let to = destination(&shared, "http://127.0.0.1:9/v1/messages");
        assert_eq!(
            to.set_by.as_deref(),
            Some(&*format!("{ANTHROPIC}; or {OPENAI}"))
        );
        // Unset, Vertex AI and Bedrock go to the region's endpoint.
        let to = destination(
            &settings,
            "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/x",
        );
        assert_eq!(to.base, "https://us-east5-aiplatform.googleapis.com");
        assert!(to.set_by.unwrap().starts_with(VERTEX));
        let to = destination(
            &settings,
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/invoke",
        );
        assert!(to.set_by.unwrap().starts_with(BEDROCK));
        let to = destination(&settings, "https://elsewhere.example/v1/x?k=s");
        assert_eq!(to, Destination::of("https://elsewhere.example/v1/x?k=s"));
        assert_eq!(to.base, "https://elsewhere.example");
    }

    /// The flags an error names are `sluice serve`'s own, with their variables.
    #[test]
    fn the_named_flags_are_serves() {
        let cli = crate::cli::command();
        let serve = cli.find_subcommand("serve").expect("serve");
        for named in [ANTHROPIC, OPENAI, GEMINI, VERTEX, BEDROCK] {
            let (flag, env) = named.split_once(" or ").unwrap();
            let arg = serve
                .get_arguments()
                .find(|a| a.get_long() == flag.strip_prefix("--"))
                .unwrap_or_else(|| panic!("{flag}"));
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env), "{flag}");
        }
    }
}
