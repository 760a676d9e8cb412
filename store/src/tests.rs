//! The durable store over a real SQLite file: a turn's writes survive a new process (a new
//! store on the same file), quotas refuse, and a failing file fails open.

use std::sync::Arc;
use std::time::Duration;

use engine::store::{Store, StoreError};

use super::sqlite::SqliteBackend;
use super::*;

fn temp_db(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-store-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("state.db")
}

fn open_store(path: &std::path::Path, limits: DurableLimits) -> Arc<DurableStore> {
    DurableStore::new(Arc::new(SqliteBackend::open(path).unwrap()), limits)
}

#[test]
fn specs_parse_and_print_without_secrets() {
    assert_eq!("memory".parse(), Ok(StoreSpec::Memory));
    assert_eq!("off".parse(), Ok(StoreSpec::Off));
    assert_eq!(
        "sqlite:/var/lib/sluice.db".parse(),
        Ok(StoreSpec::Sqlite("/var/lib/sluice.db".into()))
    );
    let redis: StoreSpec = "redis://app:hunter2@cache:6379/2".parse().unwrap();
    assert_eq!(redis.to_string(), "redis://app:***@cache:6379/2");
    assert!(!format!("{redis:?}").contains("hunter2"));
    let slash: StoreSpec = "redis://app:hu/nt@er2@cache:6379/2".parse().unwrap();
    assert_eq!(slash.to_string(), "redis://app:***@cache:6379/2");
    let err = "postgres://x".parse::<StoreSpec>().unwrap_err();
    assert!(err.to_string().contains("sqlite:PATH"), "{err}");
    let err = "Redis://u:hunter2@h".parse::<StoreSpec>().unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert!(
        "rediss://h:6380/0".parse::<StoreSpec>().is_err(),
        "TLS is not built in"
    );
    assert!("sqlite:".parse::<StoreSpec>().is_err());
    let sentinel: StoreSpec = "redis+sentinel://:hunter2@10.0.0.1:26379,10.0.0.2:26379/main/1"
        .parse()
        .unwrap();
    assert!(!sentinel.to_string().contains("hunter2"), "{sentinel}");
}

/// A Sentinel URL without what the backend needs is refused at start-up, saying what is missing
/// and what is expected, without its password.
#[tokio::test]
async fn a_sentinel_url_names_its_primary() {
    use super::redis::RedisBackend;
    for (url, missing) in [
        (
            "redis+sentinel://:hunter2@10.0.0.1:26379",
            "no primary name",
        ),
        (
            "redis+sentinel://:hunter2@10.0.0.1:26379/",
            "no primary name",
        ),
        ("redis+sentinel://:hunter2@/main", "no Sentinel address"),
    ] {
        let error = RedisBackend::connect(url).unwrap_err().to_string();
        assert!(error.contains(missing), "{url}: {error}");
        assert!(error.contains("PRIMARY"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
    assert!(RedisBackend::connect("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/main").is_ok());
}

#[tokio::test]
async fn a_closed_turn_is_there_for_the_next_process() {
    let path = temp_db("restart");
    {
        let store = open_store(&path, DurableLimits::DEFAULT);
        let turn = store.open("k1:s").await.unwrap();
        assert!(turn.reloaded, "a session's first turn loads it");
        store.stash("k1:s", "abc", "the original").unwrap();
        store.put_frozen("k1:s", "frz", "decision");
        assert!(turn.close().wait(Duration::from_secs(5)).await);
        // The next turn in the same process reads memory: nothing to load.
        let again = store.open("k1:s").await.unwrap();
        assert!(!again.reloaded);
        store.put_frozen("k1:s", "frz", "decision 2");
        assert!(again.close().wait(Duration::from_secs(5)).await);
        // A model's result, kept outside any turn.
        assert!(
            store
                .put_now("k1:s", "llm:1", "result")
                .wait(Duration::from_secs(5))
                .await
        );
        assert_eq!(store.durable_stats().commits, 2);
    }
    // The first process is gone (its writer thread ends with the last sender).
    let mut reopened = None;
    for _ in 0..100 {
        match SqliteBackend::open(&path) {
            Ok(backend) => {
                reopened = Some(backend);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let store = DurableStore::new(Arc::new(reopened.unwrap()), DurableLimits::DEFAULT);
    assert_eq!(
        store.get_frozen("k1:s", "frz"),
        None,
        "nothing before the turn opens"
    );
    let turn = store.open("k1:s").await.unwrap();
    assert!(turn.reloaded);
    assert_eq!(
        store.get_frozen("k1:s", "frz").as_deref(),
        Some("decision 2")
    );
    // Stashes are not loaded in bulk: an expand fetches them.
    assert_eq!(store.resolve("k1:s", "abc"), None);
    assert_eq!(
        store.fetch(Some("k1:s"), "abc").await.as_deref(),
        Some("the original")
    );
    assert_eq!(
        store.fetch(None, "abc").await.as_deref(),
        Some("the original")
    );
    assert_eq!(
        store.fetch(Some("k2:s"), "abc").await,
        None,
        "another scope"
    );
    drop(turn);
}

#[tokio::test]
async fn a_second_process_on_one_file_is_refused() {
    let path = temp_db("exclusive");
    let store = open_store(&path, DurableLimits::DEFAULT);
    let turn = store.open("s").await.unwrap();
    turn.close().wait(Duration::from_secs(5)).await;
    let err = SqliteBackend::open(&path).unwrap_err();
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
}

#[tokio::test]
async fn the_per_session_quota_refuses_one_session_not_the_next() {
    let path = temp_db("quota");
    let limits = DurableLimits {
        session_stashes: 3,
        session_bytes: 1 << 20,
        ..DurableLimits::DEFAULT
    };
    let store = open_store(&path, limits);
    let turn = store.open("greedy").await.unwrap();
    for i in 0..3 {
        store.stash("greedy", &format!("id{i}"), "x").unwrap();
    }
    assert_eq!(store.stash("greedy", "id3", "x"), Err(StoreError::Full));
    drop(turn);
    let other = store.open("modest").await.unwrap();
    store.stash("modest", "id0", "x").unwrap();
    drop(other);
    assert_eq!(store.durable_stats().quota_refused, 1);
}

#[tokio::test]
async fn memory_copies_stay_within_their_budget_and_reload() {
    let path = temp_db("budget");
    let limits = DurableLimits {
        cache_bytes: 10_000,
        ..DurableLimits::DEFAULT
    };
    let store = open_store(&path, limits);
    for i in 0..50 {
        let session = format!("s{i}");
        let turn = store.open(&session).await.unwrap();
        store.put_frozen(&session, "state", &"v".repeat(1_000));
        assert!(turn.close().wait(Duration::from_secs(5)).await);
    }
    let stats = store.durable_stats();
    assert!(stats.cached_bytes <= 11_000, "{stats:?}");
    assert!(stats.cache_evictions >= 40, "{stats:?}");
    let turn = store.open("s0").await.unwrap();
    assert!(turn.reloaded);
    assert_eq!(
        store.get_frozen("s0", "state").map(|v| v.len()),
        Some(1_000)
    );
}

#[tokio::test]
async fn an_unwritable_file_fails_open_and_is_counted() {
    let dir = temp_db("readonly");
    let dir = dir.parent().unwrap().join("missing").join("nested");
    // A path under a regular file can never be created.
    let blocker = dir.parent().unwrap();
    std::fs::write(blocker, b"not a directory").unwrap();
    let store = open_store(&dir.join("state.db"), DurableLimits::DEFAULT);
    // Three failures in a row make an episode (one slow call does not).
    for _ in 0..3 {
        assert_eq!(store.open("s").await.unwrap_err(), Unavailable::Backend);
        assert_eq!(store.get_frozen("s", "x"), None);
    }
    assert!(store.durable_stats().failing);
    // The episode is on: the next turns fail fast without asking again within the second.
    assert_eq!(store.open("s").await.unwrap_err(), Unavailable::Backend);
    let stats = store.durable_stats();
    assert_eq!(stats.unavailable_turns, 4);
    assert_eq!(stats.backend_errors, 3);
}

#[tokio::test]
async fn a_turn_cancelled_while_loading_leaves_the_session_to_be_loaded() {
    let path = temp_db("cancelled");
    {
        let store = open_store(&path, DurableLimits::DEFAULT);
        let turn = store.open("s").await.unwrap();
        store.put_frozen("s", "frz", "decision");
        assert!(turn.close().wait(Duration::from_secs(5)).await);
    }
    std::thread::sleep(Duration::from_millis(100));
    let store = open_store(&path, DurableLimits::DEFAULT);
    // Dropped before its load can finish: nothing may mark the empty copy as current.
    let cancelled = store.open("s");
    drop(cancelled);
    let opening = Box::pin(store.open("s"));
    let polled = futures_poll_once(opening).await;
    drop(polled);
    let turn = store.open("s").await.unwrap();
    assert!(turn.reloaded);
    assert_eq!(store.get_frozen("s", "frz").as_deref(), Some("decision"));
}

/// Polls a future once and hands it back (dropped by the caller mid-flight).
async fn futures_poll_once<F: Future + Unpin>(mut future: F) -> F {
    std::future::poll_fn(|cx| {
        let _ = std::pin::Pin::new(&mut future).poll(cx);
        std::task::Poll::Ready(())
    })
    .await;
    future
}

/// A backend in memory whose commits can be made to fail or to stall, to check what the
/// durable store does around them (the real backends have their own tests).
#[derive(Default)]
struct Scripted {
    fail_next: std::sync::atomic::AtomicBool,
    stall_next: std::sync::atomic::AtomicBool,
    /// Frozen keys of each commit, in the order they reached the backend.
    commits: parking_lot::Mutex<Vec<Vec<String>>>,
}

#[async_trait::async_trait]
impl Backend for Scripted {
    fn describe(&self) -> String {
        "scripted".into()
    }
    fn shared(&self) -> bool {
        false
    }
    async fn acquire(
        &self,
        _: &str,
        _: Duration,
        _: Duration,
    ) -> Result<Option<Acquired>, BackendError> {
        Ok(None)
    }
    async fn load(&self, _: &str) -> Result<Snapshot, BackendError> {
        Ok(Snapshot::default())
    }
    async fn commit(&self, _: &str, commit: Commit) -> Result<Committed, BackendError> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.stall_next.swap(false, Relaxed) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if self.fail_next.swap(false, Relaxed) {
            return Err(BackendError::Io("disk full".into()));
        }
        let keys = commit.frozen.iter().map(|(k, _)| k.clone()).collect();
        self.commits.lock().push(keys);
        Ok(Committed::Written)
    }
    async fn put(&self, _: &str, _: &str, _: &str, _: Duration) -> Result<(), BackendError> {
        Ok(())
    }
    async fn fetch(&self, _: Option<&str>, _: &str) -> Result<Option<String>, BackendError> {
        Ok(None)
    }
    async fn ping(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn occupancy(&self) -> Occupancy {
        Occupancy::default()
    }
}

#[tokio::test]
async fn a_failed_commit_goes_with_the_next_one_and_commits_keep_their_order() {
    use std::sync::atomic::Ordering::Relaxed;
    let backend = Arc::new(Scripted::default());
    let store = DurableStore::new(backend.clone(), DurableLimits::DEFAULT);

    backend.fail_next.store(true, Relaxed);
    let turn = store.open("s").await.unwrap();
    store.put_frozen("s", "first", "1");
    assert!(
        !turn.close().wait(Duration::from_secs(5)).await,
        "the backend refused it"
    );
    let turn = store.open("s").await.unwrap();
    assert!(
        !turn.reloaded,
        "this process is the only writer: its copy stays current"
    );
    store.put_frozen("s", "second", "2");
    assert!(turn.close().wait(Duration::from_secs(5)).await);
    assert_eq!(
        *backend.commits.lock(),
        [vec!["first".to_owned(), "second".to_owned()]]
    );

    // A slow commit is not overtaken by the next turn's.
    backend.stall_next.store(true, Relaxed);
    let turn = store.open("s").await.unwrap();
    store.put_frozen("s", "third", "3");
    let slow = turn.close();
    let turn = store.open("s").await.unwrap();
    store.put_frozen("s", "fourth", "4");
    let fast = turn.close();
    assert!(fast.wait(Duration::from_secs(5)).await && slow.wait(Duration::from_secs(5)).await);
    let commits = backend.commits.lock().clone();
    assert_eq!(
        commits[1..],
        [vec!["third".to_owned()], vec!["fourth".to_owned()]]
    );
    assert_eq!(store.durable_stats().commit_failures, 1);
}

#[test]
fn each_listen_address_gets_a_default_file_of_its_own() {
    use super::sqlite::{default_path, default_path_for};
    let at = |s: &str| default_path_for(s.parse().unwrap());
    assert_eq!(
        at("127.0.0.1:4000"),
        default_path(),
        "the default address keeps state.db"
    );
    assert_eq!(
        at("127.0.0.1:4001"),
        default_path().with_file_name("state-4001.db")
    );
    assert_eq!(
        at("0.0.0.0:4000"),
        default_path().with_file_name("state-0_0_0_0-4000.db")
    );
    assert_ne!(at("[::1]:4002"), at("127.0.0.1:4003"));
}

#[tokio::test]
async fn the_files_size_is_read_again_once_the_writer_idles() {
    use crate::backend::Backend;
    let path = temp_db("measure");
    let backend = SqliteBackend::open(&path).unwrap();
    let ttl = Duration::from_secs(600);
    backend.put("s", "small", "{}", ttl).await.unwrap();
    let before = backend.occupancy().bytes;
    // Within a second of the last reading: the size is not read after this write...
    let big = "x".repeat(1 << 20);
    backend.put("s", "big", &big, ttl).await.unwrap();
    // ...but once the writer has waited out the second with nothing to do.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while backend.occupancy().bytes < before + (1 << 20) {
        assert!(
            std::time::Instant::now() < deadline,
            "the size stayed at {} after a 1 MiB write",
            backend.occupancy().bytes
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A shared backend in memory that can be taken down, and changed behind the store's back (as
/// another replica, or a Redis that lost its data, would), to check how an outage is settled.
#[derive(Default)]
struct Fleet {
    down: std::sync::atomic::AtomicBool,
    state: parking_lot::Mutex<FleetState>,
}

#[derive(Default)]
struct FleetState {
    version: u64,
    fence: u64,
    lease: Option<u64>,
    frozen: std::collections::HashMap<String, String>,
    stashes: std::collections::HashMap<String, String>,
}

impl Fleet {
    fn check(&self) -> Result<(), BackendError> {
        if self.down.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(BackendError::Io("connection refused".into()));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Backend for Fleet {
    fn describe(&self) -> String {
        "fleet".into()
    }
    fn shared(&self) -> bool {
        true
    }
    async fn acquire(
        &self,
        _: &str,
        _: Duration,
        _: Duration,
    ) -> Result<Option<Acquired>, BackendError> {
        self.check()?;
        let mut state = self.state.lock();
        if state.lease.is_some() {
            return Ok(None);
        }
        state.fence += 1;
        state.lease = Some(state.fence);
        Ok(Some(Acquired {
            fence: state.fence,
            version: state.version,
        }))
    }
    async fn load(&self, _: &str) -> Result<Snapshot, BackendError> {
        self.check()?;
        let state = self.state.lock();
        Ok(Snapshot {
            version: state.version,
            frozen: state.frozen.clone().into_iter().collect(),
            stash_ids: state.stashes.keys().cloned().collect(),
        })
    }
    async fn commit(&self, _: &str, commit: Commit) -> Result<Committed, BackendError> {
        self.check()?;
        let mut state = self.state.lock();
        let held = state.lease == Some(commit.fence);
        if commit.release_only {
            if held {
                state.lease = None;
            }
            return Ok(Committed::Written);
        }
        if !held && !(state.lease.is_none() && state.version == commit.expected) {
            return Ok(Committed::Fenced);
        }
        for (id, original) in commit.stashes {
            state.stashes.insert(id, original.to_string());
        }
        for (key, value) in commit.frozen {
            state.frozen.insert(key, value.to_string());
        }
        state.version = commit.fence;
        if held {
            state.lease = None;
        }
        Ok(Committed::Written)
    }
    async fn put(&self, _: &str, _: &str, _: &str, _: Duration) -> Result<(), BackendError> {
        self.check()
    }
    async fn fetch(&self, _: Option<&str>, id: &str) -> Result<Option<String>, BackendError> {
        self.check()?;
        Ok(self.state.lock().stashes.get(id).cloned())
    }
    async fn ping(&self) -> Result<(), BackendError> {
        self.check()
    }
    fn occupancy(&self) -> Occupancy {
        Occupancy::default()
    }
}

/// Through an outage a session this store holds is carried (served from memory, its writes
/// held); when the backend answers, what the outage did is settled: another replica having
/// written the session keeps its decisions (the held one is counted lost) but the held original
/// is written; a backend that lost everything gets the copy back whole.
#[tokio::test]
async fn an_outage_is_carried_and_settled_whatever_the_backend_became() {
    use std::sync::atomic::Ordering::Relaxed;
    let backend = Arc::new(Fleet::default());
    let store = DurableStore::new(backend.clone(), DurableLimits::DEFAULT);
    let wait = Duration::from_secs(5);

    let turn = store.open("s").await.unwrap();
    store.stash("s", "x", "original x").unwrap();
    store.put_frozen("s", "k", "a1");
    assert!(turn.close().wait(wait).await);

    // Down: carried, and an unknown session is not.
    backend.down.store(true, Relaxed);
    let turn = store.open("s").await.expect("carried");
    assert!(!turn.reloaded);
    assert_eq!(store.get_frozen("s", "k").as_deref(), Some("a1"));
    store.stash("s", "y", "original y").unwrap();
    store.put_frozen("s", "k", "a2");
    assert!(turn.close().wait(wait).await, "nothing to wait for");
    assert_eq!(store.open("t").await.unwrap_err(), Unavailable::Backend);
    let stats = store.durable_stats();
    assert_eq!((stats.carried_sessions, stats.carried_turns), (1, 1));
    assert_eq!((stats.held_sessions, stats.writes_held), (1, 2));
    assert_eq!(stats.unavailable_turns, 1);

    // Meanwhile another replica served the session.
    {
        let mut state = backend.state.lock();
        state.version += 10;
        state.fence += 10;
        state.frozen.insert("k".into(), "b".into());
    }
    backend.down.store(false, Relaxed);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let turn = store.open("s").await.unwrap();
    assert!(turn.reloaded, "the other replica's turn is read");
    assert_eq!(store.get_frozen("s", "k").as_deref(), Some("b"));
    assert!(turn.close().wait(wait).await);
    assert_eq!(
        backend.state.lock().stashes.get("y").map(String::as_str),
        Some("original y"),
        "the held original is written"
    );
    assert_eq!(backend.state.lock().frozen["k"], "b");
    let stats = store.durable_stats();
    assert_eq!(stats.writes_lost, 1, "the held decision");
    assert_eq!(stats.held_sessions, 0);

    // A backend that lost everything while down gets the copy back whole.
    backend.down.store(true, Relaxed);
    let turn = store.open("s").await.expect("carried");
    store.put_frozen("s", "m", "new");
    let _ = turn.close();
    *backend.state.lock() = FleetState::default();
    backend.down.store(false, Relaxed);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let turn = store.open("s").await.unwrap();
    assert!(
        !turn.reloaded,
        "the copy is newer than anything the backend has"
    );
    assert!(turn.close().wait(wait).await);
    let state = backend.state.lock();
    assert_eq!(state.frozen.get("m").map(String::as_str), Some("new"));
    assert_eq!(state.frozen.get("k").map(String::as_str), Some("b"));
    assert!(state.stashes.contains_key("x") && state.stashes.contains_key("y"));
    drop(state);
    let stats = store.durable_stats();
    assert_eq!(stats.regressions, 1);
    assert_eq!(stats.writes_lost, 1, "every original was in memory");
}

/// Writes held through an outage reach the backend with no further turn: the replica probes
/// the backend while it holds them, and writes them behind once it answers; the next turn still
/// hears that the session was loaded meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_writes_are_written_without_another_turn() {
    use std::sync::atomic::Ordering::Relaxed;
    let backend = Arc::new(Fleet::default());
    let store = DurableStore::new(backend.clone(), DurableLimits::DEFAULT);
    let turn = store.open("s").await.unwrap();
    store.put_frozen("s", "k", "1");
    assert!(turn.close().wait(Duration::from_secs(5)).await);

    backend.down.store(true, Relaxed);
    let turn = store.open("s").await.expect("carried");
    store.stash("s", "y", "original y").unwrap();
    store.put_frozen("s", "k", "2");
    let _ = turn.close();
    // Another replica's write, made while this one could not see the backend: its replay
    // entry wins, the held original is still written.
    {
        let mut state = backend.state.lock();
        state.version += 5;
        state.fence += 5;
        state.frozen.insert("other".into(), "b".into());
    }
    backend.down.store(false, Relaxed);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !backend.state.lock().stashes.contains_key("y") {
        assert!(
            std::time::Instant::now() < deadline,
            "the held original was not written"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = store.durable_stats();
    assert_eq!(stats.held_sessions, 0);
    assert_eq!(stats.writes_held, 2);
    assert_eq!((stats.writes_replayed, stats.writes_lost), (1, 1));
    let turn = store.open("s").await.unwrap();
    assert!(
        turn.reloaded,
        "the load made while writing is the turn's news"
    );
    assert_eq!(store.get_frozen("s", "other").as_deref(), Some("b"));
    drop(turn);
}
