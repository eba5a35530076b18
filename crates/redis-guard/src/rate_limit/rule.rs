//! A named quota: what the layer evaluates per request, and what [`Limiter::check`] takes.
//!
//! [`Limiter::check`]: crate::rate_limit::Limiter::check

use std::sync::Arc;

use super::algorithm::Params;
use std::collections::HashSet;

use super::{Algorithm, Bans, FailurePolicy, Key, Mode, Quota, QuotaError, Route};

/// A rule: a name (used in Redis key names and in the `RateLimit` headers), a [`Quota`], an
/// [`Algorithm`] and the cost of one request.
///
/// ```
/// use redis_guard::rate_limit::{Algorithm, Quota, Rule};
/// let rule = Rule::new("search", Quota::per_minute(30)).with_algorithm(Algorithm::Gcra).with_cost(2);
/// assert_eq!(rule.cost(), 2);
/// assert!(rule.validate().is_ok());
/// assert!(Rule::new("bad name", Quota::per_minute(30)).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Rule {
    name: Arc<str>,
    quota: Quota,
    algorithm: Algorithm,
    cost: u32,
    mode: Mode,
    on_failure: Option<FailurePolicy>,
    route: Option<Route>,
    cost_from: Option<CostFrom>,
    bans: Option<Bans>,
    allowed_keys: Option<Arc<HashSet<Key>>>,
    overrides: bool,
}

impl Rule {
    /// A rule named `name` (1–64 characters of `A–Z a–z 0–9 _ . -`) with `quota`, the default
    /// algorithm and a cost of 1.
    pub fn new(name: impl Into<Arc<str>>, quota: Quota) -> Self {
        Self {
            name: name.into(),
            quota,
            algorithm: Algorithm::default(),
            cost: 1,
            mode: Mode::Enforce,
            on_failure: None,
            route: None,
            cost_from: None,
            bans: None,
            allowed_keys: None,
            overrides: false,
        }
    }

    setters! {
        /// Uses `algorithm` instead of the default [`Algorithm::Gcra`].
        pub fn with_algorithm(algorithm: Algorithm) => algorithm;

        /// Each request consumes `cost` units of the quota (weighted requests). Defaults to 1.
        /// A cost of 0 checks without consuming: the request is admitted if one more unit would
        /// be, and nothing is recorded (all or nothing with the request's other rules, as any
        /// rule).
        pub fn with_cost(cost: u32) => cost;

        /// How a [`RateLimitLayer`](super::RateLimitLayer) acts on this rule's verdict (default
        /// [`Mode::Enforce`]). [`Limiter::check`](super::Limiter::check) ignores it: a direct
        /// call returns the verdict, and acting on it is up to the caller.
        pub fn with_mode(mode: Mode) => mode;
    }

    /// What a [`RateLimitLayer`](super::RateLimitLayer) does with this rule when the limiter
    /// cannot decide, instead of the layer's
    /// [`failure_policy`](super::RateLimitLayerBuilder::failure_policy): e.g. a login rule that
    /// fails closed in a layer that falls back. When a request's rules have different policies,
    /// a `Closed` rule answers `503`; otherwise the `Fallback` rules decide in process and the
    /// `Open` ones are skipped.
    ///
    /// ```
    /// use redis_guard::rate_limit::{FailurePolicy, Quota, Rule};
    /// let login = Rule::new("login", Quota::per_minute(5)).on_failure(FailurePolicy::Closed);
    /// assert_eq!(login.failure_policy(), Some(FailurePolicy::Closed));
    /// ```
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.on_failure = Some(policy);
        self
    }

    /// Applies the rule in a [`RateLimitLayer`](super::RateLimitLayer) only to requests on
    /// `route` (by path and method), so that one layer holds a limit per endpoint; other
    /// requests skip it. [`Limiter::check`](super::Limiter::check) ignores it.
    ///
    /// ```
    /// use http::Method;
    /// use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer, Route, Rule};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule("api", ClientIp::peer(), Quota::per_minute(600))
    ///     .rule_with(
    ///         Rule::new("search", Quota::per_minute(30)).for_route(Route::prefix("/search")),
    ///         ClientIp::peer(),
    ///     )
    ///     .rule_with(
    ///         Rule::new("upload", Quota::per_hour(20))
    ///             .for_route(Route::prefix("/files").method(Method::POST).method(Method::PUT)),
    ///         ClientIp::peer(),
    ///     )
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn for_route(mut self, route: Route) -> Self {
        self.route = Some(route);
        self
    }

    /// The route the rule is limited to, if any.
    #[must_use]
    pub fn route(&self) -> Option<&Route> {
        self.route.as_ref()
    }

    /// This rule with another quota and algorithm, everything else kept (allow list, bans,
    /// mode, route): the in-process fallback's share of it.
    pub(crate) fn reshaped(&self, quota: Quota, algorithm: Algorithm) -> Self {
        let mut rule = self.clone();
        rule.quota = quota;
        rule.algorithm = algorithm;
        rule
    }

    /// Takes each request's cost from the request head (route, method, a header) in a
    /// [`RateLimitLayer`](super::RateLimitLayer), instead of [`with_cost`](Self::with_cost)'s
    /// constant: an export costs 20, a search 1, a status check 0 (checked, not consumed).
    /// [`Limiter::check`](super::Limiter::check) ignores it; a direct call passes its cost with
    /// [`Check::with_cost`](super::Check::with_cost).
    ///
    /// A cost the rule can never admit (above its burst) is a bug of the function, not of the
    /// client: the layer answers `500` ("The rate limiter is misconfigured.") and logs the rule
    /// and the cost at `warn`, as for a misconfigured key.
    ///
    /// ```
    /// use http::Method;
    /// use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer, Rule};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Rule::new("api", Quota::per_minute(100)).with_cost_from(|head| {
    ///     match (&head.method, head.uri.path()) {
    ///         (&Method::GET, "/export") => 20,
    ///         (_, "/status") => 0,
    ///         _ => 1,
    ///     }
    /// });
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule_with(api, ClientIp::peer())
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn with_cost_from<F>(mut self, cost: F) -> Self
    where
        F: Fn(&http::request::Parts) -> u32 + Send + Sync + 'static,
    {
        self.cost_from = Some(CostFrom(Arc::new(cost)));
        self
    }

    /// This request's cost by the rule's cost function; `None` when its cost is constant.
    pub(crate) fn request_cost(&self, parts: &http::request::Parts) -> Option<u32> {
        self.cost_from.as_ref().map(|f| (f.0)(parts))
    }

    /// The rollout mode.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The rule's own failure policy, if it has one.
    #[must_use]
    pub fn failure_policy(&self) -> Option<FailurePolicy> {
        self.on_failure
    }

    /// The rule's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// The rule's quota.
    #[must_use]
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The rule's algorithm.
    #[must_use]
    pub fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    /// The cost of one request.
    #[must_use]
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// Checks that the rule can work.
    ///
    /// # Errors
    ///
    /// A [`RuleError`] that names the rule and the bad value.
    pub fn validate(&self) -> Result<(), RuleError> {
        let valid_name = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !valid_name {
            return Err(RuleError::Name(self.name.to_string()));
        }
        if let Some(why) = self.lease_problem(self.cost_from.is_some()) {
            return Err(RuleError::Concurrency {
                rule: self.name.to_string(),
                why,
            });
        }
        self.quota.validate().map_err(|source| RuleError::Quota {
            rule: self.name.to_string(),
            source,
        })?;
        if let Algorithm::Custom(custom) = &self.algorithm
            && let Some(why) = custom.problem()
        {
            return Err(RuleError::Custom {
                rule: self.name.to_string(),
                why,
            });
        }
        let capacity = self.algorithm.capacity(&self.quota);
        if self.cost > capacity {
            return Err(RuleError::CostOverBurst {
                rule: self.name.to_string(),
                cost: self.cost,
                burst: capacity,
            });
        }
        if self.algorithm == Algorithm::SlidingCounter
            && u128::from(self.quota.limit()) * self.quota.period().as_micros() >= 1 << 53
        {
            return Err(RuleError::TooLargeForAlgorithm {
                rule: self.name.to_string(),
                why: "the sliding counter needs limit × period (in µs) below 2^53; use a shorter period or GCRA",
            });
        }
        self.operations_problem()
    }

    pub(crate) fn params(&self, cost: u32) -> Params {
        Params {
            algorithm: self.algorithm.clone(),
            limit: u64::from(self.quota.limit()),
            period_us: self.quota.period_us(),
            burst: u64::from(self.quota.burst_size()),
            emission_us: self.quota.emission_interval_us(),
            cost: u64::from(cost),
        }
    }

    /// Bans keys that keep hitting the limit: see [`Bans`]. The count and the ban are decided in
    /// the same atomic evaluation as the rule, on every backend.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::{Bans, Quota, Rule};
    /// let rule = Rule::new("login", Quota::per_minute(5))
    ///     .with_bans(Bans::after(10).block(Duration::from_secs(300)));
    /// assert_eq!(rule.bans().unwrap().rejections(), 10);
    /// ```
    pub fn with_bans(mut self, bans: Bans) -> Self {
        self.bans = Some(bans);
        self
    }

    /// The rule's bans, if any.
    #[must_use]
    pub fn bans(&self) -> Option<&Bans> {
        self.bans.as_ref()
    }

    /// A static allow list: requests whose key is in `keys` are admitted by this rule without
    /// counting, decided in process (no Redis call; when every rule of a request allow-lists it,
    /// the request never reaches Redis). For health checkers, internal services, your own
    /// office. Keys that change at run time belong on the shared runtime list instead
    /// ([`Limiter::allow`](super::Limiter::allow)).
    ///
    /// The keys are the values the rule's extractor produces (e.g. `Key::from(ip)` for
    /// [`ClientIp`](super::ClientIp)).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let office: IpAddr = "203.0.113.7".parse().unwrap();
    /// let rule = Rule::new("api", Quota::per_minute(1)).with_allowed_keys([Key::from(office)]);
    /// let limiter = MemoryLimiter::new();
    /// for _ in 0..3 {
    ///     assert!(limiter.check(&rule, Key::from(office)).await.unwrap().allowed);
    /// }
    /// # }
    /// ```
    pub fn with_allowed_keys(mut self, keys: impl IntoIterator<Item = Key>) -> Self {
        let keys: HashSet<Key> = keys.into_iter().collect();
        self.allowed_keys = (!keys.is_empty()).then(|| Arc::new(keys));
        self
    }

    /// Reads the runtime overrides of each key on every decision: penalties
    /// ([`Limiter::penalize`](super::Limiter::penalize)) and runtime allow-list entries
    /// ([`Limiter::allow`](super::Limiter::allow)), which every replica then honours. Off by
    /// default, because reading the record costs every request a little (one more key per
    /// script call on Redis, one more lookup in memory); [`with_bans`](Self::with_bans) turns
    /// it on. [`inspect`](super::Limiter::inspect) and [`reset`](super::Limiter::reset) work on
    /// every rule; `penalize` and `allow` on a rule without overrides are refused with
    /// [`LimiterError::Unsupported`](super::LimiterError::Unsupported), never silently ignored.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = MemoryLimiter::new();
    /// let plain = Rule::new("api", Quota::per_minute(60));
    /// let steerable = plain.clone().with_overrides();
    /// let hour = Duration::from_secs(3600);
    /// assert!(limiter.penalize(&plain, Key::from("k"), hour).await.is_err());
    /// assert!(limiter.penalize(&steerable, Key::from("k"), hour).await.is_ok());
    /// assert!(!limiter.check(&steerable, Key::from("k")).await.unwrap().allowed);
    /// # }
    /// ```
    pub fn with_overrides(mut self) -> Self {
        self.overrides = true;
        self
    }

    /// Whether the rule reads runtime overrides (set by [`with_overrides`](Self::with_overrides)
    /// or implied by [`with_bans`](Self::with_bans)).
    #[must_use]
    pub fn reads_overrides(&self) -> bool {
        self.overrides || self.bans.is_some()
    }

    /// Whether `key` is on the rule's static allow list.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Key, Quota, Rule};
    /// let rule = Rule::new("api", Quota::per_minute(1)).with_allowed_keys([Key::from("probe")]);
    /// assert!(rule.allows(&Key::from("probe")) && !rule.allows(&Key::from("other")));
    /// ```
    #[must_use]
    pub fn allows(&self, key: &Key) -> bool {
        self.allowed_keys
            .as_ref()
            .is_some_and(|keys| keys.contains(key))
    }

    /// Why the rule's operations options cannot work.
    fn operations_problem(&self) -> Result<(), RuleError> {
        match self.bans.as_ref().and_then(Bans::problem) {
            Some(why) => Err(RuleError::Bans {
                rule: self.name.to_string(),
                why,
            }),
            None => Ok(()),
        }
    }
}

/// A rule's cost function ([`Rule::with_cost_from`]); rules compare equal when they share it.
#[derive(Clone)]
struct CostFrom(Arc<dyn Fn(&http::request::Parts) -> u32 + Send + Sync>);

impl PartialEq for CostFrom {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CostFrom {}

impl std::fmt::Debug for CostFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<fn(&Parts) -> u32>")
    }
}

/// Why a rule cannot work. Reported when the layer is built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// The rule works, but its share under
    /// [`FailurePolicy::Fallback`](crate::rate_limit::FailurePolicy::Fallback) does not (a cost
    /// above the divided burst): lower the replica count or the cost.
    #[error("FailurePolicy::Fallback with {replicas} replicas: the share of {source}")]
    FallbackShare {
        /// The replica count.
        replicas: u32,
        /// What is wrong with the divided rule (it names the rule).
        source: Box<RuleError>,
    },
    /// The name is empty, too long, or has characters outside `A–Z a–z 0–9 _ . -`.
    #[error("invalid rule name `{0}`: use 1-64 characters of A-Z, a-z, 0-9, `_`, `.`, `-`")]
    Name(String),
    /// The quota is invalid.
    #[error("rule `{rule}`: {source}")]
    Quota {
        /// The rule.
        rule: String,
        /// What is wrong with its quota.
        #[source]
        source: QuotaError,
    },
    /// A request costing more than the burst could never be admitted.
    #[error(
        "rule `{rule}`: cost {cost} is larger than the burst {burst}, so no request could ever pass"
    )]
    CostOverBurst {
        /// The rule.
        rule: String,
        /// The cost.
        cost: u32,
        /// The burst.
        burst: u32,
    },
    /// The quota is outside what the algorithm computes exactly.
    #[error("rule `{rule}`: {why}")]
    TooLargeForAlgorithm {
        /// The rule.
        rule: String,
        /// Why.
        why: &'static str,
    },
    /// The limiter is configured so that it cannot decide (e.g. a Redis timeout of zero).
    #[error("the limiter cannot work: {0}")]
    Limiter(String),
    /// A custom algorithm cannot be used.
    #[error("rule `{rule}`: {why}")]
    Custom {
        /// The rule.
        rule: String,
        /// Why.
        why: String,
    },
    /// Two rules of one layer share a name (their counters would collide).
    #[error("two rules are named `{0}`; rule names must be unique within a layer")]
    Duplicate(String),
    /// [`RateLimitLayerBuilder::candidate`](super::RateLimitLayerBuilder::candidate) named a
    /// rule the layer does not have (yet: add the rule first).
    #[error(
        "a candidate names rule `{0}`, which the layer does not have (add the rule before its candidate)"
    )]
    UnknownRule(String),
    /// A layer needs at least one rule.
    #[error("the rate-limit layer has no rules")]
    NoRules,
    /// A concurrency rule ([`Rule::concurrency`]) cannot work: a maximum in flight of 0, a
    /// lease expiry under 1 ms, or a cost other than 1 (or 0).
    #[error("rule `{rule}`: {why}")]
    Concurrency {
        /// The rule.
        rule: String,
        /// Why.
        why: &'static str,
    },
    /// The rule's [`Bans`] cannot work.
    #[error("rule `{rule}`: {why}")]
    Bans {
        /// The rule.
        rule: String,
        /// Why.
        why: String,
    },
}
