//! Reads the provider's prompt-cache report off a response as it streams past, unbuffered.
//!
//! The tracker checks its cold prediction against what the provider says it cached
//! (`cache_read_input_tokens` / `cache_creation_input_tokens` from Anthropic,
//! `prompt_tokens_details.cached_tokens` from OpenAI, `usageMetadata.cachedContentTokenCount`
//! from Gemini), and the dashboard prices the request from
//! the input and output counts beside them. The numbers sit in the JSON body or in SSE events;
//! rather than parse either, each chunk is scanned for the field names as it is relayed, and the
//! largest value of each is reported once, when the body is dropped (a streamed count grows, so
//! the largest is the last).

use dashboard::ReplyUsage;
use memchr::memmem;
use modes::CacheUsage;

const READ_FIELDS: [&[u8]; 3] = [
    b"\"cache_read_input_tokens\"",
    b"\"cached_tokens\"",
    b"\"cachedContentTokenCount\"",
];
const WRITE_FIELD: &[u8] = b"\"cache_creation_input_tokens\"";
/// Anthropic and Responses `input_tokens`, chat completions' `prompt_tokens`, Gemini's
/// `promptTokenCount` (which, like OpenAI's, includes the cached part).
const GEMINI_INPUT: &[u8] = b"\"promptTokenCount\"";
const INPUT_FIELDS: [&[u8]; 3] = [b"\"input_tokens\"", b"\"prompt_tokens\"", GEMINI_INPUT];
const OUTPUT_FIELDS: [&[u8]; 3] = [
    b"\"output_tokens\"",
    b"\"completion_tokens\"",
    b"\"candidatesTokenCount\"",
];
/// The model a reply names: `model`, or Gemini's `modelVersion`.
const MODEL_FIELDS: [&[u8]; 2] = [b"\"model\"", b"\"modelVersion\""];
/// Model names longer than this are not model names.
const MAX_MODEL: usize = 120;
/// Bytes kept from the end of one chunk, so a field split across two chunks is still found.
const CARRY: usize = 96;

/// The provider's cache report in `usage`, when it made one: a reply without a cache read
/// count (an error body, a cut stream) says nothing about the cache. Its fresh input is
/// Anthropic's `input_tokens`, which leaves the cache out; OpenAI's and Gemini's prompt counts
/// include the cached part (and report no writes, which tells the shapes apart).
pub fn cache_report(usage: &ReplyUsage) -> Option<CacheUsage> {
    let read = usage.cache_read?;
    let input = usage.input.unwrap_or(0);
    Some(CacheUsage {
        read,
        written: usage.cache_write,
        fresh: match usage.cache_write {
            Some(_) => input,
            None => input.saturating_sub(read),
        },
    })
}

/// Scans chunks for usage and hands what it found to `report` when dropped (always, with
/// `None` for what the reply never said).
pub struct UsageScanner<F: FnOnce(ReplyUsage)> {
    found: ReplyUsage,
    /// A Gemini count was seen: Gemini leaves `cachedContentTokenCount` out when nothing was
    /// read from its cache, so its absence then reports zero.
    gemini: bool,
    carry: Vec<u8>,
    report: Option<F>,
}

impl<F: FnOnce(ReplyUsage)> UsageScanner<F> {
    pub fn new(report: F) -> UsageScanner<F> {
        UsageScanner {
            found: ReplyUsage::default(),
            gemini: false,
            carry: Vec::new(),
            report: Some(report),
        }
    }

    pub fn scan(&mut self, chunk: &[u8]) {
        // The seam: the tail of the previous chunk and the head of this one.
        let mut seam = std::mem::take(&mut self.carry);
        seam.extend_from_slice(&chunk[..chunk.len().min(CARRY)]);
        self.scan_slice(&seam);
        self.scan_slice(chunk);
        let tail = &chunk[chunk.len().saturating_sub(CARRY)..];
        self.carry = tail.to_vec();
    }

    fn scan_slice(&mut self, bytes: &[u8]) {
        let found = &mut self.found;
        let slots: [(&[&[u8]], &mut Option<u64>); 4] = [
            (&READ_FIELDS, &mut found.cache_read),
            (&[WRITE_FIELD], &mut found.cache_write),
            (&INPUT_FIELDS, &mut found.input),
            (&OUTPUT_FIELDS, &mut found.output),
        ];
        for (fields, slot) in slots {
            for field in fields {
                for value in values(bytes, field) {
                    *slot = Some(slot.map_or(value, |v| v.max(value)));
                }
            }
        }
        self.gemini |= memmem::find(bytes, GEMINI_INPUT).is_some();
        if self.found.model.is_none() {
            self.found.model = MODEL_FIELDS.iter().find_map(|field| model(bytes, field));
        }
    }
}

impl<F: FnOnce(ReplyUsage)> Drop for UsageScanner<F> {
    fn drop(&mut self) {
        if let Some(report) = self.report.take() {
            if self.gemini && self.found.input.is_some() {
                self.found.cache_read.get_or_insert(0);
            }
            report(std::mem::take(&mut self.found));
        }
    }
}

/// The first complete `"model": "NAME"` in `bytes` (providers name the model near the start of
/// a reply, and every stream's first event carries it).
fn model(bytes: &[u8], field: &[u8]) -> Option<String> {
    memmem::find_iter(bytes, field).find_map(|at| {
        let rest = &bytes[at + field.len()..];
        let rest = rest
            .trim_ascii_start()
            .strip_prefix(b":")?
            .trim_ascii_start();
        let rest = rest.strip_prefix(b"\"")?;
        let end = rest.iter().take(MAX_MODEL).position(|b| *b == b'"')?;
        let name = std::str::from_utf8(&rest[..end]).ok()?;
        (!name.is_empty() && !name.contains('\\')).then(|| name.to_owned())
    })
}

/// Every complete number following `"field":` in `bytes`.
fn values<'a>(bytes: &'a [u8], field: &'a [u8]) -> impl Iterator<Item = u64> + 'a {
    memmem::find_iter(bytes, field).filter_map(move |at| {
        let rest = &bytes[at + field.len()..];
        let rest = rest.strip_prefix(b" ").unwrap_or(rest);
        let rest = rest.strip_prefix(b":")?;
        let rest = rest.trim_ascii_start();
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        // A number running to the end of the slice may continue in the next chunk.
        if digits == 0 || digits == rest.len() {
            return None;
        }
        std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn scan_usage(chunks: &[&[u8]]) -> ReplyUsage {
        let seen = Arc::new(Mutex::new(None));
        let sink = seen.clone();
        let mut scanner = UsageScanner::new(move |u| *sink.lock().unwrap() = Some(u));
        for c in chunks {
            scanner.scan(c);
        }
        drop(scanner);
        let usage = seen.lock().unwrap().take();
        usage.expect("reported on drop")
    }

    fn scan(chunks: &[&[u8]]) -> Option<CacheUsage> {
        cache_report(&scan_usage(chunks))
    }

    #[test]
    fn reads_input_and_output_counts_as_a_stream_grows_them() {
        let start = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":48211,\"output_tokens\":1}}}\n\n";
        let delta = b"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":417}}\n\n";
        assert_eq!(
            scan_usage(&[start, delta]),
            ReplyUsage {
                input: Some(12),
                output: Some(417),
                cache_read: Some(48211),
                cache_write: Some(300),
                model: None,
            }
        );
        let chat = br#"{"usage":{"prompt_tokens":2006,"completion_tokens":55,"completion_tokens_details":{"reasoning_tokens":0},"prompt_tokens_details":{"cached_tokens":1920}}}"#;
        let usage = scan_usage(&[chat]);
        assert_eq!((usage.input, usage.output), (Some(2006), Some(55)));
        let azure = br#"{"id":"chatcmpl-1","object":"chat.completion","model": "gpt-4o-2024-08-06","choices":[]}"#;
        let (a, b) = azure.split_at(50);
        assert_eq!(
            scan_usage(&[a, b]).model.as_deref(),
            Some("gpt-4o-2024-08-06")
        );
    }

    /// Gemini restates its counts on every chunk and leaves the cache count out when it read
    /// nothing from the cache: that is a report of zero, not silence.
    #[test]
    fn reads_gemini_usage_metadata() {
        let first = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hi\"}],\"role\": \"model\"}}],\"usageMetadata\": {\"promptTokenCount\": 5210,\"candidatesTokenCount\": 1,\"totalTokenCount\": 5211},\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n";
        let last = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"!\"}],\"role\": \"model\"},\"finishReason\": \"STOP\"}],\"usageMetadata\": {\"promptTokenCount\": 5210,\"candidatesTokenCount\": 12,\"totalTokenCount\": 5222}}\r\n\r\n";
        let usage = scan_usage(&[first, last]);
        assert_eq!(
            (
                usage.input,
                usage.output,
                usage.cache_read,
                usage.model.as_deref()
            ),
            (Some(5210), Some(12), Some(0), Some("gemini-2.5-pro"))
        );
        let cached = br#"{"usageMetadata": {"promptTokenCount": 9000, "cachedContentTokenCount": 8192, "candidatesTokenCount": 40}}"#;
        assert_eq!(
            scan(&[cached]),
            Some(CacheUsage {
                read: 8192,
                written: None,
                fresh: 9000 - 8192,
            })
        );
    }

    #[test]
    fn reads_anthropic_usage_split_across_chunks() {
        let event = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":48211,\"output_tokens\":1}}}\n\n";
        let (a, b) = event.split_at(100);
        assert_eq!(
            scan(&[a, b]),
            Some(CacheUsage {
                read: 48211,
                written: Some(0),
                fresh: 12,
            })
        );
    }

    #[test]
    fn reads_openai_cached_tokens_and_ignores_bodies_without_usage() {
        let body =
            br#"{"usage":{"prompt_tokens":2006,"prompt_tokens_details":{"cached_tokens": 1920}}}"#;
        assert_eq!(
            scan(&[body]),
            Some(CacheUsage {
                read: 1920,
                written: None,
                fresh: 2006 - 1920,
            })
        );
        assert_eq!(scan(&[br#"{"error":{"message":"overloaded"}}"#]), None);
    }
}
