//! `skeleton`: older source-file reads keep their shape, not their function bodies (Offload, frozen).
//!
//! Before (an older `Read` of `server.py`, superseded by a later read of the same file):
//! ```text
//!     12→def handle(self, request):
//!     13→    """Route one request."""
//!     14→    route = self.routes.get(request.path)
//!    ...
//!     58→    return response
//! ```
//! After:
//! ```text
//!     12→def handle(self, request):
//!       →    … 46 lines elided (13-58)
//! <<cg:4be1…>> [full source: call context_guru_expand]
//! ```
//!
//! Code is found two ways: fenced ```` ```lang ```` blocks in any tool output, and unfenced file
//! reads whose language is known from the call's path argument (`Read`, `view`, `cat`, `nl`,
//! `head`, `tail`, `sed -n`) or from a `#!` line. A `cat -n` style line-number gutter is taken
//! off to parse and kept on every surviving line, so the numbers the agent cites stay true.
//!
//! Safe where it pays: the newest read of a path and the newest `keep_recent` outputs are never
//! touched (the agent is working on those), and a parse with any error leaves the output alone
//! (partial `sed -n` windows usually do). What is left is the older read of a file the agent
//! has since read again, or read and moved on from; one expand gets the original back byte for
//! byte. Whether an output is older depends on what came after it, so decisions are frozen.

use crate::gate::{self, Gate};
use std::collections::HashMap;
use std::ops::RangeInclusive;

use serde::Deserialize;

use super::cmdfilter::command_of;
use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate, offload_with,
};
use crate::code::{self, Inert, Lang};
use crate::components::ComponentSource;
use crate::message::Message;
use crate::pipeline::{ApplyCx, Component, Offload, Policy, Stashed, Transcript};

/// Hint after the marker of a skeletonized read.
const HINT_FULL_SOURCE: &str = " [full source: call context_guru_expand]";

/// `components.skeleton`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkeletonConfig {
    /// Defaults to `80`. A function body under this many tokens stays.
    pub min_tokens: usize,
    /// Defaults to `3`. The newest this many tool outputs are never touched.
    pub keep_recent: usize,
    /// Defaults to `262144`. Code regions larger than this many bytes are not parsed (a parse
    /// runs at about 3 MB/s).
    pub max_bytes: usize,
    /// Defaults to `true`. May act at depth on a provably cold turn: a read is superseded by a
    /// later read, so by the time it is eligible it sits inside the cached prefix, and a cold
    /// turn (which re-writes that prefix anyway) is when acting costs no cache.
    pub cold_cache: bool,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
}

impl Default for SkeletonConfig {
    fn default() -> SkeletonConfig {
        SkeletonConfig {
            min_tokens: 80,
            keep_recent: 3,
            max_bytes: 256 * 1024,
            cold_cache: true,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "skeleton",
    summary: "elides function bodies of older source reads with tree-sitter (frozen, recoverable)",
    gates: &[
        gate::BELOW_MIN_TOKENS,
        gate::CACHED_PREFIX,
        gate::NEWEST_READ,
        gate::NO_CODE,
        gate::NO_LARGE_BODIES,
        gate::PARSE_ERRORS,
        gate::TOO_LARGE,
        gate::WITHIN_KEEP_RECENT,
    ],
    defaults: defaults::<SkeletonConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: SkeletonConfig = decode(source)?;
    Ok(Component::Offload(Box::new(Skeleton { config })))
}

struct Skeleton {
    config: SkeletonConfig,
}

impl Offload for Skeleton {
    /// The newest-read rule makes every decision depend on later messages, with or without
    /// a keep_recent window: frozen always.
    fn policy(&self) -> Policy {
        Policy::rederivable(self.config.cold_cache)
    }

    fn prepares(&self) -> bool {
        true
    }

    /// Parses a new read's code so the turn that supersedes it finds the shape memoized.
    fn prepare(&self, message: &Message) {
        if !message.is_tool()
            || !message.rewritable
            || message.content.len() < self.config.min_tokens
        {
            return;
        }
        let lang = read_path(message).as_deref().and_then(Lang::from_path);
        let lines: Vec<&str> = message.content.split_inclusive('\n').collect();
        for region in code_regions(&lines, lang) {
            let source = region_source(&lines, &region);
            if source.len() <= self.config.max_bytes {
                code::body_lines_memo(&source, region.lang, self.config.min_tokens);
            }
        }
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        let outputs: Vec<usize> = (0..messages.len())
            .filter(|&i| messages[i].is_tool())
            .collect();
        let paths: Vec<Option<String>> = outputs.iter().map(|&i| read_path(&messages[i])).collect();
        let mut newest_read: HashMap<&str, usize> = HashMap::new();
        for (&index, path) in outputs.iter().zip(&paths) {
            if let Some(path) = path {
                newest_read.insert(path, index);
            }
        }
        let older = outputs.len().saturating_sub(self.config.keep_recent);
        for _ in &outputs[older..] {
            cx.gate(gate::WITHIN_KEEP_RECENT);
        }
        let mut keys = Vec::new();
        for (&index, path) in outputs[..older].iter().zip(&paths) {
            if !offload_candidate(&messages[index], index, cx) {
                continue;
            }
            if path
                .as_deref()
                .is_some_and(|p| newest_read.get(p) == Some(&index))
            {
                cx.gate(gate::NEWEST_READ);
                continue;
            }
            if cx.tokens_below(index, self.config.min_tokens) {
                cx.gate(gate::BELOW_MIN_TOKENS);
                continue;
            }
            if !cx.may_mutate(index) {
                cx.gate(gate::CACHED_PREFIX);
                continue;
            }
            let lang = path.as_deref().and_then(Lang::from_path);
            let skeleton = match self.skeletonize(&messages[index].content, lang) {
                Ok(skeleton) => skeleton,
                Err(gate) => {
                    cx.gate(gate);
                    continue;
                }
            };
            let key = offload_with(messages, index, cx, |_, marker| {
                format!("{skeleton}\n{marker}{HINT_FULL_SOURCE}")
            });
            keys.extend(key);
        }
        Ok(keys)
    }
}

impl Skeleton {
    /// The output with every large body of every code region elided, or the gate that says why
    /// there is none.
    fn skeletonize(&self, text: &str, path_lang: Option<Lang>) -> Result<String, Gate> {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let regions = code_regions(&lines, path_lang);
        if regions.is_empty() {
            return Err(gate::NO_CODE);
        }
        let mut elisions: Vec<Elision> = Vec::new();
        let mut inert = gate::NO_LARGE_BODIES;
        for region in &regions {
            let source = region_source(&lines, region);
            if source.len() > self.config.max_bytes {
                inert = gate::TOO_LARGE;
                continue;
            }
            match &*code::body_lines_memo(&source, region.lang, self.config.min_tokens) {
                Ok(bodies) => elisions.extend(bodies.iter().map(|body| Elision {
                    lines: (region.lines.start + body.start())..=(region.lines.start + body.end()),
                    gutter: region.gutter,
                })),
                Err(Inert::ParseErrors) => inert = gate::PARSE_ERRORS,
                Err(Inert::NoLargeBodies) => {}
            }
        }
        if elisions.is_empty() {
            return Err(inert);
        }
        Ok(render(&lines, &elisions))
    }
}

/// The code of a region, gutter removed.
fn region_source(lines: &[&str], region: &Region) -> String {
    region
        .lines
        .clone()
        .map(|l| strip_gutter(lines[l], region.gutter).1)
        .collect()
}

/// One block of code inside a tool output: message lines `lines` (end exclusive).
struct Region {
    lines: std::ops::Range<usize>,
    lang: Lang,
    gutter: bool,
}

struct Elision {
    lines: RangeInclusive<usize>,
    gutter: bool,
}

/// The code regions of an output: its fenced blocks in a known language; failing those, the
/// whole read when the path or a `#!` line names the language.
fn code_regions(lines: &[&str], path_lang: Option<Lang>) -> Vec<Region> {
    let fenced = fenced_regions(lines);
    if !fenced.is_empty() {
        return fenced;
    }
    let (start, end, gutter) = read_span(lines);
    if start >= end {
        return Vec::new();
    }
    let first = strip_gutter(lines[start], gutter).1;
    let Some(lang) = path_lang.or_else(|| Lang::from_shebang(first.trim_end())) else {
        return Vec::new();
    };
    vec![Region {
        lines: start..end,
        lang,
        gutter,
    }]
}

/// ```` ```lang ```` … ```` ``` ```` blocks whose info string names a known language.
fn fenced_regions(lines: &[&str]) -> Vec<Region> {
    let mut regions = Vec::new();
    let mut open: Option<(usize, Option<Lang>, usize)> = None;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let Some(info) = trimmed.strip_prefix("```") else {
            continue;
        };
        match open {
            None => open = Some((i + 1, Lang::from_fence(info), indent)),
            Some((start, lang, _)) if info.trim().is_empty() => {
                if let Some(lang) = lang {
                    regions.push(Region {
                        lines: start..i,
                        lang,
                        gutter: false,
                    });
                }
                open = None;
            }
            // A fence opening inside an open one is content (markdown in a string, say).
            Some(_) => {}
        }
    }
    regions
}

/// The span of an output that is the file itself, end exclusive, and whether it carries a
/// line-number gutter: the longest run of consecutively numbered gutter lines when most of the
/// output is one, otherwise everything inside a `<output>` wrapper (mini-SWE-agent) or the whole.
fn read_span(lines: &[&str]) -> (usize, usize, bool) {
    let mut best = (0, 0);
    let mut run_start = 0;
    let mut previous: Option<u64> = None;
    for (i, line) in lines.iter().enumerate() {
        let number = gutter_number(line);
        match (number, previous) {
            (Some(n), Some(p)) if n == p + 1 => {}
            (Some(_), _) => run_start = i,
            (None, _) => {}
        }
        previous = number;
        if number.is_some() && i + 1 - run_start > best.1 - best.0 {
            best = (run_start, i + 1);
        }
    }
    if (best.1 - best.0) * 2 > lines.len() {
        return (best.0, best.1, true);
    }
    let mut start = 0;
    let mut end = lines.len();
    if lines.first().is_some_and(|l| l.starts_with("<returncode>")) {
        start = 1;
    }
    if lines.get(start).is_some_and(|l| l.trim_end() == "<output>") {
        start += 1;
        if lines.last().is_some_and(|l| l.trim() == "</output>") {
            end -= 1;
        }
    }
    (start, end, false)
}

/// The number of a gutter line: `cat -n`, `nl -ba` and `str_replace_editor view` write
/// `␠␠␠␠12\t…`; Claude Code's `Read` writes `␠␠␠␠12→…`.
fn gutter_number(line: &str) -> Option<u64> {
    let number = &line[..gutter_separator(line)?.0];
    let digits = number.trim_start_matches(' ');
    if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Where a gutter's separator (a tab or `→`) starts, and its length in bytes.
fn gutter_separator(line: &str) -> Option<(usize, usize)> {
    // The number field is short: look only at its width, so a tab deep in a line is no gutter.
    let head = &line.as_bytes()[..line.len().min(16)];
    head.iter().enumerate().find_map(|(at, &b)| match b {
        b'\t' => Some((at, 1)),
        0xE2 if line[at..].starts_with('→') => Some((at, '→'.len_utf8())),
        _ => None,
    })
}

/// `(gutter, code)` of a line; the gutter is empty when there is none.
fn strip_gutter(line: &str, gutter: bool) -> (&str, &str) {
    if gutter && let Some((at, len)) = gutter_separator(line) {
        return line.split_at(at + len);
    }
    ("", line)
}

/// The output with each elided line range replaced by one line that says what went.
fn render(lines: &[&str], elisions: &[Elision]) -> String {
    let mut out = String::new();
    let mut next = 0;
    for elision in elisions {
        let (first, last) = (*elision.lines.start(), *elision.lines.end());
        for line in &lines[next..first] {
            out.push_str(line);
        }
        let gutter = strip_gutter(lines[first], elision.gutter).0;
        // The indent of the first elided line with code on it (a blank one has none), spaces
        // and tabs only: never a line ending.
        let indent: &str = (first..=last)
            .map(|l| strip_gutter(lines[l], elision.gutter).1)
            .find(|code| !code.trim().is_empty())
            .map_or("", |code| {
                &code[..code.len() - code.trim_start_matches([' ', '\t']).len()]
            });
        let count = last - first + 1;
        if elision.gutter {
            // The number field blanked, the separator kept: the line reads as part of the dump
            // without claiming a line number of its own.
            let blank: String = gutter
                .chars()
                .map(|c| if c.is_ascii_digit() { ' ' } else { c })
                .collect();
            let (from, to) = (
                gutter_number(lines[first]).unwrap_or_default(),
                gutter_number(lines[last]).unwrap_or_default(),
            );
            out.push_str(&format!(
                "{blank}{indent}… {count} lines elided ({from}-{to})\n"
            ));
        } else {
            out.push_str(&format!("{indent}… {count} lines elided\n"));
        }
        next = last + 1;
    }
    for line in &lines[next..] {
        out.push_str(line);
    }
    out.truncate(out.trim_end_matches('\n').len());
    out
}

/// The file a tool output is a read of, when its call says: a `file_path`/`path` argument
/// (Claude Code `Read`, `str_replace_editor view`), or a shell read (`cat`, `nl`, `head`, `tail`,
/// `sed -n`, `less`) of one file. Writes (`cat > f`, heredocs) are not reads.
pub fn read_path(message: &Message) -> Option<String> {
    let args: serde_json::Value = serde_json::from_str(message.tool_arguments.as_deref()?).ok()?;
    let command = args.get("command").and_then(serde_json::Value::as_str);
    // Only a read names the file it shows: an edit, a write or a search that takes a path
    // (Claude Code's Edit, Write, Grep, Glob) must not count as the newest read of it.
    let tool = message
        .tool_name
        .as_deref()
        .unwrap_or("")
        .to_ascii_lowercase();
    let reads = matches!(
        tool.as_str(),
        "read" | "read_file" | "readfile" | "view" | "view_file" | "open" | "open_file" | "cat"
    ) || command == Some("view");
    if reads {
        for key in ["file_path", "path", "notebook_path"] {
            if let Some(path) = args.get(key).and_then(serde_json::Value::as_str) {
                return Some(path.to_string());
            }
        }
    }
    shell_read_path(&command_of(message)?)
}

fn shell_read_path(command: &str) -> Option<String> {
    if command.contains('>') || command.contains("<<") {
        return None;
    }
    // `sed -i` edits the file in place.
    if command
        .split_whitespace()
        .any(|w| w == "-i" || (w.starts_with("-i") && !w.starts_with("--")))
    {
        return None;
    }
    let first = command.split(['|', ';', '&']).next()?;
    let mut words = first.split_whitespace();
    let program = words.next()?;
    if !matches!(
        program,
        "cat" | "nl" | "head" | "tail" | "sed" | "less" | "bat"
    ) {
        return None;
    }
    let mut files = words.filter(|w| {
        !w.starts_with('-')
            && !w.contains(['\'', '"', '$', '*'])
            && !w.bytes().all(|b| b.is_ascii_digit())
    });
    let path = files.next()?;
    // One file only: `cat a.py b.py` is not a read of either.
    files.next().is_none().then(|| path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::testing::check;
    use crate::message::{Message, Role};

    fn python_module(functions: usize) -> String {
        let mut source = String::from("#!/usr/bin/env python3\nimport os\n\n\nclass Router:\n");
        for f in 0..functions {
            source.push_str(&format!(
                "    def handle_{f}(self, request):\n        \"\"\"Route request {f}.\"\"\"\n"
            ));
            for s in 0..12 {
                source.push_str(&format!(
                    "        value_{s} = self.lookup(request.path, {s}) + len(os.environ)\n"
                ));
            }
            source.push_str("        return value_0\n\n");
        }
        source
    }

    fn numbered(source: &str) -> String {
        source
            .lines()
            .enumerate()
            .map(|(i, l)| format!("{:>6}\t{l}\n", i + 1))
            .collect()
    }

    fn read(id: &str, path: &str, output: &str) -> Vec<Message> {
        let mut call = Message::text(Role::Assistant, "");
        call.tool_calls.push(crate::message::ToolCall {
            id: id.into(),
            name: "Read".into(),
            arguments: serde_json::json!({ "file_path": path }).to_string(),
        });
        let mut tool = Message::tool(id, "Read", output);
        tool.tool_arguments = Some(serde_json::json!({ "file_path": path }).to_string());
        vec![call, tool]
    }

    #[test]
    fn older_read_keeps_signatures_and_true_line_numbers() {
        let source = python_module(3);
        let mut messages = vec![Message::text(Role::User, "fix the router")];
        messages.extend(read("a", "/repo/router.py", &numbered(&source)));
        messages.extend(read("b", "/repo/router.py", &numbered(&source)));
        let out = check("skeleton", "keep_recent: 0", messages);
        let older = &out.messages[2].content;
        assert!(older.contains("     5\tclass Router:\n"), "{older}");
        assert!(older.contains("     6\t    def handle_0(self, request):\n"));
        assert!(older.contains("      \t        … 14 lines elided (7-20)\n"));
        assert!(older.contains("    22\t    def handle_1(self, request):\n"));
        assert!(!older.contains("value_3"));
        assert!(older.contains("\n<<cg:") && older.ends_with(HINT_FULL_SOURCE));
        assert_eq!(out.messages[4], out.before[4], "the newest read stays");
        assert_eq!(out.report.components[0].gates.get("newest_read"), Some(&1));
        out.assert_stashes_resolve();
    }

    /// The marker's stash, resolved: must be the original byte for byte.
    fn resolved(out: &crate::components::testing::Checked, index: usize) -> String {
        use crate::store::Store;
        let id = crate::marker::marker_ids(&out.messages[index].content)
            .next()
            .expect("a marker");
        out.store.resolve("test", id).expect("resolves").to_string()
    }

    /// Every language on a realistic file (`engine/tests/skeleton/`), as an older `Read` with
    /// Claude Code's `→` gutter and as a fenced block: the expectations in `expect.tsv` hold,
    /// the result is smaller, and the stash gives the original back byte for byte.
    #[test]
    fn every_language_keeps_shape_and_restores_exactly() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/skeleton");
        let expect = std::fs::read_to_string(dir.join("expect.tsv")).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for file in expect.lines().filter_map(|l| l.split('\t').next()) {
            if !seen.insert(file) {
                continue;
            }
            let source = std::fs::read_to_string(dir.join(file)).unwrap();
            let lang = Lang::from_path(file).unwrap_or_else(|| panic!("{file}: no language"));
            let gutter: String = source
                .lines()
                .enumerate()
                .map(|(i, l)| format!("{:>6}→{l}\n", i + 1))
                .collect();
            let fenced = format!("Here is the file:\n```{}\n{source}```\nDone.", lang.name());
            for (form, output, path) in [("read", &gutter, file), ("fence", &fenced, "notes")] {
                let mut messages = vec![Message::text(Role::User, "review this")];
                messages.extend(read("a", path, output));
                messages.extend(read("b", path, "newer"));
                let out = check("skeleton", "keep_recent: 0", messages);
                let after = &out.messages[2].content;
                assert_ne!(
                    after, output,
                    "{file} ({form}) was skeletonized: {:?}",
                    out.report.components[0].gates
                );
                assert!(after.len() < output.len());
                assert_eq!(
                    &resolved(&out, 2),
                    output,
                    "{file} ({form}) restores exactly"
                );
                for line in expect
                    .lines()
                    .filter(|l| l.starts_with(&format!("{file}\t")))
                {
                    let mut cols = line.splitn(3, '\t').skip(1);
                    let (rule, text) = (cols.next().unwrap(), cols.next().unwrap());
                    match rule {
                        "keep" => assert!(
                            after.contains(text),
                            "{file} ({form}) keeps {text:?}:\n{after}"
                        ),
                        "drop" => assert!(
                            !after.contains(text),
                            "{file} ({form}) drops {text:?}:\n{after}"
                        ),
                        other => panic!("{other}"),
                    }
                }
            }
        }
        assert_eq!(seen.len(), Lang::ALL.len(), "one file per language");
    }

    #[test]
    fn fences_in_unknown_languages_and_partial_reads_stay() {
        let partial =
            "   40→        return total\n   41→    }\n   42→\n   43→    fn next(&mut self) {\n";
        let mut messages = vec![Message::text(Role::User, "go")];
        messages.extend(read("a", "src/lib.rs", &partial.repeat(30)));
        messages.extend(read("b", "src/lib.rs", "newer"));
        let out = check("skeleton", "keep_recent: 0\nmin_tokens: 5", messages);
        assert_eq!(out.messages[2], out.before[2]);
        let text = "```text\nfn main() {}\n```\n".repeat(40);
        let out = check(
            "skeleton",
            "keep_recent: 0",
            crate::components::testing::tool_messages(&[&text]),
        );
        assert_eq!(out.report.components[0].gates.get("no_code"), Some(&1));
    }

    #[test]
    fn edits_and_searches_are_not_reads() {
        let mut edit = Message::tool("e", "Edit", "The file a.py has been updated.");
        edit.tool_arguments =
            Some(r#"{"file_path": "a.py", "old_string": "x", "new_string": "y"}"#.into());
        assert_eq!(read_path(&edit), None);
        let mut view = Message::tool("v", "str_replace_editor", "...");
        view.tool_arguments = Some(r#"{"command": "view", "path": "/repo/a.py"}"#.into());
        assert_eq!(read_path(&view).as_deref(), Some("/repo/a.py"));
        assert_eq!(shell_read_path("sed -i 's/a/b/' a.py"), None);
    }

    #[test]
    fn a_deeply_nested_literal_does_not_overflow_the_stack() {
        let source = format!("x = {}1{}\n", "[".repeat(20_000), "]".repeat(20_000));
        // It parses cleanly, so the walk really descends all 20,000 levels.
        assert_eq!(
            code::body_lines(&source, Lang::Python, 80),
            Err(Inert::NoLargeBodies)
        );
    }

    #[test]
    fn shell_reads_name_their_file() {
        assert_eq!(
            shell_read_path("nl -ba src/app.py | sed -n '1,80p'").as_deref(),
            Some("src/app.py")
        );
        assert_eq!(
            shell_read_path("sed -n '10,20p' lib/x.rb").as_deref(),
            Some("lib/x.rb")
        );
        assert_eq!(
            shell_read_path("head -n 50 main.go").as_deref(),
            Some("main.go")
        );
        assert_eq!(shell_read_path("cat a.py b.py"), None);
        assert_eq!(shell_read_path("cat <<'EOF' > a.py"), None);
        assert_eq!(shell_read_path("grep -n foo a.py"), None);
    }
}
