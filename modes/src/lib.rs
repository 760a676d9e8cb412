//! `sync` and `observe` modes, the cached-prefix tracker and the cold-cache predictor.
//!
//! A turn is one path for every host, [`turn::TurnService`]: the session actor (see
//! `actors::sessions`) lends the session's [`SessionState`]; [`run::run_turn`] asks its [`Tracker`]
//! for the cached-prefix boundary and coldness, records the turn, and runs the pipeline with
//! them. Sync forwards the result; observe computes it off the request path against its own
//! store and only reports it; `sluice replay` runs it on a simulated clock.
//! Both use one tracker per session, so observe's projection respects the same boundary sync
//! would have: a projection without it would overstate savings.

pub mod amortize;
pub mod experiment;
pub mod guard;
pub mod keepalive;
pub mod loud;
pub mod parses;
pub mod replay;
pub mod restore;
pub mod retries;
mod run;
pub mod session;
pub mod stats;
pub mod tracker;
pub mod turn;

pub use session::{SessionState, StorePersist, load_state, save_state};
pub use tracker::{CacheUsage, Tracker, TurnFacts};
pub use turn::{Forward, Turn, TurnInput, TurnModels, TurnService, Untouched};

#[cfg(test)]
mod tests;
