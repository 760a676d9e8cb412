//! The `sluice` command line as a user runs it: exit codes, one-line errors, real corpus bodies.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn sluice(args: &[&str], stdin: &[u8]) -> Output {
    sluice_env(args, &[], stdin)
}

/// Runs `sluice` with exactly these config variables: none is inherited from the caller.
fn sluice_env(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command
        .env_remove("SLUICE_CONFIG")
        .env_remove("SLUICE_PRESET");
    let mut child = command
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice runs");
    // A command that answers without reading its input (a flag error, `--help`) may exit
    // before the write: the pipe is then closed, and what it printed is still the answer.
    if let Err(err) = child.stdin.take().unwrap().write_all(stdin) {
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "{err}");
    }
    child.wait_with_output().unwrap()
}

/// A public corpus file where it lies: plain, or gzipped as the repository stores it (`sluice
/// replay` reads both).
fn corpus_file(run: &str, file: &str) -> PathBuf {
    let path = integration_tests::corpus_root()
        .join("public")
        .join(run)
        .join(file);
    integration_tests::find_corpus_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// A corpus body as a plain JSON file, which `sluice compact` needs: a gzipped one is
/// decompressed to a temporary file, removed when this is dropped.
struct PlainBody {
    path: PathBuf,
    temporary: bool,
}

impl PlainBody {
    fn new(run: &str, file: &str) -> Self {
        let found = corpus_file(run, file);
        if found.extension().is_none_or(|e| e != "gz") {
            return Self {
                path: found,
                temporary: false,
            };
        }
        let bytes = integration_tests::read_corpus_file(&found).unwrap_or_else(|e| panic!("{e}"));
        // Unique per call: tests run in parallel, and one's drop must not delete another's copy.
        static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let copy = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "sluice-corpus-{}-{copy}-{run}-{file}",
            std::process::id()
        ));
        std::fs::write(&path, bytes).unwrap();
        Self {
            path,
            temporary: true,
        }
    }
}

impl Drop for PlainBody {
    fn drop(&mut self) {
        if self.temporary {
            std::fs::remove_file(&self.path).ok();
        }
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn compact_rewrites_a_real_body_and_reports() {
    let body = PlainBody::new(
        "gemini3pro-miniswe-pytest-dev-pytest-6197",
        "anthropic.json",
    );
    let body = &body.path;
    let report = std::env::temp_dir().join(format!("sluice-report-{}.json", std::process::id()));
    let out = sluice(
        &[
            "compact",
            "--report",
            report.to_str().unwrap(),
            body.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let input = std::fs::read(body).unwrap();
    assert!(
        out.stdout.len() < input.len(),
        "the default config saves bytes on this body"
    );
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("valid JSON out");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let stashes = report["stashes"].as_object().unwrap();
    assert!(!stashes.is_empty());
    for (id, original) in stashes {
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("<<cg:{id}>>")));
        assert_eq!(
            engine::marker::stash_id(original.as_str().unwrap()),
            *id,
            "the stash is the content it names"
        );
    }
}

#[test]
fn compact_reads_stdin_and_off_is_byte_identical() {
    let body =
        integration_tests::read_corpus_file(&corpus_file("sweagent-fncall-simple", "openai.json"))
            .unwrap();
    let out = sluice(&["compact", "--preset", "off", "-"], &body);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout == body);
}

#[test]
fn bad_bodies_exit_non_zero_with_one_line() {
    for (body, needle) in [
        (&b"not json"[..], "not JSON"),
        (b"{\"model\":\"x\"}", "no `messages`"),
    ] {
        let out = sluice(&["compact", "--dialect", "anthropic"], body);
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_message_it_cannot_read_stays_as_it_came_and_the_body_goes_through() {
    let body = br#"{"messages":[{"role":"user"},{"role":"user","content":"hi"}]}"#;
    let out = sluice(&["compact", "--dialect", "anthropic"], body);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, body);
}

#[test]
fn config_check_names_a_misspelled_key_and_an_unknown_component() {
    let dir = std::env::temp_dir();
    let bad = dir.join(format!("sluice-bad-{}.yaml", std::process::id()));
    std::fs::write(
        &bad,
        "pipeline: [dedup, colapse]\ncomponents:\n  dedup:\n    min_tokenz: 5\n",
    )
    .unwrap();
    let out = sluice(&["config", "check", bad.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("components.dedup") && err.contains("min_tokenz"),
        "{err}"
    );
    assert!(err.contains("unknown component `colapse`"), "{err}");

    let good = dir.join(format!("sluice-good-{}.yaml", std::process::id()));
    std::fs::write(&good, "pipeline: [format, dedup]\n").unwrap();
    let out = sluice(&["config", "check", good.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A config file in the temp dir, named for this test and process.
fn config_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("sluice-{name}-{}.yaml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn config_check_lists_every_problem_including_top_level_ones() {
    let bad = config_file(
        "three-problems",
        "mode: fast\npipeline: [format, nope]\nstoer: 1\n",
    );
    let out = sluice(&["config", "check", bad.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    for needle in [
        "mode: unknown value `fast` (expected `sync` or `observe`) at line 1",
        "pipeline[1]: unknown component `nope`",
        "stoer: unknown key `stoer`",
        "3 problems",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(out.stdout.is_empty());

    let duplicate = config_file("duplicate", "mode: sync\nmode: observe\n");
    let out = sluice(&["config", "check", duplicate.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("mode: duplicate key `mode` at line 2"),
        "{err}"
    );
    assert!(
        !err.contains("DuplicateKeyPolicy") && !err.contains("Options"),
        "{err}"
    );
    for file in [bad, duplicate] {
        std::fs::remove_file(file).ok();
    }
}

#[test]
fn config_check_layers_a_partial_file_on_the_embedded_default() {
    let default_pipeline = engine::config::Config::embedded().pipeline.join(", ");
    for (name, text, mode, pipeline) in [
        (
            "only-mode",
            "mode: observe\n",
            "observe",
            default_pipeline.as_str(),
        ),
        (
            "only-store",
            "store: {ttl_seconds: 60}\n",
            "sync",
            &default_pipeline,
        ),
        ("empty", "# nothing set\n", "sync", &default_pipeline),
        ("empty-pipeline", "pipeline: []\n", "sync", ""),
    ] {
        let file = config_file(name, text);
        let out = sluice(&["config", "check", file.to_str().unwrap()], b"");
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("ok (mode {mode}, pipeline: [{pipeline}])")),
            "{name}: {stdout}"
        );
        std::fs::remove_file(file).ok();
    }
}

#[test]
fn a_config_flag_on_the_command_line_beats_the_environment() {
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#;
    let bad = config_file("env-bad", "mode: fast\n");
    let good = config_file("env-good", "pipeline: []\n");
    let (bad, good) = (bad.to_str().unwrap(), good.to_str().unwrap());
    let compact = |flags: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["compact", "--dialect", "openai"];
        args.extend(flags);
        args.push("-");
        sluice_env(&args, env, body)
    };

    // Each variable alone is used.
    let out = compact(&[], &[("SLUICE_CONFIG", bad)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown value `fast`"),
        "{}",
        stderr(&out)
    );
    let out = compact(&[], &[("SLUICE_PRESET", "nope")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown preset `nope`"),
        "{}",
        stderr(&out)
    );

    // A flag beats the other variable: no "cannot be used with '--config'".
    let out = compact(&["--preset", "off"], &[("SLUICE_CONFIG", bad)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, body);
    let out = compact(&["--config", good], &[("SLUICE_PRESET", "nope")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, body);

    // Both on the command line is a usage error; both in the environment is refused too.
    let out = compact(&["--config", good, "--preset", "off"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
    let out = compact(&[], &[("SLUICE_CONFIG", good), ("SLUICE_PRESET", "off")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("both set"), "{}", stderr(&out));
    for file in [bad, good] {
        std::fs::remove_file(file).ok();
    }
}

#[test]
fn presets_and_help_list_everything() {
    let out = sluice(&["presets"], b"");
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "off",
        "safe",
        "balanced",
        "aggressive",
        "coding",
        "mcp",
        "agent",
        "summarize",
        "codesafe",
        "general",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "preset {name} listed"
        );
    }
    // The default is said, and is no preset unless the environment names one.
    assert!(
        text.starts_with("default: the embedded pipeline, which is no preset: ["),
        "{text}"
    );
    assert!(!text.contains("(the default"), "{text}");
    // A preset or component that does nothing in this build is not offered.
    assert!(!text.contains("agentdiet"), "{text}");
    let out = sluice_env(&["presets"], &[("SLUICE_PRESET", "agent")], b"");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("agent ") && l.ends_with("(the default, from SLUICE_PRESET)")),
        "{text}"
    );
    let help = sluice(&["--help"], b"");
    let help = String::from_utf8_lossy(&help.stdout);
    for sub in ["compact", "config", "presets"] {
        assert!(help.contains(sub));
    }
}

/// A preset name from a flag or a variable that is none: what it is not, what is near, what is
/// known, and no line or column of a document the user never wrote.
#[test]
fn an_unknown_preset_from_a_flag_is_named_with_the_known_ones() {
    let out = sluice(&["compact", "--preset", "balancd", "-"], b"{}");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "sluice: --preset: unknown preset `balancd` (did you mean `balanced`?); known: off, "
        ),
        "{err}"
    );
    assert!(!err.contains("line") && !err.contains("column"), "{err}");
    let out = sluice_env(&["compact", "-"], &[("SLUICE_PRESET", "balancd")], b"{}");
    assert!(
        stderr(&out).starts_with("sluice: SLUICE_PRESET: unknown preset `balancd`"),
        "{}",
        stderr(&out)
    );
}

/// A config with several problems, given to a command that runs it: one problem a line.
#[test]
fn a_bad_config_says_one_problem_a_line() {
    let bad = config_file("one-a-line", "mode: fast\npipeline: [format, nope]\n");
    let out = sluice(&["compact", "--config", bad.to_str().unwrap(), "-"], b"{}");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines[0].ends_with(": 2 problems"), "{err}");
    assert!(lines[1].trim_start().starts_with("mode: "), "{err}");
    assert!(lines[2].trim_start().starts_with("pipeline[1]: "), "{err}");
    std::fs::remove_file(bad).ok();
}

/// `config check` on a file that writes both `preset:` and `pipeline:` says the list wins.
#[test]
fn config_check_says_which_of_preset_and_pipeline_wins() {
    let both = config_file("both", "preset: balanced\npipeline: [format, dedup]\n");
    let out = sluice(&["config", "check", both.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("pipeline: [format, dedup]"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr(&out).contains(
            "warning: both `preset: balanced` and `pipeline:` are set: the `pipeline:` list wins"
        ),
        "{}",
        stderr(&out)
    );
    let one = config_file("one-problem", "mode: fast\n");
    let out = sluice(&["config", "check", one.to_str().unwrap()], b"");
    assert!(stderr(&out).contains(": 1 problem\n"), "{}", stderr(&out));
    for file in [both, one] {
        std::fs::remove_file(file).ok();
    }
}

#[test]
fn filters_list_test_and_apply() {
    let out = sluice(&["filters", "test"], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("inline tests passed"));

    let failing = std::env::temp_dir().join(format!("sluice-filter-{}.yaml", std::process::id()));
    std::fs::write(
        &failing,
        "schema_version: 1\nfilters:\n  mine:\n    match: 'x'\n    head_lines: 1\ntests:\n  mine:\n    - name: keeps two\n      input: \"a\\nb\\nc\"\n      expected: \"a\\nb\"\n",
    )
    .unwrap();
    let out = sluice(&["filters", "test", failing.to_str().unwrap()], b"");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("filter `mine`, test `keeps two` failed at line 2"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(&failing).ok();

    let log = "Reading package lists...\nGet:1 http://deb.debian.org/debian bookworm InRelease [151 kB]\nE: Unable to locate package libfoo-dev\n";
    let out = sluice(&["filters", "apply", "apt-get"], log.as_bytes());
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "E: Unable to locate package libfoo-dev\n"
    );
    let out = sluice(&["filters", "apply", "nope"], b"");
    assert!(stderr(&out).contains("no filter named `nope`"));
}

#[test]
fn replay_reports_in_markdown_and_json_and_writes_charts() {
    // Gzipped in the repository: replay reads `.json.gz` as it reads `.json`.
    let body = corpus_file("gemini3pro-miniswe-pytest-dev-pytest-6197", "openai.json");
    let second = corpus_file("sweagent-fncall-simple", "openai.json");
    let out_dir = std::env::temp_dir().join(format!("sluice-replay-{}", std::process::id()));
    let out = sluice(
        &[
            "replay",
            "--preset",
            "agent",
            "--gap",
            "600",
            "--out",
            out_dir.to_str().unwrap(),
            body.to_str().unwrap(),
            second.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(
        md.contains("**Billed input saved, net: ")
            && md.contains("on the prompt-cache cost model")
            && md.contains("Before expand rounds: ")
            && md.contains("what `/stats` `net_savings_pct` reads live")
            && md.contains("Visible recall")
            && md.contains("Flips: **0**"),
        "{md}"
    );
    // Recordings and dialects apart: two files, each its own recording.
    assert!(md.contains("2 recordings in "), "{md}");
    assert!(
        md.contains("Sessions that cost more than without sluice")
            || md.contains("No session cost more than without sluice"),
        "{md}"
    );
    assert!(out_dir.join("report.md").is_file() && out_dir.join("report.json").is_file());
    let mut charts: Vec<String> = std::fs::read_dir(out_dir.join("charts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    charts.sort();
    assert_eq!(
        charts.len(),
        3,
        "{charts:?}: one per session and the corpus"
    );
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    for chart in &charts {
        assert!(
            report.contains(&format!("(charts/{chart})")),
            "report.md links {chart}"
        );
        let svg = std::fs::read_to_string(out_dir.join("charts").join(chart)).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        if chart == "corpus.svg" {
            assert!(svg.contains("2 sessions") && svg.contains("billed input saved, net (%)"));
            assert!(svg.contains("content tokens saved, net (%)"));
            // It leads with the report's headline.
            let headline = svg.find("billed input saved, net ").unwrap();
            assert!(headline < svg.find("content tokens saved").unwrap());
            assert!(
                svg.contains("pytest-dev-pytest-6197") && svg.contains("sweagent-fncall-simple")
            );
            continue;
        }
        // A session chart explains itself: its name and figures, both axes, ticks with units.
        assert!(
            svg.contains("turns · billed saved, net ") && svg.contains("% · content tokens, net"),
            "{chart}"
        );
        assert!(
            svg.contains(">turn</text>") && svg.contains(">tokens</text>"),
            "{chart}"
        );
        assert!(svg.contains(">input-token equivalents</text>"), "{chart}");
        assert!(
            svg.contains(">0</text>") && svg.contains(">1</text>"),
            "{chart}: ticks"
        );
    }
    let out = sluice(
        &[
            "replay",
            "--preset",
            "agent",
            "--format",
            "json",
            body.to_str().unwrap(),
        ],
        b"",
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["totals"]["sessions"], 1);
    assert_eq!(doc["totals"]["flips"], 0);
    for key in [
        "net_savings_pct",
        "savings_pct_gross",
        "billed_savings_pct",
        "billed_savings_pct_gross",
        "two_arm_savings_pct",
        "expand_rounds",
        "visible_recall_pct",
        "recall_pct",
    ] {
        assert!(doc["totals"][key].is_number(), "totals.{key}");
        assert!(
            doc["sessions"][0]["totals"][key].is_number(),
            "sessions[0].totals.{key}"
        );
    }
    std::fs::remove_dir_all(&out_dir).ok();

    let out = sluice(
        &[
            "tune",
            "cold-cache",
            "--gaps",
            "60,600",
            body.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Recommended: cold_cache"));
    let out = sluice(&["replay", "/nonexistent/path"], b"");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no such file or directory"));
}

#[test]
fn replay_of_a_run_folder_prefers_recorded_turns_over_a_gzipped_final_body() {
    // This run has `turns.openai.jsonl.gz` beside its final bodies, which the repository stores
    // as `openai.json.gz` and `anthropic.json.gz`: the recorded turns replace the OpenAI body,
    // gzipped or not, so the run is two sessions, not three.
    let run =
        integration_tests::corpus_root().join("public/sweagent-marshmallow1867-fncall-replace");
    let out = sluice(
        &[
            "replay",
            "--preset",
            "off",
            "--format",
            "json",
            run.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<String> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let name = s["name"].as_str().unwrap();
            Path::new(name)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("anthropic.json"), "{names:?}");
    assert_eq!(names[1], "turns.openai.jsonl.gz");
}

#[test]
fn replay_reads_the_triage_event_format_and_reports_the_screeners() {
    // A conversation in the spec's replay format: four user turns, each with a few big outputs.
    let mut lines = Vec::new();
    let mut call = 0;
    for turn in 0..4 {
        lines.push(serde_json::json!({"type": "user/message", "text": format!("step {turn}: keep fixing the importer")}));
        for _ in 0..3 {
            call += 1;
            let id = format!("c{call}");
            lines.push(
                serde_json::json!({"type": "assistant/message", "text": "", "calls": [
                {"id": id, "name": "bash", "arguments": "{\"cmd\":\"python importer.py\"}"}]}),
            );
            let output =
                format!("run {call}\n") + &"importer.py: processed record in 3ms\n".repeat(300);
            lines.push(serde_json::json!({"type": "tool/result", "callId": id, "text": output, "isError": false}));
        }
    }
    lines.push(serde_json::json!({"type": "assistant/message", "text": "done"}));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let path = std::env::temp_dir().join(format!("sluice-events-{}.jsonl", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = sluice(
        &[
            "replay",
            "--preset",
            "triage",
            "--gap",
            "7200",
            "--format",
            "json",
            path.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let session = &doc["sessions"][0];
    assert_eq!(
        session["turns"].as_array().unwrap().len(),
        13,
        "one request per assistant message"
    );
    assert!(
        session["components"]["stale_output"]["acted"]
            .as_u64()
            .unwrap()
            > 0
    );
    // stale_output runs first in the preset and takes the old outputs; the others report why not.
    assert!(session["components"]["oversized_block"]["gates"].is_object());
    assert_eq!(doc["totals"]["flips"], 0);
    assert!(session["suggested_range"].is_array());
    // The totals are the sum of the turns.
    let turns = session["turns"].as_array().unwrap();
    let sum: u64 = turns
        .iter()
        .map(|t| t["sluice"]["content_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(
        doc["totals"]["sluice"]["content_tokens"].as_u64(),
        Some(sum)
    );
    std::fs::remove_file(&path).ok();
}

/// A hostile model-written filter runs in a child of the `sluice` binary: an allocation that
/// would abort a process, a runaway loop and a normal filter, and this process survives all.
#[test]
fn sandbox_children_contain_hostile_filters() {
    use llm::sandbox::{CHILD_ARG, Limits, SandboxError, run_in_child};
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_sluice"));
    let args = vec![CHILD_ARG.to_owned()];
    let limits = Limits::DEFAULT;
    let keep_errors = "def filter(text):\n    return \"\\n\".join([l for l in text.split(\"\\n\") if re_match(\"ERROR\", l)])\n";
    assert_eq!(
        run_in_child(
            binary,
            &args,
            keep_errors,
            "ok\nERROR disk full\nok",
            &limits
        ),
        Ok("ERROR disk full".to_owned())
    );
    // Reserves petabytes in one step: in-process this aborts; here the child dies alone.
    let explode = "def filter(text):\n    return text * 2147483647\n";
    let out = run_in_child(binary, &args, explode, &"x".repeat(1 << 20), &limits);
    assert!(
        matches!(
            out,
            Err(SandboxError::Crashed(_) | SandboxError::Heap | SandboxError::Runtime(_))
        ),
        "{out:?}"
    );
    let spin = "def filter(text):\n    n = 0\n    for i in range(2147483647):\n        n += 1\n    return text\n";
    let quick = Limits {
        max_steps: u64::MAX / 2,
        deadline: std::time::Duration::from_millis(100),
        ..Limits::DEFAULT
    };
    assert_eq!(
        run_in_child(binary, &args, spin, "x", &quick),
        Err(SandboxError::Deadline(std::time::Duration::from_millis(
            100
        )))
    );
}

/// `sluice init` writes a config that checks clean and is the embedded default; it does not
/// overwrite a file unless told to.
#[test]
fn init_writes_a_config_that_checks_and_is_the_default() {
    let dir = std::env::temp_dir().join(format!("sluice-init-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sluice.yaml");
    let path_text = path.to_str().unwrap();
    let out = sluice(&["init", path_text], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sluice(&["config", "check", path_text], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = engine::config::Config::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let default = engine::config::Config::parse(engine::config::EMBEDDED_DEFAULT).unwrap();
    assert_eq!(written.pipeline, default.pipeline);
    assert_eq!(written.store, default.store);
    let again = sluice(&["init", path_text], b"");
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert!(
        sluice(&["init", "--force", path_text], b"")
            .status
            .success()
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Completions and the man page come from the CLI definition: every subcommand is in them.
#[test]
fn completions_and_the_man_page_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let out = sluice(&["completions", shell], b"");
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        for sub in ["serve", "compact", "replay", "init", "presets"] {
            assert!(text.contains(sub), "{shell} completions lack {sub}");
        }
    }
    let out = sluice(&["man"], b"");
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH sluice"),
        "{page}"
    );
    assert!(page.contains("serve"));
}

/// `sluice wrap` starts sluice, points the command at it, passes the command's exit code on,
/// and stops the sluice it started.
#[test]
fn wrap_runs_a_command_through_a_sluice_it_starts_and_stops() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let probe = "import os, urllib.request; base = os.environ['ANTHROPIC_BASE_URL']; \
        print(base, os.environ['OPENAI_BASE_URL'], os.environ['GOOGLE_GEMINI_BASE_URL']); \
        print(urllib.request.urlopen(base.rsplit('/', 1)[0] + '/healthz').read().decode()); \
        raise SystemExit(3)";
    let out = sluice(
        &[
            "wrap",
            "--listen",
            &listen,
            "--serve-arg=--store=memory",
            "--",
            "python3",
            "-c",
            probe,
        ],
        b"",
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "the command's code: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!(
            "http://{listen}/anthropic http://{listen}/openai/v1 http://{listen}/gemini"
        )),
        "{said}"
    );
    assert!(said.contains("ok"), "sluice answered the command: {said}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the sluice it started is stopped"
    );
}

/// `sluice compact` says which `tools:` rule applied to which output, on stderr and in the
/// report, and an excluded tool's outputs come out as they went in.
#[test]
fn compact_shows_the_tool_rule_that_applied() {
    let body = PlainBody::new(
        "gemini3pro-miniswe-pytest-dev-pytest-6197",
        "anthropic.json",
    );
    let config = config_file("tool-rules", "tools:\n  exclude: [\"b*sh\"]\n");
    let args = [
        "compact",
        "--config",
        config.to_str().unwrap(),
        body.path.to_str().unwrap(),
    ];
    let out = sluice(&args, b"");
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("tool rule    message"), "{err}");
    assert!(err.contains("(\"bash\"): exclude: b*sh"), "{err}");
    let outputs = |body: &[u8]| -> Vec<String> {
        engine::wire::parse(body, engine::wire::Dialect::Anthropic)
            .unwrap()
            .messages()
            .iter()
            .filter(|m| m.is_tool())
            .map(|m| m.content.clone())
            .collect()
    };
    let input = std::fs::read(&body.path).unwrap();
    assert_eq!(outputs(&out.stdout), outputs(&input));

    let report = std::env::temp_dir().join(format!("sluice-rules-{}.json", std::process::id()));
    let mut with_report = args.to_vec();
    with_report.splice(1..1, ["--report", report.to_str().unwrap()]);
    let out = sluice(&with_report, b"");
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let rules = report["tool_rules"].as_array().unwrap();
    assert_eq!(
        rules.len(),
        outputs(&input).len(),
        "one entry per bash output"
    );
    assert_eq!(rules[0]["tool"], "bash");
    assert_eq!(rules[0]["rule"], "exclude: b*sh");
}

/// A folder laid out like `~/.claude/projects`: two projects of the repository's Claude Code
/// transcripts (one with a sub-agent under `<session>/subagents/`), removed when dropped.
struct ClaudeHome(PathBuf);

impl ClaudeHome {
    fn new(tag: &str) -> Self {
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/corpus/transcripts/claude-code/projects");
        let home = std::env::temp_dir().join(format!("sluice-claude-{tag}-{}", std::process::id()));
        let projects = home.join("projects");
        for file in [
            "-src-experiments-claude_p/256ba646-2c15-437a-98e9-4171aafd030e.jsonl",
            "-src-experiments-claude_p/2b4ed4c0-b905-41de-9238-273db3ec737a.jsonl",
            "-src-experiments-claude_p/29ccd257-68b1-427f-ae5f-6524b7cb6f20/subagents/agent-a2271d1.jsonl",
            "-sample-project/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
        ] {
            let to = projects.join(file);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(source.join(file), &to).unwrap();
        }
        Self(home)
    }
}

impl Drop for ClaudeHome {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

#[test]
fn replay_from_claude_code_reports_projects_sessions_and_the_headline() {
    let home = ClaudeHome::new("all");
    let out = sluice_env(
        &["replay", "--from", "claude-code", "--since", "2020-01-01"],
        &[("CLAUDE_CONFIG_DIR", home.0.to_str().unwrap())],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("**Over the last "), "{md}");
    assert!(md.contains(" days sluice would have saved "), "{md}");
    assert!(md.contains(" of the billed input**"), "{md}");
    // And in dollars, each call at its own model's list price, in total, per project and per
    // session.
    assert!(md.contains(" at each call's model's list price"), "{md}");
    assert!(md.contains("| at list prices: saved of billed |"), "{md}");
    assert!(md.matches(" of $").count() >= 1 + 2 + 4, "{md}");
    // Per project: three sessions (one a sub-agent) and 24 calls, then one of 7.
    assert!(
        md.contains("| -src-experiments-claude_p | 3 | 24 | "),
        "{md}"
    );
    assert!(md.contains("| -sample-project | 1 | 7 | "), "{md}");
    assert!(md.contains("## Recorded bill check"), "{md}");
    assert!(
        md.contains("## Sessions") && md.contains("agent-a2271d1.jsonl"),
        "{md}"
    );
    assert!(md.contains("**Billed input saved, net: "), "{md}");
    assert!(
        md.contains(
            "| session | calls | preamble | recorded prompt tokens | replay's baseline | error |"
        ),
        "{md}"
    );
    assert!(md.contains(" (recorded) | "), "{md}");
    assert!(md.contains("| **total** | 31 | "), "{md}");
    let err = stderr(&out);
    assert!(
        err.contains("4 Claude Code sessions (31 calls) from 4 files under "),
        "{err}"
    );
    // Every one of these transcripts records its usage, so none bills the stand-in.
    assert!(
        err.contains("preamble read from the recorded usage for 4 of 4 sessions\n"),
        "{err}"
    );

    // The JSON report carries the headline, the projects and the bill check beside the usual
    // totals and sessions, each session's check with its signed error.
    let out = sluice_env(
        &[
            "replay",
            "--from",
            "claude-code",
            "--since",
            "2020-01-01",
            "--format",
            "json",
        ],
        &[("CLAUDE_CONFIG_DIR", home.0.to_str().unwrap())],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON out");
    assert!(
        report["totals"].is_object() && report["sessions"].is_array(),
        "{report}"
    );
    let headline = &report["headline"];
    assert!(
        headline["days"].as_i64().is_some_and(|d| d > 0),
        "{headline}"
    );
    assert!(headline["billed_saved_net_pct"].is_number(), "{headline}");
    assert_eq!(headline["calls"], 31, "{headline}");
    assert_eq!(headline["sessions"], 4, "{headline}");
    // Every call of these transcripts names a Claude model the price table knows.
    let money = &headline["money"];
    assert_eq!(money["priced_calls"], 31, "{money}");
    assert_eq!(money["unpriced_calls"], 0, "{money}");
    let (base, with) = (
        money["baseline_usd"].as_f64().unwrap(),
        money["with_sluice_usd"].as_f64().unwrap(),
    );
    assert!(base > 0.0 && with > 0.0 && with < 2.0 * base, "{money}");
    let projects = report["projects"].as_array().expect("projects");
    assert_eq!(projects.len(), 2, "{projects:?}");
    assert!(
        projects
            .iter()
            .all(|p| p["money"]["priced_calls"].as_u64().is_some_and(|n| n > 0)),
        "{projects:?}"
    );
    assert!(
        projects
            .iter()
            .any(|p| p["project"] == "-sample-project" && p["calls"] == 7)
    );
    let check = &report["bill_check"];
    let rows = check["sessions"].as_array().expect("a row per session");
    assert_eq!(rows.len(), 4, "{check}");
    for row in rows {
        assert!(row["error_pct"].is_number(), "{row}");
        assert!(
            row["recorded_prompt_tokens"]
                .as_u64()
                .is_some_and(|n| n > 0),
            "{row}"
        );
        assert!(
            row["baseline_tokens"].as_u64().is_some_and(|n| n > 0),
            "{row}"
        );
        assert_eq!(row["preamble"], "record", "{row}");
    }
    assert_eq!(check["total"]["calls"], 31, "{check}");
    assert!(check["total"]["error_pct"].is_number(), "{check}");
    assert_eq!(check["off_by_pct"], 10.0, "{check}");
    assert!(check["off"].is_array(), "{check}");

    // `--no-preamble` bills none, and the check says so.
    let out = sluice_env(
        &[
            "replay",
            "--from",
            "claude-code",
            "--no-preamble",
            "--format",
            "json",
        ],
        &[("CLAUDE_CONFIG_DIR", home.0.to_str().unwrap())],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON out");
    let rows = report["bill_check"]["sessions"]
        .as_array()
        .expect("a row per session");
    assert!(
        rows.iter()
            .all(|r| r["preamble"] == "off" && r["preamble_tokens"] == 0),
        "{rows:?}"
    );

    // One project, named on the command line as a path.
    let out = sluice(
        &[
            "replay",
            "--from",
            "claude-code",
            "--project",
            "sample",
            home.0.join("projects").to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("| -sample-project | 1 | 7 | "), "{md}");
    assert!(!md.contains("claude_p"), "{md}");

    // `--out` writes the same lead into report.md and report.json, and the charts.
    let dir = home.0.join("out");
    let out = sluice_env(
        &[
            "replay",
            "--from",
            "claude-code",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[("CLAUDE_CONFIG_DIR", home.0.to_str().unwrap())],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let written = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(written.starts_with("**Over the last "), "{written}");
    assert!(written.contains("## Recorded bill check") && written.contains("(charts/corpus.svg)"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["headline"]["calls"], 31, "{json}");
    assert!(
        json["bill_check"]["total"]["error_pct"].is_number(),
        "{json}"
    );
}

/// A folder laid out like an agent's home, from `tests/corpus/transcripts/<agent>/`: each file
/// copied to the same path under it, removed when dropped.
struct AgentHome(PathBuf);

impl AgentHome {
    fn new(agent: &str, under: &str, files: &[&str]) -> Self {
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/corpus/transcripts")
            .join(agent);
        let home = std::env::temp_dir().join(format!("sluice-{agent}-home-{}", std::process::id()));
        for file in files {
            let to = home.join(under).join(file);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(source.join(file), &to).unwrap();
        }
        Self(home)
    }
}

impl Drop for AgentHome {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

#[test]
fn replay_from_codex_reads_rollouts_archived_zst_and_compacted() {
    let home = AgentHome::new(
        "codex",
        "",
        &[
            "sessions/2026/12/07/rollout-2026-12-07T05-21-11-01a24ef2-e61b-7fb1-a193-18b6e8992bc7.jsonl",
            "sessions/2026/12/07/rollout-2026-12-07T05-21-14-01a24ef2-f1ef-7a22-95bd-2fa5caed9066.jsonl",
            "archived_sessions/rollout-2026-12-07T05-21-16-01a24ef2-f954-7630-ad7a-e446979ca790.jsonl.zst",
            "archived_sessions/rollout-2026-01-02T10-00-00-00000000-0000-4000-8000-00000000c0de.jsonl",
        ],
    );
    let out = sluice_env(
        &["replay", "--from", "codex", "--since", "2020-01-01"],
        &[("CODEX_HOME", home.0.to_str().unwrap())],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains(" days sluice would have saved "), "{md}");
    // Per project (the session's working directory): three runs of 4 calls; the hand-made
    // rollout's two segments of 2.
    assert!(
        md.contains("| /tmp/agents-out/work/repo | 3 | 12 | "),
        "{md}"
    );
    assert!(md.contains("| /work/hand-made | 2 | 4 | "), "{md}");
    // One row per project, though the rollouts come by date with their projects interleaved.
    let projects = md.split("## Recorded bill check").next().unwrap();
    assert_eq!(
        projects.matches("| /tmp/agents-out/work/repo |").count(),
        1,
        "{md}"
    );
    assert_eq!(projects.matches("| /work/hand-made |").count(), 1, "{md}");
    assert!(md.contains("## Recorded bill check"), "{md}");
    assert!(md.contains("| **total** | 16 | "), "{md}");
    let err = stderr(&out);
    assert!(
        err.contains("5 Codex sessions (16 calls) from 4 files under "),
        "{err}"
    );
    assert!(
        err.contains("preamble read from the recorded usage for 5 of 5 sessions\n"),
        "{err}"
    );

    let out = sluice_env(
        &[
            "replay",
            "--from",
            "codex",
            "--format",
            "json",
            "--project",
            "hand-made",
        ],
        &[("CODEX_HOME", home.0.to_str().unwrap())],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON out");
    assert_eq!(report["headline"]["calls"], 4, "{report}");
    let rows = report["bill_check"]["sessions"]
        .as_array()
        .expect("a row per session");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r["recorded_prompt_tokens"].as_u64().is_some_and(|n| n > 0))
    );
    assert!(rows.iter().any(|r| {
        r["session"]
            .as_str()
            .is_some_and(|s| s.ends_with("#segment-1"))
    }));

    // An empty home says where it looked.
    let empty = home.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = sluice_env(
        &["replay", "--from", "codex"],
        &[("CODEX_HOME", empty.to_str().unwrap())],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no Codex sessions here"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn replay_from_gemini_reads_both_chat_layouts() {
    let home = AgentHome::new(
        "gemini",
        ".gemini",
        &[
            "tmp/repo/chats/session-2026-12-07T05-21-7dc97c60.jsonl",
            "tmp/91e33851190acf1a1ac42c0b9326c429debcb78fe8e1fa8c5aa0f49a2c775ebb/chats/session-2026-12-07T05-21-7dc97c60.json",
        ],
    );
    let out = sluice_env(
        &["replay", "--from", "gemini", "--since", "2020-01-01"],
        &[("HOME", home.0.to_str().unwrap())],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("| repo | 1 | 4 | "), "{md}");
    assert!(
        md.contains(
            "| 91e33851190acf1a1ac42c0b9326c429debcb78fe8e1fa8c5aa0f49a2c775ebb | 1 | 4 | "
        ),
        "{md}"
    );
    assert!(md.contains("| **total** | 8 | "), "{md}");
    let err = stderr(&out);
    assert!(
        err.contains("2 gemini-cli sessions (8 calls) from 2 files under "),
        "{err}"
    );
    assert!(
        err.contains("preamble read from the recorded usage for 2 of 2 sessions\n"),
        "{err}"
    );

    // One chat file named on the command line.
    let file = home
        .0
        .join(".gemini/tmp/repo/chats/session-2026-12-07T05-21-7dc97c60.jsonl");
    let out = sluice(
        &[
            "replay",
            "--from",
            "gemini",
            "--format",
            "json",
            file.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON out");
    assert_eq!(report["headline"]["calls"], 4, "{report}");
    assert_eq!(report["projects"][0]["project"], "repo", "{report}");
    let total = &report["bill_check"]["total"];
    assert_eq!(
        total["recorded_prompt_tokens"],
        12048 + 19539 + 19683 + 19882,
        "{total}"
    );
}

#[test]
fn replay_from_claude_code_says_where_it_looked() {
    let empty = std::env::temp_dir().join(format!("sluice-claude-empty-{}", std::process::id()));
    std::fs::create_dir_all(empty.join("projects/-some-project")).unwrap();
    let out = sluice_env(
        &["replay", "--from", "claude-code"],
        &[("CLAUDE_CONFIG_DIR", empty.to_str().unwrap())],
        b"",
    );
    std::fs::remove_dir_all(&empty).ok();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}", empty.join("projects").display())),
        "{err}"
    );
    assert!(err.contains("no Claude Code transcripts here"), "{err}");
    let out = sluice(
        &[
            "replay",
            "--from",
            "claude-code",
            "--since",
            "lately",
            "/tmp",
        ],
        b"",
    );
    assert!(stderr(&out).contains("--since lately"), "{}", stderr(&out));
}

/// `--version` names the build: the version, the commit, the Cargo profile and the allocator,
/// so a binary found in a wheel, an npm package or an image says what it is.
#[test]
fn version_names_the_build() {
    let out = sluice(&["--version"], b"");
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let expected = format!("sluice {} (", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&expected), "{line}");
    assert!(line.contains(" profile, "), "{line}");
    assert!(
        line.trim_end().ends_with("jemalloc)") || line.trim_end().ends_with("system allocator)"),
        "{line}"
    );
}
