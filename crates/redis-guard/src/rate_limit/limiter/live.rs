//! Live limits ([`Rule::live`]): the quota and the mode an operator set for a rule at run time,
//! with a version that grows with every change, as every backend stores them and logs their
//! changes.
//!
//! - **Memory**: a table in the limiter (shared by its clones), read on every decision.
//! - **Redis** (one server, or a pool): the record `<prefix>rl:<rule>:live` =
//!   `<version>[:<limit>:<period µs>:<burst>:<emission µs>][;<mode>]` (`<version>` alone once
//!   both are cleared), whose quota the evaluation script reads in the same call as the
//!   decision (its key is one more of the call's KEYS), so every replica decides with a quota
//!   change from its next request on. The script returns the record it read with its verdicts,
//!   and the decision names the quota the script used (its `RateLimit-Policy` and legacy
//!   headers with it), never an older one. Each limiter also keeps the record in process,
//!   re-read in the background at most once per
//!   [`live_refresh`](crate::rate_limit::RedisLimiter::live_refresh) and replaced by any newer
//!   one a script returns, for refunds and charges and for the mode.
//! - **The mode** decides how a request's rules are split into script calls (the enforced ones
//!   together, all or nothing; each other one on its own) before any call is made, so every
//!   backend takes it from the limiter's copy: at once on the replica that changed it (and on
//!   the memory backend). On a single Redis a newer record a script returns replaces the copy
//!   there and then: a replica's first decision after a change reads it, its next one follows
//!   its mode. On a Cluster, within one `live_refresh`.
//! - **Redis Cluster**: the keys of one call share the client key's hash slot, and the rule's
//!   record lives in another, so the script cannot read it: there the decision takes the quota
//!   from the limiter's copy (and the headers with it, so they still name the quota that was
//!   enforced), and a change reaches every replica within one
//!   [`live_refresh`](crate::rate_limit::RedisLimiter::live_refresh) (1 s by default), at once
//!   on the replica that made it.
//!
//! The record is operator state, not a counter, but it still has a TTL, as every key does: 30
//! days, renewed by each change ([`LIVE_TTL`]). A live quota is an override for an incident or a
//! launch; a change meant to last goes into the code.

use std::time::Duration;

use super::interface::{Check, Engine, LimiterError};
use crate::ConfigErrorKind;
use crate::rate_limit::{Mode, Quota, Rule};

/// How long a live record lives after its last change: 30 days.
pub(crate) const LIVE_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Versions stay below 2^53, which the scripts' Lua numbers hold exactly; a stored record with a
/// larger one is no record.
const MAX_VERSION: u64 = (1 << 53) - 1;

/// A rule's live record: its version and, unless cleared, its quota and its mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveRecord {
    pub(crate) version: u64,
    pub(crate) quota: Option<Quota>,
    pub(crate) mode: Option<Mode>,
}

/// One change of a rule's live record: its quota or its mode, set (`Some`) or cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LiveChange {
    Quota(Option<Quota>),
    Mode(Option<Mode>),
}

impl LiveChange {
    /// The record with this change made, at `version`.
    pub(crate) fn applied(self, record: LiveRecord, version: u64) -> LiveRecord {
        match self {
            Self::Quota(quota) => LiveRecord {
                version,
                quota,
                ..record
            },
            Self::Mode(mode) => LiveRecord {
                version,
                mode,
                ..record
            },
        }
    }

    /// The part of the record it changes, and its new value as Redis stores it (empty: cleared),
    /// for `live_set.lua`: `q` and `<limit>:<period µs>:<burst>:<emission µs>`, or `m` and
    /// the mode's name.
    pub(crate) fn encode(self) -> (&'static str, String) {
        match self {
            Self::Quota(quota) => (
                "q",
                quota.map_or_else(String::new, |q| {
                    format!(
                        "{}:{}:{}:{}",
                        q.limit(),
                        q.period_us(),
                        q.burst_size(),
                        q.emission_interval_us()
                    )
                }),
            ),
            Self::Mode(mode) => ("m", mode.map_or("", mode_name).to_owned()),
        }
    }
}

/// A mode's name in a live record.
fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Enforce => "enforce",
        Mode::Shadow => "shadow",
        Mode::Soft => "soft",
    }
}

impl LiveRecord {
    /// Parses a stored record; `None` for a value that is not one (someone wrote the key).
    pub(crate) fn decode(value: &str) -> Option<Self> {
        let (value, mode) = match value.split_once(';') {
            Some((value, name)) => (
                value,
                Some(
                    [Mode::Enforce, Mode::Shadow, Mode::Soft]
                        .into_iter()
                        .find(|m| mode_name(*m) == name)?,
                ),
            ),
            None => (value, None),
        };
        let mut parts = value.split(':');
        let version = parts.next()?.parse().ok().filter(|v| *v < MAX_VERSION)?;
        let rest: Vec<u64> = parts.map(|p| p.parse().ok()).collect::<Option<_>>()?;
        let quota = match rest[..] {
            [] => None,
            [limit, period, burst, _] => Some(quota_of(limit, period, burst)?),
            _ => return None,
        };
        Some(Self {
            version,
            quota,
            mode,
        })
    }
}

/// The quota of `limit` per `period_us` µs with `burst`, as a live record and the evaluation
/// script's reply give it; `None` for numbers no quota has (a limit or burst past `u32`).
pub(crate) fn quota_of(limit: u64, period_us: u64, burst: u64) -> Option<Quota> {
    let (limit, burst) = (u32::try_from(limit).ok()?, u32::try_from(burst).ok()?);
    let quota = Quota::new(limit, Duration::from_micros(period_us));
    // The burst unset when it is the limit, as the quota that was set.
    Some(if burst == limit {
        quota
    } else {
        quota.burst(burst)
    })
}

/// Whether `a` and `b` decide alike: the same limit, period (to the µs) and burst, however
/// they were written.
pub(crate) fn same_quota(a: &Quota, b: &Quota) -> bool {
    a.limit() == b.limit() && a.period_us() == b.period_us() && a.burst_size() == b.burst_size()
}

/// Checks that `change` can be made to `rule`'s live record on `limiter`.
pub(crate) fn valid<L: Engine + ?Sized>(
    limiter: &L,
    rule: &Rule,
    change: LiveChange,
) -> Result<(), LimiterError> {
    super::operations::valid(limiter, rule)?;
    if !rule.is_live() {
        return Err(rule
            .problem(
                ConfigErrorKind::Unsupported,
                "is not live: build it with `.live()` to change its quota or mode at run time",
                "Rule::live",
            )
            .into());
    }
    if let LiveChange::Quota(Some(quota)) = change {
        rule.resolved_problem(&quota, rule.cost())?;
    }
    Ok(())
}

/// Logs `change` of `rule`'s live record, at `info`: the quota or mode before and after
/// (`none`: the rule's own) and the new version.
pub(crate) fn log_change(rule: &Rule, old: LiveRecord, change: LiveChange, version: u64) {
    let quota =
        |q: Option<Quota>| q.map_or_else(|| format!("none ({})", rule.quota()), |q| q.to_string());
    let mode = |m: Option<Mode>| {
        m.map_or_else(
            || format!("none ({})", mode_name(rule.mode())),
            |m| mode_name(m).to_owned(),
        )
    };
    let (what, old, new) = match change {
        LiveChange::Quota(new) => ("quota", quota(old.quota), quota(new)),
        LiveChange::Mode(new) => ("mode", mode(old.mode), mode(new)),
    };
    tracing::info!(
        rule = rule.name(),
        %old,
        %new,
        version,
        "rate-limit rule {what} changed at run time"
    );
}

/// Puts the live quota and mode `limiter` knows for each live rule of `checks` in their place:
/// the decision, the headers and any refund then use them.
pub(crate) fn apply<L: Engine + ?Sized>(limiter: &L, checks: &mut [Check]) {
    for check in checks.iter_mut().filter(|c| c.rule.is_live()) {
        let record = limiter.live_record(&check.rule);
        if let Some(quota) = record.quota {
            check.quota = quota;
            check.live = true;
        }
        if let Some(mode) = record.mode {
            check.mode = mode;
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
        let (part, quota) = LiveChange::Quota(Some(q)).encode();
        assert_eq!(part, "q");
        let stored = format!("7:{quota}");
        let seven = LiveRecord {
            version: 7,
            quota: Some(q),
            mode: None,
        };
        assert_eq!(LiveRecord::decode(&stored), Some(seven));
        assert_eq!(
            LiveRecord::decode(&format!("7:{quota};shadow")),
            Some(LiveRecord {
                mode: Some(Mode::Shadow),
                ..seven
            })
        );
        assert_eq!(
            LiveRecord::decode("8"),
            Some(LiveRecord {
                version: 8,
                ..LiveRecord::default()
            })
        );
        for mode in [Mode::Enforce, Mode::Shadow, Mode::Soft] {
            let (part, name) = LiveChange::Mode(Some(mode)).encode();
            assert_eq!(part, "m");
            assert_eq!(
                LiveRecord::decode(&format!("9;{name}")).and_then(|r| r.mode),
                Some(mode)
            );
        }
        assert_eq!(LiveChange::Mode(None).encode(), ("m", String::new()));
        for bad in [
            "",
            "x",
            "1:2",
            "1:2:3:4:5:6",
            "1:-2:3:4:5",
            "1:99999999999:1:1:1",
            "1;loud",
            "1;",
            "1:2:3:4:5;soft;soft",
            "9007199254740991",
            "99999999999999999999:2:3:2:1",
        ] {
            assert_eq!(LiveRecord::decode(bad), None, "{bad}");
        }
    }
}
