//! The per-session tracker: the cached-prefix boundary and the cold-cache predictor.
//!
//! The provider caches a request's prefix, so what a turn may rewrite without a cache write is
//! exactly what the provider has not seen. The tracker keeps a fingerprint of every message of
//! the session's recent transcripts and, each turn, measures the longest prefix the new
//! transcript shares with one of them: messages inside it were forwarded before (and, since
//! every earlier decision is replayed, forwarded the same way), so they are the cached prefix.
//!
//! This is stricter than the reference's message count: an agent that edits or compacts its
//! history diverges at the first changed message, and the boundary moves there instead of to a
//! count that no longer describes the same messages. Several branches are kept because one
//! session key can carry interleaved transcripts (Claude Code's subagents share the session id
//! of their parent): a short subagent turn must not make the parent's history look new.
//!
//! Every error here errs towards "cached" and "warm": a missed cold turn forgoes a saving, a
//! wrong cold reading costs a cache write of the whole suffix.

use std::time::Duration;

use engine::wire::{Dialect, Mention, ParsedBody};
use serde::{Deserialize, Serialize};

/// Transcripts remembered per session.
pub const MAX_BRANCHES: usize = 4;

/// Added to the cache TTL before a turn reads cold: the provider's clock and ours differ.
pub const COLD_MARGIN: Duration = Duration::from_secs(60);

/// Anthropic's default prompt-cache lifetime.
pub const ANTHROPIC_TTL: Duration = Duration::from_secs(5 * 60);
/// Anthropic's extended lifetime (`"ttl": "1h"`), and the lifetime assumed for OpenAI, whose
/// in-memory cache is documented to last "up to an hour" (and for Gemini's implicit cache).
pub const ONE_HOUR: Duration = Duration::from_secs(60 * 60);
/// OpenAI's extended retention (`"prompt_cache_retention": "24h"`).
pub const ONE_DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest prompt-cache lifetime a request asks for, judged from its raw bytes
/// ([`ParsedBody::mentions`]).
///
/// A scan rather than a parse, because it only ever widens the TTL: a stray `"1h"` in a
/// message makes a cold turn read warm, which forgoes a saving and costs nothing.
pub fn asked_ttl(body: &ParsedBody<'_>) -> Duration {
    match body.dialect() {
        Dialect::Anthropic if body.mentions(Mention::OneHour) => ONE_HOUR,
        Dialect::Anthropic => ANTHROPIC_TTL,
        Dialect::OpenAi | Dialect::Responses if body.mentions(Mention::OneDay) => ONE_DAY,
        Dialect::OpenAi | Dialect::Responses => ONE_HOUR,
        // Gemini documents no lifetime for its implicit cache; the longest any provider keeps
        // one without being asked reads a cold turn as warm, the direction that costs nothing.
        Dialect::Gemini => ONE_HOUR,
    }
}

/// What the tracker knows about one turn, decided before the pipeline runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TurnFacts {
    /// History-rewriting offloaders may make new decisions only at or after this index.
    pub mutable_from: usize,
    /// The session's prompt cache is provably cold: opted-in components may act at depth.
    pub cold: bool,
    /// Whether an earlier turn of this session is on record. Without one the whole transcript
    /// is treated as cached (fail closed) and the turn reads warm.
    pub known: bool,
    /// Time since the previous turn, when there was one.
    pub idle: Option<Duration>,
    /// The transcript diverged from every remembered one before its end (the agent edited or
    /// compacted its history): counted as `compaction_resets`.
    pub diverged: bool,
    /// `cache.amortize` judged a depth re-write worth its cache write on this warm turn.
    pub amortized: bool,
    /// Calls the model re-issued right after their output was cut (see `retries`).
    pub retries: u32,
    /// Cut outputs this turn put back in place (see `restore`): a deliberate re-write of the
    /// cached prefix from the first of them on, like an amortized one.
    pub restored: u32,
    /// Their tokens, written whole on this turn.
    pub restored_tokens: u64,
    /// The cost guard's number for this turn: the provider's report for this request settles
    /// it, and no other turn's (see `guard`).
    pub ledger_turn: Option<LedgerTurn>,
}

impl TurnFacts {
    /// The turn re-wrote part of the cached prefix on purpose (`cache.amortize`, or an output
    /// restored in place), unless the transcript itself diverged: the provider reads less back
    /// on it, and that is the re-write's cost, not a flip.
    pub fn rewrote_prefix(&self) -> bool {
        (self.amortized || self.restored > 0) && !self.diverged
    }
}

/// A turn the provider's report settles: its number in the guard's ledger, and the expand
/// tool's declaration sluice added to its request (known only once the turn is placed, after
/// the pipeline ran; part of what the provider billed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LedgerTurn {
    pub seq: u64,
    pub declared: u64,
}

/// Tokens the provider reported caching for a turn's request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Anthropic `cache_read_input_tokens`, OpenAI `prompt_tokens_details.cached_tokens`.
    pub read: u64,
    /// Anthropic `cache_creation_input_tokens` (OpenAI does not report writes).
    pub written: Option<u64>,
    /// Input billed at the fresh price: Anthropic's `input_tokens`; OpenAI's and Gemini's
    /// prompt count less its cached part.
    pub fresh: u64,
}

/// What the session remembers about its last turn, to check the provider's answer against.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct LastTurn {
    predicted_cold: bool,
    idle_ms: Option<u64>,
    /// The request asked for caching (a `cache_control` anywhere, or an OpenAI request, which
    /// caches automatically).
    asked_caching: bool,
}

/// One remembered transcript.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Branch {
    #[serde(with = "hex_fingerprints")]
    fingerprints: Vec<u64>,
}

/// A branch's fingerprints as one string of 16 hex digits each.
///
/// The session's state is written on every turn, and a long session's branches as JSON numbers
/// were most of writing it (2% of the hop's growing arm, and the SQLite row it fills): hex is
/// fixed width, with no division per digit, and a sixth shorter. A state written as numbers
/// (before this) still reads.
mod hex_fingerprints {
    use std::fmt;

    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(prints: &[u64], to: S) -> Result<S::Ok, S::Error> {
        let mut text = Vec::with_capacity(prints.len() * 16);
        for print in prints {
            engine::hex::extend(&mut text, &print.to_be_bytes());
        }
        // Hex digits only: always UTF-8.
        to.serialize_str(std::str::from_utf8(&text).unwrap_or_default())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Vec<u64>, D::Error> {
        from.deserialize_any(Prints)
    }

    struct Prints;

    impl<'de> Visitor<'de> for Prints {
        type Value = Vec<u64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string of 16 hex digits per fingerprint, or a list of numbers")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<u64>, E> {
            if !text.len().is_multiple_of(16) {
                return Err(E::invalid_length(text.len(), &self));
            }
            (0..text.len())
                .step_by(16)
                .map(|at| {
                    text.get(at..at + 16)
                        .and_then(|digits| u64::from_str_radix(digits, 16).ok())
                        .ok_or_else(|| E::invalid_value(de::Unexpected::Str(text), &self))
                })
                .collect()
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
            let mut prints = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(print) = seq.next_element()? {
                prints.push(print);
            }
            Ok(prints)
        }
    }
}

/// Counters the tracker keeps for `/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackerCounts {
    pub turns: u64,
    pub cold_turns: u64,
    /// Turns with no earlier turn on record (first turn, restart, evicted state).
    pub unknown_boundary: u64,
    pub compaction_resets: u64,
    /// The provider reported a cache read on a turn predicted cold: the TTL was widened.
    pub cold_mispredicted: u64,
    /// Warm turns on which `cache.amortize` re-wrote part of the cached prefix.
    #[serde(default)]
    pub amortized_rewrites: u64,
}

/// Everything the session actor owns about the provider's cache for one session.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tracker {
    /// Most recently used first.
    branches: Vec<Branch>,
    /// Clock reading of the latest turn.
    last_seen_ms: Option<u64>,
    /// Longest cache lifetime this session asked for, or learned from the provider.
    ttl_ms: u64,
    /// The provider reported neither a cache read nor a write for a request that did not ask
    /// for caching: nothing of this session is cached, so every turn is cold.
    uncached: bool,
    last: LastTurn,
    /// Never read a turn cold (`sluice tune cold-cache` compares against this).
    #[serde(default)]
    never_cold: bool,
    /// A remembered transcript was dropped to stay within [`MAX_BRANCHES`]: a turn that matches
    /// none of the rest may be one of those, whose prefix the provider still caches.
    #[serde(default)]
    dropped_branches: bool,
    pub counts: TrackerCounts,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Tracker {
    /// Reads the boundary and coldness for a turn carrying `fingerprints`, and records the turn,
    /// in one call: two concurrent turns serialized by the session actor each see the other.
    pub fn begin_turn(
        &mut self,
        fingerprints: Vec<u64>,
        now: Duration,
        asked_ttl: Duration,
        asked_caching: bool,
    ) -> TurnFacts {
        self.ttl_ms = self.ttl_ms.max(millis(asked_ttl));
        let now_ms = millis(now);
        let known = !self.branches.is_empty();
        let idle = self
            .last_seen_ms
            .map(|t| Duration::from_millis(now_ms.saturating_sub(t)));
        let (best, common) = self
            .branches
            .iter()
            .enumerate()
            .map(|(i, b)| (i, common_prefix(&b.fingerprints, &fingerprints)))
            .max_by_key(|&(i, c)| (c, std::cmp::Reverse(i)))
            .unwrap_or((0, 0));
        let len = fingerprints.len();
        let ttl = Duration::from_millis(self.ttl_ms);
        let cold = !self.never_cold
            && known
            && (self.uncached || idle.is_some_and(|idle| idle >= ttl + COLD_MARGIN));
        let diverged = known
            && common < len
            && common < self.branches.get(best).map_or(0, |b| b.fingerprints.len());
        // Diverging from every remembered transcript before any of them ends, when one was
        // forgotten, could be a return to the forgotten one: treat it as cached (fail closed).
        let maybe_forgotten =
            self.dropped_branches && self.branches.iter().all(|b| common < b.fingerprints.len());
        let facts = TurnFacts {
            mutable_from: if known && !maybe_forgotten {
                common
            } else {
                len
            },
            cold,
            known,
            idle,
            diverged,
            amortized: false,
            retries: 0,
            restored: 0,
            restored_tokens: 0,
            ledger_turn: None,
        };
        self.counts.turns += 1;
        self.counts.cold_turns += u64::from(cold);
        self.counts.unknown_boundary += u64::from(!known);
        self.counts.compaction_resets += u64::from(diverged);
        self.remember(best, common, fingerprints);
        self.last_seen_ms = Some(self.last_seen_ms.map_or(now_ms, |t| t.max(now_ms)));
        self.last = LastTurn {
            predicted_cold: cold,
            idle_ms: idle.map(millis),
            asked_caching,
        };
        facts
    }

    fn remember(&mut self, best: usize, common: usize, fingerprints: Vec<u64>) {
        let len = fingerprints.len();
        match self.branches.get(best) {
            // A shorter resend of a remembered transcript (a retry): keep the longer one, whose
            // tail the provider still caches.
            Some(b) if common == len && b.fingerprints.len() >= len => {
                let b = self.branches.remove(best);
                self.branches.insert(0, b);
            }
            // The same transcript, grown.
            Some(b) if common == b.fingerprints.len() => {
                self.branches.remove(best);
                self.branches.insert(0, Branch { fingerprints });
            }
            _ => {
                self.branches.insert(0, Branch { fingerprints });
                if self.branches.len() > MAX_BRANCHES {
                    self.branches.truncate(MAX_BRANCHES);
                    self.dropped_branches = true;
                }
            }
        }
    }

    /// Checks the provider's report for the latest turn and tightens the predictor with it.
    pub fn observe_usage(&mut self, usage: CacheUsage) {
        let last = self.last;
        if last.predicted_cold && !self.uncached && usage.read > 0 {
            // We read cold and the provider still had it: its cache lives longer than we
            // assumed. Widen the TTL past the gap we saw, so the same gap reads warm next time.
            self.counts.cold_mispredicted += 1;
            if let Some(idle) = last.idle_ms {
                self.ttl_ms = self.ttl_ms.max(idle);
            }
        }
        self.uncached = !last.asked_caching && usage.read == 0 && usage.written == Some(0);
    }

    /// A keep-alive ping at `at` read the session's prefix: the entry lives from there, so the
    /// next turn's idle time counts from the ping, not from the turn before it. (Read cold
    /// after a kept gap, a turn would cut at depth and throw away the entry the ping paid for,
    /// and the predictor would learn a lifetime the provider never gave.)
    pub fn kept_alive(&mut self, at: Duration) {
        let at = millis(at);
        self.last_seen_ms = Some(self.last_seen_ms.map_or(at, |t| t.max(at)));
    }

    /// With `true`, no turn reads cold: every component behaves as with `cold_cache: false`.
    pub fn set_never_cold(&mut self, never: bool) {
        self.never_cold = never;
    }

    /// The cache lifetime the predictor currently assumes.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn fp(n: usize) -> Vec<u64> {
        (0..n as u64).map(|i| i * 7 + 1).collect()
    }

    /// The state round-trips with its fingerprints as hex, and a state written before (numbers)
    /// reads the same; a malformed string is an error, not a wrong branch.
    #[test]
    fn fingerprints_are_written_as_hex_and_read_either_way() {
        let mut t = Tracker::default();
        let prints = vec![0, 1, u64::MAX, 0x0123_4567_89ab_cdef, 42];
        t.begin_turn(prints.clone(), Duration::ZERO, ANTHROPIC_TTL, true);
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(
            json["branches"][0]["fingerprints"],
            "00000000000000000000000000000001ffffffffffffffff0123456789abcdef000000000000002a"
        );
        let back: Tracker = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back.branches[0].fingerprints, prints);
        let mut old = json.clone();
        old["branches"][0]["fingerprints"] = serde_json::json!(prints);
        let back: Tracker = serde_json::from_value(old).unwrap();
        assert_eq!(back.branches[0].fingerprints, prints);
        for bad in ["0123", "zz00000000000000"] {
            let mut broken = json.clone();
            broken["branches"][0]["fingerprints"] = serde_json::json!(bad);
            assert!(serde_json::from_value::<Tracker>(broken).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_boundary_fails_closed_and_reads_warm() {
        let mut t = Tracker::default();
        let facts = t.begin_turn(fp(10), Duration::ZERO, ANTHROPIC_TTL, true);
        assert_eq!(
            facts.mutable_from, 10,
            "the whole transcript counts as cached"
        );
        assert!(!facts.cold && !facts.known);
    }

    #[test]
    fn boundary_is_the_prefix_shared_with_the_previous_turn() {
        let mut t = Tracker::default();
        t.begin_turn(fp(10), Duration::ZERO, ANTHROPIC_TTL, true);
        let facts = t.begin_turn(fp(14), MIN, ANTHROPIC_TTL, true);
        assert_eq!(
            (facts.mutable_from, facts.cold, facts.diverged),
            (10, false, false)
        );

        // The agent compacted: only the first 3 messages survive.
        let mut compacted = fp(3);
        compacted.extend([999, 998]);
        let facts = t.begin_turn(compacted, 2 * MIN, ANTHROPIC_TTL, true);
        assert_eq!((facts.mutable_from, facts.diverged), (3, true));
        assert_eq!(t.counts.compaction_resets, 1);
    }

    #[test]
    fn a_short_interleaved_transcript_does_not_shrink_the_boundary() {
        let mut t = Tracker::default();
        t.begin_turn(fp(40), Duration::ZERO, ANTHROPIC_TTL, true);
        // A subagent on the same session key, and a retry of an older, shorter turn.
        t.begin_turn(vec![5, 6, 7], MIN, ANTHROPIC_TTL, true);
        let retry = t.begin_turn(fp(20), MIN, ANTHROPIC_TTL, true);
        assert_eq!(retry.mutable_from, 20);
        let facts = t.begin_turn(fp(42), 2 * MIN, ANTHROPIC_TTL, true);
        assert_eq!(
            facts.mutable_from, 40,
            "the parent's history is still cached"
        );
    }

    #[test]
    fn a_keep_alive_ping_restarts_the_idle_clock() {
        let mut t = Tracker::default();
        t.begin_turn(fp(4), Duration::ZERO, ANTHROPIC_TTL, true);
        // Pinged at 280 s; back at 500 s, 220 s after the ping: warm, and keeps its prefix.
        t.kept_alive(Duration::from_secs(280));
        let facts = t.begin_turn(fp(5), Duration::from_secs(500), ANTHROPIC_TTL, true);
        assert!(!facts.cold);
        assert_eq!(facts.mutable_from, 4);
        // Without the ping, the same gap reads cold.
        let mut t = Tracker::default();
        t.begin_turn(fp(4), Duration::ZERO, ANTHROPIC_TTL, true);
        assert!(
            t.begin_turn(fp(5), Duration::from_secs(500), ANTHROPIC_TTL, true)
                .cold
        );
        // A ping never moves the clock back.
        t.kept_alive(Duration::from_secs(100));
        assert!(
            t.begin_turn(fp(6), Duration::from_secs(700), ANTHROPIC_TTL, true)
                .idle
                .is_some_and(|idle| idle == Duration::from_secs(200))
        );
    }

    #[test]
    fn cold_only_past_the_longest_ttl_ever_asked_plus_margin() {
        let mut t = Tracker::default();
        t.begin_turn(fp(4), Duration::ZERO, ANTHROPIC_TTL, true);
        let at = ANTHROPIC_TTL + COLD_MARGIN;
        assert!(
            !t.begin_turn(fp(5), at - Duration::from_secs(1), ANTHROPIC_TTL, true)
                .cold
        );
        let later = at - Duration::from_secs(1) + at;
        assert!(t.begin_turn(fp(6), later, ANTHROPIC_TTL, true).cold);
        // Once the session asked for an hour, five idle minutes are warm for good.
        t.begin_turn(fp(7), later + MIN, ONE_HOUR, true);
        let facts = t.begin_turn(fp(8), later + MIN + 10 * MIN, ANTHROPIC_TTL, true);
        assert!(!facts.cold);
        assert_eq!(t.ttl(), ONE_HOUR);
    }

    #[test]
    fn the_provider_report_tightens_the_predictor() {
        let mut t = Tracker::default();
        t.begin_turn(fp(4), Duration::ZERO, ANTHROPIC_TTL, true);
        let gap = 20 * MIN;
        assert!(t.begin_turn(fp(5), gap, ANTHROPIC_TTL, true).cold);
        t.observe_usage(CacheUsage {
            read: 12_000,
            written: Some(0),
            fresh: 0,
        });
        assert_eq!(t.counts.cold_mispredicted, 1);
        assert!(
            !t.begin_turn(fp(6), 2 * gap, ANTHROPIC_TTL, true).cold,
            "same gap, now warm"
        );

        // A request without breakpoints that the provider did not cache at all: every turn is
        // cold, so opted-in components may act at depth.
        let mut u = Tracker::default();
        u.begin_turn(fp(4), Duration::ZERO, ANTHROPIC_TTL, false);
        u.observe_usage(CacheUsage {
            read: 0,
            written: Some(0),
            fresh: 0,
        });
        assert!(u.begin_turn(fp(5), MIN, ANTHROPIC_TTL, false).cold);
        u.observe_usage(CacheUsage {
            read: 0,
            written: None,
            fresh: 0,
        });
        assert!(
            !u.begin_turn(fp(6), 2 * MIN, ANTHROPIC_TTL, false).cold,
            "unknown writes: warm"
        );
    }

    #[test]
    fn asked_ttl_reads_the_longest_lifetime() {
        let ttl = |body: &str, dialect| {
            asked_ttl(&engine::wire::parse(body.as_bytes(), dialect).expect("a body"))
        };
        let one_hour = r#"{"system":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[]}"#;
        assert_eq!(ttl(one_hour, Dialect::Anthropic), ONE_HOUR);
        assert_eq!(ttl(r#"{"messages":[]}"#, Dialect::Anthropic), ANTHROPIC_TTL);
        assert_eq!(
            ttl(
                r#"{"messages":[],"prompt_cache_retention":"24h"}"#,
                Dialect::OpenAi
            ),
            ONE_DAY
        );
        assert_eq!(ttl(r#"{"messages":[]}"#, Dialect::OpenAi), ONE_HOUR);
    }

    #[test]
    fn a_return_to_a_forgotten_transcript_fails_closed() {
        let mut t = Tracker::default();
        t.begin_turn(fp(30), Duration::ZERO, ANTHROPIC_TTL, true);
        // Five other transcripts push the first one out of the remembered four.
        for k in 0..5u64 {
            t.begin_turn(vec![1000 + k, 2000 + k], MIN, ANTHROPIC_TTL, true);
        }
        let facts = t.begin_turn(fp(32), 2 * MIN, ANTHROPIC_TTL, true);
        assert_eq!(
            facts.mutable_from, 32,
            "it may be cached: nothing is mutable"
        );
        // Remembered again, its next turn has a boundary as usual.
        let facts = t.begin_turn(fp(33), 3 * MIN, ANTHROPIC_TTL, true);
        assert_eq!(facts.mutable_from, 32);
    }

    #[test]
    fn the_tracker_survives_a_snapshot() {
        let mut t = Tracker::default();
        t.begin_turn(fp(12), Duration::ZERO, ONE_HOUR, true);
        let json = serde_json::to_string(&t).unwrap();
        let mut back: Tracker = serde_json::from_str(&json).unwrap();
        assert_eq!(
            back.begin_turn(fp(13), MIN, ANTHROPIC_TTL, true)
                .mutable_from,
            12
        );
        assert_eq!(back.ttl(), ONE_HOUR);
    }
}
