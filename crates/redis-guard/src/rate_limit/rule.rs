//! A named quota: what the layer evaluates per request, and what [`RedisLimiter::check`] takes.
//!
//! [`RedisLimiter::check`]: crate::rate_limit::RedisLimiter::check

use std::sync::Arc;

use super::algorithm::Params;
use std::collections::HashSet;

use super::{Algorithm, Bans, FailurePolicy, Key, Mode, Quota, Route};
use crate::{ConfigError, ConfigErrorKind};

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
    quota_from: Option<QuotaFrom>,
    /// Settled after the response: by a reported [`ActualCost`](super::ActualCost).
    pub(super) after_response: bool,
    pub(super) refund_when: Option<RefundWhen>,
    /// Leased in blocks of at most this percentage of the burst ([`Rule::leased`]).
    pub(super) leased: Option<u8>,
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
            quota_from: None,
            after_response: false,
            refund_when: None,
            leased: None,
        }
    }

    setters! {
        /// Uses `algorithm` instead of the default [`Algorithm::Gcra`].
        pub fn with_algorithm(algorithm: Algorithm) => algorithm;

        /// Each request consumes `cost` units of the quota (weighted requests). Defaults to 1.
        /// A cost of 0 checks without consuming: the request is admitted if one more unit would
        /// be, and nothing is recorded (all or nothing with the request's other rules, as any
        /// rule). With [`charged_after_response`](Self::charged_after_response) the cost is a
        /// reservation, settled on what the response reports, and at least 1.
        pub fn with_cost(cost: u32) => cost;

        /// How a [`RateLimitLayer`](super::RateLimitLayer) acts on this rule's verdict (default
        /// [`Mode::Enforce`]). [`RedisLimiter::check`](super::RedisLimiter::check) ignores it: a
        /// direct call returns the verdict, and acting on it is up to the caller.
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
    /// requests skip it. [`RedisLimiter::check`](super::RedisLimiter::check) ignores it.
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
    /// [`RedisLimiter::check`](super::RedisLimiter::check) ignores it; a direct call passes its
    /// cost with
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
        self.cost_from = Some(Shared(Arc::new(cost)));
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
    /// A [`ConfigError`] that names the rule and the bad value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let valid_name = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !valid_name {
            return Err(ConfigError::new(
                ConfigErrorKind::Name,
                format!(
                    "invalid rule name `{}`: use 1-64 characters of A-Z, a-z, 0-9, `_`, `.`, `-`",
                    self.name
                ),
            )
            .with_setting("Rule::new")
            .with_value(&self.name)
            .of_rule(&self.name));
        }
        if let Some(why) = self.lease_problem(self.cost_from.is_some()) {
            return Err(self.problem(ConfigErrorKind::Concurrency, why, "Rule::concurrency"));
        }
        if self.after_response && self.cost == 0 && self.cost_from.is_none() {
            return Err(self
                .problem(
                    ConfigErrorKind::Cost,
                    "charged_after_response needs a reservation, and with_cost(0) reserves nothing (every concurrent request would pass on one unit left): reserve what a request typically costs with with_cost(n), n >= 1",
                    "Rule::with_cost",
                )
                .with_value(0));
        }
        self.shape_problem(&self.quota, self.cost)?;
        self.operations_problem()?;
        match self.leasing_problem() {
            Some(why) => Err(self.problem(ConfigErrorKind::Leasing, why, "Rule::leased")),
            None => Ok(()),
        }
    }

    /// A problem of this rule with `setting`: the message names the rule.
    pub(crate) fn problem(
        &self,
        kind: ConfigErrorKind,
        why: impl Into<String>,
        setting: &'static str,
    ) -> ConfigError {
        ConfigError::new(kind, why)
            .with_setting(setting)
            .in_rule(&self.name)
    }

    /// Why `quota` and `cost` cannot work with this rule's algorithm, the rule's own or a
    /// quota resolved for one request.
    pub(crate) fn shape_problem(&self, quota: &Quota, cost: u32) -> Result<(), ConfigError> {
        quota.validate().map_err(|e| e.in_rule(&self.name))?;
        if let Algorithm::Custom(custom) = &self.algorithm
            && let Some(why) = custom.problem()
        {
            return Err(self.problem(ConfigErrorKind::Algorithm, why, "Rule::with_algorithm"));
        }
        let capacity = self.algorithm.capacity(quota);
        if cost > capacity {
            return Err(self
                .problem(
                    ConfigErrorKind::Cost,
                    format!(
                        "cost {cost} is larger than the burst {capacity}, so no request could ever pass"
                    ),
                    "Rule::with_cost",
                )
                .with_value(cost));
        }
        if self.algorithm == Algorithm::SlidingCounter
            && u128::from(quota.limit()) * quota.period().as_micros() >= 1 << 53
        {
            return Err(self
                .problem(
                    ConfigErrorKind::Algorithm,
                    "the sliding counter needs limit × period (in µs) below 2^53; use a shorter period or GCRA",
                    "Rule::with_algorithm",
                )
                .with_value(quota));
        }
        Ok(())
    }

    /// Why `quota`, resolved for one request, cannot replace the rule's own: the checks of
    /// [`validate`](Self::validate), and for the window algorithms the rule's period (their
    /// windows are cut by it, so another period would start the key's count afresh).
    pub(crate) fn resolved_problem(&self, quota: &Quota, cost: u32) -> Result<(), ConfigError> {
        if quota.period() != self.quota.period()
            && matches!(
                self.algorithm,
                Algorithm::FixedWindow | Algorithm::SlidingCounter | Algorithm::SlidingLog
            )
        {
            return Err(self
                .problem(
                    ConfigErrorKind::Algorithm,
                    "a resolved quota of a window algorithm must keep the rule's period; use GCRA or the token bucket for plans with different periods",
                    "Rule::with_quota_from",
                )
                .with_value(quota));
        }
        self.shape_problem(quota, cost)
    }

    pub(crate) fn params(&self, quota: &Quota, cost: u32) -> Params {
        Params {
            algorithm: self.algorithm.clone(),
            limit: u64::from(quota.limit()),
            period_us: quota.period_us(),
            burst: u64::from(quota.burst_size()),
            emission_us: quota.emission_interval_us(),
            cost: u64::from(cost),
        }
    }

    /// Takes each request's quota from the request head in a
    /// [`RateLimitLayer`](super::RateLimitLayer): per plan, per tenant, per API key, changed at
    /// run time without a deploy. `resolve` returns `None` to keep the rule's own quota (the one
    /// given to [`Rule::new`], e.g. the free plan, for anonymous callers). It runs on every
    /// request, so it should read what an earlier layer found (a request extension set by the
    /// auth layer) or a cache, not a database; for an `async` lookup use
    /// [`with_quota_from_async`](Self::with_quota_from_async).
    ///
    /// The quotas of one rule may differ per key, and a key's quota may change between two of
    /// its requests: the state carries over in units, so a key that used 10 of the free plan's
    /// 10 and is upgraded to 100 has exactly 90 left in the same window (no reset to zero, no
    /// over-admission), and a key downgraded below what it used has none left until the new
    /// rate frees some. GCRA and the token bucket keep the quota's shape with the key's state on
    /// Redis to do so (a few bytes more per key); the window algorithms count units already, and
    /// require every resolved quota to keep the rule's period.
    ///
    /// A resolved quota that cannot work (a zero limit, a cost above its burst, another period
    /// for a window algorithm) is a bug of the resolver: the layer answers `500` ("The rate
    /// limiter is misconfigured.") and logs the rule and the reason at `warn`. The
    /// `RateLimit-Policy` header shows the quota each request was decided with. With
    /// [`FailurePolicy::Fallback`](super::FailurePolicy::Fallback), the in-process fallback
    /// shares the resolved quota among the replicas, as it does the rule's own.
    /// [`RedisLimiter::check`](super::RedisLimiter::check) ignores the resolver; a direct call
    /// passes its quota with [`Check::with_quota`](super::Check::with_quota).
    ///
    /// ```
    /// use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer, Rule};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// /// What the auth layer puts in the request's extensions.
    /// #[derive(Clone, Copy)]
    /// enum Plan { Free, Pro }
    ///
    /// let api = Rule::new("api", Quota::per_minute(60)).with_quota_from(|head| {
    ///     match head.extensions.get::<Plan>()? {
    ///         Plan::Free => None,
    ///         Plan::Pro => Some(Quota::per_minute(600)),
    ///     }
    /// });
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule_with(api, ClientIp::peer())
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn with_quota_from<F>(mut self, resolve: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Option<Quota> + Send + Sync + 'static,
    {
        self.quota_from = Some(QuotaFrom::Now(Arc::new(resolve)));
        self
    }

    /// As [`with_quota_from`](Self::with_quota_from), with an `async` lookup (a tenant table
    /// behind a cache, a call to a plan service). The future must own what it needs from the
    /// request head (clone the header or extension out of it before the `async` block).
    ///
    /// The request waits for the lookup at most 1 s;
    /// a lookup that takes longer, or answers `None`, leaves the request under the rule's own
    /// quota (logged at `warn` for the timeout, at most once a minute).
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::sync::{Arc, RwLock};
    /// use http::HeaderName;
    /// use redis_guard::rate_limit::{HeaderKey, MemoryLimiter, Quota, RateLimitLayer, Rule};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Tenant overrides, refreshed in the background from a table.
    /// let overrides: Arc<RwLock<HashMap<String, Quota>>> = Arc::default();
    /// let table = Arc::clone(&overrides);
    /// let api = Rule::new("api", Quota::per_minute(60)).with_quota_from_async(move |head| {
    ///     let tenant = head.headers.get("x-tenant").and_then(|v| v.to_str().ok());
    ///     let tenant = tenant.map(str::to_owned);
    ///     let table = Arc::clone(&table);
    ///     async move { table.read().ok()?.get(&tenant?).copied() }
    /// });
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule_with(api, HeaderKey::new(HeaderName::from_static("x-tenant")))
    ///     .build()?;
    /// overrides.write().unwrap().insert("acme".into(), Quota::per_minute(6000));
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn with_quota_from_async<F, Fut>(mut self, resolve: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Option<Quota>> + Send + 'static,
    {
        self.quota_from = Some(QuotaFrom::Later(Arc::new(move |head| {
            Box::pin(resolve(head))
        })));
        self
    }

    /// Whether the rule's quota is resolved per request
    /// ([`with_quota_from`](Self::with_quota_from) or its `async` twin).
    #[must_use]
    pub fn is_dynamic(&self) -> bool {
        self.quota_from.is_some()
    }

    /// The rule's quota resolver, if it has one.
    pub(crate) fn quota_from(&self) -> Option<&QuotaFrom> {
        self.quota_from.as_ref()
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
    /// ([`RedisLimiter::allow`](super::RedisLimiter::allow)).
    ///
    /// The keys are the values the rule's extractor produces (e.g. `Key::from(ip)` for
    /// [`ClientIp`](super::ClientIp)).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use redis_guard::rate_limit::{Key, MemoryLimiter, Quota, Rule};
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
    /// ([`RedisLimiter::penalize`](super::RedisLimiter::penalize)) and runtime allow-list entries
    /// ([`RedisLimiter::allow`](super::RedisLimiter::allow)), which every replica then honours. Off
    /// by default, because reading the record costs every request a little (one more key per script
    /// call on Redis, one more lookup in memory); [`with_bans`](Self::with_bans) turns it on.
    /// [`inspect`](super::RedisLimiter::inspect) and [`reset`](super::RedisLimiter::reset) work on
    /// every rule; `penalize` and `allow` on a rule without overrides are refused with
    /// a [`ConfigErrorKind::Unsupported`] error, never silently ignored.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::{Key, MemoryLimiter, Quota, Rule};
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
    fn operations_problem(&self) -> Result<(), ConfigError> {
        match self.bans.as_ref().and_then(Bans::problem) {
            Some(why) => Err(self.problem(ConfigErrorKind::Bans, why, "Rule::with_bans")),
            None => Ok(()),
        }
    }
}

/// A function a rule holds (its cost function, its refund condition); rules compare equal when
/// they share it.
pub(super) struct Shared<F: ?Sized>(pub(super) Arc<F>);

impl<F: ?Sized> Clone for Shared<F> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<F: ?Sized> PartialEq for Shared<F> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<F: ?Sized> Eq for Shared<F> {}

impl<F: ?Sized> std::fmt::Debug for Shared<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<fn>")
    }
}

/// A rule's cost function ([`Rule::with_cost_from`]).
type CostFrom = Shared<dyn Fn(&http::request::Parts) -> u32 + Send + Sync>;

/// Where a rule's quota comes from on each request ([`Rule::with_quota_from`] and its `async`
/// twin); rules compare equal when they share it.
#[derive(Clone)]
pub(crate) enum QuotaFrom {
    /// Known from the request head at once.
    Now(Arc<QuotaNow>),
    /// Looked up.
    Later(Arc<QuotaLater>),
}

/// A resolver that answers at once.
pub(crate) type QuotaNow = dyn Fn(&http::request::Parts) -> Option<Quota> + Send + Sync;

/// A resolver that looks the quota up.
pub(crate) type QuotaLater =
    dyn Fn(&http::request::Parts) -> super::limiter::BoxFuture<Option<Quota>> + Send + Sync;

impl PartialEq for QuotaFrom {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Now(a), Self::Now(b)) => Arc::ptr_eq(a, b),
            (Self::Later(a), Self::Later(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for QuotaFrom {}

impl std::fmt::Debug for QuotaFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Now(_) => "<fn(&Parts) -> Option<Quota>>",
            Self::Later(_) => "<async fn(&Parts) -> Option<Quota>>",
        })
    }
}

/// A rule's refund condition ([`Rule::refund_when`]).
pub(super) type RefundWhen = Shared<dyn Fn(&http::StatusCode) -> bool + Send + Sync>;
