//! `format`: re-encodes a pretty-printed JSON tool output as compact JSON (lossless Reformat).
//!
//! Before: `{\n  "id": 1,\n  "name": "ada",\n  "tags": [ "x", "y" ]\n}`
//! After:  `{"id":1,"name":"ada","tags":["x","y"]}`
//!
//! Only whitespace between tokens is removed: key order, number spellings (`1.0e0`,
//! `12345678901234567890`) and string escapes are kept byte for byte, so the value is exactly the
//! same JSON text minus layout. (The reference re-encoded through Go maps and sorted keys; we do
//! not reorder anything.) One level of envelope is also handled: a string field of at least 64
//! bytes that itself holds pretty JSON, as in `{"ok":true,"stdout":"{\n  ...}"}`, is compacted in
//! place and its siblings are left alone.
//!
//! Adopted only when strictly fewer tokens. On any failure the output is left untouched.

use crate::gate;
use serde::Deserialize;

use super::{BuildError, ComponentFactory, decode, defaults};
use crate::components::ComponentSource;
use crate::pipeline::{ApplyCx, Component, ComponentError, Policy, Reformat, Transcript};
use crate::tokens;
use crate::wire::json::{self, Kind};

/// `components.format`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FormatConfig {
    /// Defaults to `50`. Smaller outputs are left alone: the saving would be a handful of tokens.
    pub min_tokens: usize,
    /// Defaults to `0`. The newest this many tool outputs are left byte-identical.
    pub keep_recent: usize,
}

impl Default for FormatConfig {
    fn default() -> FormatConfig {
        FormatConfig {
            min_tokens: 50,
            keep_recent: 0,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "format",
    summary: "compacts pretty-printed JSON tool outputs (lossless)",
    gates: &[
        gate::ALREADY_COMPACT,
        gate::BELOW_MIN_TOKENS,
        gate::CACHED_PREFIX,
        gate::JSON_PARSE_FAILED,
        gate::NOT_JSON_SHAPED,
        gate::WITHIN_KEEP_RECENT,
    ],
    defaults: defaults::<FormatConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: FormatConfig = decode(source)?;
    Ok(Component::Reformat(Box::new(Format { config })))
}

struct Format {
    config: FormatConfig,
}

/// Envelope string fields shorter than this are not worth probing for embedded JSON.
const ENVELOPE_MIN_BYTES: usize = 64;

impl Reformat for Format {
    /// A `keep_recent` window makes whether it acts depend on later outputs: frozen then.
    fn policy(&self) -> Policy {
        Policy::keep_recent(self.config.keep_recent)
    }

    /// Decides each output alone: carried-over ones are skipped by the candidate helper.
    fn carries_over(&self) -> bool {
        true
    }

    fn reformat(
        &self,
        messages: &mut Transcript<'_, '_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        for index in super::repack_candidates(messages, self.config.keep_recent, 0, cx) {
            cx.at(index);
            let message = &messages[index];
            let trimmed = message.content.trim();
            if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
                cx.gate(gate::NOT_JSON_SHAPED);
                continue;
            }
            if cx.tokens_below(index, self.config.min_tokens) {
                cx.gate(gate::BELOW_MIN_TOKENS);
                continue;
            }
            let Ok(root) = json::parse_document(&message.content) else {
                cx.gate(gate::JSON_PARSE_FAILED);
                continue;
            };
            let compact = minify(&message.content[root.start..root.end]);
            let candidate = match compact_envelope(&compact) {
                Some(inner) => inner,
                None if compact.len() < message.content.len() => compact,
                None => {
                    cx.gate(gate::ALREADY_COMPACT);
                    continue;
                }
            };
            if tokens::count(&candidate) < cx.tokens(index) {
                messages.set_content(index, candidate);
            } else {
                cx.gate(gate::ALREADY_COMPACT);
            }
        }
        Ok(())
    }
}

/// Removes whitespace between the tokens of validated JSON text.
pub(crate) fn minify(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut run_start = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // Skip the string body in one go; escapes never end it early.
                let mut j = i + 1;
                while let Some(off) = memchr::memchr2(b'"', b'\\', &bytes[j..]) {
                    j += off;
                    if bytes[j] == b'\\' {
                        j += 2;
                    } else {
                        break;
                    }
                }
                i = j + 1;
            }
            b' ' | b'\n' | b'\r' | b'\t' => {
                out.push_str(&text[run_start..i]);
                i += 1;
                run_start = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&text[run_start..]);
    out
}

/// For a compact top-level object, compacts string fields that hold pretty JSON. Returns the
/// rewritten envelope only when at least one field shrank.
fn compact_envelope(compact: &str) -> Option<String> {
    let root = json::parse_document(compact).ok()?;
    if json::kind_of(compact, root) != Kind::Object {
        return None;
    }
    let mut out = String::with_capacity(compact.len());
    let mut cursor = 0;
    let mut changed = false;
    for entry in json::entries(compact, root) {
        if json::kind_of(compact, entry.value) != Kind::String
            || entry.value.len() < ENVELOPE_MIN_BYTES
        {
            continue;
        }
        let Ok(inner) = json::decode_string(compact, entry.value) else {
            continue;
        };
        let trimmed = inner.trim();
        if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
            continue;
        }
        let Ok(inner_root) = json::parse_document(&inner) else {
            continue;
        };
        let inner_compact = minify(&inner[inner_root.start..inner_root.end]);
        if inner_compact.len() >= inner.len() {
            continue;
        }
        out.push_str(&compact[cursor..entry.value.start]);
        json::encode_string(&inner_compact, &mut out);
        cursor = entry.value.end;
        changed = true;
    }
    if !changed {
        return None;
    }
    out.push_str(&compact[cursor..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::testing::{check, tool_messages};

    #[test]
    fn minify_keeps_order_numbers_and_escapes() {
        let pretty = "{\n  \"b\": 1.0e0,\n  \"a\": [ 12345678901234567890, \"x y\\\" z\" ]\n}";
        assert_eq!(
            minify(pretty),
            r#"{"b":1.0e0,"a":[12345678901234567890,"x y\" z"]}"#
        );
    }

    #[test]
    fn compacts_pretty_json_and_keeps_the_value() {
        let items: Vec<String> = (0..30)
            .map(|i| {
                format!(
                    "  {{\n    \"id\": {i},\n    \"name\": \"item {i}\",\n    \"ok\": true\n  }}"
                )
            })
            .collect();
        let pretty = format!("[\n{}\n]", items.join(",\n"));
        let out = check("format", "", tool_messages(&[&pretty]));
        let after = &out.messages[1].content;
        assert!(after.len() < pretty.len());
        let a: serde_json::Value = serde_json::from_str(after).unwrap();
        let b: serde_json::Value = serde_json::from_str(&pretty).unwrap();
        assert_eq!(a, b);
        assert!(out.report.components[0].acted);
    }

    #[test]
    fn compacts_an_embedded_json_envelope() {
        let inner = format!(
            "{{\n  \"files\": [\n{}\n  ]\n}}",
            (0..20)
                .map(|i| format!("    \"src/file_{i}.rs\""))
                .collect::<Vec<_>>()
                .join(",\n")
        );
        let envelope = format!("{{\"ok\":true,\"stdout\":{}}}", json::to_literal(&inner));
        let out = check("format", "", tool_messages(&[&envelope]));
        let after = &out.messages[1].content;
        assert!(
            after.starts_with(r#"{"ok":true,"stdout":"{\"files\":[\"src/file_0.rs\""#),
            "{after}"
        );
    }

    #[test]
    fn inert_on_text_small_compact_or_broken_json() {
        let compact = format!(
            "[{}]",
            (0..40)
                .map(|i| format!("{{\"id\":{i}}}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let broken = format!("{{ \"a\": [1, 2, {} ", "3, ".repeat(40));
        let out = check(
            "format",
            "",
            tool_messages(&["plain text output of ls", "{ \"a\": 1 }", &compact, &broken]),
        );
        let gates = &out.report.components[0].gates;
        assert_eq!(gates.get("not_json_shaped"), Some(&1));
        assert_eq!(gates.get("below_min_tokens"), Some(&1));
        assert_eq!(gates.get("already_compact"), Some(&1));
        assert_eq!(gates.get("json_parse_failed"), Some(&1));
        assert!(!out.report.components[0].mutated);
    }
}
