//! The bounded off-path worker pool: a fixed set of threads draining a bounded queue.
//!
//! Work that must never slow a request (observe mode's shadow turns, the preparer's memo
//! filling) goes here. `try_submit` never waits: when the queue is full, or a job with the same
//! key is already queued or running, the job is dropped and counted. A panicking job is contained
//! and counted; the worker carries on. Dropping the pool closes the queue and joins the workers,
//! so a stopped pool leaves no thread behind.

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Sender, TrySendError, bounded};
use parking_lot::Mutex;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Why a job was not queued. Either way the caller carries on: skip and count, never wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The queue is full.
    Full,
    /// A job with the same key is already queued or running.
    Duplicate,
}

/// Counters for `/stats` (`observe_queue`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    pub queued: u64,
    pub pending: u64,
    pub processed: u64,
    pub dropped: u64,
    pub errors: u64,
}

#[derive(Debug, Default)]
struct Counters {
    queued: AtomicU64,
    processed: AtomicU64,
    dropped: AtomicU64,
    errors: AtomicU64,
}

/// A bounded pool of worker threads.
pub struct WorkerPool {
    // Keep `sender` above `workers`: it must be dropped (closing the queue) before the workers
    // are joined, or the join would wait forever.
    sender: Option<Sender<(u64, Job)>>,
    workers: Vec<JoinHandle<()>>,
    in_flight: Arc<Mutex<HashSet<u64>>>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("workers", &self.workers.len())
            .field("stats", &self.stats())
            .finish()
    }
}

impl WorkerPool {
    /// Starts `workers` threads (at least one) behind a queue of `max_queue` jobs.
    ///
    /// # Panics
    /// When the OS refuses to start a thread, at start-up only.
    pub fn new(name: &str, workers: usize, max_queue: usize) -> WorkerPool {
        let (sender, receiver) = bounded::<(u64, Job)>(max_queue.max(1));
        let in_flight: Arc<Mutex<HashSet<u64>>> = Arc::default();
        let counters: Arc<Counters> = Arc::default();
        let workers = (0..workers.max(1))
            .map(|i| {
                let receiver = receiver.clone();
                let in_flight = in_flight.clone();
                let counters = counters.clone();
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || {
                        for (key, job) in receiver {
                            if catch_unwind(AssertUnwindSafe(job)).is_err() {
                                counters.errors.fetch_add(1, Ordering::Relaxed);
                            }
                            counters.processed.fetch_add(1, Ordering::Relaxed);
                            in_flight.lock().remove(&key);
                        }
                    })
                    .expect("start a pool worker thread")
            })
            .collect();
        WorkerPool {
            sender: Some(sender),
            workers,
            in_flight,
            counters,
        }
    }

    /// Queues `job` under `key` without waiting.
    ///
    /// # Errors
    /// [`Rejected`]; the job was dropped and counted.
    pub fn try_submit(
        &self,
        key: u64,
        job: impl FnOnce() + Send + 'static,
    ) -> Result<(), Rejected> {
        let Some(sender) = &self.sender else {
            return Err(Rejected::Full);
        };
        if !self.in_flight.lock().insert(key) {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(Rejected::Duplicate);
        }
        match sender.try_send((key, Box::new(job))) {
            Ok(()) => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.in_flight.lock().remove(&key);
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                Err(Rejected::Full)
            }
        }
    }

    pub fn stats(&self) -> PoolStats {
        let queued = self.counters.queued.load(Ordering::Relaxed);
        let processed = self.counters.processed.load(Ordering::Relaxed);
        PoolStats {
            queued,
            pending: queued.saturating_sub(processed),
            processed,
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            errors: self.counters.errors.load(Ordering::Relaxed),
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        // Close the queue first, so each worker's loop ends once the queue is drained.
        drop(self.sender.take());
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_full_queue_drops_and_never_blocks() {
        let pool = WorkerPool::new("test", 1, 2);
        let (release, gate) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        // Occupy the single worker, then fill the queue.
        let g = gate.clone();
        pool.try_submit(1, move || {
            let _ = g.lock().recv();
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        pool.try_submit(2, || {}).unwrap();
        pool.try_submit(3, || {}).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(pool.try_submit(4, || {}), Err(Rejected::Full));
        assert!(started.elapsed() < Duration::from_millis(50), "never waits");
        assert_eq!(
            pool.try_submit(2, || {}),
            Err(Rejected::Duplicate),
            "same key in flight"
        );
        release.send(()).unwrap();
        drop(pool); // Drains and joins.
    }

    #[test]
    fn a_panicking_job_is_contained_and_counted() {
        let pool = WorkerPool::new("test", 1, 8);
        pool.try_submit(1, || panic!("job bug")).unwrap();
        let (tx, rx) = mpsc::channel();
        pool.try_submit(2, move || tx.send(42).unwrap()).unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(42),
            "the worker survived"
        );
        let stats = pool.stats();
        assert_eq!((stats.errors, stats.processed >= 1), (1, true));
    }

    #[test]
    fn a_stopped_pool_leaves_no_threads() {
        let done = Arc::new(AtomicU64::new(0));
        let pool = WorkerPool::new("test", 2, 64);
        for key in 0..20 {
            let done = done.clone();
            pool.try_submit(key, move || {
                done.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
        let handles: Vec<_> = pool.workers.iter().map(|w| w.thread().id()).collect();
        drop(pool);
        assert_eq!(
            done.load(Ordering::Relaxed),
            20,
            "queued work is drained before the stop"
        );
        assert_eq!(handles.len(), 2);
    }
}
