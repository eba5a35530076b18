//! Rate limiting: [`RateLimitLayer`] decides per request, in Redis or in process.
//!
//! ```
//! use axum::{Router, routing::get};
//! use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let app: Router = Router::new()
//!     .route("/api/hello", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(MemoryLimiter::new(), "api", ClientIp::peer(), Quota::per_minute(60))?);
//! # Ok(()) }
//! ```
//!
//! The pieces:
//!
//! - a [`Quota`] says how much (`Quota::per_minute(60)`, `"60/minute".parse()`), a [`Rule`]
//!   names it and picks the [`Algorithm`];
//! - a [`KeyExtractor`] says per what ([`ClientIp`], [`HeaderKey`], [`ExtensionKey`],
//!   [`Global`], or a closure);
//! - [`Rule::concurrency`] limits requests *in flight* per key instead (a [`Lease`] per
//!   request, released when its response body ends);
//! - [`Rule::throttle`] delays a request that is over the limit by a short wait instead of
//!   denying it: its future slot is reserved in the same decision, and the layer holds the
//!   request until then (at most [`RateLimitLayerBuilder::max_waiters`] at once);
//! - a [`Limiter`] decides: [`RedisLimiter`] (one Lua script per request, shared by every
//!   replica) or [`MemoryLimiter`] (one process); a handler or an admin task calls it too
//!   ([`RedisLimiter::check`], [`inspect`](RedisLimiter::inspect),
//!   [`reset`](RedisLimiter::reset), ...; the [`Limiter`] docs show an `Arc<dyn Limiter>`);
//! - the layer answers `429 Too Many Requests` with `Retry-After`, `RateLimit-Policy` and
//!   `RateLimit` headers and an `application/problem+json` body, or calls the inner service with
//!   the same headers added, and a [`Decision`] in the request extensions when the builder asks
//!   ([`RateLimitLayerBuilder::extensions`]) (and, for a rule keyed
//!   by [`ClientIp`], the [`ClientAddr`] it counted: a handler's own
//!   [`check`](RedisLimiter::check) keys on the same address). Its answers of its own
//!   (`429`, `503` with the limiter down, a missing key, `500` misconfigured) carry a
//!   [`Rejection`] in their extensions when asked alike, and [`RateLimitLayerBuilder::response`] writes them
//!   your way;
//! - in front of a gRPC service, [`RateLimitLayerBuilder::grpc`] makes the layer answer in gRPC
//!   instead ([`grpc`]).
//!
//! # Response headers
//!
//! | header | on | value |
//! |---|---|---|
//! | `RateLimit-Policy` | denials; admitted responses unless [`rate_limit_headers(false)`](RateLimitLayerBuilder::rate_limit_headers) | one item per rule, named by it: `"api";q=100;w=60` (`q` the limit, `w` the period in seconds) |
//! | `RateLimit` | as `RateLimit-Policy` | `"api";r=42;t=35` (`r` the requests remaining now, `t` the seconds until the quota is fully available again, both rounded up) |
//! | `Retry-After` | denials | whole seconds until the request may pass, rounded up, never 0 |
//! | `RateLimit-Exceeded` | admitted responses over a [`Mode::Soft`] rule | the soft rules the request went over, as a structured-field list of rule names: `"api"` (redis-guard's own, not in the draft) |
//! | `X-RateLimit-Limit` | with [`legacy_headers(true)`](RateLimitLayerBuilder::legacy_headers) | the binding rule's limit |
//! | `X-RateLimit-Remaining` | as `X-RateLimit-Limit` | the binding rule's requests remaining |
//! | `X-RateLimit-Reset` | as `X-RateLimit-Limit` | seconds until the binding rule's quota is full again |
//!
//! `RateLimit-Policy` and `RateLimit` follow the IETF HTTPAPI draft "RateLimit header fields for
//! HTTP" (<https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/>), in its
//! structured-field form. Concurrency rules ([`Rule::concurrency`]) are left out of both: the
//! draft knows only quotas per time window, and `q=2;w=30` would tell a client it may send two
//! requests per 30 s. A denial by one still carries `Retry-After`, and the legacy
//! `X-RateLimit-*` headers describe the binding rule, which may be a concurrency rule (its
//! limit, and the leases still free).
//!
//! # Hot keys: leasing
//!
//! A key that one replica sees many times a second costs one script call per request. A GCRA
//! rule opted in with [`Rule::leased`] lets a [`RedisLimiter`] admit such a key's requests from
//! blocks of its quota reserved in one call; [`Rule::leased`] says what stays exact, what it
//! costs, and which rules it refuses.
//!
//! ```
//! use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer, Rule};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = RateLimitLayer::builder(MemoryLimiter::new()) // leasing needs a RedisLimiter
//!     .rule_with(Rule::new("api", Quota::per_second(1000)).leased(10), ClientIp::peer())
//!     .build()?;
//! # let _ = layer; Ok(()) }
//! ```
//!
//! # When Redis fails
//!
//! The layer's [`FailurePolicy`] answers every request Redis cannot decide (down, too slow, or
//! the backend's circuit breaker open). The default, [`FailurePolicy::Fallback`], keeps limiting
//! in this process with each instance's share of every quota; the policy's docs weigh it
//! against [`Open`](FailurePolicy::Open) and [`Closed`](FailurePolicy::Closed).
//!
//! ```
//! use redis_guard::rate_limit::{ClientIp, FailurePolicy, MemoryLimiter, Quota, RateLimitLayer};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Three replicas behind the load balancer: 20 per minute each while Redis is down.
//! let layer = RateLimitLayer::builder(MemoryLimiter::new()) // RedisLimiter in production
//!     .rule("api", ClientIp::peer(), Quota::per_minute(60))
//!     .failure_policy(FailurePolicy::fallback(3)?)
//!     .build()?;
//! # let _ = layer; Ok(()) }
//! ```
//!
//! # Differences from `tower::limit::RateLimit` and `tower_governor`
//!
//! - **Shared state.** [`tower::limit::RateLimit`] counts per service instance: every clone (one
//!   per connection, in hyper and axum) has its own budget, and it delays requests
//!   (backpressure through `poll_ready`, which axum ignores) rather than answering `429`. Here
//!   every clone shares one [`Limiter`], and a [`RedisLimiter`] is shared by every replica.
//! - **Keys.** `tower::limit` has none: one budget for all clients. `tower_governor` keys by
//!   peer IP or a custom extractor, in process only; behind two replicas each admits the full
//!   quota.
//! - **Quotas.** `tower_governor`'s `per_second(n)` means *one request every n seconds*;
//!   [`Quota::per_second(n)`](Quota::per_second) here means *n requests per second*.
//! - **Answers.** A denied request gets `429` with `Retry-After` (rounded up, never 0), the IETF
//!   `RateLimit` / `RateLimit-Policy` headers and an `application/problem+json` body; the
//!   inner service's error type is never changed (tower-http's reasoning: an error from HTTP
//!   middleware closes the connection).
//! - **Algorithms and rules.** GCRA (as governor), plus the sliding log, fixed window, sliding
//!   counter, token bucket and your own Lua, with several rules decided all or nothing.
//!
//! [`tower::limit::RateLimit`]: https://docs.rs/tower/latest/tower/limit/struct.RateLimit.html

// The folders, in the order a request meets them: its rules (`rule/`) and keys (`key/`); the
// limiter that decides (`limiter/`: the interface a layer drives, the calls made outside one),
// in Redis (`redis/`) or in this process (`memory/`), by the algorithms (`algorithm/`); the
// `decision.rs` it returns; and what an admitted request holds until its response ends
// (`lease/`). The layer's own files take what they need from here, by name.
mod algorithm;
mod decision;
mod key;
mod layer;
mod lease;
mod limiter;
mod memory;
mod redis;
mod rule;

pub use algorithm::{Algorithm, CustomAlgorithm, RuleState};
pub use decision::{Decision, RuleDecision};
pub use key::{
    And, ExtensionKey, Global, HeaderKey, Key, KeyError, KeyExtractor, KeyExtractorExt, Or,
};
pub use layer::{
    FailurePolicy, MissingKey, Mode, RateLimit, RateLimitBody, RateLimitLayer,
    RateLimitLayerBuilder, Rejection, ResponseBody, ResponseFuture, grpc,
};
pub use lease::{ActualCost, CostReport, Lease};
pub use limiter::{Bans, Inspection, Limiter, LimiterError};
pub use memory::MemoryLimiter;
pub use redis::RedisLimiter;
pub use rule::{Check, Quota, Route, Rule};

// The client's address lives in `crate::client_ip` (sessions read it too); rate limits key on
// it so often that it is also here, under the same names.
pub use crate::client_ip::{ClientAddr, ClientIp, ClientIpLayer, ForwardedHeader, PeerAddr};

// What the layer's files take from the rest, reachable as `crate::rate_limit::Name` wherever
// they stand.
pub(crate) use decision::{admitting, ceil_secs, denying, verdict_metric};
/// A short list that holds its first item inline: a request's keys, checks and states, most
/// often one (a `Vec` of one costs an allocation per request).
pub(crate) type Few<T> = smallvec::SmallVec<[T; 1]>;
pub(crate) use key::Inline;
pub(crate) use lease::Holding;
pub(crate) use limiter::{
    BoxFuture, Held, LimiterFuture, Pending, PlainStates, PlainStore, Settling, count_failure_of,
    settling,
};
pub(crate) use rule::quota_lookup::{self, Lookup, Resolved};

// What the rest takes from the layer's files.
pub(crate) use layer::WarnEvery;
