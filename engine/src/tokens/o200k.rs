//! The o200k_base tokenizer, its tables built from OpenAI's token list when sluice is built.
//!
//! Why not `bpe_openai::o200k_base()`: that crate embeds its tables uncompressed, 32 MB of the
//! shipped binary's 95 (docs/performance.md "The shipped binary"). `engine/build.rs` builds the
//! same tables from the list in `engine/data/` (OpenAI's published file, checked against its
//! published SHA-256 by a test) with the crate's own constructor and hash factor, and gzips them:
//! 17 MB. Inflating them costs a first use about a tenth of a second more than reading them in
//! place did; building them at first use instead (the list alone is 1.7 MB) would cost 1.2 s,
//! most of it three Aho-Corasick automata, in every process that counts a token (measured side
//! by side by `benches/tables.rs`). With the crate's own pre-tokenizer the tokenizer is the same
//! one, token for token: a test compares the two.

use std::io::Read;
use std::sync::LazyLock;

use bpe_openai::Tokenizer;
use bpe_openai::byte_pair_encoding::BytePairEncoding;

/// What `engine/build.rs` wrote: the tables, in `bpe-openai`'s own serialization, gzipped.
const TABLES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k.tables.gz"));

/// o200k's pre-tokenizer, as `bpe-openai` writes it: a negative look-ahead `\s+(?!\S)` becomes
/// `\s+\s` with its last character dropped (the `true`), and `\s+$` covers the end of a text.
const PATTERNS: [(&str, bool); 3] = [
    (
        concat!(
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*",
            "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+",
            "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            "|\\p{N}{1,3}",
            "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*",
            "|\\s*[\\r\\n]+",
            "|\\s+$",
        ),
        false,
    ),
    ("\\s+\\s", true),
    ("\\s+", false),
];

static O200K: LazyLock<Tokenizer> = LazyLock::new(build);

/// The o200k_base tokenizer, its tables inflated on first call.
pub fn tokenizer() -> &'static Tokenizer {
    &O200K
}

fn build() -> Tokenizer {
    // The tables are compiled in, written by this crate's build script: failing to read them
    // is a broken build, not an input to report.
    let mut tables = Vec::with_capacity(34 << 20);
    flate2::read::GzDecoder::new(TABLES)
        .read_to_end(&mut tables)
        .expect("engine/build.rs wrote valid gzip");
    let bpe: BytePairEncoding =
        rmp_serde::from_slice(&tables).expect("engine/build.rs wrote the tables");
    Tokenizer::new_lookahead(bpe, &PATTERNS, false).expect("o200k's pre-tokenizer compiles")
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    /// The list is the file OpenAI publishes: tiktoken checks it against this SHA-256.
    #[test]
    fn the_token_list_is_openais_published_file() {
        let mut list = Vec::new();
        flate2::read::GzDecoder::new(&include_bytes!("../../data/o200k_base.tiktoken.gz")[..])
            .read_to_end(&mut list)
            .unwrap();
        let digest = Sha256::digest(&list);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
        );
    }

    /// Built here or precomputed by `bpe-openai`, the tokenizer is the same one: the same
    /// tokens, merge table and searchers, and the same pieces and counts on text that exercises
    /// every branch of the pre-tokenizer.
    #[test]
    fn built_from_the_list_it_is_bpe_openais_o200k() {
        let ours = tokenizer();
        let theirs = bpe_openai::o200k_base();
        assert_eq!(ours.bpe.num_tokens(), theirs.bpe.num_tokens());
        for id in 0..u32::try_from(theirs.bpe.num_tokens()).unwrap() {
            assert_eq!(ours.bpe.token_bytes(id), theirs.bpe.token_bytes(id), "{id}");
        }
        let text = concat!(
            "fn main() {\n    println!(\"héllo, wörld\");  \n}\n\n",
            "He's GONE'll 12345 ÀÉÎ naïve café — 東京タワー 🙂🙂 \t\r\n",
            "/usr/local/bin/sluice --port=8080   \n   trailing   ",
        );
        let pieces = |t: &Tokenizer| t.split(text).map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(pieces(ours), pieces(theirs));
        assert_eq!(ours.encode(text), theirs.encode(text));
        assert_eq!(ours.count(text), theirs.count(text));
    }
}
