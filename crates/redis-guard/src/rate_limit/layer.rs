//! [`RateLimitLayer`] and its builder.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use tower_layer::Layer;

use super::limiter::Check;
use super::{
    Algorithm, Decision, KeyError, KeyExtractor, Limiter, Quota, RateLimit, Rule, RuleError,
};

/// What to do with a request from which a rule's key cannot be extracted (no API-key header, no
/// logged-in user).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Reject the request with this status (the default is `400 Bad Request`): a client cannot
    /// escape its limit by leaving the key out.
    Reject(StatusCode),
    /// Do not apply the rule to this request (other rules still apply). Use it when another layer
    /// guarantees the key, or when keyless requests are limited elsewhere.
    Skip,
}

impl Default for MissingKey {
    fn default() -> Self {
        Self::Reject(StatusCode::BAD_REQUEST)
    }
}

/// What to do when the limiter cannot decide (Redis down, slow, or answering nonsense).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit the request without a decision and log a warning (the default): a Redis outage
    /// does not take the application down with it.
    #[default]
    Open,
    /// Answer `503 Service Unavailable` with `Retry-After: 1`: for endpoints where an unlimited
    /// request is worse than none (login, SMS sending).
    Closed,
}

/// Which rate-limit headers to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeaderMode {
    ietf_on_allowed: bool,
    legacy: bool,
}

/// Builds the response for a denied request. The layer adds `Retry-After` and the `RateLimit`
/// headers when the builder did not set them.
pub type ResponseBuilder = Arc<dyn Fn(&Decision) -> Response<Bytes> + Send + Sync>;

/// One rule of a layer: what to count and what to count it by.
#[derive(Clone)]
pub(crate) struct LayerRule {
    pub(crate) rule: Rule,
    pub(crate) extractor: Arc<dyn KeyExtractor>,
}

/// Shared by every clone of the layer and the services it makes.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) limiter: Arc<dyn Limiter>,
    pub(crate) rules: Vec<LayerRule>,
    pub(crate) missing_key: MissingKey,
    pub(crate) failure: FailurePolicy,
    headers: HeaderMode,
    pub(crate) response: Option<ResponseBuilder>,
}

/// What the layer decided to do with a request before asking the limiter.
pub(crate) enum Plan {
    /// Evaluate these checks.
    Check(Vec<Check>),
    /// No rule applies (every key missing and skipped).
    Pass,
    /// Answer at once with this status (missing key rejected, misconfiguration).
    Respond(StatusCode, &'static str),
}

impl Config {
    pub(crate) fn plan(&self, parts: &http::request::Parts) -> Plan {
        let mut checks = Vec::with_capacity(self.rules.len());
        for r in &self.rules {
            match r.extractor.extract(parts) {
                Ok(key) => checks.push(Check::new(r.rule.clone(), key)),
                Err(KeyError::Missing) => match self.missing_key {
                    MissingKey::Skip => {}
                    MissingKey::Reject(status) => {
                        tracing::debug!(rule = r.rule.name(), "rate limit key missing: rejected");
                        return Plan::Respond(status, "The request lacks the rate-limit key.");
                    }
                },
                // The extractor logged the fix once; every request fails the same way until the
                // server is set up right, so it can't go unnoticed.
                Err(KeyError::Misconfigured(_)) => {
                    return Plan::Respond(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "The rate limiter is misconfigured.",
                    );
                }
            }
        }
        if checks.is_empty() {
            Plan::Pass
        } else {
            Plan::Check(checks)
        }
    }

    pub(crate) fn ietf_on_allowed(&self) -> bool {
        self.headers.ietf_on_allowed
    }

    pub(crate) fn legacy_headers(&self) -> bool {
        self.headers.legacy
    }
}

/// Rate-limits requests: extracts a key per rule, asks the [`Limiter`], and either calls the
/// inner service (adding `RateLimit` headers and a [`Decision`] extension) or answers `429`.
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
///     .layer(RateLimitLayer::new(limiter, ClientIp::peer(), Quota::per_minute(100))?);
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
///     .build()?
///     .missing_key(MissingKey::Skip)
///     .failure_policy(FailurePolicy::Closed)
///     .legacy_headers(true);
/// # let _ = layer; Ok(()) }
/// ```
///
/// Layers that share a limiter share counters by rule name: give each layer's rules distinct
/// names ([`RateLimitLayer::new`] names its rule `default`).
#[derive(Clone)]
pub struct RateLimitLayer {
    config: Arc<Config>,
}

impl RateLimitLayer {
    /// One rule named `default`: `quota` per key from `extractor`.
    ///
    /// # Errors
    ///
    /// The quota cannot work (see [`Quota::validate`]).
    pub fn new(
        limiter: impl Limiter,
        extractor: impl KeyExtractor,
        quota: Quota,
    ) -> Result<Self, RuleError> {
        Self::builder(limiter)
            .rule("default", extractor, quota)
            .build()
    }

    /// A builder for layers with several rules or non-default algorithms.
    pub fn builder(limiter: impl Limiter) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            limiter: Arc::new(limiter),
            rules: Vec::new(),
        }
    }

    /// What to do when a key is missing (default: reject with `400`).
    #[must_use]
    pub fn missing_key(mut self, policy: MissingKey) -> Self {
        Arc::make_mut(&mut self.config).missing_key = policy;
        self
    }

    /// What to do when the limiter fails (default: [`FailurePolicy::Open`]).
    #[must_use]
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        Arc::make_mut(&mut self.config).failure = policy;
        self
    }

    /// Whether admitted responses carry `RateLimit-Policy` and `RateLimit` (default: yes).
    /// Denied responses always do.
    #[must_use]
    pub fn rate_limit_headers(mut self, on: bool) -> Self {
        Arc::make_mut(&mut self.config).headers.ietf_on_allowed = on;
        self
    }

    /// Whether to also send `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
    /// (seconds until the quota is full again) for older clients (default: no).
    #[must_use]
    pub fn legacy_headers(mut self, on: bool) -> Self {
        Arc::make_mut(&mut self.config).headers.legacy = on;
        self
    }

    /// Replaces the default `application/problem+json` body of denied responses.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Global, MemoryLimiter, Quota, RateLimitLayer};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::new(MemoryLimiter::new(), Global, Quota::per_second(100))?
    ///     .response(|d| {
    ///         http::Response::builder()
    ///             .status(429)
    ///             .header("content-type", "application/json")
    ///             .body(format!(r#"{{"status":"rejected","rule":"{}"}}"#, d.rule).into())
    ///             .unwrap_or_default()
    ///     });
    /// # let _ = layer; Ok(()) }
    /// ```
    #[must_use]
    pub fn response<F>(mut self, build: F) -> Self
    where
        F: Fn(&Decision) -> Response<Bytes> + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.config).response = Some(Arc::new(build));
        self
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

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .field(
                "rules",
                &self.rules.iter().map(|r| &r.rule).collect::<Vec<_>>(),
            )
            .field("missing_key", &self.missing_key)
            .field("failure", &self.failure)
            .field("headers", &self.headers)
            .field("custom_response", &self.response.is_some())
            .finish()
    }
}

/// Builds a [`RateLimitLayer`] with one or more rules; [`build`](Self::build) validates them.
#[must_use]
pub struct RateLimitLayerBuilder {
    limiter: Arc<dyn Limiter>,
    rules: Vec<LayerRule>,
}

impl RateLimitLayerBuilder {
    /// Adds a rule named `name` with `quota` and the default algorithm, keyed by `extractor`.
    pub fn rule(self, name: &str, extractor: impl KeyExtractor, quota: Quota) -> Self {
        self.rule_with(Rule::new(name, quota), extractor)
    }

    /// Adds a fully specified [`Rule`], keyed by `extractor`.
    pub fn rule_with(mut self, rule: Rule, extractor: impl KeyExtractor) -> Self {
        self.rules.push(LayerRule {
            rule,
            extractor: Arc::new(extractor),
        });
        self
    }

    /// Adds one rule per quota over the same key: `"10/s; 1000/h"` limits bursts and the hourly
    /// total at once. Rules are named `<name>-<period>` (`api-1s`, `api-1h`); quotas must have
    /// different periods. Each quota uses `algorithm`.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Algorithm, ClientIp, MemoryLimiter, Quota, RateLimitLayer};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rules("api", ClientIp::peer(), &Quota::parse_many("10/s; 1000/h")?, Algorithm::Gcra)
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn rules(
        mut self,
        name: &str,
        extractor: impl KeyExtractor,
        quotas: &[Quota],
        algorithm: Algorithm,
    ) -> Self {
        let extractor: Arc<dyn KeyExtractor> = Arc::new(extractor);
        for (quota, algorithm) in quotas
            .iter()
            .zip(std::iter::repeat_n(algorithm, quotas.len()))
        {
            let rule = Rule::new(format!("{name}-{}", period_label(quota.period())), *quota)
                .algorithm(algorithm);
            self.rules.push(LayerRule {
                rule,
                extractor: Arc::clone(&extractor),
            });
        }
        self
    }

    /// Validates the rules and builds the layer.
    ///
    /// # Errors
    ///
    /// No rules, a duplicate rule name, a rule that cannot work (the error names the rule and the
    /// value), or a limiter that cannot work ([`Limiter::config_problem`]).
    pub fn build(self) -> Result<RateLimitLayer, RuleError> {
        if self.rules.is_empty() {
            return Err(RuleError::NoRules);
        }
        if let Some(why) = self.limiter.config_problem() {
            return Err(RuleError::Limiter(why));
        }
        for (i, r) in self.rules.iter().enumerate() {
            r.rule.validate()?;
            if self.rules[..i]
                .iter()
                .any(|o| o.rule.name() == r.rule.name())
            {
                return Err(RuleError::Duplicate(r.rule.name().to_owned()));
            }
        }
        Ok(RateLimitLayer {
            config: Arc::new(Config {
                limiter: self.limiter,
                rules: self.rules,
                missing_key: MissingKey::default(),
                failure: FailurePolicy::default(),
                headers: HeaderMode {
                    ietf_on_allowed: true,
                    legacy: false,
                },
                response: None,
            }),
        })
    }
}

/// `1s`, `30s`, `1m`, `1h`, `1d`, `500ms`: the largest unit that divides the period.
fn period_label(period: std::time::Duration) -> String {
    let ms = period.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("limiter", &self.limiter)
            .field(
                "rules",
                &self.rules.iter().map(|r| &r.rule).collect::<Vec<_>>(),
            )
            .finish()
    }
}
