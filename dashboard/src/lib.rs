//! The dashboard store: what happened, per request, per session and per component, durable
//! across restarts in its own file (or kept in memory for one run), captured off the request
//! path.
//!
//! The host builds one [`Event`] per request from values it already has (the pipeline's own
//! report, so the dashboard can never disagree with the rewrite) and hands it to
//! [`Dashboard::record`]: one `try_send` on a bounded channel, which drops and counts when full
//! and never waits. One writer thread does everything that costs: it redacts content, prices the
//! row at write time (`prices.rs`), gzips what it keeps, inserts a batch in one transaction
//! (SQLite, WAL, its own file), applies retention, and fans the summary rows out to live
//! subscribers ([`Hub`]). Reads (`query.rs`) go through a second connection, so a slow query
//! never holds the writer; ratios are computed when read, time series bucketed in SQL when
//! asked, and there are no rollup tables.

mod db;
mod event;
mod hub;
pub mod prices;
pub mod query;
pub mod redact;
mod schema;
mod writer;

pub use db::{CONTENT_BUDGET, Dashboard, DashboardOptions, QUEUE, beside};
pub use event::{ComponentEvent, ContentHold, ContentSource, Counts, Event, ReplyUsage, now_ms};
pub use hub::{Full, Subscription};
pub use schema::DashboardError;

#[cfg(test)]
mod tests;
