//! The rate-limit middleware itself: [`RateLimitLayer`] and its builder, the [`RateLimit`]
//! service, its [`ResponseFuture`] and [`ResponseBody`], the layer's own answers (HTTP and
//! [`grpc`]) and headers, and the policies it applies (missing key, limiter down, rollout mode).
//! What the limiter decides lives beside this folder, in `rate_limit/`.

use std::sync::Arc;

mod builder;
mod config;
mod future;
pub mod grpc;
mod headers;
mod lean;
mod policy;
mod rejection;
mod response;
mod service;
#[cfg(all(test, feature = "metrics"))]
mod tests;
mod throttle;
mod warn_every;

pub use builder::RateLimitLayerBuilder;
use config::Config;
pub use future::ResponseFuture;
pub use policy::{FailurePolicy, MissingKey, Mode};
pub use rejection::Rejection;
pub use response::{RateLimitBody, ResponseBody};
pub use service::RateLimit;
pub(crate) use warn_every::WarnEvery;

/// Rate-limits requests: extracts a key per rule, asks the [`Limiter`](crate::rate_limit::Limiter), and either calls the
/// inner service (adding `RateLimit` headers, and a [`Decision`](crate::rate_limit::Decision) extension when asked) or answers `429`.
///
/// One rule:
///
/// ```
/// use axum::{Router, routing::get};
/// use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = MemoryLimiter::new(); // or RedisLimiter::new(conn)
/// let app: Router = Router::new()
///     .route("/api/data", get(|| async { "data" }))
///     .layer(RateLimitLayer::new(limiter, "api", ClientIp::peer(), Quota::per_minute(100))?);
/// # Ok(()) }
/// ```
///
/// Several rules (all must admit a request; a denied request consumes none), and options:
///
/// ```
/// use redis_guard::rate_limit::{
///     ClientIp, FailurePolicy, HeaderKey, MemoryLimiter, MissingKey, Quota, RateLimitLayer,
/// };
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = RateLimitLayer::builder(MemoryLimiter::new())
///     .rule("ip", ClientIp::peer(), "10/second".parse()?)
///     .rule("key", HeaderKey::new("x-api-key"), Quota::per_hour(1000).burst(50))
///     .missing_key(MissingKey::Skip)
///     .failure_policy(FailurePolicy::Closed)
///     .legacy_headers(true)
///     .build()?;
/// # let _ = layer; Ok(()) }
/// ```
///
/// Layers that share a limiter share counters by rule name, so every rule is named by you: give
/// each layer's rules distinct names.
#[derive(Clone)]
pub struct RateLimitLayer {
    pub(crate) config: Arc<Config>,
}

impl_layer!(RateLimitLayer => RateLimit, config);
