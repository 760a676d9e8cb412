//! What reads as a failure: the one table of the ways a line says that something failed, shared
//! by every component that looks for one. `collapse` keeps such lines in view below its marker,
//! and `failed_run` calls a test or build run with one a failing run.
//!
//! **Case matters, on purpose.** A word in capitals (`ERROR`, `FAILED`, `FATAL`) or an error or
//! exception class (`Error:`, `ValueError`, `java.io.IOException`) is what a logger, a test
//! runner or a runtime prints when something failed. The same word in lower case is as often a
//! name or a zero count: `error_handler.py`, `on_error`, `0 errors`, `"error": null`,
//! `errors: 0`. So a lower-case word counts only in the shapes tools print it in: followed by a
//! colon (`error:`, `error[E0308]:`, `fatal:`, `panic:`, as compilers, git and Go write them),
//! after a non-zero count (`2 failed`, `1 error`), as a structured log's level (`level=error`),
//! or in a fixed phrase (`panicked at`, `failed to`, a non-zero `exit code`/`exit status`, any
//! case). A class name must start a word (`isError`, `handleError`, `test_raises_ValueError`
//! are names, not reports). Word boundaries are ASCII ones, so a line of any script is read
//! by the fast engine.

use std::sync::OnceLock;

use regex::{Regex, RegexBuilder};

/// The labels a tool writes an exit status after, in lower case (`Exit code 2`, `exit status:
/// 1`, `EXITED WITH CODE 127`). A line containing one with a non-zero status reports a failure;
/// `collapse` also reads an output whose first line is one as a failed call.
pub(super) const EXIT_LABELS: [&str; 4] = [
    "exit code",
    "exit status",
    "exited with code",
    "exited with status",
];

/// Each way a line says that something failed: a regex fragment and who writes it. The
/// fragments (and a non-zero status after one of [`EXIT_LABELS`], in any case) are joined into
/// one regex: multi-line, ASCII word boundaries, case-sensitive unless a fragment says `(?i:`.
/// No fragment may cross a line (`[ \t]`, never `\s`): a match names the line it starts on.
const PATTERNS: &[(&str, &str)] = &[
    (
        r"\b(?:ERROR|FATAL|CRITICAL|PANIC|FAILED|FAILURE|FAIL)\b",
        "log levels and verdicts in capitals: `ERROR`, `[FATAL]`, `FAILED tests/x.py::t`, `--- FAIL:`, `BUILD FAILURE`",
    ),
    (
        r"\b(?:[A-Z][A-Za-z0-9]*)?(?:Error|Exception)\b",
        "an error or exception class, or the word capitalized: `Error:`, `ValueError`, `NullPointerException`",
    ),
    (
        r"\b(?:error|fatal|panic)(?:\[E[0-9]+\])?:",
        "compilers, git, Go: `error:`, `error[E0308]:`, `fatal:`, `panic:`",
    ),
    (r"Traceback \(most recent call last\)", "Python"),
    (
        r"\bpanicked at\b",
        "Rust: `thread 'main' panicked at src/main.rs:4:5`",
    ),
    (r"^E {3}", "pytest's failure detail: `E   assert 1 == 2`"),
    (r"^[ \t]*Caused by:", "Java's and anyhow's cause chains"),
    (r"\bnpm ERR!", "npm"),
    (
        r"\b[Ff]ailed (?:to|with)\b",
        "`Failed to compile`, `failed with exit code 2`",
    ),
    (
        r"\b[1-9][0-9]* (?:failed|failing|errors?)\b",
        "a summary with a non-zero count: `2 failed`, `1 error`, `3 failing`",
    ),
    (r"<returncode>0*[1-9]", "mini-swe-agent's status line"),
    (r"\bSegmentation fault\b|\bcore dumped\b", "a crash"),
    (
        r#"(?i:\blevel["']?[ \t]*[=:][ \t]*["']?(?:error|fatal|critical|panic)\b)"#,
        "a structured log's level: `level=error`, `\"level\": \"ERROR\"`",
    ),
];

/// [`PATTERNS`] and the exit statuses, as one regex.
fn failure_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let exit = format!(r"(?i:\b(?:{}))[: ]*-?0*[1-9]", EXIT_LABELS.join("|"));
        let pattern = PATTERNS
            .iter()
            .map(|(fragment, _)| *fragment)
            .chain([exit.as_str()])
            .map(|fragment| format!("(?:{fragment})"))
            .collect::<Vec<_>>()
            .join("|");
        // Unicode off: `\b` is an ASCII boundary (a Unicode one sends the search to the slow
        // engine on any non-ASCII byte), and no fragment matches anything but ASCII.
        RegexBuilder::new(&pattern)
            .unicode(false)
            .multi_line(true)
            .build()
            .expect("the failure patterns form a valid regex")
    })
}

/// Whether `text` reports a failure: a line, or any line of a whole output.
pub(super) fn reads_as_failure(text: &str) -> bool {
    failure_regex().is_match(text)
}

/// The index of each line of `text` (as `split('\n')` numbers them, from 0) that reports a
/// failure, ascending: one pass of the regex over the text, not one search per line.
pub(super) fn failure_lines(text: &str) -> Vec<usize> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    // `line` is the index of the line that starts at byte `start`.
    let (mut line, mut start) = (0, 0);
    while let Some(hit) = failure_regex().find_at(text, start) {
        line += memchr::memchr_iter(b'\n', &bytes[start..hit.start()]).count();
        found.push(line);
        match memchr::memchr(b'\n', &bytes[hit.start()..]) {
            Some(newline) => {
                start = hit.start() + newline + 1;
                line += 1;
            }
            None => break,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_and_shape_decide_what_reads_as_a_failure() {
        for line in [
            "2026-03-02 10:41:40 ERROR batch 2500 failed",
            "[FATAL] out of memory",
            "Error: connect ECONNREFUSED 127.0.0.1:5432",
            "src/main.c:12:5: error: expected ';' before '}' token",
            "error[E0308]: mismatched types",
            "Traceback (most recent call last):",
            "FAILED tests/test_io.py::test_read - AssertionError",
            "thread 'main' panicked at src/main.rs:4:5:",
            "Process finished with exit code 1",
            "Exit code: 2",
            "subprocess.CalledProcessError: Command 'make' returned non-zero exit status 2.",
            "exit status 1",
            "Exception in thread \"main\" java.lang.NullPointerException",
            "ValueError: invalid literal for int() with base 10: 'x'",
            "fatal: not a git repository (or any of the parent directories): .git",
            "panic: runtime error: index out of range [3] with length 3",
            "--- FAIL: TestParse (0.00s)",
            "npm ERR! code ERESOLVE",
            "=========== 2 failed, 40 passed in 1.20s ===========",
            "E   assert 1 == 2",
            "Caused by: java.io.IOException: No space left on device",
            "Segmentation fault (core dumped)",
            r#"{"ts":"2026-03-02T10:41:40Z","level":"error","msg":"lost connection"}"#,
            "time=10:41:40 level=ERROR msg=\"lost connection\"",
            "Failed to compile.",
            "<returncode>1</returncode>",
        ] {
            assert!(reads_as_failure(line), "should read as a failure: {line}");
        }
        for line in [
            "Found 0 errors in 12 files",
            "src/app/error_handler.py | 12 +++---",
            "def on_error(self, exc):",
            r#"{"error": null, "status": "ok"}"#,
            "retries: 3, failures: 0, errors: 0",
            "exit code 0",
            "exit status: 0",
            "tests/test_errors.py::test_raises_ValueError PASSED",
            "warning: unused variable `x`",
            "DeprecationWarning: pkg_resources is deprecated as an API",
            "0 failed, 12 passed",
            "if err != nil { return errors.New(\"failed\") }",
            "<Button onError={handleError} />",
            "the error_rate stayed at 0.0 while FAIL_FAST=1",
            "2026-03-02 10:41:40 INFO batch 2499 committed",
        ] {
            assert!(
                !reads_as_failure(line),
                "should not read as a failure: {line}"
            );
        }
    }

    #[test]
    fn failure_lines_are_numbered_as_split_numbers_them() {
        let text = "ok\nERROR one\nok\n\nCaused by: x\nValueError: a ERROR b\nok";
        assert_eq!(failure_lines(text), [1, 4, 5]);
        assert_eq!(failure_lines("ERROR"), [0]);
        assert_eq!(failure_lines("ok\n\nexit code 3\n"), [2]);
        assert!(failure_lines("all good\nexit code 0\n").is_empty());
        // A multi-line output reads as a failure when any line does.
        assert!(reads_as_failure("ok\nok\n  Caused by: timeout"));
    }
}
