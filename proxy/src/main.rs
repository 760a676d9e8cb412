//! The `sluice` binary: parse the command line and hand over to `proxy::cli`.

/// mimalloc, not the system allocator. A turn allocates per message (the parse, the
/// pipeline's copy of the transcript, each component's candidates) and frees it all when the
/// reply is on its way; under glibc's allocator that churn was a sixth of a turn's CPU on a long
/// session, and its per-thread arenas held freed memory. `benches/turns.rs` uses the same
/// allocator, and `docs/performance.md` ("Incremental turns") has the figures before and after.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    proxy::cli::main()
}
