//! The cache keep-alive's rule (`cache.keepalive`, off by default): which quiet sessions get a
//! ping, when, and what a ping is worth. Pure: the proxy's keeper sends the pings on the wall
//! clock, replay bills them on the recorded one.
//!
//! The economics, in Anthropic's prices relative to fresh input (read 0.1, write 1.25): a ping
//! re-reads a prefix of P tokens (0.1 P). If the session comes back while a ping kept the entry
//! alive, its turn reads the prefix instead of writing it again: (1.25 − 0.1) P saved. So a ping
//! pays when the chance of coming back exceeds 0.1 / 1.15 ≈ 8.7%. Who comes back cannot be told
//! from outside (in the reference's 41 days of production traffic learned policies lost to a
//! fixed rule, and a model's accuracy correlated negatively with money), so the rule is that
//! study's winner, with gates that follow from the prices rather than from fitting:
//! - only where a miss costs a write premium: the Anthropic dialect (OpenAI and Gemini bill no
//!   cache write, so a ping there could only cost);
//! - only the five-minute entry (a request that asks for the hour keeps itself alive);
//! - not after a session's first turn (in the reference, 45.7% of pings went to sessions of one
//!   request);
//! - not with extended thinking on (a one-token answer cannot carry a thinking budget, and
//!   changing the thinking settings drops the cached messages);
//! - a prefix of at least `min_prefix_tokens`, a ping of at most `max_usd_per_ping`;
//! - at most `max_pings` pings per quiet gap, `idle` apart.

use std::time::Duration;

use engine::config::KeepAlive;
use engine::wire::Dialect;
use engine::wire::json;
use serde::Serialize;

/// Why a session gets no ping after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// A dialect whose provider bills no cache write.
    Dialect,
    /// The session's first turn.
    FirstTurn,
    /// The request asks for the hour-long entry, which keeps itself.
    Hour,
    /// Extended thinking on.
    Thinking,
    /// A prefix under `min_prefix_tokens`.
    SmallPrefix,
    /// A ping over `max_usd_per_ping`.
    Costly,
}

/// The turn a ping would follow.
#[derive(Debug, Clone, Copy)]
pub struct After {
    pub dialect: Dialect,
    /// The session's turns so far, this one included.
    pub turns: u64,
    /// What the provider cached of the request (read plus written), which a ping reads again.
    pub prefix_tokens: u64,
    pub thinking: bool,
    /// The request asks for the hour-long entry ([`asks_for_the_hour`]).
    pub hour: bool,
    /// One ping's cost at the model's list price, when the model has one.
    pub ping_usd: Option<f64>,
}

/// Whether the session is worth a ping after `turn`.
pub fn eligible(rule: &KeepAlive, turn: &After) -> Result<(), Skip> {
    if turn.dialect != Dialect::Anthropic {
        Err(Skip::Dialect)
    } else if turn.turns < 2 {
        Err(Skip::FirstTurn)
    } else if turn.hour {
        Err(Skip::Hour)
    } else if turn.thinking {
        Err(Skip::Thinking)
    } else if turn.prefix_tokens < rule.min_prefix_tokens {
        Err(Skip::SmallPrefix)
    } else if turn.ping_usd.is_some_and(|usd| usd > rule.max_usd_per_ping) {
        Err(Skip::Costly)
    } else {
        Ok(())
    }
}

/// What one quiet gap came to under the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gap {
    /// Pings sent while the session was quiet.
    pub pings: u32,
    /// The session came back after its entry would have expired, on an entry a ping kept: its
    /// turn reads what it would have written.
    pub kept: bool,
}

/// The pings of a quiet gap of `quiet` after a turn whose entry lives `ttl`: ping i goes out at
/// i × idle while the session is still quiet, up to `max_pings`; each keeps the entry `ttl` from
/// when it lands.
pub fn gap(rule: &KeepAlive, quiet: Duration, ttl: Duration) -> Gap {
    if ttl > KeepAlive::LIFETIME || rule.idle.is_zero() {
        return Gap::default();
    }
    let pings = (1..=rule.max_pings)
        .take_while(|&i| rule.idle * i < quiet)
        .count() as u32;
    let kept = pings > 0 && quiet > ttl && quiet <= rule.idle * pings + ttl;
    Gap { pings, kept }
}

/// A ping's request: the turn's body as forwarded, asking for one token and no stream. Only
/// those two values change, in place: every other byte is the turn's, so the prompt the
/// provider caches is the same (re-serialising would reorder keys, and Anthropic's cache keys on
/// the order of a tool call's input). `stream` is set only where the turn sent it (absent means
/// no stream); `max_tokens` is added where it was missing. `None` for a body that is not a
/// non-empty JSON object.
pub fn ping_body(forwarded: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(forwarded).ok()?;
    let root = json::parse_document(text).ok()?;
    let object = root.of(text);
    if !object.starts_with('{') || object[1..].trim_start().starts_with('}') {
        return None;
    }
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for (key, value) in [("max_tokens", "1"), ("stream", "false")] {
        match json::get(text, root, key) {
            Some(span) => edits.push((span.start, span.end, value.to_owned())),
            None if key == "max_tokens" => {
                let at = root.start + 1;
                edits.push((at, at, format!("\"{key}\":{value},")));
            }
            None => {}
        }
    }
    edits.sort_by_key(|&(start, _, _)| std::cmp::Reverse(start));
    let mut out = text.to_owned();
    for (start, end, value) in edits {
        out.replace_range(start..end, &value);
    }
    Some(out.into_bytes())
}

/// Whether a request asks for the hour-long entry (`"ttl": "1h"`): a scan, as the tracker reads
/// it (`tracker::asked_ttl`), so a stray `"1h"` in a message only forgoes pings.
pub fn asks_for_the_hour(body: &[u8]) -> bool {
    body.windows(4).any(|w| w == b"\"1h\"")
}

/// Whether an Anthropic body turns extended thinking on (`"thinking": {"type": "enabled"}`).
pub fn thinking_enabled(body: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(body) else {
        return false;
    };
    let Ok(root) = json::parse_document(text) else {
        return false;
    };
    json::get(text, root, "thinking")
        .and_then(|thinking| json::get(text, thinking, "type"))
        .is_some_and(|kind| kind.of(text) == "\"enabled\"")
}

/// What the keep-alive did and what it was worth, in input-token equivalents at the cost
/// model's relative prices (live: in US dollars as well, where the model has a list price).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Ledger {
    pub pings: u64,
    /// Quiet gaps that got at least one ping.
    pub gaps_pinged: u64,
    /// Gaps the session came back from on an entry a ping kept.
    pub kept: u64,
    /// Pings the provider answered with a cache write instead of a read: the entry had gone.
    pub wrote_instead_of_read: u64,
    /// Prefix tokens the pings read.
    pub ping_tokens: u64,
    /// Prefix tokens the kept turns read instead of writing.
    pub kept_tokens: u64,
}

impl Ledger {
    /// Adds one gap that had `pings` pings of `prefix` tokens each, and whether it was kept
    /// (the returning turn read `kept_tokens`).
    pub fn add_gap(&mut self, gap: Gap, prefix: u64, kept_tokens: u64) {
        if gap.pings == 0 {
            return;
        }
        self.pings += u64::from(gap.pings);
        self.gaps_pinged += 1;
        self.ping_tokens += prefix * u64::from(gap.pings);
        if gap.kept {
            self.kept += 1;
            self.kept_tokens += kept_tokens;
        }
    }

    pub fn add(&mut self, other: &Ledger) {
        self.pings += other.pings;
        self.gaps_pinged += other.gaps_pinged;
        self.kept += other.kept;
        self.wrote_instead_of_read += other.wrote_instead_of_read;
        self.ping_tokens += other.ping_tokens;
        self.kept_tokens += other.kept_tokens;
    }

    /// The pings' cost: their prefixes read.
    pub fn spent(&self, read: f64) -> f64 {
        self.ping_tokens as f64 * read
    }

    /// The kept turns' saving: their prefixes read instead of written.
    pub fn saved(&self, read: f64, write: f64) -> f64 {
        self.kept_tokens as f64 * (write - read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> KeepAlive {
        engine::config::Config::parse("pipeline: []\ncache: { keepalive: true }\n")
            .unwrap()
            .cache
            .keepalive()
            .unwrap()
    }

    const TTL: Duration = KeepAlive::LIFETIME;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn two_pings_keep_a_gap_of_up_to_fourteen_minutes() {
        let rule = rule();
        // Back before the first ping: nothing sent, nothing to keep.
        assert_eq!(gap(&rule, secs(200), TTL), Gap::default());
        // Back after the first ping but inside the lifetime anyway: a ping spent for nothing.
        assert_eq!(
            gap(&rule, secs(290), TTL),
            Gap {
                pings: 1,
                kept: false
            }
        );
        // Back after the entry would have gone, while one ping kept it.
        assert_eq!(
            gap(&rule, secs(400), TTL),
            Gap {
                pings: 1,
                kept: true
            }
        );
        // Two pings: kept until 2 × 280 + 300 s.
        assert_eq!(
            gap(&rule, secs(860), TTL),
            Gap {
                pings: 2,
                kept: true
            }
        );
        // Longer: both pings spent, the entry gone anyway.
        assert_eq!(
            gap(&rule, secs(861), TTL),
            Gap {
                pings: 2,
                kept: false
            }
        );
        assert_eq!(
            gap(&rule, secs(7200), TTL),
            Gap {
                pings: 2,
                kept: false
            }
        );
        // An hour's entry keeps itself.
        assert_eq!(gap(&rule, secs(900), secs(3600)), Gap::default());
    }

    #[test]
    fn only_a_session_worth_it_is_pinged() {
        let rule = rule();
        let turn = After {
            dialect: Dialect::Anthropic,
            turns: 3,
            prefix_tokens: 30_000,
            thinking: false,
            hour: false,
            ping_usd: Some(0.01),
        };
        assert_eq!(eligible(&rule, &turn), Ok(()));
        let skip = |change: fn(&mut After)| {
            let mut turn = turn;
            change(&mut turn);
            eligible(&rule, &turn).unwrap_err()
        };
        assert_eq!(skip(|t| t.dialect = Dialect::OpenAi), Skip::Dialect);
        assert_eq!(skip(|t| t.turns = 1), Skip::FirstTurn);
        assert_eq!(skip(|t| t.thinking = true), Skip::Thinking);
        assert_eq!(skip(|t| t.hour = true), Skip::Hour);
        assert_eq!(skip(|t| t.prefix_tokens = 19_999), Skip::SmallPrefix);
        assert_eq!(skip(|t| t.ping_usd = Some(0.26)), Skip::Costly);
        // An unpriced model is judged on its prefix alone.
        let unpriced = After {
            ping_usd: None,
            ..turn
        };
        assert_eq!(eligible(&rule, &unpriced), Ok(()));
    }

    #[test]
    fn a_ping_asks_for_one_token_and_keeps_every_other_byte() {
        // Keys out of order, inside and out, and spacing: all of it stays.
        let body = r#"{"model":"claude-sonnet-4-5", "max_tokens": 32000,"stream":true,"system":"s","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"bash","input":{"z":1,"a":{"y":2,"b":3}}}]}]}"#;
        let ping = String::from_utf8(ping_body(body.as_bytes()).unwrap()).unwrap();
        let expected = body
            .replace(r#""max_tokens": 32000"#, r#""max_tokens": 1"#)
            .replace(r#""stream":true"#, r#""stream":false"#);
        assert_eq!(ping, expected);
        // A missing `max_tokens` is added at the front; a missing `stream` is no stream already.
        let bare = r#"{"model":"m","messages":[]}"#;
        let ping = String::from_utf8(ping_body(bare.as_bytes()).unwrap()).unwrap();
        assert_eq!(ping, r#"{"max_tokens":1,"model":"m","messages":[]}"#);
        assert_eq!(ping_body(b"[1]"), None);
        assert_eq!(ping_body(b"{ }"), None);
        assert!(asks_for_the_hour(
            br#"{"cache_control":{"type":"ephemeral","ttl":"1h"}}"#
        ));
        assert!(!asks_for_the_hour(
            br#"{"cache_control":{"type":"ephemeral"}}"#
        ));
        assert!(thinking_enabled(
            br#"{"thinking":{"type":"enabled","budget_tokens":1024},"messages":[]}"#
        ));
        assert!(!thinking_enabled(
            br#"{"thinking":{"type":"disabled"},"messages":[]}"#
        ));
        assert!(!thinking_enabled(br#"{"messages":[]}"#));
    }

    #[test]
    fn the_ledger_prices_pings_against_the_writes_they_spared() {
        let mut ledger = Ledger::default();
        ledger.add_gap(
            Gap {
                pings: 2,
                kept: true,
            },
            50_000,
            50_000,
        );
        ledger.add_gap(
            Gap {
                pings: 2,
                kept: false,
            },
            40_000,
            0,
        );
        ledger.add_gap(Gap::default(), 40_000, 0);
        assert_eq!((ledger.pings, ledger.gaps_pinged, ledger.kept), (4, 2, 1));
        assert!((ledger.spent(0.1) - 18_000.0).abs() < 1e-6);
        assert!((ledger.saved(0.1, 1.25) - 57_500.0).abs() < 1e-6);
    }
}
