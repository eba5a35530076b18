//! Where state lives: Redis connections, key naming, and the in-process backends' clock.
//!
//! [`RedisConnection`] is the one connection type every Redis-backed component takes. It wraps
//! redis-rs' multiplexed [`ConnectionManager`](redis::aio::ConnectionManager), which pipelines
//! concurrent requests over one socket and reconnects on its own. Scripts run with `EVALSHA` and
//! are loaded again automatically when Redis answers `NOSCRIPT` (after a restart or a
//! `SCRIPT FLUSH`).

mod clock;
// Without either middleware the connection has no user inside the crate.
#[cfg_attr(
    not(any(feature = "rate-limit", feature = "session")),
    allow(dead_code)
)]
mod connection;

#[cfg(any(feature = "rate-limit", feature = "session"))]
pub(crate) use clock::shift_micros;
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use connection::RedisConnection;
