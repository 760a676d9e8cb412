//! sluice's host: the hyper server and upstream client, SSE, the expand loop, dashboard routes,
//! and the `sluice` command line.
//!
//! **Architecture Invariant:** all IO lives here or in `llm`; the engine is called with bytes, a
//! store and a clock, and never learns where they came from.

pub mod cli;
pub mod clock;
