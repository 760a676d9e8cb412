//! Shared helpers for sluice's end-to-end tests: finding the real corpus and checking bodies.
//!
//! The corpus lives in `shared/corpus` beside the repository (CI lays a copy there too).
//! `SLUICE_CORPUS` overrides the location; otherwise every ancestor of the checkout is tried,
//! then the workplace's `/work/shared`, so a clone in a temporary folder still finds it.

pub mod mock;

use std::path::{Path, PathBuf};

use engine::wire::{Dialect, json};

/// The corpus root.
///
/// # Panics
/// When the corpus cannot be found: the tests are meaningless without it, so they fail loudly.
pub fn corpus_root() -> PathBuf {
    if let Ok(dir) = std::env::var("SLUICE_CORPUS") {
        return PathBuf::from(dir);
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = here
        .ancestors()
        .map(|dir| dir.join("shared/corpus"))
        .chain(std::iter::once(PathBuf::from("/work/shared/corpus")))
        .find(|candidate| candidate.join("public").is_dir());
    found.unwrap_or_else(|| {
        panic!(
            "corpus not found beside {} (set SLUICE_CORPUS)",
            here.display()
        )
    })
}

/// One request body of the corpus.
#[derive(Debug)]
pub struct CorpusBody {
    pub path: PathBuf,
    pub dialect: Dialect,
    pub bytes: Vec<u8>,
}

/// Every `{openai,anthropic}.json` under `public/` and `claude-code/`, in a stable order.
pub fn bodies() -> Vec<CorpusBody> {
    let mut out = Vec::new();
    for set in ["public", "claude-code"] {
        let mut runs: Vec<PathBuf> = std::fs::read_dir(corpus_root().join(set))
            .expect("corpus set is readable")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        runs.sort();
        for run in runs {
            for (file, dialect) in [
                ("openai.json", Dialect::OpenAi),
                ("anthropic.json", Dialect::Anthropic),
            ] {
                let path = run.join(file);
                if let Ok(bytes) = std::fs::read(&path) {
                    out.push(CorpusBody {
                        path,
                        dialect,
                        bytes,
                    });
                }
            }
        }
    }
    assert!(
        out.len() >= 90,
        "expected the full corpus, found {} bodies",
        out.len()
    );
    out
}

/// The raw text of every top-level field of a JSON object body, by key, except `skip`.
pub fn top_level_fields<'a>(text: &'a str, skip: &str) -> Vec<(&'a str, &'a str)> {
    let root = json::parse_document(text).expect("valid JSON");
    json::entries(text, root)
        .filter(|e| !json::key_is(text, e.key, skip))
        .map(|e| (e.key.of(text), e.value.of(text)))
        .collect()
}
