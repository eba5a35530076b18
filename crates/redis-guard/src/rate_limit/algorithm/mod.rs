//! The algorithms that decide, and their Lua scripts.
//!
//! Every algorithm exists twice with the same integer arithmetic: as Lua run inside Redis (one
//! script call decides and records for all rules of a request, clock from Redis `TIME`) and as
//! Rust for the [`MemoryLimiter`](crate::rate_limit::MemoryLimiter). Time is counted in whole
//! microseconds on both sides.

pub(crate) mod gcra;
pub(crate) mod script;

use std::time::Duration;

/// How a rule counts requests.
///
/// | algorithm | state per key | bursts | choose it when |
/// | --- | --- | --- | --- |
/// | [`Gcra`](Algorithm::Gcra) (default) | one integer | up to `burst` at once, then evenly spaced | you want a smooth, exact limit with O(1) memory: almost always |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// Generic cell rate algorithm: each request pushes a "theoretical arrival time" forward by
    /// `period / limit` (times its cost); a request is admitted while that time is at most
    /// `burst × period / limit` ahead of now. Exact at any instant (no window edges), one key of
    /// a few dozen bytes per client, and a rejected request consumes nothing.
    #[default]
    Gcra,
}

impl Algorithm {
    /// The id the Lua dispatcher knows the algorithm by.
    pub(crate) const fn lua_id(self) -> u8 {
        match self {
            Self::Gcra => 1,
        }
    }
}

/// Parameters of one rule, as both backends use them. All times in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
