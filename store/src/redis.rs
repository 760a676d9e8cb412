//! The Redis backend: one store shared by every replica.
//!
//! Key design (every key of a session carries the session in a hash tag, so a Redis Cluster
//! keeps a session on one slot and the Lua scripts below stay single-slot):
//!
//! | key | type | what |
//! |---|---|---|
//! | `sluice:{S}:lease` | string | the fence of the turn holding the session, `PX` = lease hold |
//! | `sluice:{S}:fence` | counter | incremented by every acquisition |
//! | `sluice:{S}:ver` | string | the fence of the last commit: a replica whose copy has another version reloads |
//! | `sluice:{S}:frozen` | hash | replay entries (freezes, tracker state, checkpoints) |
//! | `sluice:{S}:stashes` | hash | originals behind markers |
//! | `sluice:id:{ID}` | string | the session of a stash id, for `GET /expand` without a session |
//! | `sluice:{ab:E}:rows` | set | an experiment's rows (`session\tmodel`), no time to live |
//! | `sluice:{ab:E}:row:R` | hash | one row's counters (`crate::spend::Spend`) |
//!
//! Every commit refreshes the time to live of all of a session's keys (`PEXPIRE`): the TTL
//! slides natively and a session nobody uses disappears whole. Nothing is evicted by sluice;
//! the Redis server should run with `maxmemory-policy noeviction` (an evicted freeze is a flip,
//! an evicted stash an unresolvable marker; refused writes are counted and fail open instead).
//!
//! With `redis+sentinel://` the backend asks the Sentinels for the primary's address, and asks
//! again after any failed call: a failover (a replica promoted) is followed within one call of
//! the Sentinels' decision. Meanwhile the store is failing, and each replica carries the
//! sessions it holds (see `DurableStore::open`).
//!
//! A lease is `SET NX PX` in effect, taken together with its fence in one script; a commit
//! writes only if the lease still holds its fence, then releases it. A replica that stalls past
//! its lease therefore cannot overwrite the turn of the replica that took over.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

use crate::backend::{Acquired, Backend, BackendError, Commit, Committed, Occupancy, Snapshot};

/// Takes the lease if free: returns `{fence, version}`, or `{0, 0}` while another holds it.
/// KEYS: lease, fence, ver. ARGV: hold ms, ttl ms (the fence counter lives as long as the
/// session; a replica's copy idle that long is read again, so a restarted count cannot match
/// a stale version).
const ACQUIRE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 0} end
local fence = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], fence, 'PX', ARGV[1])
local version = tonumber(redis.call('GET', KEYS[3]) or '0')
return {fence, version}
";

/// Writes a turn if its fence still holds the lease, or if the lease lapsed and nobody has
/// written the session since the turn began (a long model wait); `1` written, `0` fenced out.
/// With mode `r` it only releases the lease it holds.
/// KEYS: lease, ver, stashes, frozen, fence. ARGV: fence, ttl ms, stash count, expected
/// version, mode (`w` or `r`), then pairs (stashes first).
const COMMIT: &str = r"
local lease = redis.call('GET', KEYS[1])
if ARGV[5] == 'r' then
  if lease == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return 1
end
local version = redis.call('GET', KEYS[2]) or '0'
if lease ~= ARGV[1] and not (lease == false and version == ARGV[4]) then return 0 end
local stashes = tonumber(ARGV[3])
local i = 6
for _ = 1, stashes do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i + 1 <= #ARGV do
  redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
for k = 3, 5 do redis.call('PEXPIRE', KEYS[k], ARGV[2]) end
if lease == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
";

/// See the module docs.
pub struct RedisBackend {
    url: String,
    route: Route,
    acquire: Script,
    commit: Script,
    add_spend: Script,
}

/// Where calls go: one address, or wherever the Sentinels say the primary is.
enum Route {
    Direct(ConnectionManager),
    Sentinel(Box<Sentinel>),
}

/// The primary as a set of Sentinels names it.
struct Sentinel {
    /// One client per Sentinel, asked in order.
    sentinels: Vec<redis::Client>,
    /// The name the Sentinels monitor the primary under.
    primary: String,
    /// `USER:PASSWORD@` (or empty) and the database: the primary's URL is built from them.
    credentials: String,
    db: String,
    /// The primary's address as last resolved, and the connection to it.
    current: parking_lot::Mutex<Option<(String, ConnectionManager)>>,
    /// A call failed since: the next call asks the Sentinels again.
    stale: AtomicBool,
    /// One caller asks at a time; the others reuse its answer.
    asking: tokio::sync::Mutex<()>,
}

/// How long one Sentinel may take to name the primary.
const SENTINEL_WAIT: Duration = Duration::from_millis(500);

fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_secs(1)))
        .set_number_of_retries(1)
}

impl Sentinel {
    /// `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/PRIMARY[/DB]`: the
    /// credentials and the database are the primary's (Sentinels on loopback or a private
    /// network rarely have their own).
    fn parse(url: &str) -> Result<Sentinel, BackendError> {
        let bad = |why: &str| {
            BackendError::Io(format!(
                "{}: {why}; expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/PRIMARY[/DB]",
                crate::spec::redact_url(url)
            ))
        };
        let rest = url
            .strip_prefix("redis+sentinel://")
            .ok_or_else(|| bad("not a Sentinel URL"))?;
        let (credentials, rest) = match rest.rsplit_once('@') {
            Some((credentials, rest)) => (format!("{credentials}@"), rest),
            None => (String::new(), rest),
        };
        let (hosts, path) = rest.split_once('/').ok_or_else(|| bad("no primary name"))?;
        let (primary, db) = path.split_once('/').unwrap_or((path, "0"));
        if primary.is_empty() {
            return Err(bad("no primary name"));
        }
        let sentinels = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(|host| redis::Client::open(format!("redis://{host}")).map_err(io))
            .collect::<Result<Vec<_>, _>>()?;
        if sentinels.is_empty() {
            return Err(bad("no Sentinel address"));
        }
        Ok(Sentinel {
            sentinels,
            primary: primary.to_owned(),
            credentials,
            db: db.to_owned(),
            current: parking_lot::Mutex::new(None),
            stale: AtomicBool::new(true),
            asking: tokio::sync::Mutex::new(()),
        })
    }

    fn fresh(&self) -> Option<ConnectionManager> {
        if self.stale.load(Ordering::Acquire) {
            return None;
        }
        self.current.lock().as_ref().map(|(_, c)| c.clone())
    }

    /// The connection to the primary, asking the Sentinels where it is after a failure.
    async fn connection(&self) -> Result<ConnectionManager, BackendError> {
        if let Some(connection) = self.fresh() {
            return Ok(connection);
        }
        let _one = self.asking.lock().await;
        if let Some(connection) = self.fresh() {
            return Ok(connection);
        }
        let address = self.ask().await?;
        let mut current = self.current.lock();
        if let Some((known, connection)) = current.as_ref()
            && *known == address
        {
            self.stale.store(false, Ordering::Release);
            return Ok(connection.clone());
        }
        let primary = format!("redis://{}{address}/{}", self.credentials, self.db);
        let client = redis::Client::open(primary).map_err(io)?;
        let connection =
            ConnectionManager::new_lazy_with_config(client, manager_config()).map_err(io)?;
        if current.is_some() {
            tracing::info!(primary = %address, name = %self.primary, "Redis Sentinel: following the new primary");
        }
        *current = Some((address, connection.clone()));
        self.stale.store(false, Ordering::Release);
        Ok(connection)
    }

    /// `SENTINEL get-master-addr-by-name`, of each Sentinel in turn until one answers.
    async fn ask(&self) -> Result<String, BackendError> {
        let mut last = BackendError::Io("redis sentinel: none answers".into());
        for sentinel in &self.sentinels {
            let asked = async {
                let mut con = sentinel.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.primary)
                    .query_async::<Option<(String, u16)>>(&mut con)
                    .await
            };
            match tokio::time::timeout(SENTINEL_WAIT, asked).await {
                Ok(Ok(Some((host, port)))) if host.contains(':') => {
                    return Ok(format!("[{host}]:{port}"));
                }
                Ok(Ok(Some((host, port)))) => return Ok(format!("{host}:{port}")),
                Ok(Ok(None)) => {
                    last = BackendError::Io(format!(
                        "redis sentinel: no primary named `{}`",
                        self.primary
                    ));
                }
                Ok(Err(error)) => last = io(error),
                Err(_) => last = BackendError::Timeout(SENTINEL_WAIT),
            }
        }
        Err(last)
    }
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("url", &crate::spec::redact_url(&self.url))
            .finish_non_exhaustive()
    }
}

fn key(session: &str, what: &str) -> String {
    format!("sluice:{{{session}}}:{what}")
}

fn id_key(id: &str) -> String {
    format!("sluice:id:{id}")
}

fn io(error: redis::RedisError) -> BackendError {
    // A RedisError names the command and the server's words, never the URL or its password.
    BackendError::Io(format!("redis: {error}"))
}

impl RedisBackend {
    /// Connects lazily: a Redis that is down at start-up is a failing episode, not a refusal to
    /// start. Must be called on a tokio runtime.
    ///
    /// # Errors
    /// A URL the client cannot read.
    pub fn connect(url: &str) -> Result<RedisBackend, BackendError> {
        let route = if url.starts_with("redis+sentinel://") {
            Route::Sentinel(Box::new(Sentinel::parse(url)?))
        } else {
            let client = redis::Client::open(url).map_err(io)?;
            Route::Direct(
                ConnectionManager::new_lazy_with_config(client, manager_config()).map_err(io)?,
            )
        };
        Ok(RedisBackend {
            url: url.to_owned(),
            route,
            acquire: Script::new(ACQUIRE),
            commit: Script::new(COMMIT),
            add_spend: Script::new(crate::spend::REDIS_ADD),
        })
    }

    async fn connection(&self) -> Result<ConnectionManager, BackendError> {
        match &self.route {
            Route::Direct(connection) => Ok(connection.clone()),
            Route::Sentinel(sentinel) => sentinel.connection().await,
        }
    }

    /// A failed call's error; behind Sentinels, the primary is asked for again (it may have
    /// moved, or have been demoted: a demoted primary refuses writes with `READONLY`).
    fn failed(&self, error: redis::RedisError) -> BackendError {
        if let Route::Sentinel(sentinel) = &self.route {
            sentinel.stale.store(true, Ordering::Release);
        }
        io(error)
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn describe(&self) -> String {
        crate::spec::redact_url(&self.url)
    }

    fn shared(&self) -> bool {
        true
    }

    async fn acquire(
        &self,
        session: &str,
        hold: Duration,
        ttl: Duration,
    ) -> Result<Option<Acquired>, BackendError> {
        let mut con = self.connection().await?;
        let (fence, version): (u64, u64) = self
            .acquire
            .key(key(session, "lease"))
            .key(key(session, "fence"))
            .key(key(session, "ver"))
            .arg(hold.as_millis() as u64)
            .arg(ttl.as_millis().max(1) as u64)
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(e))?;
        Ok((fence > 0).then_some(Acquired { fence, version }))
    }

    async fn load(&self, session: &str) -> Result<Snapshot, BackendError> {
        let mut con = self.connection().await?;
        let (version, frozen, stash_ids): (Option<u64>, Vec<(String, String)>, Vec<String>) =
            redis::pipe()
                .get(key(session, "ver"))
                .hgetall(key(session, "frozen"))
                .hkeys(key(session, "stashes"))
                .query_async(&mut con)
                .await
                .map_err(|e| self.failed(e))?;
        Ok(Snapshot {
            version: version.unwrap_or(0),
            frozen,
            stash_ids,
        })
    }

    async fn commit(&self, session: &str, commit: Commit) -> Result<Committed, BackendError> {
        let mut con = self.connection().await?;
        let ttl_ms = commit.ttl.as_millis().max(1) as u64;
        let mut invocation = self.commit.prepare_invoke();
        for what in ["lease", "ver", "stashes", "frozen", "fence"] {
            invocation.key(key(session, what));
        }
        invocation
            .arg(commit.fence)
            .arg(ttl_ms)
            .arg(commit.stashes.len())
            .arg(commit.expected)
            .arg(if commit.release_only { "r" } else { "w" });
        for (id, original) in &commit.stashes {
            invocation.arg(id).arg(&**original);
        }
        for (k, value) in &commit.frozen {
            invocation.arg(k).arg(&**value);
        }
        let written: u8 = invocation
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(e))?;
        if written == 0 {
            return Ok(Committed::Fenced);
        }
        if !commit.stashes.is_empty() {
            // The id index is another slot in a cluster, so it is its own pipeline. A stash whose
            // index write is lost still expands through its session, so a failure here does not
            // fail the commit.
            let mut pipe = redis::pipe();
            for (id, _) in &commit.stashes {
                pipe.set_options(
                    id_key(id),
                    session,
                    redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(ttl_ms)),
                )
                .ignore();
            }
            if let Err(error) = pipe.query_async::<()>(&mut con).await {
                tracing::debug!(%error, "stash id index not written");
            }
        }
        Ok(Committed::Written)
    }

    async fn put(
        &self,
        session: &str,
        key_name: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), BackendError> {
        let mut con = self.connection().await?;
        let ttl_ms = ttl.as_millis().max(1) as i64;
        let mut pipe = redis::pipe();
        pipe.hset(key(session, "frozen"), key_name, value).ignore();
        // Every key of the session lives as long as the newest write to it.
        for what in ["frozen", "stashes", "ver", "fence"] {
            pipe.pexpire(key(session, what), ttl_ms).ignore();
        }
        pipe.query_async::<()>(&mut con)
            .await
            .map_err(|e| self.failed(e))
    }

    async fn fetch(&self, session: Option<&str>, id: &str) -> Result<Option<String>, BackendError> {
        let mut con = self.connection().await?;
        let session = match session {
            Some(session) => session.to_owned(),
            None => {
                let owner: Option<String> =
                    con.get(id_key(id)).await.map_err(|e| self.failed(e))?;
                let Some(owner) = owner else {
                    return Ok(None);
                };
                owner
            }
        };
        con.hget(key(&session, "stashes"), id)
            .await
            .map_err(|e| self.failed(e))
    }

    async fn ping(&self) -> Result<(), BackendError> {
        let mut con = self.connection().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut con)
            .await
            .map(drop)
            .map_err(|e| self.failed(e))
    }

    async fn add_spend(
        &self,
        experiment: &str,
        spend: &crate::spend::Spend,
    ) -> Result<(), BackendError> {
        use crate::spend::{redis_increments, redis_keys, redis_member};
        let mut con = self.connection().await?;
        let member = redis_member(spend);
        let mut invocation = self.add_spend.prepare_invoke();
        invocation
            .key(redis_keys(experiment, None))
            .key(redis_keys(experiment, Some(&member)))
            .arg(&member)
            .arg(&spend.arm)
            .arg(&spend.agent)
            .arg(spend.first_ms)
            .arg(spend.last_ms);
        for (name, value) in redis_increments(spend) {
            invocation.arg(name).arg(value);
        }
        let _: u8 = invocation
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    async fn spends(&self, experiment: &str) -> Result<Vec<crate::spend::Spend>, BackendError> {
        use crate::spend::{from_redis, redis_keys};
        let mut con = self.connection().await?;
        let members: Vec<String> = con
            .smembers(redis_keys(experiment, None))
            .await
            .map_err(|e| self.failed(e))?;
        let mut rows = Vec::with_capacity(members.len());
        // A few hundred rows a pipeline: one round trip each, none too large.
        for chunk in members.chunks(256) {
            let mut pipe = redis::pipe();
            for member in chunk {
                pipe.hgetall(redis_keys(experiment, Some(member)));
            }
            let hashes: Vec<Vec<(String, String)>> = pipe
                .query_async(&mut con)
                .await
                .map_err(|e| self.failed(e))?;
            rows.extend(
                chunk
                    .iter()
                    .zip(hashes)
                    .map(|(member, fields)| from_redis(member, fields)),
            );
        }
        rows.sort_by(|a, b| (&a.session, &a.model).cmp(&(&b.session, &b.model)));
        Ok(rows)
    }

    fn occupancy(&self) -> Occupancy {
        // Counting a fleet's sessions would be a SCAN; Redis's own INFO says what it holds.
        Occupancy::default()
    }
}
