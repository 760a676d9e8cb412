//! The cache keep-alive in `/stats` (`keepalive_*`) and `/metrics` (`cg_keepalive_*`): pings
//! sent, gaps kept, what the pings cost and what they spared, one table ([`KEEPALIVE_FIELDS`])
//! like the other sections. All zero while `cache.keepalive` is off. (The reference publishes
//! these as one `keepalive` object; here they are flat keys, as every `/stats` section is, and
//! carry its names after the prefix.)

use modes::stats::table::{Field, MetricType, Num};

use crate::keepalive::Pings;
use crate::store_stats::{count, row};

use MetricType::{Counter, Gauge};

pub static KEEPALIVE_FIELDS: &[Field<Pings>] = &[
    row(
        "keepalive_live_sessions",
        "cg_keepalive_live_sessions",
        Gauge,
        "sessions",
        "Sessions holding a request now, credential included, in memory only: a turn in flight, or a quiet gap's pings to come. It goes when the reply carries no cache report, when the session's next request begins, or when the gap's pings are done.",
        |c| count(c.live_sessions),
    ),
    row(
        "keepalive_pings",
        "cg_keepalive_pings_total",
        Counter,
        "requests",
        "Pings sent and answered: a quiet session's last request again, asking for one token, not streamed.",
        |c| count(c.ledger.pings),
    ),
    row(
        "keepalive_gaps_pinged",
        "cg_keepalive_gaps_pinged_total",
        Counter,
        "gaps",
        "Quiet gaps that got at least one ping.",
        |c| count(c.ledger.gaps_pinged),
    ),
    row(
        "keepalive_kept",
        "cg_keepalive_kept_total",
        Counter,
        "gaps",
        "Gaps the session came back from after its cache entry would have expired, on an entry a ping kept: the turn read what it would have written.",
        |c| count(c.ledger.kept),
    ),
    row(
        "keepalive_skipped",
        "cg_keepalive_skipped_total",
        Counter,
        "turns",
        "Anthropic turns given no pings: a session's first turn, a request asking for the hour-long entry, extended thinking on, a prefix under `keepalive_min_prefix_tokens`, a ping over `keepalive_max_usd_per_ping`, a reply that came after the entry's lifetime, or the keeper's bounds (512 sessions, 128 MB, 8 MB a body).",
        |c| count(c.skipped),
    ),
    row(
        "keepalive_failed",
        "cg_keepalive_failed_total",
        Counter,
        "requests",
        "Pings the upstream refused, did not answer within 60 s, or answered without a cache report: that quiet gap's pings stop.",
        |c| count(c.failed),
    ),
    row(
        "keepalive_wrote_instead_of_read",
        "cg_keepalive_wrote_instead_of_read_total",
        Counter,
        "requests",
        "Pings the provider reported as a cache write larger than the read: the entry had gone (a late ping, a provider that evicted early). That quiet gap's pings stop.",
        |c| count(c.ledger.wrote_instead_of_read),
    ),
    row(
        "keepalive_ping_tokens",
        "cg_keepalive_ping_tokens_total",
        Counter,
        "tokens",
        "Cache reads the pings were billed.",
        |c| count(c.ledger.ping_tokens),
    ),
    row(
        "keepalive_kept_tokens",
        "cg_keepalive_kept_tokens_total",
        Counter,
        "tokens",
        "Cache reads of the kept turns: what they would have written without the pings.",
        |c| count(c.ledger.kept_tokens),
    ),
    row(
        "keepalive_spend_usd",
        "cg_keepalive_spend_usd_total",
        Counter,
        "USD",
        "The pings' cost at the model's list price (everything they were billed; models without a list price add nothing).",
        |c| Num::Real(c.spend_usd),
    ),
    row(
        "keepalive_saved_usd",
        "cg_keepalive_saved_usd_total",
        Counter,
        "USD",
        "The kept turns' cache reads at the write price less the read price: what the pings spared. Net is this less `keepalive_spend_usd`.",
        |c| Num::Real(c.saved_usd),
    ),
];
