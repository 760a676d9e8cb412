//! `sluice init` and `sluice presets`: the embedded default as a commented file, and the preset list.

use std::io::Write;
use std::path::Path;

use engine::config;
use engine::config::Config;

use super::{ConfigArgs, ConfigChoice, Failure, stdout_result};

/// What `sluice init` writes: the embedded default as it is (its comments explain it), then the
/// keys it leaves at their built-in values, commented out with those values.
pub(super) fn init_text() -> String {
    let store = engine::config::StoreConfig::default();
    format!(
        "# sluice config, written by `sluice init`: the embedded default, which a file is layered on\n\
         # (a top-level key this file does not write keeps its default). Check it with\n\
         # `sluice config check FILE`; run with `sluice serve --config FILE`.\n\
         #\n\
         {default}\n\
         # Where state lives (`--store` wins): sqlite:PATH (the default, under the user's state\n\
         # directory), redis://HOST:PORT/DB (shared by replicas),\n\
         # redis+sentinel://SENTINEL:PORT,.../PRIMARY/DB (replicas, following a failover), memory, or off.\n\
         #   backend: sqlite:/var/lib/sluice/state.db\n\
         # Per session; how long a turn waits for another replica's lease; how long a replica\n\
         # serves the sessions it holds from memory while the store does not answer:\n\
         #   session_max_stashes: {stashes}\n\
         #   session_max_mb: {mb}\n\
         #   lease_wait_ms: {wait}\n\
         #   outage_grace_seconds: {grace}\n\
         #\n\
         # observe: {{ workers: 1, max_queue: 256 }}   # the off-path measurement pool (mode: observe)\n\
         # cache:\n\
         #   amortize: {{ enabled: false, every_turns: 10 }}\n\
         #\n\
         # A live A/B split of sessions (`serve --ab SHARE`): the control share goes untouched,\n\
         # the rest compacted, both arms' bills recorded in the store (`sluice ab report`):\n\
         # experiment: {{ name: ab, control_share: 0.5 }}\n\
         #\n\
         # Per-tool rules, matched on the name of the tool that produced an output (`*`, `?`),\n\
         # written in place of the `tools:` above:\n\
         # tools:\n\
         #   exclude: [Task, Agent, read_secret]             # never cut, by any component\n\
         #   rules:\n\
         #     \"apply_*\": {{ components: [format] }}        # only these may act on its outputs\n",
        default = engine::config::EMBEDDED_DEFAULT.trim_end(),
        stashes = store.session_max_stashes,
        mb = store.session_max_mb,
        wait = store.lease_wait_ms,
        grace = store.outage_grace_seconds,
    )
}

pub(super) fn init(path: &Path, force: bool) -> Result<(), Failure> {
    let text = init_text();
    if path == Path::new("-") {
        return stdout_result(std::io::stdout().lock().write_all(text.as_bytes()));
    }
    if path.exists() && !force {
        return Err(Failure(format!(
            "{} exists; pass --force to replace it",
            path.display()
        )));
    }
    std::fs::write(path, text).map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

pub(super) fn presets() -> Result<(), Failure> {
    // What `serve` with neither flag would run: the environment's choice, else the embedded
    // default (both variables set is refused, as `serve` refuses it).
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let unset = ConfigArgs {
        config: None,
        preset: None,
    };
    let default = unset.choice(env)?;
    stdout_result(write_presets(&mut std::io::stdout().lock(), &default))
}

/// The listed presets (a preset that does nothing in this build is not offered, see
/// `engine::components::is_listed`), the one `serve` runs without `--config` or `--preset`
/// marked, and the components built in this version. Without either variable that default is
/// no preset: the embedded pipeline, said first.
pub(super) fn write_presets(out: &mut impl Write, default: &ConfigChoice) -> std::io::Result<()> {
    match default {
        ConfigChoice::Embedded => writeln!(
            out,
            "default: the embedded pipeline, which is no preset: [{}]\n         (`sluice init` writes it as a file; --preset or --config picks another)",
            Config::embedded().pipeline.join(", ")
        )?,
        ConfigChoice::Preset(name, from) => writeln!(out, "default: preset {name} ({from})")?,
        ConfigChoice::File(path) => writeln!(
            out,
            "default: the config file {} (SLUICE_CONFIG)",
            path.display()
        )?,
    }
    writeln!(out)?;
    for preset in config::listed_presets() {
        let status = if config::preset_is_available(preset) {
            ""
        } else {
            "  (needs components not built yet)"
        };
        let mark = match default {
            ConfigChoice::Preset(name, from) if name == preset.name => {
                format!("  (the default, from {from})")
            }
            _ => String::new(),
        };
        writeln!(
            out,
            "{:<11} [{}]{status}{mark}",
            preset.name,
            preset.pipeline.join(", ")
        )?;
        writeln!(out, "            {}", preset.description)?;
    }
    writeln!(out)?;
    writeln!(out, "components built in this version:")?;
    for factory in engine::components::ALL {
        if engine::components::is_listed(factory.name()) {
            writeln!(out, "  {:<10} {}", factory.name(), factory.summary())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(default: &ConfigChoice) -> String {
        let mut out = Vec::new();
        write_presets(&mut out, default).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn presets_mark_the_default_and_leave_out_what_does_nothing() {
        let text = listing(&ConfigChoice::Embedded);
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with("default: the embedded pipeline, which is no preset: [")
                && first.contains(&Config::embedded().pipeline.join(", ")),
            "{text}"
        );
        assert!(
            !text.contains("(the default"),
            "no preset is the default: {text}"
        );
        assert!(text.lines().any(|l| l.starts_with("balanced ")), "{text}");
        // Does nothing in this build: neither the preset nor the component is offered.
        assert!(!text.contains("agentdiet"), "{text}");

        let text = listing(&ConfigChoice::Preset("balanced".into(), "SLUICE_PRESET"));
        assert!(
            text.starts_with("default: preset balanced (SLUICE_PRESET)"),
            "{text}"
        );
        let marked: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("(the default, from SLUICE_PRESET)"))
            .collect();
        assert_eq!(marked.len(), 1, "{text}");
        assert!(marked[0].starts_with("balanced "), "{text}");
    }

    /// The file `sluice init` writes quotes no measured figure: they go stale with the build,
    /// and the measurements live in docs/performance.md.
    #[test]
    fn init_writes_no_figures() {
        let figure = regex::Regex::new(r"[0-9]\s*%|\b[0-9]+ of [0-9]+\b").unwrap();
        for line in init_text()
            .lines()
            .filter(|l| l.trim_start().starts_with('#'))
        {
            assert!(
                !figure.is_match(line),
                "a figure in `sluice init`'s file: {line}"
            );
        }
    }
}
