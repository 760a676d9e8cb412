//! Source code in tool outputs: which language it is, and where its function bodies are.
//!
//! `skeleton` is the only user. This module knows tree-sitter and the fifteen languages; the
//! component knows messages, markers and the reserve. The unit of elision is a *line*: a body
//! becomes the lines strictly inside it, so a line-numbered dump keeps the true numbers on every
//! line that survives, and nothing half of a line is ever cut.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tree_sitter::{Node, Parser};

use crate::tokens;

/// A language `skeleton` can parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lang {
    Go,
    Python,
    JavaScript,
    TypeScript,
    Tsx,
    Rust,
    Java,
    C,
    Cpp,
    Ruby,
    Php,
    CSharp,
    Kotlin,
    Swift,
    Scala,
}

impl Lang {
    /// Every language, for docs and tests.
    pub const ALL: [Lang; 15] = [
        Lang::Go,
        Lang::Python,
        Lang::JavaScript,
        Lang::TypeScript,
        Lang::Tsx,
        Lang::Rust,
        Lang::Java,
        Lang::C,
        Lang::Cpp,
        Lang::Ruby,
        Lang::Php,
        Lang::CSharp,
        Lang::Kotlin,
        Lang::Swift,
        Lang::Scala,
    ];

    /// The language of a fenced block's info string (```` ```rust ````), case-insensitive.
    pub fn from_fence(info: &str) -> Option<Lang> {
        let tag = info.split_whitespace().next()?.to_ascii_lowercase();
        Some(match tag.as_str() {
            "go" | "golang" => Lang::Go,
            "python" | "py" | "python3" => Lang::Python,
            "javascript" | "js" | "jsx" | "mjs" | "cjs" | "node" => Lang::JavaScript,
            "typescript" | "ts" | "mts" | "cts" => Lang::TypeScript,
            "tsx" => Lang::Tsx,
            "rust" | "rs" => Lang::Rust,
            "java" => Lang::Java,
            "c" | "h" => Lang::C,
            "cpp" | "c++" | "cc" | "cxx" | "hpp" | "hh" | "hxx" => Lang::Cpp,
            "ruby" | "rb" => Lang::Ruby,
            "php" => Lang::Php,
            "csharp" | "cs" | "c#" => Lang::CSharp,
            "kotlin" | "kt" | "kts" => Lang::Kotlin,
            "swift" => Lang::Swift,
            "scala" | "sc" => Lang::Scala,
            _ => return None,
        })
    }

    /// The language of a file path, from its extension.
    pub fn from_path(path: &str) -> Option<Lang> {
        let name = path.rsplit(['/', '\\']).next()?;
        let (_, extension) = name.rsplit_once('.')?;
        // `.h` is ambiguous; C++ headers usually say `.hpp`, and the C grammar parses C-style
        // C++ headers less often than the C++ grammar parses C headers, so `.h` reads as C++.
        match extension.to_ascii_lowercase().as_str() {
            "h" => Some(Lang::Cpp),
            "sc" | "node" => None,
            other => Lang::from_fence(other),
        }
    }

    /// The language a `#!` line names (`#!/usr/bin/env python3`, `#!/usr/bin/node`).
    pub fn from_shebang(first_line: &str) -> Option<Lang> {
        let rest = first_line.strip_prefix("#!")?;
        let mut words = rest.split_whitespace();
        let mut program = words.next()?.rsplit('/').next()?;
        if program == "env" {
            program = words.find(|w| !w.starts_with('-'))?;
        }
        let program = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        match program {
            "python" => Some(Lang::Python),
            "node" | "nodejs" | "deno" | "bun" => Some(Lang::JavaScript),
            "ruby" => Some(Lang::Ruby),
            "php" => Some(Lang::Php),
            "kotlin" => Some(Lang::Kotlin),
            "swift" => Some(Lang::Swift),
            "scala" => Some(Lang::Scala),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Lang::Go => "go",
            Lang::Python => "python",
            Lang::JavaScript => "javascript",
            Lang::TypeScript => "typescript",
            Lang::Tsx => "tsx",
            Lang::Rust => "rust",
            Lang::Java => "java",
            Lang::C => "c",
            Lang::Cpp => "cpp",
            Lang::Ruby => "ruby",
            Lang::Php => "php",
            Lang::CSharp => "csharp",
            Lang::Kotlin => "kotlin",
            Lang::Swift => "swift",
            Lang::Scala => "scala",
        }
    }

    fn grammar(self, source: &str) -> tree_sitter::Language {
        use grammars::Grammar;
        grammars::language(match self {
            Lang::Go => Grammar::Go,
            Lang::Python => Grammar::Python,
            Lang::JavaScript => Grammar::JavaScript,
            Lang::TypeScript => Grammar::TypeScript,
            Lang::Tsx => Grammar::Tsx,
            Lang::Rust => Grammar::Rust,
            Lang::Java => Grammar::Java,
            Lang::C => Grammar::C,
            Lang::Cpp => Grammar::Cpp,
            Lang::Ruby => Grammar::Ruby,
            // A file starts with `<?php`; a snippet in a fence usually does not.
            Lang::Php if source.contains("<?php") => Grammar::Php,
            Lang::Php => Grammar::PhpOnly,
            Lang::CSharp => Grammar::CSharp,
            Lang::Kotlin => Grammar::Kotlin,
            Lang::Swift => Grammar::Swift,
            Lang::Scala => Grammar::Scala,
        })
    }

    /// Node kinds whose body is a function, method or constructor body. Lambdas and closures
    /// are left out on purpose: their bodies are usually the logic of the enclosing call, and
    /// eliding them hides what the surrounding signature-level shape cannot tell.
    fn function_kinds(self) -> &'static [&'static str] {
        match self {
            Lang::Go => &["function_declaration", "method_declaration"],
            Lang::Python => &["function_definition"],
            Lang::JavaScript | Lang::TypeScript | Lang::Tsx => &[
                "function_declaration",
                "function_expression",
                "generator_function_declaration",
                "generator_function",
                "method_definition",
                "arrow_function",
            ],
            Lang::Rust => &["function_item"],
            Lang::Java => &[
                "method_declaration",
                "constructor_declaration",
                "compact_constructor_declaration",
            ],
            Lang::C | Lang::Cpp => &["function_definition"],
            Lang::Ruby => &["method", "singleton_method"],
            Lang::Php => &["function_definition", "method_declaration"],
            Lang::CSharp => &[
                "method_declaration",
                "constructor_declaration",
                "destructor_declaration",
                "operator_declaration",
                "local_function_statement",
                "accessor_declaration",
            ],
            Lang::Kotlin => &[
                "function_declaration",
                "secondary_constructor",
                "getter",
                "setter",
            ],
            Lang::Swift => &[
                "function_declaration",
                "init_declaration",
                "deinit_declaration",
            ],
            Lang::Scala => &["function_definition"],
        }
    }
}

/// Why a source gave no bodies to elide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inert {
    /// The parse has ERROR or MISSING nodes: a partial read or not really this language.
    ParseErrors,
    /// It parsed, but no body reaches the size threshold.
    NoLargeBodies,
}

/// What [`body_lines`] found for one source.
pub type Shape = Result<Vec<RangeInclusive<usize>>, Inert>;

/// Shapes are memoized by content: a parse runs at about 3 MB/s, so a 200 KB file costs tens of
/// milliseconds, and the host parses new reads off the request path ([`body_lines_memo`] from
/// `Pipeline::prepare`) so the turn that needs the shape finds it here. Cleared when it grows
/// past this many entries; an entry is a few ranges, not the source.
const SHAPE_MEMO_MAX_ENTRIES: usize = 1024;

type ShapeKey = (u128, Lang, usize);

fn shape_memo() -> &'static Mutex<HashMap<ShapeKey, Arc<Shape>>> {
    static MEMO: OnceLock<Mutex<HashMap<ShapeKey, Arc<Shape>>>> = OnceLock::new();
    MEMO.get_or_init(|| Mutex::new(HashMap::new()))
}

/// [`body_lines`], memoized by the source's content key, the language and the threshold.
pub fn body_lines_memo(source: &str, lang: Lang, min_tokens: usize) -> Arc<Shape> {
    let key = (tokens::content_key(source), lang, min_tokens);
    if let Some(hit) = shape_memo().lock().get(&key) {
        return hit.clone();
    }
    // Parsed outside the lock: two threads may parse the same source once each, which is
    // cheaper than making every other lookup wait for a parse.
    let shape = Arc::new(body_lines(source, lang, min_tokens));
    let mut memo = shape_memo().lock();
    if memo.len() >= SHAPE_MEMO_MAX_ENTRIES {
        memo.clear();
    }
    memo.insert(key, shape.clone());
    shape
}

/// The 0-based line ranges of `source` that are the insides of function bodies of at least
/// `min_tokens` tokens, ascending and disjoint. Inner functions of an elided body go with it.
///
/// # Errors
/// [`Inert`] when the parse has errors or nothing is large enough.
pub fn body_lines(
    source: &str,
    lang: Lang,
    min_tokens: usize,
) -> Result<Vec<RangeInclusive<usize>>, Inert> {
    let mut parser = Parser::new();
    parser
        .set_language(&lang.grammar(source))
        .map_err(|_| Inert::ParseErrors)?;
    let tree = parser.parse(source, None).ok_or(Inert::ParseErrors)?;
    let root = tree.root_node();
    if root.has_error() {
        return Err(Inert::ParseErrors);
    }
    let mut bodies = Vec::new();
    let mut walk = Walk {
        source,
        kinds: lang.function_kinds(),
        min_tokens,
        bodies: &mut bodies,
    };
    walk.visit(root);
    if bodies.is_empty() {
        return Err(Inert::NoLargeBodies);
    }
    Ok(bodies)
}

struct Walk<'s, 'v> {
    source: &'s str,
    kinds: &'static [&'static str],
    min_tokens: usize,
    bodies: &'v mut Vec<RangeInclusive<usize>>,
}

impl Walk<'_, '_> {
    /// Depth-first over the tree with an explicit stack: a deeply nested literal (10,000 levels
    /// parse fine) must not overflow the thread's stack.
    fn visit(&mut self, root: Node<'_>) {
        let mut stack = vec![root];
        while let Some(node) = stack.pop() {
            if self.kinds.contains(&node.kind())
                && let Some(body) = body_of(node)
            {
                // A body too small to elide holds no body large enough either.
                match self.inner_lines(node, body) {
                    Some(lines) if self.large_enough(body) => self.bodies.push(lines),
                    _ if self.large_enough(body) => push_children(&mut stack, body),
                    _ => {}
                }
                continue;
            }
            push_children(&mut stack, node);
        }
        // Pushed children pop last-first: put the bodies back in source order.
        self.bodies.sort_by_key(|r| *r.start());
    }

    fn large_enough(&self, body: Node<'_>) -> bool {
        let text = &self.source[body.byte_range()];
        // A token is at least one byte: most bodies are decided without tokenizing.
        text.len() >= self.min_tokens && tokens::count(text) >= self.min_tokens
    }

    /// The lines to elide for `body` of `function`: strictly inside the braces for a braced
    /// body, or every line of an indented body (Python, Ruby, Scala) that starts below the
    /// signature and ends its line. `None` when no whole line can go.
    fn inner_lines(&self, function: Node<'_>, body: Node<'_>) -> Option<RangeInclusive<usize>> {
        let (first, last) = (body.start_position().row, body.end_position().row);
        let text = &self.source[body.byte_range()];
        let braced = text.starts_with('{') && text.ends_with('}');
        let lines = if braced {
            (first + 1)..=last.checked_sub(1)?
        } else {
            let rest_of_line = self.source[body.end_byte()..].split('\n').next()?;
            if first <= function.start_position().row || !rest_of_line.trim().is_empty() {
                return None;
            }
            first..=last
        };
        // One elided line replaces the range; two lines is the least that saves anything.
        (lines.end() > lines.start()).then_some(lines)
    }
}

/// Pushes `node`'s named children so they pop in source order.
fn push_children<'t>(stack: &mut Vec<Node<'t>>, node: Node<'t>) {
    let mut cursor = node.walk();
    let children: Vec<Node<'t>> = node.named_children(&mut cursor).collect();
    stack.extend(children.into_iter().rev());
}

/// The body of a function node: its `body` field, or (Kotlin, whose grammar names no field) its
/// `function_body` or `block` child.
fn body_of(function: Node<'_>) -> Option<Node<'_>> {
    if let Some(body) = function.child_by_field_name("body") {
        return Some(body);
    }
    let mut cursor = function.walk();
    function
        .named_children(&mut cursor)
        .find(|c| matches!(c.kind(), "function_body" | "block"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_from_fences_paths_and_shebangs() {
        assert_eq!(Lang::from_fence("Rust ignore"), Some(Lang::Rust));
        assert_eq!(Lang::from_fence("text"), None);
        assert_eq!(Lang::from_path("/repo/src/a.test.tsx"), Some(Lang::Tsx));
        assert_eq!(Lang::from_path("include/x.h"), Some(Lang::Cpp));
        assert_eq!(Lang::from_path("Makefile"), None);
        assert_eq!(
            Lang::from_shebang("#!/usr/bin/env -S python3.11 -u"),
            Some(Lang::Python)
        );
        assert_eq!(Lang::from_shebang("#!/bin/bash"), None);
    }

    #[test]
    fn every_grammar_loads() {
        for lang in Lang::ALL {
            let mut parser = Parser::new();
            assert!(parser.set_language(&lang.grammar("")).is_ok(), "{lang:?}");
        }
    }

    #[test]
    fn parse_errors_and_small_bodies_are_inert() {
        assert_eq!(
            body_lines("def f(:\n  pass\n", Lang::Python, 1),
            Err(Inert::ParseErrors)
        );
        assert_eq!(
            body_lines("def f():\n    return 1\n", Lang::Python, 80),
            Err(Inert::NoLargeBodies)
        );
        let source = "def f(a):\n    b = a + 1\n    return b\n";
        assert_eq!(body_lines(source, Lang::Python, 3), Ok(vec![1..=2]));
    }
}
