//! Waiting instead of denying: [`Rule::throttle`].

use std::time::Duration;

use crate::rate_limit::{Algorithm, Mode, Rule};
use crate::{ConfigError, ConfigErrorKind};

/// The longest wait [`Rule::throttle`] accepts.
const MAX_WAIT: Duration = Duration::from_secs(60 * 60);

impl Rule {
    /// Delays a request over the limit instead of denying it, when it would be admitted after a
    /// wait of at most `max_wait` (1 ms to 1 hour): the decision reserves the request's future
    /// slot in the same atomic evaluation (GCRA: the theoretical arrival time moves as if the
    /// request were admitted then; token bucket: the tokens are taken now, as a debt), reports
    /// the exact wait from the store's clock (Redis `TIME`), and a
    /// [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) holds the request that long before
    /// calling the inner service. A request that would wait longer is denied (`429`) as
    /// without a throttle, and consumes nothing.
    ///
    /// For internal callers and batch clients: a short wait instead of a retry loop. Requests
    /// admitted this way carry the usual `RateLimit` headers (nothing left); the handler sees
    /// the wait in [`Decision::wait`](crate::rate_limit::Decision::wait). A waiting request
    /// whose client goes away gives its slot back (every rule of the request). The layer bounds
    /// how many requests wait at once
    /// ([`max_waiters`](crate::rate_limit::RateLimitLayerBuilder::max_waiters)). A
    /// [concurrency](Self::concurrency) lease the same request took is held while it waits,
    /// and renewed only once the handler runs: keep `max_wait` below the lease's expiry.
    ///
    /// Only [`Algorithm::Gcra`] and [`Algorithm::TokenBucket`] know when a request would be
    /// admitted; [`validate`](Self::validate) refuses a throttle on any other algorithm, and on a
    /// rule [`leased`](Self::leased) in blocks (a block decides in process, so the wait would not
    /// be reserved on Redis). Only an enforced rule waits: in [`Mode::Shadow`] or [`Mode::Soft`]
    /// the throttle is ignored. A direct call ([`RedisLimiter::check`]) reserves the slot too and
    /// reports the wait in [`Decision::wait`](crate::rate_limit::Decision::wait): waiting is then
    /// the caller's job.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::{Algorithm, Key, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rule = Rule::new("batch", Quota::per_second(5)).throttle(Duration::from_secs(2));
    /// assert_eq!(rule.max_wait(), Some(Duration::from_secs(2)));
    /// let limiter = MemoryLimiter::new();
    /// for _ in 0..5 {
    ///     limiter.check(&rule, Key::from("job")).await.unwrap();
    /// }
    /// // The sixth fits 200 ms after the first (less the time the five took): admitted, its
    /// // slot reserved, the wait reported.
    /// let sixth = limiter.check(&rule, Key::from("job")).await.unwrap();
    /// assert!(sixth.allowed);
    /// assert!(sixth.wait > Duration::from_millis(150));
    /// assert!(sixth.wait <= Duration::from_millis(200));
    ///
    /// let window = Rule::new("w", Quota::per_second(5))
    ///     .with_algorithm(Algorithm::FixedWindow)
    ///     .throttle(Duration::from_secs(1));
    /// assert!(window.validate().is_err());
    /// # }
    /// ```
    ///
    /// [`RedisLimiter::check`]: crate::rate_limit::RedisLimiter::check
    pub fn throttle(mut self, max_wait: Duration) -> Self {
        self.throttle = Some(max_wait);
        self
    }

    /// The longest a request over the limit is delayed rather than denied
    /// ([`throttle`](Self::throttle)); `None`: it is denied at once.
    #[must_use]
    pub fn max_wait(&self) -> Option<Duration> {
        self.throttle
    }

    /// The throttle's wait in µs as the algorithms take it for a request decided in `mode` (the
    /// rule's own, or a live one): 0 without one, or outside [`Mode::Enforce`].
    pub(crate) fn max_wait_us(&self, mode: Mode) -> u64 {
        match self.throttle {
            Some(wait) if mode == Mode::Enforce => {
                u64::try_from(wait.as_micros()).unwrap_or(u64::MAX)
            }
            _ => 0,
        }
    }

    /// Why this rule's throttle cannot work.
    pub(super) fn throttle_problem(&self) -> Result<(), ConfigError> {
        let Some(wait) = self.throttle else {
            return Ok(());
        };
        ConfigError::check_duration(wait, MAX_WAIT, "a throttle's max wait", "one hour")
            .map_err(|e| e.with_setting("Rule::throttle").in_rule(self.name()))?;
        if !matches!(self.algorithm(), Algorithm::Gcra | Algorithm::TokenBucket) {
            return Err(self.problem(
                ConfigErrorKind::Unsupported,
                "only GCRA and token-bucket rules can be throttled: the other algorithms cannot reserve a slot in the future",
                "Rule::throttle",
            ));
        }
        if self.leased.is_some() {
            return Err(self.problem(
                ConfigErrorKind::Leasing,
                "a throttled rule cannot be leased: a leased block decides in process and cannot reserve a wait on Redis",
                "Rule::throttle",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::Quota;

    #[test]
    fn a_throttle_that_cannot_work_is_named() {
        let rule = |wait| Rule::new("t", Quota::per_second(5)).throttle(wait);
        let kind = |r: Rule| r.validate().unwrap_err().kind();
        assert_eq!(kind(rule(Duration::ZERO)), ConfigErrorKind::Duration);
        assert_eq!(kind(rule(MAX_WAIT * 2)), ConfigErrorKind::Duration);
        assert_eq!(kind(rule(MAX_WAIT).leased(10)), ConfigErrorKind::Leasing);
        let log = rule(Duration::from_secs(1)).with_algorithm(Algorithm::SlidingLog);
        assert_eq!(kind(log), ConfigErrorKind::Unsupported);
        let bucket = rule(Duration::from_secs(1)).with_algorithm(Algorithm::TokenBucket);
        assert!(bucket.validate().is_ok());
        // Only an enforced rule waits.
        assert_eq!(
            rule(Duration::from_millis(2)).max_wait_us(Mode::Enforce),
            2_000
        );
        assert_eq!(rule(Duration::from_secs(1)).max_wait_us(Mode::Shadow), 0);
    }
}
