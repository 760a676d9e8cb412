//! What a one-pass token bound could decide on the request path (issue #22, item 6).
//!
//! Item 6 asks that gates which only compare a count with a threshold decide on a bound
//! computed in one pass, and that the exact o200k count wait until after the send. This harness
//! measures whether that can work for the embedded default before anyone builds it. It computes,
//! for every tool output of 2 KB or more in the public corpus, the best lower bound found that is
//! provably at most the o200k count, and checks it against the exact count. It then reports how
//! many of those outputs, and how many of their bytes, each threshold of the embedded default
//! could decide without counting.
//!
//! The upper bound is the byte count: every token is at least one byte. The lower bound counts
//! pieces that o200k's pre-tokenizer must produce, each at least one token:
//! - every maximal run of ASCII letters and `'` (non-ASCII bytes join it, since they may be
//!   letters of the same word) holds at least one word piece, and no piece spans two runs;
//! - every maximal run of ASCII digits (non-ASCII bytes join it, for `\p{N}`) holds at least
//!   one number piece per three digits;
//! - a word piece never has an ASCII lowercase letter right before an ASCII uppercase one
//!   (`fooBar` is two pieces).
//!
//! `cargo run --release -p benches --bin bounds` prints the Markdown in docs/performance.md.

use engine::wire::{self, Dialect};

/// Tool outputs shorter than this are counted on sight whatever the gate: counting them costs
/// less than it is worth deferring.
const MIN_BYTES: usize = 2048;

fn lower_bound(text: &str) -> usize {
    let bytes = text.as_bytes();
    let letter = |b: u8| b.is_ascii_alphabetic() || b == b'\'' || b >= 0x80;
    let digit = |b: u8| b.is_ascii_digit() || b >= 0x80;
    let mut pieces = 0;
    let (mut in_word, mut word_has_letter) = (false, false);
    let (mut in_number, mut digits) = (false, 0);
    let mut previous = 0u8;
    for &b in bytes {
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

/// One tool output: its bytes, lower bound and exact count.
struct Output {
    bytes: usize,
    lower: usize,
    exact: usize,
}

fn outputs() -> Vec<Output> {
    let mut out = Vec::new();
    for (_, body) in benches::public_bodies(Dialect::OpenAi) {
        let parsed = wire::parse(&body, Dialect::OpenAi).expect("corpus parses");
        for message in parsed.messages().iter().filter(|m| m.is_tool()) {
            let text = message.content.as_str();
            if text.len() < MIN_BYTES {
                continue;
            }
            out.push(Output {
                bytes: text.len(),
                lower: lower_bound(text),
                exact: engine::tokens::count(text),
            });
        }
    }
    out
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let outputs = outputs();
    let total_bytes: usize = outputs.iter().map(|o| o.bytes).sum();
    let broken = outputs.iter().filter(|o| o.lower > o.exact).count();
    println!(
        "{} tool outputs of {MIN_BYTES} bytes or more, {total_bytes} bytes; the lower bound exceeded the exact count on {broken}.",
        outputs.len()
    );
    println!(
        "Median bytes per token: {:.2} exact, {:.2} by the lower bound.\n",
        median(
            outputs
                .iter()
                .map(|o| o.bytes as f64 / o.exact as f64)
                .collect()
        ),
        median(
            outputs
                .iter()
                .map(|o| o.bytes as f64 / o.lower.max(1) as f64)
                .collect()
        ),
    );
    println!(
        "| gate (embedded default) | threshold | outputs decided by the bound | bytes decided |"
    );
    println!("|---|--:|--:|--:|");
    // Each gate asks "fewer than n tokens?" or "at most n?" (fewer than n + 1): the bound
    // decides when the byte count is below the limit or the lower bound reaches it.
    for (gate, threshold, limit) in [
        ("`format`, `textclean` `min_tokens` (fewer than)", 50, 50),
        ("`dedup` `min_tokens` (fewer than)", 100, 100),
        ("`delta` `min_tokens` (fewer than)", 200, 200),
        ("`collapse` `max_tokens` (at most)", 2000, 2001),
        ("`collapse` `keep_failures` (at most)", 8000, 8001),
    ] {
        let decided: Vec<&Output> = outputs
            .iter()
            .filter(|o| o.bytes < limit || o.lower >= limit)
            .collect();
        let bytes: usize = decided.iter().map(|o| o.bytes).sum();
        println!(
            "| {gate} | {threshold} | {} of {} | {:.1}% |",
            decided.len(),
            outputs.len(),
            100.0 * bytes as f64 / total_bytes.max(1) as f64
        );
    }
}

#[cfg(test)]
mod tests {
    use super::lower_bound;

    #[test]
    fn counts_the_pieces_o200k_must_make() {
        assert_eq!(lower_bound("fooBar baz"), 3);
        assert_eq!(lower_bound("1234567"), 3);
        assert_eq!(lower_bound("don't stop"), 2);
        assert_eq!(lower_bound("naïve café"), 2);
        assert_eq!(lower_bound("   \n\t;;"), 0);
    }
}
