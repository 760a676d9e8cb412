//! The component registry and the helpers every component shares.
//!
//! [`ALL`] lists every component this build has, alphabetically; config resolution and
//! `sluice presets` read it, so adding a component is one file plus one line here. [`PLANNED`]
//! names components the spec defines that this build does not have yet: a preset or pipeline
//! naming one fails the config check with a message that says so, instead of silently running
//! without it.

mod cacheinject;
pub mod cachesplit;
pub mod cmdfilter;
pub(crate) mod collapse;
mod dedup;
mod delta;
mod extract;
mod extract_llm;
mod failed_call;
mod failed_run;
mod failure;
mod format;
mod linecap;
pub mod llm_offload;
mod mask;
mod oversized_block;
mod phi_evict;
mod projection;
mod repeated_call;
mod searchfold;
pub mod skeleton;
mod smartcrush;
mod source;
mod stale_output;
mod stale_reasoning;
mod summarize;
mod textclean;
mod toon;
pub mod triage;

/// What `textclean` makes of a text: escapes removed, `\r` redraws rendered (for tests and tools
/// that check its output).
pub use crate::terminal::clean as terminal_render;
pub use source::ComponentSource;

use crate::gate;
use std::collections::HashSet;

use serde::de::DeserializeOwned;

use crate::dsl::LoadError;
use crate::marker;
use crate::message::Message;
use crate::pipeline::{ApplyCx, Component, Gate, Stage, StashKey, Transcript};
use crate::tokens;

/// One component as the registry lists it: its name (the only one the component has), one
/// line for `sluice presets` and the docs, and how it is built from its `components.<name>`
/// block. Each component file declares one as a `const`; [`ALL`] lists them.
pub struct ComponentFactory {
    name: &'static str,
    summary: &'static str,
    /// The gates it records of its own; [`gate::ANY_COMPONENT`] adds the shared ones.
    gates: &'static [Gate],
    /// Its config's defaults as a value (`null` where a key has none); the docs' table of
    /// defaults is rendered from it.
    defaults: fn() -> serde_json::Value,
    build: fn(&ComponentSource<'_>) -> Result<Component, BuildError>,
}

impl ComponentFactory {
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// One line for `sluice presets` and the docs.
    pub fn summary(&self) -> &'static str {
        self.summary
    }

    /// The gates it records, besides [`gate::ANY_COMPONENT`] (the docs' table of gates is
    /// rendered from these; the corpus test holds every component to its list).
    pub fn gates(&self) -> &'static [Gate] {
        self.gates
    }

    /// Its config's defaults, as the config would spell them (a model's key is never shown).
    pub fn defaults(&self) -> serde_json::Value {
        (self.defaults)()
    }

    /// Builds the component from its config block (defaults when there is none).
    ///
    /// # Errors
    /// A [`BuildError`] naming the bad key or value.
    pub fn build(&self, source: &ComponentSource<'_>) -> Result<Component, BuildError> {
        (self.build)(source)
    }

    /// [`ComponentFactory::build`], as a stage under this factory's name.
    ///
    /// # Errors
    /// As `build`.
    pub fn stage(&self, source: &ComponentSource<'_>) -> Result<Stage, BuildError> {
        Ok(Stage::new(self.name, self.build(source)?))
    }
}

/// Why a component could not be built from its `components.<name>` block, or by its name.
/// Config validation puts each one under its key path (`components.<name>`, `pipeline[i]`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The block does not decode (unknown key, wrong type): a plain sentence with line and
    /// column.
    #[error("{0}")]
    Decode(String),
    /// A value the component refuses: the key (or keys) and what they must satisfy.
    #[error("{key} {reason}")]
    Invalid { key: &'static str, reason: String },
    /// An `exempt.file_patterns` glob that does not compile.
    #[error("exempt.file_patterns `{pattern}`: {error}")]
    Pattern {
        pattern: String,
        error: regex::Error,
    },
    /// Filters (builtin or the block's own) that do not load, every one of them.
    #[error("{}", joined(.0))]
    Filters(Vec<LoadError>),
    /// A component the spec names that this build does not have yet.
    #[error(
        "component `{0}` is a context-guru component not built in this version of sluice yet; remove it or pick a preset whose components are all built (`sluice presets`)"
    )]
    NotBuilt(String),
    /// No component of that name.
    #[error("unknown component `{0}` (built: {built})", built = built_names())]
    Unknown(String),
}

impl BuildError {
    /// A value out of range: `key` and what it must satisfy.
    pub(crate) fn invalid(key: &'static str, reason: impl Into<String>) -> BuildError {
        BuildError::Invalid {
            key,
            reason: reason.into(),
        }
    }
}

fn joined(errors: &[LoadError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The components an error offers as the ones built: the listed ones ([`is_listed`]).
fn built_names() -> String {
    ALL.iter()
        .map(|f| f.name())
        .filter(|name| is_listed(name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether listings offer the component (`sluice presets`, the `built:` names of an
/// unknown-component error): not one that does nothing in this build, which today is
/// `agentdiet` (no model, see `llm_offload`). It stays registered and loads when a config
/// names it, with the config's warning that it does nothing, rather than failing the config:
/// sluice keeps context-guru's names so a file written for context-guru keeps loading
/// (`config.rs`), and an error would break those files over a component that changes no byte.
/// Offering it in a list, though, says it does something; so lists leave it out. The docs'
/// tables of components still show it, as a no-op (`docs/components.md`).
pub fn is_listed(name: &str) -> bool {
    !llm_offload::WITHOUT_MODEL.contains(&name)
}

/// Every component of this build, alphabetically.
pub const ALL: &[&ComponentFactory] = &[
    &llm_offload::AGENTDIET,
    &cacheinject::FACTORY,
    &cachesplit::FACTORY,
    &cmdfilter::FACTORY,
    &collapse::FACTORY,
    &dedup::FACTORY,
    &delta::FACTORY,
    &extract::FACTORY,
    &extract_llm::FACTORY,
    &failed_call::FACTORY,
    &failed_run::FACTORY,
    &format::FACTORY,
    &linecap::FACTORY,
    &mask::FACTORY,
    &oversized_block::FACTORY,
    &phi_evict::FACTORY,
    &repeated_call::FACTORY,
    &searchfold::FACTORY,
    &skeleton::FACTORY,
    &smartcrush::FACTORY,
    &stale_output::FACTORY,
    &stale_reasoning::FACTORY,
    &summarize::FACTORY,
    &textclean::FACTORY,
    &toon::FACTORY,
];

/// Components the spec names that this build does not have yet.
pub const PLANNED: &[&str] = &["readlifecycle", "toolfilter", "toolschema"];

/// The factory registered under `name`.
pub fn find(name: &str) -> Option<&'static ComponentFactory> {
    ALL.iter().copied().find(|f| f.name() == name)
}

/// A config type's defaults as a value: the factories' `defaults`.
pub(crate) fn defaults<T: Default + serde::Serialize>() -> serde_json::Value {
    // Only plain data is serialized here; a failure would be a bug in a derive, shown as null.
    serde_json::to_value(T::default()).unwrap_or_default()
}

/// Decodes a component's typed config, or its defaults when the block is absent.
pub(crate) fn decode<T: DeserializeOwned + Default>(
    source: &ComponentSource<'_>,
) -> Result<T, BuildError> {
    source.decode::<T>().map(Option::unwrap_or_default)
}

/// How an offloader writes its marker. Only `full` exists: sluice never drops content one way,
/// so the reference's `summary` and `off` modes (marker without a stash) are refused at config
/// time rather than accepted and ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MarkerMode {
    #[default]
    Full,
}

/// Common candidate gate: a tool output whose content is one text value. Records
/// `non_text_blocks` for a tool output that is not; other roles are not candidates at all.
pub(crate) fn text_tool_output(message: &Message, cx: &mut ApplyCx<'_>) -> bool {
    if !message.is_tool() {
        return false;
    }
    if !message.rewritable {
        cx.gate(gate::NON_TEXT_BLOCKS);
        return false;
    }
    true
}

/// Common candidate gate for offloaders: a text tool output with no marker in it yet.
/// `message` is message `index` as the component has it. Records the gate and returns false
/// when the message is not a candidate.
pub(crate) fn offload_candidate(message: &Message, index: usize, cx: &mut ApplyCx<'_>) -> bool {
    // Carried over: the pipeline put in what this component did to it last turn.
    if cx.carried_over(index) {
        return false;
    }
    cx.at(index);
    if !text_tool_output(message, cx) {
        return false;
    }
    if cx.has_marker(index, &message.content) {
        cx.gate(gate::MARKER_OR_KEPT_VERBATIM);
        return false;
    }
    true
}

/// Nodes of a JSON output visited looking for its text: an output is a small object around one
/// long string, and a huge document is not worth walking on every turn.
const MAX_JSON_NODES: usize = 256;

/// The string value of a JSON object or array output that holds the most lines, with the span
/// of its literal (quotes included) in `content`, when it holds more than one line.
pub(crate) fn longest_json_text(content: &str) -> Option<(crate::wire::json::Span, String)> {
    let start = content.find(|c: char| !c.is_whitespace())?;
    if !matches!(content.as_bytes()[start], b'{' | b'[') {
        return None;
    }
    let root = crate::wire::json::parse_document(content).ok()?;
    let mut stack = vec![root];
    let mut best: Option<(usize, crate::wire::json::Span)> = None;
    let mut visited = 0;
    while let Some(span) = stack.pop() {
        visited += 1;
        if visited > MAX_JSON_NODES {
            break;
        }
        match crate::wire::json::kind_of(content, span) {
            crate::wire::json::Kind::Object => {
                stack.extend(crate::wire::json::entries(content, span).map(|e| e.value))
            }
            crate::wire::json::Kind::Array => {
                stack.extend(crate::wire::json::elements(content, span))
            }
            crate::wire::json::Kind::String => {
                // Escaped newlines: a line count without decoding every string.
                let lines = memchr::memmem::find_iter(span.of(content).as_bytes(), b"\\n").count();
                if lines > 0 && best.is_none_or(|(most, _)| lines > most) {
                    best = Some((lines, span));
                }
            }
            _ => {}
        }
    }
    let (_, span) = best?;
    let text = crate::wire::json::decode_string(content, span)
        .ok()?
        .into_owned();
    Some((span, text))
}

/// `content` with `f` applied to the text of [`longest_json_text`] and the result put back in its
/// string (`None` when the output is not such JSON or `f` changes nothing): what a text
/// component does to an output whose lines sit inside one JSON string, the JSON kept valid.
pub(crate) fn map_json_text(
    content: &str,
    f: impl FnOnce(&str) -> Option<String>,
) -> Option<String> {
    let (span, text) = longest_json_text(content)?;
    let mapped = f(&text)?;
    Some(format!(
        "{}{}{}",
        &content[..span.start],
        crate::wire::json::to_literal(&mapped),
        &content[span.end..]
    ))
}

/// Replaces the content of `messages[index]` with `build(message, marker)` when that is strictly
/// fewer tokens, stashing the original first. `message` is the message as the pipeline has it
/// now (reformatted, perhaps), not the wire original that is stashed. Records `marker_no_win` or `store_full` and returns
/// `None` otherwise.
///
/// The stashed original is the wire original when only lossless reformats touched the message
/// (a candidate has no marker, so nothing lossy did): expand then returns the agent's exact bytes.
pub(crate) fn offload_with(
    messages: &mut Transcript<'_, '_>,
    index: usize,
    cx: &mut ApplyCx<'_>,
    build: impl FnOnce(&Message, &str) -> String,
) -> Option<StashKey> {
    cx.at(index);
    // Borrowed, not copied: the original can be a megabyte, and this runs on every turn.
    let original: &str = match cx.wire_original(index) {
        Some(wire) => wire,
        None => &messages[index].content,
    };
    let id = marker::stash_id(original);
    let replacement = build(&messages[index], &marker::marker(&id));
    if tokens::count(&replacement) >= cx.tokens(index) {
        cx.gate(gate::MARKER_NO_WIN);
        return None;
    }
    match cx.stash_as(original, id) {
        Ok(key) => {
            messages.set_content(index, replacement);
            Some(key)
        }
        Err(_) => {
            cx.gate(gate::STORE_FULL);
            None
        }
    }
}

/// The first `chars` characters of `text` on one line, with any marker syntax defanged so the
/// stub never names a stash it does not own.
pub(crate) fn peek(text: &str, chars: usize) -> String {
    let mut out = String::with_capacity(chars + 8);
    let mut last_space = true;
    let mut cut = false;
    for (taken, c) in text.chars().enumerate() {
        if taken == chars {
            cut = true;
            break;
        }
        if c.is_whitespace() {
            if !last_space {
                out.push(' ');
            }
            last_space = true;
        } else {
            out.push(c);
            last_space = false;
        }
    }
    out.truncate(out.trim_end().len());
    if cut {
        out.push_str(" ...");
    }
    out.replace("<<cg:", "<< cg:")
}

/// Lowercase words of three or more letters or digits, minus the commonest English ones.
pub(crate) fn keywords(text: &str) -> HashSet<String> {
    const STOP: [&str; 24] = [
        "the", "and", "for", "are", "but", "not", "you", "all", "can", "was", "one", "our", "out",
        "has", "this", "that", "with", "from", "have", "what", "when", "will", "your", "into",
    ];
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .filter(|w| !STOP.contains(&w.as_str()))
        .collect()
}

/// The tool outputs a lossless repacker with a `keep_recent` window may rewrite, oldest first:
/// text outputs outside the window (and, with one, outside the cached prefix) of at least
/// `min_tokens`. Each one passed over is counted under its gate.
pub(crate) fn repack_candidates(
    messages: &Transcript<'_, '_>,
    keep_recent: usize,
    min_tokens: usize,
    cx: &mut ApplyCx<'_>,
) -> Vec<usize> {
    let recent = recent_outputs(messages, keep_recent);
    let mut candidates = Vec::new();
    for index in 0..messages.len() {
        // Carried over: the pipeline put in what this component did to it last turn.
        if cx.carried_over(index) {
            continue;
        }
        cx.at(index);
        if held_back(&recent, keep_recent, index, cx) || !text_tool_output(&messages[index], cx) {
            continue;
        }
        if min_tokens > 0 && cx.tokens_below(index, min_tokens) {
            cx.gate(gate::BELOW_MIN_TOKENS);
            continue;
        }
        candidates.push(index);
    }
    candidates
}

/// Whether a `keep_recent` window holds message `index` back: it is one of the newest outputs,
/// or (with a window, so frozen) it left the window inside the cached prefix, where it keeps
/// the bytes the provider cached. Records the gate.
pub(crate) fn held_back(
    recent: &[usize],
    keep_recent: usize,
    index: usize,
    cx: &mut ApplyCx<'_>,
) -> bool {
    cx.at(index);
    if recent.contains(&index) {
        cx.gate(gate::WITHIN_KEEP_RECENT);
        return true;
    }
    if keep_recent > 0 && !cx.may_mutate(index) {
        cx.gate(gate::CACHED_PREFIX);
        return true;
    }
    false
}

/// Indices of the newest `n` tool outputs, ascending (`keep_recent` of several components).
pub(crate) fn recent_outputs(messages: &Transcript<'_, '_>, n: usize) -> Vec<usize> {
    let mut recent: Vec<usize> = (0..messages.len())
        .rev()
        .filter(|&i| messages[i].is_tool())
        .take(n)
        .collect();
    recent.reverse();
    recent
}

#[cfg(test)]
pub(crate) mod testing;
