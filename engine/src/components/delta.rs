//! `delta`: shows a tool output that mostly repeats an earlier one as its changed lines
//! (Offload).
//!
//! Before: a test run, then the same run after a fix, 40 lines each, three of them different.
//! After: the first run verbatim, then
//! ```text
//! [repeats the output of call toolu_01… except for the lines below (a diff against it: - that
//! output, + this one)] <<cg:44ab…>> [full output: call context_guru_expand]
//! @@ -31 +31 @@
//! -FAILED tests/test_io.py::test_read - AssertionError
//! +PASSED tests/test_io.py::test_read
//! ...
//! ```
//!
//! Agents re-run the same command after each edit and re-read a file they just changed, and
//! each copy arrives whole. On a warm session a change is free only the turn an output first
//! appears (issue #22), and this one takes almost nothing from the model: the earlier output is
//! in view, and so is every line that changed. A re-run that differs in a timing line costs a
//! few dozen tokens instead of the whole log.
//!
//! The earlier output (the **base**) is one of the `window` tool outputs before it that no stage
//! has cut (it carries no marker), sharing at least `min_shared` of the new output's lines; the
//! one sharing most wins, the nearest on a tie. An output this stage turns into a diff is no base
//! for a later one. Exact copies are `dedup`'s. The way back is the usual one: the new output's
//! original is stashed behind the marker.
//!
//! **Placement:** last among the offloaders of a pipeline (the presets put it there). Then an
//! output with no marker when it runs is forwarded as it is, so a base is always in view whole.
//! Run earlier, a later stage could cut the base the diff points into.
//!
//! Cache safety: whether and how it rewrites an output depends on that output and the ones
//! before it, as they reach this stage, so every turn re-derives the same bytes
//! ([`Freeze::Stateless`], like `dedup`). When an earlier stage changes a base (a cold turn's
//! `mask`, a late model result), the outputs after it change too; the provider writes
//! everything after the first changed message to its cache again anyway, so that costs no
//! cache write of its own.
//!
//! Cost: every turn re-derives every decision, so each is remembered by the content hashes of
//! the output and its window; a turn costs a lookup per output. Remembered diffs are confirmed
//! against the texts they were computed from, so a hash collision can never hand one session a
//! diff of another's outputs. A remembered refusal is not confirmed: a collision there can only
//! leave an output whole. A new output is scored against up to `window` bases by the lines they
//! share, counted by the lines' hashes; each base's are kept by its content hash, so a base is
//! split into lines once, not once for every later output that scores it.

use crate::gate::{self, Gate};
use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Deserialize;
use similar::{Algorithm, DiffTag};

use super::{
    BuildError, ComponentFactory, MarkerMode, decode, defaults, offload_candidate, offload_with,
};
use crate::components::ComponentSource;
use crate::marker::HINT_FULL_OUTPUT;
use crate::message::Message;
#[cfg(doc)]
use crate::pipeline::Freeze;
use crate::pipeline::{ApplyCx, Component, Offload, Stashed, Transcript};
use crate::tokens;

/// `components.delta`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeltaConfig {
    /// Defaults to `200`. Smaller outputs cost less than the header and the diff's own lines.
    pub min_tokens: usize,
    /// Defaults to `60`. How many earlier tool outputs are candidate bases. Agents come back to
    /// a file or a test run many calls later: on the public corpus 8 caught three quarters of
    /// what 60 does, and 200 nothing more (`docs/performance.md`).
    pub window: usize,
    /// Defaults to `0.5`. The share of the new output's lines the base must also have.
    pub min_shared: f64,
    /// Defaults to `0.5`. The diff may be at most this share of the new output's bytes: beyond
    /// it the reader works harder for no saving (0.8 saved no more on the public corpus; a diff
    /// most of an output long is a different output).
    pub max_diff_share: f64,
    /// Defaults to `3000`. Outputs (and bases) with more lines are left alone: bounds the diff's
    /// worst case, which is quadratic in lines.
    pub max_lines: usize,
    /// Defaults to `full` (the only mode).
    pub marker_mode: MarkerMode,
}

impl Default for DeltaConfig {
    fn default() -> DeltaConfig {
        DeltaConfig {
            min_tokens: 200,
            window: 60,
            min_shared: 0.5,
            max_diff_share: 0.5,
            max_lines: 3000,
            marker_mode: MarkerMode::Full,
        }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "delta",
    summary: "shows an output that mostly repeats an earlier one as a diff against it (recoverable)",
    gates: &[
        gate::BELOW_MIN_TOKENS,
        gate::DIFF_TOO_LARGE,
        gate::NO_SIMILAR_EARLIER_OUTPUT,
        gate::TOO_MANY_LINES,
    ],
    defaults: defaults::<DeltaConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: DeltaConfig = decode(source)?;
    for (key, value) in [
        ("min_shared", config.min_shared),
        ("max_diff_share", config.max_diff_share),
    ] {
        if !(0.0..=1.0).contains(&value) {
            return Err(BuildError::invalid(
                key,
                format!("must be between 0 and 1, got {value}"),
            ));
        }
    }
    if config.window == 0 {
        return Err(BuildError::invalid("window", "must be at least 1"));
    }
    Ok(Component::Offload(Box::new(Delta {
        config,
        memo: Mutex::default(),
    })))
}

struct Delta {
    config: DeltaConfig,
    memo: Mutex<Memo>,
}

/// A diff found: how many candidate bases back its base was, and the hunks.
#[derive(Clone)]
struct Found {
    back: usize,
    hunks: Arc<str>,
    /// The texts it was computed from, to confirm a hit.
    output: Arc<str>,
    base: Arc<str>,
}

/// Decisions by key (see [`key`]), bounded like `PureMemo`.
#[derive(Default)]
struct Memo {
    /// Keys that had no delta, with the gate that said so. A collision here can only skip a
    /// delta.
    none: HashMap<u64, Gate, tokens::IdentityBuild>,
    found: HashMap<u64, Found, tokens::IdentityBuild>,
    found_bytes: usize,
    /// Each base's lines by their hashes ([`line_hashes`]), by the base's content hash and
    /// length.
    lines: HashMap<u64, (usize, Arc<[u64]>), tokens::IdentityBuild>,
    lines_bytes: usize,
}

impl Memo {
    const NONE_MAX: usize = 1 << 16;
    const FOUND_BYTES: usize = 16 << 20;
    const LINES_BYTES: usize = 8 << 20;

    /// The lines of a base whose content hash is `hash`, `len` bytes long, if kept.
    fn lines_of(&self, hash: u64, len: usize) -> Option<Arc<[u64]>> {
        self.lines
            .get(&lines_key(hash, len))
            .filter(|(kept_len, _)| *kept_len == len)
            .map(|(_, lines)| lines.clone())
    }

    fn remember_lines(&mut self, hash: u64, len: usize, lines: Arc<[u64]>) {
        let key = lines_key(hash, len);
        // Two bases alike (identical outputs both stay bases) or two turns on one base hash the
        // same lines: kept and counted once, or the budget would count bytes the map no longer
        // holds and empty it early.
        if self.lines.contains_key(&key) {
            return;
        }
        let bytes = lines.len() * 8 + 64;
        if make_room(
            &mut self.lines,
            &mut self.lines_bytes,
            bytes,
            Self::LINES_BYTES,
        ) {
            self.lines.insert(key, (len, lines));
        }
    }

    fn remember(&mut self, key: u64, found: Result<Found, Gate>) {
        match found {
            Err(gate) => {
                if self.none.len() >= Self::NONE_MAX {
                    self.none.clear();
                }
                self.none.insert(key, gate);
            }
            // Two turns may find the same output at once: kept and counted once.
            Ok(_) if self.found.contains_key(&key) => {}
            Ok(found) => {
                let bytes = found.hunks.len() + found.output.len() + found.base.len();
                if make_room(
                    &mut self.found,
                    &mut self.found_bytes,
                    bytes,
                    Self::FOUND_BYTES,
                ) {
                    self.found.insert(key, found);
                }
            }
        }
    }
}

/// Makes room for an entry of `bytes` in `map`, which holds `used` of its `budget`: empties it
/// when the entry would not fit beside what it holds, and counts the entry in. False for an
/// entry larger than the whole budget: it is found again next time rather than emptying the
/// map for it.
fn make_room<V>(
    map: &mut HashMap<u64, V, tokens::IdentityBuild>,
    used: &mut usize,
    bytes: usize,
    budget: usize,
) -> bool {
    if bytes > budget {
        return false;
    }
    if *used + bytes > budget {
        map.clear();
        *used = 0;
    }
    *used += bytes;
    true
}

impl Offload for Delta {
    /// Carried-over outputs rebuild the bases from their notes.
    fn carries_over(&self) -> bool {
        true
    }

    fn offload(&self, messages: &mut Transcript<'_, '_>, cx: &mut ApplyCx<'_>) -> Stashed {
        // Each output's hash once per run: a base is looked at by up to `window` later outputs.
        // A carried-over output that is no base is never looked at.
        let hashes: Vec<Option<u64>> = (0..messages.len())
            .map(|i| {
                let m = &messages[i];
                let looked_at = !cx.carried_over(i) || cx.noted(i);
                (m.is_tool() && m.rewritable && looked_at).then(|| cx.content_hash(i, &m.content))
            })
            .collect();
        // Decided on the transcript as this stage found it, then written: a base is always an
        // output shown whole, never one this stage has just turned into a diff.
        let mut decided: Vec<(usize, usize, Arc<str>)> = Vec::new();
        let mut earlier: Vec<usize> = Vec::new();
        for index in 0..messages.len() {
            let message = &messages[index];
            if !message.is_tool() {
                continue;
            }
            if cx.carried_over(index) {
                // Decided last turn as now: a base then is a base now.
                if cx.noted(index) {
                    earlier.push(index);
                }
                continue;
            }
            if !offload_candidate(message, index, cx) {
                continue;
            }
            let decision = if cx.tokens_below(index, self.config.min_tokens) {
                cx.gate(gate::BELOW_MIN_TOKENS);
                None
            } else if earlier.is_empty() {
                cx.gate(gate::NO_SIMILAR_EARLIER_OUTPUT);
                None
            } else {
                // The window's earlier outputs that can be a base, nearest first.
                let bases: Vec<usize> = earlier
                    .iter()
                    .rev()
                    .take(self.config.window)
                    .copied()
                    .collect();
                let key = key(index, &bases, messages[index].content.len(), &hashes);
                self.decide(key, index, &bases, (messages, &hashes), cx)
            };
            // An output that goes as a diff is no base for a later one: the model would have to
            // apply two diffs. Excluded on the decision, not on whether its stash succeeds, so
            // the bases (and every later decision) are a function of the transcript alone.
            match decision {
                Some((base, hunks)) => decided.push((index, base, hunks)),
                None => {
                    cx.note(index);
                    earlier.push(index);
                }
            }
        }
        let mut keys = Vec::new();
        for (index, base, hunks) in decided {
            let named = base_name(&messages[base], index - base);
            let key = offload_with(messages, index, cx, |_, marker| {
                format!(
                    "[repeats the output of {named} except for the lines below (a diff against it: - that output, + this one)] {marker}{HINT_FULL_OUTPUT}\n{hunks}"
                )
            });
            keys.extend(key);
        }
        Ok(keys)
    }
}

impl Delta {
    /// The base and hunks for `messages[index]`, remembered by `key`. Records the gate when
    /// there is none.
    fn decide(
        &self,
        key: u64,
        index: usize,
        bases: &[usize],
        (messages, hashes): (&Transcript<'_, '_>, &[Option<u64>]),
        cx: &mut ApplyCx<'_>,
    ) -> Option<(usize, Arc<str>)> {
        let output = messages[index].content.as_str();
        let remembered = {
            let memo = self.memo.lock();
            if let Some(&gate) = memo.none.get(&key) {
                cx.gate(gate);
                return None;
            }
            memo.found.get(&key).cloned()
        };
        if let Some(found) = remembered {
            let base = bases.get(found.back).copied();
            if let Some(base) = base
                && *found.output == *output
                && *found.base == *messages[base].content
            {
                return Some((base, found.hunks));
            }
        }
        // Every outcome is remembered, refusals too: a diff that came out too large costs as
        // much to find again as one that was kept.
        let found = self.compute(output, bases, messages, hashes);
        let decided = match &found {
            Ok(found) => Ok((bases[found.back], found.hunks.clone())),
            Err(gate) => Err(*gate),
        };
        self.memo.lock().remember(key, found);
        match decided {
            Ok(decided) => Some(decided),
            Err(gate) => {
                cx.gate(gate);
                None
            }
        }
    }

    /// Picks the base (of `bases`, nearest first) sharing most lines with `output` and renders
    /// the diff against it. `hashes` are the transcript's content hashes, by which each base's
    /// lines are kept.
    fn compute(
        &self,
        output: &str,
        bases: &[usize],
        messages: &Transcript<'_, '_>,
        hashes: &[Option<u64>],
    ) -> Result<Found, Gate> {
        let mut needed = Needed::default();
        let mut count = 0;
        for line in output.lines() {
            count += 1;
            if count > self.config.max_lines {
                return Err(gate::TOO_MANY_LINES);
            }
            needed.entry(tokens::content_hash(line)).or_default().times += 1;
        }
        // Fewer shared lines than this never qualify, so a base with fewer lines is skipped
        // before it is counted.
        let least = (self.config.min_shared * count as f64).ceil().max(1.0) as usize;
        let mut best: Option<(usize, usize)> = None;
        for (back, lines) in self.base_lines(bases, messages, hashes).iter().enumerate() {
            // At most `max_lines + 1` are kept: a longer base is skipped by its count alone.
            if lines.len() > self.config.max_lines || lines.len() < least {
                continue;
            }
            let shared = shared_lines(&mut needed, lines, back + 1);
            if best.is_none_or(|(_, most)| shared > most) {
                best = Some((back, shared));
            }
        }
        let Some((back, shared)) = best else {
            return Err(gate::NO_SIMILAR_EARLIER_OUTPUT);
        };
        if shared < least {
            return Err(gate::NO_SIMILAR_EARLIER_OUTPUT);
        }
        let base = messages[bases[back]].content.as_str();
        let hunks = hunks(base, output);
        if hunks.is_empty() {
            // The same lines, with other line endings: nothing to show.
            return Err(gate::NO_SIMILAR_EARLIER_OUTPUT);
        }
        if hunks.len() as f64 > self.config.max_diff_share * output.len() as f64 {
            return Err(gate::DIFF_TOO_LARGE);
        }
        Ok(Found {
            back,
            hunks: hunks.into(),
            output: output.into(),
            base: base.into(),
        })
    }
}

impl Delta {
    /// The lines of each base, hashed ([`line_hashes`]): kept from an earlier output's turn
    /// when it looked at the same base, else hashed now and kept.
    fn base_lines(
        &self,
        bases: &[usize],
        messages: &Transcript<'_, '_>,
        hashes: &[Option<u64>],
    ) -> Vec<Arc<[u64]>> {
        let kept: Vec<Option<Arc<[u64]>>> = {
            let memo = self.memo.lock();
            bases
                .iter()
                .map(|&base| {
                    let hash = hashes.get(base).copied().flatten()?;
                    memo.lines_of(hash, messages[base].content.len())
                })
                .collect()
        };
        let mut fresh = Vec::new();
        let lines = kept
            .into_iter()
            .zip(bases)
            .map(|(kept, &base)| {
                kept.unwrap_or_else(|| {
                    let text = &messages[base].content;
                    let lines = line_hashes(text, self.config.max_lines + 1);
                    if let Some(hash) = hashes.get(base).copied().flatten() {
                        fresh.push((hash, text.len(), lines.clone()));
                    }
                    lines
                })
            })
            .collect();
        if !fresh.is_empty() {
            let mut memo = self.memo.lock();
            for (hash, len, lines) in fresh {
                memo.remember_lines(hash, len, lines);
            }
        }
        lines
    }
}

/// The first `most` lines of `text` (as `str::lines` splits them), each as its
/// [`tokens::content_hash`]: what scoring a base reads of it. A base is looked at by up to
/// `window` later outputs, and finding and hashing its lines again for each was most of the
/// component on a new output. Kept by the base's content hash and length: two bases alike in
/// both would be scored by one's lines (so another base, or none, might be chosen), and the
/// diff is always taken against the chosen base's own text.
fn line_hashes(text: &str, most: usize) -> Arc<[u64]> {
    text.lines().take(most).map(tokens::content_hash).collect()
}

fn lines_key(hash: u64, len: usize) -> u64 {
    hash ^ (len as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(29)
}

/// A key for the decision on `messages[index]`: its content's hash and length, and each
/// candidate base's hash, in order. The header's call id is read from the transcript when the
/// diff is written, so it is not part of the key.
fn key(index: usize, bases: &[usize], len: usize, hashes: &[Option<u64>]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut key = hashes[index].unwrap_or(0);
    for &base in bases {
        let hash = hashes[base].unwrap_or(0);
        key = (key.rotate_left(5) ^ hash).wrapping_mul(K);
    }
    key ^ (bases.len() as u64).wrapping_mul(K).rotate_left(17) ^ (len as u64)
}

/// The new output's lines, by their hashes.
type Needed = HashMap<u64, Want, tokens::IdentityBuild>;

/// How often a line occurs in the new output, and how many of those the base being scored
/// has matched so far (`scoring` names that base, so the next one starts over without the map
/// being cleared).
#[derive(Default)]
struct Want {
    times: usize,
    matched: usize,
    scoring: usize,
}

/// Lines of `base` that `needed` also has, as a multiset: each base line counts while the new
/// output has an unmatched copy of it. `scoring` is the base's number, never 0.
fn shared_lines(needed: &mut Needed, base: &[u64], scoring: usize) -> usize {
    let mut shared = 0;
    for line in base {
        let Some(want) = needed.get_mut(line) else {
            continue;
        };
        if want.scoring != scoring {
            want.scoring = scoring;
            want.matched = 0;
        }
        if want.matched < want.times {
            want.matched += 1;
            shared += 1;
        }
    }
    shared
}

/// The changed lines of `output` against `base`, as unified-diff hunks without context lines:
/// `@@ -a,b +c,d @@`, then `-` lines of the base and `+` lines of the output. Lines compare
/// without their terminators (`\n` or `\r\n`), so a missing final newline or a CRLF copy is no
/// change. Empty when no line differs.
fn hunks(base: &str, output: &str) -> String {
    let (old, new): (Vec<&str>, Vec<&str>) = (base.lines().collect(), output.lines().collect());
    // Myers without a deadline: a deadline would make the result depend on the machine's speed,
    // and a decision must come out the same on every turn and every replica.
    let ops = similar::capture_diff_slices(Algorithm::Myers, &old, &new);
    let mut out = String::new();
    for group in similar::group_diff_ops(ops, 0) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let (from, to) = (first.old_range().start, first.new_range().start);
        let (old_len, new_len) = (last.old_range().end - from, last.new_range().end - to);
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            span(from, old_len),
            span(to, new_len)
        ));
        for op in &group {
            if op.tag() == DiffTag::Equal {
                continue;
            }
            for line in &old[op.old_range()] {
                out.push_str(&format!("-{line}\n"));
            }
            for line in &new[op.new_range()] {
                out.push_str(&format!("+{line}\n"));
            }
        }
    }
    out.truncate(out.trim_end_matches('\n').len());
    out
}

/// A unified-diff range: 1-based start, and the count when it is not one.
fn span(start: usize, len: usize) -> String {
    match len {
        // An empty range names the line before it, as `diff -U0` does.
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        n => format!("{},{n}", start + 1),
    }
}

/// How the header names the base: by its call id when it has one (the model sees the id on
/// its own call), else by position.
fn base_name(base: &Message, back: usize) -> String {
    match base.tool_call_id.as_deref() {
        Some(id) if !id.is_empty() && id.len() <= 64 => format!("call {id}"),
        _ => format!("the tool output {back} messages earlier"),
    }
}

#[cfg(test)]
mod tests {
    use crate::components::testing::{check, tool_messages};

    fn run(n: usize, failing: &[usize]) -> String {
        let mut out = String::from("============ test session starts ============\n");
        for i in 0..n {
            let verdict = if failing.contains(&i) {
                "FAILED"
            } else {
                "PASSED"
            };
            out.push_str(&format!(
                "tests/test_module_{i:02}.py::test_behaviour_number_{i} {verdict} [{:3}%]\n",
                (i + 1) * 100 / n
            ));
        }
        out.push_str(&format!(
            "======= {} failed, {} passed in 0.42s =======",
            failing.len(),
            n - failing.len()
        ));
        out
    }

    #[test]
    fn a_re_run_is_shown_as_its_changed_lines() {
        let first = run(40, &[7, 21]);
        let second = run(40, &[21]);
        let out = check("delta", "", tool_messages(&[&first, &second]));
        let contents: Vec<&str> = out.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents[1], first, "the base stays verbatim");
        let delta = contents[2];
        assert!(delta.starts_with("[repeats the output of "), "{delta}");
        assert!(delta.contains("<<cg:"), "{delta}");
        assert!(
            delta.contains("-tests/test_module_07.py::test_behaviour_number_7 FAILED [ 20%]")
                && delta
                    .contains("+tests/test_module_07.py::test_behaviour_number_7 PASSED [ 20%]"),
            "{delta}"
        );
        assert!(
            delta.contains("+======= 1 failed, 39 passed in 0.42s ======="),
            "{delta}"
        );
        assert!(
            !delta.contains("test_behaviour_number_30 "),
            "unchanged lines are not repeated: {delta}"
        );
        let c = &out.report.components[0];
        assert!(
            c.saved_tokens > crate::tokens::count(&second) / 2,
            "most of the re-run is saved: {c:?}"
        );
        out.assert_stashes_resolve();
    }

    /// A base's shared lines are the multiset the texts have in common, scored by the lines'
    /// hashes: each line of the base counts while the new output has a copy of it left, and
    /// scoring the next base starts over.
    #[test]
    fn shared_lines_count_the_lines_both_texts_have() {
        use std::collections::HashMap;
        fn by_text(output: &str, base: &str) -> usize {
            let mut left: HashMap<&str, usize> = HashMap::new();
            for line in output.lines() {
                *left.entry(line).or_default() += 1;
            }
            base.lines()
                .filter(|line| {
                    left.get_mut(line)
                        .filter(|n| **n > 0)
                        .map(|n| *n -= 1)
                        .is_some()
                })
                .count()
        }
        let output = "ok\nok\nFAILED a\n\nPASSED b\r\nok";
        let bases = [
            "ok\nok\nok\nok\nok",
            "FAILED a\nPASSED b\n\n\n",
            "nothing alike",
            "",
            "ok\r\nPASSED b\nFAILED a\nok\nok\nok",
        ];
        let mut needed = super::Needed::default();
        for line in output.lines() {
            needed
                .entry(crate::tokens::content_hash(line))
                .or_default()
                .times += 1;
        }
        for (i, base) in bases.into_iter().enumerate() {
            let lines = super::line_hashes(base, usize::MAX);
            assert_eq!(lines.len(), base.lines().count(), "{base:?}");
            assert_eq!(
                super::shared_lines(&mut needed, &lines, i + 1),
                by_text(output, base),
                "{base:?}"
            );
        }
        assert_eq!(
            super::line_hashes("a\nb\nc\nd", 2).len(),
            2,
            "at most `most`"
        );
    }

    /// Each base's lines are hashed once and kept: a later output scoring the same bases finds
    /// them, and decides as a component that never saw them does.
    #[test]
    fn kept_base_lines_decide_as_fresh_ones() {
        use crate::config::Config;
        let outputs = [
            run(40, &[3]),
            run(40, &[7, 21]),
            run(40, &[21]),
            run(40, &[]),
        ];
        let refs: Vec<&str> = outputs.iter().map(String::as_str).collect();
        let pipeline = || {
            Config::parse("pipeline: [delta]")
                .unwrap()
                .build_pipeline()
                .unwrap()
        };
        let (warm, cold) = (pipeline(), pipeline());
        let (cx, _) = crate::components::testing::run_cx("test");
        for n in 2..=refs.len() {
            // The warm pipeline has scored the earlier outputs' bases on the turns before.
            let mut messages = tool_messages(&refs[..n]);
            warm.run(&mut messages, &cx);
            let mut fresh = tool_messages(&refs[..n]);
            cold.run(&mut fresh, &crate::components::testing::run_cx("fresh").0);
            assert_eq!(messages, fresh, "{n} outputs");
        }
        let mut messages = tool_messages(&refs);
        warm.run(&mut messages, &cx);
        let diffs = messages
            .iter()
            .filter(|m| m.content.starts_with("[repeats the output of "))
            .count();
        assert_eq!(
            diffs, 3,
            "every re-run after the first is a diff: {messages:?}"
        );
    }

    /// The memo gives back a base's lines for its hash and length only, and empties itself
    /// rather than grow past its budget.
    #[test]
    fn the_memo_keeps_lines_by_hash_and_length_within_its_budget() {
        let mut memo = super::Memo::default();
        let lines = super::line_hashes("a\nb\nc", usize::MAX);
        memo.remember_lines(42, 5, lines.clone());
        assert_eq!(memo.lines_of(42, 5).as_deref(), Some(&*lines));
        assert!(
            memo.lines_of(42, 6).is_none(),
            "another length is another text"
        );
        assert!(memo.lines_of(43, 5).is_none());
        let used = memo.lines_bytes;
        memo.remember_lines(42, 5, lines.clone());
        assert_eq!(
            memo.lines_bytes, used,
            "the same base kept twice is counted once"
        );
        let big: std::sync::Arc<[u64]> = vec![7; super::Memo::LINES_BYTES / 8 - 16].into();
        memo.remember_lines(1, 1, big);
        assert!(memo.lines_of(42, 5).is_none(), "emptied to make room");
        assert!(memo.lines_of(1, 1).is_some());
        assert!(memo.lines_bytes <= super::Memo::LINES_BYTES);
    }

    #[test]
    fn the_hunk_headers_place_every_change() {
        let base = "a\nb\nc\nd\ne";
        let output = "a\nB\nc\ne\nf";
        assert_eq!(
            super::hunks(base, output),
            "@@ -2 +2 @@\n-b\n+B\n@@ -4 +3,0 @@\n-d\n@@ -5,0 +5 @@\n+f"
        );
    }

    #[test]
    fn unrelated_small_and_identical_outputs_are_left_alone() {
        let first = run(40, &[7]);
        let unrelated: String = (0..40)
            .map(|i| format!("drwxr-xr-x  2 root root 4096 Dec  2 10:12 directory_{i}\n"))
            .collect();
        let out = check("delta", "", tool_messages(&[&first, &unrelated, &first]));
        assert_eq!(out.messages[2].content, unrelated);
        assert_eq!(out.messages[3].content, first, "an exact copy is dedup's");
        assert!(!out.report.components[0].mutated);
        let small = check("delta", "", tool_messages(&["ok\nfine", "ok\nfiner"]));
        assert_eq!(
            small.report.components[0].gates.get("below_min_tokens"),
            Some(&2)
        );
    }

    #[test]
    fn a_base_outside_the_window_is_not_used() {
        let first = run(40, &[7]);
        let second = run(40, &[8]);
        let filler: Vec<String> = (0..3)
            .map(|k| format!("unrelated output {k}\n").repeat(60))
            .collect();
        let mut outputs: Vec<&str> = vec![&first];
        outputs.extend(filler.iter().map(String::as_str));
        outputs.push(&second);
        let near = check("delta", "window: 4", tool_messages(&outputs));
        assert_eq!(near.messages[1].content, first);
        assert!(near.messages[5].content.starts_with("[repeats"));
        let far = check("delta", "window: 3", tool_messages(&outputs));
        assert_eq!(far.messages[5].content, second);
    }

    #[test]
    fn a_remembered_decision_is_the_same_decision() {
        // One pipeline, run twice: the second run is answered from the memo.
        let pipeline = crate::config::Config::parse("pipeline: [delta]\n")
            .unwrap()
            .build_pipeline()
            .unwrap();
        let (first, second) = (run(60, &[3]), run(60, &[4]));
        let (cx, _store) = crate::components::testing::run_cx("test");
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let mut messages = tool_messages(&[&first, &second]);
                let report = pipeline.run(&mut messages, &cx);
                (
                    messages[2].content.clone(),
                    report.components[0].saved_tokens,
                )
            })
            .collect();
        assert!(runs[0].0.starts_with("[repeats"), "{}", runs[0].0);
        assert_eq!(runs[0], runs[1]);
        // A different base under the same window position is not answered from the memo.
        let third = run(60, &[9]);
        let mut messages = tool_messages(&[&third, &second]);
        pipeline.run(&mut messages, &cx);
        assert!(
            messages[2].content.contains("-tests/test_module_09.py"),
            "{}",
            messages[2].content
        );
    }

    #[test]
    fn a_diff_is_never_the_base_of_another() {
        // Three runs: the third shares most with the second, but the second goes as a diff, so
        // the third is diffed against the first, which the model sees whole.
        let (first, second, third) = (run(40, &[7, 21]), run(40, &[21]), run(40, &[]));
        let out = check("delta", "", tool_messages(&[&first, &second, &third]));
        assert_eq!(out.messages[1].content, first);
        for k in [2, 3] {
            assert!(
                out.messages[k]
                    .content
                    .starts_with("[repeats the output of call call_0 "),
                "{}",
                out.messages[k].content
            );
        }
        out.assert_stashes_resolve();
    }

    #[test]
    fn line_endings_are_not_changes() {
        let first = run(40, &[7]);
        let crlf = run(40, &[8]).replace('\n', "\r\n") + "\r\n";
        let out = check("delta", "", tool_messages(&[&first, &crlf]));
        let delta = &out.messages[2].content;
        assert!(delta.starts_with("[repeats"), "{delta}");
        assert!(!delta.contains('\r'), "{delta:?}");
        // Lines 8 and 9 (verdicts 7 and 8) changed; the last line, without a newline in the
        // base and with one here, did not.
        assert_eq!(delta.matches("\n@@ ").count(), 1, "{delta}");
        assert!(delta.contains("\n@@ -9,2 +9,2 @@\n"), "{delta}");
    }

    #[test]
    fn a_diff_too_large_for_its_output_is_refused() {
        let first = run(40, &[]);
        // Every third verdict changes: two thirds of the lines are shared, but each changed
        // line is in the diff twice, so the diff is most of the output's length.
        let third: Vec<usize> = (0..40).step_by(3).collect();
        let second = run(40, &third);
        let out = check("delta", "", tool_messages(&[&first, &second]));
        assert_eq!(out.messages[2].content, second);
        assert_eq!(
            out.report.components[0].gates.get("diff_too_large"),
            Some(&1)
        );
        let loose = check(
            "delta",
            "max_diff_share: 1.0",
            tool_messages(&[&first, &second]),
        );
        assert!(loose.messages[2].content.starts_with("[repeats"));
    }

    #[test]
    fn a_base_without_a_call_id_is_named_by_position() {
        let (first, second) = (run(40, &[1]), run(40, &[2]));
        let mut messages = tool_messages(&[&first, &second]);
        messages[1].tool_call_id = None;
        let out = check("delta", "", messages);
        assert!(
            out.messages[2]
                .content
                .starts_with("[repeats the output of the tool output 1 messages earlier "),
            "{}",
            out.messages[2].content
        );
    }

    #[test]
    fn a_growing_transcript_keeps_every_earlier_decision_byte_for_byte() {
        let pipeline = crate::config::Config::parse("pipeline: [delta]\n")
            .unwrap()
            .build_pipeline()
            .unwrap();
        let (cx, _store) = crate::components::testing::run_cx("test");
        let runs: Vec<String> = (0..6).map(|k| run(50, &[k, 10 + k])).collect();
        let mut before: Vec<crate::message::Message> = Vec::new();
        for turn in 1..=runs.len() {
            let outputs: Vec<&str> = runs[..turn].iter().map(String::as_str).collect();
            let mut messages = tool_messages(&outputs);
            pipeline.run(&mut messages, &cx);
            assert_eq!(messages[..before.len()], before[..], "turn {turn}");
            before = messages;
        }
        assert!(
            before[2..]
                .iter()
                .all(|m| m.content.starts_with("[repeats"))
        );
    }

    #[test]
    fn every_preset_runs_it_after_every_stage_that_can_cut_a_base() {
        use crate::config::Config;
        use crate::pipeline::Kind;
        let presets = crate::config::PRESETS.iter().map(|p| {
            (
                p.name,
                Config::parse(&format!("preset: {}\n", p.name)).unwrap(),
            )
        });
        let mut with_delta = 0;
        for (name, config) in presets.chain([("embedded default", Config::embedded())]) {
            let pipeline = config.build_pipeline().unwrap();
            let Some(at) = pipeline.names().iter().position(|n| *n == "delta") else {
                continue;
            };
            with_delta += 1;
            let later: Vec<_> = pipeline.stages()[at + 1..]
                .iter()
                .filter(|s| s.kind() == Kind::Offload)
                .map(|s| s.name())
                .collect();
            assert!(later.is_empty(), "{name}: {later:?} after delta");
        }
        assert_eq!(
            with_delta, 5,
            "balanced, coding, agent, general and the embedded default"
        );
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        for block in ["min_shared: 1.5", "max_diff_share: -0.1", "window: 0"] {
            let yaml = format!("pipeline: [delta]\ncomponents:\n  delta: {{{block}}}\n");
            let err = format!("{:?}", crate::config::Config::parse(&yaml).unwrap_err());
            assert!(err.contains("components.delta"), "{block}: {err}");
        }
    }
}
