//! Usage the agent sees includes the rounds sluice added.
//!
//! An expand round is one more upstream call the agent never sees. Without this, the `usage` the
//! agent reads covers only the call whose reply it got, so its cost display (Claude Code's,
//! Codex's) undercounts every turn that had a round. The reply the agent gets therefore carries
//! the sum of every round's token counts: each numeric leaf of `usage` (input, cache read, cache
//! write, output, and the nested details objects) is added up.
//!
//! The rewrite is a splice: the numbers inside the reply's `usage` change, keys it lacks are
//! appended to it, and every other byte stays as the upstream sent it. What the rounds added is
//! also counted apart in `/stats` (`expand_rounds`, `expand_reread_tokens`).

use engine::wire::Dialect;
use engine::wire::json::{self, Kind, Span};
use serde_json::{Map, Value};

/// Token counts: a usage object's numeric leaves, nested objects kept nested.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct UsageSum(Map<String, Value>);

impl UsageSum {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds every numeric leaf of `usage` to this sum (one more round's counts).
    pub fn add(&mut self, usage: &Value) {
        if let Some(usage) = usage.as_object() {
            merge(&mut self.0, usage, Merge::Add);
        }
    }

    /// Lays `usage` over these counts, a later value replacing an earlier one: the events of one
    /// streamed reply restate its counts (Anthropic's `message_delta` repeats and grows what
    /// `message_start` said).
    pub fn overlay(&mut self, usage: &Value) {
        if let Some(usage) = usage.as_object() {
            merge(&mut self.0, usage, Merge::Replace);
        }
    }

    /// This sum plus `other`.
    pub fn plus(&self, other: &UsageSum) -> UsageSum {
        let mut sum = self.clone();
        merge(&mut sum.0, &other.0, Merge::Add);
        sum
    }

    /// The `usage` object at `span` of `text`, with these counts written into it: each number
    /// the sum has is replaced, nested objects are rewritten the same way, keys the object lacks
    /// are appended, and every other byte is kept.
    pub fn write_into(&self, text: &str, span: Span) -> String {
        write_object(text, span, &self.0)
    }
}

#[derive(Clone, Copy)]
enum Merge {
    Add,
    Replace,
}

fn merge(into: &mut Map<String, Value>, from: &Map<String, Value>, how: Merge) {
    for (key, value) in from {
        match value {
            Value::Number(n) => {
                let slot = into.entry(key.clone()).or_insert(Value::from(0u64));
                *slot = match (how, slot.as_u64(), n.as_u64()) {
                    (Merge::Add, Some(a), Some(b)) => Value::from(a.saturating_add(b)),
                    (Merge::Add, ..) => {
                        let sum = slot.as_f64().unwrap_or(0.0) + n.as_f64().unwrap_or(0.0);
                        serde_json::Number::from_f64(sum).map_or(Value::Null, Value::Number)
                    }
                    (Merge::Replace, ..) => value.clone(),
                };
            }
            Value::Object(inner) => {
                let slot = into
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Some(slot) = slot.as_object_mut() {
                    merge(slot, inner, how);
                }
            }
            // Strings (`service_tier`), nulls and arrays are not counts.
            _ => {}
        }
    }
}

fn write_object(text: &str, span: Span, counts: &Map<String, Value>) -> String {
    let original = span.of(text);
    if json::kind_of(text, span) != Kind::Object {
        return original.to_owned();
    }
    let mut out = String::with_capacity(original.len() + 64);
    let mut cursor = span.start;
    let mut seen: Vec<String> = Vec::new();
    let mut last_value_end = None;
    for entry in json::entries(text, span) {
        let Ok(key) = json::decode_string(text, entry.key) else {
            continue;
        };
        last_value_end = Some(entry.value.end);
        let Some(count) = counts.get(key.as_ref()) else {
            continue;
        };
        let replacement = match (json::kind_of(text, entry.value), count) {
            (Kind::Number, Value::Number(n)) => n.to_string(),
            (Kind::Object, Value::Object(inner)) => write_object(text, entry.value, inner),
            // A count the reply holds as something else (`null`) takes the count.
            (Kind::Null, count) => count.to_string(),
            _ => continue,
        };
        seen.push(key.into_owned());
        out.push_str(&text[cursor..entry.value.start]);
        out.push_str(&replacement);
        cursor = entry.value.end;
    }
    let missing: Vec<(&String, &Value)> = counts
        .iter()
        .filter(|(key, _)| !seen.contains(key) && !has_key(text, span, key))
        .collect();
    match last_value_end {
        Some(end) if !missing.is_empty() => {
            out.push_str(&text[cursor..end]);
            cursor = end;
            for (key, value) in &missing {
                out.push(',');
                out.push_str(&json::to_literal(key));
                out.push(':');
                out.push_str(&value.to_string());
            }
        }
        None if !missing.is_empty() => {
            // `{}`: the members go inside the braces.
            let members: Vec<String> = missing
                .iter()
                .map(|(key, value)| format!("{}:{value}", json::to_literal(key)))
                .collect();
            return format!("{{{}}}", members.join(","));
        }
        _ => {}
    }
    out.push_str(&text[cursor..span.end]);
    out
}

fn has_key(text: &str, object: Span, key: &str) -> bool {
    json::get(text, object, key).is_some()
}

/// The key of a whole reply's usage object: `usage`, Gemini's `usageMetadata`.
pub fn reply_key(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Gemini => "usageMetadata",
        Dialect::OpenAi | Dialect::Anthropic | Dialect::Responses => "usage",
    }
}

/// The top-level usage of a whole (non-streamed) reply of `dialect`.
pub fn of_reply(reply: &[u8], dialect: Dialect) -> Option<Value> {
    let value: Value = serde_json::from_slice(reply).ok()?;
    value
        .get(reply_key(dialect))
        .filter(|u| u.is_object())
        .cloned()
}

/// A whole reply with `carried` (the earlier rounds' counts) added into its top-level usage;
/// the reply as it came when it has none or is not JSON.
pub fn add_to_reply(reply: &[u8], dialect: Dialect, carried: &UsageSum) -> Option<Vec<u8>> {
    if carried.is_empty() {
        return None;
    }
    let text = std::str::from_utf8(reply).ok()?;
    let root = json::parse_document(text).ok()?;
    let span = json::get(text, root, reply_key(dialect))
        .filter(|s| json::kind_of(text, *s) == Kind::Object)?;
    let own: Value = serde_json::from_str(span.of(text)).ok()?;
    let mut own_counts = UsageSum::default();
    own_counts.add(&own);
    let total = carried.plus(&own_counts);
    let mut out = String::with_capacity(text.len() + 64);
    out.push_str(&text[..span.start]);
    out.push_str(&total.write_into(text, span));
    out.push_str(&text[span.end..]);
    Some(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_are_added_leaf_by_leaf_and_written_in_place() {
        let mut carried = UsageSum::default();
        carried.add(&json!({"input_tokens": 10, "cache_read_input_tokens": 100,
            "output_tokens": 5, "service_tier": "standard",
            "cache_creation": {"ephemeral_5m_input_tokens": 7}}));
        let reply = br#"{"id":"m","usage": {"output_tokens":3, "input_tokens" : 2,"cache_read_input_tokens":null,"cache_creation":{"ephemeral_5m_input_tokens":1},"service_tier":"standard"},"z":1}"#;
        let out =
            String::from_utf8(add_to_reply(reply, Dialect::Anthropic, &carried).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"id":"m","usage": {"output_tokens":8, "input_tokens" : 12,"cache_read_input_tokens":100,"cache_creation":{"ephemeral_5m_input_tokens":8},"service_tier":"standard"},"z":1}"#
        );
    }

    #[test]
    fn keys_the_reply_lacks_are_appended() {
        let mut carried = UsageSum::default();
        carried.add(&json!({"input_tokens": 10, "output_tokens": 5}));
        let text = r#"{"output_tokens":3}"#;
        let root = json::parse_document(text).unwrap();
        let mut own = UsageSum::default();
        own.overlay(&json!({"output_tokens": 3}));
        assert_eq!(
            carried.plus(&own).write_into(text, root),
            r#"{"output_tokens":8,"input_tokens":10}"#
        );
        assert_eq!(
            carried.write_into("{}", Span::new(0, 2)),
            r#"{"input_tokens":10,"output_tokens":5}"#
        );
    }

    /// A Gemini reply's counts are `usageMetadata`; a round's are summed there.
    #[test]
    fn gemini_counts_are_summed_in_usage_metadata() {
        let mut carried = UsageSum::default();
        carried.add(
            &json!({"promptTokenCount": 9000, "cachedContentTokenCount": 8192,
            "candidatesTokenCount": 12, "totalTokenCount": 9012}),
        );
        let reply = br#"{"candidates":[],"usageMetadata":{"promptTokenCount":9100,"candidatesTokenCount":30,"totalTokenCount":9130},"modelVersion":"m"}"#;
        let out =
            String::from_utf8(add_to_reply(reply, Dialect::Gemini, &carried).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"candidates":[],"usageMetadata":{"promptTokenCount":18100,"candidatesTokenCount":42,"totalTokenCount":18142,"cachedContentTokenCount":8192},"modelVersion":"m"}"#
        );
        assert_eq!(
            of_reply(reply, Dialect::Gemini).unwrap()["promptTokenCount"],
            9100
        );
        assert_eq!(of_reply(reply, Dialect::OpenAi), None);
    }

    #[test]
    fn no_carried_rounds_leave_the_reply_alone() {
        assert_eq!(
            add_to_reply(
                br#"{"usage":{"input_tokens":1}}"#,
                Dialect::OpenAi,
                &UsageSum::default()
            ),
            None
        );
        let mut carried = UsageSum::default();
        carried.add(&json!({"input_tokens": 1}));
        assert_eq!(add_to_reply(b"not json", Dialect::OpenAi, &carried), None);
        assert_eq!(
            add_to_reply(br#"{"no":"usage"}"#, Dialect::OpenAi, &carried),
            None
        );
    }
}
