//! `toon`: re-encodes a JSON array of uniform flat objects as a TOON table (lossless Reformat).
//!
//! Before: `[{"id":1,"name":"Alice","email":null},{"id":2,"name":"Bob","email":""}]`
//! After:
//! ```text
//! [2]{id,name,email}:
//!   1,Alice,null
//!   2,Bob,""
//! ```
//!
//! The field names are written once instead of once per element; braces and most quotes go.
//! Also handled: an object whose fields are scalars plus one such array (`{"total":2,"rows":[…]}`
//! becomes `total: 2` and `rows[2]{…}:`). Cells follow TOON's quoting rules: a string is quoted
//! when it would read as something else (empty, `null`, `true`, a number, padded, or holding a
//! delimiter or quote), so `null` and `""` stay distinct and every value round-trips. Numbers keep
//! their exact spelling. The result is decoded again and compared with the input before it is
//! adopted; anything nested, ragged, not smaller, or failing that check is left untouched.

use crate::gate::{self, Gate};
use serde::Deserialize;

use super::{BuildError, ComponentFactory, decode, defaults, text_tool_output};
use crate::components::ComponentSource;
use crate::pipeline::{ApplyCx, Component, ComponentError, Reformat, Transcript};
use crate::tokens;
use crate::wire::json::{self, Kind, Span};

/// `components.toon`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToonConfig {
    /// Defaults to `50`. Smaller outputs are left alone.
    pub min_tokens: usize,
}

impl Default for ToonConfig {
    fn default() -> ToonConfig {
        ToonConfig { min_tokens: 50 }
    }
}

pub(super) const FACTORY: ComponentFactory = ComponentFactory {
    name: "toon",
    summary: "re-encodes uniform JSON object arrays as TOON tables (lossless)",
    gates: &[
        gate::BELOW_MIN_TOKENS,
        gate::NESTED_VALUES,
        gate::NOT_JSON,
        gate::NOT_SMALLER,
        gate::NOT_UNIFORM_OBJECT_ARRAY,
        gate::ROUND_TRIP_FAILED,
    ],
    defaults: defaults::<ToonConfig>,
    build,
};

fn build(source: &ComponentSource<'_>) -> Result<Component, BuildError> {
    let config: ToonConfig = decode(source)?;
    Ok(Component::Reformat(Box::new(Toon { config })))
}

struct Toon {
    config: ToonConfig,
}

impl Reformat for Toon {
    fn reformat(
        &self,
        messages: &mut Transcript<'_, '_>,
        cx: &mut ApplyCx<'_>,
    ) -> Result<(), ComponentError> {
        for index in 0..messages.len() {
            let message = &messages[index];
            if !text_tool_output(message, cx) {
                continue;
            }
            let trimmed = message.content.trim();
            if !(trimmed.starts_with('[') || trimmed.starts_with('{')) {
                cx.gate(gate::NOT_JSON);
                continue;
            }
            if cx.tokens_below(index, self.config.min_tokens) {
                cx.gate(gate::BELOW_MIN_TOKENS);
                continue;
            }
            let encoded = match encode(trimmed) {
                Ok(encoded) => encoded,
                Err(reason) => {
                    cx.gate(reason);
                    continue;
                }
            };
            if decode_matches(&encoded, trimmed) != Some(true) {
                cx.gate(gate::ROUND_TRIP_FAILED);
                continue;
            }
            if tokens::count(&encoded) >= cx.tokens(index) {
                cx.gate(gate::NOT_SMALLER);
                continue;
            }
            messages.set_content(index, encoded);
        }
        Ok(())
    }
}

/// One scalar cell: the raw JSON text of its value.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Str(String),
    Raw(String),
}

/// The table of a uniform array: field names in the first element's order, then rows.
struct Table {
    fields: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

fn decode_key(text: &str, key: Span) -> Option<String> {
    json::decode_string(text, key).ok().map(|k| k.into_owned())
}

fn cell(text: &str, value: Span) -> Option<Cell> {
    match json::kind_of(text, value) {
        Kind::String => Some(Cell::Str(
            json::decode_string(text, value).ok()?.into_owned(),
        )),
        Kind::Number | Kind::Bool | Kind::Null => Some(Cell::Raw(value.of(text).to_owned())),
        Kind::Object | Kind::Array => None,
    }
}

fn table(text: &str, array: Span) -> Result<Table, Gate> {
    let mut fields: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for element in json::elements(text, array) {
        if json::kind_of(text, element) != Kind::Object {
            return Err(gate::NOT_UNIFORM_OBJECT_ARRAY);
        }
        let entries = json::fields(text, element);
        let keys: Vec<String> = entries
            .iter()
            .map(|e| decode_key(text, e.key))
            .collect::<Option<_>>()
            .ok_or(gate::NOT_UNIFORM_OBJECT_ARRAY)?;
        let names = fields.get_or_insert_with(|| keys.clone());
        // Same keys in the same order: a reordered object would not round-trip byte-wise.
        if *names != keys || names.is_empty() {
            return Err(gate::NOT_UNIFORM_OBJECT_ARRAY);
        }
        let mut dedup = keys.clone();
        dedup.sort();
        dedup.dedup();
        if dedup.len() != keys.len() {
            return Err(gate::NOT_UNIFORM_OBJECT_ARRAY);
        }
        let row = entries
            .iter()
            .map(|e| cell(text, e.value))
            .collect::<Option<Vec<_>>>()
            .ok_or(gate::NESTED_VALUES)?;
        rows.push(row);
    }
    match fields {
        Some(fields) if rows.len() >= 2 => Ok(Table { fields, rows }),
        _ => Err(gate::NOT_UNIFORM_OBJECT_ARRAY),
    }
}

/// Whether a bare string would read back as itself.
fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s.trim() != s
        || matches!(s, "true" | "false" | "null")
        || s.starts_with('-')
        || looks_numeric(s)
        || s.chars().any(|c| {
            matches!(c, ',' | ':' | '"' | '\\' | '[' | ']' | '{' | '}' | '#') || c.is_control()
        })
}

fn looks_numeric(s: &str) -> bool {
    let body = s.strip_prefix('-').unwrap_or(s);
    !body.is_empty()
        && body
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
        && body
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
}

fn quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_field_name(name: &str, out: &mut String) {
    if needs_quotes(name) || name.contains(' ') {
        quote(name, out);
    } else {
        out.push_str(name);
    }
}

fn write_table(key: Option<&str>, table: &Table, indent: &str, out: &mut String) {
    out.push_str(indent);
    if let Some(key) = key {
        write_field_name(key, out);
    }
    out.push_str(&format!("[{}]{{", table.rows.len()));
    for (i, f) in table.fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_field_name(f, out);
    }
    out.push_str("}:");
    for row in &table.rows {
        out.push('\n');
        out.push_str(indent);
        out.push_str("  ");
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            match cell {
                Cell::Raw(raw) => out.push_str(raw),
                Cell::Str(s) if needs_quotes(s) => quote(s, out),
                Cell::Str(s) => out.push_str(s),
            }
        }
    }
}

/// TOON for a top-level uniform array, or an object of scalars plus one such array.
fn encode(text: &str) -> Result<String, Gate> {
    let root = json::parse_document(text).map_err(|_| gate::NOT_JSON)?;
    let mut out = String::with_capacity(text.len() / 2);
    match json::kind_of(text, root) {
        Kind::Array => write_table(None, &table(text, root)?, "", &mut out),
        Kind::Object => {
            let mut arrays = 0;
            for (i, entry) in json::entries(text, root).enumerate() {
                let key = decode_key(text, entry.key).ok_or(gate::NOT_JSON)?;
                if i > 0 {
                    out.push('\n');
                }
                match json::kind_of(text, entry.value) {
                    Kind::Array => {
                        arrays += 1;
                        write_table(Some(&key), &table(text, entry.value)?, "", &mut out);
                    }
                    Kind::Object => return Err(gate::NESTED_VALUES),
                    _ => {
                        write_field_name(&key, &mut out);
                        out.push_str(": ");
                        match cell(text, entry.value).ok_or(gate::NESTED_VALUES)? {
                            Cell::Raw(raw) => out.push_str(&raw),
                            Cell::Str(s) if needs_quotes(&s) => quote(&s, &mut out),
                            Cell::Str(s) => out.push_str(&s),
                        }
                    }
                }
            }
            if arrays != 1 {
                return Err(gate::NOT_UNIFORM_OBJECT_ARRAY);
            }
        }
        _ => return Err(gate::NOT_UNIFORM_OBJECT_ARRAY),
    }
    Ok(out)
}

/// Reads one cell or field name back: quoted strings unescaped, bare words as they stand.
fn read_token(s: &str) -> Option<(Cell, &str)> {
    if let Some(rest) = s.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => return Some((Cell::Str(value), &rest[i + 1..])),
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    'r' => value.push('\r'),
                    't' => value.push('\t'),
                    'u' => {
                        let hex: String = (0..4)
                            .filter_map(|_| chars.next().map(|(_, c)| c))
                            .collect();
                        value.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    other => value.push(other),
                },
                c => value.push(c),
            }
        }
        return None;
    }
    let end = s.find(',').unwrap_or(s.len());
    let bare = &s[..end];
    let cell = if matches!(bare, "true" | "false" | "null") || looks_numeric(bare) {
        Cell::Raw(bare.to_owned())
    } else {
        Cell::Str(bare.to_owned())
    };
    Some((cell, &s[end..]))
}

/// Reads a field name at the start of a line: quoted, or bare up to `:` or `[`.
fn read_key(line: &str) -> Option<(Cell, &str)> {
    if line.starts_with('"') {
        return read_token(line);
    }
    let end = line.find([':', '['])?;
    Some((Cell::Str(line[..end].to_owned()), &line[end..]))
}

fn read_row(line: &str) -> Option<Vec<Cell>> {
    let mut cells = Vec::new();
    let mut rest = line;
    loop {
        let (cell, after) = read_token(rest)?;
        cells.push(cell);
        match after.strip_prefix(',') {
            Some(next) => rest = next,
            None if after.is_empty() => return Some(cells),
            None => return None,
        }
    }
}

/// Decodes `encoded` and checks it against the JSON it came from, value for value.
fn decode_matches(encoded: &str, original: &str) -> Option<bool> {
    let root = json::parse_document(original).ok()?;
    // Per top-level item: its key, then the header's field names and the rows (a scalar field
    // is a single one-cell row).
    let flatten = |span: Span| -> Option<Vec<Vec<Cell>>> {
        let t = table(original, span).ok()?;
        let mut rows = vec![t.fields.iter().map(|f| Cell::Str(f.clone())).collect()];
        rows.extend(t.rows);
        Some(rows)
    };
    let mut expected: Vec<(Option<String>, Vec<Vec<Cell>>)> = Vec::new();
    if json::kind_of(original, root) == Kind::Array {
        expected.push((None, flatten(root)?));
    } else {
        for entry in json::entries(original, root) {
            let key = decode_key(original, entry.key)?;
            let rows = if json::kind_of(original, entry.value) == Kind::Array {
                flatten(entry.value)?
            } else {
                vec![vec![cell(original, entry.value)?]]
            };
            expected.push((Some(key), rows));
        }
    }
    let mut lines = encoded.lines();
    for (key, rows) in expected {
        let line = lines.next()?;
        let (name, rest) = match &key {
            Some(_) => {
                let (name, rest) = read_key(line)?;
                (Some(name), rest)
            }
            None => (None, line),
        };
        if let (Some(key), Some(Cell::Str(name))) = (&key, &name)
            && key != name
        {
            return Some(false);
        }
        if let Some(value) = rest.strip_prefix(": ") {
            if read_row(value)? != rows[0] {
                return Some(false);
            }
            continue;
        }
        let header = rest.strip_prefix(&format!("[{}]{{", rows.len() - 1))?;
        let fields = read_row(header.strip_suffix("}:")?)?;
        if fields != rows[0] {
            return Some(false);
        }
        for row in &rows[1..] {
            if read_row(lines.next()?.strip_prefix("  ")?)? != *row {
                return Some(false);
            }
        }
    }
    Some(lines.next().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::testing::{check, tool_messages};

    #[test]
    fn tables_a_uniform_array_and_keeps_null_apart_from_empty() {
        let json = r#"[{"id":1,"name":"Alice","email":null,"score":1.50},{"id":2,"name":"Bob","email":"","score":-3e2},{"id":3,"name":"null","email":"a,b","score":0}]"#;
        let out = encode(json).unwrap();
        assert_eq!(
            out,
            "[3]{id,name,email,score}:\n  1,Alice,null,1.50\n  2,Bob,\"\",-3e2\n  3,\"null\",\"a,b\",0"
        );
        assert_eq!(decode_matches(&out, json), Some(true));
        assert_eq!(
            decode_matches(&out.replace("\"\"", "null"), json),
            Some(false)
        );
    }

    #[test]
    fn handles_an_envelope_and_declines_nested_or_ragged_arrays() {
        let json = r#"{"total":2,"next":null,"rows":[{"flight":"HAT001","from":"JFK","seats":4},{"flight":"HAT002","from":"SFO","seats":0}]}"#;
        let out = encode(json).unwrap();
        assert_eq!(
            out,
            "total: 2\nnext: null\nrows[2]{flight,from,seats}:\n  HAT001,JFK,4\n  HAT002,SFO,0"
        );
        assert_eq!(decode_matches(&out, json), Some(true));
        assert_eq!(
            encode(r#"[{"a":1},{"b":2}]"#),
            Err(gate::NOT_UNIFORM_OBJECT_ARRAY)
        );
        assert_eq!(encode(r#"[{"a":[1]},{"a":[2]}]"#), Err(gate::NESTED_VALUES));
        assert_eq!(encode(r#"[1,2,3]"#), Err(gate::NOT_UNIFORM_OBJECT_ARRAY));
    }

    #[test]
    fn acts_on_realistic_api_output_and_is_inert_on_text() {
        let flights: Vec<String> = (0..12)
            .map(|i| {
                format!(
                    r#"{{"flight_number": "HAT{i:03}", "origin": "JFK", "destination": "SEA", "scheduled_departure_time_est": "0{}:00:00", "status": "available", "price": {}}}"#,
                    i % 10,
                    120 + i * 7
                )
            })
            .collect();
        let json = format!("[{}]", flights.join(", "));
        let out = check(
            "toon",
            "",
            tool_messages(&[&json, "plain text output of ls"]),
        );
        let after = &out.messages[1].content;
        assert!(after.starts_with(
            "[12]{flight_number,origin,destination,scheduled_departure_time_est,status,price}:"
        ));
        assert!(out.report.components[0].saved_tokens > 100);
        assert_eq!(out.messages[2], out.before[2]);
        assert_eq!(out.report.components[0].gates.get("not_json"), Some(&1));
    }
}
