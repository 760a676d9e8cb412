//! Session actor tests: serialization, the LRU bound, idle stop and state that survives both.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::*;

#[derive(Debug, Default, Clone, PartialEq)]
struct Counter {
    turns: u64,
    in_use: bool,
}

#[derive(Default)]
struct Saved(Mutex<HashMap<String, Counter>>);

impl Persist<Counter> for Saved {
    fn load(&self, key: &str) -> Counter {
        self.0.lock().get(key).cloned().unwrap_or_default()
    }
    fn save(&self, key: &str, state: &Counter) {
        self.0.lock().insert(key.to_owned(), state.clone());
    }
}

fn sessions(max_sessions: usize, idle: Duration) -> (Sessions<Counter>, Arc<Saved>) {
    let saved = Arc::new(Saved::default());
    let limits = SessionLimits {
        max_sessions,
        idle,
        mailbox: 4,
    };
    (
        Sessions::new(limits, saved.clone(), tokio::runtime::Handle::current()),
        saved,
    )
}

async fn turn(sessions: &Sessions<Counter>, key: &str) -> u64 {
    let mut lease = sessions.lease(key).await;
    assert!(!lease.in_use, "two turns of one session overlapped");
    lease.in_use = true;
    // Hold the lease across a yield, as a real turn holds it across its pipeline run.
    tokio::task::yield_now().await;
    lease.turns += 1;
    lease.in_use = false;
    lease.turns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_turns_of_one_session_are_serialized() {
    let (sessions, _) = sessions(8, Duration::from_secs(60));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let sessions = sessions.clone();
            let key = if i % 2 == 0 { "a" } else { "b" };
            tokio::spawn(async move { turn(&sessions, key).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(sessions.lease("a").await.turns, 32);
    assert_eq!(sessions.lease("b").await.turns, 32);
    assert_eq!(sessions.stats().live, 2);
}

#[tokio::test]
async fn the_session_bound_evicts_the_least_recently_used_and_keeps_its_state() {
    let (sessions, saved) = sessions(2, Duration::from_secs(60));
    turn(&sessions, "a").await;
    turn(&sessions, "a").await;
    turn(&sessions, "b").await;
    turn(&sessions, "c").await;
    let stats = sessions.stats();
    assert_eq!((stats.live, stats.evicted), (2, 1));
    // "a" comes back with what it had, whether or not its save has landed yet.
    assert_eq!(turn(&sessions, "a").await, 3);
    assert!(saved.0.lock().contains_key("a"));
}

#[tokio::test]
async fn idle_actors_stop_and_their_successor_resumes_the_state() {
    let (sessions, _) = sessions(8, Duration::from_millis(20));
    turn(&sessions, "a").await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    let stats = sessions.stats();
    assert_eq!((stats.live, stats.idle_stopped), (0, 1));
    assert_eq!(turn(&sessions, "a").await, 2);
}

#[tokio::test]
async fn a_panicking_turn_gives_the_state_back() {
    let (sessions, _) = sessions(8, Duration::from_secs(60));
    let s = sessions.clone();
    let crashed = tokio::spawn(async move {
        let mut lease = s.lease("a").await;
        lease.turns = 7;
        panic!("turn bug");
    })
    .await;
    assert!(crashed.is_err());
    assert_eq!(turn(&sessions, "a").await, 8);
    assert_eq!(sessions.stats().detached, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_outside_the_runtime_lease_too() {
    let (sessions, _) = sessions(8, Duration::from_secs(60));
    let s = sessions.clone();
    std::thread::spawn(move || {
        let mut lease = s.lease_blocking("a");
        lease.turns += 1;
    })
    .join()
    .unwrap();
    sessions.apply("a", |c| c.turns += 10);
    assert_eq!(turn(&sessions, "a").await, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_churn_never_loses_or_races_a_turn() {
    // One live actor for two sessions: every turn evicts the other session's actor, often
    // before its successor has loaded.
    let (sessions, _) = sessions(1, Duration::from_secs(60));
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let sessions = sessions.clone();
            tokio::spawn(async move { turn(&sessions, if i % 2 == 0 { "a" } else { "b" }).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // No two turns of one session overlapped (`turn` asserts it). A turn that found no actor in
    // three tries ran on a detached fresh state (the safe fallback: it knows no boundary), so
    // it is counted there instead of in the session.
    let (a, b) = (turn(&sessions, "a").await, turn(&sessions, "b").await);
    let detached = sessions.stats().detached;
    assert_eq!(
        a + b + detached,
        42,
        "every turn is in its session or counted as detached"
    );
}
