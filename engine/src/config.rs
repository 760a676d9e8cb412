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
//!
//! A file is layered on the embedded default (`default.yaml`): a top-level key the file does not
//! write keeps the default's value, so a file of only `mode: observe` still has the default
//! pipeline, and an empty file is the default. See [`Config::parse`] for the exact rule.
//!
//! Unknown keys are rejected with their path and line, and validation reports every problem at
//! once: each top-level value is decoded on its own (a bad `mode:` does not hide a bad `store:`),
//! then each `components.<name>` block is decoded by its own component from the same document
//! (so its errors carry real line numbers too). Messages are plain sentences, never the YAML
//! library's advice about its own options.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::components::{self, BuildError, ComponentSource};
use crate::pipeline::{Pipeline, Stage};
use crate::store::MemoryStoreLimits;

use crate::yaml::Outline;

mod experiment;
mod keepalive;
mod layer;
mod presets;

pub use experiment::{Arm, ExperimentConfig};
pub use keepalive::KeepAlive;
use layer::{Layer, Source, has_block};
pub use presets::{
    PRESETS, Preset, find_preset, known_presets, listed_presets, preset_is_available,
    preset_is_listed, unknown_preset,
};

/// The config the `sluice` binary runs with when given no file, and the layer under every file.
pub const EMBEDDED_DEFAULT: &str = include_str!("../default.yaml");

/// One problem in a config file (its home is `yaml`, which finds most of them).
pub use crate::yaml::ConfigError;
use crate::yaml::problem;

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

impl Mode {
    /// The name as written in YAML and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Observe => "observe",
        }
    }
}

/// `count_tokens:` — what `POST /anthropic/v1/messages/count_tokens` counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CountTokens {
    /// The request as the agent sent it (the provider's answer, untouched).
    #[default]
    Original,
    /// The request as sluice would forward it, so an agent's context accounting sees the
    /// savings (a one-off rewrite: no session history, no tracker).
    Compacted,
}

/// As written in YAML (`sync`), never the Rust name (`Sync`).
impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `mode` that is neither `sync` nor `observe` (on the command line or in the environment).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode `{0}` (expected `sync` or `observe`)")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for Mode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Mode, UnknownMode> {
        [Mode::Sync, Mode::Observe]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownMode(s.to_owned()))
    }
}

/// `store:` — where originals and replay state live.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Defaults to `true`. With `false` nothing is stashed, so every offloader stays inert.
    pub enabled: bool,
    /// Defaults to none: `sluice serve` keeps state in SQLite under the user's state directory.
    /// `memory`, `sqlite:PATH`, `redis://HOST:PORT/DB` or
    /// `redis+sentinel://HOST:PORT,.../PRIMARY/DB`; `--store` and `SLUICE_STORE` win.
    pub backend: Option<String>,
    /// Defaults to `10000`. Sliding: every read refreshes it.
    pub ttl_seconds: u64,
    /// Defaults to `5000`. Stashes and replay entries together; replay may use half (`memory`).
    pub max_entries: usize,
    /// Defaults to `100`. Live session states kept before the least recently used is dropped.
    pub max_sessions: usize,
    /// Defaults to `256`. MiB of stashed originals; past it new stashes are refused, never
    /// evicted (`memory`). With SQLite or Redis: MiB of sessions copied in memory.
    pub rewind_reserve_mb: usize,
    /// Defaults to `2000`. Stashes one session may hold; past it its new stashes are refused,
    /// so one session cannot take the room every other session needs.
    pub session_max_stashes: usize,
    /// Defaults to `64`. MiB of originals one session may hold, likewise.
    pub session_max_mb: usize,
    /// Defaults to `500`. Milliseconds a turn waits for another replica's lease on its session
    /// before it goes upstream unmodified.
    pub lease_wait_ms: u64,
    /// Defaults to `60`. Seconds after the backend last confirmed a session that this replica
    /// keeps serving it from memory while the backend does not answer (an outage, a Redis
    /// failover); its writes are held and written when the backend answers.
    pub outage_grace_seconds: u64,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            enabled: true,
            backend: None,
            ttl_seconds: 10_000,
            max_entries: 5000,
            max_sessions: 100,
            rewind_reserve_mb: 256,
            session_max_stashes: 2000,
            session_max_mb: 64,
            lease_wait_ms: 500,
            outage_grace_seconds: 60,
        }
    }
}

impl StoreConfig {
    pub fn limits(&self) -> MemoryStoreLimits {
        MemoryStoreLimits {
            ttl: Duration::from_secs(self.ttl_seconds),
            max_entries: self.max_entries,
            reserve_bytes: self.rewind_reserve_mb.saturating_mul(1 << 20),
            session_max_stashes: self.session_max_stashes,
            session_max_bytes: self.session_max_mb.saturating_mul(1 << 20),
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

/// `cache:` — prompt-cache policy: amortized re-writes, and the keep-alive (`keepalive*`, the
/// reference's keys; `keepalive.rs`). `head_ttl_*` are accepted so the reference's files load,
/// but not implemented: setting one produces a warning, not silence.
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

/// The top-level keys of a config file.
pub(crate) const KEYS: &[&str] = &[
    "preset",
    "pipeline",
    "components",
    "store",
    "mode",
    "observe",
    "cache",
    "count_tokens",
    "tools",
    "experiment",
];

/// A validated config, ready to build pipelines from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where component blocks are looked up, the user's document first.
    sources: Vec<Source>,
    /// Whether `pipeline` is an explicit `pipeline:` list (else a preset's, or empty).
    listed: bool,
    pub preset: Option<String>,
    pub pipeline: Vec<String>,
    pub store: StoreConfig,
    pub mode: Mode,
    pub observe: ObserveConfig,
    pub cache: CacheConfig,
    pub count_tokens: CountTokens,
    /// `tools:` — which components may cut which tool's outputs.
    pub tools: crate::tools::ToolRules,
    /// `experiment:` — the A/B split of sessions, off by default.
    pub experiment: ExperimentConfig,
    /// Accepted settings that have no effect (in this build, or beside another setting that
    /// wins), said out loud.
    pub warnings: Vec<String>,
}

impl Config {
    /// The embedded default, alone.
    pub fn embedded() -> Config {
        Config::read_layered(EMBEDDED_DEFAULT, &[]).expect("the embedded default config is valid")
    }

    /// A config that is just `preset: NAME`, layered on the embedded default.
    ///
    /// The name is written as a quoted scalar: it can come from a request (`?preset=` on
    /// `POST /compact`), and pasted bare, a name with a line break would add keys of its own.
    ///
    /// An unknown name is refused before any document is made: its problem names the preset
    /// and the known ones, with no line or column (the document is ours, not the caller's).
    ///
    /// # Errors
    /// When the preset is unknown or names a component this build does not have.
    pub fn from_preset(name: &str) -> Result<Config, Vec<ConfigError>> {
        if find_preset(name).is_none() {
            return Err(vec![problem("preset", unknown_preset(name, ""))]);
        }
        Config::parse(&format!(
            "preset: {}\n",
            crate::wire::json::to_literal(name)
        ))
    }

    /// Parses a config file layered on the embedded default, and fully validates it (every
    /// component is built once to check its block).
    ///
    /// Layering: `mode`, `store`, `observe` and `cache` come whole from the file when it writes
    /// them (even with no value: then their defaults), else from the embedded default. So does
    /// the pipeline: a file that writes `preset:` or `pipeline:` (even `[]`) chooses its own,
    /// and one that writes neither keeps the default's. Each `components.<name>` block is looked
    /// up in the file, then in the tuned blocks of the file's preset, then in the embedded
    /// default. An empty file, or one of only comments, is the embedded default.
    ///
    /// # Errors
    /// Every problem found, each with its key path (and line, where the file has one).
    pub fn parse(text: &str) -> Result<Config, Vec<ConfigError>> {
        Config::read_layered(text, &[EMBEDDED_DEFAULT])
    }

    /// `text` layered on the documents `below` (highest first), validated. Only the problems
    /// of `text` are reported: the documents below are sluice's own, valid by test.
    fn read_layered(text: &str, below: &[&str]) -> Result<Config, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let Some(top) = Layer::read(text, &mut errors) else {
            return Err(errors);
        };
        let mut layers = vec![top];
        layers.extend(below.iter().filter_map(|t| Layer::read(t, &mut Vec::new())));
        Config::layered(&layers).validated(&layers[0].outline, errors)
    }

    /// The layers (highest first) as one config, not yet validated.
    fn layered(layers: &[Layer]) -> Config {
        let chosen = layers.iter().position(|l| l.choice.is_some());
        let choice = chosen.and_then(|i| layers[i].choice.as_ref());
        let preset = choice.and_then(|c| c.preset);
        let pipeline = match (choice.and_then(|c| c.list.as_ref()), preset) {
            (Some(list), _) => list.clone(),
            (None, Some(p)) => p.pipeline.iter().map(|s| (*s).to_owned()).collect(),
            (None, None) => Vec::new(),
        };
        let mut sources: Vec<Source> = layers.iter().map(|l| l.source.clone()).collect();
        if let (Some(i), Some(p)) = (chosen, preset) {
            sources[i].tuned = p.tuned;
        }
        Config {
            sources,
            listed: choice.is_some_and(|c| c.list.is_some()),
            preset: preset.map(|p| p.name.to_owned()),
            pipeline,
            store: layers
                .iter()
                .find_map(|l| l.store.clone())
                .unwrap_or_default(),
            mode: layers.iter().find_map(|l| l.mode).unwrap_or_default(),
            observe: layers.iter().find_map(|l| l.observe).unwrap_or_default(),
            cache: layers.iter().find_map(|l| l.cache).unwrap_or_default(),
            count_tokens: layers
                .iter()
                .find_map(|l| l.count_tokens)
                .unwrap_or_default(),
            tools: layers
                .iter()
                .find_map(|l| l.tools.clone())
                .unwrap_or_default(),
            experiment: layers
                .iter()
                .find_map(|l| l.experiment.clone())
                .unwrap_or_default(),
            warnings: Vec::new(),
        }
    }

    /// Adds the problems of the layered whole to `errors` (lines from `outline`, the user's
    /// document), and the warnings; the config when there are no problems at all.
    fn validated(
        mut self,
        outline: &Outline,
        mut errors: Vec<ConfigError>,
    ) -> Result<Config, Vec<ConfigError>> {
        self.check_pipeline(outline, &mut errors);
        self.check_values(outline, &mut errors);
        self.check_components(&mut errors);
        self.warnings = self.warnings();
        if errors.is_empty() {
            Ok(self)
        } else {
            Err(errors)
        }
    }

    fn check_pipeline(&self, outline: &Outline, errors: &mut Vec<ConfigError>) {
        let mut seen = std::collections::HashSet::new();
        for (i, name) in self.pipeline.iter().enumerate() {
            if !seen.insert(name.as_str()) {
                errors.push(problem(
                    format!("pipeline[{i}]"),
                    format!("component `{name}` is listed twice"),
                ));
            }
            if let Err(error) = check_name(name) {
                let path = if self.listed {
                    format!("pipeline[{i}]")
                } else {
                    format!("preset `{}`", self.preset.as_deref().unwrap_or(""))
                };
                errors.push(problem(path, error.to_string()));
            }
        }
        for name in self.block_names() {
            if let Err(error) = check_name(name) {
                let path = format!("components.{name}");
                let at = outline.at(&path);
                errors.push(problem(path, format!("{error}{at}")));
            }
        }
    }

    fn check_values(&self, outline: &Outline, errors: &mut Vec<ConfigError>) {
        let mut check = |ok: bool, path: &str, message: &str| {
            if !ok {
                errors.push(problem(path, format!("{message}{}", outline.at(path))));
            }
        };
        check(
            self.observe.workers > 0,
            "observe.workers",
            "must be at least 1",
        );
        let amortize = self.cache.amortize;
        check(
            amortize.read_price >= 0.0 && amortize.write_price >= amortize.read_price,
            "cache.amortize",
            "prices must satisfy 0 <= read_price <= write_price",
        );
        check(
            self.store.max_entries >= 2,
            "store.max_entries",
            "must be at least 2",
        );
        for (path, message) in self.experiment.problems() {
            check(false, path, message);
        }
        for (path, message) in self.cache.keepalive_problems() {
            check(false, path, message);
        }
        check(
            !(self.experiment.running() && self.mode == Mode::Observe),
            "experiment",
            "an experiment splits sessions between sync and forwarding untouched: it needs `mode: sync`",
        );
        for (path, name) in self.tools.named_components() {
            if let Err(error) = check_name(name) {
                errors.push(problem(&path, format!("{error}{}", outline.at(&path))));
            }
        }
    }

    /// Builds every registered component that has a block or is in the pipeline, so a bad
    /// block is reported even when the component is not used.
    fn check_components(&self, errors: &mut Vec<ConfigError>) {
        let mut to_check: Vec<&str> = self.pipeline.iter().map(String::as_str).collect();
        to_check.extend(self.block_names());
        to_check.sort_unstable();
        to_check.dedup();
        for name in to_check {
            if let Some(factory) = components::find(name)
                && let Err(error) = factory.build(&self.source_for(name))
            {
                errors.push(problem(format!("components.{name}"), error.to_string()));
            }
        }
    }

    /// Every component name with a block in some layer, once each.
    fn block_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .sources
            .iter()
            .flat_map(|s| s.blocks.iter().map(String::as_str))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        warnings.extend(self.preset_and_list());
        for name in components::llm_offload::WITHOUT_MODEL {
            if self.pipeline.iter().any(|p| p == name) {
                warnings.push(format!(
                    "{name} needs a model client, and this build has no model: it does nothing (gate no_model)"
                ));
            }
        }
        if self.cache.keepalive && self.experiment.running() {
            warnings.push("cache.keepalive is off while an experiment runs: a ping would be billed to no arm, and the turns it kept to the treatment's".into());
        }
        if self.cache.head_ttl_1h {
            warnings
                .push("cache.head_ttl_1h is accepted for compatibility but not implemented".into());
        }
        warnings.extend(self.delta_placement());
        warnings
    }

    /// A document that writes both `preset:` and `pipeline:` runs the list (the rule is
    /// `layer::Choice`'s): the preset's pipeline is unused, its tuned blocks still apply.
    fn preset_and_list(&self) -> Option<String> {
        let preset = self.preset.as_deref().filter(|_| self.listed)?;
        let tuned = find_preset(preset).is_some_and(|p| !p.tuned.is_empty());
        let blocks = if tuned {
            "; its tuned component settings still apply where the file has no block of its own"
        } else {
            ""
        };
        Some(format!(
            "both `preset: {preset}` and `pipeline:` are set: the `pipeline:` list wins, and the preset's pipeline is not used{blocks}"
        ))
    }

    /// `delta` diffs an output against an earlier one it expects the model to see whole; an
    /// offloader after it can cut that earlier output. Allowed (the marker still has the way
    /// back) but worth a warning: every preset puts `delta` last.
    fn delta_placement(&self) -> Option<String> {
        let at = self.pipeline.iter().position(|p| p == "delta")?;
        let cutters: Vec<&str> = self.pipeline[at + 1..]
            .iter()
            .map(String::as_str)
            .filter(|name| {
                components::find(name)
                    .and_then(|f| f.build(&self.source_for(name)).ok())
                    .is_some_and(|built| matches!(built, crate::pipeline::Component::Offload(_)))
            })
            .collect();
        (!cutters.is_empty()).then(|| {
            format!(
                "delta runs before {}, which can cut the earlier output a diff points into; put delta after them",
                cutters.join(", ")
            )
        })
    }

    /// Where `name` reads its block: the first layer with `components.<name>`, where a layer
    /// that chose a preset is followed by that preset's tuned blocks; otherwise defaults.
    fn source_for<'a>(&'a self, name: &'a str) -> ComponentSource<'a> {
        for source in &self.sources {
            if source.blocks.iter().any(|b| b == name) {
                return ComponentSource::in_document(name, &source.text);
            }
            if !source.tuned.is_empty() && has_block(source.tuned, name) {
                return ComponentSource::in_document(name, source.tuned);
            }
        }
        ComponentSource::defaults(name)
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
                Err(error) => errors.push(problem(format!("pipeline[{i}]"), error.to_string())),
                Ok(factory) => match factory.stage(&self.source_for(name)) {
                    Ok(stage) => stages.push(stage),
                    Err(error) => {
                        errors.push(problem(format!("components.{name}"), error.to_string()));
                    }
                },
            }
        }
        if errors.is_empty() {
            Ok(Pipeline::new(stages).with_tool_rules(self.tools.clone()))
        } else {
            Err(errors)
        }
    }
}

fn check_name(name: &str) -> Result<&'static components::ComponentFactory, BuildError> {
    if let Some(factory) = components::find(name) {
        return Ok(factory);
    }
    if components::PLANNED.contains(&name) {
        return Err(BuildError::NotBuilt(name.to_owned()));
    }
    Err(BuildError::Unknown(name.to_owned()))
}

#[cfg(test)]
mod tests;
