//! `failed_call` (triage): stubs the arguments of stale failed calls and trims their error text
//! (Offload, frozen, atomic per call pair).
//!
//! A call whose output the provider marked `is_error` (Anthropic `tool_result`), more than
//! `turns` assistant steps old, outside the reserve and not exempt, changes as one pair:
//! ```text
//! call arguments: {"failed_call":"arguments stashed <<cg:…>>"}
//! output:         <first 400 characters of the error> … <<cg:…>> [full output: call context_guru_expand]
//! ```
//! Both change or neither: the pair is adopted only when it is strictly smaller as a whole and
//! both originals were stashed. OpenAI tool messages carry no error flag, so it is inert there.

use serde::Deserialize;

use super::triage::{Budget, Exempt, Reserve, Rules, call_pairs, head_chars, steps_after};
use super::{BuildError, ComponentFactory, MarkerMode, decode};
use crate::components::ComponentSource;
use crate::marker::{self, HINT_FULL_OUTPUT};
use crate::pipeline::{
    ApplyCx, Component, ComponentError, Offload, Policy, StashKey, Transcript, message_tokens,
};

/// `components.failed_call`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FailedCallConfig {
    /// Defaults to `4`. Failed calls more than this many assistant steps old are handled.
    pub turns: usize,
    /// Defaults to `400`. Characters of the error text kept.
    pub error_keep_chars: usize,
    pub reserve: Reserve,
    pub exempt: Exempt,
    /// Defaults to none (act on every request). See `triage`.
    pub budget: Option<Budget>,
    /// Defaults to `true`.
    pub cold_cache: bool,
    pub marker_mode: MarkerMode,
}

impl Default for FailedCallConfig {
    fn default() -> FailedCallConfig {
        FailedCallConfig {
            turns: 4,
            error_keep_chars: 400,
            reserve: Reserve::default(),
            exempt: Exempt::default(),
            budget: None,
            cold_cache: true,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "failed_call",
    summary: "triage: stubs stale failed calls' arguments and trims their errors (frozen, atomic)",
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let c: FailedCallConfig = decode(source)?;
    let rules = Rules::new(c.reserve.clone(), c.exempt.clone(), c.budget.clone())?;
    Ok(Component::Offload(Box::new(FailedCall {
        config: c,
        rules,
    })))
}

struct FailedCall {
    config: FailedCallConfig,
    rules: Rules,
}

impl Offload for FailedCall {
    fn policy(&self) -> Policy {
        Policy::rederivable(self.config.cold_cache).whole_messages()
    }

    fn offload(
        &self,
        messages: &mut Transcript<'_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<Vec<StashKey>, ComponentError> {
        if self.rules.quiet(cx, messages) {
            return Ok(Vec::new());
        }
        let reserve = self.rules.reserve_start(messages);
        let mut keys = Vec::new();
        for pair in call_pairs(messages) {
            let (call_message, output) = (&messages[pair.call_message], &messages[pair.output]);
            let args = &call_message.tool_calls[pair.call].arguments;
            if !output.is_error {
                continue;
            }
            if pair.output >= reserve {
                cx.gate("in_reserve");
                continue;
            }
            if steps_after(messages, pair.call_message) <= self.config.turns {
                cx.gate("recent");
                continue;
            }
            if self.rules.exempt(output) {
                cx.gate("exempt");
                continue;
            }
            if !output.rewritable
                || marker::contains_marker(&output.content)
                || marker::contains_marker(args)
            {
                cx.gate("marker_or_not_rewritable");
                continue;
            }
            if !cx.may_mutate(pair.call_message) || !cx.may_mutate(pair.output) {
                cx.gate("cached_prefix");
                continue;
            }
            // Build both halves, then adopt them together or not at all.
            let (args, error) = (args.clone(), output.content.clone());
            let args_id = marker::stash_id(&args);
            let stub = serde_json::json!({
                "failed_call": format!("arguments stashed {}", marker::marker(&args_id))
            })
            .to_string();
            let trimmed = head_chars(&error, self.config.error_keep_chars);
            let new_error = (trimmed.len() < error.len()).then(|| {
                format!(
                    "{trimmed} … {}{HINT_FULL_OUTPUT}",
                    marker::marker(&marker::stash_id(&error))
                )
            });
            let mut call_after = messages[pair.call_message].clone();
            call_after.tool_calls[pair.call].arguments = stub;
            let mut output_after = messages[pair.output].clone();
            if let Some(text) = &new_error {
                output_after.content.clone_from(text);
            }
            let before = message_tokens(&messages[pair.call_message])
                + message_tokens(&messages[pair.output]);
            let after = message_tokens(&call_after) + message_tokens(&output_after);
            if after >= before {
                cx.gate("marker_no_win");
                continue;
            }
            let Ok(args_key) = cx.stash(&args) else {
                cx.gate("store_full");
                continue;
            };
            let error_key = match &new_error {
                Some(_) => match cx.stash(&error) {
                    Ok(key) => Some(key),
                    Err(_) => {
                        // The arguments' stash is harmless on its own; the pair stays whole.
                        cx.gate("store_full");
                        continue;
                    }
                },
                None => None,
            };
            *messages.get_mut(pair.call_message) = call_after;
            *messages.get_mut(pair.output) = output_after;
            keys.push(args_key);
            keys.extend(error_key);
        }
        Ok(keys)
    }
}
