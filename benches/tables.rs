//! What the o200k tables cost at first use: built from OpenAI's token list (sluice,
//! `engine/src/tokens/o200k.rs`) beside deserialized from `bpe-openai`'s precomputed tables,
//! the way that crate does it (issue #55: the tables were a third of the shipped binary).
//!
//! Each is a process-wide lazy value, so one process measures each once; the order alternates
//! by run so that neither always pays for warming the allocator.
//!
//! `cargo build --release -p benches --bin tables && for i in 1 2 3 4 5 6; do
//! target/release/tables $((i % 2)); done` prints one Markdown row per run (docs/performance.md).
//!
//! `target/release/tables grammars` times instead each grammar's first use (`grammars::language`:
//! its tables inflated and copied back into the grammar's storage), one row per grammar.

use std::time::Instant;

fn ms(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64() * 1e3
}

/// The process's resident memory in MiB, from `/proc/self/statm` (Linux; 0 elsewhere).
fn resident_mib() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

/// Each grammar's first use, then a second (the loaded language handed out again).
fn grammars() {
    for grammar in grammars::Grammar::ALL {
        let before = resident_mib();
        let first = ms(|| {
            std::hint::black_box(grammars::language(grammar));
        });
        let grown = resident_mib() - before;
        let again = ms(|| {
            std::hint::black_box(grammars::language(grammar));
        });
        println!("| {grammar:?} | {first:.1} ms | {grown:.1} MiB | {again:.3} ms |");
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("grammars") {
        return grammars();
    }
    let ours_first = std::env::args().nth(1).as_deref() != Some("0");
    let (mut built, mut loaded, mut built_mib, mut loaded_mib) = (0.0, 0.0, 0.0, 0.0);
    let mut measure_ours = || {
        let before = resident_mib();
        built = ms(|| {
            std::hint::black_box(engine::tokens::tokenizer());
        });
        built_mib = resident_mib() - before;
    };
    let mut measure_theirs = || {
        let before = resident_mib();
        loaded = ms(|| {
            std::hint::black_box(bpe_openai::o200k_base());
        });
        loaded_mib = resident_mib() - before;
    };
    if ours_first {
        measure_ours();
        measure_theirs();
    } else {
        measure_theirs();
        measure_ours();
    }
    // Both must be the one tokenizer, or the comparison says nothing.
    let text = "fn main() { println!(\"héllo\"); }  \n\t東京 12345";
    assert_eq!(
        engine::tokens::tokenizer().encode(text),
        bpe_openai::o200k_base().encode(text)
    );
    println!(
        "| {} | {built:.0} ms | {built_mib:.0} MiB | {loaded:.0} ms | {loaded_mib:.0} MiB |",
        if ours_first {
            "list first"
        } else {
            "tables first"
        }
    );
}
