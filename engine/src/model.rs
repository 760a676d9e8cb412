//! The engine's side of the cheap model: what an LLM component asks for and what the host answers.
//!
//! The engine never calls a model: it has no sockets and no runtime. An LLM component asks the
//! host's [`Models`] (the `llm` crate's actor, through the proxy) and gets an answer at once:
//! the result when the host has it, [`Answer::Pending`] when the job is queued or running, or
//! why there is none. A pending answer leaves the component's candidates alone on this run;
//! the proxy waits for the job up to the model's deadline and runs the pipeline again, and a
//! job that finishes later is answered from the host's cache on the next turn. The pipeline
//! freezes whatever the component did with a result, so later turns replay it byte for byte
//! without asking again.

use std::time::Duration;

use serde::Deserialize;

/// Where a component's model comes from (`model.source`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelSource {
    /// The proxied request's own model, upstream and credentials.
    #[default]
    Incoming,
    /// A dedicated cheap model: `CHEAP_MODEL`, `CHEAP_MODEL_BASE_URL`, `CHEAP_MODEL_API_KEY`, or
    /// this block's `model`, `base_url`, `api_key`.
    Config,
}

/// The wire protocol of a configured model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Anthropic,
    Openai,
}

/// A component's `model:` block.
/// Serialized only for the docs' table of defaults, and never with its key.
#[derive(Clone, Deserialize, serde::Serialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Defaults to `incoming`.
    pub source: ModelSource,
    /// With `source: config`: the protocol (defaults from the base URL, else `anthropic`).
    pub provider: Option<Provider>,
    /// With `source: config`: the API base (`https://api.anthropic.com`, `.../v1` for OpenAI).
    pub base_url: Option<String>,
    /// The model id; with `source: incoming`, re-points the incoming client at this model.
    pub model: Option<String>,
    /// With `source: config`: the key. Never logged, never stored, redacted from `Debug`,
    /// never serialized.
    #[serde(skip_serializing)]
    pub api_key: Option<String>,
    /// Defaults to `1000`. How long the request waits for a model result before it goes
    /// without (the result is used on the next turn).
    pub deadline_ms: u64,
    /// Defaults to `30000`. The longest a model call may run before it counts as failed.
    pub timeout_ms: u64,
    /// Defaults to `2048`. The completion's token cap.
    pub max_tokens: u32,
}

impl Default for ModelConfig {
    fn default() -> ModelConfig {
        ModelConfig {
            source: ModelSource::Incoming,
            provider: None,
            base_url: None,
            model: None,
            api_key: None,
            deadline_ms: 1000,
            timeout_ms: 30_000,
            max_tokens: 2048,
        }
    }
}

impl std::fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelConfig")
            .field("source", &self.source)
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("deadline_ms", &self.deadline_ms)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

impl ModelConfig {
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms)
    }
}

/// How long a summary should be (`summary_level`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryLevel {
    Concise,
    #[default]
    Regular,
    HighlyDetailed,
}

/// What a component wants done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Job {
    /// Have the model write a Starlark `filter(text)` for `output`, toward `context`; run it in
    /// the sandbox over the whole output and answer with the filtered text. Unless `rewrite`,
    /// the host only answers with a deletion-only result (the component checks again).
    Extract {
        output: String,
        context: String,
        rewrite: bool,
    },
    /// Summarize `transcript` (already rendered for the model) toward `task`.
    Summarize {
        transcript: String,
        task: String,
        level: SummaryLevel,
    },
}

/// One ask: which session's cache, the job's content key, the model, and the job itself,
/// built only when the host has no answer cached (`job` can copy a large output).
pub struct Ask<'a> {
    pub session: &'a str,
    pub key: u128,
    pub model: &'a ModelConfig,
    pub job: &'a dyn Fn() -> Job,
    /// Whether to start the job when the host has no answer. False for an output the
    /// component may not change on this turn: a finished late result may still be used.
    pub submit: bool,
}

/// The host's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The result text (filtered output, or summary).
    Ready(String),
    /// A result for a job an earlier request started and waited for in vain, delivered for the
    /// first time. The component may apply it inside the cached prefix, once: that is the
    /// "late result is used on the next turn" promise, paid with one cache re-write from that
    /// message. Every later ask of the same key answers [`Answer::Ready`].
    Late(String),
    /// Queued or running; ask again later.
    Pending,
    /// The job ran and failed (the reason is a short slug for the report, never a secret).
    Failed(String),
    /// No model is available for this source (no incoming credentials, no `CHEAP_MODEL`).
    NoModel,
    /// Nothing cached, and the ask said not to submit.
    Unknown,
}

/// The host's model service, as the engine sees it. Must answer without blocking.
pub trait Models: Send + Sync {
    fn ask(&self, ask: Ask<'_>) -> Answer;

    /// Jobs this request has submitted so far, across the pipeline's runs of it (a component's
    /// per-request cap reads this, so a re-run after the wait cannot submit past it).
    fn submitted(&self) -> usize {
        0
    }
}
