//! The variants: what each one puts in front of the same `GET /` → `"ok"` route.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use redis::aio::ConnectionManager;
use redis_guard::backend::RedisConnection;
use redis_guard::cache::{CacheLayer, RedisCacheStore};
use redis_guard::rate_limit::{
    Algorithm, ClientIp, Key, MemoryLimiter, Quota, RateLimitLayer, RedisLimiter, Rule,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

use crate::session_race::{redis_guard_session_layer, tower_sessions_layer};

/// Requests per second every "high quota" limiter admits: far above what one machine serves, so
/// every request of the run is admitted and the limiter's cost is what is measured.
pub const HIGH_QUOTA_PER_SECOND: u32 = 1_000_000;

/// The window of the hand-rolled `INCR` + `EXPIRE` counter (the usual recipe: 60 s).
const SEEDS_WINDOW_SECONDS: i64 = 60;

/// The bb8 pool size of the `redis-bb8` variant.
pub const BB8_POOL_SIZE: u32 = 32;

/// The session key the session variants read and write.
const COUNTER: &str = "n";

/// One configuration of the app under load. Every variant serves `GET /` answering `"ok"`; they
/// differ only in what runs in front of (or inside) that handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// No middleware.
    Bare,
    /// `tower_governor` (in-memory GCRA keyed by peer IP), high quota.
    Governor,
    /// redis-guard's `MemoryLimiter`, high quota.
    Memory,
    /// The same with the rate-limit headers of admitted responses off
    /// (`RateLimitLayerBuilder::rate_limit_headers(false)`): beside [`Memory`](Self::Memory) and
    /// [`Governor`](Self::Governor), it tells the headers' cost from the decision's.
    MemoryNoHeaders,
    /// The usual hand-rolled `INCR`, then `EXPIRE` on the first hit, in the handler.
    IncrExpire,
    /// redis-guard's `RedisLimiter` on a multiplexed `ConnectionManager`, GCRA, high quota.
    Redis,
    /// The same with the rule leased (`Rule::leased(10)`): the one busy client is admitted from
    /// blocks of quota reserved on Redis, one script call per block instead of per request.
    RedisLeased,
    /// The same with `Algorithm::FixedWindow`: on Redis >= 7 `MULTI` of `INCRBY` and
    /// `PEXPIRE … NX`, no script, the transactions of queued requests coalesced into one.
    RedisFixedWindow,
    /// The same, keyed by the peer's address and port: each `wrk` connection is a client of its
    /// own, so the decisions a call carries rarely share a key.
    RedisManyKeys,
    /// The same as [`Redis`](Self::Redis) with coalescing off (`batch_size(1)`): one `EVALSHA`
    /// per request.
    RedisUncoalesced,
    /// The same on a bb8 pool of [`BB8_POOL_SIZE`] connections (bb8's defaults otherwise).
    RedisBb8,
    /// The same on a 3-master Redis Cluster.
    RedisCluster,
    /// The same as [`Redis`](Self::Redis) with a quota of 1 per hour: every request after the
    /// first of a run is a 429.
    RedisAbusive,
    /// redis-guard sessions on `RedisSessionStore`; the handler reads a value.
    SessionsRead,
    /// redis-guard sessions; the handler reads a counter and writes it back incremented.
    SessionsModify,
    /// tower-sessions 0.14 + tower-sessions-redis-store 0.16; the handler reads a value.
    TowerSessionsRead,
    /// redis-guard's `CacheLayer` on `RedisCacheStore` (`ConnectionManager`): every request
    /// after the first of a run is a hit, served from Redis without the handler.
    CacheHit,
    /// The usual cache-aside written in the handler: `GET`, else compute and `SET … EX`.
    HandCache,
    /// tower-http-cache's `CacheLayer` on its Redis backend (`ConnectionManager`).
    TowerHttpCache,
    /// The same; the handler reads a counter and writes it back incremented.
    TowerSessionsModify,
}

/// Which Redis a variant talks to, and so where its Redis statistics come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisUse {
    /// None: the variant never calls Redis.
    None,
    /// The standalone `redis-server`.
    Standalone,
    /// The 3-master cluster.
    Cluster,
}

impl Variant {
    /// Every variant, in the order the table lists them and a round runs them.
    pub const ALL: [Self; 20] = [
        Self::Bare,
        Self::Governor,
        Self::Memory,
        Self::MemoryNoHeaders,
        Self::IncrExpire,
        Self::Redis,
        Self::RedisLeased,
        Self::RedisFixedWindow,
        Self::RedisManyKeys,
        Self::RedisUncoalesced,
        Self::RedisBb8,
        Self::RedisCluster,
        Self::RedisAbusive,
        Self::SessionsRead,
        Self::TowerSessionsRead,
        Self::SessionsModify,
        Self::TowerSessionsModify,
        Self::CacheHit,
        Self::HandCache,
        Self::TowerHttpCache,
    ];

    /// The name used by `--only` and in the table.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Bare => "bare",
            Self::Governor => "governor",
            Self::Memory => "memory",
            Self::MemoryNoHeaders => "memory-no-headers",
            Self::IncrExpire => "incr-expire",
            Self::Redis => "redis",
            Self::RedisLeased => "redis-leased",
            Self::RedisFixedWindow => "redis-fixed-window",
            Self::RedisManyKeys => "redis-many-keys",
            Self::RedisUncoalesced => "redis-uncoalesced",
            Self::RedisBb8 => "redis-bb8",
            Self::RedisCluster => "redis-cluster",
            Self::RedisAbusive => "redis-abusive",
            Self::SessionsRead => "sessions-read",
            Self::SessionsModify => "sessions-modify",
            Self::TowerSessionsRead => "tower-sessions-read",
            Self::TowerSessionsModify => "tower-sessions-modify",
            Self::CacheHit => "cache-hit",
            Self::HandCache => "hand-cache",
            Self::TowerHttpCache => "tower-http-cache",
        }
    }

    /// One line on what the variant runs, for the docs page.
    #[must_use]
    pub fn description(self) -> &'static str {
        match self {
            Self::Bare => "the route alone, no middleware: the reference every ratio divides by",
            Self::Governor => {
                "`tower_governor` 0.8 (`governor` in-memory GCRA), key = peer IP, quota far above the load"
            }
            Self::Memory => {
                "redis-guard `MemoryLimiter`, `ClientIp::peer()`, GCRA, quota 1,000,000/s (every request admitted)"
            }
            Self::MemoryNoHeaders => {
                "the `memory` limiter with the headers of admitted responses off \
                 (`rate_limit_headers(false)`): no `RateLimit-Policy` or `RateLimit` to write"
            }
            Self::IncrExpire => {
                "the usual recipe in the handler: `INCR rl:<ip>`, then `EXPIRE … 60` when the count is 1, \
                 through a redis-rs `ConnectionManager`"
            }
            Self::Redis => {
                "redis-guard `RedisLimiter` on `RedisConnection::open` (multiplexed `ConnectionManager`), \
                 `ClientIp::peer()`, GCRA, quota 1,000,000/s"
            }
            Self::RedisLeased => {
                "the `redis` limiter with the rule leased (`Rule::leased(10)`): the busy client is admitted \
                 from blocks reserved on Redis (at most 10 % of the burst each, one script call per block)"
            }
            Self::RedisFixedWindow => {
                "the `redis` limiter with `Algorithm::FixedWindow`: on Redis >= 7 `MULTI` of \
                 `INCRBY`, `PEXPIRE … NX` and `PTTL` instead of a script, the requests queued while \
                 two transactions are in flight going as one (one `INCRBY` of their costs per key)"
            }
            Self::RedisManyKeys => {
                "the same limiter keyed by the peer's address and port: each of `wrk`'s connections is a client \
                 of its own (64 keys), so the decisions a coalesced call carries rarely share a key"
            }
            Self::RedisUncoalesced => {
                "the `redis` limiter with coalescing off (`RedisLimiter::batch_size(1)`): one `EVALSHA` per request"
            }
            Self::RedisBb8 => {
                "the same limiter on a bb8 pool of 32 (`bb8-redis`, bb8's defaults: a connection is tested on checkout)"
            }
            Self::RedisCluster => {
                "the same limiter on `RedisConnection::cluster` against a 3-master Redis Cluster on this machine"
            }
            Self::RedisAbusive => {
                "the `redis` limiter with a quota of 1/hour: every request after the first of a run is a 429"
            }
            Self::SessionsRead => {
                "redis-guard `SessionLayer` on `RedisSessionStore` (`ConnectionManager`); the handler reads one value"
            }
            Self::SessionsModify => {
                "the same redis-guard sessions; the handler reads a counter and inserts it back incremented"
            }
            Self::TowerSessionsRead => {
                "tower-sessions 0.14 + tower-sessions-redis-store 0.16 (fred pool of 2); the handler reads one value"
            }
            Self::TowerSessionsModify => {
                "the same tower-sessions setup; the handler reads a counter and inserts it back incremented"
            }
            Self::CacheHit => {
                "redis-guard `CacheLayer` on `RedisCacheStore` (`ConnectionManager`), defaults (lock on miss): \
                 the first request fills, every other one is a hit read from Redis (a `GET`, `TIME` at most once a second; \
                 under load the hits that wait for room share one `MGET`; no script)"
            }
            Self::HandCache => {
                "the usual cache-aside in the handler: `GET hc:/`, else compute and `SET hc:/ … EX 60`, \
                 through a redis-rs `ConnectionManager`: every request after the first is one `GET`"
            }
            Self::TowerHttpCache => {
                "tower-http-cache 0.6 `CacheLayer` on its `RedisBackend` (`ConnectionManager`), ttl 60 s, \
                 key = path: every request after the first is a hit read from Redis"
            }
        }
    }

    /// Which Redis the variant calls.
    #[must_use]
    pub fn redis_use(self) -> RedisUse {
        match self {
            Self::Bare | Self::Governor | Self::Memory | Self::MemoryNoHeaders => RedisUse::None,
            Self::RedisCluster => RedisUse::Cluster,
            _ => RedisUse::Standalone,
        }
    }

    /// Whether the load must carry a session cookie (created by `POST /start` before each run).
    #[must_use]
    pub fn needs_session(self) -> bool {
        matches!(
            self,
            Self::SessionsRead
                | Self::SessionsModify
                | Self::TowerSessionsRead
                | Self::TowerSessionsModify
        )
    }

    /// Whether every request but the first is expected to be denied.
    #[must_use]
    pub fn expects_denials(self) -> bool {
        self == Self::RedisAbusive
    }

    /// Builds the variant's app. `redis_url` is the standalone server, `cluster` the cluster's
    /// node URLs (needed by [`RedisCluster`](Self::RedisCluster) only).
    ///
    /// # Errors
    ///
    /// A connection or configuration failure, described.
    pub async fn app(self, redis_url: &str, cluster: Option<&[String]>) -> Result<Router, String> {
        let high = Quota::per_second(HIGH_QUOTA_PER_SECOND);
        let router = match self {
            Self::Bare => ok_route(),
            Self::Governor => {
                let config = GovernorConfigBuilder::default()
                    // One element every 1000 ns: 1,000,000/s, as `high`.
                    .per_nanosecond(1000)
                    .burst_size(HIGH_QUOTA_PER_SECOND)
                    .finish()
                    .ok_or("tower_governor refused the configuration")?;
                ok_route().layer(GovernorLayer::new(config))
            }
            Self::Memory => ok_route().layer(limit(MemoryLimiter::new(), high)?),
            Self::MemoryNoHeaders => ok_route().layer(
                RateLimitLayer::builder(MemoryLimiter::new())
                    .rule("api", ClientIp::peer(), high)
                    .rate_limit_headers(false)
                    .build()
                    .map_err(|e| format!("rate-limit layer: {e}"))?,
            ),
            Self::IncrExpire => {
                let conn = manager(redis_url).await?;
                Router::new().route("/", get(incr_expire)).with_state(conn)
            }
            Self::Redis => ok_route().layer(limit(
                RedisLimiter::new(backend(open(redis_url).await?)),
                high,
            )?),
            Self::RedisLeased => ok_route().layer(
                RateLimitLayer::builder(RedisLimiter::new(backend(open(redis_url).await?)))
                    .rule_with(Rule::new("api", high).leased(10), ClientIp::peer())
                    .build()
                    .map_err(|e| format!("rate-limit layer: {e}"))?,
            ),
            Self::RedisFixedWindow => ok_route().layer(
                RateLimitLayer::builder(RedisLimiter::new(backend(open(redis_url).await?)))
                    .rule_with(
                        Rule::new("api", high).with_algorithm(Algorithm::FixedWindow),
                        ClientIp::peer(),
                    )
                    .build()
                    .map_err(|e| format!("rate-limit layer: {e}"))?,
            ),
            Self::RedisManyKeys => {
                let limiter = RedisLimiter::new(backend(open(redis_url).await?));
                let by_connection = |parts: &axum::http::request::Parts| {
                    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>()?;
                    Some(Key::from(peer.0.to_string()))
                };
                ok_route().layer(
                    RateLimitLayer::new(limiter, "api", by_connection, high)
                        .map_err(|e| format!("rate-limit layer: {e}"))?,
                )
            }
            Self::RedisUncoalesced => ok_route().layer(limit(
                RedisLimiter::new(backend(open(redis_url).await?)).batch_size(1),
                high,
            )?),
            Self::RedisAbusive => ok_route().layer(limit(
                RedisLimiter::new(backend(open(redis_url).await?)),
                Quota::per_hour(1),
            )?),
            Self::RedisBb8 => {
                let manager = bb8_redis::RedisConnectionManager::new(redis_url)
                    .map_err(|e| format!("bb8 manager for {redis_url}: {e}"))?;
                let pool = bb8::Pool::builder()
                    .max_size(BB8_POOL_SIZE)
                    .build(manager)
                    .await
                    .map_err(|e| format!("bb8 pool on {redis_url}: {e}"))?;
                ok_route().layer(limit(RedisLimiter::new(RedisConnection::from(pool)), high)?)
            }
            Self::RedisCluster => {
                let nodes = cluster.ok_or("the redis-cluster variant needs the cluster")?;
                let conn = RedisConnection::cluster(nodes)
                    .await
                    .map_err(|e| format!("connecting to the cluster {nodes:?}: {e}"))?;
                ok_route().layer(limit(RedisLimiter::new(conn), high)?)
            }
            Self::SessionsRead | Self::SessionsModify => {
                let modify = self == Self::SessionsModify;
                session_routes::<redis_guard::session::Session>(modify)
                    .layer(redis_guard_session_layer(redis_url).await?)
            }
            Self::TowerSessionsRead | Self::TowerSessionsModify => {
                let modify = self == Self::TowerSessionsModify;
                session_routes::<tower_sessions::Session>(modify)
                    .layer(tower_sessions_layer(redis_url).await?)
            }
            Self::CacheHit => {
                let store = RedisCacheStore::new(backend(open(redis_url).await?));
                // The route sends no `Cache-Control`: fresh 60 s by the layer's heuristic.
                let layer = CacheLayer::builder(store)
                    .ttl(std::time::Duration::from_secs(60))
                    .build()
                    .map_err(|e| format!("cache layer: {e}"))?;
                ok_route().layer(layer)
            }
            Self::HandCache => {
                let conn = manager(redis_url).await?;
                Router::new().route("/", get(hand_cache)).with_state(conn)
            }
            Self::TowerHttpCache => {
                let backend =
                    tower_http_cache::backend::redis::RedisBackend::new(manager(redis_url).await?);
                let layer = tower_http_cache::CacheLayer::builder(backend)
                    .ttl(HAND_CACHE_TTL)
                    .key_extractor(tower_http_cache::layer::KeyExtractor::path())
                    .build();
                // Its service needs a `Sync` response body, which axum's is not: the same
                // `"ok"` handler as a plain service, mounted as the route.
                let handler = tower::service_fn(|_: axum::extract::Request| async {
                    Ok::<_, std::convert::Infallible>(axum::http::Response::new(String::from("ok")))
                });
                let service = tower::ServiceBuilder::new()
                    .layer(axum::error_handling::HandleErrorLayer::new(
                        |e: tower::BoxError| async move {
                            (StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
                        },
                    ))
                    .layer(layer)
                    .service(handler);
                Router::new().route_service("/", service)
            }
        };
        Ok(router)
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Variant {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        by_name(&Self::ALL, Self::name, s, "variant")
    }
}

/// The item of `all` whose `name` is `s` (trimmed), or an error that lists the names; `what`
/// says what they are.
pub(crate) fn by_name<T: Copy>(
    all: &[T],
    name: fn(T) -> &'static str,
    s: &str,
    what: &str,
) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|&v| name(v) == s.trim())
        .ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|&v| name(v)).collect();
            format!("unknown {what} {s:?}; the {what}s are {}", names.join(", "))
        })
}

/// `GET /` → `"ok"`.
pub fn ok_route() -> Router {
    Router::new().route("/", get(ok))
}

async fn ok() -> &'static str {
    "ok"
}

pub(crate) async fn open(redis_url: &str) -> Result<RedisConnection, String> {
    RedisConnection::open(redis_url)
        .await
        .map_err(|e| format!("connecting to {redis_url}: {e}"))
}

/// A redis-rs `ConnectionManager` on `redis_url`.
async fn manager(redis_url: &str) -> Result<ConnectionManager, String> {
    let client = redis::Client::open(redis_url).map_err(|e| e.to_string())?;
    ConnectionManager::new(client)
        .await
        .map_err(|e| format!("connecting to {redis_url}: {e}"))
}

/// How long the hand-rolled cache and tower-http-cache keep the page.
const HAND_CACHE_TTL: Duration = Duration::from_secs(60);

/// The usual cache-aside in the handler: `GET` the page; on a miss compute it and
/// `SET … EX`. One round trip a hit, no freshness, no stampede protection, no invalidation.
async fn hand_cache(State(mut conn): State<ConnectionManager>) -> Response {
    const KEY: &str = "hc:/";
    let cached: redis::RedisResult<Option<Vec<u8>>> =
        redis::cmd("GET").arg(KEY).query_async(&mut conn).await;
    match cached {
        Ok(Some(body)) => return body.into_response(),
        Ok(None) => {}
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
    let body = ok().await;
    let stored: redis::RedisResult<()> = redis::cmd("SET")
        .arg(KEY)
        .arg(body)
        .arg("EX")
        .arg(HAND_CACHE_TTL.as_secs())
        .query_async(&mut conn)
        .await;
    if let Err(e) = stored {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    body.into_response()
}

/// `conn` with the library's defaults; under the profile (`PROFILE_REDIS_TIMEOUT_MS`, set by
/// `profile --callgrind`) a longer timeout, since the app runs tens of times slower under
/// valgrind than Redis answers, and a call that timed out would be decided by the failure
/// policy instead.
pub(crate) fn backend(conn: RedisConnection) -> redis_guard::backend::RedisBackend {
    let backend = redis_guard::backend::RedisBackend::new(conn);
    match std::env::var("PROFILE_REDIS_TIMEOUT_MS").map(|ms| ms.parse()) {
        Ok(Ok(ms)) => backend.timeout(std::time::Duration::from_millis(ms)),
        _ => backend,
    }
}

/// One rule keyed by the peer IP, with the library's defaults (GCRA).
fn limit(
    limiter: impl redis_guard::rate_limit::Limiter,
    quota: Quota,
) -> Result<RateLimitLayer, String> {
    RateLimitLayer::new(limiter, "api", ClientIp::peer(), quota)
        .map_err(|e| format!("rate-limit layer: {e}"))
}

/// The usual recipe: count in a fixed window with `INCR`, start the window with `EXPIRE` when
/// the count is 1. Two round trips on a key's first hit, one afterwards; not atomic (a crash
/// between the two leaves a counter without a TTL), which is what most hand-written limiters do.
async fn incr_expire(
    State(mut conn): State<ConnectionManager>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    let key = format!("rl:{}", peer.ip());
    let count: i64 = match redis::cmd("INCR").arg(&key).query_async(&mut conn).await {
        Ok(n) => n,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    if count == 1 {
        let expired: redis::RedisResult<()> = redis::cmd("EXPIRE")
            .arg(&key)
            .arg(SEEDS_WINDOW_SECONDS)
            .query_async(&mut conn)
            .await;
        if let Err(e) = expired {
            return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
        }
    }
    if count > i64::from(HIGH_QUOTA_PER_SECOND) * SEEDS_WINDOW_SECONDS {
        StatusCode::TOO_MANY_REQUESTS.into_response()
    } else {
        "ok".into_response()
    }
}

/// The session calls of the session handlers, on either library's `Session` extractor.
trait BenchSession: axum::extract::FromRequestParts<()> + Send + Sync + 'static {
    /// The counter, if the session holds one.
    fn counter(&self) -> impl Future<Output = Result<Option<i64>, String>> + Send;
    /// Stores the counter.
    fn set_counter(&self, n: i64) -> impl Future<Output = Result<(), String>> + Send;
}

impl BenchSession for redis_guard::session::Session {
    async fn counter(&self) -> Result<Option<i64>, String> {
        self.get(COUNTER).await.map_err(|e| e.to_string())
    }

    async fn set_counter(&self, n: i64) -> Result<(), String> {
        self.insert(COUNTER, &n).await.map_err(|e| e.to_string())
    }
}

impl BenchSession for tower_sessions::Session {
    async fn counter(&self) -> Result<Option<i64>, String> {
        self.get(COUNTER).await.map_err(|e| e.to_string())
    }

    async fn set_counter(&self, n: i64) -> Result<(), String> {
        self.insert(COUNTER, n).await.map_err(|e| e.to_string())
    }
}

/// `POST /start` creates the session (so its response sets the cookie the load sends back);
/// `GET /` reads the counter, and with `modify` writes it back incremented.
fn session_routes<S: BenchSession>(modify: bool) -> Router {
    let read = get(|session: S| async move { session_read(&session, false).await });
    let read_modify = get(|session: S| async move { session_read(&session, true).await });
    Router::new()
        .route("/", if modify { read_modify } else { read })
        .route("/start", post(session_start::<S>))
}

async fn session_start<S: BenchSession>(session: S) -> Response {
    match session.set_counter(0).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

async fn session_read<S: BenchSession>(session: &S, modify: bool) -> Response {
    let result = async {
        let n = session
            .counter()
            .await?
            .ok_or("the session holds no counter: POST /start first and send its cookie")?;
        if modify {
            session.set_counter(n + 1).await?;
        }
        Ok::<_, String>(())
    }
    .await;
    match result {
        Ok(()) => "ok".into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

/// Serves `router` on `127.0.0.1:<free port>` with the peer address available to layers
/// (`ConnectInfo<SocketAddr>`), in a background task; returns the address and the task.
///
/// # Errors
///
/// No loopback port can be bound.
pub async fn serve_with_peer(router: Router) -> Result<(SocketAddr, JoinHandle<()>), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("binding 127.0.0.1:0: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("local address: {e}"))?;
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, service).await {
            eprintln!("redis-guard-bench: serving {addr} failed: {e}");
        }
    });
    Ok((addr, task))
}

/// How long a setup request (`POST /start`) may take.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(5);
