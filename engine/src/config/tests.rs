//! Config tests: strictness, every problem at once, presets, and unbuilt components.

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
    assert!(errors("mode: async")[0].contains("async"));
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
    // codesafe is not buildable yet, so test the mechanism through source_for directly.
    let config = Config {
        preset: Some("codesafe".into()),
        ..Config::embedded()
    };
    let tuned: Option<crate::components::collapse::CollapseConfig> =
        config.source_for("collapse").decode().unwrap();
    assert_eq!(tuned.unwrap().max_tokens, 3000);
}

#[test]
fn keepalive_is_accepted_with_a_warning() {
    let config = Config::parse("pipeline: []\ncache:\n  keepalive: true\n").unwrap();
    assert_eq!(config.warnings.len(), 1);
}
