//! Algorithms written by the user, in Lua, run by the same dispatcher as the built-in ones.

use std::fmt;
use std::sync::Arc;

/// A rate-limit algorithm of your own, in Lua. It runs inside the same script as the built-in
/// algorithms, so it gets several rules all-or-nothing, the `RateLimit` headers, `Retry-After`,
/// `NOSCRIPT` reloading and Redis Cluster support without any code of its own.
///
/// # The contract
///
/// `source` is a Lua chunk that returns a function:
///
/// ```lua
/// return function(key, now, p)
///   -- key: this rule's Redis key (a string; use only this key)
///   -- now: Redis TIME in microseconds (an integer)
///   -- p:   { limit, period, burst, emission, cost, req, probe } — the rule's quota, with
///   --      period and emission interval (period / limit) in microseconds, the request's cost,
///   --      a string unique to this request, and `probe` = true for a cost-0 check (decided
///   --      as cost 1 and never recorded: report the reset of the state as it stands)
///   -- Return: allowed (boolean), remaining (integer >= 0), retry_after_us (integer; >= 1 when
///   -- denied), reset_after_us (integer >= 0), and, when allowed, a function that records the
///   -- request. Read in the body, write only in the returned function: it runs only when every
///   -- rule of the request admits it.
/// end
/// ```
///
/// The dispatcher turns that into the reply every rule gives, `{allowed, limit, remaining,
/// retry_after_ms, reset_after_ms}`; a function that breaks the contract makes the call fail with
/// a message naming the algorithm and the bad value, on the first request that reaches it, and
/// the layer's [`FailurePolicy`](crate::rate_limit::FailurePolicy) applies. Set a TTL on every key
/// you write. Helpers from the script's prelude are in scope: `idiv(a, b)` and `cdiv(a, b)`
/// (exact floor and ceiling division of integers below 2^53) and `fmt(n, ...)` (integers as
/// digits, several joined by `:`, for the values you store).
///
/// On a Redis Cluster, a request that another slot denies is refunded by the optional
/// [`refund`](Self::refund) function (same arguments, called after the commit, with
/// `p.charged_at`: the Redis time in µs at which the request was counted, so that a windowed
/// algorithm gives back only what it took in that window); without one, what the request took
/// under this rule stays taken.
///
/// Custom algorithms need Redis: the [`MemoryLimiter`](crate::rate_limit::MemoryLimiter) answers
/// a [`LimiterError::Config`](crate::rate_limit::LimiterError::Config) of kind
/// [`Unsupported`](crate::ConfigErrorKind::Unsupported).
///
/// # Example: calls per phone number, with a daily cap
///
/// At most `limit` calls per `period` window from one number, and at most `burst` calls per UTC
/// day (this algorithm reads the quota's burst as the daily cap):
///
/// ```
/// use redis_guard::rate_limit::{Algorithm, CustomAlgorithm, Quota, Rule};
///
/// let calls = CustomAlgorithm::new(
///     "calls_daily_cap",
///     include_str!("examples/calls_daily_cap.lua"),
/// );
/// // 5 calls per minute, 20 per day.
/// let rule = Rule::new("calls", Quota::per_minute(5).burst(20)).with_algorithm(Algorithm::Custom(calls));
/// assert!(rule.validate().is_ok());
/// ```
///
/// with `examples/calls_daily_cap.lua`:
///
/// ```lua
#[doc = include_str!("examples/calls_daily_cap.lua")]
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CustomAlgorithm {
    name: Arc<str>,
    source: Arc<str>,
    refund: Option<Arc<str>>,
}

impl CustomAlgorithm {
    /// An algorithm named `name` (1–64 characters of `A–Z a–z 0–9 _`) from Lua `source`.
    #[must_use]
    pub fn new(name: impl Into<Arc<str>>, source: impl Into<Arc<str>>) -> Self {
        Self {
            name: name.into(),
            source: source.into(),
            refund: None,
        }
    }

    /// A Lua chunk returning `function(key, now, p)` that gives back what request `p.req` took
    /// (on a Redis Cluster, when another slot denied the request).
    #[must_use]
    pub fn refund(mut self, source: impl Into<Arc<str>>) -> Self {
        self.refund = Some(source.into());
        self
    }

    /// The algorithm's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    pub(crate) fn refund_source(&self) -> Option<&str> {
        self.refund.as_deref()
    }

    /// Why the algorithm cannot be used, if it cannot.
    pub(crate) fn problem(&self) -> Option<String> {
        let valid_name = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid_name {
            return Some(format!(
                "invalid custom algorithm name `{}`: use 1-64 characters of A-Z, a-z, 0-9, `_`",
                self.name
            ));
        }
        if self.source.trim().is_empty() {
            return Some(format!("custom algorithm `{}` has no source", self.name));
        }
        None
    }
}

impl fmt::Debug for CustomAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomAlgorithm")
            .field("name", &self.name)
            .field("source_bytes", &self.source.len())
            .field("refund", &self.refund.is_some())
            .finish()
    }
}
