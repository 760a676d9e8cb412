//! `extract_llm`: a cheap model writes a filter for a large tool output (Offload, sampled).
//!
//! The host's model sees the output (bounded to about 32k characters) and the task, and writes a
//! Starlark `filter(text)`; the host runs it in the sandbox over the whole output and answers
//! with the result. This component accepts it only if it is deletion-only (an in-order
//! subsequence of the output, checked structurally for JSON; `rewrite: true` drops that proof),
//! non-empty and strictly smaller, and then stashes the original behind a marker:
//!
//! ```text
//! FAILED tests/test_api.py::test_timeout - TimeoutError: read timed out
//! E   TimeoutError: read timed out after 30s
//! <<cg:8d2e…>> [full output: call context_guru_expand]
//! ```
//!
//! Anything else falls back to `extract`'s deterministic projection (head and tail lines, lines
//! sharing the task's keywords, error lines), and so does a request with no model, as the spec
//! says. A model call is spent only where it can pay:
//!
//! - on a large output (`min_tokens`, or `trigger.min_output_tokens`) in a large request
//!   (`trigger.min_request_tokens`, `trigger.min_messages`);
//! - on a warm turn, only at `break_even_tokens` or more: on a prompt-caching backend the tail a
//!   filter shrinks is written to the cache once and read cheaply after, so a small output does
//!   not repay the call; on a cold turn the usual floor applies;
//! - never inside the cached prefix, except once for a late result (below).
//!
//! The request never waits on the model for longer than `model.deadline_ms`: an ask that is
//! still running leaves the output alone on this run (`model_pending`), the proxy waits up to
//! the deadline and runs the pipeline again, and a result that arrives later is applied on the
//! next turn ([`Answer::Late`]). What this component did is frozen as sampled: replayed byte for
//! byte on every later turn, never re-asked.

use crate::gate;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::projection::Projector;
use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate, offload_with,
};
use crate::components::ComponentSource;
use crate::contain;
use crate::marker::HINT_FULL_OUTPUT;
use crate::message::Role;
use crate::model::{Answer, Ask, Job, ModelConfig};
use crate::pipeline::{ApplyCx, Component, Offload, Policy, StashKey, Stashed, Transcript};
use crate::tokens;

/// The sandbox's input cap (`sandbox::Limits::DEFAULT.max_input_bytes`; the engine does not
/// depend on the sandbox crate).
const SANDBOX_INPUT_BYTES: usize = 1 << 20;

/// Characters of each context message the model is shown.
const CONTEXT_CHARS: usize = 2000;

/// `components.extract_llm.trigger` (shared with `summarize`): when a model call may happen.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Trigger {
    /// Per output; overrides `min_tokens` when set.
    pub min_output_tokens: Option<usize>,
    /// Defaults to `0`. The whole request's content tokens.
    pub min_request_tokens: usize,
    /// Defaults to `0`. Messages in the request.
    pub min_messages: usize,
}

impl Trigger {
    /// Whether the request as a whole is large enough. Records the gate when not.
    pub(crate) fn request_fires(
        &self,
        messages: &Transcript<'_, '_>,
        cx: &mut ApplyCx<'_>,
    ) -> bool {
        if messages.len() < self.min_messages {
            cx.gate(gate::BELOW_TRIGGER_MESSAGES);
            return false;
        }
        if self.min_request_tokens > 0 {
            let total: usize = (0..messages.len()).map(|i| cx.tokens(i)).sum();
            if total < self.min_request_tokens {
                cx.gate(gate::BELOW_TRIGGER_TOKENS);
                return false;
            }
        }
        true
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Strategy {
    #[default]
    Code,
    /// The reference's chunked strategy; maps to `code`.
    Rlm,
    /// The reference's try-everything strategy; maps to `code`.
    Auto,
    /// The reference's JSON-value strategy; maps to `code`.
    Single,
    /// No model: the projection only.
    Deterministic,
}

/// `components.extract_llm`. The reference's keys all load; the ones this build has no use for
/// are accepted and ignored (named in `docs/components.md`).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
struct ExtractLlmConfig {
    /// Defaults to `300`. Outputs under this many tokens are left alone.
    min_tokens: usize,
    /// On a warm turn, outputs under this many tokens do not repay a call. Defaults to
    /// [`default_break_even`].
    break_even_tokens: Option<usize>,
    /// Defaults to `code`.
    strategy: Strategy,
    /// The cheap model.
    model: ModelConfig,
    trigger: Trigger,
    /// Defaults to `false`. Lets the model's filter reword (no deletion-only proof).
    rewrite: bool,
    /// Defaults to `0` (no cap). Model calls one request may start.
    llm_max_per_request: usize,
    /// Defaults to `0`. The newest this many tool outputs are left byte-identical (sluice's
    /// key, not the reference's: the `agent` preset keeps its newest three outputs whole).
    keep_recent: usize,
    /// Defaults to `5`. Head and tail lines the deterministic fallback keeps.
    head_lines: usize,
    tail_lines: usize,
    marker_mode: MarkerMode,
    #[serde(skip_serializing)]
    per_output: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    fire_on: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    aggressiveness: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    context: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    context_messages: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    max_chars: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    llm_every_n_requests: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    llm_max_per_session: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    allow_on_caching_backend: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    economic_gate: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    skip_file_reads: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    model_max_input_tokens: Option<IgnoredAny>,
    #[serde(skip_serializing)]
    cold_cache: Option<IgnoredAny>,
}

impl Default for ExtractLlmConfig {
    fn default() -> ExtractLlmConfig {
        ExtractLlmConfig {
            min_tokens: 300,
            break_even_tokens: None,
            strategy: Strategy::Code,
            model: ModelConfig::default(),
            trigger: Trigger::default(),
            rewrite: false,
            llm_max_per_request: 0,
            keep_recent: 0,
            head_lines: 5,
            tail_lines: 5,
            marker_mode: MarkerMode::Full,
            per_output: None,
            fire_on: None,
            aggressiveness: None,
            context: None,
            context_messages: None,
            max_chars: None,
            llm_every_n_requests: None,
            llm_max_per_session: None,
            allow_on_caching_backend: None,
            economic_gate: None,
            skip_file_reads: None,
            model_max_input_tokens: None,
            cold_cache: None,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "extract_llm",
    summary: "a cheap model writes a deletion-only filter for a large output (sampled, recoverable)",
    gates: &[
        gate::BELOW_BREAK_EVEN,
        gate::BELOW_OUTPUT_FLOOR,
        gate::BELOW_TRIGGER_MESSAGES,
        gate::BELOW_TRIGGER_TOKENS,
        gate::CACHED_PREFIX,
        gate::LATE_RESULT_APPLIED,
        gate::LLM_MAX_PER_REQUEST,
        gate::MODEL_EMPTY_RESULT,
        gate::MODEL_FAILED,
        gate::MODEL_RESULT_NOT_SMALLER,
        gate::NOT_DELETION_ONLY,
        gate::NO_MODEL,
        gate::NO_OBVIOUS_NOISE,
        gate::TOO_LARGE_FOR_SANDBOX,
        gate::WITHIN_KEEP_RECENT,
    ],
    defaults: defaults::<ExtractLlmConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: ExtractLlmConfig = decode(source)?;
    Ok(Component::Offload(Box::new(ExtractLlm { config })))
}

struct ExtractLlm {
    config: ExtractLlmConfig,
}

impl Offload for ExtractLlm {
    fn policy(&self) -> Policy {
        Policy::SAMPLED
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let floor = self
            .config
            .trigger
            .min_output_tokens
            .unwrap_or(self.config.min_tokens);
        let fires = self.config.trigger.request_fires(messages, cx);
        let mut projector =
            Projector::new(messages, self.config.head_lines, self.config.tail_lines);
        let llm = Llm {
            model: &self.config.model,
            rewrite: self.config.rewrite,
            break_even_tokens: self
                .config
                .break_even_tokens
                .unwrap_or_else(|| default_break_even(&self.config.model)),
        };
        let mut keys = Vec::new();
        let recent = super::recent_outputs(messages, self.config.keep_recent);
        for index in 0..messages.len() {
            if recent.contains(&index) {
                cx.gate(gate::WITHIN_KEEP_RECENT);
                continue;
            }
            if !offload_candidate(&messages[index], index, cx) {
                continue;
            }
            if cx.tokens_below(index, floor) {
                cx.gate(gate::BELOW_OUTPUT_FLOOR);
                continue;
            }
            let capped = self.config.llm_max_per_request > 0
                && cx.models().map_or(0, |m| m.submitted()) >= self.config.llm_max_per_request;
            if fires && !capped && self.config.strategy != Strategy::Deterministic {
                match llm.extract(messages, index, cx) {
                    Outcome::Applied(key) => {
                        keys.push(key);
                        continue;
                    }
                    Outcome::Leave => continue,
                    Outcome::Fallback => {}
                }
            } else if capped {
                cx.gate(gate::LLM_MAX_PER_REQUEST);
            }
            keys.extend(projector.offload(messages, index, cx));
        }
        Ok(keys)
    }
}

/// What an LLM ask came to, for the component that made it.
pub(super) enum Outcome {
    /// The model's result replaced the output.
    Applied(StashKey),
    /// Leave the output as it is on this run (the job is pending, or it may not change here).
    Leave,
    /// Use the deterministic projection instead.
    Fallback,
}

/// One LLM extraction policy: `extract_llm`'s, or `extract`'s with `strategy: code`.
pub(super) struct Llm<'c> {
    pub model: &'c ModelConfig,
    pub rewrite: bool,
    /// On a warm turn, outputs under this many tokens fall back without a call (0: no floor).
    pub break_even_tokens: usize,
}

impl Llm<'_> {
    /// Asks the host for a filtered `messages[index]` and applies it when it passes the checks.
    pub(super) fn extract(
        &self,
        messages: &mut Transcript<'_, '_>,
        index: usize,
        cx: &mut ApplyCx<'_>,
    ) -> Outcome {
        let Some(models) = cx.models() else {
            cx.gate(gate::NO_MODEL);
            return Outcome::Fallback;
        };
        // The sandbox refuses inputs over 1 MiB: a call for one could never pay.
        if messages[index].content.len() > SANDBOX_INPUT_BYTES {
            cx.gate(gate::TOO_LARGE_FOR_SANDBOX);
            return Outcome::Fallback;
        }
        // Borrowed: the job (a copy of the output and the context) is built only when the host
        // has no answer cached, which on most turns it has.
        let transcript: &Transcript<'_, '_> = messages;
        let output: &str = &transcript[index].content;
        let key = job_key(output, self.model, self.rewrite);
        let mutable = cx.may_mutate(index);
        // A cold turn lowers the floor for a cheap model (the prefix is re-written anyway), but
        // never for the agent's own model, whose call costs as much as what it could save.
        let own_model =
            self.model.source == crate::model::ModelSource::Incoming && self.model.model.is_none();
        let warm_and_small =
            (!cx.is_cold() || own_model) && cx.tokens_below(index, self.break_even_tokens);
        let submit = mutable && !warm_and_small;
        let session = cx.session().to_owned();
        let build = || Job::Extract {
            output: output.to_owned(),
            context: task_context(transcript),
            rewrite: self.rewrite,
        };
        let answer = models.ask(Ask {
            session: &session,
            key,
            model: self.model,
            job: &build,
            submit,
        });
        let (text, late) = match answer {
            Answer::Ready(text) => (text, false),
            Answer::Late(text) => (text, true),
            Answer::Pending => {
                cx.model_pending();
                return Outcome::Leave;
            }
            Answer::Failed(_) => {
                cx.gate(gate::MODEL_FAILED);
                return Outcome::Fallback;
            }
            Answer::NoModel => {
                cx.gate(gate::NO_MODEL);
                return Outcome::Fallback;
            }
            Answer::Unknown if warm_and_small && mutable => {
                cx.gate(gate::BELOW_BREAK_EVEN);
                return Outcome::Fallback;
            }
            Answer::Unknown => {
                cx.gate(gate::CACHED_PREFIX);
                return Outcome::Leave;
            }
        };
        if !mutable && !late {
            cx.gate(gate::CACHED_PREFIX);
            return Outcome::Leave;
        }
        if text.trim().is_empty() {
            cx.gate(gate::MODEL_EMPTY_RESULT);
            return Outcome::Fallback;
        }
        if !self.rewrite && !contain::deletion_only(output, &text) {
            cx.gate(gate::NOT_DELETION_ONLY);
            return Outcome::Fallback;
        }
        if tokens::count(&text) >= cx.tokens(index) {
            cx.gate(gate::MODEL_RESULT_NOT_SMALLER);
            return Outcome::Fallback;
        }
        if late {
            cx.allow_late(index);
            cx.gate(gate::LATE_RESULT_APPLIED);
        }
        let joined = if text.ends_with('\n') {
            text
        } else {
            format!("{text}\n")
        };
        match offload_with(messages, index, cx, |_, marker| {
            format!("{joined}{marker}{HINT_FULL_OUTPUT}")
        }) {
            Some(key) => Outcome::Applied(key),
            None => Outcome::Leave,
        }
    }
}

/// The smallest output a warm-turn call repays, from the price of the model that makes it.
///
/// In units of the agent's input price: a call costs about `p × (3,500 + shown)` tokens (a
/// 2,000-token contract, the output shown, up to 8,000 tokens of it counted, and ~300 output
/// tokens at five times the input price), where `p` is the extraction model's price relative to
/// the agent's; it saves about half the output, written once to the cache (1.25) and read on
/// about five later turns (0.1 each): `0.875 × tokens`. A cheap model (`p` ≈ 1/3, a Haiku-class
/// model beside a Sonnet-class agent) breaks even near 2,000 tokens. The agent's own model
/// (`source: incoming` with no `model` override, `p` = 1) breaks even only past about 13,000:
/// the reference spent $17.22 to save $6.96 by calling without this check.
pub(crate) fn default_break_even(model: &ModelConfig) -> usize {
    if model.source == crate::model::ModelSource::Incoming && model.model.is_none() {
        13_000
    } else {
        2_000
    }
}

/// What the model is told the agent is doing: the task (first user message) and the latest
/// user and assistant messages, each bounded.
pub(crate) fn task_context(messages: &Transcript<'_, '_>) -> String {
    let first_user = (0..messages.len()).find(|&i| messages[i].role == Role::User);
    let latest = |role| {
        (0..messages.len())
            .rev()
            .find(|&i| messages[i].role == role)
    };
    let mut context = String::new();
    let mut seen = Vec::new();
    for (label, index) in [
        ("TASK", first_user),
        ("LATEST USER MESSAGE", latest(Role::User)),
        ("LATEST ASSISTANT MESSAGE", latest(Role::Assistant)),
    ] {
        let Some(i) = index else { continue };
        if seen.contains(&i) || messages[i].content.trim().is_empty() {
            continue;
        }
        seen.push(i);
        let content: String = messages[i].content.chars().take(CONTEXT_CHARS).collect();
        context.push_str(&format!("{label}:\n{content}\n\n"));
    }
    context
}

/// The content key of an extraction: the same output, model and policy map to the same cached
/// result. Not the context: it moves every turn (the latest messages), and a result made for
/// an output must be found again on the next turn (a late one, or one whose freeze was lost).
fn job_key(output: &str, model: &ModelConfig, rewrite: bool) -> u128 {
    let fingerprint = format!(
        "extract/v1\u{0}{:?}\u{0}{:?}\u{0}{}\u{0}{rewrite}",
        model.source,
        model.provider,
        model.model.as_deref().unwrap_or("")
    );
    tokens::content_key(output) ^ tokens::content_key(&fingerprint).rotate_left(1)
}

#[cfg(test)]
mod tests;
