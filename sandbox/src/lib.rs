//! Starlark sandbox for model-written filters: step, wall-clock, input and heap budgets.
//!
//! A cheap model writes a program defining `def filter(text)`; sluice runs it over a tool
//! output and keeps the result only if it passes the caller's acceptance check. The program is
//! untrusted, so everything here assumes it is hostile or broken:
//!
//! - No I/O exists: starlark's standard library has none, `load` is a parse error in the dialect,
//!   and the globals are frozen. The helpers are `re_sub`, `re_findall`, `re_split`, `re_match`
//!   over the `regex` crate (linear time: a pathological pattern cannot backtrack forever) and
//!   the `json` module.
//! - Every run has a step budget (ticks: calls and loop back-edges), a wall-clock deadline, a
//!   call-stack cap and a heap cap, and the input has a size cap. Each trips as its own
//!   [`SandboxError`] variant, never a panic or an abort.
//! - Compile once, run many: [`Program::compile`] evaluates the module once and freezes it; a
//!   [`Program`] is `Send + Sync` and each [`Program::run`] gets a fresh heap. Runs are CPU-bound
//!   and synchronous: async callers put them on a blocking thread.
//!
//! Starlark checks ticks, heap and cancellation every thousand ticks or so, and a single step
//! can allocate without bound (`text * 2147483647` reserves petabytes at once, and a failed
//! allocation aborts the process). So the host runs untrusted programs in a child process
//! ([`run_in_child`], the `child` module): an abort, an out-of-memory kill or a runaway loop
//! costs that child, never the proxy. In-process [`Program::run`] is for trusted programs and
//! tests.

mod child;
mod program;

pub use child::{CHILD_ARG, child_main, run_in_child};
pub use program::{Limits, Program, SandboxError};

#[cfg(test)]
mod tests;
