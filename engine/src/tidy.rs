//! Tidy tests, in the spirit of rust-analyzer's: the component registry against the files that
//! implement components, and the docs against the registry and the presets, so neither can
//! drift from the code without a failing test.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::components::{ALL, PLANNED};
use crate::config::PRESETS;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Files under `engine/src/components/` that hold shared machinery, not a component, and the
/// component each multi-component file holds instead of its stem.
const HELPERS: [&str; 7] = [
    "failure",
    "mod",
    "memo",
    "projection",
    "source",
    "testing",
    "triage",
];
const RENAMED: [(&str, &str); 1] = [("llm_offload", "agentdiet")];

#[test]
fn the_registry_has_one_factory_per_component_file() {
    let dir = repo().join("engine/src/components");
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let path = e.ok()?.path();
            (path.extension()? == "rs").then(|| path.file_stem()?.to_str().map(str::to_owned))?
        })
        .filter(|stem| !HELPERS.contains(&stem.as_str()))
        .map(|stem| {
            RENAMED
                .iter()
                .find(|(file, _)| *file == stem)
                .map_or(stem.clone(), |(_, name)| (*name).to_owned())
        })
        .collect();
    let registered: BTreeSet<String> = ALL.iter().map(|f| f.name().to_owned()).collect();
    assert_eq!(
        files, registered,
        "engine/src/components/*.rs and components::ALL disagree (see docs/components.md, 'Adding a component')"
    );
    let names: Vec<&str> = ALL.iter().map(|f| f.name()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "components::ALL is kept alphabetical");
}

/// The rows of the Markdown table that follows `heading`: each row's first cell, unquoted.
fn first_cells(doc: &str, heading: &str) -> Vec<String> {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("no `{heading}` section"));
    doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .filter_map(|l| l.split('|').nth(1))
        .map(|cell| cell.trim().trim_matches('`').to_owned())
        .collect()
}

#[test]
fn docs_list_every_component_once_and_no_other() {
    let doc = read("docs/components.md");
    let documented = first_cells(&doc, "## Built in this version");
    let registered: Vec<String> = ALL.iter().map(|f| f.name().to_owned()).collect();
    let (mut a, mut b) = (documented.clone(), registered.clone());
    a.sort();
    b.sort();
    assert_eq!(
        a, b,
        "docs/components.md's component table against components::ALL"
    );
    for planned in PLANNED {
        assert!(
            doc.contains(&format!("`{planned}`")),
            "planned `{planned}` is not mentioned"
        );
    }
    assert!(
        doc.contains("## Adding a component"),
        "the step-by-step guide is missing"
    );
}

#[test]
fn docs_measure_every_preset() {
    let doc = read("docs/components.md");
    let documented: BTreeSet<String> = first_cells(&doc, "### Per preset").into_iter().collect();
    let presets: BTreeSet<String> = PRESETS.iter().map(|p| p.name.to_owned()).collect();
    assert_eq!(
        documented, presets,
        "docs/components.md's preset table against config::PRESETS"
    );
}

#[test]
fn the_code_map_counts_lines_as_they_are() {
    let map = read("docs/ARCHITECTURE.md");
    let section = map
        .split("## Code map")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/ARCHITECTURE.md has a code map");
    let mut rows = 0;
    for line in section.lines() {
        // `| `path` | lines | what |`
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(path), Some(count)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let (Some(path), Ok(count)) = (
            path.strip_prefix('`').and_then(|p| p.strip_suffix('`')),
            count.parse::<usize>(),
        ) else {
            continue;
        };
        let actual = read(path).lines().count();
        assert_eq!(count, actual, "docs/ARCHITECTURE.md's code map: {path}");
        rows += 1;
    }
    assert!(rows >= 5, "{rows} rows read from the code map");
}

#[test]
fn the_configuration_doc_shows_every_top_level_config_key() {
    let doc = read("docs/configuration.md");
    // Each key as a config file writes it, at the start of a line of the example file.
    for key in crate::config::KEYS {
        assert!(
            doc.lines().any(|line| line.starts_with(&format!("{key}:"))),
            "docs/configuration.md does not show `{key}:`"
        );
    }
    // The README names each one and sends the reader there.
    let readme = read("README.md");
    for key in crate::config::KEYS {
        assert!(
            readme.contains(&format!("`{key}`")),
            "README.md does not name `{key}`"
        );
    }
}

/// A component that says it does not restructure must not: the host checks `tools:` rules only
/// for those that say they do. (Its name is its factory's: a stage carries it, a component has
/// none of its own.)
#[test]
fn no_component_restructures_without_saying_so() {
    use crate::components::ComponentSource;
    use crate::pipeline::{Component, RunCx};
    let clock = std::sync::Arc::new(crate::clock::ManualClock::new());
    let store = std::sync::Arc::new(crate::store::MemoryStore::new(
        crate::store::MemoryStoreLimits::DEFAULT,
        clock.clone(),
    ));
    let cx = RunCx::new(crate::wire::Dialect::Anthropic, "s", store, clock);
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    for factory in ALL {
        let stage = factory
            .stage(&ComponentSource::defaults(factory.name()))
            .unwrap_or_else(|e| panic!("{}: {e}", factory.name()));
        assert_eq!(stage.name(), factory.name());
        if let Component::Offload(offload) = stage.component()
            && !offload.restructures()
        {
            assert!(
                offload.restructure(body, &cx).is_none(),
                "{} restructures without saying so",
                factory.name()
            );
        }
    }
}
