//! `cacheinject`: one prompt-cache breakpoint just before the newest turn (Reformat, metadata).
//!
//! Anthropic caches a prompt prefix only up to a block marked `cache_control`. An agent that
//! marks nothing pays full price for its whole history every turn. This component marks the last
//! block of the message just before the newest turn, the longest prefix that the next turn will
//! send again unchanged.
//!
//! Before (the assistant turn that called the tool the agent now answers):
//! ```text
//! {"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"pytest -x"}}
//! ```
//! After:
//! ```text
//! {"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"pytest -x"},"cache_control":{"type":"ephemeral"}}
//! ```
//!
//! It changes no model-visible content, so it saves no content tokens and `/stats` lists it
//! among the passthrough components; its saving is the provider's cache hits. The key reaches
//! the wire through the metadata-only write path, so it lands even on a message whose content
//! the model could not round-trip. Inert on OpenAI (which caches on its own), when the caller
//! already spent the four breakpoints the API allows (system, tools and messages together), when
//! the caller already marked that message or a later one (never overwritten), and on
//! string-content messages (no block to mark).

use crate::gate;
use serde::Deserialize;

use super::{BuildError, ComponentFactory, decode, defaults};
use crate::components::ComponentSource;
use crate::message::Role;
use crate::pipeline::{ApplyCx, Component, ComponentError, Reformat, Transcript};
use crate::wire::Dialect;

/// The most `cache_control` breakpoints one Anthropic request may carry.
pub const MAX_BREAKPOINTS: usize = 4;

/// `components.cacheinject`.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheInjectConfig {
    /// Defaults to `5m`. `1h` asks for the one-hour cache (billed higher on write).
    pub ttl: Ttl,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum Ttl {
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    #[serde(rename = "1h")]
    OneHour,
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "cacheinject",
    summary: "adds one Anthropic cache_control breakpoint before the newest turn (no content change)",
    gates: &[
        gate::BREAKPOINT_BUDGET_SPENT,
        gate::BREAKPOINT_PRESENT,
        gate::EMPTY_TAIL,
        gate::NOT_ANTHROPIC,
        gate::NOT_CACHE_AWARE,
        gate::NO_EARLIER_TURN,
        gate::NO_SYSTEM_ARRAY,
        gate::NO_VOLATILE_TAIL,
        gate::OFFSET,
        gate::STABLE_HEAD_TOO_SMALL,
        gate::STRING_CONTENT,
        gate::SYSTEM_REWRITTEN,
        gate::SYSTEM_SPLIT,
        gate::SYSTEM_UNREAD,
    ],
    defaults: defaults::<CacheInjectConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: CacheInjectConfig = decode(source)?;
    Ok(Component::Reformat(Box::new(CacheInject { config })))
}

struct CacheInject {
    config: CacheInjectConfig,
}

impl Reformat for CacheInject {
    fn reformat(
        &self,
        messages: &mut Transcript<'_, '_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        if cx.dialect() != Dialect::Anthropic {
            cx.gate(gate::NOT_CACHE_AWARE);
            return Ok(());
        }
        if cx.existing_breakpoints() >= MAX_BREAKPOINTS {
            cx.gate(gate::BREAKPOINT_BUDGET_SPENT);
            return Ok(());
        }
        // The newest turn is everything after the last assistant message.
        let Some(target) = (0..messages.len())
            .rev()
            .find(|&i| messages[i].role == Role::Assistant)
        else {
            cx.gate(gate::NO_EARLIER_TURN);
            return Ok(());
        };
        if (target..messages.len()).any(|i| messages[i].cache_control) {
            cx.gate(gate::BREAKPOINT_PRESENT);
            return Ok(());
        }
        if !messages[target].can_cache_control {
            cx.gate(gate::STRING_CONTENT);
            return Ok(());
        }
        let message = messages.get_mut(target);
        message.cache_control = true;
        message.cache_ttl_1h = self.config.ttl == Ttl::OneHour;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::apply::apply_body;
    use crate::clock::ManualClock;
    use crate::config::Config;
    use crate::pipeline::RunCx;
    use crate::store::NopStore;
    use crate::wire::{self, Dialect};

    fn run(yaml: &str, body: &str) -> (String, Vec<(&'static str, u32)>) {
        let pipeline = Config::parse(yaml).unwrap().build_pipeline().unwrap();
        let cx = RunCx::new(
            Dialect::Anthropic,
            "s",
            Arc::new(NopStore),
            Arc::new(ManualClock::new()),
        );
        let applied = apply_body(body.as_bytes(), &pipeline, &cx);
        // Only this component's own gates: the body-level system split it enables reports its
        // own (`no_system_array` here) on the same entry.
        let gates = applied.report.components[0]
            .gates
            .iter()
            .filter(|(k, _)| !matches!(**k, "no_system_array" | "no_volatile_tail"))
            .map(|(k, v)| (*k, *v))
            .collect();
        (String::from_utf8(applied.body.into_owned()).unwrap(), gates)
    }

    const TURN: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[
{"role":"user","content":"run the tests"},
{"role":"assistant","content":[{"type":"text","text":"Running them."},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"pytest -x"}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"1 failed, 41 passed"}]}]}"#;

    #[test]
    fn marks_the_last_block_before_the_newest_turn() {
        let (body, gates) = run("pipeline: [cacheinject]", TURN);
        assert!(
            body.contains(
                r#""input":{"command":"pytest -x"},"cache_control":{"type":"ephemeral"}}]}"#
            ),
            "{body}"
        );
        assert!(gates.is_empty());
        let again = wire::parse(body.as_bytes(), Dialect::Anthropic).unwrap();
        assert_eq!(again.existing_breakpoints(), 1);
        // Exactly one key added; everything else byte-identical.
        let added = r#","cache_control":{"type":"ephemeral"}"#;
        assert_eq!(body.replacen(added, "", 1), TURN);

        let (body, _) = run(
            "pipeline: [cacheinject]\ncomponents:\n  cacheinject: {ttl: 1h}",
            TURN,
        );
        assert!(body.contains(r#""cache_control":{"type":"ephemeral","ttl":"1h"}"#));
    }

    #[test]
    fn never_overwrites_never_exceeds_four_and_skips_string_content() {
        let marked = TURN.replace(
            r#""content":"1 failed, 41 passed"}"#,
            r#""content":"1 failed, 41 passed","cache_control":{"type":"ephemeral"}}"#,
        );
        let (body, gates) = run("pipeline: [cacheinject]", &marked);
        assert_eq!(body, marked);
        assert_eq!(gates, [("breakpoint_present", 1)]);

        let system: String = (0..4)
            .map(|i| {
                format!(
                    r#"{{"type":"text","text":"part {i}","cache_control":{{"type":"ephemeral"}}}}"#
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let full = TURN.replacen(
            "\"messages\"",
            &format!("\"system\":[{system}],\"messages\""),
            1,
        );
        let (body, gates) = run("pipeline: [cacheinject]", &full);
        assert_eq!(body, full);
        assert_eq!(gates, [("breakpoint_budget_spent", 1)]);

        let plain = r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"go on"}]}"#;
        let (body, gates) = run("pipeline: [cacheinject]", plain);
        assert_eq!(body, plain);
        assert_eq!(gates, [("string_content", 1)]);
    }
}
