//! `summarize`: the middle of a long transcript becomes one model-written summary (Offload, LLM).
//!
//! The one component that changes the message count, so it works on the body, not on the
//! normalized messages: after every other component and the splice, [`Offload::restructure`]
//! replaces the raw `messages` elements of the middle with one summary message and copies every
//! other byte of the body as it was:
//!
//! ```text
//! before: [system?, task, a1, tool, a2, tool, … 60 messages …, aN-1, tool, aN]
//! after:  [system?, task, "=== History Summary === <summary>…</summary> … <<cg:…>>", aN-1, tool, aN]
//! ```
//!
//! - The head (leading system messages and the first user message: the task) and the last
//!   `keep_last` messages stay byte-identical; the tail never starts on a tool result (its call
//!   would be summarized away), so the cut moves earlier until it does not.
//! - The summary is grounded in the task (the first user message and the latest one) and written
//!   by the host's model; the replaced span is stashed (a JSON array of its raw messages) under a
//!   marker carried in the summary message, so expand gives the full earlier trajectory back.
//! - Checkpointed per session: the summary and the hash of the bytes it covers are kept in the
//!   store and reused verbatim (no call, byte-identical, so the prefix stays cached) while the
//!   covered messages are unchanged and the unsummarized part after them stays under
//!   `resummarize_tokens`. Past that a fresh summary of the longer span is asked for; until it
//!   arrives the old checkpoint keeps serving, so no turn waits on a roll-forward.
//! - Gated by `trigger` (`min_messages`, legacy `start_from_message`; `min_request_tokens`) and a
//!   span floor (`min_tokens`). No model: nothing happens (gate `no_model`), as the spec says.

use crate::gate::{self, Gate};
use serde::Deserialize;
use serde_json::Value;

use super::extract_llm::Trigger;
use super::{BuildError, ComponentFactory, MarkerMode, decode, defaults};
use crate::components::ComponentSource;
use crate::marker::{self, HINT_FULL_TRAJECTORY};
use crate::model::{Answer, Ask, Job, ModelConfig, SummaryLevel};
use crate::pipeline::{ApplyCx, Component, Offload, Restructured, RunCx, Stashed, Transcript};
use crate::tokens;
use crate::wire::{self, Dialect, json};

/// The replay key of a session's checkpoint.
const CHECKPOINT_KEY: &str = "sum:checkpoint";
/// The replay key of a summary asked for and not back yet.
const PENDING_KEY: &str = "sum:pending";

/// A summary job in flight: the span it covers, so later turns poll the same job.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Pending {
    head: usize,
    covered: usize,
    hash: String,
}

/// `components.summarize`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
struct SummarizeConfig {
    /// Defaults to `regular` (`concise`, `regular`, `highly_detailed`).
    summary_level: SummaryLevel,
    /// Defaults to `3`. The newest messages kept as they are.
    keep_last: usize,
    /// Legacy name of `trigger.min_messages`.
    start_from_message: Option<usize>,
    /// Defaults to `500`. A span under this many tokens is not worth a summary.
    min_tokens: usize,
    /// Defaults to `6000`. Unsummarized tokens after the checkpoint before it rolls forward.
    resummarize_tokens: usize,
    /// Defaults to `false`: tool outputs are shown to the model as `<masked_tool_output>`.
    include_tool_calls: bool,
    model: ModelConfig,
    trigger: Trigger,
    marker_mode: MarkerMode,
}

impl Default for SummarizeConfig {
    fn default() -> SummarizeConfig {
        SummarizeConfig {
            summary_level: SummaryLevel::Regular,
            keep_last: 3,
            start_from_message: None,
            min_tokens: 500,
            resummarize_tokens: 6000,
            include_tool_calls: false,
            model: ModelConfig::default(),
            trigger: Trigger::default(),
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "summarize",
    summary: "one model-written summary of the middle, checkpointed (run it alone)",
    gates: &[
        gate::BELOW_MIN_TOKENS,
        gate::BELOW_TRIGGER_MESSAGES,
        gate::BELOW_TRIGGER_TOKENS,
        gate::COST_GUARD,
        gate::DIALECT_UNSUPPORTED,
        gate::MODEL_FAILED,
        gate::MODEL_PENDING,
        gate::NO_MODEL,
        gate::SPAN_TOO_SHORT,
        gate::UNPARSED,
    ],
    defaults: defaults::<SummarizeConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let mut config: SummarizeConfig = decode(source)?;
    if config.trigger.min_messages == 0 {
        config.trigger.min_messages = config.start_from_message.unwrap_or(6);
    }
    Ok(Component::Offload(Box::new(Summarize { config })))
}

struct Summarize {
    config: SummarizeConfig,
}

/// A session's summary and what it covers.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Checkpoint {
    /// Elements `[0, covered)` of the `messages` array are the head plus the summarized span.
    covered: usize,
    /// The first element the summary replaces (the head ends here).
    head: usize,
    /// Hash of the raw bytes of elements `[0, covered)`.
    hash: String,
    /// The summary message's text (marker included).
    text: String,
    /// The stash id of the span.
    id: String,
}

impl Offload for Summarize {
    /// The message-level pass does nothing: summarize works on the body (`restructure`).
    fn offload(&self, _: &mut Transcript<'_, '_>, _: &mut ApplyCx<'_>) -> Stashed {
        Ok(Vec::new())
    }

    fn restructures(&self) -> bool {
        true
    }

    fn restructure(&self, body: &[u8], cx: &RunCx) -> Option<Result<Restructured, Gate>> {
        Some(self.summarize(body, cx))
    }
}

/// What one summary request covers: elements `[head, cover)`, under content key `key`.
struct SummaryRequest {
    head: usize,
    cover: usize,
    /// False when polling a summary an earlier turn asked for.
    submit: bool,
    hash: String,
    key: u128,
}

fn elements_of<'t>(parsed: &wire::ParsedBody<'t>) -> Vec<Element<'t>> {
    let text = parsed.text();
    json::elements(text, parsed.messages_span())
        .map(|span| {
            let raw = span.of(text);
            Element {
                raw,
                start: span.start,
                value: serde_json::from_str(raw).unwrap_or(Value::Null),
            }
        })
        .collect()
}

fn tokens_of(elements: &[Element<'_>]) -> usize {
    elements.iter().map(|e| tokens::count(e.raw)).sum()
}

/// The checkpoint an earlier turn left, if it still covers an unchanged prefix of this span.
fn load_checkpoint(
    cx: &RunCx,
    elements: &[Element<'_>],
    head: usize,
    tail: usize,
) -> Option<Checkpoint> {
    cx.store
        .get_frozen(&cx.session, CHECKPOINT_KEY)
        .and_then(|raw| serde_json::from_str::<Checkpoint>(&raw).ok())
        .filter(|c| {
            c.head == head
                && c.covered <= tail
                && c.covered > head
                && span_hash(&elements[..c.covered]) == c.hash
        })
}

/// A new checkpoint from the model's summary: the replaced span is stashed whole, and the
/// summary message carries its marker.
fn fresh_checkpoint(
    cx: &RunCx,
    elements: &[Element<'_>],
    request: &SummaryRequest,
    summary: &str,
) -> Result<Checkpoint, Gate> {
    let span: Vec<&str> = elements[request.head..request.cover]
        .iter()
        .map(|e| e.raw)
        .collect();
    let original = format!("[{}]", span.join(","));
    let id = marker::stash_id(&original);
    cx.store
        .stash(&cx.session, &id, &original)
        .map_err(|_| gate::STORE_FULL)?;
    let text = format!(
        "=== History Summary ===\n{summary}\nUse this summary as the older context of this conversation; the messages after it continue from there. Do not summarize the conversation again. {}{HINT_FULL_TRAJECTORY}",
        marker::marker(&id)
    );
    Ok(Checkpoint {
        covered: request.cover,
        head: request.head,
        hash: request.hash.clone(),
        text,
        id,
    })
}

/// One raw element of the `messages` array.
struct Element<'t> {
    raw: &'t str,
    start: usize,
    value: Value,
}

impl Element<'_> {
    fn role(&self) -> &str {
        self.value["role"].as_str().unwrap_or("")
    }

    /// A tool result: OpenAI `role: tool`, an Anthropic user message carrying `tool_result`
    /// blocks, or any Responses item that is not a message (an output, or a call whose output
    /// may follow, parallel calls being one item each). The tail may not start on one: what it
    /// answers would be summarized away.
    fn is_tool_result(&self) -> bool {
        let responses_item = self.value["type"]
            .as_str()
            .is_some_and(|kind| kind != "message");
        responses_item
            || self.role() == "tool"
            || self.value["content"]
                .as_array()
                .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"))
    }

    /// The text a model reads, tool outputs masked unless `include_tools`.
    fn render(&self, include_tools: bool) -> String {
        let role = self.role();
        let mut out = String::new();
        match &self.value["content"] {
            Value::String(_) if role == "tool" && !include_tools => {
                out.push_str("<masked_tool_output>");
            }
            Value::String(text) => out.push_str(text),
            Value::Array(blocks) => {
                for block in blocks {
                    match block["type"].as_str() {
                        Some("text" | "input_text" | "output_text") => {
                            out.push_str(block["text"].as_str().unwrap_or(""));
                        }
                        Some("tool_use") => out.push_str(&format!(
                            "[call {}({})]",
                            block["name"].as_str().unwrap_or("?"),
                            block["input"]
                        )),
                        Some("tool_result") if include_tools => out.push_str(&format!(
                            "[result {}]",
                            match &block["content"] {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            }
                        )),
                        Some("tool_result") => out.push_str("<masked_tool_output>"),
                        _ => {}
                    }
                    out.push('\n');
                }
            }
            _ => {}
        }
        // Responses items that are not messages: a call, or an output (masked like the rest).
        match self.value["type"].as_str() {
            Some("function_call" | "custom_tool_call") => out.push_str(&format!(
                "[call {}({})]",
                self.value["name"].as_str().unwrap_or("?"),
                self.value["arguments"]
                    .as_str()
                    .or(self.value["input"].as_str())
                    .unwrap_or("")
            )),
            Some("function_call_output" | "custom_tool_call_output") if include_tools => {
                out.push_str(&format!("[result {}]", self.value["output"]));
            }
            Some("function_call_output" | "custom_tool_call_output") => {
                out.push_str("<masked_tool_output>");
            }
            _ => {}
        }
        for call in self.value["tool_calls"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "[call {}({})]",
                call["function"]["name"].as_str().unwrap_or("?"),
                call["function"]["arguments"].as_str().unwrap_or("")
            ));
        }
        format!("[{role}]\n{}\n", out.trim_end())
    }
}

impl Summarize {
    fn summarize(&self, body: &[u8], cx: &RunCx) -> Result<Restructured, Gate> {
        // Its span finder and renderer read `messages` shapes: on Gemini `contents` it would
        // not see a `functionResponse` as a tool result (a tail could start on one whose call
        // was summarized away, which Gemini refuses) nor render `parts`. Held until it does.
        if cx.dialect == Dialect::Gemini {
            return Err(gate::DIALECT_UNSUPPORTED);
        }
        let parsed = wire::parse(body, cx.dialect).map_err(|_| gate::UNPARSED)?;
        let elements = elements_of(&parsed);
        let (head, tail) = self.span(&elements)?;
        let checkpoint = load_checkpoint(cx, &elements, head, tail);
        let mut use_checkpoint = |c: &Checkpoint| self.build(body, &elements, c, cx);
        let since_checkpoint = checkpoint
            .as_ref()
            .map(|c| tokens_of(&elements[c.covered..tail]));
        let fresh_needed = since_checkpoint.is_none_or(|t| t >= self.config.resummarize_tokens);
        // A session whose cost guard backed off (`modes::guard`, for cache misses or for expand
        // rounds) keeps what it forwarded: the checkpoint it has still serves, byte for byte,
        // and no new one rolls forward, since a new summary re-writes everything after the head.
        let backed_off =
            cx.lossless_tools.contains_key(crate::tools::EVERY_TOOL) || cx.cut_floor.is_some();
        if (!fresh_needed || backed_off)
            && let Some(c) = &checkpoint
        {
            return use_checkpoint(c);
        }
        if backed_off {
            return Err(gate::COST_GUARD);
        }
        if tokens_of(&elements[head..tail]) < self.config.min_tokens {
            return Err(gate::BELOW_MIN_TOKENS);
        }
        let Some(models) = cx.models.as_deref() else {
            return checkpoint
                .as_ref()
                .map_or(Err(gate::NO_MODEL), &mut use_checkpoint);
        };
        let request = self.request(cx, &elements, head, tail);
        match self.ask(models, cx, &elements, &request) {
            Ok(summary) => {
                cx.store.put_frozen(&cx.session, PENDING_KEY, "null");
                let fresh = fresh_checkpoint(cx, &elements, &request, &summary)?;
                let built = self.build(body, &elements, &fresh, cx)?;
                if let Ok(value) = serde_json::to_string(&fresh) {
                    cx.store.put_frozen(&cx.session, CHECKPOINT_KEY, &value);
                }
                Ok(built)
            }
            // Until the new summary arrives the old one serves; without one, nothing happens.
            Err(gate) => checkpoint.as_ref().map_or(Err(gate), &mut use_checkpoint),
        }
    }

    /// The span a summary may replace: after the head (leading system messages and the first
    /// user message, the task) and before the last `keep_last` messages, never starting the
    /// tail on a tool result.
    fn span(&self, elements: &[Element<'_>]) -> Result<(usize, usize), Gate> {
        let n = elements.len();
        if n < self.config.trigger.min_messages {
            return Err(gate::BELOW_TRIGGER_MESSAGES);
        }
        if tokens_of(elements) < self.config.trigger.min_request_tokens {
            return Err(gate::BELOW_TRIGGER_TOKENS);
        }
        let head = elements
            .iter()
            .position(|e| e.role() == "user")
            .map_or(0, |first_user| first_user + 1);
        let mut tail = n.saturating_sub(self.config.keep_last.max(1));
        while tail > head && elements[tail].is_tool_result() {
            tail -= 1;
        }
        if tail <= head + 1 {
            return Err(gate::SPAN_TOO_SHORT);
        }
        Ok((head, tail))
    }

    /// What to ask the model for. A summary asked for on an earlier turn and not back yet is
    /// polled (no new call, no wait) while the messages it covers are unchanged.
    fn request(
        &self,
        cx: &RunCx,
        elements: &[Element<'_>],
        head: usize,
        tail: usize,
    ) -> SummaryRequest {
        let pending = cx
            .store
            .get_frozen(&cx.session, PENDING_KEY)
            .and_then(|raw| serde_json::from_str::<Pending>(&raw).ok())
            .filter(|p| {
                p.head == head
                    && p.covered > head
                    && p.covered <= tail
                    && span_hash(&elements[..p.covered]) == p.hash
            });
        let (cover, submit) = match &pending {
            Some(p) => (p.covered, false),
            None => (tail, true),
        };
        let hash = span_hash(&elements[..cover]);
        let level = self.config.summary_level;
        let key = tokens::content_key(&format!("summarize/v1\u{0}{hash}\u{0}{level:?}"));
        SummaryRequest {
            head,
            cover,
            submit,
            hash,
            key,
        }
    }

    /// Asks the model (or polls it); a summary, or the gate the turn records without one.
    fn ask(
        &self,
        models: &dyn crate::model::Models,
        cx: &RunCx,
        elements: &[Element<'_>],
        request: &SummaryRequest,
    ) -> Result<String, Gate> {
        let (head, n) = (request.head, elements.len());
        let level = self.config.summary_level;
        let include_tools = self.config.include_tool_calls;
        let job = || Job::Summarize {
            transcript: elements[head..request.cover]
                .iter()
                .map(|e| e.render(include_tools))
                .collect(),
            task: format!(
                "{}\n\nLATEST: {}",
                elements[head.saturating_sub(1)].render(false),
                elements[n - 1].render(false)
            ),
            level,
        };
        let answer = models.ask(Ask {
            session: &cx.session,
            key: request.key,
            model: &self.config.model,
            job: &job,
            submit: request.submit,
        });
        match answer {
            Answer::Ready(summary) | Answer::Late(summary) => Ok(summary),
            Answer::Pending => {
                if request.submit {
                    let record = Pending {
                        head,
                        covered: request.cover,
                        hash: request.hash.clone(),
                    };
                    if let Ok(value) = serde_json::to_string(&record) {
                        cx.store.put_frozen(&cx.session, PENDING_KEY, &value);
                    }
                }
                Err(gate::MODEL_PENDING)
            }
            Answer::Failed(_) => {
                cx.store.put_frozen(&cx.session, PENDING_KEY, "null");
                Err(gate::MODEL_FAILED)
            }
            // A poll that found nothing (the host forgot the job): ask afresh next turn.
            Answer::Unknown => {
                cx.store.put_frozen(&cx.session, PENDING_KEY, "null");
                Err(gate::MODEL_PENDING)
            }
            Answer::NoModel => Err(gate::NO_MODEL),
        }
    }

    /// The body with elements `[head, covered)` replaced by the checkpoint's summary message.
    fn build(
        &self,
        body: &[u8],
        elements: &[Element<'_>],
        checkpoint: &Checkpoint,
        cx: &RunCx,
    ) -> Result<Restructured, Gate> {
        let (head, covered) = (checkpoint.head, checkpoint.covered);
        let Some(after) = elements.get(covered) else {
            return Err(gate::SPAN_TOO_SHORT);
        };
        let message = match cx.dialect {
            // A Responses input item may be a bare `{role, content}` message too.
            Dialect::OpenAi | Dialect::Responses => {
                serde_json::json!({ "role": "system", "content": checkpoint.text })
            }
            // Anthropic has no system role in `messages`; consecutive user turns are merged.
            Dialect::Anthropic => serde_json::json!({ "role": "user", "content": checkpoint.text }),
            // Nor has Gemini's `contents`, whose entries hold `parts`.
            Dialect::Gemini => {
                serde_json::json!({ "role": "user", "parts": [{ "text": checkpoint.text }] })
            }
        };
        // A reused checkpoint's span may have left the store: stash it again (its bytes are the
        // ones the checkpoint's hash covers), so the marker always resolves.
        if cx.store.resolve(&cx.session, &checkpoint.id).is_none() {
            let span: Vec<&str> = elements[head..covered].iter().map(|e| e.raw).collect();
            cx.store
                .stash(
                    &cx.session,
                    &checkpoint.id,
                    &format!("[{}]", span.join(",")),
                )
                .map_err(|_| gate::STORE_FULL)?;
        }
        let message = message.to_string();
        let (from, to) = (elements[head].start, after.start);
        let mut out = Vec::with_capacity(body.len());
        out.extend_from_slice(&body[..from]);
        out.extend_from_slice(message.as_bytes());
        out.push(b',');
        out.extend_from_slice(&body[to..]);
        // Both sides counted the same way, on raw message JSON: the span's elements against
        // the one element that replaces them.
        let before: usize = elements[head..covered]
            .iter()
            .map(|e| tokens::count(e.raw))
            .sum();
        let after_tokens = tokens::count(&message);
        if after_tokens >= before {
            return Err(gate::MARKER_NO_WIN);
        }
        Ok(Restructured {
            body: out,
            saved_tokens: before - after_tokens,
            stashed: checkpoint.id.clone(),
        })
    }
}

/// A hash of the raw bytes of `elements`, for the checkpoint.
fn span_hash(elements: &[Element<'_>]) -> String {
    let mut joined = String::new();
    for e in elements {
        joined.push_str(e.raw);
        joined.push('\u{0}');
    }
    format!("{:032x}", tokens::content_key(&joined))
}

#[cfg(test)]
mod tests;
