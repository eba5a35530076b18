//! # redis-guard
//!
//! Tower middlewares backed by Redis, for axum, hyper or any tower stack: five layers and a
//! distributed lock, on one backend that every replica of a service shares (or in process,
//! without Redis, for development, tests and single instances).
//!
//! The five layers:
//!
//! - **Rate limiting**, [`rate_limit`]: [`RateLimitLayer`](rate_limit::RateLimitLayer) decides
//!   every request in one atomic Lua script (clock from Redis `TIME`), shared by all replicas,
//!   and answers `429` with `Retry-After` and the IETF `RateLimit` headers. An in-process
//!   [`MemoryLimiter`](rate_limit::MemoryLimiter) makes the same decisions without Redis.
//! - **Sessions**, [`session`]: [`SessionLayer`](session::SessionLayer) keeps cookie sessions as
//!   Redis hashes, one field per key, with an idle and an absolute expiry, id rotation, logout
//!   and "log out everywhere". A [`MemorySessionStore`](session::MemorySessionStore) has the
//!   same semantics in process.
//! - **Response cache**, [`cache`]: [`CacheLayer`](cache::CacheLayer) caches `GET` responses in
//!   Redis (or in process) with a TTL on every key, stampede protection (lock on miss or
//!   XFetch, stale while revalidate), stale copies while the handler fails, and invalidation by
//!   tag.
//! - **Value cache**, [`cache`]: [`ValueCache`](cache::ValueCache) does the same for values
//!   inside a handler (`get_or_compute`, `add`, tags): one computation for a crowd of callers
//!   on every replica.
//! - **Idempotency**, [`idempotency`] (feature `idempotency`):
//!   [`IdempotencyLayer`](idempotency::IdempotencyLayer) runs a `POST` with an
//!   `Idempotency-Key` once and replays its stored response to a retry, on every replica (`409`
//!   while it runs, `422` for a key reused on another request).
//!
//! The **lock**, [`Lock`](backend::Lock): a lease on a name for work that one replica at a time
//! should do (a token per holder, compare-and-delete release, a lease that expires and can be
//! extended). The response and value caches take it on a miss (their default stampede
//! protection).
//!
//! Under them:
//!
//! - [`client_ip`]: the client's address behind the proxies you trust, as the limiter keys on it
//!   and the sessions record it.
//! - [`telemetry`]: what every layer reports, through `tracing` and the `metrics` facade.
//! - [`backend`]: the engine under every layer: [`RedisBackend`](backend::RedisBackend)
//!   (connection, key prefix, timeout, scripts, circuit breaker), one error type, and the
//!   in-process backends' clock.
//! - [`ConfigError`]: the one error of every builder (and of parsing a
//!   [`Quota`](rate_limit::Quota)): what is wrong, in which rule or setting, with which value.
//!
//! The guide (`docs/guide.md` in the repository) gives each layer's common path and the choices
//! it asks for; `docs/replicas.md` walks through the most common deployment, several replicas
//! behind a load balancer, down to what each layer keeps in Redis and for how long.
//!
//! It replaces the hand-rolled `INCR` + `EXPIRE` in a handler: two round trips, a race between
//! them, and a key that never expires when the process dies in between.
//!
//! ## Quick start
//!
//! Two of the layers on an axum router, in process (swap in [`RedisLimiter`](rate_limit::RedisLimiter)
//! and [`RedisSessionStore`](session::RedisSessionStore) on a
//! [`RedisBackend`](backend::RedisBackend) to share state between replicas):
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use axum::{Router, routing::get};
//! use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer};
//! use redis_guard::session::{MemorySessionStore, Session, SessionError, SessionLayer};
//!
//! async fn hello(session: Session) -> Result<String, SessionError> {
//!     let visits = session.increment("visits", 1).await?;
//!     Ok(format!("hello, visit {visits}"))
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let app: Router = Router::new()
//!     .route("/hello", get(hello))
//!     .layer(RateLimitLayer::new(MemoryLimiter::new(), "api", ClientIp::peer(), Quota::per_minute(60))?)
//!     .layer(SessionLayer::new(MemorySessionStore::new())?);
//! // Serve it with `app.into_make_service_with_connect_info::<std::net::SocketAddr>()`, so that
//! // `ClientIp` sees the peer address.
//! # Ok(()) }
//! # }
//! ```
//!
//! ## Stores
//!
//! Every middleware keeps its state in a store, named and made one way: `Redis…Store::new(conn)`
//! on Redis (shared by every replica; `conn` a [`RedisBackend`](backend::RedisBackend) or a
//! [`RedisConnection`](backend::RedisConnection)) and `Memory…Store::new()` in this process
//! (`Memory…Store::builder()` sets a capacity or a test clock), given to the layer's `new` or
//! `builder`:
//!
//! | what | on Redis | in process | given to |
//! |---|---|---|---|
//! | sessions | `RedisSessionStore::new(conn)` | `MemorySessionStore::new()` | `SessionLayer::new` |
//! | responses, values | `RedisCacheStore::new(conn)` | `MemoryCacheStore::new()` | `CacheLayer::new`, `ValueCache::new` |
//! | idempotency records | `RedisIdempotencyStore::new(conn)` | `MemoryIdempotencyStore::new()` | `IdempotencyLayer::new` |
//! | locks | `RedisLockStore::new(conn)` | `MemoryLockStore::new()` | `Lock::new` |
//!
//! (The rate limiter is the store of its layer: `RedisLimiter::new(conn)`,
//! `MemoryLimiter::new()`.)
//!
//! ```
//! # #[cfg(all(feature = "session", feature = "cache", feature = "idempotency"))] {
//! use redis_guard::backend::{Lock, MemoryLockStore};
//! use redis_guard::cache::{CacheLayer, MemoryCacheStore};
//! use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
//! use redis_guard::session::{MemorySessionStore, SessionLayer};
//! # fn main() -> Result<(), redis_guard::ConfigError> {
//! let sessions = SessionLayer::new(MemorySessionStore::new())?;
//! let cache = CacheLayer::new(MemoryCacheStore::builder().capacity(1_000).build())?;
//! let idempotency = IdempotencyLayer::new(MemoryIdempotencyStore::new())?;
//! let locks = Lock::new(MemoryLockStore::new());
//! # let _ = (sessions, cache, idempotency, locks); Ok(()) }
//! # }
//! ```
//!
//! ## Features
//!
//! - `rate-limit` (default): the rate-limit middleware.
//! - `session` (default): the session middleware.
//! - `cache` (default): the response-cache middleware and the value cache.
//! - `idempotency`: the `Idempotency-Key` middleware.
//! - `metrics` (default): counters, gauges and histograms through the `metrics` facade; names in
//!   [`telemetry`].
//! - `bb8`: a `bb8` pool as a connection source.
//! - `cluster`: Redis Cluster.
//! - `sentinel`: Redis Sentinel (`RedisConnection::sentinel`), following the primary through
//!   failovers.
//! - `axum` (default): reads axum's `ConnectInfo<SocketAddr>` for the client address; `Session`
//!   is an extractor. A stack without axum (hyper, tonic) can turn it off with
//!   `default-features = false`.
//! - `test-util`: test seams (a manual clock, a time shift for Redis `TIME`); for
//!   dev-dependencies only.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs link each part to the others and to the backends' optional sources. They are
// published with every feature on (docs.rs), where every link resolves and a broken one fails
// the build. A build with some features off cannot resolve the links to what is off, and says
// so once per link: expected there, so not reported.
#![cfg_attr(
    not(all(
        feature = "rate-limit",
        feature = "session",
        feature = "cache",
        feature = "idempotency",
        feature = "metrics",
        feature = "axum",
        feature = "bb8",
        feature = "cluster",
        feature = "sentinel",
        feature = "tls",
        feature = "test-util"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

#[macro_use]
mod macros;

pub mod backend;
cfg_middleware! {
    mod body;
}
mod error;
pub use error::{ConfigError, ConfigErrorKind};
#[cfg(any(feature = "rate-limit", feature = "session"))]
pub mod client_ip;
#[cfg(any(feature = "rate-limit", feature = "cache"))]
mod prehashed;
#[cfg(any(feature = "rate-limit", feature = "session", feature = "idempotency"))]
mod problem;
pub mod telemetry;
#[cfg(all(test, any(feature = "rate-limit", feature = "idempotency")))]
mod test_helpers;
#[cfg(any(feature = "rate-limit", feature = "session", feature = "cache"))]
mod sealed {
    /// Seals [`Limiter`](crate::rate_limit::Limiter),
    /// [`SessionStore`](crate::session::SessionStore) and
    /// [`CacheStore`](crate::cache::CacheStore): their methods move internal types whose
    /// shape is not a stable contract yet, so only this crate implements them.
    pub trait Sealed {}

    /// The default type parameter of the engines under [`Limiter`](crate::rate_limit::Limiter)
    /// and [`SessionStore`](crate::session::SessionStore): a crate-private type in their trait
    /// reference makes their methods uncallable outside this crate, even through a
    /// `dyn Limiter` or an `L: Limiter` bound (which see supertrait methods without naming
    /// the trait).
    #[allow(dead_code)] // never built: it only seals
    pub(crate) struct Private;

    impl<T: Sealed + ?Sized> Sealed for std::sync::Arc<T> {}
}
#[cfg(feature = "cache")]
pub mod cache;
#[cfg(feature = "idempotency")]
pub mod idempotency;
#[cfg(feature = "rate-limit")]
pub mod rate_limit;
#[cfg(any(feature = "cache", feature = "session"))]
mod served;
#[cfg(feature = "session")]
pub mod session;

// The code blocks of the READMEs, the guide and its pages, and SECURITY.md are doctests: they
// compile (and the ones without `no_run` run) with every `cargo test`.
#[cfg(all(
    doctest,
    feature = "axum",
    feature = "rate-limit",
    feature = "session",
    feature = "cache",
    feature = "idempotency"
))]
mod doc_files {
    #[doc = include_str!("../../../README.md")]
    struct Readme;

    #[doc = include_str!("../README.md")]
    struct CrateReadme;

    // The guide's "Managed Redis" section connects over TLS.
    #[cfg(feature = "tls")]
    #[doc = include_str!("../../../docs/guide.md")]
    struct Guide;

    #[doc = include_str!("../../../docs/replicas.md")]
    struct Replicas;

    #[doc = include_str!("../../../docs/rate-limiting.md")]
    struct RateLimiting;

    #[doc = include_str!("../../../docs/caching.md")]
    struct Caching;

    #[doc = include_str!("../../../docs/redis.md")]
    struct Redis;

    #[doc = include_str!("../../../docs/layout.md")]
    struct Layout;

    #[doc = include_str!("../../../SECURITY.md")]
    struct Security;
}
