//! The harness of the end-to-end suites: one test body runs against every backend.
//!
//! A [`Harness`] owns what a backend needs (a private `redis-server`, or a manual clock) and hands
//! out limiters that share state, as two app instances sharing one Redis would. The
//! [`backend_suite!`] macro turns each `async fn scenario(h: Harness)` into one `#[tokio::test]`
//! per backend.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use redis_guard::backend::{
    Clock, ConnectOptions, Lock, ManualClock, MemoryLockStore, RedisBackend, RedisConnection,
    RedisLockStore, TlsOptions,
};
use redis_guard::cache::{
    CacheLayer, CacheLayerBuilder, MemoryCacheStore, RedisCacheStore, ValueCache, ValueCacheBuilder,
};
use redis_guard::idempotency::{IdempotencyStore, MemoryIdempotencyStore, RedisIdempotencyStore};
use redis_guard::rate_limit::{Algorithm, Limiter, MemoryLimiter, RedisLimiter};
use redis_guard::session::{MemorySessionStore, RedisSessionStore, SessionError, SessionStore};
use redis_guard_testkit::{RedisCluster, RedisSentinels, RedisServer, TestTls, unique_prefix};

mod admitted;
pub mod fail_safe;
pub mod session_routes;

pub use admitted::admitted;

/// A session's fields as its store holds them: values as JSON text under their keys, metadata
/// under `$…` names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored(pub HashMap<String, String>);

impl Stored {
    /// The JSON text (or metadata) stored under `field`.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.0.get(field).map(String::as_str)
    }
}

/// What `store` holds for the live session under `storage_key`, loaded as the layer loads it
/// (through the store's `test-util` seam); `None` when there is none.
///
/// # Errors
///
/// The store failed.
pub async fn stored(
    store: &dyn SessionStore,
    storage_key: &str,
) -> Result<Option<Stored>, SessionError> {
    Ok(store.stored_fields(storage_key).await?.map(Stored))
}

/// The five built-in algorithms, for suites that hold for each of them.
pub const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
];

/// Which backend a harness runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// [`MemoryLimiter`] on a [`ManualClock`].
    Memory,
    /// [`RedisLimiter`] over a `ConnectionManager`, on a private standalone `redis-server`.
    Redis,
    /// [`RedisLimiter`] over a `bb8` pool, on a private standalone `redis-server`.
    Pool,
    /// [`RedisLimiter`] on a private 3-master Redis Cluster.
    Cluster,
    /// [`RedisLimiter`] on the primary a private Redis Sentinel names
    /// ([`RedisConnection::sentinel`]): a standalone `redis-server` and one sentinel.
    Sentinel,
}

/// A backend under test.
#[derive(Debug)]
pub struct Harness {
    kind: Kind,
    clock: ManualClock,
    memory: MemoryLimiter,
    sessions: MemorySessionStore,
    locks: Lock,
    caches: MemoryCacheStore,
    idempotency: IdempotencyStore,
    server: Option<RedisServer>,
    cluster: Option<RedisCluster>,
    /// The sentinel watching `server`, on [`Kind::Sentinel`].
    sentinels: Option<RedisSentinels>,
    prefix: String,
}

/// Timeout the suites give Redis: generous, because a loaded 2-core CI machine running debug
/// builds can stall for longer than the production default, and a timeout is not what the
/// suites test.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(5);

impl Harness {
    /// A memory backend.
    pub async fn memory() -> Self {
        let clock = ManualClock::new();
        Self {
            kind: Kind::Memory,
            memory: MemoryLimiter::builder().clock(clock.clone()).build(),
            sessions: MemorySessionStore::builder().clock(clock.clone()).build(),
            locks: Lock::new(MemoryLockStore::builder().clock(clock.clone()).build()),
            caches: MemoryCacheStore::builder().clock(clock.clone()).build(),
            idempotency: MemoryIdempotencyStore::builder()
                .clock(clock.clone())
                .build()
                .into(),
            clock,
            server: None,
            cluster: None,
            sentinels: None,
            prefix: unique_prefix("mem"),
        }
    }

    /// A Redis backend on a fresh private server, through a `ConnectionManager`.
    ///
    /// # Panics
    ///
    /// When `redis-server` cannot be started; the message says how to install it.
    pub async fn redis() -> Self {
        Self::standalone(Kind::Redis)
    }

    /// A Redis backend on a fresh private server, through a `bb8` pool.
    ///
    /// # Panics
    ///
    /// As [`redis`](Self::redis).
    pub async fn pool() -> Self {
        Self::standalone(Kind::Pool)
    }

    /// A Redis backend on a fresh private TLS-only server (certificates made by the test kit,
    /// clients verified), through a `ConnectionManager` with `ConnectOptions::tls`.
    ///
    /// # Panics
    ///
    /// As [`redis`](Self::redis).
    pub async fn redis_tls() -> Self {
        Self::standalone_on(Kind::Redis, Some(tls_server()))
    }

    /// As [`redis_tls`](Self::redis_tls), through a `bb8` pool
    /// (`ConnectOptions::pool_manager`).
    ///
    /// # Panics
    ///
    /// As [`redis`](Self::redis).
    pub async fn pool_tls() -> Self {
        Self::standalone_on(Kind::Pool, Some(tls_server()))
    }

    fn standalone(kind: Kind) -> Self {
        Self::standalone_on(kind, None)
    }

    fn standalone_on(kind: Kind, server: Option<RedisServer>) -> Self {
        let server =
            server.unwrap_or_else(|| RedisServer::start().unwrap_or_else(|e| panic!("{e}")));
        let clock = ManualClock::new();
        Self {
            kind,
            memory: MemoryLimiter::builder().clock(clock.clone()).build(),
            sessions: MemorySessionStore::builder().clock(clock.clone()).build(),
            locks: Lock::new(MemoryLockStore::builder().clock(clock.clone()).build()),
            caches: MemoryCacheStore::builder().clock(clock.clone()).build(),
            idempotency: MemoryIdempotencyStore::builder()
                .clock(clock.clone())
                .build()
                .into(),
            clock,
            sentinels: (kind == Kind::Sentinel).then(|| {
                // No replica, so no failover: the sentinel only names the server.
                let down_after = Duration::from_secs(60);
                match server.tls() {
                    Some(tls) => RedisSentinels::start_tls(server.port(), 1, down_after, tls),
                    None => RedisSentinels::start(server.port(), 1, down_after),
                }
                .unwrap_or_else(|e| panic!("{e}"))
            }),
            server: Some(server),
            cluster: None,
            prefix: unique_prefix("redis"),
        }
    }

    /// A Redis backend on a fresh private server and a sentinel that watches it, through
    /// [`RedisConnection::sentinel`].
    ///
    /// # Panics
    ///
    /// As [`redis`](Self::redis), or when the sentinel cannot be started.
    pub async fn sentinel() -> Self {
        tokio::task::spawn_blocking(|| Self::standalone(Kind::Sentinel))
            .await
            .expect("sentinel start task")
    }

    /// As [`sentinel`](Self::sentinel), with a server and a sentinel that speak only TLS
    /// (certificates made by the test kit, clients verified), reached through
    /// `ConnectOptions::tls(…).sentinel(&["rediss://…"], "rediss://mymaster")`.
    ///
    /// # Panics
    ///
    /// As [`sentinel`](Self::sentinel).
    pub async fn sentinel_tls() -> Self {
        tokio::task::spawn_blocking(|| Self::standalone_on(Kind::Sentinel, Some(tls_server())))
            .await
            .expect("sentinel start task")
    }

    /// A Redis backend on a fresh private 3-master cluster.
    ///
    /// # Panics
    ///
    /// When the cluster cannot be started.
    pub async fn cluster() -> Self {
        Self::cluster_from(RedisCluster::start).await
    }

    /// A Redis backend on a fresh private 3-master cluster that speaks only TLS (certificates
    /// made by the test kit, clients verified, TLS on the cluster bus), through
    /// `ConnectOptions::tls(…).cluster(…)`.
    ///
    /// # Panics
    ///
    /// When the cluster cannot be started.
    pub async fn cluster_tls() -> Self {
        Self::cluster_from(|| {
            let tls = TestTls::generate()?;
            RedisCluster::start_tls(&tls)
        })
        .await
    }

    async fn cluster_from(
        start: impl FnOnce() -> Result<RedisCluster, redis_guard_testkit::TestkitError> + Send + 'static,
    ) -> Self {
        let cluster = tokio::task::spawn_blocking(start)
            .await
            .expect("cluster start task")
            .unwrap_or_else(|e| panic!("{e}"));
        let clock = ManualClock::new();
        Self {
            kind: Kind::Cluster,
            memory: MemoryLimiter::builder().clock(clock.clone()).build(),
            sessions: MemorySessionStore::builder().clock(clock.clone()).build(),
            locks: Lock::new(MemoryLockStore::builder().clock(clock.clone()).build()),
            caches: MemoryCacheStore::builder().clock(clock.clone()).build(),
            idempotency: MemoryIdempotencyStore::builder()
                .clock(clock.clone())
                .build()
                .into(),
            clock,
            server: None,
            cluster: Some(cluster),
            sentinels: None,
            prefix: unique_prefix("cluster"),
        }
    }

    /// Whether the backend is Redis (of any kind).
    pub fn is_redis(&self) -> bool {
        self.kind != Kind::Memory
    }

    /// The backend kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// A limiter instance. Every call returns a new instance (for Redis: a new connection or
    /// pool) that shares state with the others, like separate app replicas.
    pub async fn limiter(&self) -> Arc<dyn Limiter> {
        match self.kind {
            Kind::Memory => Arc::new(self.memory.clone()),
            _ => Arc::new(RedisLimiter::new(self.backend().await)),
        }
    }

    /// A limiter instance as [`limiter`](Self::limiter), re-reading its live rules' records
    /// every `refresh` on Redis ([`RedisLimiter::live_refresh`]): what another replica lags by
    /// at most after a live change (the memory backend's instances share one table).
    pub async fn live_limiter(&self, refresh: std::time::Duration) -> Arc<dyn Limiter> {
        match self.kind {
            Kind::Memory => Arc::new(self.memory.clone()),
            _ => Arc::new(RedisLimiter::new(self.backend().await).live_refresh(refresh)),
        }
    }

    /// A limiter whose answers are exact to the millisecond on every backend: on Redis, the
    /// scripts read the harness' manual clock instead of `TIME`
    /// ([`RedisBackend::frozen_time`]), so time stands still between calls as it does for the
    /// memory backend, and moves only with [`wait`](Self::wait). Default settings otherwise
    /// (the deny cache on).
    pub async fn exact_limiter(&self) -> Arc<dyn Limiter> {
        match self.kind {
            Kind::Memory => Arc::new(self.memory.clone()),
            _ => Arc::new(RedisLimiter::new(
                self.backend().await.frozen_time(self.clock.clone()),
            )),
        }
    }

    /// A [`Lock`] instance sharing its locks with every other one of
    /// this harness (for Redis: a new connection; in memory: one table on the harness' clock).
    pub async fn lock(&self) -> Lock {
        match self.kind {
            Kind::Memory => self.locks.clone(),
            _ => Lock::new(RedisLockStore::new(self.backend().await)),
        }
    }

    /// A cache layer builder on a store sharing its entries with every other one of this
    /// harness (for Redis: a new connection; in memory: one store on the harness' clock).
    pub async fn cache(&self) -> CacheLayerBuilder {
        match self.kind {
            Kind::Memory => CacheLayer::builder(self.caches.clone()),
            _ => CacheLayer::builder(RedisCacheStore::new(self.backend().await)),
        }
    }

    /// A value cache builder on a store sharing its values with every other one of this
    /// harness (for Redis: a new connection; in memory: one store on the harness' clock), as
    /// two replicas on one Redis share them.
    pub async fn value_cache(&self) -> ValueCacheBuilder {
        match self.kind {
            Kind::Memory => ValueCache::builder(self.caches.clone()),
            _ => ValueCache::builder(RedisCacheStore::new(self.backend().await)),
        }
    }

    /// An idempotency store sharing its records with every other one of this harness (for
    /// Redis: a new connection; in memory: one store on the harness' clock), as two app
    /// instances on one Redis share them.
    pub async fn idempotency_store(&self) -> IdempotencyStore {
        match self.kind {
            Kind::Memory => self.idempotency.clone(),
            _ => RedisIdempotencyStore::new(self.backend().await).into(),
        }
    }

    /// The harness' manual clock: what [`wait`](Self::wait) moves (for a handler that lets
    /// time pass while it computes).
    pub fn clock(&self) -> ManualClock {
        self.clock.clone()
    }

    /// A session store instance sharing state with every other one of this harness (for Redis:
    /// a new connection).
    pub async fn session_store(&self) -> Arc<dyn SessionStore> {
        match self.kind {
            Kind::Memory => Arc::new(self.sessions.clone()),
            _ => Arc::new(RedisSessionStore::new(self.backend().await)),
        }
    }

    /// A Redis backend of this harness: a new connection, the harness' prefix, the test
    /// timeout and the harness' clock as time shift.
    ///
    /// # Panics
    ///
    /// As [`connection`](Self::connection).
    pub async fn backend(&self) -> RedisBackend {
        RedisBackend::new(self.connection().await)
            .prefix(self.prefix.clone())
            .timeout(TEST_TIMEOUT)
            .time_shift(self.clock.clone())
    }

    /// As [`backend`](Self::backend), but reading Redis `TIME` as it is (no time shift): what
    /// production runs, and the only clock under which a fixed window on Redis >= 7 takes the
    /// Lua-free path.
    ///
    /// # Panics
    ///
    /// As [`connection`](Self::connection).
    pub async fn redis_time_backend(&self) -> RedisBackend {
        RedisBackend::new(self.connection().await)
            .prefix(self.prefix.clone())
            .timeout(TEST_TIMEOUT)
    }

    /// The URL of every Redis server of this harness: the standalone one, or each cluster node.
    ///
    /// # Panics
    ///
    /// On the memory backend.
    pub fn server_urls(&self) -> Vec<String> {
        match self.kind {
            Kind::Memory => panic!("the memory backend has no Redis"),
            Kind::Redis | Kind::Pool | Kind::Sentinel => vec![self.server_url()],
            Kind::Cluster => self.cluster_urls(),
        }
    }

    /// A new Redis connection of this harness' kind.
    ///
    /// # Panics
    ///
    /// On the memory backend, or when the connection fails.
    pub async fn connection(&self) -> RedisConnection {
        match self.kind {
            Kind::Memory => panic!("the memory backend has no Redis connection"),
            Kind::Redis => self
                .connect_options()
                .open(&self.server_url())
                .await
                .expect("connect to the test redis"),
            Kind::Pool => {
                let manager = self
                    .connect_options()
                    .pool_manager(&self.server_url())
                    .expect("valid url");
                let pool = bb8::Pool::builder()
                    .max_size(4)
                    .build(manager)
                    .await
                    .expect("pool");
                RedisConnection::from(pool)
            }
            Kind::Cluster => self
                .connect_options()
                .cluster(&self.cluster_urls())
                .await
                .expect("connect to the test cluster"),
            Kind::Sentinel => {
                let sentinels = self.sentinels.as_ref().expect("sentinels");
                match self.tls() {
                    // The primary over TLS too: the master's URL says so.
                    Some(_) => {
                        self.connect_options()
                            .sentinel(
                                &sentinels.urls(),
                                &format!("rediss://{}", RedisSentinels::MASTER),
                            )
                            .await
                    }
                    None => {
                        RedisConnection::sentinel(&sentinels.addrs(), RedisSentinels::MASTER).await
                    }
                }
                .expect("connect through the test sentinel")
            }
        }
    }

    /// How connections are made: with the test kit's certificates on a TLS server or cluster.
    fn connect_options(&self) -> ConnectOptions {
        match self.tls() {
            Some(tls) => ConnectOptions::new().tls(
                TlsOptions::new()
                    .ca_pem(tls.ca_pem.clone())
                    .client_cert(tls.client_cert_pem.clone(), tls.client_key_pem.clone()),
            ),
            None => ConnectOptions::new(),
        }
    }

    /// The certificates of a TLS server or cluster.
    fn tls(&self) -> Option<&TestTls> {
        match (&self.server, &self.cluster) {
            (_, Some(cluster)) => cluster.tls(),
            (Some(server), None) => server.tls(),
            (None, None) => None,
        }
    }

    fn server_url(&self) -> String {
        self.server.as_ref().expect("a standalone Redis").url()
    }

    fn cluster_urls(&self) -> Vec<String> {
        self.cluster.as_ref().expect("a Redis Cluster").urls()
    }

    /// A plain connection for inspecting Redis, routing by key on a cluster.
    ///
    /// # Panics
    ///
    /// On the memory backend, or when the connection fails.
    pub async fn inspect(&self) -> Inspect {
        match self.kind {
            Kind::Memory => panic!("the memory backend has no Redis"),
            Kind::Redis | Kind::Pool | Kind::Sentinel => Inspect::Single(
                self.server
                    .as_ref()
                    .expect("a standalone Redis")
                    .client()
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect"),
            ),
            Kind::Cluster => Inspect::Cluster(
                match self.tls() {
                    Some(tls) => redis::cluster::ClusterClientBuilder::new(self.cluster_urls())
                        .certs(tls.certificates())
                        .build(),
                    None => redis::cluster::ClusterClient::new(self.cluster_urls()),
                }
                .expect("urls")
                .get_async_connection()
                .await
                .expect("connect"),
            ),
        }
    }

    /// Every key in Redis, by `SCAN` (on every node of a cluster), sorted.
    pub async fn keys(&self) -> Vec<String> {
        match (&self.server, &self.cluster) {
            (_, Some(cluster)) => cluster.keys(),
            (Some(server), None) => {
                let mut conn = server
                    .client()
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                redis_guard_testkit::inspect::scan_keys(&mut conn)
                    .await
                    .expect("SCAN")
            }
            (None, None) => Vec::new(),
        }
    }

    /// Every key in Redis whose name starts with the harness' prefix and then `part` (`c:`:
    /// the cache's entries and values), sorted.
    pub async fn keys_under(&self, part: &str) -> Vec<String> {
        let start = format!("{}{part}", self.prefix);
        let keys = self.keys().await;
        keys.into_iter().filter(|k| k.starts_with(&start)).collect()
    }

    /// Asserts that Redis holds at least `at_least` keys and that each has a TTL (or is gone
    /// since the scan: a lock released after its fill).
    ///
    /// # Panics
    ///
    /// When a key has no TTL, or there are fewer keys.
    pub async fn assert_every_key_has_a_ttl(&self, at_least: usize) {
        let keys = self.keys().await;
        assert!(keys.len() >= at_least, "{keys:?}");
        for key in keys {
            // -1: no TTL; -2: gone since the scan.
            let ttl = self.pttl(&key).await;
            assert!(ttl > 0 || ttl == -2, "{key} has no TTL ({ttl})");
        }
    }

    /// `PTTL` of `key`, wherever it lives.
    pub async fn pttl(&self, key: &str) -> i64 {
        let mut conn = self.inspect().await;
        redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("PTTL")
    }

    /// `SCRIPT FLUSH` on the server, or on every node of the cluster.
    pub async fn script_flush(&self) {
        match (&self.server, &self.cluster) {
            (_, Some(cluster)) => cluster
                .for_each_node(&redis::cmd("SCRIPT").arg("FLUSH").clone())
                .expect("SCRIPT FLUSH"),
            (Some(_), None) => {
                let mut conn = self.inspect().await;
                let () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut conn)
                    .await
                    .expect("SCRIPT FLUSH");
            }
            (None, None) => {}
        }
    }

    /// The key prefix this harness's limiters use.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The private Redis server, if any.
    pub fn server(&self) -> Option<&RedisServer> {
        self.server.as_ref()
    }

    /// Runs `args` as one command on the standalone Redis, or on every node of the cluster
    /// (`CONFIG RESETSTAT`, `CLIENT PAUSE 200 ALL`, …), for tests that steer the server.
    ///
    /// # Panics
    ///
    /// On the memory backend, or when the command fails.
    pub async fn admin(&self, args: &[&str]) {
        if let Some(cluster) = &self.cluster {
            let mut cmd = redis::cmd(args[0]);
            cmd.arg(&args[1..]);
            cluster
                .for_each_node(&cmd)
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            return;
        }
        let () = self.on_server(args).await;
    }

    /// Runs `args` on the standalone Redis over a new connection; its reply.
    async fn on_server<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let server = self.server().expect("a standalone Redis");
        let mut conn = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        redis::cmd(args[0])
            .arg(&args[1..])
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Calls of `command` (lower case, as `INFO commandstats` names it: `evalsha`,
    /// `script|load`) the standalone Redis, or every node of the cluster together, has served
    /// since it started or since the last `CONFIG RESETSTAT`.
    ///
    /// # Panics
    ///
    /// On the memory backend, or when Redis cannot be reached.
    pub async fn calls(&self, command: &str) -> u64 {
        let infos: Vec<String> = match &self.cluster {
            Some(cluster) => (0..cluster.ports().len())
                .map(|i| {
                    let mut conn = cluster.client_for(i).get_connection().expect("connect");
                    redis::cmd("INFO")
                        .arg("commandstats")
                        .query(&mut conn)
                        .expect("INFO commandstats")
                })
                .collect(),
            None => vec![self.on_server(&["INFO", "commandstats"]).await],
        };
        infos
            .iter()
            .map(|info| redis_guard_testkit::inspect::command_calls(info, command))
            .sum()
    }

    /// The private Redis server, to [freeze](RedisServer::freeze) or
    /// [restart](RedisServer::restart) it.
    pub fn server_mut(&mut self) -> Option<&mut RedisServer> {
        self.server.as_mut()
    }

    /// Stops Redis (to test failures).
    pub fn kill_redis(&mut self) {
        self.server = None;
        self.cluster = None;
        self.sentinels = None;
    }

    /// Lets `d` pass without waiting: the manual clock moves, and with it the memory backend's
    /// clock and the shift every Redis limiter of this harness adds to Redis `TIME`.
    pub async fn wait(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// Asserts a wait a limiter reported: exactly `exact` on memory (its clock stands still); on
    /// Redis real milliseconds pass during the test, so it may be up to 2 s shorter, never
    /// longer, and never zero.
    ///
    /// # Panics
    ///
    /// When `got` is not such a wait.
    pub fn assert_wait(&self, got: Duration, exact: Duration) {
        match self.kind {
            Kind::Memory => assert_eq!(got, exact),
            _ => assert!(
                got <= exact && got + Duration::from_secs(2) >= exact && got > Duration::ZERO,
                "{got:?} not within 2 s below {exact:?}"
            ),
        }
    }

    /// Moves time to `into` past the start of the next window of `period` (windows aligned to
    /// the backend's clock, as the sliding counter's are). On Redis the position is computed from
    /// `TIME`, so it is exact to within the few milliseconds the test itself takes.
    pub async fn align(&self, period: Duration, into: Duration) {
        let now = match self.kind {
            Kind::Memory => self.clock.now(),
            _ => {
                let mut conn = self.inspect().await;
                let (s, us): (u64, u64) = redis::cmd("TIME")
                    .query_async(&mut conn)
                    .await
                    .expect("TIME");
                Duration::from_secs(s) + Duration::from_micros(us) + self.clock.now()
            }
        };
        let p = period.as_micros();
        let next = (now.as_micros() / p + 1) * p;
        let to = u64::try_from(next - now.as_micros()).expect("fits");
        self.clock.advance(Duration::from_micros(to) + into);
    }
}

/// Runs each listed scenario against every backend: `memory::name`, `standalone::name`
/// (`ConnectionManager`), `pool::name` (`bb8`), `cluster::name` (3-master Redis Cluster) and
/// `sentinel::name` (a server found through a Redis Sentinel).
///
/// A scenario that only means something on Redis (what the store holds, Redis misbehaving) goes
/// in the `redis_only:` arm, which generates `redis_only::{standalone,pool,cluster,sentinel}::name` and
/// no memory test; one that needs a single server and a single connection (counting commands
/// with `MONITOR`) goes in `standalone_only:` (`standalone_only::standalone::name`). The
/// `tls_only:` arm runs a scenario over TLS, on Redis that speaks nothing else:
/// `tls_only::{standalone,pool,cluster,sentinel}::name`. A scenario never returns early on a backend it
/// does not apply to: every generated test asserts.
///
/// ```ignore
/// backend_suite!(counts_requests, retries_after);
/// backend_suite!(redis_only: keys_expire, scripts_reload);
/// backend_suite!(standalone_only: round_trips);
/// backend_suite!(tls_only: counts_requests);
/// ```
#[macro_export]
macro_rules! backend_suite {
    (redis_only: $($name:ident),* $(,)?) => {
        mod redis_only {
            use super::{$($name),*};
            $crate::backend_suite!(@kind standalone, redis, $($name),*);
            $crate::backend_suite!(@kind pool, pool, $($name),*);
            $crate::backend_suite!(@kind cluster, cluster, $($name),*);
            $crate::backend_suite!(@kind sentinel, sentinel, $($name),*);
        }
    };
    (tls_only: $($name:ident),* $(,)?) => {
        mod tls_only {
            use super::{$($name),*};
            $crate::backend_suite!(@kind standalone, redis_tls, $($name),*);
            $crate::backend_suite!(@kind pool, pool_tls, $($name),*);
            $crate::backend_suite!(@kind cluster, cluster_tls, $($name),*);
            $crate::backend_suite!(@kind sentinel, sentinel_tls, $($name),*);
        }
    };
    (standalone_only: $($name:ident),* $(,)?) => {
        mod standalone_only {
            use super::{$($name),*};
            $crate::backend_suite!(@kind standalone, redis, $($name),*);
        }
    };
    (@kind $module:ident, $ctor:ident, $($name:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Harness::$ctor().await).await;
                }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        $crate::backend_suite!(@kind memory, memory, $($name),*);
        $crate::backend_suite!(@kind standalone, redis, $($name),*);
        $crate::backend_suite!(@kind pool, pool, $($name),*);
        $crate::backend_suite!(@kind cluster, cluster, $($name),*);
        $crate::backend_suite!(@kind sentinel, sentinel, $($name),*);
    };
}

/// A TLS-only server that verifies clients, with fresh certificates.
fn tls_server() -> RedisServer {
    let tls = TestTls::generate().unwrap_or_else(|e| panic!("{e}"));
    RedisServer::start_tls(&tls, "yes").unwrap_or_else(|e| panic!("{e}"))
}

/// A connection for inspecting Redis in tests: one server, or a cluster (routing by key).
pub enum Inspect {
    /// A standalone server.
    Single(redis::aio::MultiplexedConnection),
    /// A cluster.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl std::fmt::Debug for Inspect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "Inspect::Single",
            Self::Cluster(_) => "Inspect::Cluster",
        })
    }
}

impl redis::aio::ConnectionLike for Inspect {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// A test response: status, headers and body text.
#[derive(Debug)]
pub struct Reply {
    /// The status.
    pub status: u16,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body.
    pub body: String,
}

impl Reply {
    /// Header `name` as a string ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// Calls `svc` once with `req` and collects the response.
///
/// # Panics
///
/// When the service fails (the layer never changes the inner error type; the inner services in
/// the suites never fail).
pub async fn call<S, B>(svc: S, req: Request<Full<Bytes>>) -> Reply
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    use tower::ServiceExt;
    let res = svc.oneshot(req).await.expect("service call");
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Counts the commands clients send to Redis, through `MONITOR` (on every node of a cluster):
/// commands that scripts run inside Redis are left out, so what remains is round trips. A
/// session's plain read, `HGETALL` and `PTTL` of one key (and `TIME` under a shifted clock)
/// sent together by one client, is one round trip and one entry:
/// `"HGETALL" "rg:s:{…}" | "PTTL" "rg:s:{…}"`; so is a response cache hit,
/// `"TIME" | "GET" "rg:cr:…"`, or with tags `"TIME" | "MGET" "rg:cr:…" …`.
#[derive(Debug)]
pub struct Monitor {
    /// Per node: its port and its MONITOR stream.
    nodes: Vec<(u16, tokio::io::BufReader<tokio::net::TcpStream>)>,
    marker: u64,
}

impl Monitor {
    /// Starts monitoring the harness' standalone server, or every node of its cluster.
    ///
    /// # Panics
    ///
    /// On the memory backend, or when a server does not accept MONITOR.
    pub async fn start(h: &Harness) -> Self {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let ports = match (&h.server, &h.cluster) {
            (_, Some(cluster)) => cluster.ports(),
            (Some(server), None) => vec![server.port()],
            (None, None) => panic!("the memory backend has no Redis to monitor"),
        };
        let mut nodes = Vec::new();
        for port in ports {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            stream.write_all(b"MONITOR\r\n").await.expect("MONITOR");
            let mut reader = tokio::io::BufReader::new(stream);
            let mut ok = String::new();
            reader.read_line(&mut ok).await.expect("reply");
            assert_eq!(ok.trim(), "+OK");
            nodes.push((port, reader));
        }
        Self { nodes, marker: 0 }
    }

    /// The client commands seen since the last call (or the start): waits for a marker it sends
    /// itself, so nothing in flight is missed. Lines are MONITOR's, e.g.
    /// `"evalsha" "…" "1" "rg:s:{…}"`.
    ///
    /// # Panics
    ///
    /// When the marker does not come back within 10 seconds.
    pub async fn commands(&mut self, h: &Harness) -> Vec<String> {
        self.split(h).await.0
    }

    /// The client commands and, apart, the commands scripts ran inside Redis (e.g.
    /// `"HSET" "rg:s:{…}" "$seen" "…"`: what a script wrote), since the last call (or the start).
    ///
    /// # Panics
    ///
    /// When the marker does not come back within 10 seconds.
    pub async fn split(&mut self, h: &Harness) -> (Vec<String>, Vec<String>) {
        let mut sent = Vec::new();
        let mut inside = Vec::new();
        for (node_sent, node_inside) in self.by_node(h).await {
            sent.extend(node_sent);
            inside.extend(node_inside);
        }
        (sent, inside)
    }

    /// [`split`](Self::split) node by node, in the order of [`ports`](Self::ports): each
    /// node's client commands (as round trips) and, apart, the commands its scripts ran.
    ///
    /// # Panics
    ///
    /// When the marker does not come back within 10 seconds.
    pub async fn by_node(&mut self, h: &Harness) -> Vec<(Vec<String>, Vec<String>)> {
        let _ = h;
        let mut nodes = Vec::new();
        for lines in self.lines().await {
            let (node_inside, node_sent): (Vec<String>, Vec<String>) =
                lines.into_iter().partition(|l| l.contains("[0 lua]"));
            let inside = node_inside
                .iter()
                .filter_map(|l| command(l).map(|(_, c)| c))
                .collect();
            let node_sent = node_sent
                .iter()
                .filter_map(|l| command(l))
                // The inspecting connections' own handshakes.
                .filter(|(_, c)| {
                    let c = c.to_ascii_lowercase();
                    !c.starts_with("\"hello\"") && !c.starts_with("\"client\"")
                })
                .collect();
            nodes.push((round_trips(node_sent), inside));
        }
        nodes
    }

    /// The ports of the monitored servers: the standalone one, or every node of the cluster.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|(port, _)| *port).collect()
    }

    /// Every MONITOR line since the last call, per node, up to a marker it sends itself.
    async fn lines(&mut self) -> Vec<Vec<String>> {
        use tokio::io::AsyncBufReadExt;
        self.marker += 1;
        let marker = format!("monitor-marker-{}", self.marker);
        let mut out = Vec::new();
        for (port, reader) in &mut self.nodes {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            let _: String = redis::cmd("ECHO")
                .arg(&marker)
                .query_async(&mut conn)
                .await
                .expect("ECHO");
            let mut seen = Vec::new();
            let read = async {
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).await.expect("monitor line") == 0 {
                        panic!("MONITOR connection closed");
                    }
                    if line.contains(&marker) {
                        return;
                    }
                    seen.push(line.trim().to_owned());
                }
            };
            tokio::time::timeout(Duration::from_secs(10), read)
                .await
                .expect("marker");
            out.push(seen);
        }
        out
    }
}

/// A MONITOR line's client (`127.0.0.1:54321`) and command (`"GET" "k"`).
fn command(line: &str) -> Option<(String, String)> {
    let (head, cmd) = line.split_once("] ")?;
    let client = head.rsplit_once(' ').map_or("", |(_, c)| c);
    Some((client.to_owned(), cmd.to_owned()))
}

/// `sent` (client, command) as round trips: a session's plain read (`HGETALL k`, then maybe
/// `PTTL k`, then maybe `TIME`, from the same client) becomes one entry, and so does a
/// response cache hit (`TIME`, then one `MGET`, or on a cluster the `GET`s of keys with one
/// hash tag; or, without `TIME`, on a cluster, the `GET` of an entry (`…c:…{tag}`) then one of
/// its hash tag).
fn round_trips(sent: Vec<(String, String)>) -> Vec<String> {
    let name = |c: &str| {
        c.split(' ')
            .next()
            .unwrap_or_default()
            .trim_matches('"')
            .to_ascii_lowercase()
    };
    let key = |c: &str| c.split(' ').nth(1).unwrap_or_default().to_owned();
    let hash_tag = |k: &str| {
        k.split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map_or_else(String::new, |(tag, _)| tag.to_owned())
    };
    // The open round trip: its client, what follows must match (a key, a hash tag), how many
    // commands it holds, and what began it.
    let mut out: Vec<String> = Vec::new();
    let mut open: Option<(String, String, usize, String)> = None;
    for (client, cmd) in sent {
        let follows = match &open {
            Some((c, k, n, first)) if *c == client => match (first.as_str(), name(&cmd).as_str()) {
                ("hgetall", "pttl") => *n == 1 && key(&cmd) == *k,
                // A session read's `TIME`: after its `PTTL` under a test clock, right after
                // the `HGETALL` otherwise.
                ("hgetall", "time") => *n == 1 || *n == 2,
                ("time", "mget") => *n == 1,
                ("time", "get") => *n == 1 || hash_tag(&key(&cmd)) == *k,
                ("get", "get") => *n == 1 && hash_tag(&key(&cmd)) == *k,
                _ => false,
            },
            _ => false,
        };
        if follows {
            if let (Some(last), Some((_, k, n, first))) = (out.last_mut(), open.as_mut()) {
                last.push_str(" | ");
                last.push_str(&cmd);
                *n += 1;
                if first == "time" {
                    if name(&cmd) == "mget" {
                        // Nothing follows an MGET.
                        *first = String::new();
                    } else {
                        *k = hash_tag(&key(&cmd));
                    }
                }
            }
            continue;
        }
        open = match name(&cmd).as_str() {
            "hgetall" => Some((client, key(&cmd), 1, "hgetall".to_owned())),
            "time" => Some((client, String::new(), 1, "time".to_owned())),
            "get" if key(&cmd).contains(":c:") && !hash_tag(&key(&cmd)).is_empty() => {
                Some((client, hash_tag(&key(&cmd)), 1, "get".to_owned()))
            }
            _ => None,
        };
        out.push(cmd);
    }
    out
}

/// `GET /` from `client` (its `x-client` header), as the rate-limit suites send it.
pub fn from(client: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-client", client)
        .body(Full::default())
        .expect("request")
}

/// The suites' key: the `x-client` header.
pub fn by_client() -> redis_guard::rate_limit::HeaderKey {
    redis_guard::rate_limit::HeaderKey::new(http::HeaderName::from_static("x-client"))
}

/// An inner service that answers every request `200` with an empty body.
pub fn empty_ok() -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<Response<Full<Bytes>>, std::convert::Infallible>> + Send,
> + Clone
+ Send {
    tower::service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, std::convert::Infallible>(Response::new(Full::default()))
    })
}

/// Serves `svc` over HTTP/1.1 on a fresh local port, a task per connection: one app.
pub async fn serve<S, B>(svc: S) -> std::net::SocketAddr
where
    S: tower::Service<
            Request<hyper::body::Incoming>,
            Response = Response<B>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let svc = hyper_util::service::TowerToHyperService::new(svc.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}
