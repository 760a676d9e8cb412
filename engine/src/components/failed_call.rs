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

use super::triage::{Rules, Screen, call_pairs, head_chars, screener_config, steps_after};
use super::{BuildError, ComponentFactory, decode, defaults};
use crate::components::ComponentSource;
use crate::gate;
use crate::marker::{self, HINT_FULL_OUTPUT};
use crate::pipeline::{ApplyCx, Component, Policy, Stashed, Transcript, message_tokens};

screener_config! {
    /// `components.failed_call`.
    pub struct FailedCallConfig {
        /// Defaults to `4`. Failed calls more than this many assistant steps old are handled.
        pub turns: usize = 4,
        /// Defaults to `400`. Characters of the error text kept.
        pub error_keep_chars: usize = 400,
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "failed_call",
    summary: "triage: stubs stale failed calls' arguments and trims their errors (frozen, atomic)",
    gates: &[
        gate::BELOW_BUDGET_PRESSURE,
        gate::CACHED_PREFIX,
        gate::EXEMPT,
        gate::IN_RESERVE,
        gate::MARKER_OR_NOT_REWRITABLE,
        gate::RECENT,
    ],
    defaults: defaults::<FailedCallConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let c: FailedCallConfig = decode(source)?;
    c.screener(|config| FailedCall { config })
}

struct FailedCall {
    config: FailedCallConfig,
}

impl Screen for FailedCall {
    fn policy(&self, shared: Policy) -> Policy {
        shared.whole_messages()
    }

    fn screen(
        &self,
        messages: &mut Transcript<'_, '_>,
        reserve: usize,
        rules: &Rules,
        cx: &mut ApplyCx<'_>,
    ) -> Stashed {
        let mut keys = Vec::new();
        for pair in call_pairs(messages) {
            let (call_message, output) = (&messages[pair.call_message], &messages[pair.output]);
            let args = &call_message.tool_calls[pair.call].arguments;
            if !output.is_error {
                continue;
            }
            if pair.output >= reserve {
                cx.gate(gate::IN_RESERVE);
                continue;
            }
            if steps_after(messages, pair.call_message) <= self.config.turns {
                cx.gate(gate::RECENT);
                continue;
            }
            if rules.exempt(output) {
                cx.gate(gate::EXEMPT);
                continue;
            }
            if !output.rewritable
                || marker::contains_marker(&output.content)
                || marker::contains_marker(args)
            {
                cx.gate(gate::MARKER_OR_NOT_REWRITABLE);
                continue;
            }
            if !cx.may_mutate(pair.call_message) || !cx.may_mutate(pair.output) {
                cx.gate(gate::CACHED_PREFIX);
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
                cx.gate(gate::MARKER_NO_WIN);
                continue;
            }
            let Ok(args_key) = cx.stash(&args) else {
                cx.gate(gate::STORE_FULL);
                continue;
            };
            let error_key = match &new_error {
                Some(_) => match cx.stash(&error) {
                    Ok(key) => Some(key),
                    Err(_) => {
                        // The arguments' stash is harmless on its own; the pair stays whole.
                        cx.gate(gate::STORE_FULL);
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
