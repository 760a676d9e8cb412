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

use serde::Deserialize;

use super::triage::{Budget, Exempt, Reserve, Rules, head_chars, tail_chars};
use super::{BuildError, ComponentFactory, MarkerMode, decode, offload_with};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_OUTPUT;
use crate::pipeline::{ApplyCx, Component, ComponentError, Offload, Policy, StashKey, Transcript};

/// `components.oversized_block`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OversizedBlockConfig {
    /// Defaults to `6000`. Outputs over this many characters are trimmed.
    pub cap_chars: usize,
    /// Defaults to `800`.
    pub head_chars: usize,
    /// Defaults to `400`.
    pub tail_chars: usize,
    pub reserve: Reserve,
    pub exempt: Exempt,
    /// Defaults to none (act on every request). See `triage`.
    pub budget: Option<Budget>,
    /// Defaults to `true`.
    pub cold_cache: bool,
    pub marker_mode: MarkerMode,
}

impl Default for OversizedBlockConfig {
    fn default() -> OversizedBlockConfig {
        OversizedBlockConfig {
            cap_chars: 6000,
            head_chars: 800,
            tail_chars: 400,
            reserve: Reserve::default(),
            exempt: Exempt::default(),
            budget: None,
            cold_cache: true,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "oversized_block",
    summary: "triage: keeps the head and tail of an output over cap_chars (frozen, recoverable)",
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
    let rules = Rules::new(c.reserve.clone(), c.exempt.clone(), c.budget.clone())?;
    Ok(Component::Offload(Box::new(OversizedBlock {
        config: c,
        rules,
    })))
}

struct OversizedBlock {
    config: OversizedBlockConfig,
    rules: Rules,
}

impl Offload for OversizedBlock {
    fn policy(&self) -> Policy {
        Policy::rederivable(self.config.cold_cache)
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
        let mut targets = Vec::new();
        for index in 0..messages.len() {
            let output = &messages[index];
            if !output.is_tool() {
                continue;
            }
            if index >= reserve {
                cx.gate("in_reserve");
            } else if output.content.len() <= self.config.cap_chars
                || output.content.chars().count() <= self.config.cap_chars
            {
                cx.gate("under_cap");
            } else if self.rules.admits(messages, index, cx) {
                targets.push(index);
            }
        }
        if !self.rules.worth(targets.iter().copied(), cx) {
            return Ok(Vec::new());
        }
        let mut keys = Vec::new();
        for index in targets {
            let text = &messages[index].content;
            let head = head_chars(text, self.config.head_chars).to_owned();
            let tail = tail_chars(text, self.config.tail_chars).to_owned();
            let omitted = text.chars().count() - self.config.head_chars - self.config.tail_chars;
            keys.extend(offload_with(messages, index, cx, |marker| {
                format!("{head}\n[... {omitted} characters omitted {marker}{HINT_FULL_OUTPUT} ...]\n{tail}")
            }));
        }
        Ok(keys)
    }
}
