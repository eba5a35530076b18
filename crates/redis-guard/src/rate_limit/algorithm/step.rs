//! One algorithm step in Rust (the memory backend), with the integer helpers every algorithm
//! shares: the state per key, the outcome, how it is recorded, and the dispatcher.

use std::collections::VecDeque;
use std::sync::Arc;

use super::{
    Algorithm, concurrency, fixed_window, gcra, sliding_counter, sliding_log, token_bucket,
};

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
    /// Concurrency: the leases held, by request id, with their expiry.
    Leases(Vec<(Arc<str>, u64)>),
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
    /// Concurrency: a lease for the evaluation's request, expiring at `expiry`; the key lives
    /// `ttl` µs (its latest lease).
    Lease { expiry: u64, ttl: u64 },
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
/// Sliding-log and lease trimming happen in place (Redis trims even when it denies, too); everything else
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
        Algorithm::Concurrency => match state {
            Some(State::Leases(leases)) => concurrency::step(leases, now, p),
            _ => concurrency::step(&mut Vec::new(), now, p),
        },
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

/// Microseconds to whole milliseconds, rounded up: a client told to wait must not come back early.
pub(crate) const fn ceil_ms(us: u64) -> u64 {
    us.div_ceil(1000)
}
