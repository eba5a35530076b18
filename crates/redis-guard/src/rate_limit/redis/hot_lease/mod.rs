//! Hot-key quota leasing: [`Rule::leased`], and the blocks a [`RedisLimiter`] admits from in
//! process (`blocks.rs`).
//!
//! [`RedisLimiter`]: crate::rate_limit::RedisLimiter

mod blocks;
mod route;

use std::sync::LazyLock;
use std::time::Duration;

use crate::backend::LuaScript;
use crate::rate_limit::{Algorithm, Rule};

pub(crate) use blocks::{HotLeases, Leased};

/// The longest lease of a block; shorter for short periods (a tenth of the period).
const MAX_LEASE: Duration = Duration::from_millis(100);

/// How long Redis keeps a key's count of open blocks after the last reservation (ms). A block
/// is given back long before (at the end of its lease); one whose give-back comes later than
/// half of this stays used.
const OPEN_COUNT_TTL_MS: u64 = 60_000;

/// Reserves a block, or gives one back: `reserve.lua`, after `returns.lua`, which it uses.
static RESERVE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(concat!(
        include_str!("returns.lua"),
        "\n",
        include_str!("reserve.lua")
    ))
});

impl Rule {
    /// Lets a [`RedisLimiter`](crate::rate_limit::RedisLimiter) admit a **busy** key's requests
    /// from blocks of quota reserved in advance, of at most `percent` % of the burst each, instead
    /// of one Redis call per request. Only for [`Algorithm::Gcra`] (the default).
    ///
    /// While a key is cold, every request is decided by Redis as without this option. Once one
    /// replica sees at least two requests' worth of the key's cost within a lease (100 ms, or a
    /// tenth of the period when that is shorter), its next request reserves a block of `k`
    /// units in one script call: the key's GCRA state moves as `k` requests admitted at once
    /// would move it, never beyond what the burst allows at that moment (the block is smaller
    /// when less is left; a request that does not fit gets Redis' denial, and reserves
    /// nothing). `k` is what this replica saw of the key in the last lease (its local rate ×
    /// the lease), at least two requests' cost, at most `percent` % of the burst. The replica
    /// then admits the key's requests from the block in process until the block is spent or
    /// its lease ends; at the end, the units it did not admit go back to Redis in one call, so
    /// the other replicas can use them. One reservation per key is in flight at a time;
    /// requests that arrive meanwhile are decided by Redis one by one.
    ///
    /// **Safety stays exact**: across every replica, a key is never admitted more than its quota
    /// allows, since a block takes from Redis exactly what its requests would have, and a give-back
    /// returns only units nobody was admitted with (and only while the key's state has been
    /// continuously busy since the reservation: when the key's GCRA state emptied in between, its
    /// units have come back with time already, and the give-back is skipped).
    /// [`RedisLimiter::reset`](crate::rate_limit::RedisLimiter::reset) is the exception it always
    /// is: it grants the key a fresh quota, and blocks open at the time are spent and given back as
    /// usual.
    ///
    /// **The price**: a client may be denied on one replica while another replica holds unused
    /// units of its blocks: at most `replicas × k` units (`k` ≤ `percent` % of the burst) are
    /// held back this way, each for at most one lease. A give-back that fails (Redis down, a
    /// timeout), is skipped as above, or does not happen (the replica crashed) leaves its
    /// units used: the error is on the side of limiting. When the last clone of the limiter is
    /// dropped, its open blocks are given back in tasks on the current Tokio runtime (best
    /// effort).
    ///
    /// The headers of a request admitted from a block show what Redis had left when the block
    /// was reserved less what this replica admitted from it since, that is what Redis would say
    /// if no other replica had used the key meanwhile (never more than this replica's view of
    /// the truth); `reset` is counted the same way.
    /// [`RedisLimiter::inspect`](crate::rate_limit::RedisLimiter::inspect)
    /// reports what Redis holds: the units of open blocks count as used there.
    ///
    /// Only requests with this one rule are leased: a request that several rules decide together,
    /// all or nothing, goes to Redis, and so do probes (cost 0) and allow-listed keys.
    /// [`MemoryLimiter`](crate::rate_limit::MemoryLimiter) decides in process anyway: there the
    /// option does nothing, and so it does in
    /// [`FailurePolicy::Fallback`](crate::rate_limit::FailurePolicy::Fallback)'s in-process
    /// fallback.
    ///
    /// # Errors at `build()`
    ///
    /// A [`ConfigError`](crate::ConfigError) of kind [`Leasing`](crate::ConfigErrorKind::Leasing)
    /// when `percent` is not in `1..=100`; for an algorithm other than GCRA (a sliding log, as for
    /// logins and calls, or a concurrency rule, must answer each request exactly; custom and the
    /// other algorithms are not leased); for rules that need an answer per request (with
    /// [`Bans`](crate::rate_limit::Bans), [`with_overrides`](Self::with_overrides),
    /// [`charged_after_response`](Self::charged_after_response), or a quota resolved per request
    /// with [`with_quota_from`](Self::with_quota_from)); and when `percent` % of the burst is less
    /// than two requests' cost.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Algorithm, Quota, Rule};
    /// // A busy API key: blocks of at most 10 % of the burst (here 100 of 1000).
    /// let api = Rule::new("api", Quota::per_second(1000)).leased(10);
    /// assert!(api.validate().is_ok());
    /// // A login rule must be exact per request.
    /// let login = Rule::new("login", Quota::per_minute(5))
    ///     .with_algorithm(Algorithm::SlidingLog)
    ///     .leased(10);
    /// assert!(login.validate().is_err());
    /// ```
    pub fn leased(mut self, percent: u8) -> Self {
        self.leased = Some(percent);
        self
    }

    /// The largest block of a leased rule, in units, for its own quota.
    pub(crate) fn max_block(&self) -> Option<u64> {
        let percent = u64::from(self.leased?);
        Some(u64::from(self.quota().burst_size()) * percent / 100)
    }

    /// Why this rule cannot be leased, if it asks to be.
    pub(crate) fn leasing_problem(&self) -> Option<&'static str> {
        let percent = self.leased?;
        if !(1..=100).contains(&percent) {
            return Some("leased(percent) takes a percentage of the burst from 1 to 100");
        }
        if *self.algorithm() != Algorithm::Gcra {
            return Some(
                "only GCRA rules can be leased: a sliding log or a concurrency rule answers each request exactly, and the other algorithms keep state a block cannot take",
            );
        }
        if self.bans().is_some() || self.reads_overrides() {
            return Some(
                "a rule with bans or overrides needs Redis' answer on every request, so it cannot be leased",
            );
        }
        if self.settles_after_response() {
            return Some(
                "a rule charged after the response settles each request on Redis, so it cannot be leased",
            );
        }
        if self.is_dynamic() {
            return Some(
                "a rule whose quota is resolved per request cannot be leased: a block is reserved under one quota",
            );
        }
        let cost = u64::from(self.cost().max(1));
        if self.max_block().unwrap_or(0) < 2 * cost {
            return Some(
                "leased(percent): percent % of the burst is less than two requests' cost; raise the burst or the percentage",
            );
        }
        None
    }
}

/// The lease of a block of a rule with period `period_us`, in µs.
fn lease_us(period_us: u64) -> u64 {
    let max = u64::try_from(MAX_LEASE.as_micros()).unwrap_or(u64::MAX);
    (period_us / 10).clamp(1, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigErrorKind;
    use crate::rate_limit::{Bans, Quota};

    fn refused(rule: &Rule) -> String {
        match rule.validate() {
            Err(e) if e.kind() == ConfigErrorKind::Leasing => {
                assert_eq!(e.rule(), Some(rule.name()));
                e.to_string()
            }
            other => panic!("expected a leasing refusal, got {other:?}"),
        }
    }

    #[test]
    fn refuses_what_cannot_be_leased() {
        let q = Quota::per_hour(1000);
        for algorithm in [
            Algorithm::SlidingLog,
            Algorithm::FixedWindow,
            Algorithm::SlidingCounter,
            Algorithm::TokenBucket,
        ] {
            let why = refused(&Rule::new("r", q).with_algorithm(algorithm).leased(10));
            assert!(why.contains("only GCRA"), "{why}");
        }
        assert!(refused(&Rule::concurrency("c", 10).leased(50)).contains("only GCRA"));
        assert!(refused(&Rule::new("r", q).leased(0)).contains("1 to 100"));
        assert!(refused(&Rule::new("r", q).leased(101)).contains("1 to 100"));
        assert!(refused(&Rule::new("r", q).with_overrides().leased(10)).contains("bans"));
        assert!(refused(&Rule::new("r", q).with_bans(Bans::after(3)).leased(10)).contains("bans"));
        let after = Rule::new("r", q).charged_after_response().leased(10);
        assert!(refused(&after).contains("after the response"));
        let dynamic = Rule::new("r", q).with_quota_from(|_| None).leased(10);
        assert!(refused(&dynamic).contains("resolved per request"));
        // 10 % of a burst of 10 is one unit: no block of two.
        assert!(refused(&Rule::new("r", Quota::per_minute(10)).leased(10)).contains("two"));
        assert!(refused(&Rule::new("r", q).with_cost(60).leased(10)).contains("two"));
    }

    #[test]
    fn leases_gcra_with_room_for_two_requests() {
        let rule = Rule::new("r", Quota::per_hour(1000)).leased(10);
        assert_eq!(rule.validate(), Ok(()));
        assert_eq!(rule.max_block(), Some(100));
        assert_eq!(Rule::new("r", Quota::per_hour(1000)).max_block(), None);
    }

    #[test]
    fn leases_are_short() {
        assert_eq!(lease_us(3_600_000_000), 100_000);
        assert_eq!(lease_us(100_000), 10_000);
        assert_eq!(lease_us(5), 1);
    }
}
