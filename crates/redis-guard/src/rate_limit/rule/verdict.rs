//! [`Rule`]: a named quota, and what every limiter decides by (its quota, algorithm and cost,
//! its bans, allow list and runtime overrides), checked by [`Rule::validate`].

use std::collections::HashSet;
use std::sync::Arc;

use super::in_layer::{CostFrom, QuotaFrom, RefundWhen};
use crate::rate_limit::algorithm::Params;
use crate::rate_limit::{Algorithm, Bans, FailurePolicy, Key, Mode, Quota, Route};
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
    bans: Option<Bans>,
    allowed_keys: Option<Arc<HashSet<Key>>>,
    overrides: bool,
    // Read by a layer only (in_layer.rs, and the features' own files).
    pub(super) mode: Mode,
    pub(super) on_failure: Option<FailurePolicy>,
    pub(super) route: Option<Route>,
    pub(super) cost_from: Option<CostFrom>,
    pub(super) quota_from: Option<QuotaFrom>,
    /// Settled after the response: by a reported [`ActualCost`](crate::rate_limit::ActualCost).
    pub(in crate::rate_limit) after_response: bool,
    pub(in crate::rate_limit) refund_when: Option<RefundWhen>,
    /// Leased in blocks of at most this percentage of the burst ([`Rule::leased`]).
    pub(in crate::rate_limit) leased: Option<u8>,
    /// Admitted after a wait of at most this rather than denied ([`Rule::throttle`]).
    pub(in crate::rate_limit) throttle: Option<std::time::Duration>,
    /// The share of the burst kept for a priority class ([`Rule::reserve`], `reserve.rs`).
    pub(in crate::rate_limit) reserve: Option<super::reserve::Reserve>,
    /// Its quota can be changed at run time ([`Rule::live`], `live.rs`).
    pub(in crate::rate_limit) live: bool,
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
            throttle: None,
            reserve: None,
            live: false,
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
        self.reserve_problem(&self.quota, self.cost)?;
        self.live_problem()?;
        self.operations_problem()?;
        self.throttle_problem()?;
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
        self.shape_problem(quota, cost)?;
        self.reserve_problem(quota, cost)
    }

    /// This rule with another quota and algorithm, everything else kept (allow list, bans,
    /// mode, route): the in-process fallback's share of it.
    pub(crate) fn reshaped(&self, quota: Quota, algorithm: Algorithm) -> Self {
        let mut rule = self.clone();
        rule.quota = quota;
        rule.algorithm = algorithm;
        rule
    }

    /// The algorithm's parameters for `cost` units of `quota`, decided in `mode`.
    pub(crate) fn params(&self, quota: &Quota, cost: u32, mode: Mode) -> Params {
        Params {
            algorithm: self.algorithm.clone(),
            limit: u64::from(quota.limit()),
            period_us: quota.period_us(),
            burst: u64::from(quota.burst_size()),
            emission_us: quota.emission_interval_us(),
            cost: u64::from(cost),
            max_wait_us: self.max_wait_us(mode),
        }
    }

    /// Bans keys that keep hitting the limit: see [`Bans`].
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
    /// ([`RedisLimiter::allow`](crate::rate_limit::RedisLimiter::allow)).
    ///
    /// The keys are the values the rule's extractor produces (e.g. `Key::from(ip)` for
    /// [`ClientIp`](crate::rate_limit::ClientIp)).
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
    /// ([`RedisLimiter::penalize`](crate::rate_limit::RedisLimiter::penalize)) and runtime
    /// allow-list entries ([`RedisLimiter::allow`](crate::rate_limit::RedisLimiter::allow)), which
    /// every replica then honours. Off by default, because reading the record costs every request a
    /// little (one more key per script call on Redis, one more lookup in memory);
    /// [`with_bans`](Self::with_bans) turns it on.
    /// [`inspect`](crate::rate_limit::RedisLimiter::inspect) and
    /// [`reset`](crate::rate_limit::RedisLimiter::reset) work on every rule; `penalize` and `allow`
    /// on a rule without overrides are refused with a [`ConfigErrorKind::Unsupported`] error, never
    /// silently ignored.
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

    /// Whether a layer decides the rule the plain way: enforced, with its own quota and a
    /// constant cost of at least 1, a built-in algorithm that takes no lease, on every route,
    /// and nothing to reserve, lease, settle, throttle, override or set live.
    pub(crate) fn is_plain(&self) -> bool {
        self.mode == Mode::Enforce
            && self.cost >= 1
            && self.algorithm.builtin_id().is_some()
            && !self.algorithm.is_lease()
            && !self.reads_overrides()
            && self.route.is_none()
            && self.cost_from.is_none()
            && self.quota_from.is_none()
            && !self.after_response
            && self.refund_when.is_none()
            && self.leased.is_none()
            && self.throttle.is_none()
            && self.reserve.is_none()
            && !self.live
    }

    /// Why the rule's operations options cannot work.
    fn operations_problem(&self) -> Result<(), ConfigError> {
        match self.bans.as_ref().and_then(Bans::problem) {
            Some(why) => Err(self.problem(ConfigErrorKind::Bans, why, "Rule::with_bans")),
            None => Ok(()),
        }
    }
}
