//! Cheap-model clients and the LLM actor that serves `extract_llm`, `extract` (`strategy: code`)
//! and `summarize`.
//!
//! - [`client`]: endpoints (`model.source: incoming | config`), request bodies for Anthropic and
//!   OpenAI-compatible APIs, response and usage parsing, bounded retries. The HTTP is the host's
//!   ([`client::Transport`]).
//! - [`prompt`]: the extract contract (a deletion-only Starlark `filter(text)`) and the
//!   summarize prompt.
//! - [`service`]: the actor (a tokio task, bounded queue, 4 concurrent jobs), the per-session
//!   result cache, the sandbox run and acceptance check, and [`service::RequestModels`], the
//!   engine's non-blocking view of it.

pub mod client;
pub mod prompt;
pub mod service;

/// The sandbox the filters run in (re-exported so the host can answer its child-process
/// argument without a dependency edge of its own).
pub use sandbox;

pub use client::{
    CheapModelEnv, Endpoint, Incoming, LlmError, Rejection, Transport, TransportError,
};
pub use service::{
    Isolation, LlmCounts, LlmService, RequestModels, ResultStore, ServiceOptions, Waited,
};
