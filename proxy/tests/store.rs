//! State that survives a restart and is shared by replicas, through real `sluice serve`
//! processes: a corpus session sent turn by turn, the process killed with SIGKILL half way and
//! started again on the same SQLite file; two replicas on one Redis taking turns; the backend
//! failing under them; a flood of sessions beside a new one.
//!
//! A flip is a message the previous turn forwarded that this turn forwards differently: it costs
//! the provider's cache from that message on. The default pipeline's cuts are deterministic, so a
//! process that lost its state re-derives most of them; what it cannot re-derive is the session's
//! tracker (the cached-prefix boundary), so each test also runs the control on a memory store and
//! checks that *it* meets a session it does not know (`unknown_boundary_turns`), which the durable
//! store never does: none of the tests can pass vacuously.

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use engine::marker;
use engine::wire::Dialect;
use integration_tests::mock::{Mock, Reply};
use integration_tests::redis::{RedisServer, free_port};
use integration_tests::wire_messages;

mod serve;
use serve::{CREDENTIAL, Sluice, call, sqlite, temp_dir};

/// A public session the default pipeline cuts early and often, as its turns.
fn session() -> (Dialect, Vec<Vec<u8>>) {
    serve::cut_early_session()
}

/// What one run of a session through sluice came to.
#[derive(Debug, Default)]
struct Run {
    flips: usize,
    /// Marker ids forwarded before the break, with the turn that carried them.
    markers: Vec<(String, usize)>,
}

/// Sends every turn of a session, `via(k)` choosing the process for turn k (and `between`
/// running before turn `at`), and compares each forwarded body with the one before it.
async fn run_session(
    mock: &Mock,
    dialect: Dialect,
    turns: &[Vec<u8>],
    session: &str,
    mut via: impl FnMut(usize) -> usize,
    sluices: &mut Vec<Option<Sluice>>,
    mut between: impl FnMut(usize, &mut Vec<Option<Sluice>>),
) -> Run {
    let mut run = Run::default();
    let mut previous: Vec<String> = Vec::new();
    for (k, turn) in turns.iter().enumerate() {
        between(k, sluices);
        mock.clear_recorded();
        let sluice = sluices[via(k)].as_ref().expect("a running sluice");
        assert_eq!(sluice.turn(dialect, session, turn).await, 200, "turn {k}");
        let forwarded = mock.recorded().last().expect("forwarded").body.clone();
        let messages = wire_messages(&forwarded);
        run.flips += previous
            .iter()
            .zip(&messages)
            .filter(|(before, now)| before != now)
            .count();
        for m in &messages {
            for id in marker::marker_ids(m) {
                if !run.markers.iter().any(|(known, _)| known == id) {
                    run.markers.push((id.to_owned(), k));
                }
            }
        }
        previous = messages;
    }
    run
}

/// Whether `original` is content the client sent in `turn` (JSON-escaped as serde writes it).
fn sent_in(turn: &[u8], original: &[u8]) -> bool {
    let original = std::str::from_utf8(original).unwrap();
    let escaped = serde_json::to_string(original).unwrap();
    let escaped = &escaped[1..escaped.len() - 1];
    memchr::memmem::find(turn, escaped.as_bytes()).is_some()
}

/// A session through `sluice serve --store STORE`, SIGKILLed and started again on the same
/// store half way; the run and the restarted process.
async fn killed_half_way(
    mock: &Mock,
    dialect: Dialect,
    turns: &[Vec<u8>],
    store: &str,
) -> (Run, Sluice) {
    let half = turns.len() / 2;
    let mut sluices = vec![Some(Sluice::spawn(store, &mock.url()))];
    let restart = |k: usize, sluices: &mut Vec<Option<Sluice>>| {
        if k == half {
            sluices[0].take().unwrap().kill();
            sluices[0] = Some(Sluice::spawn(store, &mock.url()));
        }
    };
    let run = run_session(
        mock,
        dialect,
        turns,
        "restart-1",
        |_| 0,
        &mut sluices,
        restart,
    )
    .await;
    (run, sluices.remove(0).unwrap())
}

/// A session through two `sluice serve --store STORE` replicas, taking turns.
async fn alternating(
    mock: &Mock,
    dialect: Dialect,
    turns: &[Vec<u8>],
    store: &str,
) -> (Run, Vec<Sluice>) {
    let mut sluices = vec![
        Some(Sluice::spawn(store, &mock.url())),
        Some(Sluice::spawn(store, &mock.url())),
    ];
    let run = run_session(
        mock,
        dialect,
        turns,
        "replicas-1",
        |k| k % 2,
        &mut sluices,
        |_, _| {},
    )
    .await;
    (run, sluices.into_iter().flatten().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_comes_back_with_every_decision_and_original() {
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let half = turns.len() / 2;
    assert!(half >= 5, "{} turns", turns.len());

    let dir = temp_dir("restart");
    let (run, sluice) = killed_half_way(&mock, dialect, &turns, &sqlite(&dir)).await;
    assert_eq!(run.flips, 0, "{run:?}");
    let before: Vec<&(String, usize)> = run.markers.iter().filter(|(_, k)| *k < half).collect();
    assert!(
        !before.is_empty(),
        "markers were cut before the restart: {run:?}"
    );

    // Every marker cut before the kill expands after it, to content the client sent.
    for (id, k) in &before {
        let (status, original) = sluice.expand("restart-1", id).await;
        assert_eq!(status, 200, "{id}");
        assert!(
            sent_in(&turns[*k], &original),
            "{id} expands to the client's own content"
        );
    }
    // Another credential does not reach them.
    let (id, _) = before[0];
    let (status, _) = sluice
        .call(
            "GET",
            &format!("/expand?id={id}"),
            &[
                ("x-context-guru-session", "restart-1"),
                ("authorization", "Bearer sk-other"),
            ],
            Bytes::new(),
        )
        .await;
    assert_eq!(status, 404);

    // And through the model's tool: the expand loop answers from the restarted process.
    mock.clear_recorded();
    mock.script([
        Reply::Expand {
            text: None,
            ids: vec![id.clone()],
        },
        Reply::Text("done".into()),
    ]);
    let last = turns.last().unwrap();
    assert_eq!(sluice.turn(dialect, "restart-1", last).await, 200);
    let recorded = mock.recorded();
    assert_eq!(recorded.len(), 2, "one expand round");
    let (_, original) = sluice.expand("restart-1", id).await;
    assert!(
        sent_in(&recorded[1].body, &original),
        "the tool result carries the original"
    );

    let stats = sluice.stats().await;
    assert!(
        stats["store_backend"]
            .as_str()
            .unwrap()
            .starts_with("sqlite:")
    );
    assert!(stats["store_loads"].as_u64().unwrap() >= 1, "{stats}");
    assert!(stats["store_commits"].as_u64().unwrap() >= 1, "{stats}");
    assert_eq!(
        stats["unknown_boundary_turns"], 0,
        "the tracker came back: {stats}"
    );

    // The control: the same session through a memory store across a restart.
    let (_, sluice) = killed_half_way(&mock, dialect, &turns, "memory").await;
    let stats = sluice.stats().await;
    assert_eq!(
        stats["unknown_boundary_turns"], 1,
        "a memory store forgets: {stats}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_share_every_session() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let (run, sluices) = alternating(&mock, dialect, &turns, &redis.url()).await;
    assert_eq!(run.flips, 0, "{run:?}");
    assert!(!run.markers.is_empty(), "{run:?}");
    // A marker cut by one replica expands on the other.
    for (id, k) in &run.markers {
        let other = &sluices[(k + 1) % 2];
        let (status, original) = other.expand("replicas-1", id).await;
        assert_eq!(status, 200, "{id} from turn {k}");
        assert!(sent_in(&turns[*k], &original));
    }
    for sluice in &sluices {
        let stats = sluice.stats().await;
        assert!(
            stats["store_backend"]
                .as_str()
                .unwrap()
                .starts_with("redis://")
        );
        // Each replica found the other's turns and reloaded the session.
        assert!(
            stats["store_loads"].as_u64().unwrap() >= turns.len() as u64 / 2 - 1,
            "{stats}"
        );
        assert_eq!(stats["store_skipped_requests"], 0, "{stats}");
    }
    // Only the session's very first turn was unknown, to replica 0.
    let unknown = |stats: &serde_json::Value| stats["unknown_boundary_turns"].as_u64().unwrap();
    let replica_1 = sluices[1].stats().await;
    assert_eq!(unknown(&replica_1), 0, "{replica_1}");

    // The control: two replicas each on a memory store.
    let (_, sluices) = alternating(&mock, dialect, &turns, "memory").await;
    let replica_1 = sluices[1].stats().await;
    assert_eq!(unknown(&replica_1), 1, "{replica_1}");
}

/// A stopped Redis under one replica: the session it served just before is carried from memory
/// (its decisions replayed, no flip); a session it has never seen goes upstream unmodified and
/// is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_carries_held_sessions_and_fails_open_for_others() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let mut sluices = vec![Some(Sluice::spawn(&redis.url(), &mock.url()))];
    let mut stopped = false;
    let run = run_session(
        &mock,
        dialect,
        &turns[..6],
        "failing-1",
        |_| 0,
        &mut sluices,
        |k, _| {
            if k == 3 && !stopped {
                redis.stop();
                stopped = true;
            }
        },
    )
    .await;
    assert_eq!(run.flips, 0, "carried through the outage: {run:?}");
    // A new process on the dead store has never had any session confirmed, so it carries none.
    let sluice = Sluice::spawn(&redis.url(), &mock.url());
    for turn in &turns[..3] {
        mock.clear_recorded();
        assert_eq!(sluice.turn(dialect, "failing-2", turn).await, 200);
        let forwarded = mock.recorded().last().unwrap().body.clone();
        assert_eq!(&forwarded[..], &turn[..], "forwarded byte-identical");
    }
    let stats = sluice.stats().await;
    assert_eq!(stats["store_failing"], 1, "{stats}");
    assert_eq!(stats["store_carried_turns"], 0, "{stats}");
    assert!(
        stats["store_skipped_requests"].as_u64().unwrap() >= 3,
        "{stats}"
    );
    assert!(
        stats["store_backend_errors"].as_u64().unwrap() >= 1,
        "{stats}"
    );
    assert!(
        stats["components"]["store"]["gates"]["store_unavailable"]
            .as_u64()
            .unwrap()
            >= 3,
        "{stats}"
    );
}

/// Sessions over two replicas of one store, as a load balancer with affinity spreads them.
struct Fleet {
    sluices: Vec<Sluice>,
    sessions: Vec<String>,
}

/// What became of each session.
#[derive(Debug, Default)]
struct FleetRun {
    flips: Vec<usize>,
    /// Turns whose forwarded history changed (each one a re-write of the cached prompt), and
    /// the bytes forwarded from the first changed message on.
    flipped_turns: usize,
    rewritten_bytes: usize,
    /// Marker ids forwarded, with the session and turn that carried them.
    markers: Vec<(String, usize, usize)>,
}

impl Fleet {
    fn spawn(store: &str, upstream: &str, sessions: usize, extra: &[&str]) -> Fleet {
        Fleet {
            sluices: (0..2)
                .map(|_| Sluice::spawn_logging(store, upstream, extra, None))
                .collect(),
            sessions: (0..sessions).map(|i| format!("fleet-{i}")).collect(),
        }
    }

    /// Session `i` on replica `i % 2`, round by round (turn k of every session, then turn
    /// k + 1), `between(k)` before round k (where an outage starts, waits and ends).
    async fn run(
        &self,
        mock: &Mock,
        dialect: Dialect,
        turns: &[Vec<u8>],
        mut between: impl FnMut(usize),
    ) -> FleetRun {
        let mut run = FleetRun {
            flips: vec![0; self.sessions.len()],
            ..FleetRun::default()
        };
        let mut previous: Vec<Vec<String>> = vec![Vec::new(); self.sessions.len()];
        for (k, turn) in turns.iter().enumerate() {
            between(k);
            for (i, session) in self.sessions.iter().enumerate() {
                let forwarded =
                    forwarded_by(mock, &self.sluices[i % 2], dialect, session, turn).await;
                let messages = wire_messages(&forwarded);
                let changed = previous[i]
                    .iter()
                    .zip(&messages)
                    .position(|(before, now)| before != now);
                if let Some(first) = changed {
                    run.flipped_turns += 1;
                    run.rewritten_bytes += messages[first..].iter().map(String::len).sum::<usize>();
                }
                run.flips[i] += previous[i]
                    .iter()
                    .zip(&messages)
                    .filter(|(before, now)| before != now)
                    .count();
                for m in &messages {
                    for id in marker::marker_ids(m) {
                        if !run
                            .markers
                            .iter()
                            .any(|(known, s, _)| known == id && *s == i)
                        {
                            run.markers.push((id.to_owned(), i, k));
                        }
                    }
                }
                previous[i] = messages;
            }
        }
        run
    }

    /// Waits until no replica holds writes for the store, and every held write is accounted
    /// for (written or counted lost): a commit carrying held writes leaves the copy before its
    /// answer arrives, so no held session alone does not mean written. Each replica's `/stats`.
    async fn settled(&self) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut stats = Vec::new();
            for sluice in &self.sluices {
                stats.push(sluice.stats().await);
            }
            let accounted = |s: &serde_json::Value| {
                let field = |f: &str| s[f].as_u64().unwrap();
                s["store_held_sessions"] == 0
                    && field("store_writes_replayed") + field("store_writes_lost")
                        >= field("store_writes_held")
            };
            if stats.iter().all(accounted) {
                return stats;
            }
            assert!(
                Instant::now() < deadline,
                "writes still held: {:?}",
                store_fields(&stats)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every marker forwarded expands on the replica that did *not* cut it (so from the
    /// store), to content its session sent.
    async fn expand_everywhere(&self, turns: &[Vec<u8>], run: &FleetRun) {
        assert!(!run.markers.is_empty(), "{run:?}");
        for (id, i, k) in &run.markers {
            let other = &self.sluices[(i + 1) % 2];
            let (status, original) = other.expand(&self.sessions[*i], id).await;
            assert_eq!(status, 200, "{id} of session {i}, turn {k}");
            assert!(sent_in(&turns[*k], &original), "{id}");
        }
    }
}

fn counted(stats: &[serde_json::Value], field: &str) -> u64 {
    stats.iter().map(|s| s[field].as_u64().unwrap()).sum()
}

/// Each field, summed over the replicas, is exactly its count.
fn expect_counts(stats: &[serde_json::Value], want: &[(&str, u64)]) {
    for (field, count) in want {
        assert_eq!(
            counted(stats, field),
            *count,
            "{field}: {:?}",
            store_fields(stats)
        );
    }
}

/// Each field, summed over the replicas, is at least its count.
fn expect_at_least(stats: &[serde_json::Value], want: &[(&str, u64)]) {
    for (field, count) in want {
        assert!(
            counted(stats, field) >= *count,
            "{field}: {:?}",
            store_fields(stats)
        );
    }
}

/// The replicas' `store_*` fields, for a failure message.
fn store_fields(stats: &[serde_json::Value]) -> Vec<serde_json::Map<String, serde_json::Value>> {
    stats
        .iter()
        .map(|s| {
            s.as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.starts_with("store_"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .collect()
}

/// Two store outages on one Redis with its append-only file, 1 s and 10 s long, under four
/// sessions on two replicas: inside `store.outage_grace_seconds` (60) each replica carries the
/// sessions it holds, so no session flips, every marker forwarded before or during an outage
/// expands on the other replica after it, and the held writes are all written. The control runs
/// the same fleet with no grace (the behaviour before carrying): sessions flip, twice per outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_inside_the_grace_costs_no_flip() {
    let aof = [
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
    ];
    let Some(redis) = RedisServer::start_with(&aof) else {
        return;
    };
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    assert!(turns.len() >= 8, "{} turns", turns.len());
    let redis = std::sync::Mutex::new(redis);
    // Half way through (where the sessions have much to lose), round h runs with the store
    // down for a second; rounds h + 2 and h + 3 during ten seconds.
    let h = turns.len() / 2;
    let outages = |k: usize| {
        let mut redis = redis.lock().unwrap();
        match k.checked_sub(h) {
            Some(0 | 2) => redis.shut_down(),
            Some(1) => {
                std::thread::sleep(Duration::from_secs(1));
                redis.restart();
            }
            Some(3) => std::thread::sleep(Duration::from_secs(5)),
            Some(4) => {
                std::thread::sleep(Duration::from_secs(5));
                redis.restart();
            }
            _ => {}
        }
    };
    let url = redis.lock().unwrap().url();
    let fleet = Fleet::spawn(&url, &mock.url(), 4, &[]);
    let run = fleet.run(&mock, dialect, &turns, outages).await;
    eprintln!(
        "carried: {} turns flipped, {} bytes re-written, flips per session {:?}",
        run.flipped_turns, run.rewritten_bytes, run.flips
    );
    assert_eq!(run.flips, [0, 0, 0, 0], "{run:?}");
    let stats = fleet.settled().await;
    fleet.expand_everywhere(&turns, &run).await;
    // Each replica carried its two sessions through each outage (the three rounds without a
    // store at least: a turn just after a restart may be carried too, while the client
    // reconnects).
    let fields = store_fields(&stats);
    assert!(counted(&stats, "store_carried_sessions") >= 4, "{fields:?}");
    assert!(counted(&stats, "store_carried_turns") >= 12, "{fields:?}");
    assert_eq!(counted(&stats, "store_failing"), 0, "{fields:?}");
    expect_counts(&stats, &[("store_skipped_requests", 0)]);
    let held = counted(&stats, "store_writes_held");
    assert!(held > 0, "{:?}", store_fields(&stats));
    expect_counts(
        &stats,
        &[("store_writes_replayed", held), ("store_writes_lost", 0)],
    );
    drop(fleet);

    // The control: the same outages with no grace.
    let grace = temp_dir("no-grace").join("sluice.yaml");
    std::fs::write(&grace, "store: { outage_grace_seconds: 0 }\n").unwrap();
    let config = grace.display().to_string();
    let fleet = Fleet::spawn(&url, &mock.url(), 4, &["--config", &config]);
    let session_ids: Vec<String> = (0..4).map(|i| format!("control-{i}")).collect();
    let fleet = Fleet {
        sessions: session_ids,
        ..fleet
    };
    let run = fleet.run(&mock, dialect, &turns, outages).await;
    eprintln!(
        "no grace: {} turns flipped, {} bytes re-written, flips per session {:?}",
        run.flipped_turns, run.rewritten_bytes, run.flips
    );
    assert!(
        run.flips.iter().all(|&f| f > 0),
        "each session flips when the outage starts and again when it ends: {run:?}"
    );
    let stats = fleet.settled().await;
    let fields = store_fields(&stats);
    assert_eq!(counted(&stats, "store_carried_turns"), 0, "{fields:?}");
    assert!(
        counted(&stats, "store_skipped_requests") >= 12,
        "{fields:?}"
    );
}

/// A Redis restart without persistence loses every session it held; each replica finds its
/// sessions' versions gone back, writes its copies back whole, and no session flips. What is
/// lost is what no replica holds in memory: counted in `store_writes_lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_is_written_back_from_the_replicas() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let redis = std::sync::Mutex::new(redis);
    let half = turns.len() / 2;
    let url = redis.lock().unwrap().url();
    let fleet = Fleet::spawn(&url, &mock.url(), 4, &[]);
    let run = fleet
        .run(&mock, dialect, &turns, |k| {
            if k == half {
                redis.lock().unwrap().restart();
            }
        })
        .await;
    assert_eq!(run.flips, [0, 0, 0, 0], "{run:?}");
    let stats = fleet.settled().await;
    fleet.expand_everywhere(&turns, &run).await;
    expect_counts(
        &stats,
        &[("store_regressions", 4), ("store_writes_lost", 0)],
    );
}

/// Redis Sentinel as operators run it: a primary with its append-only file, a replica, three
/// Sentinels on loopback; sluice given the Sentinels (`redis+sentinel://`). The primary is killed
/// mid-session: the replicas carry their sessions while the Sentinels promote the replica, then
/// follow the new primary. No session flips, and every marker expands on the other replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_costs_no_flip() {
    let aof = ["--appendonly", "yes", "--save", ""];
    let Some(primary) = RedisServer::start_with(&aof) else {
        return;
    };
    let of = primary.port.to_string();
    let replica =
        RedisServer::start_with(&["--appendonly", "yes", "--replicaof", "127.0.0.1", &of])
            .expect("a replica");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica
        .cli(&["info", "replication"])
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica did not sync");
        std::thread::sleep(Duration::from_millis(50));
    }
    let sentinels: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::sentinel("sluice-primary", primary.port).expect("a Sentinel"))
        .collect();
    // Sentinels find each other and the replica through the primary (hello messages every 2 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sentinels.iter().all(|s| {
        s.cli(&["sentinel", "sentinels", "sluice-primary"])
            .matches("runid")
            .count()
            >= 2
            && s.cli(&["sentinel", "replicas", "sluice-primary"])
                .contains("name")
    }) {
        assert!(Instant::now() < deadline, "the Sentinels did not meet");
        std::thread::sleep(Duration::from_millis(100));
    }
    let addresses: Vec<String> = sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let url = format!("redis+sentinel://{}/sluice-primary/0", addresses.join(","));

    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let half = turns.len() / 2;
    let primary = std::sync::Mutex::new(primary);
    let fleet = Fleet::spawn(&url, &mock.url(), 4, &[]);
    let asked = &sentinels[0];
    let run = fleet
        .run(&mock, dialect, &turns, |k| {
            if k == half {
                primary.lock().unwrap().stop();
            }
            if k == half + 2 {
                // The rounds between ran during the failover; the rest run after it.
                let promoted = replica.port.to_string();
                let deadline = Instant::now() + Duration::from_secs(30);
                while !asked
                    .cli(&["sentinel", "get-master-addr-by-name", "sluice-primary"])
                    .contains(&promoted)
                {
                    assert!(Instant::now() < deadline, "no failover");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
        .await;
    assert_eq!(run.flips, [0, 0, 0, 0], "{run:?}");
    let stats = fleet.settled().await;
    fleet.expand_everywhere(&turns, &run).await;
    expect_at_least(&stats, &[("store_carried_turns", 4)]);
    expect_counts(
        &stats,
        &[("store_writes_lost", 0), ("store_skipped_requests", 0)],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_sqlite_file_fails_open_and_is_counted() {
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let dir = temp_dir("unwritable");
    // A path under a regular file can never be created, whoever runs the test (root included).
    std::fs::write(dir.join("blocker"), b"a file, not a directory").unwrap();
    let store = format!("sqlite:{}", dir.join("blocker").join("state.db").display());
    let sluice = Sluice::spawn(&store, &mock.url());
    for turn in &turns[..3] {
        mock.clear_recorded();
        assert_eq!(sluice.turn(dialect, "unwritable-1", turn).await, 200);
        assert_eq!(&mock.recorded().last().unwrap().body[..], &turn[..]);
    }
    let stats = sluice.stats().await;
    assert_eq!(stats["store_failing"], 1, "{stats}");
    assert_eq!(stats["store_skipped_requests"], 3, "{stats}");
    let _ = std::fs::remove_dir_all(dir);
}

/// What `sluice` forwards for `turn` in `session`.
async fn forwarded_by(
    mock: &Mock,
    sluice: &Sluice,
    dialect: Dialect,
    session: &str,
    turn: &[u8],
) -> Bytes {
    mock.clear_recorded();
    assert_eq!(sluice.turn(dialect, session, turn).await, 200);
    mock.recorded().last().unwrap().body.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sessions_does_not_shrink_a_new_sessions_saving() {
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let turn = &turns[turns.len() / 2];
    let fresh_dir = temp_dir("flood-fresh");
    let fresh = Sluice::spawn(&sqlite(&fresh_dir), &mock.url());
    let expected = forwarded_by(&mock, &fresh, dialect, "newcomer", turn).await;
    assert!(expected.len() < turn.len(), "the turn is compacted");
    drop(fresh);

    let dir = temp_dir("flood");
    let sluice = Sluice::spawn(&sqlite(&dir), &mock.url());
    for i in 0..900 {
        forwarded_by(&mock, &sluice, dialect, &format!("flood-{i}"), turn).await;
    }
    let after = forwarded_by(&mock, &sluice, dialect, "newcomer", turn).await;
    assert_eq!(
        after, expected,
        "the newcomer saves as much as on an empty store"
    );
    let stats = sluice.stats().await;
    assert_eq!(stats["store_backend_sessions"], 901, "{stats}");
    assert_eq!(stats["store_refused"], 0, "{stats}");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(fresh_dir);
}

/// The fence at work on a real Redis: a holder whose lease expired cannot write over the turn of
/// the holder that took the session after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_lease_holder_cannot_overwrite_its_successor() {
    use std::sync::Arc;
    use store::redis::RedisBackend;
    use store::{Backend, Commit, Committed};

    let Some(redis) = RedisServer::start() else {
        return;
    };
    let backend = RedisBackend::connect(&redis.url()).unwrap();
    let commit = |fence: u64, value: &str| Commit {
        fence,
        frozen: vec![("decision".into(), Arc::from(value))],
        ttl: Duration::from_secs(60),
        ..Commit::default()
    };
    let stalled = backend
        .acquire("k1:s", Duration::from_millis(50), Duration::from_secs(60))
        .await
        .unwrap()
        .expect("a free session");
    assert_eq!(stalled.version, 0);
    assert_eq!(
        backend
            .acquire("k1:s", Duration::from_secs(10), Duration::from_secs(60))
            .await,
        Ok(None),
        "held"
    );
    tokio::time::sleep(Duration::from_millis(120)).await;
    let successor = backend
        .acquire("k1:s", Duration::from_secs(10), Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the stalled lease expired");
    assert!(successor.fence > stalled.fence);
    assert_eq!(
        backend.commit("k1:s", commit(stalled.fence, "stale")).await,
        Ok(Committed::Fenced)
    );
    assert_eq!(
        backend
            .commit("k1:s", commit(successor.fence, "fresh"))
            .await,
        Ok(Committed::Written)
    );
    backend
        .put("k1:s", "llm:1", "a result", Duration::from_secs(60))
        .await
        .unwrap();
    let snapshot = backend.load("k1:s").await.unwrap();
    assert_eq!(snapshot.version, successor.fence);
    let mut frozen = snapshot.frozen;
    frozen.sort();
    assert_eq!(
        frozen,
        [
            ("decision".to_owned(), "fresh".to_owned()),
            ("llm:1".to_owned(), "a result".to_owned())
        ]
    );
    // Released by the commit: the next turn takes it at once, and sees the version.
    // (And a turn that outlived its lease, with nobody writing meanwhile, still commits.)
    let next = backend
        .acquire("k1:s", Duration::from_secs(10), Duration::from_secs(60))
        .await
        .unwrap()
        .expect("released");
    assert_eq!(next.version, successor.fence);
    let slow = backend
        .acquire("k2:s", Duration::from_millis(50), Duration::from_secs(60))
        .await
        .unwrap()
        .expect("free");
    tokio::time::sleep(Duration::from_millis(120)).await;
    let late = Commit {
        expected: slow.version,
        ..commit(slow.fence, "late but alone")
    };
    assert_eq!(backend.commit("k2:s", late).await, Ok(Committed::Written));
}

/// A session another replica holds past `store.lease_wait_ms` goes upstream unmodified rather
/// than wait without bound, and is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_too_long_fails_open() {
    use store::Backend;
    use store::redis::RedisBackend;

    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let sluice = Sluice::spawn(&redis.url(), &mock.url());
    // The key sluice makes for this caller's session: its credential scope, then the id.
    let scope = engine::session::credential_scope(
        modes::turn::DEFAULT_SCOPE_SECRET,
        Some(CREDENTIAL.1.as_bytes()),
    );
    let other_replica = RedisBackend::connect(&redis.url()).unwrap();
    other_replica
        .acquire(
            &format!("{scope}held-1"),
            Duration::from_secs(30),
            Duration::from_secs(60),
        )
        .await
        .unwrap()
        .expect("free");
    let turn = &turns[turns.len() / 2];
    let started = Instant::now();
    let forwarded = forwarded_by(&mock, &sluice, dialect, "held-1", turn).await;
    let waited = started.elapsed();
    assert_eq!(&forwarded[..], &turn[..], "unmodified");
    assert!(waited >= Duration::from_millis(450), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let stats = sluice.stats().await;
    assert_eq!(stats["store_lease_timeouts"], 1, "{stats}");
    assert_eq!(
        stats["components"]["store"]["gates"]["lease_timeout"], 1,
        "{stats}"
    );
    // Another session is not held up.
    let other = forwarded_by(&mock, &sluice, dialect, "free-1", turn).await;
    assert!(other.len() < turn.len(), "compacted");
}

/// `POST /compact` keeps its originals in the durable store too: its markers expand after a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_rewrite_keeps_its_originals_across_a_restart() {
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let dir = temp_dir("compact");
    let store = sqlite(&dir);
    let sluice = Sluice::spawn(&store, &mock.url());
    let provider = dialect.as_str();
    let turn = turns.last().unwrap();
    let headers = [("x-context-guru-session", "compact-1"), CREDENTIAL];
    let (status, rewritten) = sluice
        .call(
            "POST",
            &format!("/compact?provider={provider}"),
            &headers,
            Bytes::copy_from_slice(turn),
        )
        .await;
    assert_eq!(status, 200);
    let ids: Vec<String> = wire_messages(&rewritten)
        .iter()
        .flat_map(|m| marker::marker_ids(m).map(str::to_owned).collect::<Vec<_>>())
        .collect();
    assert!(!ids.is_empty(), "the rewrite cut something");
    sluice.kill();
    let sluice = Sluice::spawn(&store, &mock.url());
    for id in &ids {
        let (status, original) = sluice.expand("compact-1", id).await;
        assert_eq!(status, 200, "{id}");
        assert!(sent_in(turn, &original));
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// SIGTERM while a response streams: the stream finishes, the process exits 0 within the drain,
/// and with SQLite the turn's writes are in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_stream_drains_it_and_keeps_the_turn() {
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let dir = temp_dir("sigterm");
    let store = sqlite(&dir);
    let mut sluice = Sluice::spawn(&store, &mock.url());
    mock.script([Reply::Slow {
        chunks: 20,
        pause: Duration::from_millis(50),
    }]);
    let mut body: serde_json::Value = serde_json::from_slice(turns.last().unwrap()).unwrap();
    body["stream"] = serde_json::Value::Bool(true);
    let body = serde_json::to_vec(&body).unwrap();
    let streaming = {
        let url = sluice.url.clone();
        tokio::spawn(async move {
            call(
                &url,
                "POST",
                match dialect {
                    Dialect::OpenAi => "/openai/v1/chat/completions",
                    Dialect::Anthropic => "/anthropic/v1/messages",
                    Dialect::Responses => "/openai/v1/responses",
                    Dialect::Gemini => "/gemini/v1beta/models/m:streamGenerateContent?alt=sse",
                },
                &[
                    ("content-type", "application/json"),
                    ("x-context-guru-session", "sigterm-1"),
                    CREDENTIAL,
                ],
                Bytes::from(body),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = sluice.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let (status, streamed) = streaming.await.unwrap();
    assert_eq!(status, 200);
    let events = String::from_utf8_lossy(&streamed);
    assert!(
        events.contains("message_stop") || events.contains("[DONE]"),
        "the stream finished: {events}"
    );
    let exit = tokio::task::spawn_blocking(move || sluice.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    // The turn that was streaming is in the file for the next process.
    let sluice = Sluice::spawn(&store, &mock.url());
    let stats = sluice.stats().await;
    assert_eq!(stats["store_backend_sessions"], 1, "{stats}");
    let _ = std::fs::remove_dir_all(dir);
}

/// One JSON access line per request, with what the operator needs and nothing that identifies
/// the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_leaves_one_json_access_line() {
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let dir = temp_dir("access");
    let log = dir.join("stderr.log");
    let sluice =
        Sluice::spawn_logging("memory", &mock.url(), &["--log-format", "json"], Some(&log));
    let turn = &turns[turns.len() / 2];
    assert_eq!(sluice.turn(dialect, "access-1", turn).await, 200);
    let (status, _) = sluice.call("GET", "/healthz", &[], Bytes::new()).await;
    assert_eq!(status, 200);
    sluice.kill();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|v: &serde_json::Value| v["target"] == "sluice::access")
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let chat = &lines[0]["fields"];
    assert_eq!(chat["status"], 200);
    assert_eq!(chat["dialect"], dialect.as_str());
    assert!(chat["tokens_saved"].as_u64().unwrap() > 0, "{chat}");
    assert!(!chat["acted"].as_str().unwrap().is_empty(), "{chat}");
    assert!(chat["upstream_ms"].as_f64().unwrap() > 0.0, "{chat}");
    assert_eq!(
        chat["session"].as_str().unwrap().len(),
        16,
        "a keyed hash: {chat}"
    );
    assert_eq!(lines[1]["fields"]["route"], "/healthz");
    assert!(
        !text.contains("sk-test-tenant-a"),
        "no credential in the log"
    );
    assert!(!text.contains("access-1"), "no session id in the log");
    let _ = std::fs::remove_dir_all(dir);
}

/// One session, one label: the access log hashes a session as the dashboard does (one function,
/// the dashboard's key), so a line can be found from a dashboard row and back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_and_the_dashboard_show_one_session_label() {
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let dir = temp_dir("one-label");
    let log = dir.join("stderr.log");
    let extra = [
        "--log-format",
        "json",
        "--dashboard",
        "--dashboard-db",
        ":memory:",
    ];
    let sluice = Sluice::spawn_logging("memory", &mock.url(), &extra, Some(&log));
    assert_eq!(sluice.turn(dialect, "one-label-1", &turns[0]).await, 200);
    // The dashboard writes off the request path: wait for its row.
    let mut shown = None;
    for _ in 0..200 {
        let (status, body) = sluice
            .call("GET", "/dashboard/api/sessions", &[], Bytes::new())
            .await;
        assert_eq!(status, 200);
        let page: serde_json::Value = serde_json::from_slice(&body).unwrap();
        if let Some(label) = page["sessions"][0]["session"].as_str() {
            shown = Some(label.to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    sluice.kill();
    let shown = shown.expect("the dashboard shows the session");
    let text = std::fs::read_to_string(&log).unwrap();
    let logged: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "sluice::access")
        .filter_map(|v| v["fields"]["session"].as_str().map(str::to_owned))
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(logged, [shown], "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Nothing listening upstream: the agent gets a 502 and the operator a log line saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_logged() {
    let dir = temp_dir("unreachable");
    let log = dir.join("stderr.log");
    let dead = format!("http://127.0.0.1:{}", free_port());
    let sluice = Sluice::spawn_logging("memory", &dead, &[], Some(&log));
    let (dialect, turns) = session();
    assert_eq!(sluice.turn(dialect, "dead-1", &turns[0]).await, 502);
    sluice.kill();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("upstream call failed"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// SIGHUP reloads the config atomically: a new pipeline applies to the next request; a file
/// with problems is refused whole, its problems logged, the running config kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config_or_keeps_the_running_one() {
    let mock = Mock::start().await;
    let (dialect, turns) = session();
    let dir = temp_dir("reload");
    let config = dir.join("sluice.yaml");
    std::fs::write(&config, "pipeline: [format]\n").unwrap();
    let log = dir.join("stderr.log");
    let config_arg = config.to_str().unwrap().to_owned();
    let sluice = Sluice::spawn_logging(
        "memory",
        &mock.url(),
        &["--config", &config_arg],
        Some(&log),
    );
    let turn = turns.last().unwrap();
    let hangup = |pid: u32| {
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid.to_string()])
                .status()
                .unwrap()
                .success()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let before = forwarded_by(&mock, &sluice, dialect, "reload-1", turn).await;
    assert!(
        !wire_messages(&before).iter().any(|m| m.contains("<<cg:")),
        "format cuts nothing"
    );

    std::fs::write(
        &config,
        "pipeline: [format, textclean, dedup, collapse, linecap]\n",
    )
    .unwrap();
    hangup(sluice.child.id());
    let after = forwarded_by(&mock, &sluice, dialect, "reload-2", turn).await;
    assert!(
        wire_messages(&after).iter().any(|m| m.contains("<<cg:")),
        "the reloaded pipeline cuts"
    );

    std::fs::write(&config, "pipeline: [no_such_component]\nmode: [sync]\n").unwrap();
    hangup(sluice.child.id());
    let kept = forwarded_by(&mock, &sluice, dialect, "reload-3", turn).await;
    assert!(
        wire_messages(&kept).iter().any(|m| m.contains("<<cg:")),
        "the running config stays"
    );
    sluice.kill();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("config reloaded"), "{text}");
    assert!(text.contains("config reload refused"), "{text}");
    assert!(
        text.contains("no_such_component"),
        "every problem logged: {text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
