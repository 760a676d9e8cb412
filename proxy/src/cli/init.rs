//! `sluice init` and `sluice presets`: the embedded default as a commented file, and the preset list.

use super::*;

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
         # directory), redis://HOST:PORT/DB (shared by replicas), memory, or off.\n\
         #   backend: sqlite:/var/lib/sluice/state.db\n\
         # Per session, and how long a turn waits for another replica's lease:\n\
         #   session_max_stashes: {stashes}\n\
         #   session_max_mb: {mb}\n\
         #   lease_wait_ms: {wait}\n\
         #\n\
         # observe: {{ workers: 1, max_queue: 256 }}   # the off-path measurement pool (mode: observe)\n\
         # cache:\n\
         #   amortize: {{ enabled: false, every_turns: 10 }}\n\
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
    stdout_result(write_presets(&mut std::io::stdout().lock()))
}

pub(super) fn write_presets(out: &mut impl Write) -> std::io::Result<()> {
    for preset in config::PRESETS {
        let status = if config::preset_is_available(preset) {
            ""
        } else {
            "  (needs components not built yet)"
        };
        writeln!(
            out,
            "{:<11} [{}]{status}",
            preset.name,
            preset.pipeline.join(", ")
        )?;
        writeln!(out, "            {}", preset.description)?;
    }
    writeln!(out)?;
    writeln!(out, "components built in this version:")?;
    for factory in engine::components::ALL {
        writeln!(out, "  {:<10} {}", factory.name(), factory.summary())?;
    }
    Ok(())
}
