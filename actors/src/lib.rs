//! Session actors, the bounded off-path worker pool, and stats aggregation.
//!
//! Today this holds the stats aggregator behind `/stats` and `/metrics`; session actors and the
//! worker pool arrive with the sessions issue.

pub mod pool;
pub mod stats;
