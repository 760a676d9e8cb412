//! A bounded read of a document's opening, for naming a conversation before its body is parsed.

use super::{NoRecord, Span, key_is, scan_string, scan_value, skip_ws};

/// Where a document's opening ends: the members of its top-level object before the array under
/// `key`, then that array's elements up to the first one `last` accepts (or `max` of them),
/// validated on the way; the rest is not read. `None` when the document does not open that way
/// (another shape, an empty array, invalid JSON). A bounded read for naming a conversation
/// before parsing its body: the opening is what every turn of it repeats.
pub fn opening_end(
    text: &str,
    key: &str,
    max: usize,
    last: impl Fn(Span) -> bool,
) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut r = NoRecord(String::new());
    let mut cur = skip_ws(bytes, 0);
    if bytes.get(cur) != Some(&b'{') {
        return None;
    }
    cur = skip_ws(bytes, cur + 1);
    loop {
        if bytes.get(cur) != Some(&b'"') {
            return None;
        }
        let key_end = scan_string(text, cur, &mut r).ok()?;
        let is_array = key_is(text, Span::new(cur, key_end), key);
        cur = skip_ws(bytes, key_end);
        if bytes.get(cur) != Some(&b':') {
            return None;
        }
        let value = skip_ws(bytes, cur + 1);
        if is_array && bytes.get(value) == Some(&b'[') {
            let mut at = skip_ws(bytes, value + 1);
            for _ in 0..max {
                let end = scan_value(text, at, 1, &mut r).ok()?;
                if last(Span::new(at, end)) {
                    return Some(end);
                }
                at = skip_ws(bytes, end);
                if bytes.get(at) != Some(&b',') {
                    return Some(end);
                }
                at = skip_ws(bytes, at + 1);
            }
            return Some(at);
        }
        let end = scan_value(text, value, 0, &mut r).ok()?;
        cur = skip_ws(bytes, end);
        if bytes.get(cur) != Some(&b',') {
            return None;
        }
        cur = skip_ws(bytes, cur + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> impl Fn(Span) -> bool + '_ {
        move |span| super::super::get(text, span, "role").is_some_and(|r| r.of(text) == "\"user\"")
    }

    #[test]
    fn the_opening_ends_after_the_first_user_message() {
        let text = r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"task"},{"role":"assistant","content":"x"}],"tools":[]}"#;
        let end = opening_end(text, "messages", 4, user(text)).unwrap();
        assert!(text[..end].ends_with(r#""content":"task"}"#));
        // At most `max` entries: the second is never reached with a bound of one.
        let end = opening_end(text, "messages", 1, user(text)).unwrap();
        assert!(text[..end].ends_with(r#"{"role":"system","content":"s"},"#));
        // A transcript of one entry that is not a user message ends with it.
        let text = r#"{"messages":[{"role":"system","content":"s"}]}"#;
        assert_eq!(
            opening_end(text, "messages", 4, user(text)),
            Some(text.len() - 2)
        );
    }

    #[test]
    fn a_body_that_does_not_open_with_a_transcript_has_no_opening() {
        for text in [
            r#"{"messages":[]}"#,
            r#"{"model":"m"}"#,
            r#"{"model":"m","messages":"hi"}"#,
            r#"{"model":,"messages":[{"role":"user"}]}"#,
            r#"[{"role":"user"}]"#,
            r#"{"model":"m" "messages":[{"role":"user"}]}"#,
        ] {
            assert_eq!(opening_end(text, "messages", 4, user(text)), None, "{text}");
        }
    }
}
