//! Cheap-model clients: where a model lives, the request body each protocol wants, and reading
//! the completion and its usage back.
//!
//! The HTTP itself is the host's ([`Transport`]): the proxy lends its pooled hyper client, so
//! the model call goes through the same TLS setup and connection pool as the agent's traffic.

use std::time::Duration;

use engine::model::{ModelConfig, ModelSource, Provider};
use serde_json::{Value, json};

/// The host's HTTP client, as the model clients need it.
#[async_trait::async_trait]
pub trait Transport: Send + Sync {
    /// POSTs `body` (JSON) to `url` with `headers` and returns the status and the whole body.
    /// Must give up after `timeout`.
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(u16, Vec<u8>), TransportError>;
}

/// Why the host's transport gave no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The request could not be sent or answered (connect, TLS, a reset), in the host's words.
    #[error("{0}")]
    Send(String),
    /// The reply's body could not be read, or was over the host's bound.
    #[error("could not read the model's response")]
    Body,
    /// No reply within the timeout.
    #[error("timeout")]
    Timeout,
}

/// Why a model job produced no result: the short reason the report shows, never a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The host's transport failed (connect, timeout, an unreadable body); `None` before any try.
    #[error("{}", .0.as_ref().map_or_else(String::new, ToString::to_string))]
    Transport(Option<TransportError>),
    /// The model answered with a status other than 2xx.
    #[error("status {0}")]
    Status(u16),
    /// The body is not a completion of the endpoint's protocol.
    #[error("{0}")]
    BadResponse(&'static str),
    /// The model's reply is empty.
    #[error("empty reply")]
    EmptyReply,
    /// The model's filter failed in the sandbox (after the repair round).
    #[error("sandbox: {0}")]
    Sandbox(sandbox::SandboxError),
    /// The filter ran but its result failed an acceptance check.
    #[error("{0}")]
    Rejected(Rejection),
}

/// Which acceptance check a filter's result failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("empty result")]
    Empty,
    #[error("not deletion-only")]
    NotDeletionOnly,
    #[error("not smaller")]
    NotSmaller,
}

/// A resolved model: protocol, URL, credentials and model id. `Debug` never shows credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub provider: Provider,
    /// The full URL of the messages / chat-completions call.
    pub url: String,
    /// Headers to send (credentials included).
    pub headers: Vec<(String, String)>,
    pub model: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("url", &self.url)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("model", &self.model)
            .finish()
    }
}

/// The cheap model from the environment: `CHEAP_MODEL`, `CHEAP_MODEL_BASE_URL`,
/// `CHEAP_MODEL_API_KEY`, `CHEAP_MODEL_PROVIDER` (`anthropic` | `openai`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CheapModelEnv {
    pub model: Option<String>,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub provider: Option<Provider>,
}

impl std::fmt::Debug for CheapModelEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheapModelEnv")
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("provider", &self.provider)
            .finish()
    }
}

impl CheapModelEnv {
    pub fn from_env() -> CheapModelEnv {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        CheapModelEnv {
            model: var("CHEAP_MODEL"),
            base_url: var("CHEAP_MODEL_BASE_URL").or_else(|| var("CHEAP_MODEL_BASE")),
            api_key: var("CHEAP_MODEL_API_KEY").or_else(|| var("CHEAP_MODEL_KEY")),
            provider: var("CHEAP_MODEL_PROVIDER").and_then(|p| match p.as_str() {
                "anthropic" => Some(Provider::Anthropic),
                "openai" => Some(Provider::Openai),
                _ => None,
            }),
        }
    }
}

/// What the proxied request offers for `model.source: incoming`.
#[derive(Clone)]
pub struct Incoming {
    pub provider: Provider,
    /// The upstream URL the agent's request went to.
    pub url: String,
    /// The caller's headers that may go upstream (credentials included).
    pub headers: Vec<(String, String)>,
    /// The request's own model.
    pub model: String,
}

/// Resolves a component's model block to an endpoint, or `None` when there is no model.
pub fn resolve(
    config: &ModelConfig,
    incoming: Option<&Incoming>,
    env: &CheapModelEnv,
) -> Option<Endpoint> {
    match config.source {
        ModelSource::Incoming => {
            let incoming = incoming?;
            Some(Endpoint {
                provider: incoming.provider,
                url: incoming.url.clone(),
                headers: incoming.headers.clone(),
                model: config
                    .model
                    .clone()
                    .unwrap_or_else(|| incoming.model.clone()),
            })
        }
        ModelSource::Config => {
            let model = config.model.clone().or_else(|| env.model.clone())?;
            let base = config
                .base_url
                .clone()
                .or_else(|| env.base_url.clone())
                .unwrap_or_else(|| "https://api.anthropic.com".into());
            let provider = config.provider.or(env.provider).unwrap_or({
                if base.contains("anthropic") {
                    Provider::Anthropic
                } else if base.contains("openai") || base.trim_end_matches('/').ends_with("/v1") {
                    Provider::Openai
                } else {
                    Provider::Anthropic
                }
            });
            let key = config.api_key.clone().or_else(|| env.api_key.clone());
            let base = base.trim_end_matches('/');
            let (url, headers) = match provider {
                Provider::Anthropic => {
                    let base = base.strip_suffix("/v1").unwrap_or(base);
                    let mut headers = vec![("anthropic-version".into(), "2023-06-01".into())];
                    headers.extend(key.map(|k| ("x-api-key".to_string(), k)));
                    (format!("{base}/v1/messages"), headers)
                }
                Provider::Openai => {
                    let base = if base.ends_with("/v1") {
                        base.to_string()
                    } else {
                        format!("{base}/v1")
                    };
                    let headers = key
                        .map(|k| vec![("authorization".to_string(), format!("Bearer {k}"))])
                        .unwrap_or_default();
                    (format!("{base}/chat/completions"), headers)
                }
            };
            Some(Endpoint {
                provider,
                url,
                headers,
                model,
            })
        }
    }
}

/// A completion and what it cost in tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The request body for one system + user exchange.
pub fn request_body(endpoint: &Endpoint, system: &str, user: &str, max_tokens: u32) -> Vec<u8> {
    let body = match endpoint.provider {
        Provider::Anthropic => json!({
            "model": endpoint.model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        }),
        Provider::Openai => json!({
            "model": endpoint.model,
            "max_tokens": max_tokens,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        }),
    };
    body.to_string().into_bytes()
}

/// Reads a non-streamed response.
///
/// # Errors
/// [`LlmError::BadResponse`] when the body is not a completion of that protocol.
pub fn parse_response(provider: Provider, body: &[u8]) -> Result<Completion, LlmError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| LlmError::BadResponse("response is not JSON"))?;
    let (text, input, output) = match provider {
        Provider::Anthropic => {
            let text: String = value["content"]
                .as_array()
                .ok_or(LlmError::BadResponse("no content in the response"))?
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect();
            (
                text,
                value["usage"]["input_tokens"].as_u64(),
                value["usage"]["output_tokens"].as_u64(),
            )
        }
        Provider::Openai => (
            value["choices"][0]["message"]["content"]
                .as_str()
                .ok_or(LlmError::BadResponse("no choices in the response"))?
                .to_string(),
            value["usage"]["prompt_tokens"].as_u64(),
            value["usage"]["completion_tokens"].as_u64(),
        ),
    };
    Ok(Completion {
        text,
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
    })
}

/// One call with bounded retries: up to `retries` more attempts on a transport error, a 429 or
/// a 5xx, with a short backoff. A 4xx other than 429 fails at once (retrying cannot fix it).
///
/// # Errors
/// A short reason ([`LlmError::Status`], the transport's `timeout`, ...), never a credential.
pub async fn complete(
    transport: &dyn Transport,
    endpoint: &Endpoint,
    system: &str,
    user: &str,
    max_tokens: u32,
    timeout: Duration,
    retries: u32,
) -> Result<Completion, LlmError> {
    let body = request_body(endpoint, system, user, max_tokens);
    let mut headers = endpoint.headers.clone();
    headers.push(("content-type".into(), "application/json".into()));
    let mut last = LlmError::Transport(None);
    for attempt in 0..=retries {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200 << attempt.min(4))).await;
        }
        match transport
            .post(&endpoint.url, &headers, body.clone(), timeout)
            .await
        {
            Ok((200..=299, bytes)) => return parse_response(endpoint.provider, &bytes),
            Ok((status, _)) if status == 429 || status >= 500 => last = LlmError::Status(status),
            Ok((status, _)) => return Err(LlmError::Status(status)),
            Err(e) => last = LlmError::Transport(Some(e)),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_source_resolves_from_the_block_then_the_environment() {
        let env = CheapModelEnv {
            model: Some("claude-haiku-4-5".into()),
            base_url: None,
            api_key: Some("sk-secret".into()),
            provider: None,
        };
        let config = ModelConfig {
            source: ModelSource::Config,
            ..ModelConfig::default()
        };
        let endpoint = resolve(&config, None, &env).unwrap();
        assert_eq!(endpoint.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(endpoint.model, "claude-haiku-4-5");
        assert!(
            endpoint
                .headers
                .contains(&("x-api-key".into(), "sk-secret".into()))
        );
        assert!(
            !format!("{endpoint:?}").contains("sk-secret"),
            "Debug redacts"
        );
        let openai = ModelConfig {
            source: ModelSource::Config,
            base_url: Some("http://127.0.0.1:9/v1".into()),
            model: Some("gpt-4o-mini".into()),
            ..ModelConfig::default()
        };
        let endpoint = resolve(&openai, None, &env).unwrap();
        assert_eq!(endpoint.provider, Provider::Openai);
        assert_eq!(endpoint.url, "http://127.0.0.1:9/v1/chat/completions");
        assert!(
            endpoint
                .headers
                .contains(&("authorization".into(), "Bearer sk-secret".into()))
        );
        assert!(
            resolve(&config, None, &CheapModelEnv::default()).is_none(),
            "no model"
        );
    }

    #[test]
    fn incoming_source_reuses_the_request_and_may_remodel() {
        let incoming = Incoming {
            provider: Provider::Anthropic,
            url: "https://api.anthropic.com/v1/messages".into(),
            headers: vec![("x-api-key".into(), "k".into())],
            model: "claude-sonnet-4-5".into(),
        };
        let config = ModelConfig::default();
        assert_eq!(
            resolve(&config, Some(&incoming), &CheapModelEnv::default())
                .unwrap()
                .model,
            "claude-sonnet-4-5"
        );
        let cheaper = ModelConfig {
            model: Some("claude-haiku-4-5".into()),
            ..ModelConfig::default()
        };
        assert_eq!(
            resolve(&cheaper, Some(&incoming), &CheapModelEnv::default())
                .unwrap()
                .model,
            "claude-haiku-4-5"
        );
        assert!(resolve(&config, None, &CheapModelEnv::default()).is_none());
    }

    #[test]
    fn both_protocols_parse_with_usage() {
        let a = br#"{"content":[{"type":"text","text":"def filter(t):\n    return t"}],"usage":{"input_tokens":120,"output_tokens":9}}"#;
        let c = parse_response(Provider::Anthropic, a).unwrap();
        assert_eq!((c.input_tokens, c.output_tokens), (120, 9));
        let o = br#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#;
        assert_eq!(parse_response(Provider::Openai, o).unwrap().text, "x");
        assert!(parse_response(Provider::Openai, b"{}").is_err());
    }
}
