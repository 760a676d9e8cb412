//! sluice's one strict YAML config: presets, the pipeline, per-component blocks, store and mode.
//!
//! ```yaml
//! preset: balanced                    # expands to a pipeline
//! pipeline: [format, dedup, collapse]  # an explicit list overrides the preset's
//! components:
//!   collapse: { max_tokens: 2000, head_lines: 20, tail_lines: 20 }
//! store: { ttl_seconds: 10000, max_entries: 5000 }
//! mode: sync
//! ```
//!
//! Keys and names are those of the system sluice replaces, so its users keep their files.
//! Unknown keys are rejected with their path and line, and validation reports every problem at
//! once: the top level is checked, then each `components.<name>` block is decoded by its own
//! component from the same document (so its errors carry real line numbers too).

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use crate::components;
use crate::pipeline::{Pipeline, Stage};
use crate::store::MemoryStoreLimits;

/// The config the `sluice` binary runs with when given no file.
pub const EMBEDDED_DEFAULT: &str = include_str!("../default.yaml");

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where: a key path such as `components.dedup` or `pipeline[2]`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

fn problem(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.into(),
        message: message.into(),
    }
}

/// `mode:` — what the proxy does with a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Compact the request and forward the result.
    #[default]
    Sync,
    /// Forward untouched; measure off-path what sync would have saved.
    Observe,
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "sync" => Ok(Mode::Sync),
            "observe" => Ok(Mode::Observe),
            other => Err(format!(
                "unknown mode `{other}` (expected `sync` or `observe`)"
            )),
        }
    }
}

/// `store:` — where originals and replay state live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Defaults to `true`. With `false` nothing is stashed, so every offloader stays inert.
    pub enabled: bool,
    /// Defaults to `10000`. Sliding: every read refreshes it.
    pub ttl_seconds: u64,
    /// Defaults to `5000`. Stashes and replay entries together; replay may use half.
    pub max_entries: usize,
    /// Defaults to `100`. Live session states kept before the least recently used is dropped.
    pub max_sessions: usize,
    /// Defaults to `256`. MiB of stashed originals; past it new stashes are refused, never evicted.
    pub rewind_reserve_mb: usize,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            enabled: true,
            ttl_seconds: 10_000,
            max_entries: 5000,
            max_sessions: 100,
            rewind_reserve_mb: 256,
        }
    }
}

impl StoreConfig {
    pub fn limits(&self) -> MemoryStoreLimits {
        MemoryStoreLimits {
            ttl: Duration::from_secs(self.ttl_seconds),
            max_entries: self.max_entries,
            reserve_bytes: self.rewind_reserve_mb.saturating_mul(1 << 20),
        }
    }
}

/// `observe:` — the off-path measurement pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObserveConfig {
    /// Defaults to `256`. Jobs waiting; past it new jobs are dropped and counted, never waited on.
    pub max_queue: usize,
    /// Defaults to `1`. Worker threads measuring off the request path.
    pub workers: usize,
}

impl Default for ObserveConfig {
    fn default() -> ObserveConfig {
        ObserveConfig {
            max_queue: 256,
            workers: 1,
        }
    }
}

/// `cache:` — prompt-cache policy. The reference's keepalive keys are accepted so its files
/// load, but keepalive pings are not implemented: setting one produces a warning, not silence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Amortized depth decisions on warm turns (off by default).
    pub amortize: AmortizeConfig,
    pub keepalive: bool,
    pub keepalive_idle_seconds: Option<u64>,
    pub keepalive_max_pings: Option<u64>,
    pub keepalive_min_prefix_tokens: Option<u64>,
    pub keepalive_max_usd_per_ping: Option<f64>,
    pub head_ttl_1h: bool,
    pub head_ttl_min_tokens: Option<u64>,
}

/// `cache.amortize:` — lets a rederivable offloader (mask) make new decisions inside the cached
/// prefix on a *warm* turn when that pays: the tokens it removes, read at the cache-read price on
/// every turn the session is expected to have left, outweigh writing the changed suffix once at
/// the cache-write price. Checked at most once every `every_turns` turns (a staircase), because
/// re-writing a little every turn is what made per-turn masking raise peers' bills.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AmortizeConfig {
    /// Defaults to `false`.
    pub enabled: bool,
    /// Defaults to `10`. Turns between two depth re-writes, at least.
    pub every_turns: u32,
    /// Defaults to `0`: as many turns as the session has had so far (a session that has run k
    /// turns is taken to run about k more), capped at 100.
    pub expected_turns: u32,
    /// Defaults to `0.1`. Price of a cache-read token relative to a fresh input token.
    pub read_price: f64,
    /// Defaults to `1.25`. Price of a cache-write token relative to a fresh input token.
    pub write_price: f64,
}

impl Default for AmortizeConfig {
    fn default() -> AmortizeConfig {
        AmortizeConfig {
            enabled: false,
            every_turns: 10,
            expected_turns: 0,
            read_price: 0.1,
            write_price: 1.25,
        }
    }
}

/// Declares the top-level document twice: strict (`RawConfig`, unknown keys are errors with
/// their line) and lenient (`LenientConfig`), used to keep validating the rest of a file after an
/// unknown top-level key so every problem is reported in one pass. (`flatten` would lose the line.)
macro_rules! top_level {
    ($($field:ident: $ty:ty,)*) => {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct RawConfig { $(#[serde(default)] $field: Option<$ty>,)* }

        #[derive(Debug, Deserialize)]
        struct LenientConfig { $(#[serde(default)] $field: Option<$ty>,)* }

        impl From<RawConfig> for LenientConfig {
            fn from(raw: RawConfig) -> LenientConfig {
                LenientConfig { $($field: raw.$field,)* }
            }
        }
    };
}

top_level! {
    preset: String,
    pipeline: Vec<String>,
    components: BTreeMap<String, IgnoredAny>,
    store: StoreConfig,
    mode: Mode,
    observe: ObserveConfig,
    cache: CacheConfig,
}

/// A preset: a named pipeline, plus tuned component blocks that apply unless the user's own
/// block for that component is present.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    pub name: &'static str,
    pub pipeline: &'static [&'static str],
    pub description: &'static str,
    /// A YAML document with a `components:` map, or "".
    pub tuned: &'static str,
}

/// Every preset, with the reference's names and orders (lossless repackers first, `linecap` last
/// among offloaders, `cachesplit` last of all).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "off",
        pipeline: &[],
        description: "forward everything untouched",
        tuned: "",
    },
    Preset {
        name: "safe",
        pipeline: &["format", "textclean", "searchfold", "cachesplit"],
        description: "lossless repacking only",
        tuned: "",
    },
    Preset {
        name: "balanced",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "linecap",
            "cachesplit",
        ],
        description: "lossless repacking plus safe, recoverable offloads",
        tuned: "",
    },
    Preset {
        name: "aggressive",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "smartcrush",
            "extract",
            "extract_llm",
            "linecap",
            "cachesplit",
        ],
        description: "balanced plus JSON-array crushing and query-aware extraction",
        tuned: "",
    },
    Preset {
        name: "coding",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "skeleton",
            "cmdfilter",
            "extract",
            "linecap",
            "cachesplit",
        ],
        description: "coding agents: code shape for older file reads, command filters, extraction",
        tuned: "",
    },
    Preset {
        name: "codesafe",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "extract",
            "collapse",
            "linecap",
            "cachesplit",
        ],
        description: "coding agents, deterministic only, with a collapse fallback",
        tuned: "components:\n  collapse: {max_tokens: 3000}\n",
    },
    Preset {
        name: "codesmart",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "extract_llm",
            "extract",
            "linecap",
            "cachesplit",
        ],
        description: "coding agents with a cheap-model extractor (the reference's default)",
        tuned: "components:\n  extract: {min_tokens: 400}\n  extract_llm: {strategy: code, model: {source: config}, min_tokens: 3000, trigger: {min_request_tokens: 3000}, llm_max_per_request: 4}\n",
    },
    Preset {
        name: "mcp",
        pipeline: &["format", "textclean", "smartcrush", "cachesplit"],
        description: "MCP/API JSON payloads",
        tuned: "",
    },
    Preset {
        name: "agent",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "mask",
            "extract",
            "extract_llm",
            "cachesplit",
        ],
        description: "long agentic sessions: age-based masking is the biggest lever",
        // The newest three outputs reach the model byte for byte: mask keeps them, and these
        // keep their hands off them too (the preset's promise, measured in docs/components.md).
        tuned: "components:\n  format: {keep_recent: 3}\n  textclean: {keep_recent: 3}\n  searchfold: {keep_recent: 3}\n  dedup: {keep_recent: 3}\n  failed_run: {keep_recent: 3}\n  extract: {keep_recent: 3}\n  extract_llm: {keep_recent: 3}\n",
    },
    Preset {
        name: "general",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "mask",
            "extract",
            "extract_llm",
            "collapse",
            "linecap",
            "cachesplit",
        ],
        description: "everything deterministic plus the cheap-model extractor",
        tuned: "",
    },
    Preset {
        name: "triage",
        pipeline: &[
            "stale_output",
            "repeated_call",
            "failed_call",
            "oversized_block",
            "stale_reasoning",
        ],
        description: "the five triage screeners, on every request (the spec's manual /triage)",
        tuned: "",
    },
    Preset {
        name: "summarize",
        pipeline: &["summarize"],
        description: "one LLM summary of the middle (runs alone)",
        tuned: "",
    },
    Preset {
        name: "agentdiet",
        pipeline: &["format", "agentdiet", "cachesplit"],
        description: "the reference's trajectory-diet experiment",
        tuned: "",
    },
];

pub fn find_preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// Where a component reads its `components.<name>` block from.
pub struct ComponentSource<'a> {
    name: &'a str,
    /// The YAML document holding a `components:` map with this component's block, if any.
    document: Option<&'a str>,
}

impl<'a> ComponentSource<'a> {
    /// A source with no block: the component's documented defaults.
    pub fn defaults(name: &'a str) -> ComponentSource<'a> {
        ComponentSource {
            name,
            document: None,
        }
    }

    /// Decodes the block strictly, or `None` when there is none.
    ///
    /// # Errors
    /// The decoder's message, with line and column.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<Option<T>, String> {
        let Some(document) = self.document else {
            return Ok(None);
        };
        let seed = OnlyComponent::<T> {
            name: self.name,
            wrapped: true,
            marker: PhantomData,
        };
        serde_saphyr::with_deserializer_from_str(document, |de| seed.deserialize(de))
            .map(Option::flatten)
            .map_err(|e| first_line(&e.to_string()))
    }
}

/// Decodes `components.<name>` from a whole document, ignoring every other key.
struct OnlyComponent<'a, T> {
    name: &'a str,
    /// True at the document level (looking for `components`), false inside it.
    wrapped: bool,
    marker: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for OnlyComponent<'_, T> {
    type Value = Option<Option<T>>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for OnlyComponent<'_, T> {
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
            if self.wrapped && key == "components" {
                let inner = OnlyComponent::<T> {
                    name: self.name,
                    wrapped: false,
                    marker: PhantomData,
                };
                found = map.next_value_seed(inner)?;
            } else if !self.wrapped && key == self.name {
                // `name:` with no value means "defaults", like an empty block.
                found = Some(map.next_value::<Option<T>>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// serde-saphyr follows its message with a source snippet; the first line is the message.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or(text).trim();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

/// A validated config, ready to build pipelines from.
#[derive(Debug, Clone)]
pub struct Config {
    source: String,
    pub preset: Option<String>,
    pub pipeline: Vec<String>,
    pub store: StoreConfig,
    pub mode: Mode,
    pub observe: ObserveConfig,
    pub cache: CacheConfig,
    /// Accepted settings that have no effect in this build, said out loud.
    pub warnings: Vec<String>,
}

impl Config {
    /// The embedded default.
    pub fn embedded() -> Config {
        Config::parse(EMBEDDED_DEFAULT).expect("the embedded default config is valid")
    }

    /// A config that is just `preset: NAME`.
    ///
    /// # Errors
    /// When the preset is unknown or names a component this build does not have.
    pub fn from_preset(name: &str) -> Result<Config, Vec<ConfigError>> {
        Config::parse(&format!("preset: {name}\n"))
    }

    /// Parses and fully validates a config: every component is built once to check its block.
    ///
    /// # Errors
    /// Every problem found, each with its key path.
    pub fn parse(text: &str) -> Result<Config, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let raw: LenientConfig = match serde_saphyr::from_str::<RawConfig>(text) {
            Ok(raw) => raw.into(),
            Err(strict) => {
                errors.push(problem("config", first_line(&strict.to_string())));
                match serde_saphyr::from_str::<LenientConfig>(text) {
                    Ok(raw) => raw,
                    Err(_) => return Err(errors),
                }
            }
        };
        let preset = match raw.preset.as_deref() {
            Some(name) => match find_preset(name) {
                Some(p) => Some(p),
                None => {
                    let known: Vec<_> = PRESETS.iter().map(|p| p.name).collect();
                    errors.push(problem(
                        "preset",
                        format!("unknown preset `{name}` (known: {})", known.join(", ")),
                    ));
                    None
                }
            },
            None => None,
        };
        let pipeline: Vec<String> = match (&raw.pipeline, preset) {
            (Some(list), _) => list.clone(),
            (None, Some(p)) => p.pipeline.iter().map(|s| (*s).to_owned()).collect(),
            (None, None) => Vec::new(),
        };
        let mut seen = std::collections::HashSet::new();
        for (i, name) in pipeline.iter().enumerate() {
            if !seen.insert(name.as_str()) {
                errors.push(problem(
                    format!("pipeline[{i}]"),
                    format!("component `{name}` is listed twice"),
                ));
            }
            if let Err(message) = check_name(name) {
                let path = if raw.pipeline.is_some() {
                    format!("pipeline[{i}]")
                } else {
                    format!("preset `{}`", preset.map_or("", |p| p.name))
                };
                errors.push(problem(path, message));
            }
        }
        for name in raw.components.iter().flat_map(BTreeMap::keys) {
            if let Err(message) = check_name(name) {
                errors.push(problem(format!("components.{name}"), message));
            }
        }
        let config = Config {
            source: text.to_owned(),
            preset: preset.map(|p| p.name.to_owned()),
            pipeline,
            store: raw.store.unwrap_or_default(),
            mode: raw.mode.unwrap_or_default(),
            observe: raw.observe.unwrap_or_default(),
            cache: raw.cache.unwrap_or_default(),
            warnings: Vec::new(),
        };
        if config.observe.workers == 0 {
            errors.push(problem("observe.workers", "must be at least 1"));
        }
        let amortize = config.cache.amortize;
        if !(amortize.read_price >= 0.0 && amortize.write_price >= amortize.read_price) {
            errors.push(problem(
                "cache.amortize",
                "prices must satisfy 0 <= read_price <= write_price",
            ));
        }
        if config.store.max_entries < 2 {
            errors.push(problem("store.max_entries", "must be at least 2"));
        }
        // Build every registered component that has a block or is in the pipeline, so a bad
        // block is reported even when the component is not used.
        let mut to_check: Vec<&str> = config.pipeline.iter().map(String::as_str).collect();
        to_check.extend(
            raw.components
                .iter()
                .flat_map(BTreeMap::keys)
                .map(String::as_str),
        );
        to_check.sort_unstable();
        to_check.dedup();
        for name in to_check {
            if let Some(factory) = components::find(name)
                && let Err(message) = factory.build(&config.source_for(name))
            {
                errors.push(problem(format!("components.{name}"), message));
            }
        }
        let mut config = config;
        if config.cache.keepalive {
            config.warnings.push("cache.keepalive is accepted for compatibility but not implemented: no pings are sent".into());
        }
        for name in components::llm_offload::WITHOUT_MODEL {
            if config.pipeline.iter().any(|p| p == name) {
                config.warnings.push(format!(
                    "{name} needs a model client, and this build has no model: it does nothing (gate no_model)"
                ));
            }
        }
        if config.cache.head_ttl_1h {
            config
                .warnings
                .push("cache.head_ttl_1h is accepted for compatibility but not implemented".into());
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }

    /// Where `name` reads its block: the user's document when it has `components.<name>`,
    /// otherwise the preset's tuned block, otherwise defaults.
    fn source_for<'a>(&'a self, name: &'a str) -> ComponentSource<'a> {
        let user_has_block = ComponentSource {
            name,
            document: Some(&self.source),
        }
        .decode::<IgnoredAny>()
        .is_ok_and(|found| found.is_some());
        if user_has_block {
            return ComponentSource {
                name,
                document: Some(&self.source),
            };
        }
        let tuned = self
            .preset
            .as_deref()
            .and_then(find_preset)
            .map(|p| p.tuned)
            .filter(|t| !t.is_empty());
        match tuned {
            Some(tuned) => ComponentSource {
                name,
                document: Some(tuned),
            },
            None => ComponentSource::defaults(name),
        }
    }

    /// Builds the pipeline this config describes.
    ///
    /// # Errors
    /// Only if the config changed meaning since `parse`, which it cannot; kept as a `Result` so a
    /// caller never has to unwrap on the request path.
    pub fn build_pipeline(&self) -> Result<Pipeline, Vec<ConfigError>> {
        self.build_named(&self.pipeline)
    }

    /// Builds a pipeline of the given component names with this config's blocks.
    ///
    /// # Errors
    /// Unknown, unbuilt or misconfigured components.
    pub fn build_named(&self, names: &[String]) -> Result<Pipeline, Vec<ConfigError>> {
        let mut stages: Vec<Stage> = Vec::new();
        let mut errors = Vec::new();
        for (i, name) in names.iter().enumerate() {
            match check_name(name) {
                Err(message) => errors.push(problem(format!("pipeline[{i}]"), message)),
                Ok(factory) => match factory.build(&self.source_for(name)) {
                    Ok(stage) => stages.push(stage),
                    Err(message) => errors.push(problem(format!("components.{name}"), message)),
                },
            }
        }
        if errors.is_empty() {
            Ok(Pipeline::new(stages))
        } else {
            Err(errors)
        }
    }
}

fn check_name(name: &str) -> Result<&'static dyn components::ComponentFactory, String> {
    if let Some(factory) = components::find(name) {
        return Ok(factory);
    }
    if components::PLANNED.contains(&name) {
        return Err(format!(
            "component `{name}` is part of the spec but not built in this version of sluice yet; remove it or pick a preset whose components are all built (`sluice presets`)"
        ));
    }
    let built: Vec<_> = components::ALL.iter().map(|f| f.name()).collect();
    Err(format!(
        "unknown component `{name}` (built: {})",
        built.join(", ")
    ))
}

/// Whether every component of a preset is built in this version.
pub fn preset_is_available(preset: &Preset) -> bool {
    preset
        .pipeline
        .iter()
        .all(|name| components::find(name).is_some())
}

#[cfg(test)]
mod tests;
