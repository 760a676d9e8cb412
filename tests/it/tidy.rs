//! Tidy: the crate graph and each crate's module graph, read from the sources' paths (a small
//! lexer skips comments and literals, then `use` trees and inline `crate::`/`super::` paths are
//! parsed), rendered into `docs/ARCHITECTURE.md` (crates) and `docs/dev/modules.md` (modules) and required
//! to have no cycle.
//!
//! A module of a crate is a top-level `mod` of its root; a file under `src/foo/` belongs to
//! `foo`. Test code is left out: `tests.rs` files, modules the root declares `#[cfg(test)]`, and
//! a file's `#[cfg(test)] mod` block. The root itself only declares modules and re-exports, so
//! no module may name an item through it (`crate::Item`): that edge would be invisible here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library crates, each a directory of the workspace with a `src/lib.rs` (the references
/// test reads the same list).
pub(crate) const CRATES: &[&str] = &[
    "grammars",
    "engine",
    "sandbox",
    "actors",
    "store",
    "dashboard",
    "modes",
    "llm",
    "proxy",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `text` with comments, string and char literals blanked out (newlines kept), so that only
/// code is left to read paths from.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        let skip = if rest.starts_with("//") {
            rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            rest.find("*/").map_or(rest.len(), |end| end + 2)
        } else if let Some(len) = raw_string_len(rest) {
            len
        } else if rest.starts_with('"') {
            quoted_len(rest, '"')
        } else if rest.starts_with('\'') && is_char_literal(rest) {
            quoted_len(rest, '\'')
        } else {
            let ch = rest.chars().next().expect("not at the end");
            out.push(ch);
            i += ch.len_utf8();
            continue;
        };
        out.extend(rest[..skip].chars().filter(|&c| c == '\n'));
        out.push(' ');
        i += skip;
    }
    out
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`, `br"..."`) at the start of `s`.
fn raw_string_len(s: &str) -> Option<usize> {
    let after_prefix = s.strip_prefix("br").or_else(|| s.strip_prefix('r'))?;
    let hashes = after_prefix.len() - after_prefix.trim_start_matches('#').len();
    let body = after_prefix[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    let end = body.find(&close)?;
    Some(s.len() - body.len() + end + close.len())
}

/// The length of a `quote`-delimited literal with backslash escapes at the start of `s`.
fn quoted_len(s: &str, quote: char) -> usize {
    let mut escaped = false;
    for (at, ch) in s.char_indices().skip(1) {
        match ch {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == quote => return at + 1,
            _ => {}
        }
    }
    s.len()
}

/// Whether the `'` at the start of `s` opens a char literal rather than a lifetime.
fn is_char_literal(s: &str) -> bool {
    let mut chars = s.chars().skip(1);
    matches!(
        (chars.next(), chars.next()),
        (Some('\\'), _) | (Some(_), Some('\''))
    )
}

/// The first segment after each `crate::` and, from a file directly under `src/`, each
/// `super::` in `code`, including every branch of a `use crate::{a, b::c}` tree.
fn named_modules(code: &str, super_is_root: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut prefixes = vec!["crate::"];
    if super_is_root {
        prefixes.push("super::");
    }
    for prefix in prefixes {
        for (at, _) in code.match_indices(prefix) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = code[at + prefix.len()..].trim_start();
            match rest.strip_prefix('{') {
                Some(tree) => out.extend(tree_heads(tree)),
                None => out.extend(ident(rest)),
            }
        }
    }
    out
}

/// The first identifier of each top-level branch of a `{...}` use tree (the text after `{`).
fn tree_heads(tree: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut branch_start) = (0usize, true);
    for (at, ch) in tree.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => branch_start = true,
            c if branch_start && !c.is_whitespace() => {
                branch_start = false;
                heads.extend(ident(&tree[at..]));
            }
            _ => {}
        }
    }
    heads
}

fn ident(s: &str) -> Option<String> {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| s[..end].to_owned())
}

/// A file's library code: its `#[cfg(test)] mod ... { ... }` blocks left out.
fn library_code(text: &str) -> String {
    let mut code = code_only(text);
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]").map(|at| from + at) {
        from = at + 1;
        let item = code[at + "#[cfg(test)]".len()..].trim_start();
        let item = item
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        let opens = item.find('{');
        if !item.starts_with("mod ") || opens.is_none_or(|o| item.find(';').is_some_and(|s| s < o))
        {
            continue;
        }
        let open = code.len() - item.len() + opens.expect("checked");
        let mut depth = 0usize;
        let close = code[open..]
            .char_indices()
            .find_map(|(i, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                (depth == 0).then_some(open + i + 1)
            })
            .unwrap_or(code.len());
        code.replace_range(at..close, "");
        from = at;
    }
    code
}

/// The files a source file declares test-only (`#[cfg(test)] mod NAME;`): for each, the path
/// of `NAME.rs` and of the directory `NAME/`.
fn test_only_paths(file: &Path, text: &str) -> Vec<PathBuf> {
    let code = code_only(text);
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let dir = file.parent().expect("a file in a directory");
    let dir = if matches!(stem, "lib" | "main" | "mod") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    code.match_indices("#[cfg(test)]")
        .filter_map(|(at, attr)| {
            let item = code[at + attr.len()..].trim_start();
            let item = item
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            let name = ident(item.strip_prefix("mod ")?)?;
            item[4 + name.len()..]
                .trim_start()
                .starts_with(';')
                .then_some(name)
        })
        .flat_map(|name| [dir.join(format!("{name}.rs")), dir.join(name)])
        .collect()
}

/// A crate's module graph: each top-level module and the modules it names.
#[derive(Debug, Default)]
struct Graph {
    uses: BTreeMap<String, BTreeSet<String>>,
    /// `crate::Item` paths, where `Item` is not a module: each a `(module, item)`.
    through_root: Vec<(String, String)>,
}

/// A crate's library code: each file's path under `src/` with its code (comments, literals and
/// `#[cfg(test)] mod` blocks blanked), test files and test-only modules left out; and the
/// top-level modules that are test-only.
struct Library {
    files: Vec<(PathBuf, String)>,
    test_modules: BTreeSet<String>,
}

fn library(krate: &str) -> Library {
    let src = repo().join(krate).join("src");
    let mut paths = Vec::new();
    collect_rs(&src, &mut paths);
    let texts: Vec<String> = paths
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("a source file"))
        .collect();
    let test_only: Vec<PathBuf> = paths
        .iter()
        .zip(&texts)
        .flat_map(|(file, text)| test_only_paths(file, text))
        .collect();
    let files = paths
        .iter()
        .zip(&texts)
        .filter_map(|(file, text)| {
            let relative = file.strip_prefix(&src).expect("under src");
            let in_tests = relative.ends_with("tests.rs")
                || relative.iter().any(|part| part == "tests")
                || test_only.iter().any(|t| file.starts_with(t));
            (!in_tests).then(|| (relative.to_path_buf(), library_code(text)))
        })
        .collect();
    let test_modules = test_only
        .iter()
        .filter(|t| t.parent() == Some(src.as_path()))
        .filter_map(|t| Some(t.file_stem()?.to_str()?.to_owned()))
        .collect();
    Library {
        files,
        test_modules,
    }
}

fn module_graph(krate: &str) -> Graph {
    let library = library(krate);
    let mut graph = Graph::default();
    let mut names = BTreeMap::new();
    for (relative, code) in &library.files {
        let module = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .expect("a path under src")
            .trim_end_matches(".rs")
            .to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        graph.uses.entry(module.clone()).or_default();
        // `super` is the crate root from a top-level module's own file: `src/foo.rs` or
        // `src/foo/mod.rs`.
        let super_is_root = relative.components().count() == 1
            || (relative.components().count() == 2 && relative.ends_with("mod.rs"));
        names
            .entry(module)
            .or_insert_with(Vec::new)
            .extend(named_modules(code, super_is_root));
    }
    for (module, named) in names {
        for name in named {
            if name == module || name == "self" || name == "super" {
                continue;
            }
            if graph.uses.contains_key(&name) || library.test_modules.contains(&name) {
                graph.uses.get_mut(&module).expect("seen").insert(name);
            } else {
                graph.through_root.push((module.clone(), name));
            }
        }
    }
    graph
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("a source directory")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A cycle in `uses`, as the modules along it, if there is one.
fn cycle(uses: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        node: &'a str,
        uses: &'a BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<&'a str>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| *n == node) {
            let mut found: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            found.push(node.to_owned());
            return Some(found);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in uses.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, uses, done, path) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    uses.keys()
        .find_map(|node| visit(node, uses, &mut done, &mut Vec::new()))
}

/// How far each module sits above the modules it uses (0: it uses none). A name that is not a
/// module of the graph (a test-only one) has no layer. Call it on a graph without a cycle.
fn layers(uses: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<&str, usize> {
    let mut layer: BTreeMap<&str, usize> = BTreeMap::new();
    while layer.len() < uses.len() {
        let placed = layer.len();
        for (module, named) in uses {
            if layer.contains_key(module.as_str()) {
                continue;
            }
            let below: Option<Vec<usize>> = named
                .iter()
                .filter(|n| uses.contains_key(n.as_str()))
                .map(|n| layer.get(n.as_str()).copied())
                .collect();
            if let Some(below) = below {
                layer.insert(module, below.into_iter().max().map_or(0, |m| m + 1));
            }
        }
        assert!(layer.len() > placed, "layers of a graph with a cycle");
    }
    layer
}

/// `uses` as a table, highest layer first: who may read whom, at a glance.
fn render(uses: &BTreeMap<String, BTreeSet<String>>) -> String {
    let layer = layers(uses);
    let mut rows: Vec<(&str, usize)> = layer.iter().map(|(m, l)| (*m, *l)).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut out = String::from("| module | uses |\n|---|---|\n");
    for (module, _) in rows {
        let named: Vec<String> = uses[module].iter().map(|n| format!("`{n}`")).collect();
        out.push_str(&format!("| `{module}` | {} |\n", named.join(", ")));
    }
    out
}

/// Our crates each crate's `[dependencies]` names.
fn crate_graph() -> BTreeMap<String, BTreeSet<String>> {
    CRATES
        .iter()
        .map(|krate| {
            let manifest = std::fs::read_to_string(repo().join(krate).join("Cargo.toml"))
                .expect("the crate's Cargo.toml");
            let dependencies = manifest
                .split("\n[")
                .find(|section| section.starts_with("dependencies]"))
                .unwrap_or_default();
            let ours = dependencies
                .lines()
                .filter_map(|line| ident(line.trim()))
                .filter(|name| CRATES.contains(&name.as_str()))
                .collect();
            (krate.to_string(), ours)
        })
        .collect()
}

#[test]
fn crates_and_modules_form_trees() {
    let crates = crate_graph();
    assert_eq!(cycle(&crates), None, "the crate graph has a cycle");
    let crate_table = render(&crates).replace("module", "crate");
    let mut blocks = Vec::new();
    for krate in CRATES {
        let graph = module_graph(krate);
        assert_eq!(
            graph.through_root,
            [],
            "{krate}: items named through the crate root"
        );
        assert_eq!(
            cycle(&graph.uses),
            None,
            "{krate}'s module graph has a cycle"
        );
        blocks.push((format!("modules-{krate}"), render(&graph.uses)));
    }
    crate::generated::check_doc("ARCHITECTURE.md", "crates_and_modules_form_trees", |doc| {
        crate::generated::splice(doc, "crates", &crate_table)
    });
    crate::generated::check_doc("dev/modules.md", "crates_and_modules_form_trees", |doc| {
        blocks.iter().fold(doc.to_owned(), |doc, (name, table)| {
            crate::generated::splice(&doc, name, table)
        })
    });
}

#[test]
fn the_path_reader_reads_paths_and_nothing_else() {
    let code = code_only(
        "use crate::{a::B, b, c::{d, e}};\n// crate::comment\nlet s = \"crate::string\";\n\
         let r = r#\"crate::raw\"#; let c = '\"'; fn f<'a>(x: &'a crate::f::X) {}\n/* crate::block */ super::g();",
    );
    assert_eq!(named_modules(&code, false), ["a", "b", "c", "f"]);
    assert_eq!(named_modules(&code, true), ["a", "b", "c", "f", "g"]);
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", &["b"][..]), ("b", &["c"]), ("c", &["a"])]
            .iter()
            .map(|(m, u)| (m.to_string(), u.iter().map(|s| s.to_string()).collect()))
            .collect();
    assert_eq!(
        cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        library_code("use crate::x;\n#[cfg(test)]\nmod tests {\n use crate::y;\n}\nfn z() {}\n")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["use", "crate::x;", "fn", "z()", "{}"]
    );
}

/// Lines a library file may have, its tests left out.
const MAX_FILE_LINES: usize = 800;
/// Lines a function may have, signature to closing brace.
const MAX_FN_LINES: usize = 100;

/// Each function in `code` (comments and literals blanked) with a body: its name and lines.
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(name) = ident(&code[at + 3..]) else {
            continue;
        };
        let rest = &code[at..];
        // The body opens at the first `{` outside the signature's parentheses and brackets (an
        // array type `[u8; N]` has a `;`); a `;` there first is a declaration without a body.
        let mut nesting = 0usize;
        let Some((open, '{')) = rest.char_indices().find(|&(_, c)| {
            match c {
                '(' | '[' => nesting += 1,
                ')' | ']' => nesting = nesting.saturating_sub(1),
                _ => {}
            }
            nesting == 0 && (c == '{' || c == ';')
        }) else {
            continue;
        };
        let mut depth = 0usize;
        let close = rest[open..].char_indices().find_map(|(i, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(open + i)
        });
        if let Some(close) = close {
            out.push((name, rest[..close].matches('\n').count() + 1));
        }
    }
    out
}

#[test]
fn files_and_functions_a_reader_can_hold() {
    let mut long = Vec::new();
    for krate in CRATES {
        for (relative, code) in library(krate).files {
            let file = format!("{krate}/src/{}", relative.display());
            let lines = code.lines().count();
            if lines > MAX_FILE_LINES {
                long.push(format!("{file}: {lines} lines"));
            }
            for (name, lines) in function_lengths(&code) {
                if lines > MAX_FN_LINES {
                    long.push(format!("{file}: fn {name}, {lines} lines"));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "over {MAX_FILE_LINES} lines a file or {MAX_FN_LINES} a function:\n{}",
        long.join("\n")
    );
    let sample =
        code_only("fn short() {\n    1\n}\nfn decl();\nfn long(a: [u8; 2]) {\n    {\n    }\n}\n");
    assert_eq!(
        function_lengths(&sample),
        [("short".to_owned(), 3), ("long".to_owned(), 4)]
    );
}

/// Library code names what it imports: a glob (`use super::*`, `pub use x::*`) hides where a
/// name comes from and what a module exports (`pipeline/` resolved its names through twelve,
/// `cli`'s subcommands through six). Tests may glob their parent.
#[test]
fn library_code_names_its_imports() {
    let mut globs = Vec::new();
    for krate in CRATES {
        for (relative, code) in library(krate).files {
            let file = format!("{krate}/src/{}", relative.display());
            globs.extend(
                glob_imports(&code)
                    .into_iter()
                    .map(|line| format!("{file}: {line}")),
            );
        }
    }
    assert!(globs.is_empty(), "glob imports:\n{}", globs.join("\n"));
    assert_eq!(
        glob_imports("use super::*;\npub use a::*;\nuse b::{c, d};\nlet x = y * z;"),
        ["use super::*;", "pub use a::*;"]
    );
}

/// The `use` lines of `code` that import with a glob.
fn glob_imports(code: &str) -> Vec<&str> {
    code.lines()
        .map(str::trim)
        .filter(|line| {
            let line = line
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            line.starts_with("use ") && line.contains("::*")
        })
        .collect()
}

/// A public type's name means one thing across the workspace: no two crates define public
/// types (`pub struct`, `enum`, `trait`, `type`) of the same name. (Seven pairs did: a `Report`
/// in `modes` and in `proxy`, a `Kind` of stats row beside the pipeline's, ...)
#[test]
fn no_two_crates_define_a_public_type_of_one_name() {
    let mut owners: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for krate in CRATES {
        for (_, code) in library(krate).files {
            for line in code.lines() {
                let line = line.trim_start();
                let Some(rest) = line.strip_prefix("pub ") else {
                    continue;
                };
                let name = ["struct ", "enum ", "trait ", "type "]
                    .iter()
                    .find_map(|keyword| rest.strip_prefix(keyword))
                    .and_then(ident);
                if let Some(name) = name {
                    owners.entry(name).or_default().insert(krate);
                }
            }
        }
    }
    assert!(
        owners.len() > 200,
        "the scan found the public types: {}",
        owners.len()
    );
    let shared: Vec<String> = owners
        .iter()
        .filter(|(_, crates)| crates.len() > 1)
        .map(|(name, crates)| format!("{name} in {crates:?}"))
        .collect();
    assert!(
        shared.is_empty(),
        "public types of one name in several crates: {shared:?}"
    );
}

/// Every `file::function` (or `file::Type::function`) in ARCHITECTURE.md's "The life of a
/// request" table exists: the file, the type in it, and the function.
#[test]
fn the_life_of_a_request_names_what_exists() {
    let doc = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).expect("the doc");
    let section = doc
        .split("## The life of a request\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the section");
    let mut checked = 0;
    for row in section.lines().filter(|l| l.starts_with("| ")) {
        let Some(place) = row.split(" | ").nth(1) else {
            continue;
        };
        for entry in place.split('`').skip(1).step_by(2) {
            let Some((file, names)) = entry.split_once(".rs::") else {
                continue;
            };
            let path = repo().join(format!("{file}.rs"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|_| panic!("{entry}: no file {}", path.display()));
            let names: Vec<&str> = names.split("::").collect();
            let function = names.last().expect("a function");
            assert!(
                text.contains(&format!("fn {function}("))
                    || text.contains(&format!("fn {function}<")),
                "{entry}: no fn {function}"
            );
            if let [ty, _] = names[..] {
                assert!(
                    text.contains(&format!(" {ty} {{")) || text.contains(&format!(" {ty}<")),
                    "{entry}: no {ty}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "the table's entries were read: {checked}");
}

/// ARCHITECTURE.md stays a map a newcomer reads in one sitting (at most 25 KB; the detail is in
/// docs/dev/), and it says for every package of the design card whether it is used, and why.
#[test]
fn the_architecture_doc_is_a_map_and_answers_for_the_card() {
    let doc = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).expect("the doc");
    assert!(
        doc.len() <= 25_000,
        "docs/ARCHITECTURE.md is {} bytes",
        doc.len()
    );
    const CARD: [&str; 12] = [
        "tokio",
        "actix",
        "async-trait",
        "hyper",
        "bytes",
        "futures",
        "crossbeam-channel",
        "parking_lot",
        "starlark",
        "tree-sitter",
        "serde_json",
        "sonic-rs",
    ];
    let table = doc
        .split("## The design card's packages")
        .nth(1)
        .expect("a section on the card's packages");
    for package in CARD {
        assert!(
            table.contains(&format!("| `{package}` | ")),
            "{package} has no row in ARCHITECTURE.md's card table"
        );
    }
    for dev in ["crates", "modules", "state", "concerns", "request"] {
        assert!(repo().join(format!("docs/dev/{dev}.md")).exists(), "{dev}");
        assert!(doc.contains(&format!("(dev/{dev}.md)")), "a link to {dev}");
    }
}

/// Every library error type (a `thiserror::Error` derive) is named in docs/dev/concerns.md's
/// "Errors" bullet, which is the house's inventory of what can fail; it had drifted to 14 of 22.
#[test]
fn every_error_type_is_in_the_errors_list() {
    let doc = std::fs::read_to_string(repo().join("docs/dev/concerns.md")).expect("the doc");
    let start = doc.find("- **Errors.**").expect("an Errors bullet");
    let end = start + 1 + doc[start + 1..].find("\n- **").expect("a bullet after it");
    let bullet = &doc[start..end];
    let mut found = BTreeSet::new();
    for krate in CRATES {
        for (relative, code) in library(krate).files {
            for (at, _) in code.match_indices("thiserror::Error") {
                let after = &code[at..];
                let keyword = [after.find("enum "), after.find("struct ")]
                    .into_iter()
                    .flatten()
                    .min()
                    .expect("a type after its derive");
                let rest = after[keyword..].split_once(' ').expect("a name").1;
                let name = ident(rest).expect("an identifier");
                found.insert((name, format!("{krate}/src/{}", relative.display())));
            }
        }
    }
    assert!(found.len() >= 20, "{found:?}");
    let missing: Vec<String> = found
        .iter()
        .filter(|(name, _)| {
            !bullet.contains(&format!("`{name}`")) && !bullet.contains(&format!("::{name}`"))
        })
        .map(|(name, file)| format!("{name} ({file})"))
        .collect();
    assert!(
        missing.is_empty(),
        "error types missing from docs/dev/concerns.md's Errors bullet: {missing:?}"
    );
}

/// The module paths `code` names from inside module `at`: every `crate::`, `super::` and
/// `self::` path resolved to absolute segments, a `{...}` tree giving one path per leaf.
fn named_paths(code: &str, at: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for prefix in ["crate::", "super::", "self::"] {
        for (found, _) in code.match_indices(prefix) {
            let before = code[..found].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut base: Vec<String> = match prefix {
                "crate::" => Vec::new(),
                "self::" => at.to_vec(),
                _ => at[..at.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &code[found + prefix.len()..];
            // More `super::`s climb further.
            while let Some(more) = rest.strip_prefix("super::") {
                base.pop();
                rest = more;
            }
            path_leaves(rest, base, &mut out);
        }
    }
    out
}

/// The paths `text` starts with, after `base`: `a::b::c`, or `a::{b, c::{d, e}}` (one per leaf).
/// Returns how much of `text` it read.
fn path_leaves(text: &str, mut base: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut at = 0;
    loop {
        at += text[at..].len() - text[at..].trim_start().len();
        let rest = &text[at..];
        if let Some(tree) = rest.strip_prefix('{') {
            at += 1;
            let mut inner = 1;
            loop {
                inner += path_leaves(&tree[inner - 1..], base.clone(), out);
                let after = tree[inner - 1..].trim_start();
                let skipped = tree[inner - 1..].len() - after.len();
                match after.chars().next() {
                    Some(',') => inner += skipped + 1,
                    _ => {
                        inner += skipped + 1;
                        break;
                    }
                }
                if tree[inner - 1..].trim_start().starts_with('}') {
                    inner += tree[inner - 1..].len() - tree[inner - 1..].trim_start().len() + 1;
                    break;
                }
            }
            return at + inner - 1;
        }
        let Some(name) = ident(rest) else {
            if !base.is_empty() {
                out.push(base);
            }
            return at;
        };
        at += name.len();
        if name != "self" {
            base.push(name);
        }
        match text[at..].strip_prefix("::") {
            Some(_) => at += 2,
            None => {
                out.push(base);
                return at;
            }
        }
    }
}

#[test]
fn path_leaves_reads_trees_to_their_leaves() {
    let at = ["components".to_owned(), "extract".to_owned()];
    let paths = |code: &str| -> Vec<String> {
        named_paths(code, &at)
            .into_iter()
            .map(|p| p.join("::"))
            .collect()
    };
    assert_eq!(
        paths("use super::extract_llm::{Llm, Outcome};"),
        [
            "components::extract_llm::Llm",
            "components::extract_llm::Outcome"
        ]
    );
    assert_eq!(
        paths("use crate::{components::projection::{self, Projector}, gate};"),
        [
            "components::projection",
            "components::projection::Projector",
            "gate"
        ]
    );
    assert_eq!(
        paths("let x = super::super::wire::json::kind(t);"),
        ["wire::json::kind"]
    );
    assert_eq!(paths("self::inner::f()"), ["components::extract::inner::f"]);
}

/// What a module's own file imports from its children (`use child::Name`, private or not: a
/// child sees its parent's imports), so that `super::Name` from a sibling counts as naming
/// `child`: name -> child.
fn imports_from_children(
    code: &str,
    at: &[String],
    children: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for (start, _) in code.match_indices("use ") {
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut paths = Vec::new();
        path_leaves(&code[start + 4..], Vec::new(), &mut paths);
        for path in paths {
            // Relative to this module, or spelled out from the crate or `self`.
            let relative = if path.first().is_some_and(|p| p == "crate") {
                path[1..].strip_prefix(at).map(<[String]>::to_vec)
            } else {
                Some(path)
            };
            if let Some(relative) = relative
                && relative.len() >= 2
                && children.contains(&relative[0])
            {
                found.insert(relative[relative.len() - 1].clone(), relative[0].clone());
            }
        }
    }
    found
}

/// Submodules form no cycle either: within each module, its children and the children they
/// name (`super::x`, `crate::a::x`, or a name the parent imports from `x`), like the top-level
/// graph. The top-level graph alone did not see `components::extract` and
/// `components::extract_llm` importing each other.
fn submodule_graphs(krate: &str) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let library = library(krate);
    let modules: Vec<(Vec<String>, &String)> = library
        .files
        .iter()
        .map(|(relative, code)| {
            let mut path: Vec<String> = relative
                .iter()
                .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
                .collect();
            if matches!(
                path.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                path.pop();
            }
            (path, code)
        })
        .collect();
    // Each module with children: child -> siblings it names.
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (path, _) in &modules {
        for depth in 1..path.len() {
            graphs
                .entry(path[..depth].to_vec())
                .or_default()
                .entry(path[depth].clone())
                .or_default();
        }
    }
    let imports: BTreeMap<Vec<String>, BTreeMap<String, String>> = modules
        .iter()
        .filter_map(|(path, code)| {
            let children: BTreeSet<String> = graphs.get(path)?.keys().cloned().collect();
            Some((path.clone(), imports_from_children(code, path, &children)))
        })
        .collect();
    for (path, code) in &modules {
        for named in named_paths(code, path) {
            let common = path.iter().zip(&named).take_while(|(a, b)| a == b).count();
            if common == 0 || common >= path.len() || common >= named.len() {
                continue;
            }
            let parent = path[..common].to_vec();
            let Some(children) = graphs.get_mut(&parent) else {
                continue;
            };
            let from = &path[common];
            let to = if children.contains_key(&named[common]) {
                named[common].clone()
            } else {
                match imports.get(&parent).and_then(|i| i.get(&named[common])) {
                    Some(child) => child.clone(),
                    None => continue,
                }
            };
            if to != *from {
                children.get_mut(from).expect("a child").insert(to);
            }
        }
    }
    graphs
}

#[test]
fn submodules_form_trees_too() {
    for krate in CRATES {
        for (parent, children) in &submodule_graphs(krate) {
            assert_eq!(
                cycle(children),
                None,
                "{krate}: the submodules of {} form a cycle",
                parent.join("::")
            );
        }
    }
    // The edges it is there to see, so that it cannot pass by seeing none.
    let engine = submodule_graphs("engine");
    let components = &engine[&vec!["components".to_owned()]];
    assert!(
        components["extract"].contains("extract_llm"),
        "{components:?}"
    );
    assert!(
        components["extract_llm"].contains("projection"),
        "{components:?}"
    );
    assert!(
        components["extract_llm"].contains("source"),
        "through components' import"
    );
}
