//! The actor against a scripted transport: accepted and rejected filters, budgets, deadlines,
//! late results, per-session caching and usage accounting.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use engine::model::{Answer, Ask, Job, ModelConfig, ModelSource, Models, Provider};
use parking_lot::Mutex;

use super::*;

/// Replies in order (the last one repeats), after `delay`; counts calls.
struct Script {
    replies: Mutex<VecDeque<String>>,
    delay: Duration,
    calls: AtomicU64,
}

#[async_trait::async_trait]
impl Transport for Script {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        _body: Vec<u8>,
        _timeout: Duration,
    ) -> Result<(u16, Vec<u8>), crate::TransportError> {
        assert_eq!(url, "http://cheap.test/v1/messages");
        assert!(headers.contains(&("x-api-key".into(), "sk-test".into())));
        self.calls.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.delay).await;
        let reply = {
            let mut replies = self.replies.lock();
            if replies.len() > 1 {
                replies.pop_front().unwrap()
            } else {
                replies.front().cloned().unwrap_or_default()
            }
        };
        let body = serde_json::json!({
            "content": [{"type": "text", "text": reply}],
            "usage": {"input_tokens": 1000, "output_tokens": 100},
        });
        Ok((200, body.to_string().into_bytes()))
    }
}

fn service(replies: &[&str], delay: Duration) -> (LlmService, Arc<Script>) {
    let script = Arc::new(Script {
        replies: Mutex::new(replies.iter().map(|r| r.to_string()).collect()),
        delay,
        calls: AtomicU64::new(0),
    });
    let env = CheapModelEnv {
        model: Some("cheap-1".into()),
        base_url: Some("http://cheap.test".into()),
        api_key: Some("sk-test".into()),
        provider: Some(Provider::Anthropic),
    };
    let options = ServiceOptions {
        price_in: 1.0,
        price_out: 5.0,
        ..ServiceOptions::default()
    };
    (LlmService::start(script.clone(), env, options), script)
}

fn config() -> ModelConfig {
    ModelConfig {
        source: ModelSource::Config,
        deadline_ms: 2000,
        ..ModelConfig::default()
    }
}

const OUTPUT: &str = "test_a PASSED\ntest_b PASSED\ntest_c FAILED\nE  assert 1 == 2\n";

fn ask(models: &RequestModels, key: u128, model: &ModelConfig) -> Answer {
    let job = || Job::Extract {
        output: OUTPUT.into(),
        context: "TASK:\nfix test_c\n\n".into(),
        rewrite: false,
    };
    models.ask(Ask {
        session: "s1",
        key,
        model,
        job: &job,
        submit: true,
    })
}

const KEEP_FAILURES: &str = "```python\ndef filter(text):\n    return \"\\n\".join([l for l in text.split(\"\\n\") if not re_match(\"PASSED\", l)])\n```";

#[tokio::test]
async fn an_accepted_filter_is_cached_per_session_and_costed() {
    let (service, script) = service(&[KEEP_FAILURES], Duration::ZERO);
    let model = config();
    let first = service.for_request(None);
    assert_eq!(ask(&first, 7, &model), Answer::Pending);
    assert_eq!(
        first.wait().await,
        Waited {
            finished: 1,
            timed_out: 0
        }
    );
    assert_eq!(
        ask(&first, 7, &model),
        Answer::Ready("test_c FAILED\nE  assert 1 == 2\n".into())
    );
    // A later turn re-sending the same output: no new call.
    let later = service.for_request(None);
    assert!(matches!(
        ask(&later, 7, &model),
        Answer::Late(_) | Answer::Ready(_)
    ));
    assert_eq!(script.calls.load(Ordering::Relaxed), 1);
    let counts = service.counts();
    assert_eq!(
        (counts.calls, counts.input_tokens, counts.output_tokens),
        (1, 1000, 100)
    );
    assert!(
        (counts.cost_usd - 0.0015).abs() < 1e-9,
        "{}",
        counts.cost_usd
    );
}

#[tokio::test]
async fn a_fabricating_filter_is_rejected() {
    let fabricate = "```python\ndef filter(text):\n    return \"all tests passed\"\n```";
    let (service, _) = service(&[fabricate], Duration::ZERO);
    let models = service.for_request(None);
    assert_eq!(ask(&models, 1, &config()), Answer::Pending);
    models.wait().await;
    assert_eq!(
        ask(&models, 1, &config()),
        Answer::Failed("not deletion-only".into())
    );
    assert_eq!(service.counts().rejected, 1);
}

#[tokio::test]
async fn a_broken_program_gets_one_repair_round() {
    let broken = "```python\ndef filter(text)\n    return text\n```";
    let (service, script) = service(&[broken, KEEP_FAILURES], Duration::ZERO);
    let models = service.for_request(None);
    ask(&models, 2, &config());
    models.wait().await;
    assert!(
        matches!(ask(&models, 2, &config()), Answer::Ready(t) if t.starts_with("test_c FAILED"))
    );
    assert_eq!(script.calls.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_runaway_filter_is_stopped_by_its_budget() {
    let spin = "```python\ndef filter(text):\n    n = 0\n    for i in range(2147483647):\n        n += 1\n    return text\n```";
    let (service, _) = {
        let script = Arc::new(Script {
            replies: Mutex::new([spin.to_string()].into()),
            delay: Duration::ZERO,
            calls: AtomicU64::new(0),
        });
        let options = ServiceOptions {
            sandbox: sandbox::Limits {
                max_steps: 10_000,
                ..sandbox::Limits::DEFAULT
            },
            ..ServiceOptions::default()
        };
        let env = CheapModelEnv {
            model: Some("cheap-1".into()),
            base_url: Some("http://cheap.test".into()),
            api_key: Some("sk-test".into()),
            provider: Some(Provider::Anthropic),
        };
        (LlmService::start(script.clone(), env, options), script)
    };
    let models = service.for_request(None);
    ask(&models, 3, &config());
    models.wait().await;
    assert!(matches!(ask(&models, 3, &config()), Answer::Failed(r) if r.contains("step budget")));
    assert_eq!(service.counts().sandbox_failures, 1);
}

#[tokio::test]
async fn a_slow_model_times_out_and_its_result_is_late_next_turn() {
    let (service, _) = service(&[KEEP_FAILURES], Duration::from_millis(300));
    let quick = ModelConfig {
        deadline_ms: 20,
        ..config()
    };
    let turn = service.for_request(None);
    assert_eq!(ask(&turn, 4, &quick), Answer::Pending);
    assert_eq!(
        turn.wait().await,
        Waited {
            finished: 0,
            timed_out: 1
        }
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let next = service.for_request(None);
    assert!(matches!(ask(&next, 4, &quick), Answer::Late(t) if t.starts_with("test_c")));
    let after = service.for_request(None);
    assert!(
        matches!(ask(&after, 4, &quick), Answer::Ready(_)),
        "late only once"
    );
}

#[tokio::test]
async fn no_model_and_no_submit() {
    let (service, _) = service(&[KEEP_FAILURES], Duration::ZERO);
    let models = service.for_request(None);
    // Incoming source with no incoming request (offline): no model.
    assert_eq!(ask(&models, 5, &ModelConfig::default()), Answer::NoModel);
    let job = || Job::Extract {
        output: OUTPUT.into(),
        context: String::new(),
        rewrite: false,
    };
    let answer = models.ask(Ask {
        session: "s1",
        key: 6,
        model: &config(),
        job: &job,
        submit: false,
    });
    assert_eq!(answer, Answer::Unknown);
    assert_eq!(models.pending(), 0);
}

/// Results kept beyond one service, as the proxy's durable store keeps them.
#[derive(Default)]
struct Kept(Mutex<std::collections::HashMap<(String, u128), String>>);

impl ResultStore for Kept {
    fn load(&self, session: &str, key: u128) -> Option<String> {
        self.0.lock().get(&(session.to_owned(), key)).cloned()
    }
    fn save(&self, session: &str, key: u128, text: &str) {
        self.0
            .lock()
            .insert((session.to_owned(), key), text.to_owned());
    }
}

#[tokio::test]
async fn a_stored_result_serves_another_process_without_a_call() {
    let kept = Arc::new(Kept::default());
    let (first, script) = service(&[KEEP_FAILURES], Duration::ZERO);
    let first = LlmService::start_with(
        script.clone(),
        first.env.as_ref().clone(),
        first.shared.options.clone(),
        Some(kept.clone()),
    );
    let model = config();
    let turn = first.for_request(None);
    assert_eq!(ask(&turn, 9, &model), Answer::Pending);
    turn.wait().await;
    assert_eq!(script.calls.load(Ordering::Relaxed), 1);
    assert_eq!(kept.0.lock().len(), 1, "the accepted result was kept");

    // Another process (a replica, or this one restarted) with the same store.
    let (second, second_script) = service(&[KEEP_FAILURES], Duration::ZERO);
    let second = LlmService::start_with(
        second_script.clone(),
        second.env.as_ref().clone(),
        second.shared.options.clone(),
        Some(kept),
    );
    let next = second.for_request(None);
    assert!(
        matches!(ask(&next, 9, &model), Answer::Late(t) if t.starts_with("test_c")),
        "late once: it may never have been applied"
    );
    assert!(matches!(ask(&next, 9, &model), Answer::Ready(_)));
    assert_eq!(
        second_script.calls.load(Ordering::Relaxed),
        0,
        "no model call"
    );
    // Another session's ask for the same content is not served from it.
    let job = || Job::Extract {
        output: OUTPUT.into(),
        context: String::new(),
        rewrite: false,
    };
    let other = next.ask(Ask {
        session: "s2",
        key: 9,
        model: &model,
        job: &job,
        submit: false,
    });
    assert_eq!(other, Answer::Unknown);
}
