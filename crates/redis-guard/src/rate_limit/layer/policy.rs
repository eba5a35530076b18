//! What the layer does when a key is missing or the limiter fails.

use std::num::NonZeroU32;

use http::StatusCode;

use crate::{ConfigError, ConfigErrorKind};

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
///
/// The default is [`Fallback`](Self::Fallback) with one replica, or as many as
/// [`RateLimitLayerBuilder::replicas`](crate::rate_limit::RateLimitLayerBuilder::replicas)
/// states. The three choices fail in
/// different ways, and only one of them keeps limiting:
///
/// - [`Open`](Self::Open) switches limiting off exactly when it is needed most: an attacker who
///   floods the API until Redis slows down or falls over gets an unlimited API in return.
/// - [`Closed`](Self::Closed) takes the whole API down with Redis: every limited route answers
///   `503` for as long as the outage lasts.
/// - [`Fallback`](Self::Fallback) keeps serving and keeps an approximate limit: each instance
///   enforces its share of every quota in memory until Redis answers again.
///
/// Whatever the policy, the warning "rate limiter failed" is logged at most once every
/// 10 s per layer, with the number of failures since the
/// previous line, so an outage cannot flood the logs with a line per request.
///
/// ```
/// use std::num::NonZeroU32;
/// use redis_guard::rate_limit::FailurePolicy;
///
/// assert_eq!(FailurePolicy::default(), FailurePolicy::Fallback { replicas: NonZeroU32::MIN });
/// let three = FailurePolicy::fallback(3).unwrap();
/// assert_eq!(three, FailurePolicy::Fallback { replicas: NonZeroU32::new(3).unwrap() });
/// assert!(FailurePolicy::fallback(0).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit the request without a decision (no rate-limit headers) and log a warning: a Redis
    /// outage does not take the application down, and does not limit anything either.
    Open,
    /// Answer `503 Service Unavailable` with `Retry-After: 1`: for endpoints where an unlimited
    /// request is worse than none (login, SMS sending).
    Closed,
    /// Decide in process (the default, with one replica): a [`MemoryLimiter`] owned by the
    /// layer evaluates the same rules, keyed the same way, with each quota's limit and burst
    /// divided by `replicas` (rounded down, at least 1), until Redis answers again. The
    /// rate-limit headers and `429`s then describe the fallback's decision.
    ///
    /// State the number of instances behind the load balancer once, with
    /// [`RateLimitLayerBuilder::replicas`] (without it, one). What the division
    /// guarantees: with the load spread evenly, the instances together admit at most about the
    /// configured limit per key, never `replicas` times it. What it does not: a load balancer
    /// that sends one client to a single instance (sticky sessions, hashing by IP) gives that
    /// client only `limit ÷ replicas`, and one that sprays a client over every instance lets it
    /// reach the full limit only in total. The fallback is per instance and approximate.
    ///
    /// State does not carry over in either direction: the fallback knows only the requests it
    /// decided itself (so a key starts an outage with a full share, unless an earlier outage
    /// within the period left counts behind), and when Redis answers again its own counts, which
    /// did not see the requests admitted meanwhile, decide once more. Rules with a
    /// [custom Lua algorithm](crate::rate_limit::CustomAlgorithm), which only Redis can run, fall back to
    /// [`Algorithm::Gcra`](crate::rate_limit::Algorithm::Gcra) over the same quota.
    ///
    /// [`MemoryLimiter`]: crate::rate_limit::MemoryLimiter
    /// [`RateLimitLayerBuilder::replicas`]: crate::rate_limit::RateLimitLayerBuilder::replicas
    Fallback {
        /// How many instances share the limits.
        replicas: NonZeroU32,
    },
}

impl FailurePolicy {
    /// [`Fallback`](Self::Fallback) sharing each quota among `replicas` instances.
    ///
    /// # Errors
    ///
    /// `replicas` is zero.
    /// ```
    /// use redis_guard::ConfigErrorKind;
    /// use redis_guard::rate_limit::FailurePolicy;
    /// let err = FailurePolicy::fallback(0).unwrap_err();
    /// assert_eq!(err.kind(), ConfigErrorKind::Fallback);
    /// assert_eq!(err.value(), Some("0"));
    /// ```
    pub fn fallback(replicas: u32) -> Result<Self, ConfigError> {
        NonZeroU32::new(replicas)
            .map(|replicas| Self::Fallback { replicas })
            .ok_or_else(|| {
                ConfigError::new(
                    ConfigErrorKind::Fallback,
                    "replicas must be at least 1, got 0",
                )
                .with_setting("FailurePolicy::fallback")
                .with_value(0)
            })
    }
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self::Fallback {
            replicas: NonZeroU32::MIN,
        }
    }
}

/// How the layer acts on a rule's verdict: its rollout mode ([`Rule::with_mode`]).
///
/// A new or tightened limit can go live in steps: [`Shadow`](Self::Shadow) first, to count who
/// it would stop; [`Soft`](Self::Soft) next, to warn those clients; [`Enforce`](Self::Enforce)
/// last. [`RateLimitLayerBuilder::candidate`] runs a shadow copy of an enforced rule with a new
/// quota beside it, so the two can be compared on live traffic.
///
/// Enforced rules are decided together, all or nothing. A shadow or soft rule is evaluated on
/// its own, beside them (in the same script call when the calls coalesce): it counts every
/// request that reaches the layer as if it were the only rule, never keeps an enforced rule from
/// counting, and is never kept from counting by one. When any rule of a request cannot be
/// decided, the failure policies answer for the whole request.
///
/// What each mode does with a request over the limit:
///
/// | mode | answer | headers | metric |
/// |---|---|---|---|
/// | `Enforce` | `429` | in `RateLimit` | `redis_guard_rate_limit_limited_total` |
/// | `Shadow` | admitted | none (clients never see the rule) | `redis_guard_rate_limit_shadow_limited_total` |
/// | `Soft` | admitted | in `RateLimit` (`r=0`), and named in `RateLimit-Exceeded` | `redis_guard_rate_limit_soft_limited_total` |
///
/// Handlers see the exceeded soft rules in [`Decision::exceeded`] and the shadow rules'
/// verdicts in [`Decision::shadow`].
///
/// ```
/// use redis_guard::rate_limit::{Mode, Quota, Rule};
/// let rule = Rule::new("api", Quota::per_minute(60)).with_mode(Mode::Shadow);
/// assert_eq!(rule.mode(), Mode::Shadow);
/// assert_eq!(Mode::default(), Mode::Enforce);
/// ```
///
/// [`Rule::with_mode`]: crate::rate_limit::Rule::with_mode
/// [`RateLimitLayerBuilder::candidate`]: crate::rate_limit::RateLimitLayerBuilder::candidate
/// [`Decision::exceeded`]: crate::rate_limit::Decision::exceeded
/// [`Decision::shadow`]: crate::rate_limit::Decision::shadow
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// Deny requests over the limit (the default).
    #[default]
    Enforce,
    /// Decide and record, never deny, never show: for a limit under trial.
    Shadow,
    /// Admit requests over the limit, saying so in the `RateLimit-Exceeded` header.
    Soft,
}
