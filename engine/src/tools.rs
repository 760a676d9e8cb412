//! Per-tool rules: which components may cut the output of which tool.
//!
//! ```yaml
//! tools:
//!   exclude: [read_secret, "apply_*"]      # never cut, by any component
//!   rules:
//!     "pytest*": {components: [collapse, linecap]}   # only these may act on its outputs
//! ```
//!
//! Users know things about their tools that no heuristic does: a secrets reader whose output
//! must reach the model whole, a diff the agent applies verbatim, a noisy build tool. A rule is
//! matched on the name of the tool that produced an output (`Message::tool_name`, resolved from
//! the call in every dialect), with `*` and `?` globs, case-sensitive as tool names are.
//!
//! Matching: `exclude` first; then among `rules` the most specific pattern wins: an exact name
//! over any glob, then the pattern with the most literal characters, then the lexically first.
//! That order does not depend on how the YAML map was written, so two files that say the same
//! thing behave the same. The pipeline's guard enforces the result (see `pipeline::run_stage`):
//! a component's change to an output it may not touch is put back, and counted as a skip.
//! Frozen decisions replay as they are; a deterministic component's earlier cut on an output a
//! new rule protects goes back to the original once, as after any config change.

use crate::gate::{self, Gate};
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use parking_lot::Mutex;

use serde::Deserialize;

/// The `tools:` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolRules {
    /// Tool names or globs whose outputs no component may change.
    pub exclude: Vec<String>,
    /// Tool names or globs, each with the only components that may change their outputs.
    pub rules: BTreeMap<String, ToolRule>,
}

/// One entry of `tools.rules`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    /// The components allowed to act on the tool's outputs; `[]` is the same as `exclude`.
    pub components: Vec<String>,
}

/// What applies to one tool's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies<'a> {
    /// No rule names the tool: every component may act.
    Free,
    /// Matched this `exclude` pattern.
    Excluded(&'a str),
    /// Matched this `rules` pattern.
    Rule(&'a str, &'a ToolRule),
}

impl Applies<'_> {
    /// Whether `component` may change an output this applies to; `Err` is the skip reason.
    pub fn allows(&self, component: &str) -> Result<(), Gate> {
        match self {
            Applies::Free => Ok(()),
            Applies::Excluded(_) => Err(gate::TOOL_EXCLUDED),
            Applies::Rule(_, rule) if rule.components.iter().any(|c| c == component) => Ok(()),
            Applies::Rule(..) => Err(gate::TOOL_RULE),
        }
    }

    /// How `sluice compact --report` names it: `exclude: PATTERN`, `rule: PATTERN`, or nothing.
    pub fn describe(&self) -> Option<String> {
        match self {
            Applies::Free => None,
            Applies::Excluded(pattern) => Some(format!("exclude: {pattern}")),
            Applies::Rule(pattern, rule) => Some(format!(
                "rule: {pattern} -> [{}]",
                rule.components.join(", ")
            )),
        }
    }
}

impl ToolRules {
    pub fn is_empty(&self) -> bool {
        self.exclude.is_empty() && self.rules.is_empty()
    }

    /// What applies to the outputs of `tool` (`None`: an output whose call is not in the
    /// transcript, which no rule can name).
    pub fn applies(&self, tool: Option<&str>) -> Applies<'_> {
        let Some(tool) = tool else {
            return Applies::Free;
        };
        if let Some(pattern) = self.exclude.iter().find(|p| glob_match(p, tool)) {
            return Applies::Excluded(pattern);
        }
        self.rules
            .iter()
            .filter(|(pattern, _)| glob_match(pattern, tool))
            .max_by(|(a, _), (b, _)| specificity(a).cmp(&specificity(b)).then(b.cmp(a)))
            .map_or(Applies::Free, |(pattern, rule)| {
                Applies::Rule(pattern.as_str(), rule)
            })
    }

    /// Every component name the block mentions, with its key path, for validation.
    pub fn named_components(&self) -> impl Iterator<Item = (String, &str)> {
        self.rules.iter().flat_map(|(pattern, rule)| {
            rule.components
                .iter()
                .enumerate()
                .map(move |(i, c)| (format!("tools.rules.{pattern}.components[{i}]"), c.as_str()))
        })
    }
}

/// Exact names first, then more literal characters.
fn specificity(pattern: &str) -> (bool, usize) {
    let literal = pattern.chars().filter(|c| !matches!(c, '*' | '?')).count();
    (literal == pattern.chars().count(), literal)
}

/// `*` matches any run of characters, `?` exactly one; everything else itself. Iterative with
/// one backtrack point: at worst the pattern's length times the name's (never exponential),
/// and tool names and patterns are short.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        assert!(glob_match("Bash", "Bash"));
        assert!(!glob_match("Bash", "bash"), "case-sensitive");
        assert!(glob_match("apply_*", "apply_patch"));
        assert!(glob_match("*", ""));
        assert!(glob_match("mcp__*__read", "mcp__github__read"));
        assert!(!glob_match("mcp__*__read", "mcp__github__read_file"));
        assert!(glob_match("?s", "ls"));
        assert!(!glob_match("?s", "s"));
        assert!(glob_match(&"*a".repeat(30), &"a".repeat(60)));
        assert!(!glob_match(&"*a".repeat(30), &"b".repeat(60)));
    }

    #[test]
    fn exclude_first_then_the_most_specific_rule() {
        let rules: ToolRules = serde_json::from_value(serde_json::json!({
            "exclude": ["read_secret", "apply_*"],
            "rules": {
                "*": {"components": ["dedup"]},
                "py*": {"components": ["collapse"]},
                "pytest": {"components": ["collapse", "linecap"]},
                "apply_patch": {"components": ["collapse"]}
            }
        }))
        .unwrap();
        assert_eq!(
            rules.applies(Some("read_secret")),
            Applies::Excluded("read_secret")
        );
        assert_eq!(
            rules.applies(Some("apply_patch")),
            Applies::Excluded("apply_*"),
            "exclude wins over a rule"
        );
        let pytest = rules.applies(Some("pytest"));
        assert!(
            matches!(pytest, Applies::Rule("pytest", _)),
            "exact beats globs"
        );
        assert_eq!(pytest.allows("linecap"), Ok(()));
        assert_eq!(pytest.allows("dedup"), Err(gate::TOOL_RULE));
        assert!(matches!(
            rules.applies(Some("pyright")),
            Applies::Rule("py*", _)
        ));
        assert!(matches!(rules.applies(Some("Bash")), Applies::Rule("*", _)));
        assert_eq!(rules.applies(None), Applies::Free);
        assert_eq!(ToolRules::default().applies(Some("Bash")), Applies::Free);
        assert_eq!(
            rules.applies(Some("read_secret")).describe().as_deref(),
            Some("exclude: read_secret")
        );
        assert_eq!(
            pytest.describe().as_deref(),
            Some("rule: pytest -> [collapse, linecap]")
        );
    }
}

/// The `lossless_tools` entry that holds every tool output (a session whose cost guard backed
/// off): offloaders' cuts from its index on are put back with skip reason `cost_guard`.
/// (Not a name a tool can have: it starts with a NUL.)
pub const EVERY_TOOL: &str = "\u{0}every tool";

/// What kind of output a call produces, for the session's learned `lossless_tools`: the tool,
/// and for a shell-like tool the program its command runs (`bash:pytest`, `bash:cat`). One
/// re-run `pytest` says nothing about `ls`, and an agent with a single shell tool would
/// otherwise stop saving on every output after one retry.
///
/// Remembered by call: the turn asks it of every cut output (the retry memory, the learned
/// rules), and parsing each call's arguments again was 3-4% of a resumed turn on long sessions.
pub fn output_kind(tool: &str, arguments: Option<&str>) -> String {
    /// Bytes of calls remembered (names, arguments and kinds); the memo is emptied when a new
    /// call would pass it. Shared by every session and fed by what callers send: bounded.
    const MAX_BYTES: usize = 4 << 20;
    /// A call longer than this is parsed each time (an edit's whole file), not kept.
    const MAX_CALL_BYTES: usize = 4096;
    /// A call (its tool and arguments, to compare on a hit) and its kind.
    type Call = (Box<str>, Option<Box<str>>, String);
    #[derive(Default)]
    struct Calls {
        kinds: HashMap<u128, Call>,
        bytes: usize,
    }
    static MEMO: OnceLock<Mutex<Calls>> = OnceLock::new();
    let call_bytes = tool.len() + arguments.map_or(0, str::len);
    if call_bytes > MAX_CALL_BYTES {
        return output_kind_of(tool, arguments);
    }
    let mut key_text = Vec::with_capacity(call_bytes + 1);
    key_text.extend_from_slice(tool.as_bytes());
    key_text.push(u8::from(arguments.is_some()));
    key_text.extend_from_slice(arguments.unwrap_or_default().as_bytes());
    let key = crate::tokens::memory_key(&key_text);
    let memo = MEMO.get_or_init(Mutex::default);
    // A hit counts only for the same call, compared whole: the memo is shared by every session,
    // and a crafted key collision must not hand one session the kind of another's call.
    if let Some((t, a, kind)) = memo.lock().kinds.get(&key)
        && **t == *tool
        && a.as_deref() == arguments
    {
        return kind.clone();
    }
    let kind = output_kind_of(tool, arguments);
    let entry_bytes = call_bytes + kind.len();
    let mut calls = memo.lock();
    if calls.bytes + entry_bytes > MAX_BYTES {
        calls.kinds.clear();
        calls.bytes = 0;
    }
    let entry = (tool.into(), arguments.map(Into::into), kind.clone());
    if calls.kinds.insert(key, entry).is_none() {
        calls.bytes += entry_bytes;
    }
    kind
}

/// [`output_kind`], computed.
fn output_kind_of(tool: &str, arguments: Option<&str>) -> String {
    let program = arguments
        .and_then(|a| serde_json::from_str::<serde_json::Value>(a).ok())
        .and_then(|args| {
            let command = args.get("command").or_else(|| args.get("cmd"))?;
            match command {
                serde_json::Value::String(line) => program_of(line),
                serde_json::Value::Array(words) => {
                    words.iter().filter_map(|w| w.as_str()).find_map(program_of)
                }
                _ => None,
            }
        });
    match program {
        Some(program) => format!("{tool}:{program}"),
        None => tool.to_owned(),
    }
}

/// The program a command line runs: its first word that is not a `cd DIR &&` prefix or an
/// environment assignment, without its directory.
fn program_of(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(word) = words.next() {
        if word == "cd" {
            // `cd DIR && prog ...`: skip the directory and the connector.
            words.next();
            if words
                .peek()
                .is_some_and(|w| matches!(*w, "&&" | ";" | "||"))
            {
                words.next();
            }
            continue;
        }
        if word.contains('=') && !word.starts_with('-') {
            continue;
        }
        let program = word.rsplit('/').next().unwrap_or(word);
        return (!program.is_empty()).then(|| program.to_owned());
    }
    None
}

#[cfg(test)]
mod kind_tests {
    use super::output_kind;

    #[test]
    fn shell_calls_are_told_apart_by_their_program() {
        assert_eq!(
            output_kind("bash", Some(r#"{"command":"pytest -x tests"}"#)),
            "bash:pytest"
        );
        assert_eq!(
            output_kind(
                "bash",
                Some(r#"{"command":"cd /repo && PYTHONPATH=. /usr/bin/python t.py"}"#)
            ),
            "bash:python"
        );
        assert_eq!(
            output_kind("shell", Some(r#"{"command":["bash","-lc","ls"]}"#)),
            "shell:bash"
        );
        assert_eq!(output_kind("Read", Some(r#"{"path":"a.py"}"#)), "Read");
        assert_eq!(output_kind("bash", Some("not json")), "bash");
        assert_eq!(output_kind("bash", None), "bash");
    }
}
