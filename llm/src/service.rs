//! The LLM actor: one tokio task with a bounded queue that runs model jobs for every session,
//! and the per-session result cache the engine's asks read.
//!
//! A tokio task with a bounded `mpsc` mailbox, not an actix actor, for the same reasons as the
//! session actors (docs/dev/crates.md): its callers are hyper handlers on tokio, it needs no
//! supervision tree, and a full mailbox must refuse at once (`try_send`) rather than wait. Jobs
//! run concurrently up to a permit count (4, like the reference's `CHEAP_MODEL_CONCURRENT`).
//!
//! The engine asks synchronously and never blocks ([`RequestModels`] implements
//! [`engine::model::Models`]): a cached result answers at once; a missing one is queued and
//! answered [`Answer::Pending`]; the proxy then awaits [`RequestModels::wait`] up to the
//! model's deadline and runs the pipeline again. Results are cached per session by the job's
//! content key, so the same output on a later turn reuses its result with no call; a result
//! that arrives after its request gave up is answered [`Answer::Late`] once, on the next ask.
//!
//! With a [`ResultStore`] (the proxy's durable state store), every accepted result is also
//! written there, and an ask this process has no entry for looks there before it calls the
//! model: a result one replica paid for serves the next turn on any replica, and a restart does
//! not pay for it again.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use engine::model::{Answer, Ask, Job, Models};
use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore, mpsc};

use crate::client::{self, CheapModelEnv, Endpoint, Incoming, LlmError, Rejection, Transport};
use crate::prompt;

/// Where model-written filters run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Isolation {
    /// In this process: only for trusted programs and tests. A program that allocates without
    /// bound in one step aborts the process.
    #[default]
    InProcess,
    /// In a child process: `command args...` must reach `sandbox::child_main` (the `sluice`
    /// binary answers `sandbox::CHILD_ARG`). What `sluice serve` uses.
    Child {
        command: std::path::PathBuf,
        args: Vec<String>,
    },
}

/// Queue and cache sizes.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Jobs running at once. Default 4.
    pub concurrency: usize,
    /// Jobs waiting. Default 64; a full queue answers `queue_full` (the component falls back).
    pub queue: usize,
    /// Cached results across sessions. Default 4,096; the oldest finished go first.
    pub cache_entries: usize,
    /// Retries of a failed call (transport error, 429, 5xx). Default 2.
    pub retries: u32,
    /// $/MTok of the cheap model's input and output (`CHEAP_MODEL_PRICE_IN`, `_OUT`; defaults
    /// 1.0 and 5.0, a Haiku-class list price).
    pub price_in: f64,
    pub price_out: f64,
    pub sandbox: sandbox::Limits,
    pub isolation: Isolation,
}

impl Default for ServiceOptions {
    fn default() -> ServiceOptions {
        let price = |name: &str, default: f64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        ServiceOptions {
            concurrency: 4,
            queue: 64,
            cache_entries: 4096,
            retries: 2,
            price_in: price("CHEAP_MODEL_PRICE_IN", 1.0),
            price_out: price("CHEAP_MODEL_PRICE_OUT", 5.0),
            sandbox: sandbox::Limits::DEFAULT,
            isolation: Isolation::InProcess,
        }
    }
}

/// What the model work cost and came to, for `/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LlmCounts {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub errors: u64,
    /// Results refused by the acceptance checks (not deletion-only, empty, not smaller).
    pub rejected: u64,
    /// Filters the sandbox stopped (a budget, a syntax or runtime error after the repair round).
    pub sandbox_failures: u64,
    /// Jobs refused because the queue was full.
    pub queue_full: u64,
    /// Jobs a request stopped waiting for at their deadline (their results serve a later turn).
    pub timeouts: u64,
    pub cost_usd: f64,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    errors: AtomicU64,
    rejected: AtomicU64,
    sandbox_failures: AtomicU64,
    queue_full: AtomicU64,
    timeouts: AtomicU64,
    cost_micro_usd: AtomicU64,
}

type Key = (String, u128);

enum State {
    Pending,
    Done(Result<String, LlmError>),
}

struct Entry {
    state: State,
    /// The request that submitted the job.
    submitted_by: u64,
    /// Whether a request other than the submitter has been given the result.
    handed_on: bool,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<Key, Entry>,
    order: VecDeque<Key>,
}

/// Where accepted results outlive this process (keyed by session and content key).
pub trait ResultStore: Send + Sync {
    fn load(&self, session: &str, key: u128) -> Option<String>;
    /// Must not block: a durable implementation writes behind.
    fn save(&self, session: &str, key: u128, text: &str);
}

/// A stored result is handed out as late (once) by a request no one is: request ids start at 1.
const FROM_STORE: u64 = 0;

impl Cache {
    /// Drops the oldest finished entries past `limit`.
    fn trim(&mut self, limit: usize) {
        while self.order.len() > limit.max(1) {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            // A running job keeps its entry: its result is on its way to a waiting request.
            if matches!(
                self.entries.get(&oldest),
                Some(Entry {
                    state: State::Pending,
                    ..
                })
            ) {
                self.order.push_back(oldest);
                break;
            }
            self.entries.remove(&oldest);
        }
    }
}

struct Shared {
    cache: Mutex<Cache>,
    results: Option<Arc<dyn ResultStore>>,
    done: Notify,
    counters: Counters,
    options: ServiceOptions,
}

struct JobMsg {
    key: Key,
    endpoint: Endpoint,
    job: Job,
    max_tokens: u32,
    timeout: Duration,
}

/// The LLM actor's handle. Cheap to clone.
#[derive(Clone)]
pub struct LlmService {
    sender: mpsc::Sender<JobMsg>,
    shared: Arc<Shared>,
    env: Arc<CheapModelEnv>,
    requests: Arc<AtomicU64>,
}

impl std::fmt::Debug for LlmService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmService")
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

impl LlmService {
    /// Starts the actor on the current tokio runtime. It stops when the last handle is dropped.
    pub fn start(
        transport: Arc<dyn Transport>,
        env: CheapModelEnv,
        options: ServiceOptions,
    ) -> LlmService {
        Self::start_with(transport, env, options, None)
    }

    /// [`LlmService::start`], keeping accepted results in `results` as well.
    pub fn start_with(
        transport: Arc<dyn Transport>,
        env: CheapModelEnv,
        options: ServiceOptions,
        results: Option<Arc<dyn ResultStore>>,
    ) -> LlmService {
        let (sender, mut receiver) = mpsc::channel::<JobMsg>(options.queue.max(1));
        let shared = Arc::new(Shared {
            cache: Mutex::new(Cache::default()),
            results,
            done: Notify::new(),
            counters: Counters::default(),
            options,
        });
        let worker = shared.clone();
        tokio::spawn(async move {
            let permits = Arc::new(Semaphore::new(worker.options.concurrency.max(1)));
            while let Some(message) = receiver.recv().await {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                let (shared, transport) = (worker.clone(), transport.clone());
                tokio::spawn(async move {
                    let result = run_job(&shared, transport.as_ref(), &message).await;
                    drop(permit);
                    shared.finish(&message.key, result);
                });
            }
        });
        LlmService {
            sender,
            shared,
            env: Arc::new(env),
            requests: Arc::new(AtomicU64::new(1)),
        }
    }

    /// The engine-facing view for one proxied request.
    pub fn for_request(&self, incoming: Option<Incoming>) -> RequestModels {
        RequestModels {
            service: self.clone(),
            incoming,
            request: self.requests.fetch_add(1, Ordering::Relaxed),
            waiting: Mutex::new(Vec::new()),
            submitted: AtomicU64::new(0),
        }
    }

    /// Counts jobs a request stopped waiting for at their deadline.
    pub fn record_timeouts(&self, n: u64) {
        self.shared
            .counters
            .timeouts
            .fetch_add(n, Ordering::Relaxed);
    }

    pub fn counts(&self) -> LlmCounts {
        let c = &self.shared.counters;
        LlmCounts {
            calls: c.calls.load(Ordering::Relaxed),
            input_tokens: c.input_tokens.load(Ordering::Relaxed),
            output_tokens: c.output_tokens.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            sandbox_failures: c.sandbox_failures.load(Ordering::Relaxed),
            queue_full: c.queue_full.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            cost_usd: c.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

impl Shared {
    fn finish(&self, key: &Key, result: Result<String, LlmError>) {
        if let (Some(results), Ok(text)) = (&self.results, &result) {
            results.save(&key.0, key.1, text);
        }
        if let Some(entry) = self.cache.lock().entries.get_mut(key) {
            entry.state = State::Done(result);
        }
        self.done.notify_waiters();
    }

    fn record_call(&self, completion: &client::Completion) {
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.input_tokens
            .fetch_add(completion.input_tokens, Ordering::Relaxed);
        c.output_tokens
            .fetch_add(completion.output_tokens, Ordering::Relaxed);
        let usd = completion.input_tokens as f64 * self.options.price_in / 1e6
            + completion.output_tokens as f64 * self.options.price_out / 1e6;
        c.cost_micro_usd
            .fetch_add((usd * 1e6).round() as u64, Ordering::Relaxed);
    }

    fn count(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// One model call, counted.
async fn call(
    shared: &Shared,
    transport: &dyn Transport,
    message: &JobMsg,
    system: &str,
    user: &str,
) -> Result<String, LlmError> {
    match client::complete(
        transport,
        &message.endpoint,
        system,
        user,
        message.max_tokens,
        message.timeout,
        shared.options.retries,
    )
    .await
    {
        Ok(completion) => {
            shared.record_call(&completion);
            Ok(completion.text)
        }
        Err(reason) => {
            shared.count(&shared.counters.errors);
            Err(reason)
        }
    }
}

async fn run_job(
    shared: &Shared,
    transport: &dyn Transport,
    message: &JobMsg,
) -> Result<String, LlmError> {
    match &message.job {
        Job::Summarize {
            transcript,
            task,
            level,
        } => {
            let reply = call(
                shared,
                transport,
                message,
                &prompt::summarize_system(*level),
                &prompt::summarize_user(transcript, task),
            )
            .await?;
            if reply.trim().is_empty() {
                return Err(LlmError::EmptyReply);
            }
            Ok(prompt::summary_of(&reply))
        }
        Job::Extract {
            output,
            context,
            rewrite,
        } => {
            let reply = call(
                shared,
                transport,
                message,
                prompt::EXTRACT_SYSTEM,
                &prompt::extract_user(output, context),
            )
            .await?;
            let mut program = prompt::program_of(&reply);
            let mut ran = run_filter(shared, &program, output).await;
            // One repair round for a program that does not compile or fails at runtime: the
            // model sees its program and the error, not the data again.
            if let Err(
                error @ (sandbox::SandboxError::Syntax(_)
                | sandbox::SandboxError::Runtime(_)
                | sandbox::SandboxError::NoFilter
                | sandbox::SandboxError::NotAString(_)),
            ) = &ran
            {
                let reply = call(
                    shared,
                    transport,
                    message,
                    prompt::EXTRACT_SYSTEM,
                    &prompt::repair_user(&program, &error.to_string()),
                )
                .await?;
                program = prompt::program_of(&reply);
                ran = run_filter(shared, &program, output).await;
            }
            let text = ran.map_err(|e| {
                shared.count(&shared.counters.sandbox_failures);
                LlmError::Sandbox(e)
            })?;
            let reject = |why: Rejection| {
                shared.count(&shared.counters.rejected);
                Err(LlmError::Rejected(why))
            };
            if text.trim().is_empty() {
                return reject(Rejection::Empty);
            }
            if !rewrite && !engine::contain::deletion_only(output, &text) {
                return reject(Rejection::NotDeletionOnly);
            }
            if text.len() >= output.len() {
                return reject(Rejection::NotSmaller);
            }
            Ok(text)
        }
    }
}

/// Compiles and runs a filter on a blocking thread (the sandbox is CPU-bound, and a child
/// process is waited for synchronously).
async fn run_filter(
    shared: &Shared,
    program: &str,
    input: &str,
) -> Result<String, sandbox::SandboxError> {
    let (program, input) = (program.to_owned(), input.to_owned());
    let (limits, isolation) = (shared.options.sandbox, shared.options.isolation.clone());
    tokio::task::spawn_blocking(move || match isolation {
        Isolation::InProcess => sandbox::Program::compile(&program, &limits)?.run(&input, &limits),
        Isolation::Child { command, args } => {
            sandbox::run_in_child(&command, &args, &program, &input, &limits)
        }
    })
    .await
    .unwrap_or_else(|_| {
        Err(sandbox::SandboxError::Runtime(
            "the sandbox thread panicked".into(),
        ))
    })
}

/// The model service as one proxied request sees it.
pub struct RequestModels {
    service: LlmService,
    incoming: Option<Incoming>,
    request: u64,
    /// Keys this request is waiting on, with their deadlines.
    waiting: Mutex<Vec<(Key, Duration)>>,
    /// Jobs this request submitted (not joined, not cached).
    submitted: AtomicU64,
}

impl std::fmt::Debug for RequestModels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestModels")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

/// What waiting came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waited {
    /// Jobs that finished within the deadline.
    pub finished: usize,
    /// Jobs still running at the deadline (their results serve the next turn).
    pub timed_out: usize,
}

impl RequestModels {
    /// Jobs this request's asks are waiting on.
    pub fn pending(&self) -> usize {
        self.waiting.lock().len()
    }

    /// Waits for this request's pending jobs, up to the longest of their deadlines.
    pub async fn wait(&self) -> Waited {
        let waiting: Vec<(Key, Duration)> = std::mem::take(&mut *self.waiting.lock());
        let Some(deadline) = waiting.iter().map(|(_, d)| *d).max() else {
            return Waited::default();
        };
        let shared = &self.service.shared;
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let notified = shared.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let running = {
                let cache = shared.cache.lock();
                waiting
                    .iter()
                    .filter(|(key, _)| {
                        matches!(
                            cache.entries.get(key),
                            Some(Entry {
                                state: State::Pending,
                                ..
                            })
                        )
                    })
                    .count()
            };
            if running == 0 {
                return Waited {
                    finished: waiting.len(),
                    timed_out: 0,
                };
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return Waited {
                    finished: waiting.len() - running,
                    timed_out: running,
                };
            }
        }
    }
}

impl RequestModels {
    /// A result this process has no entry for, from the result store: cached as if a request
    /// nobody is had submitted it, so it is handed out as late once (it may never have been
    /// applied), then as ready.
    fn stored(&self, key: &Key) -> Option<Answer> {
        let shared = &self.service.shared;
        let text = shared.results.as_ref()?.load(&key.0, key.1)?;
        let mut cache = shared.cache.lock();
        if !cache.entries.contains_key(key) {
            cache.entries.insert(
                key.clone(),
                Entry {
                    state: State::Done(Ok(text.clone())),
                    submitted_by: FROM_STORE,
                    handed_on: true,
                },
            );
            cache.order.push_back(key.clone());
            cache.trim(shared.options.cache_entries);
        }
        Some(Answer::Late(text))
    }
}

impl Models for RequestModels {
    fn submitted(&self) -> usize {
        usize::try_from(self.submitted.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    fn ask(&self, ask: Ask<'_>) -> Answer {
        let Some(endpoint) = client::resolve(ask.model, self.incoming.as_ref(), &self.service.env)
        else {
            return Answer::NoModel;
        };
        let key: Key = (ask.session.to_owned(), ask.key);
        let shared = &self.service.shared;
        {
            let mut cache = shared.cache.lock();
            if let Some(entry) = cache.entries.get_mut(&key) {
                return match &entry.state {
                    // A poll (`submit: false`) never waits: only the request that asked for
                    // the work, or one that may still use it on this turn, holds its response.
                    State::Pending => {
                        if ask.submit {
                            self.waiting.lock().push((key, ask.model.deadline()));
                        }
                        Answer::Pending
                    }
                    State::Done(Err(reason)) => Answer::Failed(reason.to_string()),
                    State::Done(Ok(text))
                        if entry.submitted_by != self.request && !entry.handed_on =>
                    {
                        entry.handed_on = true;
                        Answer::Late(text.clone())
                    }
                    State::Done(Ok(text)) => Answer::Ready(text.clone()),
                };
            }
        }
        if let Some(text) = self.stored(&key) {
            return text;
        }
        if !ask.submit {
            return Answer::Unknown;
        }
        let message = JobMsg {
            key: key.clone(),
            endpoint,
            job: (ask.job)(),
            max_tokens: ask.model.max_tokens,
            timeout: Duration::from_millis(ask.model.timeout_ms),
        };
        let mut cache = shared.cache.lock();
        // Another request may have submitted the same job since the lookup: join it rather
        // than pay twice (and risk a second, different result for one key).
        if cache.entries.contains_key(&key) {
            drop(cache);
            self.waiting.lock().push((key, ask.model.deadline()));
            return Answer::Pending;
        }
        // Inserted before sending, under the lock: the job cannot finish before its entry
        // exists.
        cache.entries.insert(
            key.clone(),
            Entry {
                state: State::Pending,
                submitted_by: self.request,
                handed_on: false,
            },
        );
        if self.service.sender.try_send(message).is_err() {
            cache.entries.remove(&key);
            shared.count(&shared.counters.queue_full);
            return Answer::Failed("queue_full".into());
        }
        self.submitted.fetch_add(1, Ordering::Relaxed);
        cache.order.push_back(key.clone());
        cache.trim(shared.options.cache_entries);
        drop(cache);
        self.waiting.lock().push((key, ask.model.deadline()));
        Answer::Pending
    }
}

#[cfg(test)]
mod tests;
