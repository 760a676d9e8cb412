//! Session actors and the bounded off-path worker pool.
//!
//! The concurrency machinery, generic over what it carries: [`sessions`] serializes the turns of
//! each session over a state type the `modes` crate defines, and [`pool`] runs observe mode's
//! shadow jobs off the request path. What is kept (sessions durable and shared: the `store`
//! crate; each request's facts for the dashboard: the `dashboard` crate) is not here, so this
//! crate links no database. (The `/stats` aggregator is not an actor: it lives in
//! `modes::stats`.)

pub mod pool;
pub mod sessions;
