//! One rule applied to one key with a cost: what a direct call (`check_all`, `charge_all`)
//! takes, and what the layer evaluates per rule.

use std::sync::Arc;

use crate::ConfigError;
use crate::rate_limit::algorithm::Params;
use crate::rate_limit::{Key, Mode, Quota, Rule};

/// One rule applied to one key with a cost: a line of an evaluation.
#[derive(Clone, Debug)]
pub struct Check {
    /// Shared with the layer's rule: a check costs a reference count, not a copy of the rule.
    pub(crate) rule: Arc<Rule>,
    pub(crate) key: Key,
    pub(crate) cost: u32,
    /// The rule's quota, or the one resolved for this request.
    pub(crate) quota: Quota,
    /// Given a quota ([`with_quota`](Self::with_quota)): the rule's quota varies, so its state
    /// on Redis keeps the quota's shape (never the lean GCRA script's bare TAT).
    pub(crate) varying: bool,
    /// Held back from the rule's reserve ([`Rule::reserve`]): decided against the quota less
    /// the reserve. Set by a layer for requests outside the rule's class; a direct call is
    /// decided as the class.
    pub(crate) held_back: bool,
    /// Decided with its rule's live quota ([`Rule::live`]), which a quota resolved per request
    /// does not replace.
    pub(crate) live: bool,
    /// The rule's mode, or the one an operator set for it at run time ([`Rule::live`]).
    pub(crate) mode: Mode,
}

impl Check {
    /// `rule` for `key`, costing the rule's cost.
    #[must_use]
    pub fn new(rule: Rule, key: Key) -> Self {
        Self::shared(&Arc::new(rule), key)
    }

    /// `rule` (a layer's, shared) for `key`, costing the rule's cost.
    pub(crate) fn shared(rule: &Arc<Rule>, key: Key) -> Self {
        Self {
            rule: Arc::clone(rule),
            key,
            cost: rule.cost(),
            quota: *rule.quota(),
            varying: false,
            held_back: false,
            live: false,
            mode: rule.mode(),
        }
    }

    setters! {
        /// Overrides the cost for this request.
        #[must_use]
        pub fn with_cost(cost: u32) => cost;
    }

    /// Decides this request with `quota` instead of the rule's own: the quota of the caller's
    /// plan, as a layer's [`Rule::with_quota_from`] resolves it. A key's state carries over
    /// when its quota changes (see there), provided every check of a rule whose quota varies
    /// says its quota, the rule's own included: on Redis, that keeps the quota's shape with the
    /// key's state.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Check, Key, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = MemoryLimiter::new();
    /// let api = Rule::new("api", Quota::per_hour(10));
    /// let pro = Quota::per_hour(100);
    /// for _ in 0..10 {
    ///     limiter.check(&api, Key::from("acme")).await.unwrap();
    /// }
    /// assert!(!limiter.check(&api, Key::from("acme")).await.unwrap().allowed);
    /// // Upgraded mid-hour: 90 more, not 100.
    /// let upgraded = Check::new(api.clone(), Key::from("acme")).with_quota(pro);
    /// let d = limiter.check_all(vec![upgraded]).await.unwrap();
    /// assert!(d.allowed);
    /// assert_eq!(d.remaining, 89);
    /// # }
    /// ```
    #[must_use]
    pub fn with_quota(mut self, quota: Quota) -> Self {
        self.quota = quota;
        self.varying = true;
        self
    }

    /// The quota this request is decided with.
    #[must_use]
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The algorithm's parameters for this request, `cost` units.
    pub(crate) fn params(&self, cost: u32) -> Params {
        // In its mode now: only an enforced rule waits (`Rule::throttle`).
        self.rule.params(&self.quota, cost, self.mode)
    }

    /// The rule.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// The key.
    #[must_use]
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The cost of this request.
    #[must_use]
    pub fn cost(&self) -> u32 {
        self.cost
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.rule.validate()?;
        if self.cost != self.rule.cost() || self.quota != *self.rule.quota() {
            self.rule.resolved_problem(&self.quota, self.cost)?;
        }
        Ok(())
    }
}
