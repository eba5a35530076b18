//! [`Algorithm`]: how a rule counts requests.

use super::CustomAlgorithm;

/// How a rule counts requests.
///
/// Every algorithm decides and records in one step (one script call on Redis), accepts a cost
/// per request (weighted requests), sets a TTL on all the state it keeps, and — in a layer with
/// several rules — records nothing when any rule denies. A rejected request consumes nothing,
/// except on the fixed window's Lua-free path (see [`FixedWindow`](Algorithm::FixedWindow)).
///
/// | algorithm | Redis state per key | bursts | choose it when |
/// | --- | --- | --- | --- |
/// | [`Gcra`](Algorithm::Gcra) (default) | one integer: 104–120 B (152 B with the quota's shape, for plans) | up to `burst` at once, then evenly spaced | almost always: exact at every instant, O(1) |
/// | [`TokenBucket`](Algorithm::TokenBucket) | four integers: 168 B | up to `burst` at once, then refill | you think in tokens; decisions equal GCRA's |
/// | [`SlidingLog`](Algorithm::SlidingLog) | a sorted set, a member per admitted unit: 440 B at limit 10, 3.7 KB at 100, 118 KB at 1000 | never more than `limit` in any `period` | small limits that must be exact over a rolling window (login, SMS, payments) |
/// | [`SlidingCounter`](Algorithm::SlidingCounter) | two counters: 136–152 B | approximates the sliding log | large limits where the log's memory is too much |
/// | [`FixedWindow`](Algorithm::FixedWindow) | one counter: 152 B | up to `2 × limit` across a window edge | you need the classic `INCR` + `EXPIRE` behaviour, or quotas that reset at once ("1000 per day") |
/// | [`Concurrency`](Algorithm::Concurrency) | a sorted set, a member per lease held | not a rate: at most `limit` in flight | slow or streaming requests whose cost is the time they run (reports, exports, streams): [`Rule::concurrency`](crate::rate_limit::Rule::concurrency) |
///
/// The window algorithms (`FixedWindow`, `SlidingLog`, `SlidingCounter`) admit `limit` per
/// `period` and ignore [`Quota::burst`](crate::rate_limit::Quota::burst); GCRA and the token bucket use it.
/// Sizes are `MEMORY USAGE … SAMPLES 0` on Redis 7.0 for a full quota, key name (~60 bytes)
/// included, as printed by
/// `cargo test -p redis-guard-tests --test memory_usage -- --nocapture`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// Generic cell rate algorithm: each request pushes a "theoretical arrival time" forward by
    /// `period / limit` (times its cost); a request is admitted while that time is at most
    /// `burst × period / limit` ahead of now. Exact at any instant (no window edges), one key of
    /// a few dozen bytes per client.
    #[default]
    Gcra,
    /// Fixed window: a window opens with the first request and lasts `period`; at most `limit`
    /// cost units are admitted in it. The usual `INCR` + `EXPIRE`, made atomic. A client can get
    /// `2 × limit` through in a short time around a window edge. Hammering never extends a
    /// client's lock-out: the window's end is set by its first request and never moves.
    ///
    /// Which path decides, on a [`RedisLimiter`](crate::rate_limit::RedisLimiter):
    ///
    /// - **Redis >= 7** (Valkey 7 and 8 too; the limiter asks `INFO server` once): the state is
    ///   a plain integer under a key tagged `fwc`, expiring when the window closes. A request
    ///   whose only rule is a fixed window is one transaction, `MULTI; INCRBY key cost;
    ///   PEXPIRE key period NX; PTTL key; EXEC`: no Lua, one round trip, admitted while the
    ///   count is at most `limit`. **A denial on this path consumes its cost**, as with
    ///   `INCR` + `EXPIRE`: the count goes past the limit and stays there until the window closes, so a
    ///   denied request of cost 5 with 3 left also denies a later request of cost 1 in that
    ///   window (requests of cost 1 decide exactly as the script does: a denial only comes once
    ///   the window is full; a denial the limiter's deny cache answers never reaches Redis and
    ///   counts nothing). Requests that need a script run one on the same counter, and there
    ///   a denial consumes nothing: several rules in one request (all or nothing), a rule with
    ///   [bans](crate::rate_limit::Rule::with_bans) or
    ///   [overrides](crate::rate_limit::Rule::with_overrides), a
    ///   [cost settled after the response](crate::rate_limit::Rule::charged_after_response),
    ///   probes (cost 0) and [`inspect`](crate::rate_limit::RedisLimiter::inspect).
    ///   [`reset`](crate::rate_limit::RedisLimiter::reset) deletes the counter.
    /// - **Older servers**, and backends whose script clock a test seam shifts or freezes
    ///   (feature `test-util`: key expiry cannot follow such a clock): one script keeps
    ///   `"<window start>:<count>"` under a key tagged `fw`, and a denial consumes nothing.
    ///
    /// The two shapes live under different keys, so a server upgraded past 7 starts its fixed
    /// windows afresh (the old keys expire on their own). The memory backend counts as the
    /// script does: a denial consumes nothing.
    FixedWindow,
    /// Sliding-window log: remembers the time of every admitted unit for one `period` and admits
    /// while fewer than `limit` are remembered. Exact over any rolling window; memory O(limit)
    /// per key (a sorted set).
    SlidingLog,
    /// Sliding-window counter: counts per aligned window and estimates the rolling count as the
    /// current window plus the previous one weighted by its overlap. O(1) memory; may admit
    /// slightly more or fewer than the sliding log when traffic is uneven within a window.
    SlidingCounter,
    /// Token bucket: `burst` tokens, refilled at `limit` per `period`; a request takes `cost`
    /// tokens or, when fewer are left, is rejected and takes none. The count never goes negative.
    TokenBucket,
    /// Concurrency leases: at most `limit` requests of a key in flight at once, across every
    /// replica. Made by [`Rule::concurrency`](crate::rate_limit::Rule::concurrency), which
    /// explains it. State: a sorted set of the leases held, a member per request scored by its
    /// expiry.
    Concurrency,
    /// An algorithm of your own in Lua (Redis only); see [`CustomAlgorithm`].
    Custom(CustomAlgorithm),
}

impl Algorithm {
    /// The id the Lua dispatcher knows a built-in algorithm by (custom ones get theirs per
    /// script).
    pub(crate) const fn builtin_id(&self) -> Option<u8> {
        match self {
            Self::Gcra => Some(1),
            Self::FixedWindow => Some(2),
            Self::SlidingLog => Some(3),
            Self::SlidingCounter => Some(4),
            Self::TokenBucket => Some(5),
            Self::Concurrency => Some(6),
            Self::Custom(_) => None,
        }
    }

    /// The algorithm's part of a state key's name: the
    /// [`RedisLimiter`](crate::rate_limit::RedisLimiter) docs say why there is one.
    pub(crate) fn key_tag(&self) -> std::borrow::Cow<'static, str> {
        use std::borrow::Cow;
        match self {
            Self::Gcra => Cow::Borrowed("gcra"),
            Self::FixedWindow => Cow::Borrowed("fw"),
            Self::SlidingLog => Cow::Borrowed("sl"),
            Self::SlidingCounter => Cow::Borrowed("sc"),
            Self::TokenBucket => Cow::Borrowed("tb"),
            Self::Concurrency => Cow::Borrowed("cc"),
            Self::Custom(custom) => Cow::Owned(format!("x-{}", custom.name())),
        }
    }

    /// Whether the rule holds leases that the layer releases when the response ends.
    pub(crate) const fn is_lease(&self) -> bool {
        matches!(self, Self::Concurrency)
    }

    /// Whether the algorithm counts in windows of `limit` and ignores the burst.
    pub(crate) const fn is_window(&self) -> bool {
        matches!(
            self,
            Self::FixedWindow | Self::SlidingLog | Self::SlidingCounter
        )
    }

    /// The most a single request may cost under `quota`.
    pub(crate) const fn capacity(&self, quota: &crate::rate_limit::Quota) -> u32 {
        if self.is_window() || self.is_lease() {
            quota.limit()
        } else if let Self::Custom(_) = self {
            if quota.limit() > quota.burst_size() {
                quota.limit()
            } else {
                quota.burst_size()
            }
        } else {
            quota.burst_size()
        }
    }
}
