//! Criterion benches for the model path: the sandbox, the deletion-only proof, and the LLM
//! actor's cost on the request path (a cached ask) and per job (everything but the model).
//!
//! Run: `cargo bench -p benches --bench llm`. Figures go to `docs/performance.md`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::model::{Answer, Ask, Job, ModelConfig, ModelSource, Models, Provider};

/// The kind of filter a cheap model writes for a test log: drop the passing lines.
const FILTER: &str = "def filter(text):\n    kept = []\n    for line in text.split(\"\\n\"):\n        if re_match(\" PASSED \", line):\n            continue\n        kept.append(line)\n    return \"\\n\".join(kept)\n";

fn sandbox_and_proof(c: &mut Criterion) {
    let mut group = c.benchmark_group("llm");
    let log = benches::pytest_log(200 << 10, 500);
    let limits = sandbox::Limits::DEFAULT;
    group.bench_function("sandbox/compile", |b| {
        b.iter(|| sandbox::Program::compile(black_box(FILTER), &limits).is_ok())
    });
    let program = sandbox::Program::compile(FILTER, &limits).unwrap();
    let filtered = program.run(&log, &limits).unwrap();
    assert!(filtered.len() < log.len() / 10 && filtered.contains("FAILED"));
    group.throughput(Throughput::Bytes(log.len() as u64));
    group.bench_function("sandbox/line_filter_200kb", |b| {
        b.iter(|| program.run(black_box(&log), &limits).map(|t| t.len()))
    });
    group.bench_function("contain/deletion_only_200kb", |b| {
        b.iter(|| engine::contain::deletion_only(black_box(&log), black_box(&filtered)))
    });
    let rows: Vec<serde_json::Value> = (0..2000)
        .map(|i| serde_json::json!({"id": i, "status": if i % 97 == 0 { "error" } else { "ok" }, "detail": "x".repeat(60)}))
        .collect();
    let json = serde_json::to_string(&rows).unwrap();
    let kept: Vec<&serde_json::Value> = rows.iter().filter(|r| r["status"] == "error").collect();
    let kept = serde_json::to_string(&kept).unwrap();
    group.throughput(Throughput::Bytes(json.len() as u64));
    group.bench_function("contain/json_structural_170kb", |b| {
        b.iter(|| engine::contain::deletion_only(black_box(&json), black_box(&kept)))
    });
    group.finish();
}

/// A model that answers at once with the filter above.
struct Instant;

#[async_trait::async_trait]
impl llm::Transport for Instant {
    async fn post(
        &self,
        _: &str,
        _: &[(String, String)],
        _: Vec<u8>,
        _: Duration,
    ) -> Result<(u16, Vec<u8>), llm::TransportError> {
        let body = serde_json::json!({
            "content": [{"type": "text", "text": format!("```python\n{FILTER}```")}],
            "usage": {"input_tokens": 9000, "output_tokens": 80},
        });
        Ok((200, body.to_string().into_bytes()))
    }
}

fn actor(c: &mut Criterion) {
    let mut group = c.benchmark_group("llm/actor");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let env = llm::CheapModelEnv {
        model: Some("cheap".into()),
        base_url: Some("http://cheap.invalid".into()),
        api_key: Some("k".into()),
        provider: Some(Provider::Anthropic),
    };
    let service = runtime.block_on(async {
        llm::LlmService::start(Arc::new(Instant), env, llm::ServiceOptions::default())
    });
    let model = ModelConfig {
        source: ModelSource::Config,
        deadline_ms: 5000,
        ..ModelConfig::default()
    };
    let log = benches::pytest_log(200 << 10, 500);
    let job = || Job::Extract {
        output: log.clone(),
        context: "TASK:\nfix the failing test\n\n".into(),
        rewrite: false,
    };
    let ask = |models: &llm::RequestModels, key: u128| {
        models.ask(Ask {
            session: "bench",
            key,
            model: &model,
            job: &job,
            submit: true,
        })
    };
    // Every job except the model's own time: queue, prompt, parse, compile, a sandbox run over
    // 200 KB, the proof, the cache.
    let mut key = 0u128;
    group.bench_function("job_200kb_without_model_time", |b| {
        b.iter(|| {
            key += 1;
            let models = service.for_request(None);
            assert_eq!(ask(&models, key), Answer::Pending);
            runtime.block_on(models.wait());
            matches!(ask(&models, key), Answer::Ready(_))
        })
    });
    // The steady state on the request path: the result is cached for this session.
    let models = service.for_request(None);
    group.bench_function("cached_ask", |b| {
        b.iter(|| matches!(ask(&models, 1), Answer::Ready(_) | Answer::Late(_)))
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
}

criterion_group! { name = benches; config = config(); targets = sandbox_and_proof, actor }
criterion_main!(benches);
