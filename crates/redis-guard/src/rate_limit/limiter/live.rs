//! Live limits ([`Rule::live`]): the quota an operator set for a rule at run time, with a
//! version that grows with every change, as every backend stores it and logs its changes.
//!
//! - **Memory**: a table in the limiter (shared by its clones), read on every decision.
//! - **Redis** (one server, or a pool): the record `<prefix>rl:<rule>:live` =
//!   `<version>:<limit>:<period µs>:<burst>:<emission µs>` (`<version>` alone once cleared), read
//!   by the evaluation script in the same call as the decision (its key is one more of the
//!   call's KEYS), so every replica decides with a change from its next request on. Each
//!   limiter also keeps the record in process, re-read in the background at most once per
//!   [`live_refresh`](crate::rate_limit::RedisLimiter::live_refresh), for what the script does
//!   not return (the `RateLimit-Policy` header, refunds and charges).
//! - **Redis Cluster**: the keys of one call share the client key's hash slot, and the rule's
//!   record lives in another, so the script cannot read it: there the decision takes the quota
//!   from the limiter's copy, and a change reaches every replica within one
//!   [`live_refresh`](crate::rate_limit::RedisLimiter::live_refresh) (1 s by default), at once
//!   on the replica that made it.
//!
//! The record is operator state, not a counter, but it still has a TTL, as every key does: 30
//! days, renewed by each change ([`LIVE_TTL`]). A live quota is an override for an incident or a
//! launch; a change meant to last goes into the code.

use std::time::Duration;

use super::interface::{Check, Engine, LimiterError};
use crate::ConfigErrorKind;
use crate::rate_limit::{Quota, Rule};

/// How long a live record lives after its last change: 30 days.
pub(crate) const LIVE_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// A rule's live record: its version and, unless cleared, its quota.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveRecord {
    pub(crate) version: u64,
    pub(crate) quota: Option<Quota>,
}

impl LiveRecord {
    /// The record as Redis stores it, without its version (the set script adds it):
    /// `<limit>:<period µs>:<burst>:<emission µs>`, or empty when cleared.
    pub(crate) fn encode(quota: Option<&Quota>) -> String {
        quota.map_or_else(String::new, |q| {
            format!(
                "{}:{}:{}:{}",
                q.limit(),
                q.period_us(),
                q.burst_size(),
                q.emission_interval_us()
            )
        })
    }

    /// Parses a stored record; `None` for a value that is not one (someone wrote the key).
    pub(crate) fn decode(value: &str) -> Option<Self> {
        let mut parts = value.split(':');
        let version = parts.next()?.parse().ok()?;
        let rest: Vec<u64> = parts.map(|p| p.parse().ok()).collect::<Option<_>>()?;
        let quota = match rest[..] {
            [] => None,
            [limit, period, burst, _] => {
                let (limit, burst) = (u32::try_from(limit).ok()?, u32::try_from(burst).ok()?);
                let quota = Quota::new(limit, Duration::from_micros(period));
                // The burst unset when it is the limit, as the quota that was set.
                Some(if burst == limit {
                    quota
                } else {
                    quota.burst(burst)
                })
            }
            _ => return None,
        };
        Some(Self { version, quota })
    }
}

/// Checks that `quota` (`None`: a clear) can be `rule`'s live quota on `limiter`.
pub(crate) fn valid<L: Engine + ?Sized>(
    limiter: &L,
    rule: &Rule,
    quota: Option<&Quota>,
) -> Result<(), LimiterError> {
    super::operations::valid(limiter, rule)?;
    if !rule.is_live() {
        return Err(rule
            .problem(
                ConfigErrorKind::Unsupported,
                "is not live: build it with `.live()` to change its quota at run time",
                "Rule::live",
            )
            .into());
    }
    if let Some(quota) = quota {
        rule.resolved_problem(quota, rule.cost())?;
    }
    Ok(())
}

/// Logs a change of `rule`'s live quota, at `info`: the quotas before and after (`none`: the
/// rule's own) and the new version.
pub(crate) fn log_change(rule: &Rule, old: Option<Quota>, new: Option<Quota>, version: u64) {
    let show =
        |q: Option<Quota>| q.map_or_else(|| format!("none ({})", rule.quota()), |q| q.to_string());
    tracing::info!(
        rule = rule.name(),
        old = %show(old),
        new = %show(new),
        version,
        "rate-limit rule quota changed at run time"
    );
}

/// Puts the live quota `limiter` knows for each live rule of `checks` in its place: the
/// decision, the headers and any refund then use it.
pub(crate) fn apply<L: Engine + ?Sized>(limiter: &L, checks: &mut [Check]) {
    for check in checks.iter_mut().filter(|c| c.rule.is_live()) {
        if let Some(quota) = limiter.live_quota(&check.rule) {
            check.quota = quota;
            check.live = true;
        }
        // Its quota may change between two requests: the state keeps the quota's shape.
        check.varying = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_strangers_are_no_record() {
        let q = Quota::per_minute(100).burst(10);
        let stored = format!("7:{}", LiveRecord::encode(Some(&q)));
        assert_eq!(
            LiveRecord::decode(&stored),
            Some(LiveRecord {
                version: 7,
                quota: Some(q)
            })
        );
        assert_eq!(
            LiveRecord::decode("8"),
            Some(LiveRecord {
                version: 8,
                quota: None
            })
        );
        for bad in [
            "",
            "x",
            "1:2",
            "1:2:3:4:5:6",
            "1:-2:3:4:5",
            "1:99999999999:1:1:1",
        ] {
            assert_eq!(LiveRecord::decode(bad), None, "{bad}");
        }
    }
}
