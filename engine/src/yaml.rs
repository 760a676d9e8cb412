//! Reading one YAML config document: its outline (every key with its line, every duplicate),
//! one value at a key path at a time, and the YAML library's errors as plain sentences.
//!
//! Values are decoded one top-level key at a time so that a bad value (`mode: fast`) does not
//! hide the problems in the others: serde stops at the first error of a document.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_saphyr::{DuplicateKeyPolicy, Error, MessageFormatter, SnippetMode, Spanned};

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// Where: a key path such as `components.dedup` or `pipeline[2]`.
    pub path: String,
    pub message: String,
}

pub(crate) fn problem(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.into(),
        message: message.into(),
    }
}

/// A key written in a document, and where.
#[derive(Debug, Clone)]
pub(crate) struct KeyAt {
    /// `store`, `components.dedup.min_tokens`, `pipeline[1].x`.
    pub path: String,
    pub top_level: bool,
    pub line: u64,
    pub column: u64,
}

impl KeyAt {
    /// ` at line L, column C`, the way the YAML library words its locations.
    pub fn suffix(&self) -> String {
        format!(" at line {}, column {}", self.line, self.column)
    }
}

/// Every key of a document in document order, and the duplicates among them.
#[derive(Debug, Default)]
pub(crate) struct Outline {
    pub keys: Vec<KeyAt>,
    pub duplicates: Vec<ConfigError>,
}

impl Outline {
    /// Reads the shape of a document (an empty one, or only comments, has no keys).
    ///
    /// # Errors
    /// The one problem that stops reading: not YAML, or not a mapping.
    pub fn read(text: &str) -> Result<Outline, ConfigError> {
        let mut outline = Outline::default();
        // Duplicates are passed through to the walker, which names every one of them; the
        // library would stop at the first with a message about its own options.
        let options = serde_saphyr::options! { duplicate_keys: DuplicateKeyPolicy::PassThrough };
        serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
            de::Deserializer::deserialize_any(de, Document(&mut outline))
        })
        .map_err(|e| problem("config", plain(&e)))?;
        Ok(outline)
    }

    pub fn top_level(&self) -> impl Iterator<Item = &KeyAt> {
        self.keys.iter().filter(|k| k.top_level)
    }

    pub fn writes(&self, top_level_key: &str) -> bool {
        self.top_level().any(|k| k.path == top_level_key)
    }

    /// ` at line L, column C` where `path` is written, or "" when it is not.
    pub fn at(&self, path: &str) -> String {
        self.keys
            .iter()
            .find(|k| k.path == path)
            .map_or_else(String::new, KeyAt::suffix)
    }

    /// The key under `root` an error at `(line, column)` belongs to: the last one written at or
    /// before it (a value follows its key), else `root` itself.
    pub fn path_at(&self, root: &str, line: u64, column: u64) -> String {
        let under = |p: &str| {
            p == root
                || p.strip_prefix(root)
                    .is_some_and(|rest| rest.starts_with(['.', '[']))
        };
        self.keys
            .iter()
            .rev()
            .find(|k| under(&k.path) && (k.line, k.column) <= (line, column))
            .map_or_else(|| root.to_owned(), |k| k.path.clone())
    }
}

/// The top level: a mapping, or nothing at all.
struct Document<'a>(&'a mut Outline);

impl<'de> Visitor<'de> for Document<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping of settings such as `mode: sync`")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        walk_map(map, "", self.0)
    }
}

fn walk_map<'de, A: MapAccess<'de>>(
    mut map: A,
    prefix: &str,
    outline: &mut Outline,
) -> Result<(), A::Error> {
    let mut seen = HashSet::new();
    while let Some(key) = map.next_key::<Spanned<String>>()? {
        let path = if prefix.is_empty() {
            key.value.clone()
        } else {
            format!("{prefix}.{}", key.value)
        };
        let at = KeyAt {
            path: path.clone(),
            top_level: prefix.is_empty(),
            line: key.referenced.line(),
            column: key.referenced.column(),
        };
        if !seen.insert(key.value.clone()) {
            let message = format!("duplicate key `{}`{}", key.value, at.suffix());
            outline.duplicates.push(problem(&path, message));
        }
        outline.keys.push(at);
        map.next_value_seed(Walk {
            path,
            outline: &mut *outline,
        })?;
    }
    Ok(())
}

/// Any value below the top level: mappings and lists are walked, scalars skipped.
struct Walk<'a> {
    path: String,
    outline: &'a mut Outline,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Visitor methods that accept a scalar and do nothing with it.
macro_rules! skip_scalars {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method<E: de::Error>(self, _: $ty) -> Result<(), E> { Ok(()) })*
    };
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    skip_scalars!(visit_bool: bool, visit_i64: i64, visit_i128: i128, visit_u64: u64,
        visit_u128: u128, visit_f64: f64, visit_char: char, visit_str: &str, visit_bytes: &[u8]);

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        walk_map(map, &self.path, self.outline)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        for i in 0.. {
            let item = Walk {
                path: format!("{}[{i}]", self.path),
                outline: &mut *self.outline,
            };
            if seq.next_element_seed(item)?.is_none() {
                break;
            }
        }
        Ok(())
    }
}

/// Decodes the value at a key path (`["mode"]`, `["components", "dedup"]`) and skips every
/// other key. `None`: the path is not written; `Some(None)`: written with no value.
///
/// # Errors
/// The decoder's error, for `plain`.
pub(crate) fn decode_at<T: DeserializeOwned>(
    text: &str,
    path: &[&str],
) -> Result<Option<Option<T>>, Error> {
    // Duplicates are reported once, by `Outline::read`; here the last one is used.
    let options = serde_saphyr::options! { duplicate_keys: DuplicateKeyPolicy::LastWins };
    let seed = OnlyAt::<T> {
        path,
        marker: PhantomData,
    };
    serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| seed.deserialize(de))
}

struct OnlyAt<'a, T> {
    path: &'a [&'a str],
    marker: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for OnlyAt<'_, T> {
    type Value = Option<Option<T>>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for OnlyAt<'_, T> {
    type Value = Option<Option<T>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            match self.path {
                [only] if key == *only => found = Some(map.next_value::<Option<T>>()?),
                [first, rest @ ..] if key == *first => {
                    found = map.next_value_seed(OnlyAt::<T> {
                        path: rest,
                        marker: PhantomData,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// The error as one plain sentence with its line: no snippet, and none of the library's advice
/// about its own API (its duplicate-key message says to "set DuplicateKeyPolicy in Options").
pub(crate) fn plain(err: &Error) -> String {
    err.render_with_options(serde_saphyr::render_options! {
        formatter: &Plain,
        snippets: SnippetMode::Off,
    })
}

/// Words the errors a config file commonly has; the rest get the library's user-facing wording.
struct Plain;

impl MessageFormatter for Plain {
    fn format_message<'a>(&self, err: &'a Error) -> Cow<'a, str> {
        let text = match err {
            Error::DuplicateMappingKey { key: Some(k), .. } => format!("duplicate key `{k}`"),
            Error::DuplicateMappingKey { key: None, .. } => "duplicate key".to_owned(),
            Error::SerdeUnknownField {
                field, expected, ..
            } => format!("unknown key `{field}` (expected {})", one_of(expected)),
            Error::SerdeUnknownVariant {
                variant, expected, ..
            } => format!("unknown value `{variant}` (expected {})", one_of(expected)),
            Error::SerdeMissingField { field, .. } => format!("missing key `{field}`"),
            Error::Unexpected { expected, .. } => format!("expected {}", shape(expected)),
            Error::InvalidScalar { ty, .. } => format!("expected {}", scalar(ty)),
            Error::SerdeInvalidType {
                unexpected,
                expected,
                ..
            }
            | Error::SerdeInvalidValue {
                unexpected,
                expected,
                ..
            } => format!("expected {}, found {unexpected}", shape(expected)),
            Error::ExternallyTaggedEnumExpectedScalarOrMapping { .. } => {
                "expected a single value".to_owned()
            }
            other => return serde_saphyr::UserMessageFormatter.format_message(other),
        };
        Cow::Owned(text)
    }
}

/// "`a` or `b`", "one of `a`, `b`, `c`".
pub(crate) fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [] => "nothing here".to_owned(),
        [one] => one.clone(),
        [a, b] => format!("{a} or {b}"),
        all => format!("one of {}", all.join(", ")),
    }
}

/// What the library expected, in YAML's words rather than Rust's or the parser's.
fn shape(expected: &str) -> Cow<'_, str> {
    match expected {
        "mapping start" | "a mapping" => Cow::Borrowed("a mapping (`key: value`)"),
        "sequence start" | "a sequence" => Cow::Borrowed("a list (`[a, b]`)"),
        "string scalar" | "a string" => Cow::Borrowed("a string"),
        e if e.starts_with("struct ") => Cow::Borrowed("a mapping (`key: value`)"),
        e => Cow::Borrowed(e),
    }
}

/// What a scalar of the library's type `ty` must be; whole numbers with their range, since an
/// out-of-range number fails the same way as a word does.
fn scalar(ty: &str) -> Cow<'static, str> {
    let whole = |min: i128, max: u128| Cow::Owned(format!("a whole number from {min} to {max}"));
    match ty {
        "boolean" | "bool" => Cow::Borrowed("`true` or `false`"),
        "floating point" | "f64" | "f32" => Cow::Borrowed("a number"),
        "u8" => whole(0, u8::MAX.into()),
        "u16" => whole(0, u16::MAX.into()),
        "u32" => whole(0, u32::MAX.into()),
        "u64" => whole(0, u64::MAX.into()),
        "i8" => whole(i8::MIN.into(), i8::MAX.unsigned_abs().into()),
        "i16" => whole(i16::MIN.into(), i16::MAX.unsigned_abs().into()),
        "i32" => whole(i32::MIN.into(), i32::MAX.unsigned_abs().into()),
        "i64" => whole(i64::MIN.into(), i64::MAX.unsigned_abs().into()),
        t if t.starts_with(['u', 'i']) => Cow::Borrowed("a whole number in range"),
        _ => Cow::Borrowed("a different kind of value"),
    }
}
