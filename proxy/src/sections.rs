//! The proxy's own sections of `/stats` and `/metrics`, after the turn's
//! (`modes::stats::FIELDS`): the LLM actor, the state store, the dashboard, the A/B
//! experiment and the cache keep-alive. [`SECTIONS`]
//! lists them once; both routes and `docs/stats.md` render from it.

use modes::stats::table;
use serde_json::{Map, Value};

use crate::ab_stats::{AB_FIELDS, AbView};
use crate::dashboard_stats::{DASHBOARD_FIELDS, DashboardView};
use crate::keepalive_stats::KEEPALIVE_FIELDS;
use crate::llm_stats::{LLM_FIELDS, LlmView};
use crate::state::App;
use crate::store_stats::{STORE_FIELDS, StoreView};

/// One table of rows: its name in `docs/stats.md`, and how it renders.
pub struct Section {
    /// The `<!-- begin: NAME -->` block of `docs/stats.md` it fills.
    pub name: &'static str,
    pub markdown: fn() -> String,
    pub json: fn(&App, &mut Map<String, Value>),
    pub prometheus: fn(&App, &mut String),
}

/// A section from its table and the view of the app its rows read.
macro_rules! section {
    ($name:literal, $fields:expr, $view:expr) => {
        Section {
            name: $name,
            markdown: || table::markdown($fields),
            json: |app, object| table::write_json($fields, &($view)(app), object),
            prometheus: |app, text| table::write_prometheus($fields, &($view)(app), text),
        }
    };
}

/// Every section, in the order `/stats` and `/metrics` write them.
pub const SECTIONS: &[Section] = &[
    section!("llm", LLM_FIELDS, |app: &App| LlmView::new(
        app.llm.counts(),
        &app.stats
    )),
    section!("store", STORE_FIELDS, |app: &App| -> StoreView {
        app.store_view()
    }),
    section!("dashboard", DASHBOARD_FIELDS, |app: &App| {
        DashboardView::of(app.dashboard().map(|d| &**d))
    }),
    section!("ab", AB_FIELDS, |app: &App| -> AbView { app.ab_view() }),
    section!("keepalive", KEEPALIVE_FIELDS, |app: &App| {
        app.keeper().map(|k| k.counts()).unwrap_or_default()
    }),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generated::splice;

    /// `docs/stats.md` lists every `/stats` key and `/metrics` series exactly as the tables
    /// define them. `SLUICE_BLESS=1 cargo test -p proxy stats_doc` rewrites it.
    #[test]
    fn stats_doc_matches_the_tables() {
        crate::generated::check_doc("stats.md", "stats_doc", |doc| {
            let doc = splice(doc, "fields", &table::markdown(modes::stats::FIELDS));
            SECTIONS
                .iter()
                .fold(doc, |doc, s| splice(&doc, s.name, &(s.markdown)()))
        });
    }
}
