//! The filter DSL: declarative, user-extensible text filters for command output, in YAML.
//!
//! ```yaml
//! schema_version: 1
//! filters:
//!   pytest:
//!     description: keep failures and the summary, drop passing noise
//!     match: "^(\\$ .*pytest|=+ test session starts)"
//!     strip_lines_matching: ["^\\s*$", " PASSED"]
//!     max_lines: 80
//! tests:
//!   pytest:
//!     - name: all-green
//!       input: "===== test session starts =====\ntest_a.py::t PASSED\n===== 1 passed ====="
//!       expected: "===== test session starts =====\n===== 1 passed ====="
//! ```
//!
//! Each filter runs eight stages in a fixed order: `strip_ansi`, `replace` (per line, `$1`
//! backrefs), `match_output` (whole-output short-circuit, guarded by `unless`),
//! `strip_lines_matching` xor `keep_lines_matching`, `truncate_lines_at`, `head_lines` /
//! `tail_lines`, `max_lines` (or a named `cap`), `on_empty`. Each result says how lossy it was:
//! [`Lossiness::None`], [`Lossiness::Tail`] (a clean tail dropped) or [`Lossiness::Whole`].
//!
//! **Selection.** A filter's `match` regex runs against a *selector*: the command that produced
//! the output when the call says (`$ cargo test -p api`), then the output's first six non-empty
//! lines. The reference matched one line and saw 2 of its 26 builtins ever fire in production;
//! the command plus a window is what identifies a tool. Filters are tried by `priority`
//! (higher first), then name.
//!
//! **Loading is strict.** `schema_version: 1`, unknown fields rejected, regexes compiled, and
//! every inline test run: a filter whose test fails never loads, and the error names the test and
//! shows the first differing line. Regexes are the `regex` crate's, so every filter runs in time
//! linear in its input.

use std::borrow::Cow;
use std::collections::BTreeMap;

use regex::{Regex, RegexSet};
use serde::Deserialize;

/// The builtin filters, shipped in the binary.
pub const BUILTINS: &str = include_str!("dsl/builtins.yaml");

/// How much a filter dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lossiness {
    /// Nothing the model needs was dropped (a reformat, or nothing changed).
    None,
    /// One clean contiguous tail was dropped.
    Tail,
    /// Lines were dropped here and there, or the whole output was replaced.
    Whole,
}

/// What a filter made of an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    pub text: String,
    pub loss: Lossiness,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    schema_version: u32,
    #[serde(default)]
    filters: BTreeMap<String, Def>,
    #[serde(default)]
    tests: BTreeMap<String, Vec<TestCase>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Def {
    #[serde(default)]
    description: String,
    #[serde(rename = "match")]
    selector: Option<String>,
    #[serde(default)]
    family: Option<String>,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    cap: Option<Cap>,
    #[serde(default)]
    cap_reduce: Option<usize>,
    #[serde(default)]
    strip_ansi: bool,
    #[serde(default)]
    replace: Vec<ReplaceDef>,
    #[serde(default)]
    match_output: Vec<MatchOutputDef>,
    #[serde(default)]
    strip_lines_matching: Vec<String>,
    #[serde(default)]
    keep_lines_matching: Vec<String>,
    #[serde(default)]
    truncate_lines_at: Option<usize>,
    #[serde(default)]
    head_lines: Option<usize>,
    #[serde(default)]
    tail_lines: Option<usize>,
    #[serde(default)]
    max_lines: Option<usize>,
    #[serde(default)]
    on_empty: Option<String>,
}

/// Named line budgets, as the reference spelled them.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Cap {
    Errors,
    Warnings,
    List,
    Inventory,
    Buildlog,
}

impl Cap {
    fn lines(self) -> usize {
        match self {
            Cap::Errors | Cap::List => 20,
            Cap::Warnings => 10,
            Cap::Inventory => 50,
            Cap::Buildlog => 80,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplaceDef {
    pattern: String,
    replacement: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchOutputDef {
    pattern: String,
    message: String,
    #[serde(default)]
    unless: Option<String>,
}

/// One inline test: `input` filtered must equal `expected` (trailing newlines aside). With
/// `command`, selection is checked too: the input must route to this filter.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    pub name: String,
    #[serde(default)]
    pub command: Option<String>,
    pub input: String,
    pub expected: String,
}

/// A compiled filter.
#[derive(Debug, Clone)]
pub struct Filter {
    pub name: String,
    pub description: String,
    pub family: String,
    pub priority: i32,
    selector: Regex,
    strip_ansi: bool,
    replace: Vec<(Regex, String)>,
    match_output: Vec<(Regex, String, Option<Regex>)>,
    lines: Option<(RegexSet, bool)>,
    truncate_lines_at: Option<usize>,
    head_lines: Option<usize>,
    tail_lines: Option<usize>,
    max_lines: Option<usize>,
    on_empty: Option<String>,
    pub tests: Vec<TestCase>,
}

/// Why a document, or one filter of it, did not load.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Not YAML of a filter document's shape: the parser's first line (where, and why).
    #[error("{origin}: {reason}")]
    Document { origin: String, reason: String },
    #[error("{origin}: schema_version must be 1, got {got}")]
    SchemaVersion { origin: String, got: u32 },
    #[error("{origin}: tests for unknown filter `{filter}`")]
    UnknownTests { origin: String, filter: String },
    #[error("{origin}: duplicate filter `{filter}`")]
    Duplicate { origin: String, filter: String },
    /// One filter of a document: why it did not compile or failed its tests.
    #[error("{origin}: {error}")]
    Filter {
        origin: String,
        error: Box<LoadError>,
    },
    #[error("filter `{filter}`: `match` is required")]
    NoSelector { filter: String },
    #[error("filter `{filter}`: strip_lines_matching and keep_lines_matching cannot both be set")]
    BothLineRules { filter: String },
    #[error("filter `{filter}`: cap_reduce needs cap")]
    CapReduceWithoutCap { filter: String },
    /// A regex that does not compile; `field` is where the filter has it. The regex's own error
    /// is kept whole, and its first line is the message's cause (so it is not a `source` too).
    #[error("filter `{filter}`: {field}: {}", first_line(&.error.to_string()))]
    Pattern {
        filter: String,
        field: &'static str,
        error: regex::Error,
    },
    /// A test with a command that the set routes to another filter, or to none.
    #[error("filter `{filter}`, test `{test}`: routes to {routed}")]
    Routes {
        filter: String,
        test: String,
        routed: String,
    },
    /// A test whose output differs, at the first line that does.
    #[error(
        "filter `{filter}`, test `{test}` failed at line {line}:\n  expected: {expected:?}\n  got:      {got:?}"
    )]
    TestFailed {
        filter: String,
        test: String,
        line: usize,
        expected: String,
        got: String,
    },
}

fn compile(filter: &str, field: &'static str, pattern: &str) -> Result<Regex, LoadError> {
    Regex::new(pattern).map_err(|error| LoadError::Pattern {
        filter: filter.to_owned(),
        field,
        error,
    })
}

fn first_line(s: &str) -> &str {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s)
}

impl Filter {
    fn compile(name: &str, def: Def, tests: Vec<TestCase>) -> Result<Filter, LoadError> {
        let selector = def.selector.ok_or_else(|| LoadError::NoSelector {
            filter: name.to_owned(),
        })?;
        if !def.strip_lines_matching.is_empty() && !def.keep_lines_matching.is_empty() {
            return Err(LoadError::BothLineRules {
                filter: name.to_owned(),
            });
        }
        if def.cap_reduce.is_some() && def.cap.is_none() {
            return Err(LoadError::CapReduceWithoutCap {
                filter: name.to_owned(),
            });
        }
        let lines = match (&def.strip_lines_matching, &def.keep_lines_matching) {
            (strip, _) if !strip.is_empty() => Some((strip, false)),
            (_, keep) if !keep.is_empty() => Some((keep, true)),
            _ => None,
        };
        let lines = lines
            .map(|(patterns, keep)| {
                RegexSet::new(patterns)
                    .map(|set| (set, keep))
                    .map_err(|error| LoadError::Pattern {
                        filter: name.to_owned(),
                        field: "line patterns",
                        error,
                    })
            })
            .transpose()?;
        let max_lines = def.max_lines.or_else(|| {
            def.cap
                .map(|c| c.lines().saturating_sub(def.cap_reduce.unwrap_or(0)))
        });
        Ok(Filter {
            name: name.to_owned(),
            description: def.description,
            family: def.family.unwrap_or_else(|| "other".to_owned()),
            priority: def.priority,
            selector: compile(name, "match", &format!("(?m){selector}"))?,
            strip_ansi: def.strip_ansi,
            replace: def
                .replace
                .into_iter()
                .map(|r| Ok((compile(name, "replace", &r.pattern)?, r.replacement)))
                .collect::<Result<_, LoadError>>()?,
            match_output: def
                .match_output
                .into_iter()
                .map(|m| {
                    let unless = m
                        .unless
                        .map(|u| compile(name, "match_output.unless", &format!("(?m){u}")))
                        .transpose()?;
                    Ok((
                        compile(name, "match_output", &format!("(?m){}", m.pattern))?,
                        m.message,
                        unless,
                    ))
                })
                .collect::<Result<_, LoadError>>()?,
            lines,
            truncate_lines_at: def.truncate_lines_at,
            head_lines: def.head_lines,
            tail_lines: def.tail_lines,
            max_lines,
            on_empty: def.on_empty,
            tests,
        })
    }

    /// Whether this filter claims an output with this selector.
    pub fn selects(&self, selector: &str) -> bool {
        self.selector.is_match(selector)
    }

    /// Runs the eight stages.
    pub fn apply(&self, input: &str) -> Filtered {
        let mut loss = Lossiness::None;
        let stripped;
        let text = if self.strip_ansi {
            // Escapes and redraws are not content: what a terminal showed stays, so no loss.
            stripped = crate::terminal::clean(input);
            stripped.as_str()
        } else {
            input
        };
        // Lines stay borrowed from the input unless a stage rewrites them.
        let mut lines: Vec<Cow<'_, str>> = text.split('\n').map(Cow::Borrowed).collect();
        for (pattern, replacement) in &self.replace {
            for line in &mut lines {
                if pattern.is_match(line) {
                    // A replacement rewrites what the model reads: lossy, so the hint goes on.
                    loss = Lossiness::Whole;
                    *line =
                        Cow::Owned(pattern.replace_all(line, replacement.as_str()).into_owned());
                }
            }
        }
        if !self.match_output.is_empty() {
            let blob = lines.join("\n");
            for (pattern, message, unless) in &self.match_output {
                if pattern.is_match(&blob) && !unless.as_ref().is_some_and(|u| u.is_match(&blob)) {
                    return Filtered {
                        text: message.clone(),
                        loss: Lossiness::Whole,
                    };
                }
            }
        }
        if let Some((set, keep)) = &self.lines {
            let before = lines.len();
            lines.retain(|l| set.is_match(l) == *keep);
            if lines.len() < before {
                loss = Lossiness::Whole;
            }
        }
        if let Some(cap) = self.truncate_lines_at {
            for line in &mut lines {
                if line.chars().count() > cap {
                    let cut: String = line.chars().take(cap.saturating_sub(3)).collect();
                    *line = Cow::Owned(format!("{cut}..."));
                    loss = Lossiness::Whole;
                }
            }
        }
        let n = lines.len();
        match (self.head_lines, self.tail_lines) {
            (Some(h), None) if n > h => {
                let omitted = n - h;
                lines.truncate(h);
                lines.push(Cow::Owned(format!("... ({omitted} lines omitted)")));
                loss = loss.max(Lossiness::Tail);
            }
            (None, Some(t)) if n > t => {
                let omitted = n - t;
                lines.drain(..omitted);
                lines.insert(0, Cow::Owned(format!("... ({omitted} lines omitted)")));
                loss = Lossiness::Whole;
            }
            (Some(h), Some(t)) if n > h + t => {
                let omitted = n - h - t;
                lines.drain(h..n - t);
                lines.insert(h, Cow::Owned(format!("... ({omitted} lines omitted)")));
                loss = Lossiness::Whole;
            }
            _ => {}
        }
        if let Some(max) = self.max_lines
            && lines.len() > max
        {
            let truncated = lines.len() - max;
            lines.truncate(max);
            lines.push(Cow::Owned(format!("... ({truncated} lines truncated)")));
            loss = if loss == Lossiness::None {
                Lossiness::Tail
            } else {
                Lossiness::Whole
            };
        }
        let text = lines.join("\n");
        if text.trim().is_empty()
            && let Some(message) = &self.on_empty
        {
            return Filtered {
                text: message.clone(),
                loss,
            };
        }
        Filtered { text, loss }
    }
}

/// The selector for an output: `$ <command>` when known, then the first six non-empty lines.
pub fn selector(command: Option<&str>, output: &str) -> String {
    let mut out = String::new();
    if let Some(command) = command.and_then(|c| c.lines().next()) {
        out.push_str("$ ");
        out.extend(command.chars().take(200));
        out.push('\n');
    }
    for line in output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(6)
    {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A loaded, ordered set of filters.
#[derive(Debug, Default, Clone)]
pub struct FilterSet {
    filters: Vec<Filter>,
    /// Every filter's `match` in one set, in filter order: one pass over a selector finds all
    /// candidates, instead of one regex run per filter.
    union: Option<RegexSet>,
}

impl FilterSet {
    /// Loads documents in order (`origin` names each in errors): builtins, then user filters.
    ///
    /// # Errors
    /// Every problem found, each naming its document and filter.
    pub fn load(documents: &[(&str, &str)]) -> Result<FilterSet, Vec<LoadError>> {
        FilterSet::default().extend(documents)
    }

    /// This set plus `documents` (a name already here is a duplicate).
    ///
    /// # Errors
    /// Every problem found, each naming its document and filter.
    pub fn extend(self, documents: &[(&str, &str)]) -> Result<FilterSet, Vec<LoadError>> {
        let mut filters: Vec<Filter> = self.filters;
        let mut errors = Vec::new();
        for (origin, yaml) in documents {
            let doc: Document = match serde_saphyr::from_str(yaml) {
                Ok(doc) => doc,
                Err(e) => {
                    errors.push(LoadError::Document {
                        origin: origin.to_string(),
                        reason: first_line(&e.to_string()).to_owned(),
                    });
                    continue;
                }
            };
            if doc.schema_version != 1 {
                errors.push(LoadError::SchemaVersion {
                    origin: origin.to_string(),
                    got: doc.schema_version,
                });
                continue;
            }
            let mut tests = doc.tests;
            for name in tests.keys() {
                if !doc.filters.contains_key(name) {
                    errors.push(LoadError::UnknownTests {
                        origin: origin.to_string(),
                        filter: name.clone(),
                    });
                }
            }
            for (name, def) in doc.filters {
                if filters.iter().any(|f| f.name == name) {
                    errors.push(LoadError::Duplicate {
                        origin: origin.to_string(),
                        filter: name,
                    });
                    continue;
                }
                let cases = tests.remove(&name).unwrap_or_default();
                match Filter::compile(&name, def, cases).and_then(|f| run_tests(&f).map(|()| f)) {
                    Ok(filter) => filters.push(filter),
                    Err(error) => errors.push(LoadError::Filter {
                        origin: origin.to_string(),
                        error: Box::new(error),
                    }),
                }
            }
        }
        filters.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.name.cmp(&b.name))
        });
        // Falls back to one regex per filter if the union cannot be built (a size limit).
        let union = RegexSet::new(filters.iter().map(|f| f.selector.as_str())).ok();
        let set = FilterSet { filters, union };
        // Routing checks need the whole set: a test with a command must select its own filter.
        for filter in &set.filters {
            for case in filter.tests.iter().filter(|c| c.command.is_some()) {
                let routed = set.select(&selector(case.command.as_deref(), &case.input));
                if routed.map(|f| f.name.as_str()) != Some(filter.name.as_str()) {
                    errors.push(LoadError::Routes {
                        filter: filter.name.clone(),
                        test: case.name.clone(),
                        routed: routed.map_or("no filter".to_owned(), |f| format!("`{}`", f.name)),
                    });
                }
            }
        }
        if errors.is_empty() {
            Ok(set)
        } else {
            Err(errors)
        }
    }

    /// The builtins alone.
    ///
    /// # Errors
    /// Only if a builtin is broken, which the test suite rules out.
    pub fn builtins() -> Result<FilterSet, Vec<LoadError>> {
        // Loading runs every inline test; once per process is enough.
        static BUILT: std::sync::OnceLock<Result<FilterSet, Vec<LoadError>>> =
            std::sync::OnceLock::new();
        BUILT
            .get_or_init(|| FilterSet::load(&[("builtins", BUILTINS)]))
            .clone()
    }

    /// The first filter, by priority then name, that claims `selector`.
    pub fn select(&self, selector: &str) -> Option<&Filter> {
        match &self.union {
            Some(union) => union
                .matches(selector)
                .iter()
                .next()
                .and_then(|i| self.filters.get(i)),
            None => self.filters.iter().find(|f| f.selects(selector)),
        }
    }

    pub fn filters(&self) -> &[Filter] {
        &self.filters
    }

    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }
}

/// Runs a filter's inline tests.
///
/// # Errors
/// The first failing test, with the first line where output and expectation differ.
pub fn run_tests(filter: &Filter) -> Result<(), LoadError> {
    for case in &filter.tests {
        let got = filter.apply(&case.input).text;
        let (got, want) = (
            got.trim_end_matches('\n'),
            case.expected.trim_end_matches('\n'),
        );
        if got != want {
            let (g, w): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
            let at = g
                .iter()
                .zip(&w)
                .position(|(a, b)| a != b)
                .unwrap_or(g.len().min(w.len()));
            return Err(LoadError::TestFailed {
                filter: filter.name.clone(),
                test: case.name.clone(),
                line: at + 1,
                expected: w.get(at).copied().unwrap_or("<end of output>").to_owned(),
                got: g.get(at).copied().unwrap_or("<end of output>").to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
