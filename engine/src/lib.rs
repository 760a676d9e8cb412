//! sluice's pure core: message model, wire normalization and byte-lossless splice, pipeline,
//! components, store trait, config.
//!
//! **Architecture Invariant:** this crate never awaits, never opens a socket or file, and never
//! reads a clock except through the [`clock::Clock`] it is handed. Everything here is a function of
//! its inputs, which is what lets the proxy, `sluice compact` and `sluice replay` share it and lets
//! tests run it on a simulated clock.

pub mod apply;
pub mod carry;
pub mod clock;
pub mod code;
pub mod components;
pub mod config;
pub mod contain;
pub mod digests;
pub mod dsl;
pub mod gate;
pub mod hex;
pub mod marker;
pub(crate) mod memo;
pub mod message;
pub mod model;
pub mod pipeline;
pub mod savings;
pub mod session;
pub mod store;
pub mod terminal;
#[cfg(test)]
mod tidy;
pub mod tokens;
pub mod tools;
pub mod way_back;
pub mod wire;
pub mod yaml;
