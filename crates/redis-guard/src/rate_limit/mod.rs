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
//! - a [`Limiter`] decides: [`RedisLimiter`] (one Lua script per request, shared by every
//!   replica) or [`MemoryLimiter`] (one process);
//! - the layer answers `429 Too Many Requests` with `Retry-After`, `RateLimit-Policy` and
//!   `RateLimit` headers and an `application/problem+json` body, or calls the inner service with
//!   the same headers added and a [`Decision`] in the request extensions.

mod algorithm;
mod builder;
mod config;
mod decision;
mod evaluation;
mod future;
pub mod headers;
mod key;
mod layer;
mod limiter;
mod memory;
mod policy;
mod quota;
mod redis_limiter;
mod reply;
mod response;
mod rule;
mod service;

pub use algorithm::{Algorithm, CustomAlgorithm, RuleState};
pub use builder::RateLimitLayerBuilder;
pub use config::ResponseBuilder;
pub use decision::{Decision, RuleDecision};
pub use future::ResponseFuture;
pub use key::{
    And, ClientIp, ExtensionKey, ForwardedHeader, Global, HeaderKey, Key, KeyError, KeyExtractor,
    KeyExtractorExt, Or, PeerAddr, ProxyConfigError,
};
pub use layer::RateLimitLayer;
pub use limiter::{BoxFuture, Check, Limiter, LimiterError};
pub use memory::{DEFAULT_MAX_KEYS, MemoryLimiter, MemoryLimiterBuilder};
pub use policy::{FailurePolicy, MissingKey};
pub use quota::{MAX_PERIOD, Quota, QuotaError};
pub use redis_limiter::RedisLimiter;
pub use response::ResponseBody;
pub use rule::{Rule, RuleError};
pub use service::RateLimit;
