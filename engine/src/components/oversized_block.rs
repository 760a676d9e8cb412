//! `oversized_block` (triage): keeps the head and tail of an output over `cap_chars` (Offload,
//! frozen).
//!
//! ```text
//! <first 800 characters>
//! [... 41,200 characters omitted <<cg:…>> [full output: call context_guru_expand] ...]
//! <last 400 characters>
//! ```
//! Outside the reserve and not exempt. Frozen: an output becomes eligible when it leaves the
//! reserve (see `triage`).

use super::triage::{Rules, Screen, head_chars, screener_config, tail_chars};
use super::{BuildError, ComponentFactory, decode, defaults};
use crate::components::ComponentSource;
use crate::gate;
use crate::marker::HINT_FULL_OUTPUT;
use crate::pipeline::{ApplyCx, Component, Stashed, Transcript};

screener_config! {
    /// `components.oversized_block`.
    pub struct OversizedBlockConfig {
        /// Defaults to `6000`. Outputs over this many characters are trimmed.
        pub cap_chars: usize = 6000,
        /// Defaults to `800`.
        pub head_chars: usize = 800,
        /// Defaults to `400`.
        pub tail_chars: usize = 400,
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "oversized_block",
    summary: "triage: keeps the head and tail of an output over cap_chars (frozen, recoverable)",
    gates: &[
        gate::BELOW_BUDGET_PRESSURE,
        gate::BELOW_MIN_SAVINGS,
        gate::CACHED_PREFIX,
        gate::EXEMPT,
        gate::IN_RESERVE,
        gate::UNDER_CAP,
    ],
    defaults: defaults::<OversizedBlockConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let c: OversizedBlockConfig = decode(source)?;
    if c.head_chars + c.tail_chars >= c.cap_chars {
        return Err(BuildError::invalid(
            "head_chars + tail_chars",
            "must be under cap_chars",
        ));
    }
    c.screener(|config| OversizedBlock { config })
}

struct OversizedBlock {
    config: OversizedBlockConfig,
}

impl Screen for OversizedBlock {
    fn screen(
        &self,
        messages: &mut Transcript<'_, '_>,
        reserve: usize,
        rules: &Rules,
        cx: &mut ApplyCx<'_>,
    ) -> Stashed {
        let mut targets = Vec::new();
        for index in 0..messages.len() {
            let output = &messages[index];
            if !output.is_tool() {
                continue;
            }
            if index >= reserve {
                cx.gate(gate::IN_RESERVE);
            } else if output.content.len() <= self.config.cap_chars
                || output.content.chars().count() <= self.config.cap_chars
            {
                cx.gate(gate::UNDER_CAP);
            } else if rules.admits(messages, index, cx) {
                targets.push((index, ()));
            }
        }
        let (keep_head, keep_tail) = (self.config.head_chars, self.config.tail_chars);
        Ok(rules.cut(messages, targets, cx, |output, (), marker| {
            let text = &output.content;
            let (head, tail) = (head_chars(text, keep_head), tail_chars(text, keep_tail));
            let omitted = text.chars().count() - keep_head - keep_tail;
            format!(
                "{head}\n[... {omitted} characters omitted {marker}{HINT_FULL_OUTPUT} ...]\n{tail}"
            )
        }))
    }
}
