//! Every reference the documents make to the code resolves: a backticked file path names a
//! file of the repository, and a backticked crate path (`engine::savings::BilledSaving`,
//! `modes::turn::TurnService::run`) names items that exist in that crate. A rename or a move
//! that leaves a document behind fails here. Fenced blocks (commands, examples) are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::tidy::CRATES;

/// File kinds a document names by path.
const KINDS: [&str; 10] = [
    "rs", "md", "sh", "py", "toml", "yaml", "json", "js", "css", "html",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The documents: `docs/`, `docs/dev/` and the README.
fn documents() -> Vec<(String, String)> {
    let root = repo();
    let mut found = vec![("README.md".to_owned(), root.join("README.md"))];
    for dir in ["docs", "docs/dev"] {
        let mut names: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        names.sort();
        found.extend(names.into_iter().map(|p| {
            let name = p.strip_prefix(&root).unwrap().display().to_string();
            (name, p)
        }));
    }
    found
        .into_iter()
        .map(|(name, path)| (name, std::fs::read_to_string(path).unwrap()))
        .collect()
}

/// The inline code spans of a Markdown text, outside fenced blocks.
fn code_spans(text: &str) -> Vec<&str> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            spans.extend(line.split('`').skip(1).step_by(2));
        }
    }
    spans
}

/// A span that reads as a path to a file: a `/`, a known kind, nothing but path characters,
/// and no placeholder (`NAME`, `RUN`).
fn as_path(span: &str) -> Option<&str> {
    let plain = span
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c));
    let kind = span.rsplit_once('.').map(|(_, k)| k)?;
    let placeholder = span
        .split(['/', '.'])
        .any(|part| part.len() >= 3 && part.chars().all(|c| c.is_ascii_uppercase()));
    (plain && span.contains('/') && KINDS.contains(&kind) && !placeholder).then_some(span)
}

/// Where a document's relative path may start: the root, `docs/`, a top-level folder (a crate,
/// `tests`, `benches`) or its `src/`.
fn resolves(root: &Path, path: &str) -> bool {
    let mut bases = vec![root.to_path_buf(), root.join("docs")];
    for entry in std::fs::read_dir(root).unwrap().filter_map(Result::ok) {
        let dir = entry.path();
        let name = entry.file_name();
        let hidden = name.to_string_lossy().starts_with('.') || name == "target";
        if dir.is_dir() && !hidden {
            bases.push(dir.join("src"));
            bases.push(dir);
        }
    }
    bases.iter().any(|base| base.join(path).exists())
}

/// A span that reads as a path into a workspace crate: `crate::a::B`, a trailing `()` allowed.
fn as_item_path(span: &str) -> Option<Vec<&str>> {
    let span = span.strip_suffix("()").unwrap_or(span);
    let segments: Vec<&str> = span.split("::").collect();
    let word = |s: &&str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    (segments.len() >= 2 && CRATES.contains(&segments[0]) && segments.iter().all(word))
        .then_some(segments)
}

/// Every name a crate's sources define or bring in: items, modules (files too), fields, enum
/// variants, `as` renames. Loose on purpose: it tells a stale name from a live one, not which
/// module holds it.
fn defined_names(krate: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut files = vec![repo().join(krate).join("src")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(
                std::fs::read_dir(&path)
                    .unwrap()
                    .filter_map(|e| e.ok().map(|e| e.path())),
            );
            continue;
        }
        if path.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        names.insert(path.file_stem().unwrap().to_string_lossy().into_owned());
        let text = std::fs::read_to_string(&path).unwrap();
        let words: Vec<&str> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '!'))
            .filter(|w| !w.is_empty())
            .collect();
        for pair in words.windows(2) {
            let keyword = matches!(
                pair[0],
                "fn" | "struct"
                    | "enum"
                    | "trait"
                    | "const"
                    | "static"
                    | "type"
                    | "mod"
                    | "union"
                    | "macro_rules!"
                    | "as"
            );
            if keyword {
                names.insert(pair[1].to_owned());
            }
        }
        for line in text.lines() {
            let line = line.trim_start();
            let line = line.strip_prefix("pub ").unwrap_or(line);
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let next = line[name.len()..].trim_start().chars().next();
            // A field (`name: Type`) or a variant (`Name(`, `Name {`, `Name,`).
            if !name.is_empty() && matches!(next, Some(':' | '(' | '{' | ',')) {
                names.insert(name);
            }
        }
    }
    names
}

/// The references in `text` that do not resolve against `root` and `names` (each crate's).
fn unresolved(text: &str, root: &Path, names: &BTreeMap<&str, BTreeSet<String>>) -> Vec<String> {
    let mut missing = Vec::new();
    for span in code_spans(text) {
        if let Some(path) = as_path(span)
            && !resolves(root, path)
        {
            missing.push(path.to_owned());
        }
        if let Some(segments) = as_item_path(span) {
            let known = &names[segments[0]];
            if segments[1..].iter().any(|s| !known.contains(*s)) {
                missing.push(span.to_owned());
            }
        }
    }
    missing
}

#[test]
fn every_backticked_path_and_crate_item_in_the_docs_resolves() {
    let root = repo();
    let names: BTreeMap<&str, BTreeSet<String>> =
        CRATES.iter().map(|c| (*c, defined_names(c))).collect();
    // The check can fail: a moved file and a renamed item are caught, a live one is not.
    let control = "`engine/src/wire/gone.rs`, `engine::savings::Vanished`, `engine/src/savings.rs`, `engine::savings::BilledSaving::net_pct()`";
    assert_eq!(
        unresolved(control, &root, &names),
        ["engine/src/wire/gone.rs", "engine::savings::Vanished"]
    );
    let mut checked = 0;
    let mut broken = Vec::new();
    for (name, text) in documents() {
        checked += code_spans(&text)
            .iter()
            .filter(|s| as_path(s).is_some() || as_item_path(s).is_some())
            .count();
        broken.extend(
            unresolved(&text, &root, &names)
                .into_iter()
                .map(|r| format!("{name}: `{r}`")),
        );
    }
    assert!(checked > 200, "only {checked} references read");
    assert!(
        broken.is_empty(),
        "references to nothing:\n{}",
        broken.join("\n")
    );
}
