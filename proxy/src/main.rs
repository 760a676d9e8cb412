//! The `sluice` binary: parse the command line and hand over to `proxy::cli`.

fn main() -> std::process::ExitCode {
    proxy::cli::main()
}
