//! Where state lives: Redis connections, key naming, and the in-process backends' clock.
//!
//! [`RedisConnection`] is the one connection type every Redis-backed component takes. It wraps
//! redis-rs' multiplexed [`ConnectionManager`](redis::aio::ConnectionManager), which pipelines
//! concurrent requests over one socket and reconnects on its own. Scripts run with `EVALSHA` and
//! are loaded again automatically when Redis answers `NOSCRIPT` (after a restart or a
//! `SCRIPT FLUSH`).

mod clock;
mod error;
#[cfg(any(feature = "rate-limit", feature = "session"))]
mod in_process;
#[cfg(any(feature = "rate-limit", feature = "session"))]
mod redis;
#[cfg(any(feature = "rate-limit", feature = "session"))]
mod table;
// Without either middleware the connection has no user inside the crate.
#[cfg_attr(
    not(any(feature = "rate-limit", feature = "session")),
    allow(dead_code)
)]
mod connection;

#[cfg(feature = "test-util")]
pub use clock::ManualClock;
pub use clock::{Clock, MonotonicClock};
pub use connection::RedisConnection;
pub use error::BackendError;
#[cfg(any(feature = "rate-limit", feature = "session"))]
pub(crate) use in_process::InProcess;
#[cfg(any(feature = "rate-limit", feature = "session"))]
pub use redis::{DEFAULT_PREFIX, DEFAULT_TIMEOUT, RedisBackend};
#[cfg(any(feature = "rate-limit", feature = "session"))]
pub(crate) use table::ExpiringTable;
#[cfg(all(test, feature = "session"))]
pub(crate) use table::SWEEP_PER_OP;
