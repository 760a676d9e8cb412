//! The component table of `docs/components.md` against the code: every key a component's
//! strict config accepts is documented in its row, and every default the row states builds and
//! behaves, on real corpus bodies, exactly as the component with no block at all.

use std::collections::BTreeMap;
use std::sync::Arc;

use engine::apply::apply_body;
use engine::clock::ManualClock;
use engine::components::{ALL, ComponentSource};
use engine::pipeline::{Pipeline, RunCx};
use engine::store::{MemoryStore, MemoryStoreLimits};
use engine::wire::Dialect;
use integration_tests::bodies;

/// Keys every offloader accepts, documented once above the table.
const COMMON: [&str; 1] = ["marker_mode"];

fn doc() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/components.md");
    std::fs::read_to_string(path).unwrap()
}

/// Each component's row of the "Built in this version" table: its config cell.
fn config_cells(doc: &str) -> BTreeMap<String, String> {
    let start = doc.find("## Built in this version").unwrap();
    doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            Some((
                cells.get(1)?.trim_matches('`').to_owned(),
                (*cells.get(4)?).to_owned(),
            ))
        })
        .collect()
}

/// The keys a component's config accepts, read off its own strictness: an unknown key's error
/// lists the expected ones.
fn accepted_keys(name: &str) -> Vec<String> {
    let factory = engine::components::find(name).unwrap();
    let probe = format!("components:\n  {name}: {{zz_tidy_probe: 1}}\n");
    let Err(err) = factory.build(&ComponentSource::in_document(name, &probe)) else {
        panic!("{name} accepted an unknown key");
    };
    let message = err.to_string();
    let Some((_, expected)) = message.split_once("expected") else {
        return Vec::new(); // a component with no keys at all
    };
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_accepted_key_is_documented_in_its_row() {
    let doc = doc();
    let cells = config_cells(&doc);
    assert!(
        doc.contains("`marker_mode` is accepted"),
        "the common keys' sentence is gone"
    );
    let mut missing = Vec::new();
    for factory in ALL {
        let name = factory.name();
        let cell = cells
            .get(name)
            .unwrap_or_else(|| panic!("no row for {name}"));
        for key in accepted_keys(name) {
            let also = format!("`{name}` also accepts");
            let documented = cell.contains(&format!("`{key}`"))
                || COMMON.contains(&key.as_str())
                || doc
                    .split("\n\n")
                    .any(|p| p.contains(&also) && p.contains(&format!("`{key}`")));
            if !documented {
                missing.push(format!("{name}.{key}"));
            }
        }
    }
    assert!(missing.is_empty(), "undocumented config keys: {missing:?}");
}

/// `key` (value) pairs of a config cell whose value is a plain number or boolean.
fn stated_defaults(cell: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for piece in cell.split("`, `").chain(cell.split(", `")) {
        let piece = piece.trim_start_matches('`');
        let Some((key, rest)) = piece.split_once("` (") else {
            continue;
        };
        let value: String = rest
            .chars()
            .take_while(|c| !matches!(c, ')' | ',' | ';' | ':' | ' '))
            .collect();
        let plain = value.parse::<f64>().is_ok() || value == "true" || value == "false";
        if plain && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            out.push((key.to_owned(), value));
        }
    }
    out.sort();
    out.dedup();
    out
}

fn run(pipeline: &Pipeline, body: &[u8], dialect: Dialect) -> Vec<u8> {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone()));
    let cx = RunCx::new(dialect, "docs", store, clock);
    apply_body(body, pipeline, &cx).body.into_owned()
}

#[test]
fn every_stated_default_is_the_real_one() {
    let doc = doc();
    let cells = config_cells(&doc);
    let corpus: Vec<_> = bodies()
        .into_iter()
        .filter(|b| b.path.to_string_lossy().contains("/public/"))
        .take(6)
        .collect();
    let mut checked = 0;
    for factory in ALL {
        let name = factory.name();
        let plain = Pipeline::new(vec![
            factory.stage(&ComponentSource::defaults(name)).unwrap(),
        ]);
        for (key, value) in stated_defaults(&cells[name]) {
            let yaml = format!("components:\n  {name}: {{{key}: {value}}}\n");
            let stated = factory
                .stage(&ComponentSource::in_document(name, &yaml))
                .unwrap_or_else(|e| panic!("{name}.{key} ({value}) as documented: {e}"));
            let stated = Pipeline::new(vec![stated]);
            for body in &corpus {
                assert!(
                    run(&stated, &body.bytes, body.dialect)
                        == run(&plain, &body.bytes, body.dialect),
                    "{name}.{key}: the documented default ({value}) is not the real one ({})",
                    body.path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} stated defaults were checked");
}
