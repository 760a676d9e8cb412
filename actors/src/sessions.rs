//! Session actors: one tokio task per session key, owning that session's state, bounded in
//! number, stopped when idle.
//!
//! A turn *leases* the state: the actor hands it out by value and takes its next message only
//! when the lease comes back (on drop, panics included). Two concurrent turns of one session
//! are therefore serialized, never raced, and nothing else can touch the state meanwhile.
//! The lease is held only for the rewrite, not for the upstream call, so serializing costs a
//! concurrent turn the few milliseconds of its sibling's pipeline run at most.
//!
//! Why a task with a bounded mailbox and not an actix actor: the lease has to cross an `.await`
//! on the requesting task (hyper's), which in actix needs its own system and arbiter threads and
//! `ResponseActFuture` plumbing, and actix mailboxes grow without bound on `do_send`. A task
//! with `mpsc::channel(n)` gives the bound, runs on hyper's runtime, and stops by returning.
//!
//! State outlives its actor through [`Persist`]: an idle or evicted actor saves its state, and
//! the next actor for that key loads it. Saving and loading happen under the registry lock, and
//! a key whose actor is still stopping is not loaded until the save is done, so a session never
//! comes back with stale state.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

/// Where a session's state goes between actors.
pub trait Persist<S>: Send + Sync {
    /// The state for `key`: saved earlier, or a fresh one.
    fn load(&self, key: &str) -> S;
    fn save(&self, key: &str, state: &S);
}

/// Sizing of a [`Sessions`] registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Live actors at most; past it the least recently used one is stopped (its state saved).
    pub max_sessions: usize,
    /// An actor with no message for this long stops (its state saved).
    pub idle: Duration,
    /// Commands queued per actor before senders wait.
    pub mailbox: usize,
}

impl SessionLimits {
    pub const DEFAULT: SessionLimits = SessionLimits {
        max_sessions: 1000,
        idle: Duration::from_secs(120),
        mailbox: 64,
    };
}

/// Counters for `/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SessionStats {
    pub live: usize,
    pub started: u64,
    pub evicted: u64,
    pub idle_stopped: u64,
    /// Turns that got a fresh, unsaved state because no actor answered (never expected).
    pub detached: u64,
}

enum Command<S> {
    Lend(oneshot::Sender<Lease<S>>),
    Apply(Box<dyn FnOnce(&mut S) + Send>),
}

/// Exclusive use of one session's state; returned to its actor on drop.
pub struct Lease<S> {
    state: Option<S>,
    back: Option<oneshot::Sender<S>>,
}

impl<S> Lease<S> {
    fn take(&mut self) -> Option<S> {
        self.back = None;
        self.state.take()
    }

    /// A lease no actor stands behind: its changes are dropped with it. For hosts without
    /// session actors (a one-off rewrite), where every turn starts from `state`.
    pub fn detached(state: S) -> Lease<S> {
        Lease {
            state: Some(state),
            back: None,
        }
    }

    /// Whether this state came from the session's actor (false for the detached fallback,
    /// whose changes are not kept).
    pub fn is_attached(&self) -> bool {
        self.back.is_some()
    }
}

impl<S> Deref for Lease<S> {
    type Target = S;
    fn deref(&self) -> &S {
        self.state
            .as_ref()
            .expect("a lease holds its state until dropped")
    }
}

impl<S> DerefMut for Lease<S> {
    fn deref_mut(&mut self) -> &mut S {
        self.state
            .as_mut()
            .expect("a lease holds its state until dropped")
    }
}

impl<S> Drop for Lease<S> {
    fn drop(&mut self) {
        if let (Some(state), Some(back)) = (self.state.take(), self.back.take()) {
            let _ = back.send(state);
        }
    }
}

impl<S> fmt::Debug for Lease<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("attached", &self.is_attached())
            .finish()
    }
}

struct Slot<S> {
    tx: mpsc::Sender<Command<S>>,
    tick: u64,
    /// Which actor this is: an idle actor unregisters only its own slot, never a successor's.
    actor: u64,
}

struct Registry<S> {
    slots: HashMap<String, Slot<S>>,
    recency: BTreeMap<u64, String>,
    /// Per key, how many evicted actors have not saved their state yet; a new actor waits until
    /// none is left before loading. A count, not a flag: under churn one key can have several.
    stopping: HashMap<String, usize>,
    next_tick: u64,
}

struct Shared<S> {
    registry: Mutex<Registry<S>>,
    persist: Arc<dyn Persist<S>>,
    limits: SessionLimits,
    started: AtomicU64,
    evicted: AtomicU64,
    idle_stopped: AtomicU64,
    detached: AtomicU64,
}

/// The registry of session actors. Cheap to clone.
pub struct Sessions<S> {
    shared: Arc<Shared<S>>,
    runtime: tokio::runtime::Handle,
}

impl<S> Clone for Sessions<S> {
    fn clone(&self) -> Sessions<S> {
        Sessions {
            shared: self.shared.clone(),
            runtime: self.runtime.clone(),
        }
    }
}

impl<S> fmt::Debug for Sessions<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

impl<S: Default + Send + 'static> Sessions<S> {
    /// A registry whose actors run on `runtime`.
    pub fn new(
        limits: SessionLimits,
        persist: Arc<dyn Persist<S>>,
        runtime: tokio::runtime::Handle,
    ) -> Sessions<S> {
        Sessions {
            shared: Arc::new(Shared {
                registry: Mutex::new(Registry {
                    slots: HashMap::new(),
                    recency: BTreeMap::new(),
                    stopping: HashMap::new(),
                    next_tick: 0,
                }),
                persist,
                limits: SessionLimits {
                    max_sessions: limits.max_sessions.max(1),
                    mailbox: limits.mailbox.max(1),
                    ..limits
                },
                started: AtomicU64::new(0),
                evicted: AtomicU64::new(0),
                idle_stopped: AtomicU64::new(0),
                detached: AtomicU64::new(0),
            }),
            runtime,
        }
    }

    /// Leases `key`'s state, waiting for any turn of the same session that holds it.
    pub async fn lease(&self, key: &str) -> Lease<S> {
        // An actor may stop between our send and its reply; the retry reaches its successor.
        for _ in 0..3 {
            let tx = self.sender(key);
            let (reply, answer) = oneshot::channel();
            if tx.send(Command::Lend(reply)).await.is_ok()
                && let Ok(lease) = answer.await
            {
                return lease;
            }
        }
        self.detached()
    }

    /// [`Sessions::lease`] for a thread outside the runtime (the observe pool's workers).
    pub fn lease_blocking(&self, key: &str) -> Lease<S> {
        for _ in 0..3 {
            let tx = self.sender(key);
            let (reply, answer) = oneshot::channel();
            if tx.blocking_send(Command::Lend(reply)).is_ok()
                && let Ok(lease) = answer.blocking_recv()
            {
                return lease;
            }
        }
        self.detached()
    }

    /// Runs `f` on `key`'s state between turns, without waiting. Dropped when the mailbox is
    /// full: only for advice the state can live without (the provider's cache report).
    pub fn apply(&self, key: &str, f: impl FnOnce(&mut S) + Send + 'static) {
        let _ = self.sender(key).try_send(Command::Apply(Box::new(f)));
    }

    pub fn stats(&self) -> SessionStats {
        SessionStats {
            live: self.shared.registry.lock().slots.len(),
            started: self.shared.started.load(Ordering::Relaxed),
            evicted: self.shared.evicted.load(Ordering::Relaxed),
            idle_stopped: self.shared.idle_stopped.load(Ordering::Relaxed),
            detached: self.shared.detached.load(Ordering::Relaxed),
        }
    }

    /// A fresh state nobody keeps: the safe answer when no actor can be reached, because a
    /// fresh tracker knows no boundary and so treats the whole transcript as cached.
    fn detached(&self) -> Lease<S> {
        self.shared.detached.fetch_add(1, Ordering::Relaxed);
        Lease::detached(S::default())
    }

    /// The mailbox of `key`'s actor, spawning it (and evicting the least recently used one when
    /// full) as needed.
    fn sender(&self, key: &str) -> mpsc::Sender<Command<S>> {
        let mut registry = self.shared.registry.lock();
        registry.next_tick += 1;
        let tick = registry.next_tick;
        if let Some(slot) = registry.slots.get_mut(key)
            && !slot.tx.is_closed()
        {
            let old = std::mem::replace(&mut slot.tick, tick);
            let tx = slot.tx.clone();
            registry.recency.remove(&old);
            registry.recency.insert(tick, key.to_owned());
            return tx;
        }
        if let Some(stale) = registry.slots.remove(key) {
            registry.recency.remove(&stale.tick);
        }
        while registry.slots.len() >= self.shared.limits.max_sessions {
            let Some((_, victim)) = registry.recency.pop_first() else {
                break;
            };
            // Dropping its only long-lived sender stops the victim once in-flight sends finish;
            // it saves its state on the way out, and its key waits in `stopping` until then.
            if registry.slots.remove(&victim).is_some() {
                *registry.stopping.entry(victim).or_default() += 1;
                self.shared.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (tx, rx) = mpsc::channel(self.shared.limits.mailbox);
        let actor = self.shared.started.fetch_add(1, Ordering::Relaxed);
        registry.slots.insert(
            key.to_owned(),
            Slot {
                tx: tx.clone(),
                tick,
                actor,
            },
        );
        registry.recency.insert(tick, key.to_owned());
        self.runtime
            .spawn(run_actor(self.shared.clone(), key.to_owned(), actor, rx));
        tx
    }
}

async fn run_actor<S: Default + Send + 'static>(
    shared: Arc<Shared<S>>,
    key: String,
    actor: u64,
    mut rx: mpsc::Receiver<Command<S>>,
) {
    let mut state = loop {
        {
            let mut registry = shared.registry.lock();
            if registry.slots.get(&key).is_none_or(|s| s.actor != actor) {
                // Evicted before it ever loaded: nothing to save, and it must not wait for
                // its own eviction to finish.
                registry.done_stopping(&key);
                return;
            }
            if !registry.stopping.contains_key(&key) {
                break shared.persist.load(&key);
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    loop {
        let command = match tokio::time::timeout(shared.limits.idle, rx.recv()).await {
            Ok(Some(command)) => command,
            Ok(None) => break,
            Err(_idle) => {
                let mut registry = shared.registry.lock();
                // Still registered (not evicted meanwhile)? Then unregister, so no new sender
                // finds us. Either way the save below happens before any successor loads.
                let ours = registry.slots.get(&key).is_some_and(|s| s.actor == actor);
                if ours && let Some(slot) = registry.slots.remove(&key) {
                    registry.recency.remove(&slot.tick);
                    shared.idle_stopped.fetch_add(1, Ordering::Relaxed);
                }
                rx.close();
                shared.persist.save(&key, &state);
                if !ours {
                    registry.done_stopping(&key);
                }
                // Queued commands are dropped with `rx`: their senders retry on a new actor,
                // which loads what was just saved.
                return;
            }
        };
        match command {
            Command::Lend(reply) => {
                let (back, returned) = oneshot::channel();
                let lease = Lease {
                    state: Some(state),
                    back: Some(back),
                };
                state = match reply.send(lease) {
                    Ok(()) => match returned.await {
                        Ok(state) => state,
                        // The lease vanished without its Drop running (a leaked future):
                        // reload, which at worst forgets one turn.
                        Err(_) => shared.persist.load(&key),
                    },
                    Err(mut lease) => lease.take().unwrap_or_default(),
                };
            }
            Command::Apply(f) => f(&mut state),
        }
    }
    let mut registry = shared.registry.lock();
    shared.persist.save(&key, &state);
    registry.done_stopping(&key);
}

impl<S> Registry<S> {
    /// One evicted actor of `key` has finished (saved, or never loaded).
    fn done_stopping(&mut self, key: &str) {
        if let Some(n) = self.stopping.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.stopping.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests;
