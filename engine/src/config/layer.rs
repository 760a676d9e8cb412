//! One document of the layering ([`Layer`]): its top-level values decoded one key at a time, so
//! one bad value does not hide the others, and where its component blocks are.

use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, IgnoredAny};

use super::presets::{Preset, find_preset, known_presets, unknown_preset};
use super::{CacheConfig, CountTokens, ExperimentConfig, KEYS, Mode, ObserveConfig, StoreConfig};
use crate::yaml::{self as read, ConfigError, Outline, problem};

/// Whether a document has a `components.<name>` key, with or without a value.
pub(super) fn has_block(document: &str, name: &str) -> bool {
    read::decode_at::<IgnoredAny>(document, &["components", name]).is_ok_and(|f| f.is_some())
}

/// One document of the layering, as component blocks are looked up in it.
#[derive(Debug, Clone)]
pub(super) struct Source {
    pub(super) text: String,
    /// The components with a `components.<name>` key in `text`.
    pub(super) blocks: Vec<String>,
    /// The tuned blocks of the preset whose pipeline is in effect, if `text` chose it; or "".
    pub(super) tuned: &'static str,
}

/// How a document chooses the pipeline: `preset:`, `pipeline:` or both (the list wins).
#[derive(Debug)]
pub(super) struct Choice {
    pub(super) preset: Option<&'static Preset>,
    pub(super) list: Option<Vec<String>>,
}

/// What one document writes, before layering; `None` leaves a key to the document below.
#[derive(Debug)]
pub(super) struct Layer {
    pub(super) source: Source,
    pub(super) choice: Option<Choice>,
    pub(super) store: Option<StoreConfig>,
    pub(super) mode: Option<Mode>,
    pub(super) observe: Option<ObserveConfig>,
    pub(super) cache: Option<CacheConfig>,
    pub(super) count_tokens: Option<CountTokens>,
    pub(super) tools: Option<crate::tools::ToolRules>,
    pub(super) experiment: Option<ExperimentConfig>,
    pub(super) outline: Outline,
}

impl Layer {
    /// Reads one document, adding every problem to `errors`; `None` when it is not a YAML
    /// mapping at all (the one problem is then in `errors`).
    pub(super) fn read(text: &str, errors: &mut Vec<ConfigError>) -> Option<Layer> {
        let outline = Outline::read(text).map_err(|e| errors.push(e)).ok()?;
        errors.extend(outline.duplicates.iter().cloned());
        errors.extend(unknown_keys(&outline));
        let mut values = Values {
            text,
            outline: &outline,
            errors,
        };
        let choice = values.choice();
        let blocks: Option<BTreeMap<String, IgnoredAny>> = values.get("components");
        let (store, mode) = (values.get("store"), values.get("mode"));
        let (observe, cache) = (values.get("observe"), values.get("cache"));
        let count_tokens = values.get("count_tokens");
        let tools = values.get("tools");
        let experiment = values.get("experiment");
        let source = Source {
            text: text.to_owned(),
            blocks: blocks.map(|b| b.into_keys().collect()).unwrap_or_default(),
            tuned: "",
        };
        Some(Layer {
            source,
            choice,
            store,
            mode,
            observe,
            cache,
            count_tokens,
            tools,
            experiment,
            outline,
        })
    }
}

fn unknown_keys(outline: &Outline) -> impl Iterator<Item = ConfigError> + '_ {
    outline
        .top_level()
        .filter(|k| !KEYS.contains(&k.path.as_str()))
        .map(|k| {
            let expected = read::one_of(KEYS);
            let message = format!(
                "unknown key `{}` (expected {expected}){}",
                k.path,
                k.suffix()
            );
            problem(&k.path, message)
        })
}

/// Decodes a document's top-level values one key at a time, so one bad value does not hide the
/// problems of the others, and collects those problems with their key paths.
pub(super) struct Values<'a> {
    pub(super) text: &'a str,
    pub(super) outline: &'a Outline,
    errors: &'a mut Vec<ConfigError>,
}

impl Values<'_> {
    /// `None` when `key` is not written, or its value is invalid (the problem is recorded).
    /// Written with no value (`store:`) means the type's defaults, as an empty block does.
    fn get<T: DeserializeOwned + Default>(&mut self, key: &str) -> Option<T> {
        if !self.outline.writes(key) {
            return None;
        }
        match read::decode_at::<T>(self.text, &[key]) {
            Ok(found) => Some(found.flatten().unwrap_or_default()),
            Err(e) => {
                let path = e.location().map_or_else(
                    || key.to_owned(),
                    |at| self.outline.path_at(key, at.line(), at.column()),
                );
                self.errors.push(problem(path, read::plain(&e)));
                None
            }
        }
    }

    /// The document's pipeline choice, when it writes `preset:` or `pipeline:`.
    fn choice(&mut self) -> Option<Choice> {
        if !self.outline.writes("preset") && !self.outline.writes("pipeline") {
            return None;
        }
        let preset = match self.get::<Option<String>>("preset") {
            Some(Some(name)) => self.preset(&name),
            // `preset:` with no name would silently mean an empty pipeline.
            Some(None) => {
                let at = self.outline.at("preset");
                self.refuse_preset(format!(
                    "needs a preset name{at}; known: {}",
                    known_presets()
                ))
            }
            None => None,
        };
        Some(Choice {
            preset,
            list: self.get("pipeline"),
        })
    }

    fn preset(&mut self, name: &str) -> Option<&'static Preset> {
        find_preset(name).or_else(|| {
            let at = self.outline.at("preset");
            self.refuse_preset(unknown_preset(name, &at))
        })
    }

    fn refuse_preset(&mut self, message: String) -> Option<&'static Preset> {
        self.errors.push(problem("preset", message));
        None
    }
}
