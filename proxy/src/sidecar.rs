//! The compression sidecar contract LiteLLM and Portkey already speak (their `headroom`
//! guardrail): `POST /v1/compress` and `GET /v1/retrieve/{hash}`.
//!
//! The gateway sends `{messages, model, ...}` in OpenAI's chat shape and forwards what comes
//! back; when the model calls the gateway's own retrieve tool with a `hash=` it found in the
//! text, the gateway fetches the original here and continues the call itself. So:
//!
//! - a rewrite is a one-off (no tracker: the gateway withholds the newest tool exchange and sends
//!   history, so each call sees a different tail), and what it returns for a message is the
//!   same on every later call: the embedded default's components are deterministic, and a
//!   marker is rendered the same way each time;
//! - every marker reads `<<cg:ID>> (hash=H)`: the gateway's guardrail extracts 24 hex digits
//!   after `hash=`, so `H` is the 16-digit stash id with 8 check digits (the start of the
//!   SHA-256 of the id), and `GET /v1/retrieve/H` checks them and answers the original (a
//!   16-digit id works too, as in `GET /expand`); hints name the gateway's tool, not ours;
//! - `x-headroom-bypass: true` returns the messages as they came.
//!
//! Both routes are operator routes: loopback, `--trusted` networks, and the admin bearer token
//! when one is set (the gateway's optional `api_key`).

use bytes::Bytes;
use engine::marker;
use engine::wire::Dialect;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use modes::turn::{Turn, TurnInput};
use serde_json::{Value, json};

use crate::forward::read_body;
use crate::respond::{self as h, Body, ProxyError};
use crate::state::App;

/// The bypass header of the gateways' guardrail.
pub const BYPASS_HEADER: &str = "x-headroom-bypass";

/// The gateway's hash for a stash id: the id and 8 check digits, 24 hex digits in all.
fn gateway_hash(id: &str) -> String {
    format!("{id}{}", &marker::stash_id(id)[..8])
}

/// The stash id behind a gateway hash (24 digits, check digits verified) or a plain id.
fn stash_id_of(hash: &str) -> Option<&str> {
    match hash.len() {
        24 => {
            let (id, check) = hash.split_at(16);
            (gateway_hash(id)[16..] == *check).then_some(id)
        }
        16 => Some(hash),
        _ => None,
    }
}

/// `<<cg:ID>>` as the sidecar writes it: the gateway's retrieve tool matches `hash=`, and the
/// hints name the gateway's tool.
fn render_markers(text: &str) -> String {
    let text = text.replace(
        &format!("call {}", marker::EXPAND_TOOL_NAME),
        "call headroom_retrieve",
    );
    let text = text.as_str();
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text;
    while let Some(at) = rest.find(marker::MARKER_PREFIX) {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let Some(end) = from.find(">>") else {
            out.push_str(from);
            return out;
        };
        let whole = &from[..end + 2];
        out.push_str(whole);
        if let Some(id) = marker::marker_ids(whole).next() {
            out.push_str(&format!(" (hash={})", gateway_hash(id)));
        }
        rest = &from[end + 2..];
    }
    out.push_str(rest);
    out
}

/// `POST /v1/compress`.
pub(crate) async fn compress_route(app: &App, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match read_body(app, &parts.headers, body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    let Ok(mut request) = serde_json::from_slice::<Value>(&body) else {
        return ProxyError::BadRequest("the body must be a JSON object").into_response();
    };
    let Some(messages) = request.get("messages").filter(|m| m.is_array()).cloned() else {
        return ProxyError::BadRequest("`messages` must be an array").into_response();
    };
    let bypass = parts
        .headers
        .get(BYPASS_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
    if bypass {
        return answer(&messages, 0, 0, &[], &[]);
    }
    // Only what a chat request needs: the gateway's other fields (metadata, its own options)
    // are not ours to keep.
    let chat = json!({ "model": request["model"].take(), "messages": messages });
    let chat = Bytes::from(serde_json::to_vec(&chat).unwrap_or_default());
    let input = TurnInput {
        dialect: Dialect::OpenAi,
        body: &chat,
        headers: &parts.headers,
        models: None,
        defer_counts: false,
    };
    let turn = app.turns().compact(&input, None).await;
    let Turn::Forward(forward) = turn else {
        return answer(&messages, 0, 0, &[], &[]);
    };
    let forward = *forward;
    forward.flushed.wait(crate::forward::FLUSH_WAIT).await;
    let rewritten = serde_json::from_slice::<Value>(&forward.body)
        .ok()
        .and_then(|v| v.get("messages").cloned())
        .unwrap_or(messages);
    let rendered: Value =
        serde_json::from_str(&render_markers(&rewritten.to_string())).unwrap_or(rewritten);
    let acted: Vec<&str> = forward
        .report
        .components
        .iter()
        .filter(|c| c.acted)
        .map(|c| c.name)
        .collect();
    let hashes: Vec<String> = forward
        .report
        .components
        .iter()
        .flat_map(|c| c.stashed.iter().map(|id| gateway_hash(id)))
        .collect();
    answer(
        &rendered,
        forward.report.tokens_before,
        forward.report.tokens_after,
        &acted,
        &hashes,
    )
}

/// The contract's answer. Token counts of 0 mean "not counted" (a bypass): the ratio is then 1.
fn answer(
    messages: &Value,
    before: usize,
    after: usize,
    acted: &[&str],
    hashes: &[String],
) -> Response<Body> {
    let ratio = if before == 0 {
        1.0
    } else {
        after as f64 / before as f64
    };
    let body = json!({
        "messages": messages,
        "tokens_before": before,
        "tokens_after": after,
        "compression_ratio": ratio,
        "transforms_applied": acted,
        "ccr_hashes": hashes,
    });
    h::json(StatusCode::OK, body.to_string())
}

/// `GET /v1/retrieve/{hash}`: the original behind a marker, in any session (the gateway knows
/// no session; who may ask was checked with the operator routes).
pub(crate) async fn retrieve_route(app: &App, hash: &str) -> Response<Body> {
    let found = match stash_id_of(hash) {
        Some(id) => app.resolve_any(id).await,
        None => None,
    };
    match found {
        Some(original) => h::json(
            StatusCode::OK,
            json!({ "original_content": &*original }).to_string(),
        ),
        None => ProxyError::NotFound {
            method: http::Method::GET,
            path: format!("/v1/retrieve/{hash} (expired or unknown)"),
        }
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_carry_the_hash_the_gateway_matches() {
        let (a, b) = (
            gateway_hash("0123456789abcdef"),
            gateway_hash("fedcba9876543210"),
        );
        assert_eq!(a.len(), 24);
        let text = "kept <<cg:0123456789abcdef>> [full output: call context_guru_expand] tail, \
                    <<cg:fedcba9876543210>> and <<cg:open";
        assert_eq!(
            render_markers(text),
            format!(
                "kept <<cg:0123456789abcdef>> (hash={a}) [full output: call headroom_retrieve] \
                 tail, <<cg:fedcba9876543210>> (hash={b}) and <<cg:open"
            )
        );
        // The guardrail's own pattern finds it.
        let pattern = regex::Regex::new("hash=([a-f0-9]{24})").unwrap();
        assert_eq!(&pattern.captures(&render_markers(text)).unwrap()[1], a);
        assert_eq!(stash_id_of(&a), Some("0123456789abcdef"));
        assert_eq!(
            stash_id_of("0123456789abcdef00000000"),
            None,
            "check digits checked"
        );
        assert_eq!(stash_id_of("0123456789abcdef"), Some("0123456789abcdef"));
        assert_eq!(render_markers("no marker"), "no marker");
    }
}
