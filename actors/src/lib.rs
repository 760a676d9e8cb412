//! Session actors and the bounded off-path worker pool.
//!
//! The concurrency machinery, generic over what it carries: [`sessions`] serializes the turns of
//! each session over a state type the `modes` crate defines, and [`pool`] runs observe mode's
//! shadow jobs off the request path, and [`store`] keeps sessions durable and shared (SQLite,
//! Redis) behind the engine's `Store`, and [`dashboard`] captures each request's facts off the
//! request path into its own SQLite file. (The `/stats` aggregator is not an actor: it lives in
//! `modes::stats`.)

pub mod dashboard;
pub mod pool;
pub mod sessions;
pub mod store;
