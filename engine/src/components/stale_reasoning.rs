//! `stale_reasoning` (triage): removes reasoning older than `keep_turns` user turns and trims
//! kept blocks over `max_block_chars` (Offload, frozen).
//!
//! A removed block reads `[reasoning removed <<cg:…>>]`; a trimmed one keeps its first
//! `max_block_chars` characters and ends in ` … <<cg:…>>`. Inside the reserve blocks are only
//! trimmed, never removed. Anthropic thinking blocks are signed and the API rejects an edited
//! one, so on Anthropic requests it records `signed_thinking` and does nothing; it acts on
//! OpenAI-dialect reasoning (`reasoning_content`, as DeepSeek and others send it).

use super::triage::{Rules, Screen, head_chars, screener_config};
use super::{BuildError, ComponentFactory, decode, defaults};
use crate::components::ComponentSource;
use crate::gate;
use crate::marker;
use crate::message::Role;
use crate::pipeline::{ApplyCx, Component, Policy, StashKey, Stashed, Transcript, message_tokens};
use crate::wire::Dialect;

screener_config! {
    /// `components.stale_reasoning`.
    pub struct StaleReasoningConfig {
        /// Defaults to `3`. Reasoning within the latest this many user turns is kept.
        pub keep_turns: usize = 3,
        /// Defaults to `2000`. Kept blocks over this many characters are trimmed.
        pub max_block_chars: usize = 2000,
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "stale_reasoning",
    summary: "triage: removes old reasoning and trims long kept blocks (frozen, recoverable)",
    gates: &[
        gate::BELOW_BUDGET_PRESSURE,
        gate::CACHED_PREFIX,
        gate::SIGNED_THINKING,
        gate::WITHIN_KEEP_TURNS,
    ],
    defaults: defaults::<StaleReasoningConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let c: StaleReasoningConfig = decode(source)?;
    c.screener(|config| StaleReasoning { config })
}

struct StaleReasoning {
    config: StaleReasoningConfig,
}

impl Screen for StaleReasoning {
    /// A block trimmed while recent would be removed when re-derived later: never re-derive.
    fn policy(&self, shared: Policy) -> Policy {
        shared.whole_messages().unrepairable()
    }

    /// Anthropic's thinking blocks and Gemini's thought parts are signed: never rewritten.
    fn declines(&self, cx: &mut ApplyCx<'_>) -> bool {
        let signed = matches!(cx.dialect(), Dialect::Anthropic | Dialect::Gemini);
        if signed {
            cx.gate(gate::SIGNED_THINKING);
        }
        signed
    }

    fn screen(
        &self,
        messages: &mut Transcript<'_, '_>,
        reserve: usize,
        _: &Rules,
        cx: &mut ApplyCx<'_>,
    ) -> Stashed {
        let mut keys = Vec::new();
        for index in 0..messages.len() {
            let message = &messages[index];
            if message.role != Role::Assistant || message.reasoning.is_empty() {
                continue;
            }
            if message.reasoning.iter().any(|r| marker::contains_marker(r)) {
                cx.gate(gate::MARKER_OR_KEPT_VERBATIM);
                continue;
            }
            let user_turns_after = (index + 1..messages.len())
                .filter(|&i| messages[i].role == Role::User)
                .count();
            let remove = user_turns_after >= self.config.keep_turns && index < reserve;
            let mut after = message.clone();
            let mut originals = Vec::new();
            for block in &mut after.reasoning {
                let id = marker::stash_id(block);
                if remove {
                    originals.push(std::mem::replace(
                        block,
                        format!("[reasoning removed {}]", marker::marker(&id)),
                    ));
                } else if block.chars().count() > self.config.max_block_chars {
                    let head = head_chars(block, self.config.max_block_chars).to_owned();
                    originals.push(std::mem::replace(
                        block,
                        format!("{head} … {}", marker::marker(&id)),
                    ));
                }
            }
            if originals.is_empty() {
                cx.gate(gate::WITHIN_KEEP_TURNS);
                continue;
            }
            if !cx.may_mutate(index) {
                cx.gate(gate::CACHED_PREFIX);
                continue;
            }
            if message_tokens(&after) >= message_tokens(message) {
                cx.gate(gate::MARKER_NO_WIN);
                continue;
            }
            let stashed: Result<Vec<StashKey>, _> = originals.iter().map(|o| cx.stash(o)).collect();
            let Ok(stashed) = stashed else {
                cx.gate(gate::STORE_FULL);
                continue;
            };
            *messages.get_mut(index) = after;
            keys.extend(stashed);
        }
        Ok(keys)
    }
}
