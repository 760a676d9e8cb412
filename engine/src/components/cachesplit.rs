//! `cachesplit`: splits the volatile tail off an Anthropic system block so its stable head can
//! be cached across sessions (Reformat, body-level, no config).
//!
//! Coding agents end their system prompt with a snapshot that changes every session (`gitStatus:`,
//! `Current branch: `, `Recent commits:`, a directory listing). A prompt-cache entry covers a
//! whole block, so that tail makes the large, identical instructions before it a cache miss in
//! every new session. Split at the start of the line where the earliest such marker begins:
//!
//! ```text
//! [{"type":"text","text":"<8,000 chars of instructions>\ngitStatus: M src/app.rs","cache_control":{…}}]
//! [{"type":"text","text":"<8,000 chars of instructions>\n","cache_control":{…}},{"type":"text","text":"gitStatus: M src/app.rs"}]
//! ```
//!
//! The model reads the same text (the two blocks concatenate to the original). The caller's
//! `cache_control` stays on the stable half only, so no breakpoint is added. Only a block of at
//! least 4,096 characters whose stable half is at least 4,096 characters (about the 1,024-token
//! minimum a cache entry needs) and whose tail is not empty is split, one block per request.
//! `cacheinject` in a pipeline enables the split too. The component itself only marks the
//! pipeline: the split is a body-level edit made after the messages are written back.

use super::{BuildError, ComponentFactory, decode, defaults};
use crate::components::ComponentSource;
use crate::gate::{self, Gate};
use crate::pipeline::{ApplyCx, Component, ComponentError, Reformat, Transcript};
use crate::wire::json::{self, Kind};
use crate::wire::{Dialect, ParsedBody};

/// Lines that open the per-session snapshot of a coding agent's system prompt.
pub const VOLATILE_MARKERS: [&str; 4] = [
    "\nRecent commits:\n",
    "\nCurrent branch: ",
    "\ngitStatus:",
    "\nHere is a snapshot of the current directory",
];

/// Neither a block nor its stable half is split below this many characters.
pub const MIN_SPLIT_CHARS: usize = 4096;

/// No keys: a `components.cachesplit` block with any key is an error.
#[derive(Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct NoConfig {}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "cachesplit",
    summary: "splits the per-session tail off the system prompt so its head stays cacheable",
    gates: &[
        gate::EMPTY_TAIL,
        gate::NOT_ANTHROPIC,
        gate::NO_SYSTEM_ARRAY,
        gate::NO_VOLATILE_TAIL,
        gate::OFFSET,
        gate::STABLE_HEAD_TOO_SMALL,
        gate::SYSTEM_REWRITTEN,
        gate::SYSTEM_SPLIT,
        gate::SYSTEM_UNREAD,
    ],
    defaults: defaults::<NoConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let _: NoConfig = decode(source)?;
    Ok(Component::Reformat(Box::new(CacheSplit)))
}

struct CacheSplit;

impl Reformat for CacheSplit {
    /// Nothing to do on messages; see [`split_system`].
    fn reformat(
        &self,
        _: &mut Transcript<'_, '_>,
        _: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        Ok(())
    }
}

/// Splits the first eligible system block of `rewritten` (the body `parsed` was written back
/// to), or says why not. `system_changed` tells whether the pipeline rewrote the system prompt,
/// in which case its bytes in `rewritten` are not where `parsed` saw them and nothing is done.
///
/// # Errors
/// The gate name explaining why nothing was split.
pub fn split_system(
    parsed: &ParsedBody<'_>,
    rewritten: &[u8],
    system_changed: bool,
) -> Result<Vec<u8>, Gate> {
    if parsed.dialect() != Dialect::Anthropic {
        return Err(gate::NOT_ANTHROPIC);
    }
    let text = parsed.text();
    let system = parsed.system_span().ok_or(gate::NO_SYSTEM_ARRAY)?;
    if json::kind_of(text, system) != Kind::Array {
        return Err(gate::NO_SYSTEM_ARRAY);
    }
    if system_changed {
        return Err(gate::SYSTEM_REWRITTEN);
    }
    // A system prompt the wire layer could not read leaves as it came.
    if parsed.opaque_entries().iter().any(|o| o.index.is_none()) {
        return Err(gate::SYSTEM_UNREAD);
    }
    // Write-back edits only `messages` (the system was not changed): a system before it keeps its
    // offsets, one after it moves by the length change.
    let messages = parsed.messages_span();
    let shift = if system.start >= messages.end {
        rewritten.len() as isize - text.len() as isize
    } else {
        0
    };
    for block in json::elements(text, system) {
        if json::kind_of(text, block) != Kind::Object {
            continue;
        }
        let fields = json::fields(text, block);
        let is_text = json::lookup(text, &fields, "type").is_some_and(|t| t.of(text) == "\"text\"");
        let Some(value) = json::lookup(text, &fields, "text").filter(|_| is_text) else {
            continue;
        };
        let Ok(content) = json::decode_string(text, value) else {
            continue;
        };
        if content.len() < MIN_SPLIT_CHARS {
            continue;
        }
        let Some(at) = VOLATILE_MARKERS
            .iter()
            .filter_map(|m| content.find(m))
            .min()
        else {
            continue;
        };
        // Split after the newline that opens the marker's line.
        let (head, tail) = content.split_at(at + 1);
        if head.len() < MIN_SPLIT_CHARS {
            return Err(gate::STABLE_HEAD_TOO_SMALL);
        }
        if tail.trim().is_empty() {
            return Err(gate::EMPTY_TAIL);
        }
        let member = |entry: &json::Entry, value: Option<&str>| {
            let key = entry.key.of(text);
            match value {
                Some(v) => format!("{key}:{}", json::to_literal(v)),
                None => format!("{key}:{}", entry.value.of(text)),
            }
        };
        let build = |replacement: &str, keep_breakpoint: bool| {
            let members: Vec<String> = fields
                .iter()
                .filter(|e| keep_breakpoint || !json::key_is(text, e.key, "cache_control"))
                .map(|e| {
                    let is_text_field = json::key_is(text, e.key, "text");
                    member(e, is_text_field.then_some(replacement))
                })
                .collect();
            format!("{{{}}}", members.join(","))
        };
        let pair = format!("{},{}", build(head, true), build(tail, false));
        let start = usize::try_from(block.start as isize + shift).map_err(|_| gate::OFFSET)?;
        let end = usize::try_from(block.end as isize + shift).map_err(|_| gate::OFFSET)?;
        if rewritten.get(start..end) != Some(block.of(text).as_bytes()) {
            return Err(gate::SYSTEM_REWRITTEN);
        }
        let mut out = Vec::with_capacity(rewritten.len() + tail.len() + 64);
        out.extend_from_slice(&rewritten[..start]);
        out.extend_from_slice(pair.as_bytes());
        out.extend_from_slice(&rewritten[end..]);
        return Ok(out);
    }
    Err(gate::NO_VOLATILE_TAIL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire;

    fn instructions() -> String {
        "You are an interactive CLI tool that helps users with software engineering tasks. \
         Use the instructions below and the tools available to you to assist the user.\n"
            .repeat(40)
    }

    fn body(system_text: &str, after_messages: bool) -> String {
        let system = format!(
            r#""system":[{{"type":"text","text":"You are Claude Code."}},{{"type":"text","text":{},"cache_control":{{"type":"ephemeral"}}}}]"#,
            json::to_literal(system_text)
        );
        let messages = r#""messages":[{"role":"user","content":"fix the build"}]"#;
        if after_messages {
            format!(r#"{{"model":"claude-sonnet-4-5",{messages},{system}}}"#)
        } else {
            format!(r#"{{"model":"claude-sonnet-4-5",{system},{messages}}}"#)
        }
    }

    #[test]
    fn splits_at_the_snapshot_and_keeps_the_breakpoint_on_the_head() {
        let snapshot = "\ngitStatus: This is the git status at the start of the conversation.\nCurrent branch: main\n\nStatus:\nM src/app.rs\n";
        let system_text = format!("{}{snapshot}", instructions());
        for after in [false, true] {
            let original = body(&system_text, after);
            let parsed = wire::parse(original.as_bytes(), Dialect::Anthropic).unwrap();
            let out = split_system(&parsed, original.as_bytes(), false).unwrap();
            let out = String::from_utf8(out).unwrap();
            let value: serde_json::Value = serde_json::from_str(&out).unwrap();
            let blocks = value["system"].as_array().unwrap();
            assert_eq!(blocks.len(), 3);
            let head = blocks[1]["text"].as_str().unwrap();
            let tail = blocks[2]["text"].as_str().unwrap();
            assert_eq!(
                format!("{head}{tail}"),
                system_text,
                "the model reads the same text"
            );
            assert!(tail.starts_with("gitStatus:"));
            assert!(blocks[1]["cache_control"].is_object());
            assert!(
                blocks[2].get("cache_control").is_none(),
                "no breakpoint added"
            );
            let again = wire::parse(out.as_bytes(), Dialect::Anthropic).unwrap();
            assert_eq!(again.existing_breakpoints(), parsed.existing_breakpoints());
            assert_eq!(again.messages()[1..], parsed.messages()[1..]);
        }
    }

    #[test]
    fn inert_without_a_marker_on_small_blocks_and_on_openai() {
        let plain = body(&instructions(), false);
        let parsed = wire::parse(plain.as_bytes(), Dialect::Anthropic).unwrap();
        assert_eq!(
            split_system(&parsed, plain.as_bytes(), false),
            Err(gate::NO_VOLATILE_TAIL)
        );
        let small = body("Be brief.\ngitStatus: clean", false);
        let parsed = wire::parse(small.as_bytes(), Dialect::Anthropic).unwrap();
        assert_eq!(
            split_system(&parsed, small.as_bytes(), false),
            Err(gate::NO_VOLATILE_TAIL)
        );
        let early = body(&format!("Short.\ngitStatus: x\n{}", instructions()), false);
        let parsed = wire::parse(early.as_bytes(), Dialect::Anthropic).unwrap();
        assert_eq!(
            split_system(&parsed, early.as_bytes(), false),
            Err(gate::STABLE_HEAD_TOO_SMALL)
        );
        let openai = r#"{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#;
        let parsed = wire::parse(openai.as_bytes(), Dialect::OpenAi).unwrap();
        assert_eq!(
            split_system(&parsed, openai.as_bytes(), false),
            Err(gate::NOT_ANTHROPIC)
        );
    }
}
