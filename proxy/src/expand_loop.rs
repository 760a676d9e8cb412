//! The expand loop: when the forwarded request declared `context_guru_expand`, a reply made only
//! of expand calls is answered from the store and the conversation continues upstream, up to
//! [`MAX_EXPAND_ROUNDS`] times, so the agent never sees a call to a tool it did not declare.
//!
//! Non-streamed replies are read whole; streamed ones stream as they arrive until an expand call
//! starts (see `sse::Relay`). A reply sluice cannot read (an encoding it cannot decode) goes to
//! the agent untouched and is counted (`expand_unread`).
//!
//! The exchange a round appends (the model's call, the originals) is not kept for the session's
//! later turns. Keeping it would spare the model a repeat expand, but every later turn would read
//! it again. Replaying the public corpus both ways, keeping cost more than the repeat rounds it
//! saved (docs/performance.md, "Keeping an expanded original in view").

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use engine::marker;
use engine::tokens;
use engine::wire::Dialect;
use http::{HeaderMap, Method, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use modes::stats::StreamRelay;

use crate::bedrock::{Reframe, Unframe};
use crate::decode::{Decoder, Encoding};
use crate::expand;
use crate::forward::{Outbound, live_report};
use crate::respond::{self as h, Body, BoxError, ProxyError};
use crate::sse;
use crate::state::App;
use crate::upstream::{UpstreamError, strip_hop_by_hop};

/// Expand rounds per request before the response goes to the agent as it is.
pub const MAX_EXPAND_ROUNDS: usize = 3;

/// What the expand loop needs to ask upstream again (a round): where, as whom, for which
/// session and turn. (`engine::wire::Continuation` is another thing: a parse resumed.)
pub(crate) struct ReAsk {
    pub(crate) app: Arc<App>,
    pub(crate) dialect: Dialect,
    pub(crate) uri: String,
    pub(crate) headers: HeaderMap,
    /// How each round is sent (a Bedrock round is signed again: its body changed).
    pub(crate) auth: crate::bedrock::Auth,
    pub(crate) session: String,
    /// Content tokens of the forwarded prompt, which every round sends upstream again.
    pub(crate) prompt_tokens: u64,
    /// The cost guard's turn the first reply's report settles.
    pub(crate) ledger_turn: Option<modes::tracker::LedgerTurn>,
    /// The keep-alive's ticket for the turn (`crate::keepalive`), which the same report arms.
    pub(crate) keepalive: Option<crate::keepalive::Ticket>,
    /// The request's dashboard event, which counts the rounds.
    pub(crate) capture: Option<crate::capture::Capture>,
}

type Sender = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>;

impl ReAsk {
    /// Resolves the calls and builds the next request, or `None` when the response is not an
    /// all-expand turn.
    async fn next_request(&self, forwarded: &[u8], response: &[u8]) -> Option<Vec<u8>> {
        let calls = expand::expand_calls(response, self.dialect)?;
        let mut restored = 0;
        let mut missed = 0;
        let mut wasted = 0;
        let mut results: Vec<(String, String)> = Vec::with_capacity(calls.len());
        for call in &calls {
            let original = match self.app.resolve(&self.session, &call.stash_id).await {
                Some(original) => {
                    restored += 1;
                    // A partial expand is billed by what it returns.
                    let part = engine::way_back::excerpt(&original, &call.ask);
                    wasted += tokens::count(&part) as u64;
                    part
                }
                None => {
                    missed += 1;
                    marker::expired_placeholder(&call.stash_id)
                }
            };
            results.push((call.call_id.clone(), original));
        }
        self.note_round(&calls, wasted).await;
        self.app
            .stats
            .record_expand_round(restored, missed, wasted, self.prompt_tokens);
        if let Some(capture) = &self.capture {
            capture.expand_round(wasted, self.prompt_tokens);
        }
        expand::continuation(forwarded, response, self.dialect, &results)
    }

    /// Tells the session about a round: which markers the model expanded (a second expand of
    /// one makes its tool's outputs lossless for the rest of the session, `modes::retries`),
    /// and what the round cost its cost guard (`modes::guard`).
    async fn note_round(&self, calls: &[expand::ExpandCall], restored_tokens: u64) {
        // Two parts of one original in one round are one need, not a repeat.
        let mut ids: Vec<&str> = calls.iter().map(|c| c.stash_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let round = self
            .app
            .turns()
            .expand_round(&self.session, &ids, self.prompt_tokens, restored_tokens)
            .await;
        self.app.stats.record_retries(round.repeats as u64);
        self.app.stats.record_billed(&round.billed);
        if let Some(capture) = &self.capture {
            capture.billed(&round.billed);
        }
        if let Some(why) = round.backoff {
            self.app.stats.record_cost_guard_backoff(why.label());
        }
    }

    /// Sends the next request of the loop with the agent's own headers.
    async fn resend(&self, body: Bytes) -> Result<Response<Incoming>, UpstreamError> {
        let outbound = Outbound {
            method: Method::POST,
            uri: &self.uri,
            headers: &self.headers,
            body: body.into(),
            auth: &self.auth,
        };
        outbound.send(&self.app).await
    }

    /// Non-streamed: read each response whole, loop while it is all expand calls.
    pub(crate) async fn buffered(
        mut self,
        mut forwarded: Bytes,
        mut response: Response<Incoming>,
    ) -> Response<Body> {
        // Each pass reads one reply; the last round's reply is never resent, so the loop ends
        // by returning a response.
        let mut round = 0;
        // What the rounds the agent never sees cost, added into the usage it reads.
        let mut carried = crate::usage_sum::UsageSum::default();
        loop {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            // Kept to put back when the reply cannot be decoded: the agent then gets the bytes
            // as they came, with the header that says how to read them.
            let content_encoding = parts.headers.get(http::header::CONTENT_ENCODING).cloned();
            let encoding = Encoding::take(&mut parts.headers);
            let bytes = match read_bounded(body).await {
                Ok(bytes) => bytes,
                Err(Unread::Upstream(err)) => return ProxyError::UpstreamBody(err).into_response(),
                Err(Unread::OverBound(head, rest)) => {
                    self.app.stats.record_expand_unread("over_bound");
                    parts.headers.remove(http::header::CONTENT_LENGTH);
                    let decoder = match encoding {
                        Encoding::Decode(decoder) => Some(decoder),
                        _ => None,
                    };
                    return Response::from_parts(parts, relay_rest(head, rest, decoder));
                }
            };
            let bytes = match encoding {
                Encoding::Identity => bytes,
                Encoding::Decode(mut decoder) => match decode_whole(&mut decoder, &bytes) {
                    Ok(decoded) => decoded,
                    Err(why) => {
                        if let Some(value) = content_encoding {
                            parts.headers.insert(http::header::CONTENT_ENCODING, value);
                        }
                        return self.unread(parts, bytes, why);
                    }
                },
                Encoding::Unknown => return self.unread(parts, bytes, "unknown_encoding"),
            };
            if round == 0 {
                // The first reply's cache report describes this turn; later rounds re-send it.
                live_report(
                    &self.app,
                    self.session.clone(),
                    (self.ledger_turn, self.keepalive.take()),
                    self.capture.clone(),
                )
                .scan(&bytes);
            }
            // Out of rounds: this reply goes to the agent as it is, like the streamed path's.
            let next = if parts.status.is_success() && round < MAX_EXPAND_ROUNDS {
                self.next_request(&forwarded, &bytes).await
            } else {
                None
            };
            let Some(next) = next else {
                let bytes = match crate::usage_sum::add_to_reply(&bytes, self.dialect, &carried) {
                    Some(summed) => {
                        parts.headers.remove(http::header::CONTENT_LENGTH);
                        Bytes::from(summed)
                    }
                    None => bytes,
                };
                return Response::from_parts(parts, h::full(bytes));
            };
            if let Some(usage) = crate::usage_sum::of_reply(&bytes, self.dialect) {
                carried.add(&usage);
            }
            forwarded = Bytes::from(next);
            response = match self.resend(forwarded.clone()).await {
                Ok(response) => response,
                Err(err) => return ProxyError::Upstream(err).into_response(),
            };
            round += 1;
        }
    }

    /// A reply the loop cannot read reaches the agent as it came, counted.
    fn unread(
        &self,
        parts: http::response::Parts,
        bytes: Bytes,
        why: &'static str,
    ) -> Response<Body> {
        self.app.stats.record_expand_unread(why);
        Response::from_parts(parts, h::full(bytes))
    }

    /// Streamed: everything streams as it arrives until an expand call starts. From there the
    /// rest of that response is held; when its calls are all expand calls they are answered
    /// from the store and the continuation streams on in the same response, so the client sees
    /// one coherent stream (text the model wrote before the call included). Anything else
    /// releases what was held, verbatim.
    pub(crate) fn stream(self, forwarded: Bytes, first: Response<Incoming>) -> Response<Body> {
        let (mut parts, body) = first.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let decoder = match Encoding::take(&mut parts.headers) {
            Encoding::Identity => None,
            Encoding::Decode(decoder) => Some(decoder),
            Encoding::Unknown => {
                self.app.stats.record_expand_unread("unknown_encoding");
                let body = body.map_err(|e| Box::new(e) as BoxError).boxed();
                return Response::from_parts(parts, body);
            }
        };
        parts.headers.remove(http::header::CONTENT_LENGTH);
        // Bedrock's event stream is read as the SSE it carries and written back framed.
        let framed = crate::bedrock::is_event_stream(&parts.headers);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(32);
        tokio::spawn(self.drive_stream(forwarded, body, decoder, framed, tx));
        let reframe = framed.then(Reframe::default);
        let stream = futures::stream::unfold((rx, reframe), |(mut rx, mut reframe)| async move {
            let item = rx.recv().await?;
            let item = match (item, reframe.as_mut()) {
                (Ok(frame), Some(reframe)) => Ok(frame.map_data(|data| reframe.feed(&data))),
                (item, _) => item,
            };
            Some((item, (rx, reframe)))
        });
        Response::from_parts(parts, BodyExt::boxed(StreamBody::new(stream)))
    }

    async fn drive_stream(
        mut self,
        mut forwarded: Bytes,
        mut body: Incoming,
        mut decoder: Option<Box<Decoder>>,
        framed: bool,
        tx: Sender,
    ) {
        let started = Instant::now();
        let mut relay = sse::Relay::new(self.dialect);
        for round in 0..=MAX_EXPAND_ROUNDS {
            // The first reply's cache report describes this turn; later rounds re-send it.
            let mut report = (round == 0).then(|| {
                live_report(
                    &self.app,
                    self.session.clone(),
                    (self.ledger_turn, self.keepalive.take()),
                    self.capture.clone(),
                )
            });
            let mut scan = |data: &[u8]| {
                if let Some(report) = report.as_mut() {
                    report.scan(data);
                }
            };
            let mut unframe = framed.then(Unframe::default);
            let Some(pending) = self
                .stream_round(
                    &mut body,
                    (decoder.as_deref_mut(), unframe.as_mut()),
                    &mut relay,
                    &tx,
                    (round == 0).then_some(started),
                    &mut scan,
                )
                .await
            else {
                return;
            };
            if !relay.holding() {
                // Bytes after the last blank line (a stream cut short) go out as they are.
                if !pending.is_empty() {
                    let _ = tx.send(Ok(Frame::data(Bytes::from(pending)))).await;
                }
                return;
            }
            self.app.stats.record_stream(StreamRelay::Buffered, None);
            let aggregated = relay.take_turn().to_string();
            let next = if round < MAX_EXPAND_ROUNDS {
                self.next_request(&forwarded, aggregated.as_bytes()).await
            } else {
                None
            };
            let Some(next) = next else {
                // Not all expand calls, or out of rounds: the agent gets the turn as it was,
                // including any bytes after its last complete frame.
                let _ = tx.send(Ok(Frame::data(relay.release_held()))).await;
                let _ = tx.send(Ok(Frame::data(Bytes::from(pending)))).await;
                return;
            };
            forwarded = Bytes::from(next);
            let continued = match self.resend(forwarded.clone()).await {
                Ok(response) if response.status().is_success() => {
                    let (mut parts, next_body) = response.into_parts();
                    match Encoding::take(&mut parts.headers) {
                        Encoding::Identity => Some((next_body, None)),
                        Encoding::Decode(d) => Some((next_body, Some(d))),
                        Encoding::Unknown => {
                            self.app.stats.record_expand_unread("unknown_encoding");
                            None
                        }
                    }
                }
                _ => None,
            };
            let Some((next_body, next_decoder)) = continued else {
                // The continuation failed: the agent gets the held turn rather than nothing.
                let _ = tx.send(Ok(Frame::data(relay.release_held()))).await;
                let _ = tx.send(Ok(Frame::data(Bytes::from(pending)))).await;
                return;
            };
            relay.continue_in_place();
            body = next_body;
            decoder = next_decoder;
        }
    }

    /// Streams one upstream response through the relay until it ends; returns the bytes after
    /// its last complete frame, or `None` when the stream is over for the agent (an error, a
    /// client that went away, a frame or held turn over the bound).
    async fn stream_round(
        &self,
        body: &mut Incoming,
        (mut decoder, mut unframe): (Option<&mut Decoder>, Option<&mut Unframe>),
        relay: &mut sse::Relay,
        tx: &Sender,
        mut first_byte_since: Option<Instant>,
        scan: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Option<Vec<u8>> {
        let mut frames = sse::Frames::default();
        loop {
            let data = match body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
                Some(Err(err)) => {
                    let _ = tx.send(Ok(Frame::data(relay.release_held()))).await;
                    let _ = tx.send(Err(Box::new(err))).await;
                    return None;
                }
                None => break,
            };
            let data = match decoder.as_deref_mut().map(|d| d.feed(&data)) {
                None => data,
                Some(Ok(decoded)) => decoded,
                Some(Err(err)) => {
                    self.cut(unread_reason(&err), relay, tx, Box::new(err))
                        .await;
                    return None;
                }
            };
            let data = match unframe.as_deref_mut().map(|u| u.feed(&data)) {
                None => data,
                Some(Ok(text)) => text,
                // Not an event stream after all: what was held goes out, then the error.
                Some(Err(err)) => {
                    self.cut("bad_framing", relay, tx, Box::new(err)).await;
                    return None;
                }
            };
            scan(&data);
            let complete = frames.push(&data);
            let out = relay.push_frames(complete);
            if frames.over_bound() || relay.held_len() > sse::MAX_HELD_BYTES {
                let _ = tx.send(Ok(Frame::data(out))).await;
                self.give_up(relay, frames.into_rest(), body, (decoder, unframe), tx)
                    .await;
                return None;
            }
            if out.is_empty() {
                continue;
            }
            if let Some(since) = first_byte_since.take() {
                self.app
                    .stats
                    .record_stream(StreamRelay::Streamed, Some(since.elapsed()));
            }
            if tx.send(Ok(Frame::data(out))).await.is_err() {
                return None; // The client went away: nothing left to deliver.
            }
        }
        let tail = match decoder.map(Decoder::finish) {
            None => Bytes::new(),
            Some(Ok(tail)) => tail,
            // A truncated or corrupt end: what was held goes out, then the error.
            Some(Err(err)) => {
                self.cut(unread_reason(&err), relay, tx, Box::new(err))
                    .await;
                return None;
            }
        };
        // An event stream must end on a whole frame: a cut one must not read as a whole reply.
        let tail = match unframe.map(|u| u.feed(&tail).and_then(|text| u.finish().map(|()| text))) {
            None => tail,
            Some(Ok(text)) => text,
            Some(Err(err)) => {
                self.cut("bad_framing", relay, tx, Box::new(err)).await;
                return None;
            }
        };
        let complete = frames.push(&tail);
        let out = relay.push_frames(complete);
        if !out.is_empty() && tx.send(Ok(Frame::data(out))).await.is_err() {
            return None;
        }
        Some(frames.into_rest())
    }

    /// A reply that cannot be read on: counted as `expand_unread{reason}`, what was held goes
    /// out, then the error.
    async fn cut(&self, reason: &'static str, relay: &mut sse::Relay, tx: &Sender, err: BoxError) {
        self.app.stats.record_expand_unread(reason);
        let _ = tx.send(Ok(Frame::data(relay.release_held()))).await;
        let _ = tx.send(Err(err)).await;
    }

    /// Past the bound the loop stops reading: what was held, the unfinished frame and the rest
    /// of the stream go to the agent as they come (decoded when sluice asked for identity and
    /// got a compressed reply). Counted as `expand_unread{reason="over_bound"}`.
    async fn give_up(
        &self,
        relay: &mut sse::Relay,
        rest: Vec<u8>,
        body: &mut Incoming,
        (mut decoder, mut unframe): (Option<&mut Decoder>, Option<&mut Unframe>),
        tx: &Sender,
    ) {
        self.app.stats.record_expand_unread("over_bound");
        let _ = tx.send(Ok(Frame::data(relay.release_held()))).await;
        if tx.send(Ok(Frame::data(Bytes::from(rest)))).await.is_err() {
            return;
        }
        loop {
            let Some(frame) = body.frame().await else {
                // The decoder may still hold the end of the reply; an event stream must end on
                // a whole frame.
                let tail = match decoder.as_deref_mut().map(Decoder::finish) {
                    Some(Ok(tail)) => Ok(tail),
                    Some(Err(err)) => Err(Box::new(err) as BoxError),
                    None => Ok(Bytes::new()),
                };
                let tail = match (tail, unframe.as_deref_mut()) {
                    (Ok(tail), Some(u)) => u
                        .feed(&tail)
                        .and_then(|text| u.finish().map(|()| text))
                        .map_err(|e| Box::new(e) as BoxError),
                    (tail, _) => tail,
                };
                let _ = tx.send(tail.map(Frame::data)).await;
                return;
            };
            let item = match frame.map(Frame::into_data) {
                Ok(Ok(data)) => match decoder.as_deref_mut() {
                    Some(d) => d.feed(&data).map_err(|e| Box::new(e) as BoxError),
                    None => Ok(data),
                },
                Ok(Err(_)) => continue,
                Err(err) => Err(Box::new(err) as BoxError),
            };
            // An event stream stays one: its SSE is framed again on the way out.
            let item = match (item, unframe.as_deref_mut()) {
                (Ok(data), Some(u)) => u.feed(&data).map_err(|e| Box::new(e) as BoxError),
                (item, _) => item,
            }
            .map(Frame::data);
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
        }
    }
}

/// Why a non-streamed reply was not read whole.
enum Unread {
    Upstream(hyper::Error),
    /// Over [`sse::MAX_HELD_BYTES`]: what was read, and the rest of the body.
    OverBound(Bytes, Incoming),
}

/// Reads a reply whole, up to the bound: a reply the expand loop may answer is small, and one
/// that is not must not be buffered without limit.
async fn read_bounded(mut body: Incoming) -> Result<Bytes, Unread> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Unread::Upstream)?;
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
            if out.len() > sse::MAX_HELD_BYTES {
                return Err(Unread::OverBound(Bytes::from(out), body));
            }
        }
    }
    Ok(Bytes::from(out))
}

/// `head` then the rest of `body`, decoded when the reply was compressed (to its very end: the
/// decoder may hold the last bytes until it is finished), as the agent's body.
fn relay_rest(head: Bytes, body: Incoming, decoder: Option<Box<Decoder>>) -> Body {
    struct State {
        head: Option<Bytes>,
        body: Incoming,
        decoder: Option<Box<Decoder>>,
    }
    let decode = |decoder: &mut Option<Box<Decoder>>, data: Bytes| match decoder.as_mut() {
        Some(d) => d.feed(&data).map_err(|e| Box::new(e) as BoxError),
        None => Ok(data),
    };
    let start = State {
        head: Some(head),
        body,
        decoder,
    };
    let stream = futures::stream::unfold(Some(start), move |state| async move {
        let mut state = state?;
        if let Some(head) = state.head.take() {
            let item = decode(&mut state.decoder, head).map(Frame::data);
            return Some((item, Some(state)));
        }
        loop {
            match state.body.frame().await {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let item = decode(&mut state.decoder, data).map(Frame::data);
                    return Some((item, Some(state)));
                }
                Some(Err(err)) => return Some((Err(Box::new(err) as BoxError), None)),
                None => {
                    let tail = state.decoder.as_mut()?.finish();
                    let item = tail.map(Frame::data).map_err(|e| Box::new(e) as BoxError);
                    return Some((item, None));
                }
            }
        }
    });
    BodyExt::boxed(StreamBody::new(stream))
}

/// Decodes a whole reply, a slice at a time, and stops past the bound: a small compressed reply
/// can expand a thousandfold. The error is the `expand_unread` reason.
/// Why a compressed reply could not be read: too big once decoded, or corrupt.
fn unread_reason(error: &std::io::Error) -> &'static str {
    match error.kind() {
        std::io::ErrorKind::FileTooLarge => "over_bound",
        _ => "corrupt_encoding",
    }
}

fn decode_whole(decoder: &mut Decoder, bytes: &[u8]) -> Result<Bytes, &'static str> {
    let mut out = Vec::new();
    for slice in bytes.chunks(64 << 10) {
        out.extend_from_slice(&decoder.feed(slice).map_err(|e| unread_reason(&e))?);
        if out.len() > sse::MAX_HELD_BYTES {
            return Err("over_bound");
        }
    }
    out.extend_from_slice(&decoder.finish().map_err(|_| "corrupt_encoding")?);
    if out.len() > sse::MAX_HELD_BYTES {
        return Err("over_bound");
    }
    Ok(Bytes::from(out))
}
