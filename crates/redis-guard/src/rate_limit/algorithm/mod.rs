//! The algorithms that decide, and their Lua scripts.
//!
//! Every algorithm exists twice with the same integer arithmetic: as Lua run inside Redis (one
//! script call decides and records for all rules of a request, clock from Redis `TIME`) and as
//! Rust for the [`MemoryLimiter`](crate::rate_limit::MemoryLimiter). Time is counted in whole
//! microseconds on both sides.

mod custom;
mod fixed_window;
mod gcra;
pub(crate) mod script;
mod sliding_counter;
mod sliding_log;
mod token_bucket;

use std::collections::VecDeque;
use std::time::Duration;

pub use custom::CustomAlgorithm;

/// How a rule counts requests.
///
/// Every algorithm decides and records in one step (one script call on Redis), accepts a cost
/// per request (weighted requests), sets a TTL on all the state it keeps, and — in a layer with
/// several rules — records nothing when any rule denies. A rejected request consumes nothing.
///
/// | algorithm | Redis state per key | bursts | choose it when |
/// | --- | --- | --- | --- |
/// | [`Gcra`](Algorithm::Gcra) (default) | one integer: 104–120 B | up to `burst` at once, then evenly spaced | almost always: exact at every instant, O(1) |
/// | [`TokenBucket`](Algorithm::TokenBucket) | two integers: 152 B | up to `burst` at once, then refill | you think in tokens; decisions equal GCRA's |
/// | [`SlidingLog`](Algorithm::SlidingLog) | a sorted set, a member per admitted unit: 440 B at limit 10, 3.7 KB at 100, 118 KB at 1000 | never more than `limit` in any `period` | small limits that must be exact over a rolling window (login, SMS, payments) |
/// | [`SlidingCounter`](Algorithm::SlidingCounter) | two counters: 136–152 B | approximates the sliding log | large limits where the log's memory is too much |
/// | [`FixedWindow`](Algorithm::FixedWindow) | one counter: 152 B | up to `2 × limit` across a window edge | you need the classic `INCR` + `EXPIRE` behaviour, or quotas that reset at once ("1000 per day") |
///
/// The window algorithms (`FixedWindow`, `SlidingLog`, `SlidingCounter`) admit `limit` per
/// `period` and ignore [`Quota::burst`](super::Quota::burst); GCRA and the token bucket use it.
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
    /// cost units are admitted in it. The seeds' `INCR` + `EXPIRE`, made atomic. A client can get
    /// `2 × limit` through in a short time around a window edge. Unlike the hand-rolled recipe,
    /// a rejected request is not counted, so hammering does not extend a client's lock-out and
    /// rules stay all-or-nothing.
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
            Self::Custom(_) => None,
        }
    }

    /// The algorithm's part of a state key's name: each algorithm keeps its own state, so a rule
    /// that switches algorithms (during a rolling deploy, say) starts afresh instead of reading
    /// state of another shape (`WRONGTYPE` on Redis).
    pub(crate) fn key_tag(&self) -> std::borrow::Cow<'static, str> {
        use std::borrow::Cow;
        match self {
            Self::Gcra => Cow::Borrowed("gcra"),
            Self::FixedWindow => Cow::Borrowed("fw"),
            Self::SlidingLog => Cow::Borrowed("sl"),
            Self::SlidingCounter => Cow::Borrowed("sc"),
            Self::TokenBucket => Cow::Borrowed("tb"),
            Self::Custom(custom) => Cow::Owned(format!("x-{}", custom.name())),
        }
    }

    /// Whether the algorithm counts in windows of `limit` and ignores the burst.
    pub(crate) const fn is_window(&self) -> bool {
        matches!(
            self,
            Self::FixedWindow | Self::SlidingLog | Self::SlidingCounter
        )
    }

    /// The most a single request may cost under `quota`.
    pub(crate) const fn capacity(&self, quota: &super::Quota) -> u32 {
        if self.is_window() {
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

/// One key's state in the memory backend; the Redis scripts keep the same values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// GCRA: the theoretical arrival time.
    Gcra(u64),
    /// Fixed window: its start and count.
    Window { start: u64, count: u64 },
    /// Sliding log: the time of each admitted unit, oldest first.
    Log(VecDeque<u64>),
    /// Sliding counter: the window index and the previous and current counts.
    Counter { window: u64, prev: u64, cur: u64 },
    /// Token bucket: credit (tokens × emission interval) and the time it was computed.
    Bucket { credit: u64, at: u64 },
}

/// The outcome of one algorithm step, all times in microseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after_us: u64,
    pub(crate) reset_after_us: u64,
    /// When admitted: how to record the request.
    pub(crate) commit: Option<Commit>,
}

/// How an admitted request is recorded in the memory backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Commit {
    /// Store this state, living this many microseconds.
    Replace(State, u64),
    /// Sliding log: append `n` entries at time `at` (to the trimmed log), living `ttl` µs.
    Append { at: u64, n: u64, ttl: u64 },
}

impl Step {
    pub(crate) fn denied(remaining: i128, retry_after_us: i128, reset_after_us: i128) -> Self {
        Self {
            allowed: false,
            remaining: narrow(remaining),
            retry_after_us: narrow(retry_after_us),
            reset_after_us: narrow(reset_after_us),
            commit: None,
        }
    }

    pub(crate) fn admitted(
        remaining: i128,
        reset_after_us: i128,
        state: State,
        ttl_us: i128,
    ) -> Self {
        Self {
            allowed: true,
            remaining: narrow(remaining),
            retry_after_us: 0,
            reset_after_us: narrow(reset_after_us),
            commit: Some(Commit::Replace(state, narrow(ttl_us))),
        }
    }
}

/// Clamps a signed intermediate into the unsigned range.
pub(crate) fn narrow(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

/// Floor division, as the scripts' `idiv`.
pub(crate) fn idiv(a: i128, b: i128) -> i128 {
    a.div_euclid(b)
}

/// Runs one algorithm step in Rust, the twin of the Lua function of the same name. A state of
/// another algorithm (the rule changed its algorithm) counts as no state, as in Redis where a
/// value that does not parse is ignored. `None` for custom algorithms, which exist only in Lua.
/// Sliding-log trimming happens in place (Redis trims even when it denies, too); everything else
/// only reads `state`.
#[allow(
    clippy::needless_pass_by_value,
    reason = "an Option<&mut State> is a handle; clippy mistakes it for a value"
)]
pub(crate) fn step(state: Option<&mut State>, now: u64, p: &Params) -> Option<Step> {
    Some(match p.algorithm {
        Algorithm::Custom(_) => return None,
        Algorithm::Gcra => gcra::step(state.as_deref(), now, p),
        Algorithm::FixedWindow => fixed_window::step(state.as_deref(), now, p),
        Algorithm::SlidingLog => match state {
            Some(State::Log(log)) => sliding_log::step(log, now, p),
            _ => sliding_log::step(&mut VecDeque::new(), now, p),
        },
        Algorithm::SlidingCounter => sliding_counter::step(state.as_deref(), now, p),
        Algorithm::TokenBucket => token_bucket::step(state.as_deref(), now, p),
    })
}

/// Parameters of one rule, as both backends use them. All times in microseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    pub(crate) algorithm: Algorithm,
    pub(crate) limit: u64,
    pub(crate) period_us: u64,
    pub(crate) burst: u64,
    pub(crate) emission_us: u64,
    pub(crate) cost: u64,
}

/// What one rule says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleState {
    /// Whether this rule admits the request.
    pub allowed: bool,
    /// The rule's limit (requests per period).
    pub limit: u32,
    /// Requests (cost units) still admitted right now, after this one if it was admitted.
    pub remaining: u32,
    /// When denied, how long until the request would be admitted; zero when admitted.
    pub retry_after: Duration,
    /// How long until the rule's quota is fully available again.
    pub reset_after: Duration,
}

impl RuleState {
    /// Builds a state from the integer reply both backends produce.
    pub(crate) fn from_parts(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after_ms: u64,
        reset_after_ms: u64,
    ) -> Self {
        Self {
            allowed,
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
            retry_after: Duration::from_millis(retry_after_ms),
            reset_after: Duration::from_millis(reset_after_ms),
        }
    }
}

/// Microseconds to whole milliseconds, rounded up: a client told to wait must not come back early.
pub(crate) const fn ceil_ms(us: u64) -> u64 {
    us.div_ceil(1000)
}
