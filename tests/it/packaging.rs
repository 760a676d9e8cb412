//! What users install, checked where it can be without building it: the distribution name is
//! one name in the wheel's packer, `proxy/pyproject.toml` and the npm launcher; each platform's
//! npm package is the one the launcher looks for; the container file parses (this machine has no
//! container engine to build it: docs/install.md) and copies what its build stage makes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `pack.py`'s TARGETS: Rust target -> (wheel tag, npm key, os, cpu, libc).
fn targets() -> BTreeMap<String, [String; 5]> {
    let pack = read("proxy/packaging/pack.py");
    let start = pack
        .find("TARGETS = {")
        .expect("pack.py has its TARGETS table");
    let end = start + pack[start..].find("\n}").unwrap();
    pack[start..end]
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('"').collect();
            // "target": ("tag", "key", "os", "cpu", "libc") or ... "cpu", None),
            (fields.len() >= 11).then(|| {
                let libc = if line.contains("None)") {
                    ""
                } else {
                    fields[11]
                };
                (
                    fields[1].to_owned(),
                    [fields[3], fields[5], fields[7], fields[9], libc].map(str::to_owned),
                )
            })
        })
        .collect()
}

#[test]
fn one_name_and_one_platform_table() {
    let pack = read("proxy/packaging/pack.py");
    let pyproject = read("proxy/pyproject.toml");
    let launcher: serde_json::Value =
        serde_json::from_str(&read("proxy/packaging/npm/sluice-proxy/package.json")).unwrap();
    assert!(pack.contains("NAME = \"sluice-proxy\""));
    assert!(pyproject.contains("name = \"sluice-proxy\""));
    assert!(pyproject.contains("bindings = \"bin\""));
    assert_eq!(launcher["name"], "sluice-proxy");
    assert_eq!(launcher["bin"]["sluice"], "bin/sluice.js");

    let targets = targets();
    assert_eq!(targets.len(), 7, "{targets:?}");
    // The launcher looks for @sluice-proxy/<process.platform>-<process.arch>[-gnu|-musl].
    let script = read("proxy/packaging/npm/sluice-proxy/bin/sluice.js");
    assert!(script.contains("`@sluice-proxy/${key}`"));
    for (target, [tag, key, os, cpu, libc]) in &targets {
        let short = match libc.as_str() {
            "glibc" => "-gnu",
            "musl" => "-musl",
            _ => "",
        };
        assert_eq!(*key, format!("{os}-{cpu}{short}"), "{target}");
        let arch = if cpu == "x64" { "x86_64" } else { "aarch64" };
        assert!(target.starts_with(arch), "{target}: {cpu}");
        let wheel_arch = match (os.as_str(), cpu.as_str()) {
            ("win32", _) => "amd64",
            ("darwin", "arm64") => "arm64",
            _ => arch,
        };
        assert!(tag.ends_with(wheel_arch), "{target}: {tag}");
    }
}

/// The instructions of a container file, continuation lines joined, comments dropped.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                let (word, rest) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((word.to_owned(), rest.trim().to_owned()));
                current.clear();
            }
        }
    }
    assert!(current.is_empty(), "a continuation runs off the end");
    out
}

#[test]
fn the_container_file_parses_and_ships_the_static_build() {
    const KNOWN: [&str; 10] = [
        "FROM",
        "RUN",
        "COPY",
        "WORKDIR",
        "USER",
        "ENV",
        "EXPOSE",
        "ENTRYPOINT",
        "CMD",
        "ARG",
    ];
    let file = instructions(&read("proxy/packaging/Containerfile"));
    let mut stages = Vec::new();
    let mut built = None;
    for (word, rest) in &file {
        assert!(KNOWN.contains(&word.as_str()), "unknown instruction {word}");
        match word.as_str() {
            "FROM" => stages.push(rest.rsplit(' ').next().unwrap().to_owned()),
            "RUN" if rest.contains("cargo build") => {
                let target = rest.split("--target ").nth(1).unwrap().split(' ').next();
                assert!(
                    rest.contains("--profile dist") && rest.contains("--locked"),
                    "{rest}"
                );
                built = target.map(|t| format!("/src/target/{t}/dist/sluice"));
            }
            "COPY" if rest.starts_with("--from=") => {
                let (from, paths) = rest["--from=".len()..].split_once(' ').unwrap();
                assert!(
                    stages.contains(&from.to_owned()),
                    "COPY from unknown stage {from}"
                );
                let source = paths.split(' ').next().unwrap();
                assert_eq!(Some(source), built.as_deref(), "copies what the build made");
            }
            "ENTRYPOINT" | "CMD" => {
                let args: Vec<String> = serde_json::from_str(rest)
                    .unwrap_or_else(|e| panic!("{word} is not a JSON array: {e}"));
                assert!(!args.is_empty());
            }
            _ => {}
        }
    }
    assert_eq!(file.first().map(|f| f.0.as_str()), Some("FROM"));
    assert_eq!(
        stages.last().map(String::as_str),
        Some("scratch"),
        "nothing else in it"
    );
    // The static build is a musl target the packer knows.
    let built = built.expect("a cargo build stage");
    let target = built.split('/').nth(3).unwrap();
    assert_eq!(
        targets().get(target).map(|t| t[4].as_str()),
        Some("musl"),
        "{target}"
    );
}
