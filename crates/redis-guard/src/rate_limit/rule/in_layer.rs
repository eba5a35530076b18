//! The settings of a [`Rule`] that only a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer)
//! reads: its mode and failure policy, its route, and its cost and quota taken from each
//! request. Costs settled after the response and concurrency leases are in `lease/`.

use std::sync::Arc;

use crate::rate_limit::limiter::BoxFuture;
use crate::rate_limit::{FailurePolicy, Mode, Quota, Route, Rule};

impl Rule {
    setters! {
        /// How a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) acts on this rule's verdict
        /// (default [`Mode::Enforce`]).
        /// [`RedisLimiter::check`](crate::rate_limit::RedisLimiter::check) ignores it: a direct
        /// call returns the verdict, and acting on it is up to the caller.
        pub fn with_mode(mode: Mode) => mode;
    }

    /// What a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) does with this rule when the
    /// limiter cannot decide, instead of the layer's
    /// [`failure_policy`](crate::rate_limit::RateLimitLayerBuilder::failure_policy): e.g. a login
    /// rule that fails closed in a layer that falls back. When a request's rules have different
    /// policies, a `Closed` rule answers `503`; otherwise the `Fallback` rules decide in process
    /// and the `Open` ones are skipped.
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

    /// Applies the rule in a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) only to requests
    /// on `route` (by path and method), so that one layer holds a limit per endpoint; other
    /// requests skip it. [`RedisLimiter::check`](crate::rate_limit::RedisLimiter::check) ignores
    /// it.
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

    /// Takes each request's cost from the request head (route, method, a header) in a
    /// [`RateLimitLayer`](crate::rate_limit::RateLimitLayer), instead of
    /// [`with_cost`](Self::with_cost)'s constant: an export costs 20, a search 1, a status check 0
    /// (checked, not consumed). [`RedisLimiter::check`](crate::rate_limit::RedisLimiter::check)
    /// ignores it; a direct call passes its cost with
    /// [`Check::with_cost`](crate::rate_limit::Check::with_cost).
    ///
    /// A cost the rule can never admit (above its burst) is a bug of the function, not of the
    /// client: the layer answers `500` and logs the rule and the cost at `warn`.
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

    /// Takes each request's quota from the request head in a
    /// [`RateLimitLayer`](crate::rate_limit::RateLimitLayer): per plan, per tenant, per API key,
    /// changed at run time without a deploy. `resolve` returns `None` to keep the rule's own quota
    /// (the one given to [`Rule::new`], e.g. the free plan, for anonymous callers). It runs on
    /// every request, so it should read what an earlier layer found (a request extension set by the
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
    /// A resolved quota that cannot work (a zero limit, a cost above its burst, another period for
    /// a window algorithm) is a bug of the resolver: the layer answers `500` and logs the rule
    /// and the reason at `warn`. The `RateLimit-Policy` header shows the quota each request was
    /// decided with. With [`FailurePolicy::Fallback`](crate::rate_limit::FailurePolicy::Fallback),
    /// the in-process fallback shares the resolved quota among the replicas, as it does the rule's
    /// own. [`RedisLimiter::check`](crate::rate_limit::RedisLimiter::check) ignores the resolver; a
    /// direct call passes its quota with
    /// [`Check::with_quota`](crate::rate_limit::Check::with_quota).
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
        self.quota_from = Some(QuotaFrom::Now(Shared(Arc::new(resolve))));
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
    ///     .rule_with(api, HeaderKey::new("x-tenant"))
    ///     .build()?;
    /// overrides.write().unwrap().insert("acme".into(), Quota::per_minute(6000));
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn with_quota_from_async<F, Fut>(mut self, resolve: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Option<Quota>> + Send + 'static,
    {
        let later: Arc<QuotaLater> = Arc::new(move |head| Box::pin(resolve(head)));
        self.quota_from = Some(QuotaFrom::Later(Shared(later)));
        self
    }

    /// Whether the rule's quota is resolved per request
    /// ([`with_quota_from`](Self::with_quota_from) or its `async` twin).
    #[must_use]
    pub fn is_dynamic(&self) -> bool {
        self.quota_from.is_some()
    }

    pub(crate) fn quota_from(&self) -> Option<&QuotaFrom> {
        self.quota_from.as_ref()
    }
}

/// A function a rule holds (its cost function, its refund condition); rules compare equal when
/// they share it.
pub(crate) struct Shared<F: ?Sized>(pub(crate) Arc<F>);

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
pub(super) type CostFrom = Shared<dyn Fn(&http::request::Parts) -> u32 + Send + Sync>;

/// Where a rule's quota comes from on each request ([`Rule::with_quota_from`] and its `async`
/// twin); rules compare equal when they share it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum QuotaFrom {
    /// Known from the request head at once.
    Now(Shared<QuotaNow>),
    /// Looked up.
    Later(Shared<QuotaLater>),
}

/// A resolver that answers at once.
pub(crate) type QuotaNow = dyn Fn(&http::request::Parts) -> Option<Quota> + Send + Sync;

/// A resolver that looks the quota up.
pub(crate) type QuotaLater =
    dyn Fn(&http::request::Parts) -> BoxFuture<Option<Quota>> + Send + Sync;

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
