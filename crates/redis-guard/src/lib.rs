//! # redis-guard
//!
//! Tower middlewares backed by Redis, for axum, hyper or any tower stack.
//!
//! - [`rate_limit`]: [`RateLimitLayer`](rate_limit::RateLimitLayer) decides every request in one
//!   atomic Lua script (clock from Redis `TIME`), shared by all replicas, and answers `429` with
//!   `Retry-After` and the IETF `RateLimit` headers. An in-process
//!   [`MemoryLimiter`](rate_limit::MemoryLimiter) makes the same decisions without Redis.
//! - [`session`]: [`SessionLayer`](session::SessionLayer) keeps cookie sessions as Redis hashes,
//!   one field per key, with an idle and an absolute expiry, id rotation, logout and "log out
//!   everywhere". A [`MemorySessionStore`](session::MemorySessionStore) has the same semantics
//!   in process.
//! - [`backend`]: the Redis connection every component shares, and the clock seam of the
//!   in-process backends.
//!
//! It replaces the hand-rolled `INCR` + `EXPIRE` in a handler: two round trips, a race between
//! them, and a key that never expires when the process dies in between.
//!
//! ## Features
//!
//! - `rate-limit` (default): the rate-limit middleware.
//! - `session` (default): the session middleware.
//! - `bb8`: a `bb8` pool as a connection source.
//! - `cluster`: Redis Cluster.
//! - `axum`: reads axum's `ConnectInfo<SocketAddr>` for the client address.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
#[cfg(any(feature = "rate-limit", all(feature = "session", feature = "axum")))]
mod problem;
#[cfg(any(feature = "rate-limit", feature = "session"))]
mod sealed {
    /// Seals [`Limiter`](crate::rate_limit::Limiter) and
    /// [`SessionStore`](crate::session::SessionStore): their methods move internal types whose
    /// shape is not a stable contract yet, so only this crate implements them.
    pub trait Sealed {}

    impl<T: Sealed + ?Sized> Sealed for std::sync::Arc<T> {}
}
#[cfg(feature = "rate-limit")]
pub mod rate_limit;
#[cfg(feature = "session")]
pub mod session;
