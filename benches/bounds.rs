//! What a token bound could decide on the request path (issue #22, item 6).
//!
//! Item 6 asks that gates which only compare a count with a threshold decide on a bound
//! computed in one pass, and that the exact o200k count wait until after the send. This harness
//! measures, before anyone builds it, whether that can work for the embedded default. For every
//! tool output of 2 KB or more in the public corpus it computes two lower bounds, checks both
//! against the exact count, times them beside the count, and reports how many outputs, and how
//! many of their bytes, each gate of the embedded default could decide without counting.
//!
//! The upper bound is the byte count: every token is at least one byte. The lower bounds:
//! - **Runs** ([`runs_bound`], one pass over the bytes) counts pieces o200k's pre-tokenizer must
//!   make, each at least one token:
//!   - every maximal run of ASCII letters and `'` (non-ASCII bytes join it, since they may be
//!     letters of the same word) holds a word piece, and no piece spans two runs;
//!   - every maximal run of ASCII digits (non-ASCII bytes join it, for `\p{N}`) holds one number
//!     piece per three digits at least;
//!   - an ASCII lowercase letter right before an uppercase one is a token boundary: `fooBar` is
//!     two pieces, and a mixed-case contraction (`x'rE`, one piece) still splits there, because
//!     no o200k token holds such a pair (checked against the vocabulary when this runs).
//! - **Pieces**: the pre-tokenizer's piece count itself, each piece at least one token. Tighter,
//!   but the split is most of what counting costs (the table says how much).
//!
//! `cargo run --release -p benches --bin bounds` prints the Markdown in docs/performance.md. It
//! panics if either bound ever exceeds the exact count.

use std::time::Instant;

use engine::wire::{self, Dialect};

/// Tool outputs shorter than this are counted on sight whatever the gate: counting them costs
/// less than it is worth deferring.
const MIN_BYTES: usize = 2048;

fn runs_bound(text: &str) -> usize {
    let letter = |b: u8| b.is_ascii_alphabetic() || b == b'\'' || b >= 0x80;
    let digit = |b: u8| b.is_ascii_digit() || b >= 0x80;
    let mut pieces = 0;
    let (mut in_word, mut word_has_letter) = (false, false);
    let (mut in_number, mut digits) = (false, 0);
    let mut previous = 0u8;
    for &b in text.as_bytes() {
        if letter(b) {
            in_word = true;
            word_has_letter |= b.is_ascii_alphabetic();
        } else if in_word {
            pieces += usize::from(word_has_letter);
            (in_word, word_has_letter) = (false, false);
        }
        if digit(b) {
            in_number = true;
            digits += usize::from(b.is_ascii_digit());
        } else if in_number {
            pieces += digits.div_ceil(3);
            (in_number, digits) = (false, 0);
        }
        pieces += usize::from(previous.is_ascii_lowercase() && b.is_ascii_uppercase());
        previous = b;
    }
    pieces + usize::from(in_word && word_has_letter) + digits.div_ceil(3)
}

fn pieces_bound(text: &str) -> usize {
    bpe_openai::o200k_base().split(text).count()
}

/// Whether some o200k token holds an ASCII lowercase letter right before an uppercase one (the
/// runs bound counts such a pair as a token boundary).
fn vocabulary_joins_case() -> bool {
    let bpe = &bpe_openai::o200k_base().bpe;
    (0..bpe.num_tokens()).any(|id| {
        u32::try_from(id).is_ok_and(|id| {
            bpe.token_bytes(id)
                .windows(2)
                .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
        })
    })
}

/// One tool output: its bytes, both bounds and the exact count.
struct Output {
    bytes: usize,
    runs: usize,
    pieces: usize,
    exact: usize,
}

fn tool_outputs() -> Vec<String> {
    let mut out = Vec::new();
    for (_, body) in benches::public_bodies(Dialect::OpenAi) {
        let parsed = wire::parse(&body, Dialect::OpenAi).expect("corpus parses");
        out.extend(
            parsed
                .messages()
                .iter()
                .filter(|m| m.is_tool() && m.content.len() >= MIN_BYTES)
                .map(|m| m.content.clone()),
        );
    }
    out
}

/// Microseconds per output of `f` over `texts`, and its results.
fn timed(texts: &[String], f: impl Fn(&str) -> usize) -> (f64, Vec<usize>) {
    let started = Instant::now();
    let results: Vec<usize> = texts.iter().map(|t| f(t)).collect();
    let us = started.elapsed().as_secs_f64() * 1e6 / texts.len().max(1) as f64;
    (us, results)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn self_check() {
    assert_eq!(runs_bound("fooBar baz"), 3);
    assert_eq!(runs_bound("1234567"), 3);
    assert_eq!(runs_bound("don't stop"), 2);
    assert_eq!(runs_bound("naïve café"), 2);
    assert_eq!(runs_bound("   \n\t;;"), 0);
    assert!(
        !vocabulary_joins_case(),
        "an o200k token joins a lowercase and an uppercase ASCII letter: the runs bound is wrong"
    );
}

fn main() {
    self_check();
    let texts = tool_outputs();
    // Tables built before timing; the count runs first in a process that has counted nothing.
    engine::tokens::warm_up();
    engine::tokens::clear_memo();
    let (count_us, exact) = timed(&texts, engine::tokens::count_uncached);
    let (runs_us, runs) = timed(&texts, runs_bound);
    let (pieces_us, pieces) = timed(&texts, pieces_bound);
    let outputs: Vec<Output> = (0..texts.len())
        .map(|i| Output {
            bytes: texts[i].len(),
            runs: runs[i],
            pieces: pieces[i],
            exact: exact[i],
        })
        .collect();
    for o in &outputs {
        assert!(
            o.runs <= o.exact && o.pieces <= o.exact,
            "a bound exceeded the count"
        );
    }
    let total: usize = outputs.iter().map(|o| o.bytes).sum();
    let per_token = |f: fn(&Output) -> usize| {
        median(
            outputs
                .iter()
                .map(|o| o.bytes as f64 / f(o).max(1) as f64)
                .collect(),
        )
    };
    println!(
        "{} tool outputs of {MIN_BYTES} bytes or more, {total} bytes; no bound exceeded the exact count.\n",
        outputs.len()
    );
    println!("| | exact count | runs bound | pieces bound |");
    println!("|---|--:|--:|--:|");
    println!(
        "| median bytes per token | {:.2} | {:.2} | {:.2} |",
        per_token(|o| o.exact),
        per_token(|o| o.runs),
        per_token(|o| o.pieces)
    );
    println!("| µs per output (one run) | {count_us:.1} | {runs_us:.1} | {pieces_us:.1} |\n");
    println!(
        "| gate (embedded default) | threshold | decided by runs: outputs | bytes | decided by pieces: outputs | bytes |"
    );
    println!("|---|--:|--:|--:|--:|--:|");
    // Each gate asks "fewer than n tokens?" or "at most n?" (fewer than n + 1): a bound decides
    // when the byte count is below the limit or the lower bound reaches it.
    for (gate, threshold, limit) in [
        ("`format`, `textclean` `min_tokens` (fewer than)", 50, 50),
        ("`dedup` `min_tokens` (fewer than)", 100, 100),
        ("`delta` `min_tokens` (fewer than)", 200, 200),
        ("`collapse` `max_tokens` (at most)", 2000, 2001),
        ("`collapse` `keep_failures` (at most)", 8000, 8001),
    ] {
        let decided = |f: fn(&Output) -> usize| {
            let outs: Vec<&Output> = outputs
                .iter()
                .filter(|o| o.bytes < limit || f(o) >= limit)
                .collect();
            let bytes: usize = outs.iter().map(|o| o.bytes).sum();
            (outs.len(), 100.0 * bytes as f64 / total.max(1) as f64)
        };
        let (runs_n, runs_pct) = decided(|o| o.runs);
        let (pieces_n, pieces_pct) = decided(|o| o.pieces);
        println!(
            "| {gate} | {threshold} | {runs_n} of {n} | {runs_pct:.1}% | {pieces_n} of {n} | {pieces_pct:.1}% |",
            n = outputs.len()
        );
    }
}
