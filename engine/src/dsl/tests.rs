//! DSL tests: the builtins load, route to themselves, never grow, and bad documents are refused.

use super::*;
use crate::tokens;

#[test]
fn every_builtin_loads_passes_its_tests_and_routes_to_itself() {
    let set = FilterSet::builtins().unwrap_or_else(|e| panic!("{e:?}"));
    assert!(set.filters().len() >= 20);
    for filter in set.filters() {
        assert!(!filter.tests.is_empty(), "{} has a test", filter.name);
        for case in &filter.tests {
            let command = case.command.as_deref();
            assert!(
                command.is_some(),
                "{} / {} names its command",
                filter.name,
                case.name
            );
            let routed = set
                .select(&selector(command, &case.input))
                .map(|f| f.name.as_str());
            assert_eq!(
                routed,
                Some(filter.name.as_str()),
                "{} / {}",
                filter.name,
                case.name
            );
        }
    }
}

#[test]
fn builtins_never_grow_and_keep_every_error_line() {
    let set = FilterSet::builtins().unwrap();
    let error = Regex::new(r"(?i)\b(error|failed|failure|fail|panicked)\b").unwrap();
    for filter in set.filters() {
        for case in &filter.tests {
            let out = filter.apply(&case.input);
            assert!(
                tokens::count(&out.text) < tokens::count(&case.input),
                "{} / {} shrinks",
                filter.name,
                case.name
            );
            for line in case.input.lines().filter(|l| error.is_match(l)) {
                assert!(
                    out.text.contains(line.trim()),
                    "{}: `{line}` survives",
                    filter.name
                );
            }
        }
    }
}

#[test]
fn a_failing_inline_test_or_a_malformed_document_is_refused_clearly() {
    let failing = r#"
schema_version: 1
filters:
  pytest-lite:
    match: 'pytest'
    strip_lines_matching: [' PASSED']
tests:
  pytest-lite:
    - name: keeps the summary
      input: "a PASSED\n1 passed"
      expected: "2 passed"
"#;
    let errs = FilterSet::load(&[("mine.yaml", failing)]).unwrap_err();
    assert!(
        errs[0]
            .to_string()
            .contains("mine.yaml: filter `pytest-lite`, test `keeps the summary` failed at line 1"),
        "{errs:?}"
    );
    assert!(
        errs[0].to_string().contains("expected: \"2 passed\"")
            && errs[0].to_string().contains("got:      \"1 passed\"")
    );

    let unknown = "schema_version: 1\nfilters:\n  x:\n    match: a\n    strip_line_matching: [b]\n";
    let errs = FilterSet::load(&[("typo.yaml", unknown)]).unwrap_err();
    assert!(
        errs[0].to_string().contains("strip_line_matching"),
        "{errs:?}"
    );

    let both = "schema_version: 1\nfilters:\n  x:\n    match: a\n    strip_lines_matching: [b]\n    keep_lines_matching: [c]\n";
    assert!(
        FilterSet::load(&[("both.yaml", both)]).unwrap_err()[0]
            .to_string()
            .contains("cannot both be set")
    );
    let version = "schema_version: 2\nfilters: {}\n";
    assert!(
        FilterSet::load(&[("v2.yaml", version)]).unwrap_err()[0]
            .to_string()
            .contains("schema_version must be 1")
    );
    let regex = "schema_version: 1\nfilters:\n  x:\n    match: '(unclosed'\n";
    assert!(
        FilterSet::load(&[("re.yaml", regex)]).unwrap_err()[0]
            .to_string()
            .contains("filter `x`: match")
    );
    let dup = "schema_version: 1\nfilters:\n  pytest:\n    match: x\n";
    assert!(
        FilterSet::load(&[("builtins", BUILTINS), ("dup.yaml", dup)]).unwrap_err()[0]
            .to_string()
            .contains("duplicate filter `pytest`")
    );
}

#[test]
fn the_eight_stages_and_their_lossiness() {
    let doc = r#"
schema_version: 1
filters:
  demo:
    match: '^\$ demo'
    strip_ansi: true
    replace: [{pattern: '^(\w+)=\S+', replacement: '$1=<redacted>'}]
    match_output: [{pattern: '^all green$', message: 'demo: ok', unless: 'warning'}]
    strip_lines_matching: ['^debug ']
    truncate_lines_at: 12
    head_lines: 3
    max_lines: 2
    on_empty: 'demo: nothing'
"#;
    let set = FilterSet::load(&[("demo.yaml", doc)]).unwrap();
    let demo = &set.filters()[0];
    assert_eq!(demo.apply("all green").text, "demo: ok");
    let guarded = demo.apply("all green\nwarning: x");
    assert_eq!(
        (guarded.text.as_str(), guarded.loss),
        ("all green\nwarning: x", Lossiness::None),
        "unless"
    );
    let out = demo.apply("\x1b[31mTOKEN=abc\x1b[0m\ndebug 1\nline two is long enough\nc\nd\ne");
    assert_eq!(
        out.text,
        "TOKEN=<re...\nline two ...\n... (2 lines truncated)"
    );
    assert_eq!(out.loss, Lossiness::Whole);
    assert_eq!(demo.apply("debug only").text, "demo: nothing");

    let tail = "schema_version: 1\nfilters:\n  t:\n    match: x\n    max_lines: 2\n";
    let set = FilterSet::load(&[("t.yaml", tail)]).unwrap();
    let out = set.filters()[0].apply("a\nb\nc\nd");
    assert_eq!(
        (out.text.as_str(), out.loss),
        ("a\nb\n... (2 lines truncated)", Lossiness::Tail)
    );
    assert_eq!(set.filters()[0].apply("a").loss, Lossiness::None);
}

#[test]
fn the_selector_sees_the_command_and_a_window_of_lines() {
    let s = selector(
        Some("cd /repo && cargo test\nsecond line"),
        "\n\n  a\nb\nc\nd\ne\nf\ng",
    );
    assert_eq!(s, "$ cd /repo && cargo test\na\nb\nc\nd\ne\nf\n");
}
