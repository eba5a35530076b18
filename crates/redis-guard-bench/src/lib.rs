//! Side-by-side measurements of redis-guard against its peers, on a real Redis.
//!
//! Not published. Everything here runs against a `redis-server` started by
//! `redis-guard-testkit` and an app served on a loopback port.
//!
//! - [`session_race`]: how many writes a session layer loses when two concurrent requests on one
//!   session each change a different key. The driver
//!   ([`lost_writes`]) speaks plain HTTP/1.1, so any session layer can be measured by serving the
//!   routes that module documents; [`tower_sessions_app`] is the tower-sessions +
//!   tower-sessions-redis-store side, [`redis_guard_app`] ours.
//! - [`throughput`]: req/s, latency, Redis commands, Redis CPU and bytes per key of every variant
//!   (bare route, tower_governor, our memory and Redis limiters, the hand-rolled `INCR` +
//!   `EXPIRE`, our sessions and tower-sessions) under `wrk`, alternating; the `bench` binary
//!   runs it and writes `docs/benchmarks.md`. [`throughput::scripts`] (`bench --scripts`): Redis
//!   CPU per call and per decision of the rate-limit scripts at batches of 1, 8 and 64, beside a
//!   minimal reference GCRA.
//! - [`profile`]: callgrind instructions per request of the in-memory stacks (bare route,
//!   tower_governor, our memory limiter with and without headers, and every request a 429),
//!   driven through `tower::Service::call` in process; the `profile` binary runs it.

pub mod profile;
pub mod session_race;
pub mod throughput;

pub use session_race::{
    RaceBarrier, RaceReport, lost_writes, redis_guard_app, redis_guard_session_layer, serve,
    tower_sessions_app, tower_sessions_layer,
};
