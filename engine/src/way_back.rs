//! The way back: the `context_guru_expand` tool a request must declare whenever it carries a
//! `<<cg:HASH>>` marker, and the rules for when it can.
//!
//! **Invariant:** a request never leaves sluice carrying a marker for which the model has no way
//! back in that request. [`reach`] decides, before the pipeline runs, whether the request lets
//! the model call the tool at all; when it does not, the turn runs without lossy offloads.
//! [`inject`] then splices the tool into the rewritten body; when that fails for any reason the
//! turn is run again without lossy offloads. Both say why in a [`Withheld`] reason, which the
//! host counts.
//!
//! `tool_choice` decides reachability:
//! - absent, `auto` (every dialect), Anthropic `{"type":"any"}` and OpenAI `"required"`: the
//!   tool is declared with the others and stays reachable (a forced "some tool" choice includes
//!   it);
//! - `none`, a named tool or function, a hosted tool forced by the Responses API
//!   (`{"type":"file_search"}`), or a shape sluice does not know: the model cannot call
//!   the expand tool on this turn, so nothing lossy is cut on it.
//!
//! Everything here splices bytes like the wire layer: the tool is appended last to `tools` with
//! deterministic bytes, so the cached tools prefix is the same turn after turn.

use crate::marker::{EXPAND_TOOL_NAME, MARKER_PREFIX};
use crate::wire::json::{self, Kind, Span};
use crate::wire::{Dialect, ParsedBody};

/// The tool's description. Short: it is declared on every turn of a session a lossy pipeline
/// may cut, and sent with each of them (the reference's sentence, two thirds longer, cost a
/// session that nothing was cut from about 0.3% more: `docs/performance.md`).
pub const EXPAND_DESCRIPTION: &str = "Returns the original text behind a <<cg:ID>> marker; with `pattern` (text to find) or `lines` (\"START-END\"), only those lines, numbered.";

/// The tool's input schema: the marker's id, and optionally the part wanted.
const EXPAND_SCHEMA: &str = r#"{"type":"object","properties":{"id":{"type":"string"},"pattern":{"type":"string"},"lines":{"type":"string"}},"required":["id"]}"#;

/// What an expand call asks for beyond the id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ask {
    /// `lines`: a 1-based, inclusive range.
    pub lines: Option<(usize, usize)>,
    /// `pattern`: lines containing this text, compared without case.
    pub pattern: Option<String>,
}

impl Ask {
    /// The ask of a call's `pattern` and `lines` arguments (`"START-END"` or one line number);
    /// an argument that does not read as one is ignored, and the whole original goes back.
    pub fn parse(pattern: Option<&str>, lines: Option<&str>) -> Ask {
        let lines = lines.and_then(|l| {
            let (start, end) = l.split_once('-').unwrap_or((l, l));
            let start: usize = start.trim().parse().ok()?;
            let end: usize = end.trim().parse().ok()?;
            (start >= 1 && end >= start).then_some((start, end))
        });
        let pattern = pattern
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned);
        Ask { lines, pattern }
    }

    /// Whether the call asked for the whole original.
    pub fn is_whole(&self) -> bool {
        self.lines.is_none() && self.pattern.is_none()
    }
}

/// Lines kept either side of a line that matches a pattern.
pub const PATTERN_CONTEXT: usize = 3;
/// Matching lines a pattern returns at most; past them the reply says how many it left out.
pub const MAX_PATTERN_MATCHES: usize = 40;
/// A line longer than this (minified JSON, a base64 blob) is shown in part when a pattern found
/// it: [`LINE_WINDOW`] bytes either side of the match, or the start of a context line. A range
/// (`lines`) always returns whole lines.
pub const LONG_LINE: usize = 400;
/// Bytes shown either side of a match in a long line, and of a long context line's start.
pub const LINE_WINDOW: usize = 150;

/// How a line of an excerpt is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    Hidden,
    Whole,
    /// Around a pattern's match (in part when long).
    Match,
    /// Beside a match (its start when long).
    Context,
}

/// The part of `original` an expand call asked for: all of it, the lines of a range, or every
/// line containing a pattern (compared without ASCII case) with [`PATTERN_CONTEXT`] lines either
/// side. A part comes with a header naming what it is out of how many lines, each line
/// numbered, so the model can ask for more; a pattern that matches nothing says so.
pub fn excerpt(original: &str, ask: &Ask) -> String {
    if ask.is_whole() {
        return original.to_owned();
    }
    // An output whose lines sit in one JSON string (collapse numbered and cut that string):
    // the part asked for is of that text.
    if !original.contains('\n')
        && let Some((_, text)) = crate::components::longest_json_text(original)
    {
        return excerpt(&text, ask);
    }
    let lines: Vec<&str> = original.lines().collect();
    let total = lines.len();
    let mut shown = vec![Shown::Hidden; total];
    let needle = ask.pattern.as_deref().map(str::to_ascii_lowercase);
    let header = if let (Some(pattern), Some(needle)) = (&ask.pattern, &needle) {
        let matched: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.to_ascii_lowercase().contains(needle.as_str()))
            .map(|(i, _)| i)
            .collect();
        for &i in matched.iter().take(MAX_PATTERN_MATCHES) {
            let from = i.saturating_sub(PATTERN_CONTEXT);
            let to = (i + PATTERN_CONTEXT).min(total.saturating_sub(1));
            for s in &mut shown[from..=to] {
                if *s == Shown::Hidden {
                    *s = Shown::Context;
                }
            }
            shown[i] = Shown::Match;
        }
        let left_out = matched.len().saturating_sub(MAX_PATTERN_MATCHES);
        match (matched.len(), left_out) {
            (0, _) => format!("[no line of the {total} contains {pattern:?}]"),
            (n, 0) => format!(
                "[{n} of {total} lines contain {pattern:?}, shown with {PATTERN_CONTEXT} lines of context]"
            ),
            (n, more) => format!(
                "[{n} of {total} lines contain {pattern:?}; the first {MAX_PATTERN_MATCHES} are shown with {PATTERN_CONTEXT} lines of context, {more} left out]"
            ),
        }
    } else if let Some((start, end)) = ask.lines {
        let end = end.min(total);
        if start <= end {
            shown[start - 1..end].fill(Shown::Whole);
            format!("[lines {start}-{end} of {total}]")
        } else {
            format!("[the original has {total} lines]")
        }
    } else {
        String::new()
    };
    let mut out = header;
    let mut last: Option<usize> = None;
    for (i, line) in lines.iter().enumerate() {
        let text = match (shown[i], &needle) {
            (Shown::Hidden, _) => continue,
            (_, _) if line.len() <= LONG_LINE => std::borrow::Cow::Borrowed(*line),
            (Shown::Match, Some(needle)) => window(line, needle),
            (Shown::Context, _) => {
                let end = floor_char_boundary(line, LINE_WINDOW);
                std::borrow::Cow::Owned(format!("{}… [{} bytes]", &line[..end], line.len()))
            }
            _ => std::borrow::Cow::Borrowed(*line),
        };
        if last.is_some_and(|l| i > l + 1) {
            out.push_str("\n--");
        }
        out.push_str(&format!("\n{}\t{text}", i + 1));
        last = Some(i);
    }
    out
}

/// A long line around the first match of `needle` (lowercase ASCII), cut on character
/// boundaries, each cut side marked.
fn window<'l>(line: &'l str, needle: &str) -> std::borrow::Cow<'l, str> {
    let Some(at) = line.to_ascii_lowercase().find(needle) else {
        return std::borrow::Cow::Borrowed(line);
    };
    let from = floor_char_boundary(line, at.saturating_sub(LINE_WINDOW));
    let to = floor_char_boundary(line, (at + needle.len() + LINE_WINDOW).min(line.len()));
    let to = if to < at + needle.len() {
        line.len()
    } else {
        to
    };
    let head = if from > 0 { "…" } else { "" };
    let tail = if to < line.len() { "…" } else { "" };
    std::borrow::Cow::Owned(format!("{head}{}{tail}", &line[from..to]))
}

/// The largest character boundary of `s` at or before `at`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Why a turn's lossy offloads were withheld: the model could not have called the expand tool.
/// The names are `/stats` and `/metrics` labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Withheld {
    /// `tool_choice` is `none`.
    ToolChoiceNone,
    /// `tool_choice` names one tool or function: the model must call that one.
    ToolChoiceNamed,
    /// `tool_choice` has a shape sluice does not know (OpenAI `allowed_tools`, say).
    ToolChoiceUnknown,
    /// `tools` is present but not an array.
    ToolsNotArray,
    /// The tool could not be spliced into the rewritten body.
    Unplaced,
    /// A Responses request the provider stores (no `"store": false`, or a `conversation`).
    /// Its markers would live on upstream, where a later turn that chains on it
    /// (`previous_response_id`) carries no marker of its own and so declares no way back; an
    /// expand round would also be stored into the conversation; and a streamed round hands the
    /// client the first response's id (the SDKs check it never changes), whose stored
    /// conversation ends on an unanswered expand call. Stateless requests (Codex sends
    /// `"store": false` and the whole transcript) keep the way back.
    StoredResponse,
    /// A Gemini request that asks for a JSON reply (`generationConfig.responseMimeType`
    /// `application/json`, or a response schema): Gemini refuses function calling there, so a
    /// declared tool would turn the request into a 400.
    JsonResponse,
    /// A Gemini request on an explicit cache (`cachedContent`): Gemini refuses `tools` beside
    /// one, since the cache holds the request's tools.
    CachedContent,
    /// A Gemini request whose `tools` are built-in ones only (`googleSearch`, code
    /// execution): mixing function calling in is not accepted by every Gemini model.
    BuiltinTools,
}

impl Withheld {
    /// Every reason, in label order: the counters' table.
    pub const ALL: [Withheld; 9] = [
        Withheld::ToolChoiceNone,
        Withheld::ToolChoiceNamed,
        Withheld::ToolChoiceUnknown,
        Withheld::ToolsNotArray,
        Withheld::Unplaced,
        Withheld::StoredResponse,
        Withheld::JsonResponse,
        Withheld::CachedContent,
        Withheld::BuiltinTools,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Withheld::ToolChoiceNone => "tool_choice_none",
            Withheld::ToolChoiceNamed => "tool_choice_named",
            Withheld::ToolChoiceUnknown => "tool_choice_unknown",
            Withheld::ToolsNotArray => "tools_not_array",
            Withheld::Unplaced => "unplaced",
            Withheld::StoredResponse => "stored_response",
            Withheld::JsonResponse => "json_response",
            Withheld::CachedContent => "cached_content",
            Withheld::BuiltinTools => "builtin_tools",
        }
    }
}

/// The tool's JSON in `dialect`'s shape.
pub fn tool_json(dialect: Dialect) -> String {
    let description = json::to_literal(EXPAND_DESCRIPTION);
    let schema = EXPAND_SCHEMA;
    match dialect {
        Dialect::Anthropic => {
            format!(
                r#"{{"name":"{EXPAND_TOOL_NAME}","description":{description},"input_schema":{schema}}}"#
            )
        }
        Dialect::OpenAi => format!(
            r#"{{"type":"function","function":{{"name":"{EXPAND_TOOL_NAME}","description":{description},"parameters":{schema}}}}}"#
        ),
        // Responses tools are flat: no `function` wrapper.
        Dialect::Responses => format!(
            r#"{{"type":"function","name":"{EXPAND_TOOL_NAME}","description":{description},"parameters":{schema}}}"#
        ),
        // One `functionDeclarations` entry; its schema is the API's own subset, whose type
        // names are the enum's.
        Dialect::Gemini => format!(
            r#"{{"name":"{EXPAND_TOOL_NAME}","description":{description},"parameters":{GEMINI_SCHEMA}}}"#
        ),
    }
}

/// Tokens of the tool's declaration in `dialect` ([`tool_json`]): what declaring it adds to a
/// request, which the net saving charges (`crate::savings`). Counted once per dialect.
pub fn tool_tokens(dialect: Dialect) -> usize {
    static COUNTS: [std::sync::OnceLock<usize>; 4] = [const { std::sync::OnceLock::new() }; 4];
    let slot = match dialect {
        Dialect::OpenAi => 0,
        Dialect::Anthropic => 1,
        Dialect::Responses => 2,
        Dialect::Gemini => 3,
    };
    *COUNTS[slot].get_or_init(|| crate::tokens::count(&tool_json(dialect)))
}

/// [`EXPAND_SCHEMA`] in Gemini's schema subset.
const GEMINI_SCHEMA: &str = r#"{"type":"OBJECT","properties":{"id":{"type":"STRING"},"pattern":{"type":"STRING"},"lines":{"type":"STRING"}},"required":["id"]}"#;

/// Whether the model could call the expand tool on this request once it is declared.
///
/// # Errors
/// Why it could not: then the turn must not cut anything lossy.
pub fn reach(parsed: &ParsedBody<'_>) -> Result<(), Withheld> {
    let text = parsed.text();
    if let Some(tools) = parsed.tools_span()
        && json::kind_of(text, tools) != Kind::Array
    {
        return Err(Withheld::ToolsNotArray);
    }
    if parsed.dialect() == Dialect::Responses {
        let is =
            |key: &str, literal: &str| parsed.field(key).is_some_and(|s| s.of(text) == literal);
        let conversation = parsed
            .field("conversation")
            .is_some_and(|s| s.of(text) != "null");
        if !is("store", "false") || conversation {
            return Err(Withheld::StoredResponse);
        }
    }
    if parsed.dialect() == Dialect::Gemini {
        return gemini_reach(parsed);
    }
    let Some(choice) = parsed.field("tool_choice") else {
        return Ok(());
    };
    let kind = match json::kind_of(text, choice) {
        Kind::String => json::decode_string(text, choice)
            .ok()
            .map(|c| c.into_owned()),
        Kind::Object => json::get(text, choice, "type")
            .and_then(|t| json::decode_string(text, t).ok())
            .map(|t| t.into_owned()),
        // `null` is what an SDK sends for "not set".
        Kind::Null => return Ok(()),
        _ => None,
    };
    match kind.as_deref() {
        Some("auto" | "any" | "required") => Ok(()),
        Some("none") => Err(Withheld::ToolChoiceNone),
        Some("tool" | "function") => Err(Withheld::ToolChoiceNamed),
        _ => Err(Withheld::ToolChoiceUnknown),
    }
}

/// [`reach`] for Gemini: `toolConfig.functionCallingConfig` in place of `tool_choice`, and no
/// tool at all on a request that asks for a JSON reply, names an explicit cache, or carries
/// only built-in tools. Google's JSON reads a field by its camelCase name or its proto
/// (snake_case) name, so both are read.
fn gemini_reach(parsed: &ParsedBody<'_>) -> Result<(), Withheld> {
    let text = parsed.text();
    let top = |camel: &str, snake: &str| parsed.field(camel).or_else(|| parsed.field(snake));
    let string = |span: Option<Span>| {
        span.and_then(|s| json::decode_string(text, s).ok())
            .map(|s| s.into_owned())
    };
    let config = top("generationConfig", "generation_config");
    let json_reply = string(config.and_then(|c| gemini_get(text, c, "responseMimeType")))
        .is_some_and(|mime| mime.eq_ignore_ascii_case("application/json"))
        || config.is_some_and(|c| {
            gemini_get(text, c, "responseSchema").is_some()
                || gemini_get(text, c, "responseJsonSchema").is_some()
        });
    if json_reply {
        return Err(Withheld::JsonResponse);
    }
    // A request on an explicit cache may not carry `tools` of its own: Gemini refuses it.
    if top("cachedContent", "cached_content").is_some_and(|c| json::kind_of(text, c) != Kind::Null)
    {
        return Err(Withheld::CachedContent);
    }
    if let Some(tools) = parsed.tools_span()
        && json::elements(text, tools).next().is_some()
        && !json::elements(text, tools)
            .any(|t| gemini_get(text, t, "functionDeclarations").is_some())
    {
        return Err(Withheld::BuiltinTools);
    }
    let calling =
        top("toolConfig", "tool_config").and_then(|c| gemini_get(text, c, "functionCallingConfig"));
    match string(calling.and_then(|c| json::get(text, c, "mode"))).as_deref() {
        None | Some("AUTO" | "MODE_UNSPECIFIED") => Ok(()),
        Some("NONE") => Err(Withheld::ToolChoiceNone),
        // Both let the model call any declared function, unless `allowedFunctionNames` narrows
        // them to the ones it names.
        Some("ANY" | "VALIDATED") => {
            let allowed = calling.and_then(|c| gemini_get(text, c, "allowedFunctionNames"));
            let Some(names) = allowed else {
                return Ok(());
            };
            let ours = json::elements(text, names)
                .any(|n| json::decode_string(text, n).is_ok_and(|n| n == EXPAND_TOOL_NAME));
            if ours {
                Ok(())
            } else {
                Err(Withheld::ToolChoiceNamed)
            }
        }
        Some(_) => Err(Withheld::ToolChoiceUnknown),
    }
}

/// A Gemini object's member by its camelCase name, or by the proto name Google's JSON also
/// reads (`functionDeclarations`, `function_declarations`).
fn gemini_get(text: &str, object: Span, camel: &str) -> Option<Span> {
    json::get(text, object, camel).or_else(|| {
        let mut snake = String::with_capacity(camel.len() + 4);
        for c in camel.chars() {
            if c.is_ascii_uppercase() {
                snake.push('_');
                snake.push(c.to_ascii_lowercase());
            } else {
                snake.push(c);
            }
        }
        json::get(text, object, &snake)
    })
}

/// Whether `body` carries a marker, and so must declare the way back.
///
/// Looks at the whole body, not at what a component reported stashing: a replayed decision of a
/// component that was then reverted keeps its marker, and so does a marker the agent's own
/// history brought in (a gateway that stored sluice's output).
pub fn carries_marker(body: &[u8]) -> bool {
    memchr::memmem::find(body, MARKER_PREFIX.as_bytes()).is_some()
}

/// What [`inject`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injected {
    /// The tool was appended: the body to forward.
    Added(Vec<u8>),
    /// The request already declares a tool of that name (a second sluice hop, say).
    AlreadyDeclared,
}

/// Where [`inject_at`] and [`declare_at`] would put the tool: the body is not copied yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The tool goes in at this offset of the rewritten body.
    Insert(Insertion),
    /// The request already declares a tool of that name.
    AlreadyDeclared,
}

/// Bytes to insert at one offset of a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insertion {
    at: usize,
    text: String,
}

impl Insertion {
    /// `body` with the insertion made. A body the turn already owns (write-back rewrote it)
    /// takes it in place, moving only what follows the offset: `tools`, where it goes, is at
    /// or near the end of an agent's request. A borrowed one is copied once, as it must be.
    pub fn into_body(self, body: std::borrow::Cow<'_, [u8]>) -> Vec<u8> {
        match body {
            std::borrow::Cow::Owned(mut owned) => {
                owned.splice(self.at..self.at, self.text.bytes());
                owned
            }
            std::borrow::Cow::Borrowed(borrowed) => splice(borrowed, self.at, &self.text),
        }
    }
}

impl Placement {
    fn injected(self, body: &[u8]) -> Injected {
        match self {
            Placement::Insert(insertion) => {
                Injected::Added(insertion.into_body(std::borrow::Cow::Borrowed(body)))
            }
            Placement::AlreadyDeclared => Injected::AlreadyDeclared,
        }
    }
}

/// Whether the JSON text of a `tools` array may name the expand tool: it holds the name's bytes,
/// or a `\u` escape that could spell them. Without either no entry is named so, and reading
/// every entry's name (skipping each one's schema, per turn, for agents that send dozens) is
/// not needed to know it.
fn may_name_the_expand_tool(tools: &[u8]) -> bool {
    memchr::memmem::find(tools, EXPAND_TOOL_NAME.as_bytes()).is_some()
        || memchr::memmem::find(tools, b"\\u").is_some()
}

fn tool_name(text: &str, tool: Span) -> Option<String> {
    let name = json::get(text, tool, "name")
        .or_else(|| json::get(text, tool, "function").and_then(|f| json::get(text, f, "name")))?;
    json::decode_string(text, name).ok().map(|n| n.into_owned())
}

/// Appends the expand tool to `rewritten`, a rewrite of `parsed`'s body (the body itself when
/// nothing changed), reading `tools` and `tool_choice` from the parse already done.
///
/// # Errors
/// Why the tool cannot be declared on this request.
pub fn inject(parsed: &ParsedBody<'_>, rewritten: &[u8]) -> Result<Injected, Withheld> {
    inject_at(parsed, rewritten).map(|placed| placed.injected(rewritten))
}

/// [`inject`], placed but not made: the host inserts it into the body it owns.
///
/// # Errors
/// Why the tool cannot be declared on this request.
pub fn inject_at(parsed: &ParsedBody<'_>, rewritten: &[u8]) -> Result<Placement, Withheld> {
    reach(parsed)?;
    place_tool(parsed, rewritten)
}

/// Declares the expand tool on a turn of a session that declares it on every turn, also when
/// `tool_choice` keeps the model from calling it on this one (nothing lossy is cut then): the
/// same bytes in the same place as on the session's other turns, so `tools`, where the cached
/// prefix starts, does not change for one turn. A request the provider stores, or whose `tools`
/// is not an array, gets no declaration.
///
/// # Errors
/// Why the tool cannot be declared on this request.
pub fn declare(parsed: &ParsedBody<'_>, rewritten: &[u8]) -> Result<Injected, Withheld> {
    declare_at(parsed, rewritten).map(|placed| placed.injected(rewritten))
}

/// [`declare`], placed but not made: the host inserts it into the body it owns.
///
/// # Errors
/// Why the tool cannot be declared on this request.
pub fn declare_at(parsed: &ParsedBody<'_>, rewritten: &[u8]) -> Result<Placement, Withheld> {
    match reach(parsed) {
        Ok(())
        | Err(Withheld::ToolChoiceNone | Withheld::ToolChoiceNamed | Withheld::ToolChoiceUnknown) => {
            place_tool(parsed, rewritten)
        }
        Err(why) => Err(why),
    }
}

/// Where the expand tool goes in `rewritten`'s `tools` (made when there is none).
fn place_tool(parsed: &ParsedBody<'_>, rewritten: &[u8]) -> Result<Placement, Withheld> {
    if parsed.dialect() == Dialect::Gemini {
        return place_gemini_tool(parsed, rewritten);
    }
    let text = parsed.text();
    let tool = tool_json(parsed.dialect());
    let Some(tools) = parsed.tools_span() else {
        let at = parsed
            .map_offset(parsed.root().end - 1, rewritten.len())
            .ok_or(Withheld::Unplaced)?;
        return Ok(Placement::Insert(Insertion {
            at,
            text: format!(r#","tools":[{tool}]"#),
        }));
    };
    let empty = json::elements(text, tools).next().is_none();
    if may_name_the_expand_tool(&text.as_bytes()[tools.start..tools.end])
        && json::elements(text, tools)
            .any(|existing| tool_name(text, existing).as_deref() == Some(EXPAND_TOOL_NAME))
    {
        return Ok(Placement::AlreadyDeclared);
    }
    let close = locate_tools(parsed, tools, rewritten).ok_or(Withheld::Unplaced)?;
    let text = if empty { tool } else { format!(",{tool}") };
    Ok(Placement::Insert(Insertion { at: close, text }))
}

/// Gemini's declaration: inside the first `tools` entry that has a `functionDeclarations` array
/// (a request may carry one such entry only), else as a new entry of its own.
fn place_gemini_tool(parsed: &ParsedBody<'_>, rewritten: &[u8]) -> Result<Placement, Withheld> {
    let text = parsed.text();
    let declaration = tool_json(Dialect::Gemini);
    let Some(tools) = parsed.tools_span() else {
        let at = parsed
            .map_offset(parsed.root().end - 1, rewritten.len())
            .ok_or(Withheld::Unplaced)?;
        let text = format!(r#","tools":[{{"functionDeclarations":[{declaration}]}}]"#);
        return Ok(Placement::Insert(Insertion { at, text }));
    };
    let mut declarations = None;
    let mut empty = true;
    for tool in json::elements(text, tools) {
        empty = false;
        let Some(list) = gemini_get(text, tool, "functionDeclarations")
            .filter(|l| json::kind_of(text, *l) == Kind::Array)
        else {
            continue;
        };
        for existing in json::elements(text, list) {
            if tool_name(text, existing).as_deref() == Some(EXPAND_TOOL_NAME) {
                return Ok(Placement::AlreadyDeclared);
            }
        }
        declarations.get_or_insert(list);
    }
    // Where `tools` starts in `rewritten`: its bytes are the ones parsed (see `locate_tools`).
    let close = locate_tools(parsed, tools, rewritten).ok_or(Withheld::Unplaced)?;
    let shift = |offset: usize| close + offset - (tools.end - 1);
    let (at, insert) = match declarations {
        Some(list) => {
            let none_yet = json::elements(text, list).next().is_none();
            let insert = if none_yet {
                declaration
            } else {
                format!(",{declaration}")
            };
            (shift(list.end - 1), insert)
        }
        None => {
            let entry = format!(r#"{{"functionDeclarations":[{declaration}]}}"#);
            (close, if empty { entry } else { format!(",{entry}") })
        }
    };
    Ok(Placement::Insert(Insertion { at, text: insert }))
}

/// Where `tools`' closing bracket is in `rewritten`.
///
/// Write-back only edits `messages` and `system`, so a `tools` array before both keeps its offset
/// and one after both moves by the whole length change. One between them (LiteLLM sends
/// `messages, max_tokens, tools, system`) is found by walking the rewritten body's top-level
/// members, which skips values without validating them again; the array found must be the very
/// bytes parsed, or nothing is placed.
fn locate_tools(parsed: &ParsedBody<'_>, tools: Span, rewritten: &[u8]) -> Option<usize> {
    if let Some(close) = parsed.map_offset(tools.end - 1, rewritten.len()) {
        return Some(close);
    }
    let rewritten = std::str::from_utf8(rewritten).ok()?;
    let start = rewritten.find('{')?;
    let root = Span::new(start, rewritten.len());
    let found = json::get(rewritten, root, "tools")?;
    (found.of(rewritten) == tools.of(parsed.text())).then(|| found.end - 1)
}

fn splice(body: &[u8], at: usize, insert: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + insert.len());
    out.extend_from_slice(&body[..at]);
    out.extend_from_slice(insert.as_bytes());
    out.extend_from_slice(&body[at..]);
    out
}

#[cfg(test)]
mod tests;
