//! `docs/glossary.md` against the other documents: every term it defines is used in one of them,
//! a user-facing document that uses a listed jargon term finds it defined there, and user-facing
//! documents speak of the product, not of issue numbers or what it was built against.

use std::path::{Path, PathBuf};

/// The documents a user reads. `ARCHITECTURE.md`, `performance.md` and `hardening.md` are for
/// developers and may name issues.
const USER_DOCS: &[&str] = &[
    "README.md",
    "docs/guide.md",
    "docs/configuration.md",
    "docs/dashboard.md",
    "docs/components.md",
    "docs/stats.md",
    "docs/agents.md",
    "docs/glossary.md",
];

/// Terms a reader cannot be expected to know: a user-facing document that uses one needs a
/// glossary line whose term contains it. Matched as `normalized` text, so `cold_cache`,
/// `cold-cache` and "cold cache" are one term.
const JARGON: &[&str] = &[
    "context-guru",
    "marker",
    "stash",
    "the way back",
    "expand round",
    "frozen",
    "flip",
    "cold turn",
    "cold cache",
    "warm turn",
    "cached prefix",
    "at depth",
    "dialect",
    "preset",
    "pipeline",
    "skip reason",
    "back-off",
    "cost guard",
    "observe mode",
    "sync mode",
    "shadow run",
    "net savings",
    "gross savings",
    "fresh-token equivalent",
    "input-token equivalent",
    "visible recall",
    "content tokens",
    "embedded default",
    "offload",
    "reformat",
    "untouched",
    "lease",
];

/// What a user-facing document does not say, lowercased: an issue number (`issue #33`, `#34`),
/// or "the reference" and "the spec" for context-guru (followed by a letter, they are other
/// words: "the referenced", "the specified").
fn unspeakable(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut found = Vec::new();
    for (at, _) in lower.match_indices('#') {
        if lower[at + 1..].starts_with(|c: char| c.is_ascii_digit()) {
            found.push(excerpt(&lower, at));
        }
    }
    for phrase in ["the reference", "the spec"] {
        for (at, _) in lower.match_indices(phrase) {
            let next = lower[at + phrase.len()..].chars().next();
            if !next.is_some_and(char::is_alphabetic) {
                found.push(excerpt(&lower, at));
            }
        }
    }
    found
}

/// A few words around `at`, for the failure message.
fn excerpt(text: &str, at: usize) -> String {
    let start = text[..at]
        .char_indices()
        .rev()
        .nth(20)
        .map_or(0, |(i, _)| i);
    let end = text[at..]
        .char_indices()
        .nth(30)
        .map_or(text.len(), |(i, _)| at + i);
    text[start..end].replace('\n', " ")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Lowercase, `-` and `_` as spaces, no Markdown emphasis or code ticks: how a term is matched.
fn normalized(text: &str) -> String {
    text.chars()
        .filter(|c| !matches!(c, '`' | '*'))
        .map(|c| match c {
            '-' | '_' => ' ',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Every term the glossary defines, each spelling of it: the bold head of each
/// `- **term / other spelling**: definition` line.
fn glossary_terms() -> Vec<String> {
    let terms: Vec<String> = read("docs/glossary.md")
        .lines()
        .filter_map(|line| line.strip_prefix("- **")?.split_once("**:"))
        .flat_map(|(head, _)| head.split(" / ").map(|t| t.trim().to_owned()))
        .collect();
    assert!(
        terms.len() >= 40,
        "only {} glossary terms read",
        terms.len()
    );
    terms
}

/// README.md and every `docs/*.md` and `docs/dev/*.md` but the glossary.
fn other_docs() -> Vec<String> {
    let mut names: Vec<String> = ["docs", "docs/dev"]
        .iter()
        .flat_map(|dir| {
            std::fs::read_dir(repo().join(dir))
                .unwrap()
                .filter_map(move |e| {
                    let name = e.ok()?.file_name().into_string().ok()?;
                    let doc = Path::new(&name).extension().is_some_and(|e| e == "md")
                        && name != "glossary.md";
                    doc.then(|| format!("{dir}/{name}"))
                })
        })
        .collect();
    names.sort();
    names.insert(0, "README.md".to_owned());
    names.iter().map(|n| read(n)).collect()
}

#[test]
fn every_glossary_term_is_used_in_another_doc() {
    let docs: Vec<String> = other_docs().iter().map(|d| normalized(d)).collect();
    let unused: Vec<String> = glossary_terms()
        .into_iter()
        .filter(|term| !docs.iter().any(|d| d.contains(&normalized(term))))
        .collect();
    assert!(
        unused.is_empty(),
        "docs/glossary.md defines terms no other doc uses (drop their lines): {unused:?}"
    );
}

#[test]
fn user_docs_find_their_jargon_in_the_glossary() {
    assert!(
        read("README.md").contains("(docs/glossary.md)"),
        "README.md does not link docs/glossary.md"
    );
    let defined: Vec<String> = glossary_terms().iter().map(|t| normalized(t)).collect();
    let mut missing = Vec::new();
    for doc in USER_DOCS.iter().filter(|d| **d != "docs/glossary.md") {
        let text = normalized(&read(doc));
        for term in JARGON {
            let term = normalized(term);
            if text.contains(&term) && !defined.iter().any(|d| d.contains(&term)) {
                missing.push(format!("{doc}: {term}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "jargon with no line in docs/glossary.md: {missing:?}"
    );
}

#[test]
fn user_docs_speak_of_the_product() {
    let mut found = Vec::new();
    for doc in USER_DOCS {
        for said in unspeakable(&read(doc)) {
            found.push(format!("{doc}: …{said}…"));
        }
    }
    assert!(
        found.is_empty(),
        "user-facing docs name an issue, \"the reference\" or \"the spec\" (say context-guru, \
         or what the product does; generated sections change at their source): {found:#?}"
    );
}

#[test]
fn the_checks_see_what_they_should() {
    assert_eq!(
        unspeakable("as issue #33 measured"),
        ["as issue #33 measured"]
    );
    assert_eq!(unspeakable("(#34)").len(), 1);
    assert_eq!(
        unspeakable("The reference's keys; as the spec says").len(),
        2
    );
    assert!(unspeakable("the referenced file, the specified key, [Gates](#gates)").is_empty());
    assert_eq!(normalized("`cold_cache`"), normalized("cold-cache"));
}
