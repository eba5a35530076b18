//! [`RateLimitLayer`]: the tower layer.

use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::builder::RateLimitLayerBuilder;
use super::config::Config;
use super::{KeyExtractor, Limiter, Quota, RateLimit, RuleError};

/// Rate-limits requests: extracts a key per rule, asks the [`Limiter`], and either calls the
/// inner service (adding `RateLimit` headers and a [`Decision`](super::Decision) extension) or answers `429`.
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
/// use http::HeaderName;
/// use redis_guard::rate_limit::{
///     ClientIp, FailurePolicy, HeaderKey, MemoryLimiter, MissingKey, Quota, RateLimitLayer,
/// };
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = RateLimitLayer::builder(MemoryLimiter::new())
///     .rule("ip", ClientIp::peer(), "10/second".parse()?)
///     .rule("key", HeaderKey::new(HeaderName::from_static("x-api-key")), Quota::per_hour(1000).burst(50))
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
    config: Arc<Config>,
}

impl RateLimitLayer {
    /// One rule named `name`: `quota` per key from `extractor`, with the default algorithm and
    /// settings. Use [`builder`](Self::builder) for more rules or settings.
    ///
    /// # Errors
    ///
    /// The name or quota cannot work, or the limiter is misconfigured (see
    /// [`RateLimitLayerBuilder::build`]).
    pub fn new(
        limiter: impl Limiter,
        name: &str,
        extractor: impl KeyExtractor,
        quota: Quota,
    ) -> Result<Self, RuleError> {
        Self::builder(limiter).rule(name, extractor, quota).build()
    }

    /// A builder: rules, then settings, then [`build`](RateLimitLayerBuilder::build).
    pub fn builder(limiter: impl Limiter) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder::new(Arc::new(limiter))
    }

    pub(crate) fn from_config(config: Config) -> Self {
        Self {
            config: Arc::new(config),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, Arc::clone(&self.config))
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}
