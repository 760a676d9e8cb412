//! The scalar rows of `/stats` and `/metrics` ([`FIELDS`]): one table, which both documents
//! and `docs/stats.md` render from.

use super::table::{Field, MetricType, Num};
use super::{Totals, ms, pct, ratio};

/// A row of [`FIELDS`]; the unlabelled shape most rows have.
macro_rules! row {
    ($json:expr, $metric:expr, $kind:ident, $unit:expr, $help:expr, $value:expr) => {
        Field {
            json: $json,
            metric: $metric,
            labels: "",
            kind: MetricType::$kind,
            unit: $unit,
            help: $help,
            value: $value,
        }
    };
}

/// Every scalar of `/stats` and `/metrics`, once. `docs/stats.md` is checked against it.
pub static FIELDS: &[Field<Totals>] = &[
    row!(
        Some("requests"),
        Some("cg_requests_total"),
        Counter,
        "requests",
        "Requests received on rewritten routes.",
        |t| Num::Count(t.requests)
    ),
    row!(
        Some("compacted_requests"),
        None,
        Counter,
        "requests",
        "Requests that ran the pipeline.",
        |t| Num::Count(t.compacted_requests)
    ),
    row!(
        Some("passthrough_requests"),
        Some("cg_passthrough_requests_total"),
        Counter,
        "requests",
        "Requests forwarded untouched.",
        |t| Num::Count(t.passthrough_requests)
    ),
    row!(
        Some("unparsed_requests"),
        Some("cg_unparsed_requests_total"),
        Counter,
        "requests",
        "Bodies sluice could not parse (forwarded untouched).",
        |t| Num::Count(t.unparsed_requests)
    ),
    row!(
        Some("opaque_entries"),
        Some("cg_opaque_entries_total"),
        Counter,
        "entries",
        "Messages or items sluice could not read, kept byte-identical while the rest of their request was compacted.",
        |t| Num::Count(t.opaque_entries)
    ),
    row!(
        Some("bypassed_requests"),
        None,
        Counter,
        "requests",
        "Requests forwarded untouched on purpose (bypass header, agent compaction, an empty pipeline).",
        |t| Num::Count(t.bypassed_requests)
    ),
    row!(
        Some("store_skipped_requests"),
        Some("cg_store_skipped_requests_total"),
        Counter,
        "requests",
        "Requests forwarded unmodified because the state store could not be used (another replica held the session's lease too long, or the backend failed); reasons on the pseudo-component `store`.",
        |t| Num::Count(t.store_skipped_requests)
    ),
    row!(
        Some("tokens_before"),
        Some("cg_tokens_before_total"),
        Counter,
        "tokens",
        "Content tokens before compaction.",
        |t| Num::Count(t.live.tokens_before)
    ),
    row!(
        Some("tokens_after"),
        Some("cg_tokens_after_total"),
        Counter,
        "tokens",
        "Content tokens after compaction.",
        |t| Num::Count(t.live.tokens_after)
    ),
    row!(
        Some("saved_tokens"),
        Some("cg_saved_tokens_total"),
        Counter,
        "tokens",
        "Content tokens cut, cumulative, on every request that ran the pipeline (one that failed upstream included: see net_savings_pct for the figure that counts).",
        |t| Num::Count(t.live.saved())
    ),
    row!(
        Some("saved_tokens_unique"),
        Some("cg_saved_tokens_unique_total"),
        Counter,
        "tokens",
        "Content tokens saved, each replaced content once.",
        |t| Num::Count(t.live.saved_tokens_unique)
    ),
    row!(
        Some("overcount_ratio"),
        None,
        Gauge,
        "ratio",
        "saved_tokens over saved_tokens_unique (0 without data).",
        |t| Num::Real(ratio(t.live.saved(), t.live.saved_tokens_unique))
    ),
    // The headline (`engine::savings`): billed input saved, net, from the providers' reports.
    row!(
        Some("billed_savings_pct"),
        None,
        Gauge,
        "%",
        "**The headline, billed input saved, net**: what the provider billed for the requests sluice forwarded (fresh input, cache reads at 0.1, cache writes at 1.25, from its own usage report), against what it would have billed without sluice (that bill, plus what the cuts kept off it, less the expand tool's declaration and any cache re-write sluice caused), expand rounds charged. Below zero when sluice cost more than it saved. The dashboard and `sluice replay` report the same figure under the same name.",
        |t| Num::Real(t.billed.net_pct())
    ),
    row!(
        None,
        Some("cg_billed_savings_ratio"),
        Gauge,
        "ratio",
        "The headline, billed input saved, net (billed_savings_pct), as a ratio.",
        |t| Num::Real(t.billed.net_pct() / 100.0)
    ),
    row!(
        Some("billed_savings_pct_gross"),
        None,
        Gauge,
        "%",
        "Billed input saved before expand rounds: billed_savings_pct without the rounds' cost.",
        |t| Num::Real(t.billed.gross_pct())
    ),
    row!(
        None,
        Some("cg_billed_gross_savings_ratio"),
        Gauge,
        "ratio",
        "Billed input saved before expand rounds (billed_savings_pct_gross), as a ratio.",
        |t| Num::Real(t.billed.gross_pct() / 100.0)
    ),
    row!(
        Some("billed_requests"),
        Some("cg_billed_requests_total"),
        Counter,
        "requests",
        "Requests that ran the pipeline and whose provider reported their usage: the billed figure's sample (a reply without a usage report, one that failed, or one whose turn its session's cost guard no longer held because another request of the session came in between, is not in it).",
        |t| Num::Count(t.billed.requests)
    ),
    row!(
        Some("billed_input_tokens"),
        Some("cg_billed_input_tokens"),
        Gauge,
        "tokens",
        "What the provider billed for those requests' input, priced in fresh-input tokens (a cache read 0.1, a cache write 1.25), plus the expand rounds' cost.",
        |t| Num::Real(t.billed.billed + t.billed.rounds)
    ),
    row!(
        Some("billed_baseline_tokens"),
        Some("cg_billed_baseline_tokens"),
        Gauge,
        "tokens",
        "What the provider would have billed for the same requests without sluice.",
        |t| Num::Real(t.billed.baseline())
    ),
    // Content tokens saved, net (`engine::savings`), the pipeline's own figure, under its own
    // key and context-guru's `savings_pct`; saved before expand rounds is its secondary form.
    row!(
        Some("net_savings_pct"),
        None,
        Gauge,
        "%",
        "**Content tokens saved, net**, the pipeline's own figure beside the headline: content tokens cut from requests the upstream completed, less the expand tool's declaration sluice added, the originals expand rounds restored and the prompt each round re-read (at the cache-read price, 0.1), over those requests' content tokens. It counts tokens, not their price, so it reads above the bill's change (billed_savings_pct). The dashboard and `sluice replay` report it under the same name.",
        |t| Num::Real(t.net().net_pct())
    ),
    row!(
        None,
        Some("cg_net_savings_ratio"),
        Gauge,
        "ratio",
        "Content tokens saved, net (net_savings_pct), as a ratio.",
        |t| Num::Real(t.net().net_pct() / 100.0)
    ),
    row!(
        Some("savings_pct"),
        None,
        Gauge,
        "%",
        "context-guru's name for content tokens saved (its Σsaved/Σbefore): the same value as net_savings_pct.",
        |t| Num::Real(t.net().net_pct())
    ),
    row!(
        Some("savings_pct_gross"),
        None,
        Gauge,
        "%",
        "Saved before expand rounds: net_savings_pct without the rounds' restored originals and re-read prompts (the declaration still charged).",
        |t| Num::Real(t.net().gross_pct())
    ),
    row!(
        None,
        Some("cg_gross_savings_ratio"),
        Gauge,
        "ratio",
        "Saved before expand rounds (savings_pct_gross), as a ratio.",
        |t| Num::Real(t.net().gross_pct() / 100.0)
    ),
    row!(
        Some("net_saved_tokens"),
        Some("cg_net_saved_tokens"),
        Gauge,
        "tokens",
        "net_savings_pct's numerator: content tokens saved, net, in input-token equivalents (below zero for a loss).",
        |t| Num::Real(t.net().net_tokens())
    ),
    row!(
        Some("expand_declared_tokens"),
        Some("cg_expand_declared_tokens_total"),
        Counter,
        "tokens",
        "Tokens of the expand tool's declaration sluice added to requests the upstream completed (charged in both savings figures).",
        |t| Num::Count(t.completed.declared_tokens)
    ),
    row!(
        Some("failed_requests_excluded"),
        Some("cg_failed_requests_excluded_total"),
        Counter,
        "requests",
        "Requests that ran the pipeline and did not complete upstream (a transport error, or an error status: 4xx or 5xx), left out of every savings percentage: the provider billed them nothing, and the agent's retry is counted when it completes.",
        |t| Num::Count(t.failed_requests)
    ),
    row!(
        Some("failed_saved_tokens_excluded"),
        Some("cg_failed_saved_tokens_excluded_total"),
        Counter,
        "tokens",
        "Content tokens those requests' cuts would have saved (in saved_tokens, not in the headline).",
        |t| Num::Count(t.failed_saved_tokens)
    ),
    row!(
        Some("wasted_tokens"),
        Some("cg_wasted_tokens_total"),
        Counter,
        "tokens",
        "Tokens of originals restored through expand.",
        |t| Num::Count(t.wasted_tokens)
    ),
    row!(
        Some("bounces"),
        Some("cg_expand_bounces_total"),
        Counter,
        "originals",
        "Originals restored through expand.",
        |t| Num::Count(t.restorations)
    ),
    row!(
        Some("adjusted_saved"),
        None,
        Counter,
        "tokens",
        "saved_tokens minus wasted_tokens.",
        |t| Num::Count(t.live.saved().saturating_sub(t.wasted_tokens))
    ),
    row!(
        Some("expand_rounds"),
        Some("cg_expand_rounds_total"),
        Counter,
        "rounds",
        "Expand loop rounds.",
        |t| Num::Count(t.expand_rounds)
    ),
    row!(
        Some("retries_after_compaction"),
        Some("cg_retries_after_compaction_total"),
        Counter,
        "retries",
        "Calls the model re-issued right after their output was cut, and markers it expanded a second time; each makes that tool's outputs lossless for the rest of its session.",
        |t| Num::Count(t.retries_after_compaction)
    ),
    row!(
        Some("expand_reread_tokens"),
        Some("cg_expand_reread_tokens_total"),
        Counter,
        "tokens",
        "Prompt tokens expand rounds sent upstream again.",
        |t| Num::Count(t.expand_reread_tokens)
    ),
    row!(
        Some("expand_misses"),
        None,
        Counter,
        "ids",
        "Expand calls for an id the store no longer had.",
        |t| Num::Count(t.expand_misses)
    ),
    row!(
        Some("cg_added_ms_avg"),
        None,
        Gauge,
        "ms",
        "Average latency sluice added per rewritten request.",
        |t| Num::Real(ms(t.added_us, t.added_n))
    ),
    // The reference's `cg_added_latency_ms`, in the base unit Prometheus asks for (promtool
    // refuses abbreviated units); `cg_added_latency_seconds` is the histogram.
    row!(
        None,
        Some("cg_added_latency_average_seconds"),
        Gauge,
        "s",
        "Average latency sluice added per rewritten request (context-guru's cg_added_latency_ms, in seconds).",
        |t| Num::Real(ms(t.added_us, t.added_n) / 1e3)
    ),
    row!(
        Some("upstream_ms_avg"),
        None,
        Gauge,
        "ms",
        "Average time to upstream response headers.",
        |t| Num::Real(ms(t.upstream_us, t.upstream_n))
    ),
    row!(
        Some("upstream_errors"),
        Some("cg_upstream_errors_total"),
        Counter,
        "requests",
        "Upstream transport failures (every call, expand rounds' included).",
        |t| Num::Count(t.upstream_errors)
    ),
    row!(
        Some("sse_streamed"),
        None,
        Counter,
        "responses",
        "Streamed responses relayed chunk by chunk.",
        |t| Num::Count(t.sse_streamed)
    ),
    row!(
        Some("sse_buffered"),
        None,
        Counter,
        "responses",
        "Streamed responses held back for the expand loop.",
        |t| Num::Count(t.sse_buffered)
    ),
    row!(
        None,
        Some("cg_sse_streams_total"),
        Counter,
        "responses",
        "Streamed responses relayed.",
        |t| Num::Count(t.sse_streamed + t.sse_buffered)
    ),
    row!(
        Some("sse_buffered_pct"),
        None,
        Gauge,
        "%",
        "Share of streamed responses held back.",
        |t| Num::Real(pct(t.sse_buffered, t.sse_streamed + t.sse_buffered))
    ),
    row!(
        Some("sse_ttfb_ms_avg"),
        None,
        Gauge,
        "ms",
        "Average time to the first byte relayed of a streamed response.",
        |t| Num::Real(ms(t.sse_ttfb_us, t.sse_ttfb_n))
    ),
    row!(
        Some("observe_hypothetical_requests"),
        None,
        Counter,
        "requests",
        "Requests observe mode projected.",
        |t| Num::Count(t.observe_projections)
    ),
    row!(
        Some("actual_baseline_tokens"),
        None,
        Counter,
        "tokens",
        "Observe: content tokens of the requests as forwarded.",
        |t| Num::Count(t.potential.tokens_before)
    ),
    row!(
        Some("projected_optimized_tokens"),
        None,
        Counter,
        "tokens",
        "Observe: content tokens sync would have forwarded.",
        |t| Num::Count(t.potential.tokens_after)
    ),
    row!(
        Some("potential_saved_tokens"),
        None,
        Counter,
        "tokens",
        "Observe: content tokens sync would have saved, cumulative.",
        |t| Num::Count(t.potential.saved())
    ),
    row!(
        Some("potential_saved_tokens_unique"),
        None,
        Counter,
        "tokens",
        "Observe: the same, each replaced content once.",
        |t| Num::Count(t.potential.saved_tokens_unique)
    ),
    row!(
        Some("potential_savings_pct"),
        None,
        Gauge,
        "%",
        "Observe: potential_saved_tokens over actual_baseline_tokens.",
        |t| Num::Real(pct(t.potential.saved(), t.potential.tokens_before))
    ),
    row!(
        Some("potential_overhead_ms_avg"),
        None,
        Gauge,
        "ms",
        "Observe: average time of a shadow run, off the request path.",
        |t| Num::Real(ms(t.observe_us, t.observe_projections))
    ),
    row!(
        Some("frozen_hits"),
        Some("cg_frozen_hits_total"),
        Counter,
        "decisions",
        "Earlier decisions replayed byte-identically.",
        |t| Num::Count(t.live.frozen.hits)
    ),
    row!(
        Some("frozen_misses"),
        Some("cg_frozen_misses_total"),
        Counter,
        "lookups",
        "Freeze lookups with no decision on record.",
        |t| Num::Count(t.live.frozen.misses)
    ),
    row!(
        Some("frozen_dropped"),
        Some("cg_frozen_dropped_total"),
        Counter,
        "decisions",
        "Decisions needed again after the store dropped them.",
        |t| Num::Count(t.live.frozen.dropped)
    ),
    row!(
        Some("frozen_repaired"),
        Some("cg_frozen_repaired_total"),
        Counter,
        "decisions",
        "Dropped decisions re-derived byte-identically.",
        |t| Num::Count(t.live.frozen.repaired)
    ),
    row!(
        Some("frozen_flips"),
        Some("cg_frozen_flips_total"),
        Counter,
        "decisions",
        "Dropped decisions that could not be re-derived (a cache write).",
        |t| Num::Count(t.live.frozen.dropped.saturating_sub(t.live.frozen.repaired))
    ),
    row!(
        Some("potential_frozen_hits"),
        None,
        Counter,
        "decisions",
        "Observe: earlier decisions the shadow run replayed.",
        |t| Num::Count(t.potential.frozen.hits)
    ),
    row!(
        Some("tracked_turns"),
        None,
        Counter,
        "turns",
        "Turns the cached-prefix tracker saw.",
        |t| Num::Count(t.turns.tracked_turns)
    ),
    row!(
        Some("cold_turns"),
        Some("cg_cold_turns_total"),
        Counter,
        "turns",
        "Turns whose prompt cache was provably cold.",
        |t| Num::Count(t.turns.cold_turns)
    ),
    row!(
        Some("unknown_boundary_turns"),
        None,
        Counter,
        "turns",
        "Turns with no earlier turn on record (read warm: fail closed).",
        |t| Num::Count(t.turns.unknown_boundary_turns)
    ),
    row!(
        Some("compaction_resets"),
        Some("cg_compaction_resets_total"),
        Counter,
        "turns",
        "Turns whose transcript diverged from every remembered one.",
        |t| Num::Count(t.turns.compaction_resets)
    ),
    row!(
        Some("cold_mispredicted"),
        None,
        Counter,
        "turns",
        "Turns read cold on which the provider still reported a cache read.",
        |t| Num::Count(t.turns.cold_mispredicted)
    ),
    row!(
        Some("amortized_rewrites"),
        None,
        Counter,
        "turns",
        "Warm turns cache.amortize re-wrote at depth because it paid.",
        |t| Num::Count(t.turns.amortized_rewrites)
    ),
    row!(
        Some("restored_outputs"),
        Some("cg_restored_outputs_total"),
        Counter,
        "outputs",
        "Markers restored in place (decisions, one per marker): the model kept expanding the marker, and one re-write of the prompt from its output's message on cost less than the rounds it was still expected to cost, so every cut that leaves it is undone for the rest of the session (skip reason restored_in_place, counted on each turn).",
        |t| Num::Count(t.turns.restored_outputs)
    ),
];
