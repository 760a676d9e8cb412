//! A mock model provider for tests and the load harness: hyper on `127.0.0.1:0`, Anthropic
//! Messages (also as Claude on Vertex and on Bedrock, whose stream is AWS's event-stream and
//! whose requests must carry a SigV4 signature when [`Mock::require_sigv4`] says so), OpenAI
//! chat completions, the OpenAI Responses API and Gemini's `generateContent`, with and without
//! SSE. It records every request it gets and answers from a script.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use parking_lot::Mutex;
use serde_json::{Value, json};

type Body = BoxBody<Bytes, std::io::Error>;

/// One scripted answer. With an empty script the mock answers `Reply::Text("ok")`.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A plain text answer.
    Text(String),
    /// Tool calls to `context_guru_expand`, one per stash id, after optional text. An id that
    /// is a JSON object is sent as the call's whole arguments (a partial expand:
    /// `{"id": ..., "lines": "3-5"}`).
    Expand {
        text: Option<String>,
        ids: Vec<String>,
    },
    /// A call to another tool.
    Tool { name: String, arguments: Value },
    /// An error status with this body, as a provider would send it.
    Status(u16, String),
    /// A stream that sends its first event and then resets the connection.
    ResetMidStream,
    /// A text answer streamed in this many chunks with a pause between them.
    Slow { chunks: usize, pause: Duration },
    /// Another reply, after a pause before the response headers (a slow model).
    Delayed(Duration, Box<Reply>),
    /// Exactly these bytes with this status and these headers (garbage a broken or hostile
    /// upstream sends), streamed in pieces of at most `piece` bytes.
    Raw {
        status: u16,
        headers: Vec<(&'static str, &'static str)>,
        body: Bytes,
        piece: usize,
    },
}

/// How the mock encodes its replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// Plain bytes whatever the request accepts.
    #[default]
    Identity,
    /// gzip when the request's `Accept-Encoding` allows it, as the providers' front ends do.
    GzipWhenAccepted,
    /// gzip always: a hop that ignores `Accept-Encoding: identity`.
    GzipAlways,
}

/// What the mock received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// A running mock. Dropping it leaves the task running until the test runtime ends.
#[derive(Clone)]
pub struct Mock {
    pub addr: SocketAddr,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
    encoding: Arc<Mutex<Encoding>>,
    /// Anthropic cache fields (read, written) every non-streamed reply reports; `None` reports
    /// none, like a provider without prompt caching.
    cache_report: Arc<Mutex<Option<(u64, u64)>>>,
    /// Every request gets the curious model (a gateway in between does not pass the header).
    curious: Arc<std::sync::atomic::AtomicBool>,
    /// The provider's prompt cache, simulated, behind every reply's usage fields.
    prompt_cache: Arc<Mutex<PromptCache>>,
    /// The whole usage of every model reply, in order, in the reply's API shape (what a test
    /// sums to check the usage an agent sees).
    billed: Arc<Mutex<Vec<Value>>>,
    /// Bedrock requests must be signed with these credentials for this region.
    sigv4: Arc<Mutex<Option<(aws_credential_types::Credentials, String)>>>,
}

impl std::fmt::Debug for Mock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mock")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Mock {
    /// Starts the mock on an ephemeral loopback port.
    ///
    /// # Panics
    /// When loopback cannot be bound.
    pub async fn start() -> Mock {
        Mock::start_on("127.0.0.1:0".parse().expect("loopback address")).await
    }

    /// Starts the mock on `addr`.
    ///
    /// # Panics
    /// When `addr` cannot be bound.
    pub async fn start_on(addr: SocketAddr) -> Mock {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind the mock address");
        let addr = listener.local_addr().expect("local addr");
        let mock = Mock {
            addr,
            recorded: Arc::default(),
            script: Arc::default(),
            encoding: Arc::default(),
            cache_report: Arc::default(),
            curious: Arc::default(),
            prompt_cache: Arc::default(),
            billed: Arc::default(),
            sigv4: Arc::default(),
        };
        let served = mock.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                // As the providers' front ends do: small SSE writes leave at once.
                let _ = stream.set_nodelay(true);
                let mock = served.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let mock = mock.clone();
                        async move { Ok::<_, Infallible>(mock.answer(request).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        mock
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues answers, used in order.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().extend(replies);
    }

    /// Sets how replies are encoded from now on.
    pub fn set_encoding(&self, encoding: Encoding) {
        *self.encoding.lock() = encoding;
    }

    /// Sets the cache report of every later non-streamed Anthropic reply.
    pub fn set_cache_report(&self, report: Option<(u64, u64)>) {
        *self.cache_report.lock() = report;
    }

    /// Whether replies report prompt caching (on by default). Off, the usage carries no cache
    /// fields, like a provider without prompt caching.
    pub fn set_prompt_caching(&self, on: bool) {
        self.prompt_cache.lock().off = !on;
    }

    /// Bills every request as `sluice replay`'s cost model does (`modes::replay::billed_usage`,
    /// against the request before it): the replay parity test's provider, so the proxy's cost
    /// guard settles on the same numbers replay's does. Turning it on forgets the previous
    /// request (a new session starts).
    pub fn set_billing_like_replay(&self, on: bool) {
        let mut cache = self.prompt_cache.lock();
        cache.like_replay = on;
        cache.previous = None;
    }

    /// Answers every request as the curious model does (see [`curious_reply`]), header or not.
    pub fn set_curious(&self, curious: bool) {
        self.curious
            .store(curious, std::sync::atomic::Ordering::Relaxed);
    }

    /// From now on a Bedrock request (`/model/{id}/invoke...`) must carry a SigV4 signature
    /// these credentials make for `region`, or it is refused with 403 as AWS refuses it.
    pub fn require_sigv4(&self, credentials: aws_credential_types::Credentials, region: &str) {
        *self.sigv4.lock() = Some((credentials, region.to_owned()));
    }

    /// The usage of every model reply so far, in order (whole: a stream's events split it).
    pub fn billed(&self) -> Vec<Value> {
        self.billed.lock().clone()
    }

    /// Forgets what was received (a long test keeps only what it checks).
    pub fn clear_recorded(&self) {
        self.recorded.lock().clear();
    }

    /// Every request received so far.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.recorded.lock().clone()
    }

    /// `GET /mock/requests`: every request received so far, as `[{path, body}]` (the body
    /// parsed when it is JSON, else as text).
    fn recorded_json(&self) -> Value {
        let recorded = self.recorded.lock();
        Value::Array(
            recorded
                .iter()
                .map(|r| {
                    let body = serde_json::from_slice(&r.body)
                        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&r.body).into()));
                    json!({ "path": r.path, "body": body })
                })
                .collect(),
        )
    }

    async fn answer(&self, request: Request<Incoming>) -> Response<Body> {
        let accepts_gzip = request
            .headers()
            .get(http::header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
        let gzip = match *self.encoding.lock() {
            Encoding::Identity => false,
            Encoding::GzipWhenAccepted => accepts_gzip,
            Encoding::GzipAlways => true,
        };
        let response = self.answer_plain(request).await;
        if gzip {
            gzipped(response).await
        } else {
            response
        }
    }

    async fn answer_plain(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path().to_owned();
        if path == "/mock/requests" {
            // For a process driven from outside (the LiteLLM check): what the provider saw.
            return json_response(200, self.recorded_json().to_string());
        }
        let headers = request.headers().clone();
        let path_and_query = request
            .uri()
            .path_and_query()
            .map_or(path.clone(), |p| p.as_str().to_owned());
        let body = request
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let curious = self.curious.load(std::sync::atomic::Ordering::Relaxed)
            || headers.get("x-mock-model").is_some_and(|v| v == "curious");
        self.recorded.lock().push(Recorded {
            path: path.clone(),
            headers: headers.clone(),
            body: body.clone(),
        });
        // Claude on Bedrock: Messages at `/model/{id}/invoke` and `...-with-response-stream`.
        let bedrock = path.starts_with("/model/")
            && (path.ends_with("/invoke") || path.ends_with("/invoke-with-response-stream"));
        if bedrock && let Some((credentials, region)) = self.sigv4.lock().clone() {
            let signed = crate::aws::verify_sigv4(
                &credentials,
                &region,
                ("POST", &path_and_query),
                &headers,
                &body,
            );
            if let Err(why) = signed {
                let message =
                    format!("The request signature we calculated does not match: {why:?}");
                return json_response(403, json!({ "message": message }).to_string());
            }
        }
        // Claude on Vertex AI speaks Messages at `...:rawPredict` and `...:streamRawPredict`.
        let anthropic = path == "/v1/messages" || path.ends_with("RawPredict") || bedrock;
        let responses = path == "/v1/responses";
        let gemini = path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent");
        if !anthropic && !responses && !gemini && path != "/v1/chat/completions" {
            return json_response(
                200,
                json!({ "object": "list", "data": [], "path": path }).to_string(),
            );
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let stream = request["stream"] == true
            || path.ends_with(":streamGenerateContent")
            || path.ends_with("/invoke-with-response-stream");
        let dialect = if anthropic {
            Api::Anthropic
        } else if responses {
            Api::Responses
        } else if gemini {
            Api::Gemini
        } else {
            Api::Chat
        };
        let prompt = self.prompt_cache.lock().bill_body(dialect, &request, &body);
        let mut reply = self
            .script
            .lock()
            .pop_front()
            .unwrap_or_else(|| match curious {
                true => curious_reply(&request),
                false => Reply::Text("ok".into()),
            });
        if let Reply::Delayed(pause, inner) = reply {
            tokio::time::sleep(pause).await;
            reply = *inner;
        }
        if !matches!(
            reply,
            Reply::Status(..) | Reply::Raw { .. } | Reply::ResetMidStream
        ) {
            let whole = prompt.with_output(&reply).json(dialect);
            self.billed.lock().push(whole);
        }
        match reply {
            Reply::Status(code, body) => json_response(code, body),
            Reply::Raw {
                status,
                headers,
                body,
                piece,
            } => {
                let pieces = body
                    .chunks(piece.max(1))
                    .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                    .collect();
                let mut response = Response::new(futures_stream(pieces, Duration::ZERO));
                *response.status_mut() = hyper::StatusCode::from_u16(status)
                    .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
                for (name, value) in headers {
                    response
                        .headers_mut()
                        .insert(name, http::HeaderValue::from_static(value));
                }
                response
            }
            Reply::ResetMidStream => {
                let first = Ok(Frame::data(Bytes::from_static(
                    b"event: ping\ndata: {\"type\":\"ping\"}\n\n",
                )));
                let reset = Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "mock reset",
                ));
                sse_response(futures_stream(
                    vec![first, reset],
                    Duration::from_millis(100),
                ))
            }
            Reply::Slow { chunks, pause } => {
                let text = "x".repeat(chunks);
                let events = if gemini {
                    gemini_events(
                        &Reply::Text(text),
                        prompt.with_output(&Reply::Text(String::new())),
                    )
                } else if responses {
                    responses_events(&Reply::Text(text), chunks)
                } else {
                    text_events(anthropic, &text, chunks)
                };
                sse_response(futures_stream(
                    events
                        .into_iter()
                        .map(|e| Ok(Frame::data(Bytes::from(e))))
                        .collect(),
                    pause,
                ))
            }
            reply if stream && gemini => sse_response(futures_stream(
                gemini_events(&reply, prompt.with_output(&reply))
                    .into_iter()
                    .map(|e| Ok(Frame::data(Bytes::from(e))))
                    .collect(),
                Duration::ZERO,
            )),
            reply if gemini => {
                let mut whole = gemini_whole(&reply);
                whole["usageMetadata"] = prompt.with_output(&reply).json(dialect);
                json_response(200, whole.to_string())
            }
            reply if stream => {
                let events = if responses {
                    responses_events(&reply, 3)
                } else {
                    stream_events(anthropic, &reply)
                };
                let include_usage = request["stream_options"]["include_usage"] == true;
                let events = with_usage(events, dialect, prompt.with_output(&reply), include_usage);
                if bedrock {
                    let frames = crate::aws::event_stream(&events);
                    return event_stream_response(futures_stream(
                        frames.into_iter().map(|f| Ok(Frame::data(f))).collect(),
                        Duration::ZERO,
                    ));
                }
                sse_response(futures_stream(
                    events
                        .into_iter()
                        .map(|e| Ok(Frame::data(Bytes::from(e))))
                        .collect(),
                    Duration::ZERO,
                ))
            }
            reply if responses => {
                let mut whole = responses_whole(&reply);
                whole["usage"] = prompt.with_output(&reply).json(dialect);
                json_response(200, whole.to_string())
            }
            reply => {
                let mut whole = whole_response(anthropic, &reply);
                whole["usage"] = prompt.with_output(&reply).json(dialect);
                if let (true, Some((read, written))) = (anthropic, *self.cache_report.lock()) {
                    whole["usage"]["cache_read_input_tokens"] = json!(read);
                    whole["usage"]["cache_creation_input_tokens"] = json!(written);
                }
                json_response(200, whole.to_string())
            }
        }
    }
}

/// What a model that reads markers does, for a request with `x-mock-model: curious` (a process
/// driven from outside, like the SDK and LiteLLM checks, cannot script replies): while the
/// transcript has a marker and no retrieval result yet, it asks for the first marker's original
/// (through `context_guru_expand` and `<<cg:ID>>`, or through a gateway's `headroom_retrieve`
/// and `hash=H` when the request declares that tool); once it has one, it answers
/// `restored N bytes` with the length of what came back, so a client can see the round trip.
fn curious_reply(request: &Value) -> Reply {
    let gateway = declares_tool(request, "headroom_retrieve");
    let (tool, needle) = if gateway {
        ("headroom_retrieve", "hash=")
    } else {
        ("context_guru_expand", "<<cg:")
    };
    let mut calls = Vec::new();
    let mut results = Vec::new();
    walk(request, &mut |object| {
        let name = object
            .get("name")
            .or_else(|| object.get("function").and_then(|f| f.get("name")));
        let is_call = object.contains_key("arguments")
            || object
                .get("function")
                .is_some_and(|f| f.get("arguments").is_some())
            || object.get("type").is_some_and(|t| t == "tool_use");
        if name.is_some_and(|n| n == tool) && is_call {
            let id = object.get("call_id").or_else(|| object.get("id"));
            calls.extend(id.and_then(Value::as_str).map(str::to_owned));
        }
        for key in ["call_id", "tool_call_id", "tool_use_id"] {
            let content = object.get("output").or_else(|| object.get("content"));
            if let (Some(Value::String(id)), Some(Value::String(content))) =
                (object.get(key), content)
            {
                results.push((id.clone(), content.len()));
            }
        }
    });
    if let Some((_, len)) = results.iter().find(|(id, _)| calls.contains(id)) {
        return Reply::Text(format!("restored {len} bytes"));
    }
    let text = request.to_string();
    let Some(at) = text.find(needle) else {
        return Reply::Text("ok".into());
    };
    let id: String = text[at + needle.len()..]
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    if gateway {
        return Reply::Tool {
            name: tool.into(),
            arguments: json!({ "hash": id }),
        };
    }
    Reply::Expand {
        text: Some("Let me read that. ".into()),
        ids: vec![id],
    }
}

/// Whether the request declares a tool of this name (chat, Responses or Anthropic shape).
fn declares_tool(request: &Value, name: &str) -> bool {
    request["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|t| t["name"] == name || t["function"]["name"] == name)
    })
}

/// Calls `visit` on every object in `value`, depth first.
fn walk(value: &Value, visit: &mut dyn FnMut(&serde_json::Map<String, Value>)) {
    match value {
        Value::Object(object) => {
            visit(object);
            object.values().for_each(|v| walk(v, visit));
        }
        Value::Array(items) => items.iter().for_each(|v| walk(v, visit)),
        _ => {}
    }
}

/// `response` gzipped, sent in three pieces so a decoder sees the stream cut anywhere.
async fn gzipped(response: Response<Body>) -> Response<Body> {
    use std::io::Write as _;
    let (mut parts, body) = response.into_parts();
    let Ok(plain) = body.collect().await.map(|c| c.to_bytes()) else {
        return Response::from_parts(parts, full_body(Bytes::new()));
    };
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let encoded = encoder
        .write_all(&plain)
        .and_then(|()| encoder.finish())
        .expect("gzip into memory");
    parts.headers.insert(
        http::header::CONTENT_ENCODING,
        http::HeaderValue::from_static("gzip"),
    );
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let third = encoded.len() / 3 + 1;
    let pieces = encoded
        .chunks(third)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    Response::from_parts(parts, futures_stream(pieces, Duration::from_millis(5)))
}

fn full_body(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

fn json_response(status: u16, body: String) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
        .headers_mut()
        .insert("x-mock", "1".parse().unwrap());
    response
}

fn sse_response(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    response
}

fn event_stream_response(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        "content-type",
        "application/vnd.amazon.eventstream".parse().unwrap(),
    );
    response
}

fn futures_stream(items: Vec<Result<Frame<Bytes>, std::io::Error>>, pause: Duration) -> Body {
    let stream = futures::stream::unfold(
        (items.into_iter(), pause, true),
        |(mut items, pause, first)| async move {
            if !first && !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            items.next().map(|item| (item, (items, pause, false)))
        },
    );
    BodyExt::boxed(StreamBody::new(stream))
}

fn calls(reply: &Reply) -> Vec<(String, String, Value)> {
    match reply {
        Reply::Expand { ids, .. } => ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let arguments = serde_json::from_str::<Value>(id)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({ "id": id }));
                (
                    format!("call_{i}"),
                    "context_guru_expand".to_owned(),
                    arguments,
                )
            })
            .collect(),
        Reply::Tool { name, arguments } => vec![("call_t".into(), name.clone(), arguments.clone())],
        _ => Vec::new(),
    }
}

fn reply_text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Text(t) => Some(t.clone()),
        Reply::Expand { text, .. } => text.clone(),
        _ => None,
    }
}

fn whole_response(anthropic: bool, reply: &Reply) -> Value {
    let text = reply_text(reply);
    let calls = calls(reply);
    if anthropic {
        let mut content: Vec<Value> = text
            .into_iter()
            .map(|t| json!({ "type": "text", "text": t }))
            .collect();
        content.extend(calls.iter().map(
            |(id, name, args)| json!({ "type": "tool_use", "id": id, "name": name, "input": args }),
        ));
        let stop = if calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        };
        json!({ "id": "msg_mock", "type": "message", "role": "assistant", "model": "mock", "content": content,
                "stop_reason": stop, "usage": { "input_tokens": 10, "output_tokens": 5 } })
    } else {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| json!({ "id": id, "type": "function", "function": { "name": name, "arguments": args.to_string() } }))
            .collect();
        let mut message = json!({ "role": "assistant", "content": text, "refusal": null });
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        json!({ "id": "chatcmpl-mock", "object": "chat.completion", "created": 1, "model": "mock",
                "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
                "usage": { "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15 } })
    }
}

fn anthropic_event(kind: &str, data: &Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

fn openai_chunk(delta: &Value, finish: Option<&str>) -> String {
    let chunk = json!({ "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": "mock",
                        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] });
    format!("data: {chunk}\n\n")
}

/// A text answer split into `pieces` deltas.
fn text_events(anthropic: bool, text: &str, pieces: usize) -> Vec<String> {
    let size = text.len().div_ceil(pieces.max(1)).max(1);
    let parts: Vec<String> = char_chunks(text, size)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut events = Vec::new();
    if anthropic {
        events.push(anthropic_event("message_start", &json!({ "type": "message_start", "message": { "id": "msg_mock", "type": "message", "role": "assistant", "model": "mock", "content": [], "stop_reason": null, "usage": { "input_tokens": 10, "output_tokens": 1 } } })));
        events.push(anthropic_event("content_block_start", &json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } })));
        for part in parts {
            events.push(anthropic_event("content_block_delta", &json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": part } })));
        }
        events.push(anthropic_event(
            "content_block_stop",
            &json!({ "type": "content_block_stop", "index": 0 }),
        ));
        events.push(anthropic_event("message_delta", &json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": 5 } })));
        events.push(anthropic_event(
            "message_stop",
            &json!({ "type": "message_stop" }),
        ));
    } else {
        events.push(openai_chunk(
            &json!({ "role": "assistant", "content": "" }),
            None,
        ));
        for part in parts {
            events.push(openai_chunk(&json!({ "content": part }), None));
        }
        events.push(openai_chunk(&json!({}), Some("stop")));
        events.push("data: [DONE]\n\n".into());
    }
    events
}

fn stream_events(anthropic: bool, reply: &Reply) -> Vec<String> {
    let calls = calls(reply);
    if calls.is_empty() {
        return text_events(anthropic, &reply_text(reply).unwrap_or_default(), 3);
    }
    let text = reply_text(reply);
    let mut events = Vec::new();
    if anthropic {
        events.push(anthropic_event("message_start", &json!({ "type": "message_start", "message": { "id": "msg_mock", "type": "message", "role": "assistant", "model": "mock", "content": [], "stop_reason": null, "usage": { "input_tokens": 10, "output_tokens": 1 } } })));
        let mut index = 0;
        if let Some(text) = &text {
            events.push(anthropic_event("content_block_start", &json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } })));
            events.push(anthropic_event("content_block_delta", &json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": text } })));
            events.push(anthropic_event(
                "content_block_stop",
                &json!({ "type": "content_block_stop", "index": 0 }),
            ));
            index = 1;
        }
        for (i, (id, name, args)) in calls.iter().enumerate() {
            let at = index + i;
            events.push(anthropic_event("content_block_start", &json!({ "type": "content_block_start", "index": at, "content_block": { "type": "tool_use", "id": id, "name": name, "input": {} } })));
            let args = args.to_string();
            let (a, b) = args.split_at(half(&args));
            for piece in [a, b] {
                events.push(anthropic_event("content_block_delta", &json!({ "type": "content_block_delta", "index": at, "delta": { "type": "input_json_delta", "partial_json": piece } })));
            }
            events.push(anthropic_event(
                "content_block_stop",
                &json!({ "type": "content_block_stop", "index": at }),
            ));
        }
        events.push(anthropic_event("message_delta", &json!({ "type": "message_delta", "delta": { "stop_reason": "tool_use" }, "usage": { "output_tokens": 5 } })));
        events.push(anthropic_event(
            "message_stop",
            &json!({ "type": "message_stop" }),
        ));
    } else {
        events.push(openai_chunk(
            &json!({ "role": "assistant", "content": null }),
            None,
        ));
        if let Some(text) = &text {
            events.push(openai_chunk(&json!({ "content": text }), None));
        }
        for (i, (id, name, args)) in calls.iter().enumerate() {
            events.push(openai_chunk(&json!({ "tool_calls": [{ "index": i, "id": id, "type": "function", "function": { "name": name, "arguments": "" } }] }), None));
            events.push(openai_chunk(&json!({ "tool_calls": [{ "index": i, "function": { "arguments": args.to_string() } }] }), None));
        }
        events.push(openai_chunk(&json!({}), Some("tool_calls")));
        events.push("data: [DONE]\n\n".into());
    }
    events
}

/// Numbers each Responses reply: the API gives every response and item its own id, and the SDKs
/// check that item ids do not repeat within a stream.
static RESPONSE_COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The output items of Responses reply `n`: a message when it has text, then one item per call.
fn responses_output(reply: &Reply, n: u64) -> Vec<Value> {
    let mut output: Vec<Value> = reply_text(reply)
        .into_iter()
        .map(|t| json!({ "type": "message", "id": format!("msg_mock_{n}"), "status": "completed", "role": "assistant",
                          "content": [{ "type": "output_text", "text": t, "annotations": [] }] }))
        .collect();
    output.extend(calls(reply).iter().enumerate().map(|(i, (id, name, args))| {
        json!({ "type": "function_call", "id": format!("fc_mock_{n}_{i}"), "call_id": id, "name": name,
                "arguments": args.to_string(), "status": "completed" })
    }));
    output
}

/// A whole Responses `response` object, with the usage fields the API reports.
fn responses_whole(reply: &Reply) -> Value {
    let n = RESPONSE_COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    json!({ "id": format!("resp_mock_{n}"), "object": "response", "created_at": 1, "status": "completed",
            "model": "mock", "output": responses_output(reply, n), "parallel_tool_calls": true,
            "tool_choice": "auto", "tools": [], "error": null, "incomplete_details": null,
            "instructions": null, "metadata": {}, "text": { "format": { "type": "text" } },
            "usage": { "input_tokens": 10, "input_tokens_details": { "cached_tokens": 0 },
                       "output_tokens": 5, "output_tokens_details": { "reasoning_tokens": 0 },
                       "total_tokens": 15 } })
}

/// A Responses stream as the API sends it: `response.created`, one added/delta/done sequence
/// per output item (text in `pieces` deltas, arguments in two), `response.completed` with the
/// whole response; every event typed and sequence numbered.
fn responses_events(reply: &Reply, pieces: usize) -> Vec<String> {
    let whole = responses_whole(reply);
    let mut opening = whole.clone();
    opening["status"] = json!("in_progress");
    opening["output"] = json!([]);
    let mut events = vec![
        json!({ "type": "response.created", "response": opening.clone() }),
        json!({ "type": "response.in_progress", "response": opening }),
    ];
    let items = whole["output"].as_array().cloned().unwrap_or_default();
    for (index, item) in items.into_iter().enumerate() {
        let id = item["id"].clone();
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        if item["type"] == "message" {
            added["content"] = json!([]);
            let text = item["content"][0]["text"].as_str().unwrap_or("").to_owned();
            let part = json!({ "type": "output_text", "text": "", "annotations": [] });
            events.push(json!({ "type": "response.output_item.added", "output_index": index, "item": added }));
            events.push(json!({ "type": "response.content_part.added", "item_id": id, "output_index": index, "content_index": 0, "part": part }));
            let size = text.len().div_ceil(pieces.max(1)).max(1);
            for piece in char_chunks(&text, size) {
                events.push(json!({ "type": "response.output_text.delta", "item_id": id, "output_index": index, "content_index": 0,
                                    "delta": piece, "logprobs": [] }));
            }
            events.push(json!({ "type": "response.output_text.done", "item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": [] }));
            events.push(json!({ "type": "response.content_part.done", "item_id": id, "output_index": index, "content_index": 0, "part": item["content"][0].clone() }));
        } else {
            added["arguments"] = json!("");
            let arguments = item["arguments"].as_str().unwrap_or("").to_owned();
            events.push(json!({ "type": "response.output_item.added", "output_index": index, "item": added }));
            let (a, b) = arguments.split_at(half(&arguments));
            for piece in [a, b] {
                events.push(json!({ "type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": piece }));
            }
            events.push(json!({ "type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "arguments": arguments }));
        }
        events.push(
            json!({ "type": "response.output_item.done", "output_index": index, "item": item }),
        );
    }
    events.push(json!({ "type": "response.completed", "response": whole }));
    events
        .into_iter()
        .enumerate()
        .map(|(sequence, mut event)| {
            event["sequence_number"] = json!(sequence);
            let kind = event["type"].as_str().unwrap_or("").to_owned();
            format!("event: {kind}\ndata: {event}\n\n")
        })
        .collect()
}

/// What the mock signs a Gemini reply's first call with, as Gemini 3 does: a request must bring
/// it back byte-identical.
pub const GEMINI_SIGNATURE: &str = "bW9jay10aG91Z2h0LXNpZ25hdHVyZQ==";

/// The parts of a Gemini reply: its text, then one `functionCall` per call, the first signed.
fn gemini_parts(reply: &Reply) -> Vec<Value> {
    let mut parts: Vec<Value> = reply_text(reply)
        .into_iter()
        .map(|t| json!({ "text": t }))
        .collect();
    for (i, (_, name, args)) in calls(reply).into_iter().enumerate() {
        let mut part = json!({ "functionCall": { "name": name, "args": args } });
        if i == 0 {
            part["thoughtSignature"] = json!(GEMINI_SIGNATURE);
        }
        parts.push(part);
    }
    parts
}

/// A whole `generateContent` response (its `usageMetadata` is laid on by the caller).
fn gemini_whole(reply: &Reply) -> Value {
    json!({ "candidates": [{ "content": { "parts": gemini_parts(reply), "role": "model" },
                             "finishReason": "STOP", "index": 0 }],
            "modelVersion": "mock", "responseId": "mock-response" })
}

/// A `streamGenerateContent?alt=sse` reply as Gemini sends it: each `data:` line a whole
/// response, text a piece per chunk, a call whole in the last chunk beside the last piece of
/// text (Gemini sends them either way), every chunk restating the usage so far (output
/// growing), frames cut by `\r\n\r\n`.
fn gemini_events(reply: &Reply, billed: Billed) -> Vec<String> {
    let text = reply_text(reply).unwrap_or_default();
    let size = text.len().div_ceil(3).max(1);
    let mut chunks: Vec<Vec<Value>> = char_chunks(&text, size)
        .into_iter()
        .map(|piece| vec![json!({ "text": piece })])
        .collect();
    let calls: Vec<Value> = gemini_parts(reply)
        .into_iter()
        .filter(|p| p.get("functionCall").is_some())
        .collect();
    match chunks.last_mut() {
        Some(last) if !calls.is_empty() => last.extend(calls),
        Some(_) => {}
        None => chunks.push(calls),
    }
    let last = chunks.len() - 1;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, parts)| {
            let mut candidate =
                json!({ "content": { "parts": parts, "role": "model" }, "index": 0 });
            let mut usage = billed;
            if i == last {
                candidate["finishReason"] = json!("STOP");
            } else {
                usage.output = i + 1;
            }
            let chunk = json!({ "candidates": [candidate], "usageMetadata": usage.json(Api::Gemini),
                                "modelVersion": "mock", "responseId": "mock-response" });
            format!("data: {chunk}\r\n\r\n")
        })
        .collect()
}

/// The middle of `text` on a character boundary (a split inside a character would panic).
fn half(text: &str) -> usize {
    (text.len() / 2..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len())
}

/// `text` in pieces of about `size` bytes, each cut on a character boundary.
fn char_chunks(text: &str, size: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = size.max(1).min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, tail) = rest.split_at(end);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

/// Which API a request came to, for its usage fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Anthropic,
    Chat,
    Responses,
    Gemini,
}

/// The provider's prompt cache, simulated so replies carry the usage a real provider would
/// report: input counted at about four bytes a token, a cache read for the longest run of
/// leading blocks (tools, system, each message) an earlier prompt shared (Anthropic: up to the
/// request's last `cache_control`, only when it has one, at least 1,024 tokens; OpenAI:
/// automatic from 1,024 tokens, in steps of 128), the rest of the cacheable part written
/// (Anthropic) or billed fresh.
#[derive(Debug, Default)]
struct PromptCache {
    /// Earlier prompts, as the keys of their cacheable blocks.
    prompts: VecDeque<Vec<u64>>,
    /// No prompt caching: no cache fields at all.
    off: bool,
    /// Bill as replay's cost model does (see [`Mock::set_billing_like_replay`]).
    like_replay: bool,
    /// The request before this one, for `like_replay`.
    previous: Option<Bytes>,
}

/// Prompts remembered; the oldest is forgotten first.
const CACHED_PROMPTS: usize = 64;
const MIN_CACHED_TOKENS: usize = 1024;

/// What one request is billed, in tokens.
#[derive(Debug, Clone, Copy, Default)]
struct Billed {
    /// Every input token, cached or not.
    input: usize,
    read: usize,
    written: usize,
    output: usize,
    /// The provider caches prompts (else no cache fields are reported).
    caching: bool,
}

fn token_estimate(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

impl PromptCache {
    /// [`PromptCache::bill`], or replay's cost model when asked for.
    fn bill_body(&mut self, api: Api, request: &Value, body: &Bytes) -> Billed {
        if !self.like_replay {
            return self.bill(api, request);
        }
        let dialect = match api {
            Api::Anthropic => engine::wire::Dialect::Anthropic,
            Api::Chat => engine::wire::Dialect::OpenAi,
            Api::Responses => engine::wire::Dialect::Responses,
            Api::Gemini => engine::wire::Dialect::Gemini,
        };
        let previous = self.previous.replace(body.clone());
        let usage = modes::replay::billed_usage(body, previous.as_deref(), dialect);
        // Anthropic's new part is a write; OpenAI's and Gemini's is fresh input.
        let (read, written, fresh) = usage.map_or((0, 0, 0), |u| {
            (
                u.read as usize,
                u.written.unwrap_or(0) as usize,
                u.fresh as usize,
            )
        });
        Billed {
            input: read + written + fresh,
            read,
            written,
            output: 0,
            caching: true,
        }
    }

    fn bill(&mut self, api: Api, request: &Value) -> Billed {
        let units = prompt_units(api, request);
        let total: usize = units.iter().map(|u| u.tokens).sum();
        if self.off {
            return Billed {
                input: total,
                ..Billed::default()
            };
        }
        // Anthropic caches up to the last block with a breakpoint; OpenAI all of it.
        let cacheable = match api {
            Api::Anthropic => units
                .iter()
                .rposition(|u| u.breakpoint)
                .map_or(0, |i| i + 1),
            // Gemini's implicit cache, like OpenAI's, takes any long enough prefix.
            Api::Chat | Api::Responses | Api::Gemini => units.len(),
        };
        let keys: Vec<u64> = units[..cacheable].iter().map(|u| u.key).collect();
        let shared = self
            .prompts
            .iter()
            .map(|earlier| {
                earlier
                    .iter()
                    .zip(&keys)
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .max()
            .unwrap_or(0);
        let tokens = |n: usize| units[..n].iter().map(|u| u.tokens).sum::<usize>();
        let mut read = tokens(shared);
        if read < MIN_CACHED_TOKENS {
            read = 0;
        }
        if api != Api::Anthropic {
            read -= read % 128;
        }
        let cacheable_tokens = tokens(cacheable);
        let written = match api {
            Api::Anthropic if cacheable_tokens >= MIN_CACHED_TOKENS => cacheable_tokens - read,
            _ => 0,
        };
        if cacheable_tokens >= MIN_CACHED_TOKENS && !self.prompts.contains(&keys) {
            if self.prompts.len() == CACHED_PROMPTS {
                self.prompts.pop_front();
            }
            self.prompts.push_back(keys);
        }
        Billed {
            input: total.max(read + written),
            read,
            written,
            output: 0,
            caching: true,
        }
    }
}

/// One cacheable block of a prompt: the tools, the system prompt, or a message.
struct Unit {
    /// A hash of its content without `cache_control` (moving a breakpoint changes no content).
    key: u64,
    tokens: usize,
    breakpoint: bool,
}

/// The prompt as the provider caches it: tools, system, then the conversation, in blocks.
fn prompt_units(api: Api, request: &Value) -> Vec<Unit> {
    let (system, conversation) = match api {
        Api::Responses => (&request["instructions"], &request["input"]),
        Api::Gemini => (&request["systemInstruction"], &request["contents"]),
        Api::Anthropic | Api::Chat => (&request["system"], &request["messages"]),
    };
    let blocks = [&request["tools"], system]
        .into_iter()
        .chain(conversation.as_array().into_iter().flatten());
    blocks
        .filter(|block| !block.is_null())
        .map(|block| {
            let text = block.to_string();
            let breakpoint = text.contains("\"cache_control\"");
            let key = {
                use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
                let mut plain = block.clone();
                strip_cache_control(&mut plain);
                BuildHasherDefault::<DefaultHasher>::default().hash_one(plain.to_string())
            };
            Unit {
                key,
                tokens: token_estimate(text.len()),
                breakpoint,
            }
        })
        .collect()
}

fn strip_cache_control(value: &mut Value) {
    match value {
        Value::Object(object) => {
            object.remove("cache_control");
            object.values_mut().for_each(strip_cache_control);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_cache_control),
        _ => {}
    }
}

impl Billed {
    fn with_output(mut self, reply: &Reply) -> Billed {
        let text = reply_text(reply).map_or(0, |t| t.len());
        let calls: usize = calls(reply)
            .iter()
            .map(|(_, name, args)| name.len() + args.to_string().len())
            .sum();
        self.output = token_estimate(text + calls).max(1);
        self
    }

    /// The `usage` object in `api`'s shape.
    fn json(&self, api: Api) -> Value {
        if !self.caching {
            return match api {
                Api::Anthropic => {
                    json!({ "input_tokens": self.input, "output_tokens": self.output })
                }
                Api::Chat => json!({ "prompt_tokens": self.input, "completion_tokens": self.output,
                                      "total_tokens": self.input + self.output }),
                Api::Responses => json!({ "input_tokens": self.input, "output_tokens": self.output,
                                           "total_tokens": self.input + self.output }),
                Api::Gemini => {
                    json!({ "promptTokenCount": self.input, "candidatesTokenCount": self.output,
                                        "totalTokenCount": self.input + self.output })
                }
            };
        }
        match api {
            Api::Anthropic => json!({
                "input_tokens": self.input - self.read - self.written,
                "cache_creation_input_tokens": self.written,
                "cache_read_input_tokens": self.read,
                "output_tokens": self.output,
            }),
            Api::Chat => json!({
                "prompt_tokens": self.input,
                "completion_tokens": self.output,
                "total_tokens": self.input + self.output,
                "prompt_tokens_details": { "cached_tokens": self.read, "audio_tokens": 0 },
                "completion_tokens_details": { "reasoning_tokens": 0, "audio_tokens": 0 },
            }),
            Api::Responses => json!({
                "input_tokens": self.input,
                "input_tokens_details": { "cached_tokens": self.read },
                "output_tokens": self.output,
                "output_tokens_details": { "reasoning_tokens": 0 },
                "total_tokens": self.input + self.output,
            }),
            // Gemini leaves the cache count out when it read nothing from the cache.
            Api::Gemini => {
                let mut usage = json!({
                    "promptTokenCount": self.input,
                    "candidatesTokenCount": self.output,
                    "totalTokenCount": self.input + self.output,
                    "promptTokensDetails": [{ "modality": "TEXT", "tokenCount": self.input }],
                });
                if self.read > 0 {
                    usage["cachedContentTokenCount"] = json!(self.read);
                }
                usage
            }
        }
    }
}

/// `events` with the usage a provider streams: Anthropic's `message_start` (input and cache)
/// and `message_delta` (output); the Responses API's response objects; for chat completions a
/// last chunk with `usage` and no choices, only when the request asked for it
/// (`stream_options.include_usage`).
fn with_usage(events: Vec<String>, api: Api, billed: Billed, include_usage: bool) -> Vec<String> {
    let mut out = Vec::with_capacity(events.len() + 1);
    for event in events {
        let Some(at) = event.find("data: {") else {
            if api == Api::Chat && include_usage && event.starts_with("data: [DONE]") {
                let chunk = json!({ "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1,
                                    "model": "mock", "choices": [], "usage": billed.json(api) });
                out.push(format!("data: {chunk}\n\n"));
            }
            out.push(event);
            continue;
        };
        let Ok(mut data) = serde_json::from_str::<Value>(event[at + 6..].trim_end()) else {
            out.push(event);
            continue;
        };
        let usage = billed.json(api);
        match (api, data["type"].as_str()) {
            (Api::Anthropic, Some("message_start")) => {
                let mut start = usage;
                start["output_tokens"] = json!(1);
                data["message"]["usage"] = start;
            }
            (Api::Anthropic, Some("message_delta")) => {
                data["usage"] = json!({ "output_tokens": billed.output });
            }
            (Api::Responses, _) if data["response"].is_object() => {
                data["response"]["usage"] = usage;
            }
            _ => {
                out.push(event);
                continue;
            }
        }
        out.push(format!("{}data: {data}\n\n", &event[..at]));
    }
    out
}
