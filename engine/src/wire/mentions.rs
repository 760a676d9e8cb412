//! Whether a body mentions a few fixed strings anywhere, looked for once per body and, in a
//! body that resumed, only past the bytes it shares with the last one.
//!
//! The tracker asks of every turn whether the body says `"cache_control"` (an Anthropic body
//! asks for caching only with a breakpoint) and `"1h"` or `"24h"` (a longer cache lifetime).
//! A body that has none of them was searched end to end, twice, every turn: 2% of a growing
//! session's turn on the hop. The bytes a resumed parse proved identical to the last body
//! (`prefix::Seen::proven`) hold the same first occurrence, or none, so only what follows
//! them is searched; the answer is the one a search of the whole body gives.

use std::sync::OnceLock;

/// A string the hosts look for anywhere in a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mention {
    /// `"cache_control"`: an Anthropic breakpoint (or the words, in a text).
    CacheControl,
    /// `"1h"`: Anthropic's one-hour cache lifetime.
    OneHour,
    /// `"24h"`: OpenAI's extended prompt-cache retention.
    OneDay,
}

const MENTIONS: usize = 3;

impl Mention {
    /// Every mention, in the order [`Found`] keeps them.
    pub const ALL: [Mention; MENTIONS] = [Mention::CacheControl, Mention::OneHour, Mention::OneDay];

    fn needle(self) -> &'static [u8] {
        match self {
            Mention::CacheControl => b"\"cache_control\"",
            Mention::OneHour => b"\"1h\"",
            Mention::OneDay => b"\"24h\"",
        }
    }
}

/// Where each mention first occurs in one body: `None` not looked for, `Some(None)` absent.
pub(super) type Found = [Option<Option<usize>>; MENTIONS];

/// A body's mentions, found when first asked for.
#[derive(Debug, Clone, Default)]
pub(super) struct Mentions {
    /// Bytes at the start of this body proven identical to the body `earlier` was found in.
    proven: usize,
    earlier: Found,
    found: [OnceLock<Option<usize>>; MENTIONS],
}

impl Mentions {
    /// The mentions of a body whose first `proven` bytes are those of the body `earlier` was
    /// found in.
    pub(super) fn resuming(proven: usize, earlier: Found) -> Mentions {
        Mentions {
            proven,
            earlier,
            found: Default::default(),
        }
    }

    /// Where `mention` first occurs in `body` (the body these are the mentions of).
    pub(super) fn first(&self, body: &[u8], mention: Mention) -> Option<usize> {
        let slot = mention as usize;
        *self.found[slot].get_or_init(|| {
            let needle = mention.needle();
            let from = match self.earlier[slot] {
                // Wholly inside the proven bytes, so here too, and nothing before it.
                Some(Some(at)) if at + needle.len() <= self.proven => return Some(at),
                // None wholly inside the proven bytes: the first one ends past them.
                Some(_) => self.proven.saturating_sub(needle.len() - 1),
                None => 0,
            };
            let from = from.min(body.len());
            memchr::memmem::find(&body[from..], needle).map(|at| from + at)
        })
    }

    /// What was found, for the next body to resume from.
    pub(super) fn found(&self) -> Found {
        std::array::from_fn(|slot| self.found[slot].get().copied())
    }
}

/// A cache of what the body says: no part of a body's equality.
impl PartialEq for Mentions {
    fn eq(&self, _: &Mentions) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(body: &[u8], mention: Mention) -> Option<usize> {
        memchr::memmem::find(body, mention.needle())
    }

    /// Every split of `before` and `after` into a proven prefix: the resumed answer is the
    /// whole search's, for each mention.
    fn agrees(before: &[u8], after: &[u8]) {
        let common = before.iter().zip(after).take_while(|(a, b)| a == b).count();
        for mention in Mention::ALL {
            let last = Mentions::default();
            last.first(before, mention);
            for proven in 0..=common {
                let next = Mentions::resuming(proven, last.found());
                assert_eq!(
                    next.first(after, mention),
                    whole(after, mention),
                    "{mention:?} proven {proven}: {:?} -> {:?}",
                    String::from_utf8_lossy(before),
                    String::from_utf8_lossy(after),
                );
            }
        }
    }

    #[test]
    fn a_resumed_search_finds_what_a_whole_one_does() {
        let cases: [(&[u8], &[u8]); 7] = [
            // In the shared bytes both times.
            (
                br#"{"a":"1h","cache_control":1}"#,
                br#"{"a":"1h","cache_control":1,"b":2}"#,
            ),
            // Absent before, new after.
            (
                br#"{"m":[1]}"#,
                br#"{"m":[1,{"cache_control":{"ttl":"1h"}}]}"#,
            ),
            // Absent both times.
            (br#"{"m":[1]}"#, br#"{"m":[1,2,3]}"#),
            // Straddling the end of the shared bytes.
            (br#"{"x":"cache_contro"}"#, br#"{"x":"cache_control"}"#),
            (br#"{"ttl":"1x"}"#, br#"{"ttl":"1h"}"#),
            // Found before past the shared bytes, gone now.
            (br#"{"a":1,"b":"24h"}"#, br#"{"a":1,"b":"25h"}"#),
            // A later one after an earlier one the edit removed.
            (br#"{"a":"24h","b":"24h"}"#, br#"{"a":"2Xh","b":"24h"}"#),
        ];
        for (before, after) in cases {
            agrees(before, after);
        }
    }

    #[test]
    fn a_body_not_resumed_is_searched_whole_and_once() {
        let body = br#"{"system":[{"cache_control":{"type":"ephemeral","ttl":"1h"}}]}"#;
        let mentions = Mentions::default();
        assert_eq!(
            mentions.first(body, Mention::OneHour),
            whole(body, Mention::OneHour)
        );
        assert_eq!(mentions.first(body, Mention::OneDay), None);
        let one_hour = whole(body, Mention::OneHour);
        assert!(one_hour.is_some());
        assert_eq!(mentions.found(), [None, Some(one_hour), Some(None)]);
    }
}
