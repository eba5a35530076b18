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
    /// GCRA: the theoretical arrival time, and the emission interval of the quota it was
    /// computed with.
    Gcra { tat: u64, emission: u64 },
    /// Fixed window: its start and count.
    Window { start: u64, count: u64 },
    /// Sliding log: the time of each admitted unit, oldest first.
    Log(VecDeque<u64>),
    /// Sliding counter: the window index and the previous and current counts.
    Counter { window: u64, prev: u64, cur: u64 },
    /// Token bucket: credit (tokens × emission interval), the time it was computed, and the
    /// emission interval and burst of the quota it was counted under.
    Bucket {
        credit: u64,
        at: u64,
        emission: u64,
        burst: u64,
    },
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
}

/// `amount` µs of a quota whose emission interval is `from`, in the terms of one whose interval
/// is `to`: as many units, rounded up. The same double arithmetic as the scripts'
/// `math.ceil(amount / from * to)`, so both backends carry a key over to a new quota alike.
#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
pub(crate) fn rescaled(amount: i128, from: i128, to: i128) -> i128 {
    ((amount as f64) / (from as f64) * (to as f64)).ceil() as i128
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

/// A probe's reset (cost 0 records nothing, so the state as it stands): how long until the key
/// is as fresh as a new one, the twin of the scripts' `p.probe` branches. `state` is what
/// [`step`] left (a sliding log trimmed). `None` for the algorithms whose reset does not
/// depend on the cost (concurrency) or that report their own (custom).
pub(crate) fn standing_reset(state: Option<&State>, now: u64, p: &Params) -> Option<u64> {
    Some(match (&p.algorithm, state) {
        (Algorithm::Custom(_) | Algorithm::Concurrency, _) => return None,
        (Algorithm::Gcra, state) => gcra::standing_reset(state, now, p),
        (Algorithm::FixedWindow, state) => fixed_window::standing_reset(state, now, p),
        (Algorithm::SlidingLog, Some(State::Log(log))) => log
            .back()
            .map_or(0, |&t| (t + p.period_us).saturating_sub(now)),
        (Algorithm::SlidingLog, _) => 0,
        (Algorithm::SlidingCounter, state) => sliding_counter::standing_reset(state, now, p),
        (Algorithm::TokenBucket, state) => token_bucket::standing_reset(state, now, p),
    })
}

/// What a refund leaves of a key's state in the memory backend.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refunded {
    /// Store this, as a commit does.
    Store(Commit),
    /// The state was changed in place (or replaced); its deadline stands (Redis' `KEEPTTL`).
    Kept,
    /// Nothing is left: remove the key.
    Delete,
    /// Nothing to give back.
    Nothing,
}

/// Charges `p.cost` more units to a key whatever is left (a cost reported after the response),
/// the twin of the `<algorithm>_charge` Lua functions: how to record it. `None` for custom
/// algorithms, which have no charge.
pub(crate) fn charge(state: Option<&State>, now: u64, p: &Params) -> Option<Commit> {
    Some(match p.algorithm {
        Algorithm::Custom(_) | Algorithm::Concurrency => return None,
        Algorithm::Gcra => gcra::charge(state, now, p),
        Algorithm::FixedWindow => fixed_window::charge(state, now, p),
        Algorithm::SlidingLog => Commit::Append {
            at: now,
            n: p.cost.min(p.limit),
            ttl: p.period_us,
        },
        Algorithm::SlidingCounter => sliding_counter::charge(state, now, p),
        Algorithm::TokenBucket => token_bucket::charge(state, now, p),
    })
}

/// Gives back `p.cost` units of what a request admitted at `charged_at` took, the twin of the
/// `<algorithm>_refund` Lua functions. A state of another algorithm is left alone.
pub(crate) fn refund(state: &mut State, now: u64, p: &Params, charged_at: u64) -> Refunded {
    if let (Algorithm::SlidingLog, State::Log(log)) = (&p.algorithm, &mut *state) {
        // The request's units are the entries logged at its time; any of them will do.
        let mut left = p.cost;
        log.retain(|&t| {
            let drop = t == charged_at && left > 0;
            left -= u64::from(drop);
            !drop
        });
        return Refunded::Kept;
    }
    let replaced = match (&p.algorithm, &*state) {
        (Algorithm::Gcra, State::Gcra { .. }) => {
            return gcra::refund(state, now, p).map_or(Refunded::Delete, Refunded::Store);
        }
        (Algorithm::TokenBucket, State::Bucket { .. }) => {
            return token_bucket::refund(state, now, p).map_or(Refunded::Delete, Refunded::Store);
        }
        (Algorithm::FixedWindow, State::Window { .. }) => {
            fixed_window::refund(state, now, p, charged_at)
        }
        (Algorithm::SlidingCounter, State::Counter { .. }) => {
            sliding_counter::refund(state, p, charged_at)
        }
        _ => None,
    };
    match replaced {
        Some(new) => {
            *state = new;
            Refunded::Kept
        }
        None => Refunded::Nothing,
    }
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
