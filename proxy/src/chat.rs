//! The rewritten routes (Anthropic Messages, OpenAI chat completions and Responses, Gemini,
//! Vertex, Bedrock: [`rewritten_route`]):
//! the turn (`modes::turn`), the upstream call, and the relay back with the provider's cache
//! report handed to the session's tracker, in sync and observe mode alike.
//!
//! Failure rule: sluice never answers 5xx for a problem it caused. A body the turn cannot parse
//! is forwarded untouched; only an upstream that cannot be reached gives 502/504, and an
//! upstream error status passes through verbatim.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use async_trait::async_trait;
use bytes::Bytes;
use engine::model::{Answer, Ask, Models};
use engine::wire::{Dialect, ParsedBody};
use http::header::ACCEPT_ENCODING;
use http::{HeaderMap, HeaderValue, Method, Request, Response};
use hyper::body::Incoming;
use modes::stats::StreamRelay;
use modes::turn::{Turn, TurnInput, TurnModels, TurnModelsSource, TurnService};

use crate::access::Access;
use crate::bedrock::Auth;
use crate::capture::Capture;
use crate::expand_loop::ReAsk;
use crate::forward::{
    FLUSH_WAIT, Meet, Outbound, Report, read_chunks, relay_counted, relay_reporting, upstream_uri,
};
use crate::respond::{Body, ProxyError};
use crate::state::App;
use crate::upstream::Chunks;

/// A rewritten route, whatever its dialect (Anthropic Messages, OpenAI chat completions and
/// Responses, Gemini, Vertex, Bedrock): the body read, the turn run, the result forwarded and
/// relayed or expanded.
pub(crate) async fn rewritten_route(
    app: &Arc<App>,
    dialect: Dialect,
    request: Request<Incoming>,
) -> Response<Body> {
    let mut measured = None;
    let response = route(app, dialect, request, &mut measured).await;
    match measured {
        // An experiment's request: what the agent was billed is read off the reply it gets.
        Some(capture) => crate::forward::delivering(response, capture),
        None => response,
    }
}

/// [`rewritten_route`]'s work; `measured` is the request's capture when an experiment
/// measures it.
async fn route(
    app: &Arc<App>,
    dialect: Dialect,
    request: Request<Incoming>,
    measured: &mut Option<Capture>,
) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let mut chunks = match read_chunks(app, &parts.headers, body).await {
        Ok(chunks) => chunks,
        Err(err) => return err.into_response(),
    };
    app.stats.record_dialect(dialect.as_str());
    let mut access = Access::new(dialect, chunks.len());
    let prepared = Outgoing::prepare(
        app,
        dialect,
        &parts.extensions,
        parts.method,
        parts.headers,
        &parts.uri,
    );
    let Some(out) = prepared.await else {
        return ProxyError::NotFound {
            method: Method::POST,
            path: parts.uri.path().to_owned(),
        }
        .into_response();
    };
    if !out.auth.may_rewrite() {
        return out.relay_signed(app, access, chunks).await;
    }
    // Google's and Bedrock's paths say what other dialects say in the body (the model; whether
    // the reply streams), and Gemini may send its key in the query.
    let routed = path_call(&parts.uri);
    let key_headers = (dialect == Dialect::Gemini)
        .then(|| crate::google::turn_headers(&out.headers, &parts.uri))
        .flatten();
    let turn_headers = key_headers.as_ref().unwrap_or(&out.headers);
    if app.observing().is_some() {
        // Observe: the body goes out exactly as it came; the measurement happens off-path.
        let capture = out.capture.clone();
        let body = chunks.to_bytes();
        let report = observed(app, dialect, turn_headers, &body, capture.clone());
        app.stats.record_passthrough(false);
        return out
            .untouched(chunks)
            .forward(app, access, "observe", report, capture)
            .await;
    }
    let (body, turn) = match app.turns().untouched_by_pipeline() {
        // `--preset off`: nothing can change the body; never one buffer.
        Some(turn) => (Bytes::new(), turn),
        None => {
            let body = chunks.to_bytes();
            chunks = Chunks::from(body.clone()); // let go, not held beside the one buffer
            let turn = out.run_turn(app, dialect, turn_headers, &body).await;
            (body, turn)
        }
    };
    if let Some(session) = turn.session() {
        access.session(session);
    }
    if let Some(capture) = out.capture.as_ref().filter(|c| c.in_experiment()) {
        capture.assign(turn.session(), &body);
        *measured = Some(capture.clone());
    }
    match turn {
        Turn::Forward(mut forward) => {
            if let Some(call) = &routed {
                call.route(&mut forward);
            }
            out.send_turn(app, access, &body, forward).await
        }
        Turn::Untouched {
            reason: modes::turn::Untouched::Control,
            ..
        } => {
            let report = observed(app, dialect, turn_headers, &body, out.capture.clone());
            out.relay_control(app, access, &turn, chunks, report).await
        }
        Turn::Untouched {
            ref session,
            reason,
            ..
        } => {
            turn.record(&app.stats);
            let session = session.clone();
            out.relay_untouched(app, access, chunks, (session, reason))
                .await
        }
    }
}

/// Where and how a rewritten route's request goes upstream.
struct Outgoing {
    dialect: Dialect,
    method: Method,
    uri: String,
    /// The agent's, asking for an identity reply.
    headers: HeaderMap,
    auth: Auth,
    capture: Option<Capture>,
}

impl Outgoing {
    /// `None` when the path names no upstream (a Vertex path with a bad location).
    async fn prepare(
        app: &App,
        dialect: Dialect,
        extensions: &http::Extensions,
        method: Method,
        mut headers: HeaderMap,
        uri: &http::Uri,
    ) -> Option<Outgoing> {
        let bedrock = uri.path().starts_with(crate::bedrock::PREFIX);
        // The route matched, so the path names its upstream (a Vertex path, its location;
        // Bedrock the signing region's).
        let base = if bedrock {
            Cow::Owned(app.bedrock.upstream(uri.path()).await)
        } else {
            app.upstream_of(dialect, uri.path())?
        };
        // sluice reads the reply on these routes (the expand loop, the provider's cache
        // report), so it asks for it uncompressed whatever the agent accepts; see `decode.rs`
        // for an upstream that compresses all the same.
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let auth = if bedrock {
            let signable = crate::bedrock::signable(extensions, &method, uri.path());
            app.bedrock.auth(&headers, signable).await
        } else {
            Auth::AsItCame
        };
        Some(Outgoing {
            dialect,
            method,
            uri: upstream_uri(&base, uri),
            capture: Capture::start(
                app.dashboard(),
                app.book().filter(|b| b.recording()),
                dialect,
                app.mode(),
                &headers,
            ),
            headers,
            auth,
        })
    }

    /// Relays a body the agent signed, which sluice cannot sign again (`crate::bedrock`).
    async fn relay_signed(self, app: &Arc<App>, access: Access, body: Chunks) -> Response<Body> {
        app.stats.record_passthrough(false);
        app.stats.record_untouched("client_signed");
        let capture = self.capture.clone();
        self.untouched(body)
            .forward(app, access, "client_signed", None, capture)
            .await
    }

    /// Relays a turn of an experiment's control arm exactly as it came; `report` is its shadow
    /// run's, measuring it off the request path as observe mode measures.
    async fn relay_control(
        self,
        app: &Arc<App>,
        access: Access,
        turn: &Turn,
        body: Chunks,
        report: Option<Report>,
    ) -> Response<Body> {
        turn.record(&app.stats);
        let capture = self.capture.clone();
        if let Some(capture) = &capture {
            capture.untouched("ab_control", turn.session());
        }
        self.untouched(body)
            .forward(app, access, "ab_control", report, capture)
            .await
    }

    /// The turn of `body`, run with the request's own model access (`model.source: incoming`).
    async fn run_turn(
        &self,
        app: &App,
        dialect: Dialect,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Turn {
        let models = IncomingModels {
            llm: &app.llm,
            dialect,
            headers: &self.headers,
            uri: &self.uri,
        };
        let input = TurnInput {
            dialect,
            body,
            headers,
            models: Some(&models),
            defer_counts: true,
        };
        app.turns().run(input).await
    }

    /// Relays a body the turn left as it came, and why (`Turn::Untouched`).
    async fn relay_untouched(
        self,
        app: &Arc<App>,
        access: Access,
        body: Chunks,
        (session, reason): (Option<String>, modes::turn::Untouched),
    ) -> Response<Body> {
        // A bypassed turn was recorded by the tracker: its cache report belongs there.
        let capture = self.capture.clone();
        if let Some(capture) = &capture {
            capture.untouched(reason.label(), session.as_deref());
        }
        // It settles no cost-guard turn: it ran none. It ends the session's quiet gap.
        if let (Some(keeper), Some(session)) = (app.keeper(), &session) {
            keeper.activity(session);
        }
        let report = session.map(|s| Report::Live(s, None, None));
        self.untouched(body)
            .forward(app, access, reason.label(), report, capture)
            .await
    }

    fn untouched(&self, body: impl Into<Chunks>) -> PassedOn<'_> {
        PassedOn(Outbound {
            method: self.method.clone(),
            uri: &self.uri,
            headers: &self.headers,
            body: body.into(),
            auth: &self.auth,
        })
    }

    /// The session's quiet gap ends with this turn: the keep-alive's keeper stops its pings,
    /// and keeps the request until its report says whether the next gap gets some.
    /// Its ticket, which the turn's report hands back. Only Anthropic's own Messages route is
    /// pinged: a request sluice signs (Bedrock's) cannot be sent again, and Bedrock's and Vertex
    /// AI's streamed methods have no one-shot twin at the same address.
    fn quiet_gap_ends(
        &self,
        app: &App,
        forward: &modes::turn::Forward,
    ) -> Option<crate::keepalive::Ticket> {
        let keeper = app.keeper()?;
        let path = self.uri.split('?').next().unwrap_or_default();
        if !matches!(self.auth, Auth::AsItCame) || !path.ends_with("/v1/messages") {
            keeper.activity(&forward.session);
            return None;
        }
        let (uri, headers) = (&self.uri, &self.headers);
        keeper.turn_sent(&forward.session, self.dialect, uri, headers, &forward.body)
    }

    /// Sends the turn's body and relays the reply, through the expand loop when the turn
    /// declared the way back.
    async fn send_turn(
        self,
        app: &Arc<App>,
        mut access: Access,
        body: &Bytes,
        mut forward: Box<modes::turn::Forward>,
    ) -> Response<Body> {
        let ticket = self.quiet_gap_ends(app, &forward);
        let outbound = Outbound {
            method: self.method,
            uri: &self.uri,
            headers: &self.headers,
            body: forward.body.clone().into(),
            auth: &self.auth,
        };
        let started = std::time::Instant::now();
        let capture = self.capture;
        let sent = {
            let mut sending = std::pin::pin!(outbound.send(app));
            // The request is on its way first; the counts the turn left
            // (`TurnInput::defer_counts`) are taken while the upstream reads it, and everything
            // that reads the report's totals (`/stats`, the access line, the dashboard) comes
            // after. The yield lets the connection's task write the request (a task this one
            // wakes runs on this thread next) before the counting. A request whose client is
            // gone at that yield is still counted (`Unrecorded`), though without an access
            // line, as one gone while its upstream answers; an upstream that answers within
            // the counting has the counting in its time to first byte.
            let first = send_started(sending.as_mut()).await;
            let unrecorded = Unrecorded {
                forward: Some(forward),
                stats: &app.stats,
            };
            tokio::task::yield_now().await;
            forward = unrecorded.record();
            access.turn(&forward.report, forward.added);
            access.bytes_out = forward.body.len();
            access.expandable = forward.expandable;
            if let Some(capture) = &capture {
                capture.turn(&mut forward, body, self.dialect);
            }
            match first {
                Poll::Ready(sent) => sent,
                Poll::Pending => sending.await,
            }
        };
        access.upstream = Some(started.elapsed());
        // What the request adds to the net saving, once the upstream says it completed it (the
        // counts settled above).
        let saving = forward.saving();
        let answered = |status: u16, upstream| {
            if let Some(capture) = &capture {
                capture.answered(status, upstream);
            }
        };
        let response = match sent {
            Ok(response) => response,
            Err(err) => {
                drop(ticket);
                app.stats.record_outcome(&saving, false);
                let response = ProxyError::Upstream(err).into_response();
                answered(response.status().as_u16(), access.upstream);
                return access.attach(response);
            }
        };
        app.stats
            .record_outcome(&saving, completed(response.status()));
        answered(response.status().as_u16(), access.upstream);
        // The turn's writes reach the state store while the upstream thinks; the reply waits
        // for them, so the agent's next turn (on any replica, or after a restart) finds them. A
        // store that does not acknowledge in time is counted there; the reply goes regardless.
        let flushed = std::mem::replace(&mut forward.flushed, modes::turn::Flush::done());
        flushed.wait(FLUSH_WAIT).await;
        if !forward.expandable || !response.status().is_success() {
            if forward.stream {
                app.stats.record_stream(StreamRelay::Streamed, None);
            }
            let report = Report::Live(forward.session, forward.facts.ledger_turn, ticket);
            return access.attach(relay_reporting(app, report, response, capture));
        }
        let call = ReAsk {
            app: app.clone(),
            dialect: self.dialect,
            uri: self.uri,
            headers: self.headers,
            auth: self.auth,
            session: forward.session,
            prompt_tokens: forward.report.tokens_after as u64,
            ledger_turn: forward.facts.ledger_turn,
            keepalive: ticket,
            capture,
        };
        access.attach(if forward.stream {
            call.stream(forward.body, response)
        } else {
            call.buffered(forward.body, response).await
        })
    }
}

/// Whether the upstream completed a request, for the savings figures: a status below 400, the
/// dashboard's line between a request and an error. A provider bills no input for a request it
/// refuses (4xx: a bad body, a credential, a rate limit) or fails (5xx, Anthropic's 529), and
/// the agent sends it again: counting its cuts would count a saving nobody was billed for, and
/// the retry's a second time. A reply that breaks off after its head (a stream reset) was
/// started, and billed: it counts.
fn completed(status: http::StatusCode) -> bool {
    status.as_u16() < 400
}

/// A turn whose request is on its way and whose report is not yet in `/stats`: recorded once,
/// by [`Unrecorded::record`] or, when the handler is dropped first (the client gone), on drop.
struct Unrecorded<'a> {
    forward: Option<Box<modes::turn::Forward>>,
    stats: &'a modes::stats::Stats,
}

impl Unrecorded<'_> {
    /// Takes the turn's deferred counts and records its report; hands the turn back.
    fn record(mut self) -> Box<modes::turn::Forward> {
        self.take_counts();
        self.forward.take().expect("recorded once")
    }

    fn take_counts(&mut self) {
        if let Some(forward) = self.forward.as_mut() {
            forward.count_deferred();
            forward.record(self.stats);
        }
    }
}

impl Drop for Unrecorded<'_> {
    fn drop(&mut self) {
        self.take_counts();
    }
}

/// A request that goes upstream as it came.
struct PassedOn<'a>(Outbound<'a>);

impl PassedOn<'_> {
    /// Sends it and relays the reply, its cache report to `report` (none: no session to give it
    /// to); `why` for the access log.
    async fn forward(
        self,
        app: &Arc<App>,
        mut access: Access,
        why: &'static str,
        report: Option<Report>,
        capture: Option<Capture>,
    ) -> Response<Body> {
        access.untouched = Some(why);
        access.bytes_out = self.0.body.len();
        let sent = self.0.send_timed(app, &mut access).await;
        let response = match (sent, report) {
            (Ok(response), None) => relay_counted(response, capture.clone()),
            (Ok(response), Some(report)) => relay_reporting(app, report, response, capture.clone()),
            (Err(err), _) => ProxyError::Upstream(err).into_response(),
        };
        if let Some(capture) = &capture {
            capture.answered(response.status().as_u16(), access.upstream);
        }
        access.attach(response)
    }
}

/// The send, started: `send` polled once, here, so that the request is handed to its connection
/// before the turn does anything else, and the counting the turn deferred overlaps the upstream
/// reading the request instead of delaying it (measured in docs/performance.md, "Counts after
/// the send": counting was 28 of the request path's 38 points of parse). Whatever the poll
/// returned is the caller's: a reply already there, or the send still pending.
async fn send_started<F: Future>(mut send: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await
}

/// The call a path-addressed provider route makes (Google's, Bedrock's): the model and
/// whether the reply streams, where other dialects put them in the body.
pub(crate) fn path_call(uri: &http::Uri) -> Option<crate::path_call::PathCall<'_>> {
    if let Some((model, stream)) = crate::bedrock::invokes(uri.path()) {
        return Some(crate::path_call::PathCall {
            dialect: Dialect::Anthropic,
            model,
            stream: Some(stream),
        });
    }
    crate::google::generates(uri.path(), uri.query())
}

/// The shadow run of a request forwarded as it came (observe mode's every request, an
/// experiment's control arm), queued; where its reply's cache report goes.
fn observed(
    app: &App,
    dialect: Dialect,
    headers: &HeaderMap,
    body: &Bytes,
    capture: Option<Capture>,
) -> Option<Report> {
    let observer = app.observer()?;
    let meet = observe(observer, dialect, headers, body, capture);
    Some(Report::Observed(meet))
}

/// Queues the shadow run of one request; a full queue drops it (counted), never waits.
fn observe(
    observer: &crate::state::Observer,
    dialect: Dialect,
    headers: &HeaderMap,
    body: &Bytes,
    capture: Option<Capture>,
) -> Arc<Meet> {
    let sessions = observer
        .shadow
        .sessions()
        .expect("the shadow service has session actors")
        .clone();
    let meet = Arc::new(Meet::new(sessions, observer.stats.clone()));
    let key = {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        BuildHasherDefault::<DefaultHasher>::default().hash_one(body.as_ref())
    };
    let shadow: Arc<TurnService> = observer.shadow.clone();
    let (stats, meet_job) = (observer.stats.clone(), meet.clone());
    let (headers, body) = (headers.clone(), body.clone());
    // The job runs on a pool thread, outside the runtime; the turn's lease is async.
    let runtime = tokio::runtime::Handle::current();
    let _ = observer.pool.try_submit(key, move || {
        let input = TurnInput {
            dialect,
            body: &body,
            headers: &headers,
            models: None,
            defer_counts: false,
        };
        let turn = runtime.block_on(shadow.run(input));
        turn.record_projection(&stats);
        if let (Some(capture), Turn::Forward(forward)) = (&capture, &turn) {
            capture.projection(forward);
        }
        if let Some(session) = turn.session() {
            meet_job.session(session);
        }
    });
    meet
}

/// What `model.source: incoming` reuses: the request's protocol, upstream URL, model and the
/// caller's headers that may go upstream (credentials included; they live only as long as this
/// request's jobs and are never logged). Compression is not asked for: the reply is parsed.
struct IncomingModels<'a> {
    llm: &'a llm::LlmService,
    dialect: Dialect,
    headers: &'a HeaderMap,
    uri: &'a str,
}

impl TurnModelsSource for IncomingModels<'_> {
    fn for_turn(&self, parsed: &ParsedBody<'_>) -> Arc<dyn TurnModels> {
        Arc::new(ModelsOfRequest {
            inner: self.llm.for_request(incoming_model(
                self.dialect,
                self.headers,
                parsed,
                self.uri,
            )),
            llm: self.llm.clone(),
        })
    }
}

fn incoming_model(
    dialect: Dialect,
    headers: &HeaderMap,
    parsed: &ParsedBody<'_>,
    upstream_uri: &str,
) -> Option<llm::Incoming> {
    let provider = match dialect {
        Dialect::Anthropic => engine::model::Provider::Anthropic,
        Dialect::OpenAi | Dialect::Responses => engine::model::Provider::Openai,
        // The cheap-model client speaks Messages and chat completions only.
        Dialect::Gemini => return None,
    };
    let model = parsed.field("model")?.of(parsed.text());
    let model: String = serde_json::from_str(model).ok()?;
    let headers = headers
        .iter()
        .filter(|(name, _)| {
            crate::upstream::forwardable(name)
                && !matches!(
                    name.as_str(),
                    "content-length" | "content-type" | "accept-encoding" | "host"
                )
        })
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    Some(llm::Incoming {
        provider,
        url: upstream_uri.to_string(),
        headers,
        model,
    })
}

/// One request's model view, as the turn needs it: the LLM actor's, plus the wait, whose
/// timeouts the actor counts.
struct ModelsOfRequest {
    inner: llm::RequestModels,
    llm: llm::LlmService,
}

impl Models for ModelsOfRequest {
    fn ask(&self, ask: Ask<'_>) -> Answer {
        self.inner.ask(ask)
    }

    fn submitted(&self) -> usize {
        self.inner.submitted()
    }
}

#[async_trait]
impl TurnModels for ModelsOfRequest {
    fn pending(&self) -> usize {
        self.inner.pending()
    }

    async fn wait(&self) -> usize {
        let waited = self.inner.wait().await;
        self.llm.record_timeouts(waited.timed_out as u64);
        waited.finished
    }
}

#[cfg(test)]
mod tests;
