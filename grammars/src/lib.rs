//! The tree-sitter grammars `skeleton` parses source with, their parse tables kept compressed in
//! the binary until a language is first seen.
//!
//! Why a crate: a grammar is C whose tables are most of its size (30 MB of the 80 MB binary for
//! sixteen grammars, docs/performance.md "The shipped binary"), and most sessions see one or
//! two languages. `build.rs` takes the four large tables out of each grammar's `parser.c` and
//! gzips them (about a twentieth of their size); this crate copies a grammar's tables back into
//! its zero-initialized storage on the first call for it, then hands out tree-sitter's own
//! `Language`. Copying into C's storage needs `unsafe`, which the rest of the workspace forbids:
//! it is confined here, behind one safe function. Where the build script could not slim the
//! grammars (see its docs), every grammar comes whole from its crate, as it did before.

use tree_sitter::Language;

/// A grammar this crate provides: a language, and for TypeScript and PHP, their variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Grammar {
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
    /// A PHP file (it opens with `<?php`, HTML around it).
    Php,
    /// PHP code alone, as in a snippet.
    PhpOnly,
    CSharp,
    Kotlin,
    Swift,
    Scala,
}

impl Grammar {
    /// Every grammar, for tests.
    pub const ALL: [Grammar; 16] = [
        Grammar::Go,
        Grammar::Python,
        Grammar::JavaScript,
        Grammar::TypeScript,
        Grammar::Tsx,
        Grammar::Rust,
        Grammar::Java,
        Grammar::C,
        Grammar::Cpp,
        Grammar::Ruby,
        Grammar::Php,
        Grammar::PhpOnly,
        Grammar::CSharp,
        Grammar::Kotlin,
        Grammar::Swift,
        Grammar::Scala,
    ];
}

/// The grammar's tree-sitter language. The first call for a grammar inflates its tables (a few
/// milliseconds); later calls return it at once.
pub fn language(grammar: Grammar) -> Language {
    imp::language(grammar)
}

/// Tables slimmed out of the binary: each grammar's loader and language, from `build.rs`.
#[cfg(slim_grammars)]
#[allow(unsafe_code)]
mod imp {
    use std::io::Read;
    use std::sync::OnceLock;

    use tree_sitter::Language;
    use tree_sitter_language::LanguageFn;

    use super::Grammar;

    /// One grammar's compiled-in parts: its gzipped tables, and the C functions `build.rs`
    /// added to its `parser.c` (their size, their loader) and renamed (its language).
    struct Slim {
        tables: &'static [u8],
        size: unsafe extern "C" fn() -> usize,
        load: unsafe extern "C" fn(*const u8),
        language: unsafe extern "C" fn() -> *const (),
        loaded: OnceLock<Language>,
    }

    // `SLIM`, one per grammar in the order of `Grammar::ALL` (build.rs writes it from its own
    // list, in that order), and the C functions it names.
    include!(concat!(env!("OUT_DIR"), "/slim.rs"));

    pub(super) fn language(grammar: Grammar) -> Language {
        let slim = &SLIM[grammar as usize];
        slim.loaded.get_or_init(|| slim.inflate()).clone()
    }

    impl Slim {
        fn inflate(&self) -> Language {
            // The tables are compiled in, written by this crate's build script from the very
            // `parser.c` they go back into: failing to read them is a broken build.
            let mut bytes = Vec::new();
            flate2::read::GzDecoder::new(self.tables)
                .read_to_end(&mut bytes)
                .expect("build.rs wrote valid gzip");
            // SAFETY: `size` reads `sizeof` of four static arrays.
            let size = unsafe { (self.size)() };
            assert_eq!(bytes.len(), size, "the tables are the grammar's own");
            // SAFETY: `load` copies exactly `size` bytes from `bytes` (checked just above) into
            // the grammar's own zero-initialized tables, which nothing reads before this
            // returns: the language is handed out only after, through the `OnceLock`, which
            // also keeps a second thread from loading them at the same time.
            unsafe { (self.load)(bytes.as_ptr()) };
            // SAFETY: the function is the grammar's `tree_sitter_<name>`, renamed: generated
            // by the tree-sitter CLI, its tables now in place.
            Language::new(unsafe { LanguageFn::from_raw(self.language) })
        }
    }
}

/// Every grammar whole from its crate (the build script could not slim them).
#[cfg(not(slim_grammars))]
mod imp {
    use tree_sitter::Language;

    use super::Grammar;

    pub(super) fn language(grammar: Grammar) -> Language {
        match grammar {
            Grammar::Go => tree_sitter_go::LANGUAGE.into(),
            Grammar::Python => tree_sitter_python::LANGUAGE.into(),
            Grammar::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Grammar::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Grammar::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Grammar::Rust => tree_sitter_rust::LANGUAGE.into(),
            Grammar::Java => tree_sitter_java::LANGUAGE.into(),
            Grammar::C => tree_sitter_c::LANGUAGE.into(),
            Grammar::Cpp => tree_sitter_cpp::LANGUAGE.into(),
            Grammar::Ruby => tree_sitter_ruby::LANGUAGE.into(),
            Grammar::Php => tree_sitter_php::LANGUAGE_PHP.into(),
            Grammar::PhpOnly => tree_sitter_php::LANGUAGE_PHP_ONLY.into(),
            Grammar::CSharp => tree_sitter_c_sharp::LANGUAGE.into(),
            Grammar::Kotlin => tree_sitter_kotlin_ng::LANGUAGE.into(),
            Grammar::Swift => tree_sitter_swift::LANGUAGE.into(),
            Grammar::Scala => tree_sitter_scala::LANGUAGE.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each grammar parses a line of its language without an error node, and the same bytes
    /// again after its first load (the second call is the loaded language).
    #[test]
    fn every_grammar_parses_its_own_language() {
        let samples: [(Grammar, &str); 16] = [
            (
                Grammar::Go,
                "package m\nfunc f(x int) int { return x + 1 }\n",
            ),
            (Grammar::Python, "def f(x):\n    return x + 1\n"),
            (Grammar::JavaScript, "function f(x) { return x + 1; }\n"),
            (
                Grammar::TypeScript,
                "function f(x: number): number { return x + 1; }\n",
            ),
            (
                Grammar::Tsx,
                "const A = (p: {n: number}) => <div>{p.n}</div>;\n",
            ),
            (Grammar::Rust, "fn f(x: u8) -> u8 { x + 1 }\n"),
            (
                Grammar::Java,
                "class A { int f(int x) { return x + 1; } }\n",
            ),
            (Grammar::C, "int f(int x) { return x + 1; }\n"),
            (
                Grammar::Cpp,
                "template <class T> T f(T x) { return x + 1; }\n",
            ),
            (Grammar::Ruby, "def f(x)\n  x + 1\nend\n"),
            (Grammar::Php, "<?php\nfunction f($x) { return $x + 1; }\n"),
            (Grammar::PhpOnly, "function f($x) { return $x + 1; }\n"),
            (
                Grammar::CSharp,
                "class A { int F(int x) { return x + 1; } }\n",
            ),
            (Grammar::Kotlin, "fun f(x: Int): Int { return x + 1 }\n"),
            (Grammar::Swift, "func f(x: Int) -> Int { return x + 1 }\n"),
            (Grammar::Scala, "object A { def f(x: Int): Int = x + 1 }\n"),
        ];
        for (grammar, source) in samples {
            let mut sexps = Vec::new();
            for _ in 0..2 {
                let mut parser = tree_sitter::Parser::new();
                parser.set_language(&language(grammar)).unwrap();
                let tree = parser.parse(source, None).unwrap();
                assert!(
                    !tree.root_node().has_error(),
                    "{grammar:?}: {}",
                    tree.root_node().to_sexp()
                );
                sexps.push(tree.root_node().to_sexp());
            }
            assert_eq!(sexps[0], sexps[1], "{grammar:?}");
        }
    }
}
