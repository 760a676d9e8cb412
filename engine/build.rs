//! Precomputes the o200k tokenizer's tables from OpenAI's token list (`data/`), compressed.
//!
//! `bpe-openai` embeds the same tables uncompressed: 32 MB, a third of the shipped binary.
//! Built at run time instead they would cost 1.2 s (most of it three Aho-Corasick automata) in
//! every process that counts a token; gzipped here, they are inflated at first use. The measured
//! choice is in `engine/src/tokens/o200k.rs` and docs/performance.md "The shipped binary".

use std::io::{Read, Write};
use std::path::PathBuf;

use bpe::byte_pair_encoding::{BytePairEncoding, read_tiktoken};

/// The factor `bpe-openai` builds o200k with: o200k's token hashes have no collision under it.
const HASH_FACTOR: u64 = 17_846_336_922_010_275_747;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=data/o200k_base.tiktoken.gz");
    let mut list = String::new();
    flate2::read::GzDecoder::new(&include_bytes!("data/o200k_base.tiktoken.gz")[..])
        .read_to_string(&mut list)
        .expect("data/o200k_base.tiktoken.gz is gzipped text");
    let tokens = read_tiktoken(&list).expect("the o200k token list is base64, one token a line");
    let bpe = BytePairEncoding::from_dictionary(tokens, Some(HASH_FACTOR));
    let tables = rmp_serde::to_vec(&bpe).expect("the tables serialize");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let file = std::fs::File::create(out.join("o200k.tables.gz")).expect("OUT_DIR is writable");
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::best());
    gz.write_all(&tables).expect("OUT_DIR is writable");
    gz.finish().expect("OUT_DIR is writable");
}
