//! Reads the provider's prompt-cache report off a response as it streams past, unbuffered.
//!
//! The tracker checks its cold prediction against what the provider says it cached
//! (`cache_read_input_tokens` / `cache_creation_input_tokens` from Anthropic,
//! `prompt_tokens_details.cached_tokens` from OpenAI). The numbers sit in the JSON body or in
//! SSE events; rather than parse either, each chunk is scanned for the three field names as it
//! is relayed, and the largest value of each is reported once, when the body is dropped.

use memchr::memmem;
use modes::CacheUsage;

const READ_FIELDS: [&[u8]; 2] = [b"\"cache_read_input_tokens\"", b"\"cached_tokens\""];
const WRITE_FIELD: &[u8] = b"\"cache_creation_input_tokens\"";
/// Bytes kept from the end of one chunk, so a field split across two chunks is still found.
const CARRY: usize = 96;

/// Scans chunks for cache usage and hands the result to `report` when dropped.
pub struct UsageScanner<F: FnOnce(CacheUsage)> {
    read: Option<u64>,
    written: Option<u64>,
    carry: Vec<u8>,
    report: Option<F>,
}

impl<F: FnOnce(CacheUsage)> UsageScanner<F> {
    pub fn new(report: F) -> UsageScanner<F> {
        UsageScanner {
            read: None,
            written: None,
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
        for field in READ_FIELDS {
            for value in values(bytes, field) {
                self.read = Some(self.read.map_or(value, |r| r.max(value)));
            }
        }
        for value in values(bytes, WRITE_FIELD) {
            self.written = Some(self.written.map_or(value, |w| w.max(value)));
        }
    }
}

impl<F: FnOnce(CacheUsage)> Drop for UsageScanner<F> {
    fn drop(&mut self) {
        // No report at all (an error body, a cut stream) says nothing about the cache.
        if let (Some(read), Some(report)) = (self.read, self.report.take()) {
            report(CacheUsage {
                read,
                written: self.written,
            });
        }
    }
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

    fn scan(chunks: &[&[u8]]) -> Option<CacheUsage> {
        let seen = Arc::new(Mutex::new(None));
        let sink = seen.clone();
        let mut scanner = UsageScanner::new(move |u| *sink.lock().unwrap() = Some(u));
        for c in chunks {
            scanner.scan(c);
        }
        drop(scanner);
        *seen.lock().unwrap()
    }

    #[test]
    fn reads_anthropic_usage_split_across_chunks() {
        let event = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":48211,\"output_tokens\":1}}}\n\n";
        let (a, b) = event.split_at(100);
        assert_eq!(
            scan(&[a, b]),
            Some(CacheUsage {
                read: 48211,
                written: Some(0)
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
                written: None
            })
        );
        assert_eq!(scan(&[br#"{"error":{"message":"overloaded"}}"#]), None);
    }
}
