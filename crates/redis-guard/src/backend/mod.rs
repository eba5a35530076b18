//! The engine under every layer: where state lives and how it is reached.
//!
//! - [`RedisBackend`]: a [`RedisConnection`], a key prefix and a timeout per call, shared by
//!   every Redis-backed component: the limiter, the session, cache and idempotency stores and
//!   the lock. It names keys, runs scripts
//!   (`EVALSHA`, `EVAL` after `NOSCRIPT`), groups keys by Cluster hash slot, and turns every
//!   failure into a [`BackendError`].
//! - [`Breaker`]: the backend's circuit breaker. After a few calls in a row found Redis
//!   unreachable or too slow, calls fail at once with [`BackendError::CircuitOpen`] instead of
//!   each waiting out the timeout; after a cool-down one call probes Redis, and the circuit
//!   closes when it answers.
//! - [`Lock`]: a lease on a name (random token, compare-and-delete release, renewal), on Redis
//!   for every replica or in memory for one process.
//! - The in-process backends' [`Clock`], and inside the crate the bounded expiring table both
//!   memory backends keep their state in.
//!
//! [`RedisConnection`] is the one connection type every Redis-backed component takes. It wraps
//! redis-rs' multiplexed [`ConnectionManager`](redis::aio::ConnectionManager), which pipelines
//! concurrent requests over one socket and reconnects on its own. Scripts run with `EVALSHA`;
//! when Redis answers `NOSCRIPT` (after a restart or a `SCRIPT FLUSH`) the call runs as `EVAL`
//! with the script's source, which caches it again. Behind Redis Sentinel (feature `sentinel`)
//! the connection follows the primary through failovers and loads the scripts it has run on the
//! new one before calls go there.

// What every middleware runs on, compiled with any of them.
cfg_middleware! {
    mod breaker;
    mod deadline;
    mod in_process;
    mod lock;
    mod lua_script;
    mod redis_backend;
    mod table;

    pub use breaker::{Breaker, BreakerState};
    pub(crate) use clock::MonotonicClock;
    pub(crate) use clock::micros;
    pub(crate) use in_process::InProcess;
    pub use in_process::InProcessBuilder;
    pub use lock::{Lock, LockError, LockGuard, MemoryLockStore, RedisLockStore};
    pub(crate) use lua_script::LuaScript;
    pub use redis_backend::RedisBackend;
    pub(crate) use table::ExpiringTable;
}
#[cfg(test)]
mod breaker_tests;
mod clock;
#[cfg(any(feature = "rate-limit", feature = "session", feature = "cache"))]
// The cache uses the coalescer with a form of its own, not the scripts' batch form.
#[cfg_attr(
    not(any(feature = "rate-limit", feature = "session")),
    allow(dead_code)
)]
mod coalesce;
#[cfg(all(test, any(feature = "rate-limit", feature = "session")))]
mod coalesce_tests;
#[cfg(feature = "rate-limit")]
mod deny_cache;
mod error;
#[cfg(feature = "sentinel")]
cfg_middleware! {
    unused_without {
        mod sentinel;
    }
}
#[cfg(feature = "cluster")]
cfg_middleware! {
    unused_without {
        mod cluster;
    }
}
#[cfg(feature = "cluster")]
mod slot;
// Without any middleware the connection has no user inside the crate.
cfg_middleware! {
    unused_without {
        mod connection;
        mod options;
        mod pending;
    }
}
#[cfg(feature = "tls")]
cfg_middleware! {
    unused_without {
        mod tls;
    }
}

pub use clock::Clock;
#[cfg(any(test, feature = "test-util"))]
pub use clock::ManualClock;
#[cfg(any(feature = "rate-limit", feature = "session", feature = "cache"))]
pub(crate) use coalesce::Coalescer;
#[cfg(any(feature = "rate-limit", feature = "session", feature = "cache"))]
pub(crate) use coalesce::DEFAULT_BATCH;
#[cfg(any(feature = "rate-limit", feature = "session"))]
pub(crate) use coalesce::Entry;
#[cfg(feature = "rate-limit")]
pub(crate) use coalesce::call_alone;
#[cfg(feature = "rate-limit")]
pub(crate) use coalesce::replies;
#[cfg(any(feature = "rate-limit", feature = "session", feature = "cache"))]
pub(crate) use coalesce::{Form, Replies};
pub use connection::RedisConnection;
#[cfg(feature = "rate-limit")]
pub(crate) use deny_cache::DenyCache;
pub use error::BackendError;
#[cfg(test)]
pub(crate) use in_process::ready;
#[cfg(feature = "cache")]
pub(crate) use lock::MAX_LEASE;
#[cfg(feature = "idempotency")]
pub(crate) use lock::token;
pub use options::ConnectOptions;
#[cfg(any(feature = "rate-limit", feature = "session", feature = "cache"))]
pub(crate) use redis_backend::ScriptCall;
#[cfg(all(test, feature = "session"))]
pub(crate) use table::SWEEP_PER_OP;
#[cfg(feature = "tls")]
pub use tls::TlsOptions;
