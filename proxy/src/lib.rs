//! sluice's host: the hyper server and upstream client, SSE, the expand loop, the operator
//! routes, and the `sluice` command line.
//!
//! **Architecture Invariant:** all network IO lives here (`llm`'s model calls borrow this
//! crate's client); the engine is called with bytes, a store and a clock, and never learns where
//! they came from.

pub mod ab_stats;
pub mod access;
pub mod admit;
pub mod app;
pub mod bedrock;
mod capture;
pub mod chart;
mod chat;
pub mod cli;
pub mod clock;
pub mod dashboard;
pub mod dashboard_stats;
pub mod decode;
pub mod expand;
mod expand_loop;
mod experiment;
mod forward;
pub use expand_loop::MAX_EXPAND_ROUNDS;
#[cfg(test)]
mod generated;
pub mod google;
pub mod keepalive;
pub mod keepalive_stats;
pub mod llm_stats;
pub mod path_call;
#[cfg(test)]
mod reference;
pub mod replay;
pub mod respond;
pub mod sections;
pub mod server;
pub mod sidecar;
pub mod sse;
pub mod state;
pub mod store_stats;
pub mod upstream;
pub mod usage;
pub mod usage_sum;
