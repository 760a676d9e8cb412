//! The cheap model's spend beside what it saved: the `llm_*` fields of `/stats` and the
//! `cg_llm_*` series of `/metrics`, one table ([`LLM_FIELDS`]) rendered into both, like the
//! engine-side rows of `modes::stats::FIELDS`.

use modes::stats::Stats;
use modes::stats::table::{Field, MetricType, Num};

/// Components whose savings the model bought, for the net figure.
const MODEL_COMPONENTS: [&str; 2] = ["extract_llm", "summarize"];

/// What a saved token is worth, $/MTok: a Sonnet-class cache-read price, the conservative
/// value of a token the agent would have re-sent on a warm turn (`SLUICE_SAVED_VALUE_PER_MTOK`).
fn saved_value_per_mtok() -> f64 {
    std::env::var("SLUICE_SAVED_VALUE_PER_MTOK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.30)
}

/// What the rows read.
#[derive(Debug)]
pub struct LlmView {
    counts: llm::LlmCounts,
    /// Tokens the model components saved, cumulative.
    saved: u64,
    /// $ per saved token.
    value_per_token: f64,
}

impl LlmView {
    pub fn new(counts: llm::LlmCounts, stats: &Stats) -> LlmView {
        LlmView {
            counts,
            saved: stats.saved_tokens_by(&MODEL_COMPONENTS),
            value_per_token: saved_value_per_mtok() / 1e6,
        }
    }

    fn saved_value(&self) -> f64 {
        self.saved as f64 * self.value_per_token
    }
}

/// One labelled or unlabelled row.
const fn row(
    json: &'static str,
    metric: Option<&'static str>,
    labels: &'static str,
    unit: &'static str,
    help: &'static str,
    value: fn(&LlmView) -> Num,
) -> Field<LlmView> {
    Field {
        json: Some(json),
        metric,
        labels,
        kind: MetricType::Counter,
        unit,
        help,
        value,
    }
}

/// Rows sharing a series stand together: the series' help and type come from its first row.
pub static LLM_FIELDS: &[Field<LlmView>] = &[
    row(
        "llm_calls",
        Some("cg_llm_calls_total"),
        "",
        "calls",
        "Cheap-model calls made.",
        |v| Num::Count(v.counts.calls),
    ),
    row(
        "llm_input_tokens",
        Some("cg_llm_tokens_total"),
        "direction=\"input\"",
        "tokens",
        "Cheap-model tokens billed.",
        |v| Num::Count(v.counts.input_tokens),
    ),
    row(
        "llm_output_tokens",
        Some("cg_llm_tokens_total"),
        "direction=\"output\"",
        "tokens",
        "Cheap-model tokens billed.",
        |v| Num::Count(v.counts.output_tokens),
    ),
    row(
        "llm_errors",
        Some("cg_llm_failures_total"),
        "stage=\"call\"",
        "jobs",
        "Cheap-model jobs that failed, by stage.",
        |v| Num::Count(v.counts.errors),
    ),
    row(
        "llm_rejected",
        Some("cg_llm_failures_total"),
        "stage=\"rejected\"",
        "jobs",
        "Cheap-model jobs that failed, by stage.",
        |v| Num::Count(v.counts.rejected),
    ),
    row(
        "llm_sandbox_failures",
        Some("cg_llm_failures_total"),
        "stage=\"sandbox\"",
        "jobs",
        "Cheap-model jobs that failed, by stage.",
        |v| Num::Count(v.counts.sandbox_failures),
    ),
    row(
        "llm_timeouts",
        Some("cg_llm_failures_total"),
        "stage=\"timeout\"",
        "jobs",
        "Cheap-model jobs that failed, by stage.",
        |v| Num::Count(v.counts.timeouts),
    ),
    row(
        "llm_queue_full",
        None,
        "",
        "jobs",
        "Cheap-model jobs refused because the queue was full.",
        |v| Num::Count(v.counts.queue_full),
    ),
    row(
        "llm_cost_usd",
        Some("cg_llm_cost_usd_total"),
        "",
        "USD",
        "Cheap-model spend at the configured prices.",
        |v| Num::Real(v.counts.cost_usd),
    ),
    row(
        "llm_saved_tokens",
        None,
        "",
        "tokens",
        "Content tokens extract_llm and summarize saved, cumulative.",
        |v| Num::Count(v.saved),
    ),
    row(
        "llm_saved_value_usd",
        None,
        "",
        "USD",
        "llm_saved_tokens at SLUICE_SAVED_VALUE_PER_MTOK (default 0.30 $/MTok).",
        |v| Num::Real(v.saved_value()),
    ),
    row(
        "llm_net_usd",
        None,
        "",
        "USD",
        "llm_saved_value_usd minus llm_cost_usd.",
        |v| Num::Real(v.saved_value() - v.counts.cost_usd),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llm_rows_render_into_both_documents() {
        let stats = Stats::new();
        let counts = llm::LlmCounts {
            calls: 3,
            input_tokens: 1200,
            output_tokens: 80,
            cost_usd: 0.002,
            ..llm::LlmCounts::default()
        };
        let view = LlmView::new(counts, &stats);
        let mut object = serde_json::Map::new();
        modes::stats::table::write_json(LLM_FIELDS, &view, &mut object);
        assert_eq!(object["llm_calls"], 3);
        assert_eq!(object["llm_net_usd"], -0.002);
        let mut text = String::new();
        modes::stats::table::write_prometheus(LLM_FIELDS, &view, &mut text);
        assert!(text.contains("cg_llm_tokens_total{direction=\"input\"} 1200\n"));
        assert_eq!(
            text.matches("# TYPE cg_llm_failures_total counter").count(),
            1
        );
    }
}
