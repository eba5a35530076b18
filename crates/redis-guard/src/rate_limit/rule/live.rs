//! Live limits ([`Rule::live`]): a rule whose quota and mode an operator changes at run time,
//! for every replica, with
//! [`RedisLimiter::set_rule_quota`](crate::rate_limit::RedisLimiter::set_rule_quota) and
//! [`RedisLimiter::set_rule_mode`](crate::rate_limit::RedisLimiter::set_rule_mode). Where the
//! record lives and how each backend reads it: `limiter/live.rs`.

use crate::rate_limit::Rule;
use crate::{ConfigError, ConfigErrorKind};

impl Rule {
    /// Lets an operator change this rule's quota and mode at run time, for every replica on
    /// the store (an incident, a launch):
    /// [`set_rule_quota`](crate::rate_limit::RedisLimiter::set_rule_quota),
    /// [`clear_rule_quota`](crate::rate_limit::RedisLimiter::clear_rule_quota),
    /// [`set_rule_mode`](crate::rate_limit::RedisLimiter::set_rule_mode) and
    /// [`clear_rule_mode`](crate::rate_limit::RedisLimiter::clear_rule_mode) on any limiter
    /// of the store. Off by default, because reading the live record costs every decision of
    /// the rule a little: one more key in the script call on a single Redis (no extra round
    /// trip), one lookup in process.
    ///
    /// Each key's state carries over a change in units, as a plan change does
    /// ([`with_quota_from`](Self::with_quota_from)): the window algorithms keep the rule's
    /// period, so a live quota of theirs must keep it too.
    ///
    /// Refused by [`validate`](Self::validate) with a [reserve](Self::reserve) (held back from a
    /// quota it would no longer know), [leasing](Self::leased) (blocks reserved under one
    /// quota), and for [concurrency rules](Self::concurrency) (leases taken under one maximum).
    ///
    /// ```
    /// use redis_guard::rate_limit::{Key, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = MemoryLimiter::new();
    /// let api = Rule::new("api", Quota::per_minute(60)).live();
    /// limiter.set_rule_quota(&api, Quota::per_minute(1)).await?;
    /// assert!(limiter.check(&api, Key::from("k")).await?.allowed);
    /// assert!(!limiter.check(&api, Key::from("k")).await?.allowed);
    /// # Ok(()) }
    /// ```
    pub fn live(mut self) -> Self {
        self.live = true;
        self
    }

    /// Whether the rule's quota and mode can be changed at run time ([`live`](Self::live)).
    #[must_use]
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Why the rule cannot be live.
    pub(crate) fn live_problem(&self) -> Result<(), ConfigError> {
        let lease = self.algorithm().is_lease();
        if self.live && (self.reserve.is_some() || self.leased.is_some() || lease) {
            return Err(self.problem(
                ConfigErrorKind::Unsupported,
                "a live rule can have no reserve, cannot be leased and cannot be a concurrency rule: each is sized from the quota in code",
                "Rule::live",
            ));
        }
        Ok(())
    }
}
