//! Criterion benches for the engine: parse + no-op write-back, the embedded default pipeline
//! (whole and phase by phase), each component alone on 200 KB, `skeleton` on a 200 KB source
//! read, a DSL filter on 5 MB, placing the way back on a 1 MiB turn, and the prefix finder
//! against the parse it would spare a turn.
//!
//! Run: `cargo bench -p benches --bench engine`. Figures go to `docs/performance.md`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use engine::apply::apply_body;
use engine::clock::ManualClock;
use engine::config::Config;
use engine::message::Message;
use engine::pipeline::{Pipeline, RunCx};
use engine::store::{MemoryStore, MemoryStoreLimits};
use engine::wire::prefix::Seen;
use engine::wire::{self, Dialect};

fn run_cx(dialect: Dialect) -> RunCx {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new(MemoryStoreLimits::DEFAULT, clock.clone()));
    RunCx::new(dialect, "bench", store, clock)
}

fn parse_and_noop_write_back(c: &mut Criterion) {
    let mut group = c.benchmark_group("wire/parse_noop_write_back");
    let largest_openai = benches::public_bodies(Dialect::OpenAi).remove(0);
    let largest_anthropic = benches::public_bodies(Dialect::Anthropic).remove(0);
    let largest_responses = benches::public_bodies(Dialect::Responses).remove(0);
    let largest_gemini = benches::public_bodies(Dialect::Gemini).remove(0);
    let one_mb = benches::one_megabyte_body();
    for (name, dialect, body) in [
        ("largest_public_openai", Dialect::OpenAi, largest_openai.1),
        (
            "largest_public_anthropic",
            Dialect::Anthropic,
            largest_anthropic.1,
        ),
        (
            "largest_public_responses",
            Dialect::Responses,
            largest_responses.1,
        ),
        ("largest_public_gemini", Dialect::Gemini, largest_gemini.1),
        ("1mb_openai", Dialect::OpenAi, one_mb),
    ] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                let parsed = wire::parse(black_box(&body), dialect).unwrap();
                let out = parsed.write_back(parsed.messages());
                assert_eq!(out.body.len(), body.len());
            });
        });
    }
    group.finish();
}

fn default_pipeline(c: &mut Criterion) {
    let mut group = c.benchmark_group("pipeline/embedded_default");
    let pipeline = Config::embedded().build_pipeline().unwrap();
    let one_mb = benches::one_megabyte_body();
    let largest = benches::public_bodies(Dialect::Anthropic).remove(0).1;
    let largest_responses = benches::public_bodies(Dialect::Responses).remove(0).1;
    let largest_gemini = benches::public_bodies(Dialect::Gemini).remove(0).1;
    for (name, dialect, body) in [
        ("1mb_openai", Dialect::OpenAi, &one_mb),
        ("largest_public_anthropic", Dialect::Anthropic, &largest),
        (
            "largest_public_responses",
            Dialect::Responses,
            &largest_responses,
        ),
        ("largest_public_gemini", Dialect::Gemini, &largest_gemini),
    ] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        // Steady state: the agent re-sends its transcript, so every earlier message's token
        // count is a memo hit. This is what a proxied turn costs after the first.
        let cx = run_cx(dialect);
        group.bench_function(format!("{name}/steady_state"), |b| {
            b.iter(|| apply_body(black_box(body), &pipeline, &cx).body.len());
        });
        // First sight: every token count is computed with the BPE (a new session's first turn).
        group.bench_function(format!("{name}/first_sight"), |b| {
            b.iter_batched(
                engine::tokens::clear_memo,
                |()| apply_body(black_box(body), &pipeline, &cx).body.len(),
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

/// One `run_from` over a fresh copy of `originals`; the copy is setup, not measured.
fn bench_run(
    b: &mut criterion::Bencher<'_>,
    pipeline: &Pipeline,
    originals: &[Message],
    cx: &RunCx,
    batch: BatchSize,
) {
    b.iter_batched_ref(
        || originals.to_vec(),
        |messages| pipeline.run_from(originals, messages, cx).tokens_after,
        batch,
    );
}

/// Where a steady-state 1 MiB turn of the embedded default goes, phase by phase: what
/// `apply_body` does in order, each measured alone so a change can be placed (the sum is close
/// to `pipeline/embedded_default/1mb_openai/steady_state`, less the frees).
/// The guard's per-tool rules (`tools:`), side by side with the same pipeline without them: a
/// rule for every tool that allows every component, so each changed output is matched and
/// nothing is held back (the figure is the check's cost, not a smaller saving).
fn tool_rules(c: &mut Criterion) {
    let mut group = c.benchmark_group("pipeline/tool_rules/largest_public_anthropic");
    let body = benches::public_bodies(Dialect::Anthropic).remove(0).1;
    let plain = Config::embedded().build_pipeline().unwrap();
    let ruled = Config::parse(
        "tools:\n  exclude: [read_secret]\n  rules:\n    \"*\": {components: [format, textclean, dedup, delta, collapse, linecap]}\n",
    )
    .unwrap()
    .build_pipeline()
    .unwrap();
    group.throughput(Throughput::Bytes(body.len() as u64));
    for (name, pipeline) in [("without", &plain), ("with", &ruled)] {
        let cx = run_cx(Dialect::Anthropic);
        let expected = apply_body(&body, &plain, &cx).body.len();
        assert_eq!(apply_body(&body, pipeline, &cx).body.len(), expected);
        group.bench_function(name, |b| {
            b.iter(|| apply_body(black_box(&body), pipeline, &cx).body.len());
        });
    }
    group.finish();
}

fn default_pipeline_phases(c: &mut Criterion) {
    let mut group = c.benchmark_group("phases/embedded_default/1mb_openai");
    let pipeline = Config::embedded().build_pipeline().unwrap();
    let body = benches::one_megabyte_body();
    let cx = run_cx(Dialect::OpenAi);
    let parsed = wire::parse(&body, Dialect::OpenAi).unwrap();
    let mut forwarded = parsed.messages().to_vec();
    pipeline.run_from(parsed.messages(), &mut forwarded, &cx);
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("parse", |b| {
        b.iter(|| wire::parse(black_box(&body), Dialect::OpenAi).unwrap());
    });
    group.bench_function("copy_messages", |b| {
        b.iter(|| parsed.messages().to_vec());
    });
    group.bench_function("run", |b| {
        bench_run(b, &pipeline, parsed.messages(), &cx, BatchSize::LargeInput);
    });
    group.bench_function("write_back", |b| {
        b.iter(|| parsed.write_back(black_box(&forwarded)).body.len());
    });
    group.finish();
}

/// Each component alone on a 200 KB body of real transcript (target: under 1 ms each), steady
/// state: token counts memoized, as on every turn after a session's first.
fn each_component(c: &mut Criterion) {
    let mut group = c.benchmark_group("component/200kb_openai");
    let body = benches::body_of_size(200 << 10);
    // The component's own run over the parsed messages: parsing and splicing are the wire
    // layer's cost, benched above, and the same whatever the pipeline holds.
    let parsed = wire::parse(&body, Dialect::OpenAi).unwrap();
    group.throughput(Throughput::Bytes(body.len() as u64));
    for factory in engine::components::ALL {
        let pipeline = Config::parse(&format!("pipeline: [{}]", factory.name()))
            .unwrap()
            .build_pipeline()
            .unwrap();
        let cx = run_cx(Dialect::OpenAi);
        group.bench_function(factory.name(), |b| {
            bench_run(b, &pipeline, parsed.messages(), &cx, BatchSize::SmallInput);
        });
    }
    group.finish();
}

/// `skeleton` on an older 200 KB read of a source file, each language's fixture repeated to
/// 200 KB and line-numbered like Claude Code's `Read` (Python is the corpus's commonest language;
/// Go and TypeScript show the braced grammars).
///
/// - `parse/*`: the tree-sitter parse and body search alone: what a turn pays when nothing
///   prepared the read (first sight).
/// - `prepared/*`: the component's run on the request path after `Pipeline::prepare` ran on
///   the read off-path, as the proxy does while the upstream answers (target: under 5 ms).
fn skeleton_source(c: &mut Criterion) {
    use engine::message::{Role, ToolCall};
    let mut group = c.benchmark_group("skeleton/200kb_source");
    let pipeline = Config::parse("pipeline: [skeleton]\ncomponents:\n  skeleton: {keep_recent: 0}")
        .unwrap()
        .build_pipeline()
        .unwrap();
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/skeleton");
    for file in ["inventory.py", "server.go", "queue.ts"] {
        let one = std::fs::read_to_string(fixtures.join(file)).unwrap();
        let mut source = String::new();
        while source.len() < 200 << 10 {
            source.push_str(&one);
        }
        let lang = engine::code::Lang::from_path(file).unwrap();
        group.throughput(Throughput::Bytes(source.len() as u64));
        group.bench_function(format!("parse/{file}"), |b| {
            b.iter(|| engine::code::body_lines(black_box(&source), lang, 80).map(|v| v.len()))
        });
        let numbered: String = source
            .lines()
            .enumerate()
            .map(|(i, l)| format!("{:>6}→{l}\n", i + 1))
            .collect();
        let args = serde_json::json!({ "file_path": format!("/repo/{file}") }).to_string();
        let mut messages = vec![Message::text(Role::User, "refactor this")];
        for (id, output) in [("a", numbered.as_str()), ("b", "(the file again, edited)")] {
            let mut call = Message::text(Role::Assistant, "");
            call.tool_calls.push(ToolCall {
                id: id.into(),
                name: "Read".into(),
                arguments: args.clone(),
            });
            let mut tool = Message::tool(id, "Read", output);
            tool.tool_arguments = Some(args.clone());
            messages.extend([call, tool]);
        }
        pipeline.prepare(&messages);
        let check = pipeline.run(&mut messages.clone(), &run_cx(Dialect::Anthropic));
        assert!(check.saved_tokens() > 0, "{file}: skeleton acts");
        // A fresh store per run: with the same store the frozen decision would replay and the
        // component would not run at all.
        group.bench_function(format!("prepared/{file}"), |b| {
            b.iter_batched_ref(
                || (messages.clone(), run_cx(Dialect::Anthropic)),
                |(messages, cx)| pipeline.run(messages, cx).tokens_after,
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

/// The pytest builtin on a 5 MB pytest log (target: well under 100 ms): the regex crate keeps
/// every filter linear in its input.
fn dsl_filter(c: &mut Criterion) {
    let mut group = c.benchmark_group("dsl");
    let set = engine::dsl::FilterSet::builtins().unwrap();
    let pytest = set.filters().iter().find(|f| f.name == "pytest").unwrap();
    let log = benches::pytest_log(5 << 20, 997);
    group.throughput(Throughput::Bytes(log.len() as u64));
    group.bench_function("pytest_5mb", |b| {
        b.iter(|| pytest.apply(black_box(&log)).text.len())
    });
    group.finish();
}

/// The way back on a steady-state 1 MiB Anthropic turn of the embedded default: placing the
/// expand tool when `tools` comes before the edited members (an offset shift) and when it sits
/// between them as LiteLLM writes it (a walk of the rewritten body's top level), and the marker
/// scan a turn that stashed nothing pays.
fn way_back(c: &mut Criterion) {
    let mut group = c.benchmark_group("way_back/1mb_anthropic");
    let pipeline = Config::embedded().build_pipeline().unwrap();
    // Twenty bash calls, each answered by a 50 KB pytest log (every fifth run fails): a
    // transcript the default pipeline cuts, so every edited member changes length.
    let mut turns = vec![serde_json::json!({"role": "user", "content": "fix the failing tests"})];
    for i in 0..20 {
        let id = format!("toolu_{i:02}");
        turns.push(serde_json::json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "bash", "input": {"command": "pytest -q"}}]}));
        turns.push(serde_json::json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": benches::pytest_log(50_000, 5)}]}));
    }
    let system = serde_json::json!([{"type": "text", "text": "You are a coding agent."}]);
    let member = |key: &str| {
        let value = match key {
            "system" => system.clone(),
            "tools" => serde_json::json!([{"name": "bash", "input_schema": {"type": "object"}}]),
            "messages" => serde_json::Value::Array(turns.clone()),
            _ => serde_json::Value::from("claude-sonnet-4-5"),
        };
        format!("{}:{value}", serde_json::Value::from(key))
    };
    for (name, order) in [
        ("tools_first", ["model", "tools", "system", "messages"]),
        ("litellm_order", ["model", "messages", "tools", "system"]),
    ] {
        let members: Vec<String> = order.iter().map(|k| member(k)).collect();
        let body = format!("{{{},\"max_tokens\":1024}}", members.join(",")).into_bytes();
        let cx = run_cx(Dialect::Anthropic);
        let parsed = wire::parse(&body, Dialect::Anthropic).unwrap();
        let applied = engine::apply::apply_parsed(&parsed, &pipeline, &cx);
        assert!(
            applied.body.len() < body.len(),
            "{name}: the default pipeline cut nothing"
        );
        assert!(
            matches!(
                engine::way_back::inject(&parsed, &applied.body),
                Ok(engine::way_back::Injected::Added(_))
            ),
            "{name}: the tool was not placed"
        );
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("inject/{name}"), |b| {
            b.iter(|| engine::way_back::inject(&parsed, black_box(&applied.body)).is_ok());
        });
        if name == "tools_first" {
            group.bench_function("carries_marker", |b| {
                b.iter(|| engine::way_back::carries_marker(black_box(&body)));
            });
        }
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
}

/// The exact o200k count of a new tool output, as the request path pays it the turn the output
/// first appears: the tokenizer crate's own `count`, sluice's count with its piece
/// counts empty (a process that has counted nothing), and with them warm from counting this
/// output before (the best case). The outputs are the largest tool output of the largest public
/// OpenAI run (ASCII) and of the largest Claude Code session (a file read: an arrow, not ASCII,
/// after every line number).
fn first_sight_count(c: &mut Criterion) {
    for (folder, dialect) in [
        ("public", Dialect::OpenAi),
        ("claude-code", Dialect::Anthropic),
    ] {
        let body = benches::corpus_bodies(folder, dialect).remove(0).1;
        let parsed = wire::parse(&body, dialect).unwrap();
        let text = parsed
            .messages()
            .iter()
            .filter(|m| m.is_tool())
            .map(|m| m.content.clone())
            .max_by_key(String::len)
            .unwrap();
        let name = format!("tokens/largest_{}_tool_output", folder.replace('-', "_"));
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function("bpe_openai_count", |b| {
            b.iter(|| bpe_openai::o200k_base().count(black_box(text.as_str())));
        });
        group.bench_function("count_uncached/pieces_empty", |b| {
            b.iter_batched(
                engine::tokens::clear_memo,
                |()| engine::tokens::count_uncached(black_box(&text)),
                BatchSize::PerIteration,
            );
        });
        group.bench_function("count_uncached/pieces_warm", |b| {
            b.iter(|| engine::tokens::count_uncached(black_box(&text)));
        });
        group.finish();
    }
}

/// The last two turns of a session: the history without its newest step, then the whole.
fn last_two_turns(body: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut value: serde_json::Value = serde_json::from_slice(body).unwrap();
    let whole = serde_json::to_vec(&value).unwrap();
    let messages = value["messages"].as_array_mut().unwrap();
    let keep = messages.len().saturating_sub(2);
    messages.truncate(keep);
    (serde_json::to_vec(&value).unwrap(), whole)
}

/// What an incremental turn does instead of parsing (`common` against the last turn's `Seen`),
/// beside the parse itself and the cost of keeping the `Seen` for the next turn.
fn prefix_finder(c: &mut Criterion) {
    let mut group = c.benchmark_group("prefix");
    for (name, dialect) in [
        ("largest_public_openai", Dialect::OpenAi),
        ("largest_public_anthropic", Dialect::Anthropic),
    ] {
        let (last, next) = last_two_turns(&benches::public_bodies(dialect).remove(0).1);
        let seen_of = |body: &[u8]| {
            let parsed = wire::parse(body, dialect).unwrap();
            Seen::of(std::str::from_utf8(body).unwrap(), parsed.messages_span())
        };
        let seen = seen_of(&last);
        assert_eq!(seen.common(&next).matched, seen.len());
        group.throughput(Throughput::Bytes(next.len() as u64));
        group.bench_function(format!("{name}/parse"), |b| {
            b.iter(|| {
                wire::parse(black_box(&next), dialect)
                    .unwrap()
                    .messages()
                    .len()
            });
        });
        group.bench_function(format!("{name}/common"), |b| {
            b.iter(|| seen.common(black_box(&next)).matched);
        });
        group.bench_function(format!("{name}/parse_and_keep"), |b| {
            b.iter(|| seen_of(black_box(&next)).len());
        });
        // The resumed parse a live turn does now, and keeping its continuation for the next:
        // the last turn's continuation is made outside the timing (a turn takes it from the
        // memo), so the figure is what the request path pays.
        let text = std::str::from_utf8(&next).unwrap();
        let continuation = || wire::parse(&last, dialect).unwrap().into_continuation(None);
        group.bench_function(format!("{name}/resumed"), |b| {
            b.iter_batched(
                continuation,
                |earlier| {
                    let resumed =
                        wire::parse_continuing(black_box(text), dialect, earlier).unwrap();
                    resumed.parsed.messages().len()
                },
                BatchSize::LargeInput,
            );
        });
        group.bench_function(format!("{name}/resumed_and_keep"), |b| {
            b.iter_batched(
                continuation,
                |earlier| {
                    let resumed =
                        wire::parse_continuing(black_box(text), dialect, earlier).unwrap();
                    let kept = Some((&resumed.seen, resumed.kept));
                    resumed.parsed.into_continuation(kept).entries()
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = config(); targets = first_sight_count, parse_and_noop_write_back, default_pipeline, tool_rules, default_pipeline_phases, each_component, skeleton_source, dsl_filter, way_back, prefix_finder }
criterion_main!(benches);
