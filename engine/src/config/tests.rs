//! Config tests: strictness, every problem at once, layering on the embedded default, presets,
//! and unbuilt components.

use super::*;

fn errors(text: &str) -> Vec<String> {
    Config::parse(text)
        .unwrap_err()
        .into_iter()
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn embedded_default_is_valid_and_builds() {
    let config = Config::embedded();
    assert_eq!(config.mode, Mode::Sync);
    assert!(!config.build_pipeline().unwrap().is_empty());
}

#[test]
fn explicit_pipeline_overrides_the_preset() {
    let config = Config::parse("preset: off\npipeline: [dedup, format]\n").unwrap();
    assert_eq!(
        config.build_pipeline().unwrap().names(),
        ["dedup", "format"]
    );
    // Said out loud: `config check` prints it, `serve` logs it.
    assert_eq!(
        config.warnings,
        [
            "both `preset: off` and `pipeline:` are set: the `pipeline:` list wins, and the preset's pipeline is not used"
        ]
    );
    let tuned = Config::parse("preset: agent\npipeline: [format, extract]\n").unwrap();
    assert!(
        tuned.warnings[0].contains("tuned component settings still apply"),
        "{:?}",
        tuned.warnings
    );
    assert!(Config::parse("preset: off\n").unwrap().warnings.is_empty());
    assert!(
        Config::parse("preset: off")
            .unwrap()
            .build_pipeline()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_misspelled_component_key_names_the_key_and_line() {
    let errs = errors("pipeline: [dedup]\ncomponents:\n  dedup:\n    min_tokenz: 5\n");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].starts_with("components.dedup:"), "{errs:?}");
    assert!(
        errs[0].contains("min_tokenz") && errs[0].contains("line 4"),
        "{errs:?}"
    );
}

#[test]
fn unknown_top_level_key_is_rejected_with_its_line() {
    let errs = errors("pipeline: [dedup]\nstoer:\n  ttl_seconds: 1\n");
    assert!(
        errs[0].contains("stoer") && errs[0].contains("line 2"),
        "{errs:?}"
    );
    let errs = errors("store:\n  ttl_secs: 1\n");
    assert!(errs[0].contains("ttl_secs"), "{errs:?}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let errs = errors(
        "pipeline: [format, dedupe, readlifecycle]\ncomponents:\n  format: {min_tokens: -1}\n  collapse: {head_lines: 1, nope: 2}\n",
    );
    assert_eq!(errs.len(), 4, "{errs:?}");
    assert!(
        errs.iter()
            .any(|e| e.contains("pipeline[1]") && e.contains("unknown component `dedupe`"))
    );
    assert!(
        errs.iter()
            .any(|e| e.contains("pipeline[2]") && e.contains("not built in this version"))
    );
    assert!(errs.iter().any(|e| e.starts_with("components.format")));
    assert!(
        errs.iter()
            .any(|e| e.starts_with("components.collapse") && e.contains("nope"))
    );
}

#[test]
fn unknown_preset_and_mode_are_rejected() {
    assert!(errors("preset: balanc")[0].contains("unknown preset `balanc`"));
    // In a file: where it is, and the preset it is likely a typo of.
    let in_file = &errors("mode: sync\npreset: balancd\n")[0];
    assert!(
        in_file
            .starts_with("preset: unknown preset `balancd` (did you mean `balanced`?) at line 2")
            && in_file.ends_with(&format!("; known: {}", known_presets())),
        "{in_file}"
    );
    // From a flag, a variable or `?preset=`: no line, no column.
    let errs = Config::from_preset("balancd").unwrap_err();
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0]
            .message
            .starts_with("unknown preset `balancd` (did you mean `balanced`?); known: off, "),
        "{errs:?}"
    );
    assert!(!errs[0].message.contains("line"), "{errs:?}");
    assert!(errors("mode: async")[0].contains("async"));
}

#[test]
fn a_preset_name_cannot_add_keys() {
    // `?preset=` on `POST /compact` reaches this with whatever the caller sent.
    let errs = Config::from_preset("agent\ncache: {amortize: {enabled: true}}").unwrap_err();
    assert!(errs[0].message.contains("unknown preset"), "{errs:?}");
    assert!(!Config::from_preset("agent").unwrap().cache.amortize.enabled);
}

#[test]
fn presets_with_unbuilt_components_fail_clearly() {
    for preset in PRESETS {
        let result = Config::from_preset(preset.name);
        if preset_is_available(preset) {
            result.unwrap().build_pipeline().unwrap();
        } else {
            let errs = result.unwrap_err();
            assert!(
                errs.iter()
                    .all(|e| e.message.contains("not built in this version")),
                "{errs:?}"
            );
        }
    }
}

#[test]
fn a_component_block_without_values_means_defaults() {
    let config = Config::parse("pipeline: [collapse]\ncomponents:\n  collapse:\n").unwrap();
    assert_eq!(config.build_pipeline().unwrap().names(), ["collapse"]);
}

#[test]
fn preset_tuned_blocks_apply_without_a_user_block() {
    // codesafe is not buildable yet, so test the mechanism on the unvalidated layering.
    let tuned_collapse = |text: &str| {
        let layers = [Layer::read(text, &mut Vec::new()).unwrap()];
        let config = Config::layered(&layers);
        let block: Option<crate::components::collapse::CollapseConfig> =
            config.source_for("collapse").decode().unwrap();
        block.map(|b| b.max_tokens)
    };
    assert_eq!(tuned_collapse("preset: codesafe\n"), Some(3000));
    assert_eq!(
        tuned_collapse("preset: codesafe\ncomponents:\n  collapse: {max_tokens: 10}\n"),
        Some(10),
        "the file's own block beats the preset's"
    );
}

#[test]
fn delta_before_an_offloader_is_accepted_with_a_warning() {
    let early = Config::parse("pipeline: [format, delta, collapse, cachesplit]\n").unwrap();
    assert_eq!(
        early.warnings,
        [
            "delta runs before collapse, which can cut the earlier output a diff points into; put delta after them"
        ]
    );
    let last = Config::parse("pipeline: [format, collapse, delta, cachesplit]\n").unwrap();
    assert!(last.warnings.is_empty(), "{:?}", last.warnings);
}

#[test]
fn keepalive_has_the_references_defaults_and_refuses_a_late_ping() {
    let config = Config::parse("pipeline: []\ncache:\n  keepalive: true\n").unwrap();
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    let keepalive = config.cache.keepalive().unwrap();
    assert_eq!(keepalive.idle, std::time::Duration::from_secs(280));
    assert_eq!(
        (
            keepalive.max_pings,
            keepalive.min_prefix_tokens,
            keepalive.max_usd_per_ping
        ),
        (2, 20_000, 0.25)
    );
    assert_eq!(
        Config::parse("pipeline: []\n").unwrap().cache.keepalive(),
        None
    );
    // A running experiment turns it off, and says so.
    let both =
        "pipeline: [collapse]\ncache: { keepalive: true }\nexperiment: { control_share: 0.5 }\n";
    let warnings = Config::parse(both).unwrap().warnings;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("keepalive is off while an experiment runs")),
        "{warnings:?}"
    );
    for (yaml, key) in [
        (
            "keepalive_idle_seconds: 300",
            "cache.keepalive_idle_seconds",
        ),
        ("keepalive_idle_seconds: 0", "cache.keepalive_idle_seconds"),
        ("keepalive_max_pings: 0", "cache.keepalive_max_pings"),
        (
            "keepalive_max_usd_per_ping: -1",
            "cache.keepalive_max_usd_per_ping",
        ),
    ] {
        let errors = Config::parse(&format!(
            "pipeline: []\ncache:\n  keepalive: true\n  {yaml}\n"
        ))
        .unwrap_err();
        assert!(
            errors.iter().any(|e| e.to_string().contains(key)),
            "{yaml}: {errors:?}"
        );
    }
}

/// What a config resolves to, for comparing two of them.
fn resolved(config: &Config) -> String {
    format!(
        "{:?} {:?} {} {:?} {:?} {:?} {:?}",
        config.preset,
        config.pipeline,
        config.mode,
        config.store,
        config.observe,
        config.cache,
        config.experiment
    )
}

#[test]
fn a_file_without_a_pipeline_keeps_the_embedded_default_one() {
    let embedded = Config::embedded();
    assert!(!embedded.pipeline.is_empty());
    let config = Config::parse("mode: observe\n").unwrap();
    assert_eq!(config.mode, Mode::Observe);
    assert_eq!(config.pipeline, embedded.pipeline);
    let config = Config::parse("store: {ttl_seconds: 60}\n").unwrap();
    assert_eq!(config.store.ttl_seconds, 60);
    assert_eq!(config.pipeline, embedded.pipeline);
    assert_eq!(config.mode, embedded.mode);
}

#[test]
fn an_empty_file_is_the_embedded_default() {
    let embedded = resolved(&Config::embedded());
    for text in ["", "\n", "# nothing but a comment\n", "---\n"] {
        assert_eq!(
            resolved(&Config::parse(text).unwrap()),
            embedded,
            "{text:?}"
        );
    }
}

#[test]
fn a_file_that_writes_the_pipeline_uses_its_own_even_empty() {
    for text in ["pipeline: []\n", "pipeline:\n", "preset: off\n"] {
        let config = Config::parse(text).unwrap();
        assert!(config.pipeline.is_empty(), "{text:?}");
        assert!(config.build_pipeline().unwrap().is_empty(), "{text:?}");
    }
    let config = Config::parse("preset: safe\n").unwrap();
    assert_eq!(config.pipeline, find_preset("safe").unwrap().pipeline);
}

#[test]
fn component_blocks_are_layered_one_by_one() {
    let base = "pipeline: [collapse]\ncomponents:\n  collapse: {max_tokens: 1234}\n";
    let collapse_tokens = |text: &str| {
        let config = Config::read_layered(text, &[base]).unwrap();
        let block: Option<crate::components::collapse::CollapseConfig> =
            config.source_for("collapse").decode().unwrap();
        block.map(|b| b.max_tokens)
    };
    assert_eq!(collapse_tokens("mode: observe\n"), Some(1234));
    assert_eq!(
        collapse_tokens("components:\n  dedup: {min_tokens: 5}\n"),
        Some(1234),
        "a block for another component leaves this one to the default"
    );
    assert_eq!(
        collapse_tokens("components:\n  collapse: {}\n"),
        Some(crate::components::collapse::CollapseConfig::default().max_tokens),
        "the file's own (empty) block wins: the component's defaults"
    );
}

#[test]
fn top_level_value_errors_do_not_hide_the_others() {
    let errs = errors("mode: fast\npipeline: [format, nope]\nstoer: 1\n");
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(
        errs.iter().any(|e| e.starts_with("mode: ")
            && e.contains("unknown value `fast` (expected `sync` or `observe`)")
            && e.contains("line 1")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.starts_with("pipeline[1]: ") && e.contains("unknown component `nope`")),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e.starts_with("stoer: ")
            && e.contains("unknown key `stoer`")
            && e.contains("line 3")),
        "{errs:?}"
    );
}

#[test]
fn every_top_level_value_is_checked_with_its_key_path_and_line() {
    let errs = errors(
        "mode: [sync]\nstore:\n  ttl_seconds: soon\nobserve: {workers: 0}\ncache: {amortize: {enabled: maybe}}\ncomponents:\n  dedup: {min_tokenz: 1}\n",
    );
    let expect = [
        ("mode: ", "line 1"),
        ("store.ttl_seconds: ", "line 3"),
        ("observe.workers: ", "line 4"),
        ("cache.amortize.enabled: ", "line 5"),
        ("components.dedup: ", "line 7"),
    ];
    assert_eq!(errs.len(), expect.len(), "{errs:?}");
    for (path, line) in expect {
        assert!(
            errs.iter().any(|e| e.starts_with(path) && e.contains(line)),
            "{path} {line}: {errs:?}"
        );
    }
}

#[test]
fn a_duplicate_key_is_a_plain_sentence_with_its_path_and_line() {
    let errs = errors("mode: sync\npipeline: [dedup]\nmode: observe\n");
    assert_eq!(errs, ["mode: duplicate key `mode` at line 3, column 1"]);
    let errs =
        errors("pipeline: [dedup]\ncomponents:\n  dedup:\n    min_tokens: 1\n    min_tokens: 2\n");
    assert_eq!(
        errs,
        ["components.dedup.min_tokens: duplicate key `min_tokens` at line 5, column 5"],
        "reported once, by the outline, not again by the component"
    );
    for err in errs {
        assert!(
            !err.contains("DuplicateKeyPolicy") && !err.contains("Options"),
            "{err}"
        );
    }
}

#[test]
fn a_document_that_is_not_a_mapping_is_one_plain_problem() {
    for (text, needle) in [
        ("mode: [sync\n", "line 1"),
        ("a: 1\n---\nb: 2\n", "line 3"),
        ("- format\n- dedup\n", "expected a mapping of settings"),
        ("just words\n", "expected a mapping of settings"),
    ] {
        let errs = errors(text);
        assert_eq!(errs.len(), 1, "{text:?}: {errs:?}");
        assert!(
            errs[0].starts_with("config: ") && errs[0].contains(needle),
            "{errs:?}"
        );
        assert_eq!(errs[0].lines().count(), 1, "no snippet: {errs:?}");
        assert!(!errs[0].contains("from_str"), "no API advice: {errs:?}");
    }
}

#[test]
fn a_preset_key_without_a_name_is_an_error_not_an_empty_pipeline() {
    let errs = errors("preset:\n");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("preset: needs a preset name"),
        "{errs:?}"
    );
}

#[test]
fn modes_print_as_written_in_yaml() {
    assert_eq!(Mode::Sync.to_string(), "sync");
    assert_eq!(Mode::Observe.to_string(), "observe");
    assert_eq!("observe".parse::<Mode>(), Ok(Mode::Observe));
    assert!("Observe".parse::<Mode>().is_err());
}

#[test]
fn component_build_errors_keep_their_words() {
    for (text, expected) in [
        (
            "pipeline: [collapse]\ncomponents:\n  collapse: { max_frac: 1.5 }\n",
            "components.collapse: max_frac must be between 0 and 1, got 1.5",
        ),
        (
            "pipeline: [linecap]\ncomponents:\n  linecap: { max_line_chars: 10 }\n",
            "components.linecap: max_line_chars must be 0 (off) or at least 30, got 10",
        ),
        (
            "pipeline: [oversized_block]\ncomponents:\n  oversized_block: { cap_chars: 100, head_chars: 60, tail_chars: 60 }\n",
            "components.oversized_block: head_chars + tail_chars must be under cap_chars",
        ),
        (
            "pipeline: [phi_evict]\ncomponents:\n  phi_evict: { weights: { relevance: -1, recency: 1, cost: 1, redundancy: 1 } }\n",
            "components.phi_evict: weights must be finite and not negative",
        ),
        (
            "pipeline: [stale_output]\ncomponents:\n  stale_output: { budget: { soft_ratio: 0.9, hard_ratio: 0.5 } }\n",
            "components.stale_output: budget ratios must satisfy 0 < soft_ratio <= hard_ratio <= 1",
        ),
    ] {
        assert_eq!(errors(text), [expected], "{text:?}");
    }
    let unknown = errors("pipeline: [nope]\n");
    assert!(
        unknown[0]
            .starts_with("pipeline[0]: unknown component `nope` (built: cacheinject, cachesplit, "),
        "{unknown:?}"
    );
    let unclosed = String::from("(");
    let pattern = crate::components::BuildError::Pattern {
        error: regex::Regex::new(&unclosed).unwrap_err(),
        pattern: unclosed,
    };
    assert!(
        pattern
            .to_string()
            .starts_with("exempt.file_patterns `(`: regex parse error"),
        "{pattern}"
    );
    assert_eq!(
        "Observe".parse::<Mode>().unwrap_err().to_string(),
        "unknown mode `Observe` (expected `sync` or `observe`)"
    );
}

#[test]
fn tool_rules_are_read_and_checked() {
    let config = Config::parse(
        "tools:\n  exclude: [read_secret]\n  rules:\n    \"pytest*\": {components: [collapse, linecap]}\n",
    )
    .unwrap();
    assert_eq!(config.tools.exclude, ["read_secret"]);
    assert_eq!(
        config.tools.rules["pytest*"].components,
        ["collapse", "linecap"]
    );
    assert_eq!(
        config.build_pipeline().unwrap().tool_rules(),
        &config.tools,
        "the pipeline enforces what the file says"
    );
    let errors =
        Config::parse("tools:\n  rules:\n    Bash: {components: [colapse]}\n").unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.to_string().contains("tools.rules.Bash.components[0]")
                && e.to_string().contains("colapse")),
        "{errors:?}"
    );
    let errors = Config::parse("tools:\n  excludes: [x]\n").unwrap_err();
    assert!(errors[0].to_string().contains("excludes"), "{errors:?}");
    // The embedded default leaves a sub-agent's report whole; a file's own `tools:` replaces it.
    let embedded = Config::embedded();
    assert_eq!(embedded.tools.exclude, ["Task", "Agent"]);
    assert_eq!(
        embedded
            .build_pipeline()
            .unwrap()
            .tool_rules()
            .applies(Some("Agent")),
        crate::tools::Applies::Excluded("Agent")
    );
    let own = Config::parse("tools:\n  exclude: [read_secret]\n").unwrap();
    assert_eq!(own.tools.exclude, ["read_secret"]);
}

/// `experiment:` layers like the other blocks, and a split in observe mode, a share outside
/// (0, 1) or an empty name is refused with its key path.
#[test]
fn an_experiment_is_read_and_checked() {
    let config = Config::parse("experiment: { control_share: 0.25, name: trial-2 }\n").unwrap();
    assert!(config.experiment.running());
    assert_eq!(config.experiment.control_share, Some(0.25));
    assert_eq!(config.experiment.idle_seconds, 1800);
    assert!(!Config::embedded().experiment.enabled());
    for (text, path) in [
        (
            "mode: observe\nexperiment: { control_share: 0.5 }\n",
            "experiment",
        ),
        (
            "experiment: { control_share: 1.0 }\n",
            "experiment.control_share",
        ),
        (
            "experiment: { control_share: 0.5, name: \"\" }\n",
            "experiment.name",
        ),
        (
            "experiment: { idle_seconds: 0 }\n",
            "experiment.idle_seconds",
        ),
    ] {
        let errors = Config::parse(text).unwrap_err();
        assert!(
            errors.iter().any(|e| e.to_string().starts_with(path)),
            "{text}: {errors:?}"
        );
    }
    // Ended with a winner: no split, no records, every session in the winner's arm.
    let ended = Config::parse("experiment: { control_share: 0.5, winner: treatment }\n").unwrap();
    assert!(!ended.experiment.running() && ended.experiment.enabled());
}
