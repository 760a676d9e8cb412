//! `textclean`: strips terminal control noise from tool outputs (Reformat).
//!
//! Before: `\x1b[32mPASSED\x1b[0m tests/test_a.py` and `  1%\r 45%\r100%\n`
//! After:  `PASSED tests/test_a.py` and `100%\n`
//!
//! Two kinds of noise only a terminal can read: ANSI/VT100 escape sequences (colours, cursor
//! moves, OSC titles and hyperlinks) and carriage-return redraws (progress bars rewritten in
//! place). Escapes are removed; a line with interior `\r`s is rendered the way a terminal shows
//! it, each segment overwriting the previous from column 0, so what a person would have read is
//! exactly what remains. A `\r` that ends a line (CRLF) is kept. Adopted only when strictly fewer
//! tokens; on any failure the output is left untouched.

use crate::gate;
use serde::Deserialize;

use super::{BuildError, ComponentFactory, decode, defaults};
use crate::components::ComponentSource;
use crate::memo::PureMemo;
use crate::pipeline::{ApplyCx, Component, ComponentError, Policy, Reformat, Transcript};
use crate::terminal::{clean, has_noise};
use crate::tokens;

/// `components.textclean`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TextcleanConfig {
    /// Defaults to `50`. Smaller outputs are left alone.
    pub min_tokens: usize,
    /// Defaults to `0`. The newest this many tool outputs are left byte-identical.
    pub keep_recent: usize,
}

impl Default for TextcleanConfig {
    fn default() -> TextcleanConfig {
        TextcleanConfig {
            min_tokens: 50,
            keep_recent: 0,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "textclean",
    summary: "strips ANSI escapes and carriage-return redraws (lossless for what a terminal shows)",
    gates: &[
        gate::ALREADY_CLEAN,
        gate::BELOW_MIN_TOKENS,
        gate::CACHED_PREFIX,
        gate::NO_TERMINAL_NOISE,
        gate::WITHIN_KEEP_RECENT,
    ],
    defaults: defaults::<TextcleanConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: TextcleanConfig = decode(source)?;
    Ok(Component::Reformat(Box::new(Textclean {
        config,
        memo: PureMemo::default(),
    })))
}

struct Textclean {
    config: TextcleanConfig,
    /// A pure function of the text, run on every re-sent output of every turn.
    memo: PureMemo,
}

impl Reformat for Textclean {
    /// A `keep_recent` window makes whether it acts depend on later outputs: frozen then.
    fn policy(&self) -> Policy {
        Policy::keep_recent(self.config.keep_recent)
    }

    /// Decides each output alone: carried-over ones are skipped by the candidate helper.
    fn carries_over(&self) -> bool {
        true
    }

    fn reformat(
        &self,
        messages: &mut Transcript<'_, '_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        let (keep, min) = (self.config.keep_recent, self.config.min_tokens);
        for index in super::repack_candidates(messages, keep, min, cx) {
            cx.at(index);
            let message = &messages[index];
            let hash = cx.content_hash(index, &message.content);
            // The output itself, or the text inside a JSON output's string (mini-swe-agent's
            // `{"returncode":0,"output":"..."}`, whose escapes read `\u001b`).
            let cleaned = self.memo.reduce(&message.content, hash, |text| {
                has_noise(text).then(|| clean(text)).or_else(|| {
                    super::map_json_text(text, |inner| has_noise(inner).then(|| clean(inner)))
                })
            });
            let Some(cleaned) = cleaned else {
                cx.gate(gate::NO_TERMINAL_NOISE);
                continue;
            };
            if tokens::count(&cleaned) < cx.tokens(index) {
                messages.set_content(index, cleaned.to_string());
            } else {
                cx.gate(gate::ALREADY_CLEAN);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::testing::{check, tool_messages};

    #[test]
    fn strips_colours_and_renders_redraws() {
        assert_eq!(
            clean("\x1b[32mPASSED\x1b[0m tests/a.py"),
            "PASSED tests/a.py"
        );
        assert_eq!(clean("  1%\r 45%\r100%\nnext"), "100%\nnext");
        assert_eq!(
            clean("downloading 10 files\rdone"),
            "doneloading 10 files",
            "a terminal keeps what was not overwritten"
        );
        assert_eq!(
            clean("line one\r\nline two\r\n"),
            "line one\r\nline two\r\n",
            "CRLF is not a redraw"
        );
        assert_eq!(
            clean("\x1b]8;;http://x\x07link\x1b]8;;\x07 \x1b[1A\x1b[2K"),
            "link "
        );
    }

    #[test]
    fn the_text_inside_a_json_output_is_cleaned_and_the_json_stays_valid() {
        let log: String = (0..40)
            .map(|i| format!("\x1b[32mPASSED\x1b[0m tests/test_{i}.py::test_case  [{i:3}%]\n"))
            .collect();
        let output = serde_json::json!({"returncode": 0, "output": log}).to_string();
        let out = check("textclean", "", tool_messages(&[&output]));
        let value: serde_json::Value = serde_json::from_str(&out.messages[1].content).unwrap();
        let text = value["output"].as_str().unwrap();
        assert!(
            text.starts_with("PASSED tests/test_0.py::test_case  [  0%]\n"),
            "{text:.80}"
        );
        assert!(!text.contains('\x1b'));
        assert_eq!(value["returncode"], 0);
    }

    #[test]
    fn cleans_a_real_conda_progress_log() {
        // Shape taken from a Claude Code session in the corpus (claude-code/sniffly-ba79134d):
        // conda redraws each package's bar with `\r` and moves up with `\x1b[A`.
        let mut log = String::from("Downloading and Extracting Packages:\n");
        for pkg in [
            "expat-2.7.1          | 156 KB ",
            "python-3.11.13       | 15.4 MB",
            "openssl-3.5.1        | 3.1 MB ",
        ] {
            for pct in [0, 1, 12, 45, 82, 100] {
                let bar = "#".repeat(pct / 10);
                log.push_str(&format!("\r{pkg}   | {bar:<10} | {pct:>3}% \x1b[A\n"));
            }
        }
        log.push_str("Preparing transaction: done\nVerifying transaction: done\n");
        let out = check("textclean", "", tool_messages(&[&log]));
        let after = &out.messages[1].content;
        assert!(!after.contains('\x1b') && !after.contains('\r'));
        assert!(after.contains("python-3.11.13       | 15.4 MB   | ########## | 100%"));
        assert!(after.contains("Verifying transaction: done"));
        assert!(out.report.components[0].acted);
    }

    #[test]
    fn inert_on_clean_or_small_outputs() {
        let plain = "tests/test_a.py::test_one PASSED\n".repeat(20);
        let out = check(
            "textclean",
            "",
            tool_messages(&[&plain, "\x1b[31mx\x1b[0m"]),
        );
        let gates = &out.report.components[0].gates;
        assert_eq!(gates.get("no_terminal_noise"), Some(&1));
        assert_eq!(gates.get("below_min_tokens"), Some(&1));
        assert!(!out.report.components[0].mutated);
    }
}
