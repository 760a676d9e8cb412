//! Session actors, the bounded off-path worker pool, and stats aggregation.
//!
//! The concurrency machinery, generic over what it carries: [`sessions`] serializes the turns of
//! each session over a state type the `modes` crate defines, [`pool`] runs observe mode's shadow
//! jobs off the request path, and [`stats`] aggregates what every run reports.

// `/stats` is one `json!` literal with more fields than the macro's default recursion allows.
#![recursion_limit = "256"]

pub mod pool;
pub mod sessions;
pub mod stats;
