//! The deletion-only proof: a model-written result is accepted only if it could have been made
//! from the input by deleting.
//!
//! Text: the output is an in-order character subsequence of the input. JSON (both sides parse
//! as JSON): structurally, arrays are ordered sub-lists of contained elements, objects key
//! subsets with contained values, strings subsequences, numbers, booleans and null equal. The
//! model may trim anything, but provably cannot fabricate, reorder or reword.

use serde_json::Value;

/// Whether `output` can be obtained from `input` by deletions only.
pub fn deletion_only(input: &str, output: &str) -> bool {
    let (trimmed_in, trimmed_out) = (input.trim_start(), output.trim_start());
    if trimmed_in.starts_with(['{', '['])
        && trimmed_out.starts_with(['{', '['])
        && let (Ok(a), Ok(b)) = (
            serde_json::from_str::<Value>(input),
            serde_json::from_str::<Value>(output),
        )
    {
        return value_contained(&b, &a);
    }
    subsequence(output, input)
}

/// Whether `needle`'s characters appear in `haystack` in order.
pub fn subsequence(needle: &str, haystack: &str) -> bool {
    let mut rest = haystack.chars();
    needle.chars().all(|c| rest.any(|h| h == c))
}

fn value_contained(part: &Value, whole: &Value) -> bool {
    match (part, whole) {
        (Value::Array(items), Value::Array(all)) => {
            let mut rest = all.iter();
            items
                .iter()
                .all(|item| rest.any(|w| value_contained(item, w)))
        }
        (Value::Object(fields), Value::Object(all)) => fields
            .iter()
            .all(|(k, v)| all.get(k).is_some_and(|w| value_contained(v, w))),
        (Value::String(s), Value::String(t)) => subsequence(s, t),
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_deletions_pass_and_fabrications_fail() {
        let input = "line one\nerror: disk full at /var/lib\nline three";
        assert!(deletion_only(input, "error: disk full"));
        assert!(deletion_only(input, ""));
        assert!(
            !deletion_only(input, "error: disk is full"),
            "an added word"
        );
        assert!(!deletion_only(input, "line three\nline one"), "reordered");
    }

    #[test]
    fn json_is_checked_structurally() {
        let input = r#"{"items":[{"id":1,"ok":true},{"id":2,"ok":false,"msg":"timeout"}],"n":2}"#;
        assert!(deletion_only(
            input,
            r#"{"items":[{"id":2,"msg":"timeout"}]}"#
        ));
        assert!(
            deletion_only(input, r#"{"items": [ {"id": 2} ]}"#),
            "whitespace is free"
        );
        assert!(
            !deletion_only(input, r#"{"items":[{"id":3}]}"#),
            "a changed number"
        );
        assert!(
            !deletion_only(input, r#"{"items":[{"id":2},{"id":1}]}"#),
            "reordered"
        );
        assert!(!deletion_only(input, r#"{"count":2}"#), "a new key");
    }
}
