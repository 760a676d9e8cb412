//! Claude Code's own transcripts, as the repository keeps them
//! (`corpus/transcripts/claude-code/projects`), read back into requests and checked against
//! the 20 sessions `corpus/claude-code` was rebuilt from them: one request per call of
//! `meta.json`'s `calls` (the same definition as its `llm_calls`: a distinct `message.id` +
//! `requestId` on the live branch), each with its recorded time, its message count and its
//! usage, and the last request's messages equal to `anthropic.json`'s but for the
//! `cache_control` breakpoints that corpus added.

use std::path::{Path, PathBuf};

use modes::replay::claude_code::{self, SessionLog};
use serde_json::Value;

/// The repository's own copy: `SLUICE_CORPUS` may name a larger set without the transcripts.
fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

fn transcript_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for e in entries {
            if e.is_dir() {
                walk(&e, out);
            } else if e.extension().is_some_and(|x| x == "jsonl") {
                out.push(e);
            }
        }
    }
    let mut out = Vec::new();
    walk(&corpus().join("transcripts/claude-code/projects"), &mut out);
    out
}

/// The corpus session rebuilt from `file`: its `meta.json` names the source path.
fn rebuilt_from(file: &Path) -> (PathBuf, Value) {
    let name = file.file_name().unwrap().to_str().unwrap();
    for entry in std::fs::read_dir(corpus().join("claude-code")).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join("meta.json")) else {
            continue;
        };
        let meta: Value = serde_json::from_str(&text).unwrap();
        if meta["source"]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with(&format!("/{name}")))
        {
            return (dir, meta);
        }
    }
    panic!("no corpus session rebuilt from {}", file.display());
}

fn read(file: &Path) -> SessionLog {
    let bytes = std::fs::read(file).unwrap();
    claude_code::read(&file.display().to_string(), &bytes)
}

fn without_breakpoints(mut messages: Value) -> Value {
    for m in messages.as_array_mut().unwrap() {
        for b in m["content"].as_array_mut().into_iter().flatten() {
            if let Some(b) = b.as_object_mut() {
                b.remove("cache_control");
            }
        }
    }
    messages
}

#[test]
fn every_real_transcript_gives_the_calls_its_corpus_session_recorded() {
    let files = transcript_files();
    assert_eq!(files.len(), 20);
    for file in &files {
        let (dir, meta) = rebuilt_from(file);
        let t = read(file);
        let at = file.display();
        assert!(
            t.malformed.is_empty() && t.half_written_line.is_none(),
            "{at}"
        );
        let calls: Vec<_> = t.calls().collect();
        let recorded = meta["calls"].as_array().unwrap();
        assert_eq!(
            calls.len() as u64,
            meta["llm_calls"].as_u64().unwrap(),
            "{at}"
        );
        assert_eq!(
            t.segments.len() as u64,
            meta["compactions_on_branch"].as_u64().unwrap() + 1,
            "{at}"
        );
        for (k, (call, want)) in calls.iter().zip(recorded).enumerate() {
            assert_eq!(
                call.message_id,
                want["message_id"].as_str().unwrap(),
                "{at} call {k}"
            );
            // One call of cctrace-phase0 was logged without a requestId: the reader keys it on
            // its message id alone.
            assert_eq!(
                call.request_id,
                want["request_id"].as_str().unwrap_or(""),
                "{at} call {k}"
            );
            assert_eq!(
                call.timestamp,
                want["ts_request_approx"].as_str().unwrap(),
                "{at} call {k}"
            );
            assert_eq!(
                call.messages as u64,
                want["prefix_messages"].as_u64().unwrap(),
                "{at} call {k}"
            );
            assert_eq!(
                call.usage.prompt_tokens(),
                want["prompt_tokens_total"].as_u64().unwrap(),
                "{at} call {k}"
            );
            let u = &want["usage"];
            assert_eq!(
                call.usage.output_tokens,
                u["output_tokens"].as_u64().unwrap(),
                "{at} call {k}"
            );
            assert_eq!(
                call.usage.cache_read_input_tokens,
                u["cache_read_input_tokens"].as_u64().unwrap(),
                "{at} call {k}"
            );
            assert!(call.at_ms.is_some(), "{at} call {k}");
            let body: Value = serde_json::from_slice(&call.body).unwrap();
            assert_eq!(body["model"], want["model"], "{at} call {k}");
            engine::wire::parse(&call.body, engine::wire::Dialect::Anthropic)
                .unwrap_or_else(|e| panic!("{at} call {k}: {e}"));
        }
        // The corpus's final request: the last call's, or the conversation after its last
        // input when no call answered it.
        let rebuilt = integration_tests::read_corpus_file(&dir.join("anthropic.json")).unwrap();
        let rebuilt: Value = serde_json::from_slice(&rebuilt).unwrap();
        let last: Value = serde_json::from_slice(&calls.last().unwrap().body).unwrap();
        if meta["final_request_kind"]
            .as_str()
            .is_some_and(|k| k.starts_with("before-last-reply"))
        {
            assert_eq!(
                without_breakpoints(last["messages"].clone()),
                without_breakpoints(rebuilt["messages"].clone()),
                "{at}"
            );
        }
        let sidechain = file.to_str().unwrap().contains("/subagents/");
        assert_eq!(t.sidechain, sidechain, "{at}");
    }
}

#[test]
fn usage_is_counted_once_per_response_though_logged_per_block() {
    // Claude Code writes a response over several records that repeat its usage: summing the
    // records would count it several times.
    let file = transcript_files()
        .into_iter()
        .find(|f| f.to_str().unwrap().contains("07f2e15c"))
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let records = text
        .lines()
        .filter(|l| l.contains("\"type\":\"assistant\""))
        .count();
    let t = read(&file);
    assert!(
        records > t.calls().count(),
        "{records} records, more than the calls"
    );
    let (_, meta) = rebuilt_from(&file);
    let want: u64 = meta["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["prompt_tokens_total"].as_u64().unwrap())
        .sum();
    let got: u64 = t.calls().map(|c| c.usage.prompt_tokens()).sum();
    assert_eq!(got, want);
}
