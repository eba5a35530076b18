//! Reserved headroom ([`Rule::reserve`]; Stripe's "critical requests" load shedding, per rule
//! and key).
//!
//! How it holds on every algorithm without a script of its own: the state counts units, never
//! the quota it was decided under (GCRA's theoretical arrival time, the windows' counts), or
//! keeps the shape it was stored under (the token bucket), so requests decided against the
//! smaller quota and the class's, against the whole one, read one count. Refunds and charges
//! always use the whole quota (`RuleArgs::decided` on Redis; `Check::params` stays whole).

use std::sync::Arc;

use super::in_layer::Shared;
use crate::rate_limit::algorithm::Params;
use crate::rate_limit::{Algorithm, Check, Quota, Rule};
use crate::{ConfigError, ConfigErrorKind};

/// Which requests may use a rule's reserve.
type Class = Shared<dyn Fn(&http::request::Parts) -> bool + Send + Sync>;

/// A rule's reserve: its share, and the class it is kept for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reserve {
    /// The share as `f64` bits, so that the rule stays `Eq`; checked by [`Rule::validate`].
    share_bits: u64,
    class: Class,
}

impl Reserve {
    fn share(&self) -> f64 {
        f64::from_bits(self.share_bits)
    }

    /// The units held back from requests outside the class under `quota`: the share of the
    /// algorithm's capacity, rounded up (a reserve is never 0 units).
    fn units(&self, algorithm: &Algorithm, quota: &Quota) -> u32 {
        let capacity = f64::from(algorithm.capacity(quota));
        // Less a hair, so that 10% of 60 is 6 (0.1 × 60 is 6.000000000000001 in f64).
        let units = (self.share() * capacity - 1e-9).ceil();
        // The share is checked in (0, 1), so this is within 0..=capacity.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let units = units.max(1.0) as u32;
        units
    }
}

impl Rule {
    /// Keeps `share` (0 < share < 1: `0.1` is 10 %) of the rule's burst for requests of a
    /// priority class, chosen by `class` from the request head: requests outside it are limited
    /// once only the reserve is left of their key's budget, those in it may use all of it. For
    /// the checkout beside bulk exports, health checks, the admin, paying customers.
    ///
    /// The class is what `class` says of the request, in a
    /// [`RateLimitLayer`](crate::rate_limit::RateLimitLayer): typically an extension your own
    /// layer (auth) set before this one, or a [`Route`](crate::rate_limit::Route) (see the
    /// examples). Never trust a client header for it. A direct call
    /// ([`RedisLimiter::check`](crate::rate_limit::RedisLimiter::check)) is decided as the class,
    /// with the whole quota, as it ignores the rule's route.
    ///
    /// The reserve is `share` of the burst for GCRA and the token bucket, of the limit for the
    /// window algorithms, rounded up to whole units (10 % of a burst of 5 keeps 1). The other
    /// requests are decided against the quota less the reserve, and their `RateLimit` header
    /// counts what is left of that smaller budget (`r`; `q` too for the window algorithms);
    /// the class sees the whole one. Both count on the same state, on every backend, in the
    /// same single script call, and a denial's `Retry-After` is the wait of the budget it was
    /// decided against. The limiter's deny cache never answers for a rule with a reserve (one
    /// key, two answers).
    ///
    /// Refused by [`validate`](Self::validate) (hence when the layer is built): a share outside
    /// (0, 1), a reserve that leaves the other requests less than their cost, and rules whose
    /// budget is not the rule's own to split: concurrency rules, custom algorithms, leased rules
    /// and costs charged after the response; and [live](Self::live) rules (the reserve is sized
    /// from the quota in code).
    ///
    /// ```
    /// use redis_guard::rate_limit::{ClientIp, Global, MemoryLimiter, Quota, RateLimitLayer, Route, Rule};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// /// Set in the request extensions by the auth layer for paying customers.
    /// #[derive(Clone)]
    /// struct Paying;
    ///
    /// // Of 1000 requests a second to the whole API, the last 10 % for paying customers.
    /// let total = Rule::new("api-total", Quota::per_second(1000))
    ///     .reserve(0.1, |head| head.extensions.get::<Paying>().is_some());
    /// // Of a client's 60 a minute, the last 5 for the checkout.
    /// let checkout = Route::prefix("/checkout");
    /// let per_client = Rule::new("api", Quota::per_minute(60))
    ///     .reserve(0.08, move |head| checkout.matches(head));
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule_with(total, Global)
    ///     .rule_with(per_client, ClientIp::peer())
    ///     .build()?;
    /// # let _ = layer;
    /// assert!(Rule::new("x", Quota::per_minute(60)).reserve(1.5, |_| true).validate().is_err());
    /// # Ok(()) }
    /// ```
    pub fn reserve<F>(mut self, share: f64, class: F) -> Self
    where
        F: Fn(&http::request::Parts) -> bool + Send + Sync + 'static,
    {
        self.reserve = Some(Reserve {
            share_bits: share.to_bits(),
            class: Shared(Arc::new(class)),
        });
        self
    }

    /// The share of the rule's burst kept for its priority class ([`reserve`](Self::reserve)),
    /// if any.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Quota, Rule};
    /// let rule = Rule::new("api", Quota::per_minute(60)).reserve(0.1, |_| false);
    /// assert_eq!(rule.reserved_share(), Some(0.1));
    /// ```
    #[must_use]
    pub fn reserved_share(&self) -> Option<f64> {
        self.reserve.as_ref().map(Reserve::share)
    }

    /// Why the rule's reserve cannot work with `quota` and `cost`, if it has one.
    pub(crate) fn reserve_problem(&self, quota: &Quota, cost: u32) -> Result<(), ConfigError> {
        let Some(reserve) = &self.reserve else {
            return Ok(());
        };
        let share = reserve.share();
        let problem = |kind, why: String| Err(self.problem(kind, why, "Rule::reserve"));
        if !(share > 0.0 && share < 1.0) {
            return problem(
                ConfigErrorKind::Quota,
                format!("the reserved share {share} must be above 0 and below 1 (0.1 is 10 %)"),
            );
        }
        let algorithm = self.algorithm();
        if matches!(algorithm, Algorithm::Concurrency | Algorithm::Custom(_))
            || self.leased.is_some()
            || self.after_response
        {
            return problem(
                ConfigErrorKind::Unsupported,
                "a reserve works on GCRA, the token bucket and the window algorithms, decided per request: not on concurrency rules, custom algorithms, leased rules or costs charged after the response".into(),
            );
        }
        let (capacity, units) = (algorithm.capacity(quota), reserve.units(algorithm, quota));
        if capacity.saturating_sub(units) < cost.max(1) {
            return problem(
                ConfigErrorKind::Cost,
                format!(
                    "a reserve of {units} of {capacity} leaves the other requests less than their cost {}: reserve a smaller share or raise the quota",
                    cost.max(1)
                ),
            );
        }
        Ok(())
    }
}

impl Check {
    /// This check held back from its rule's reserve when `parts` is not of the rule's class.
    pub(crate) fn reserving(mut self, parts: &http::request::Parts) -> Self {
        self.held_back = self
            .rule
            .reserve
            .as_ref()
            .is_some_and(|r| !(r.class.0)(parts));
        self
    }

    /// The parameters this request is *decided* with, `cost` units: the rule's, less the
    /// reserve when the check is held back from it. Everything that writes state without a
    /// decision (refunds, charges) takes [`params`](Self::params), the whole quota.
    pub(crate) fn decided_params(&self, cost: u32) -> Params {
        let mut p = self.params(cost);
        if let Some(reserve) = self.rule.reserve.as_ref().filter(|_| self.held_back) {
            let units = u64::from(reserve.units(&p.algorithm, &self.quota));
            // Never below the cost (a quota the fallback shared may be small): checked for the
            // rule's own quota when it was built.
            if p.algorithm.is_window() {
                p.limit = p.limit.saturating_sub(units).max(p.cost.max(1));
            } else {
                p.burst = p.burst.saturating_sub(units).max(p.cost.max(1));
            }
        }
        p
    }
}
