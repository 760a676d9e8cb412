//! The `sluice` binary: parse the command line and hand over to `proxy::cli`.

/// jemalloc, not glibc's malloc: a request's memory is allocated on one runtime worker and often
/// freed on the other, and glibc takes the first worker's arena lock for each such free (with its
/// allocator, a quarter of the hop's samples); jemalloc's thread caches take them without one.
/// Measured in docs/performance.md ("The allocator: jemalloc", issue #34). `mimalloc` cut a
/// turn's CPU in process too but multiplied the added p99 through the proxy; jemalloc did not.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    proxy::cli::main()
}
