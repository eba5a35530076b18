//! What every algorithm in Rust reads and writes: one key's state, the rule's parameters, one
//! step's outcome and how it is recorded, and the integer helpers the scripts share with them.

use std::collections::VecDeque;
use std::sync::Arc;

use super::Algorithm;

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
        /// Negative: throttled waiters owe tokens ([`Rule::throttle`](crate::rate_limit::Rule::throttle)).
        credit: i64,
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
    /// Admitted at once, `remaining` left, the request recorded by `commit`.
    pub(crate) fn admitted(remaining: i128, reset_after_us: i128, commit: Commit) -> Self {
        Self {
            allowed: true,
            remaining: narrow(remaining),
            retry_after_us: 0,
            reset_after_us: narrow(reset_after_us),
            commit: Some(commit),
        }
    }

    /// Admitted after `wait_us` (a throttled rule), nothing left, the slot recorded by `commit`.
    pub(crate) fn throttled(wait_us: i128, reset_after_us: i128, commit: Commit) -> Self {
        Self {
            retry_after_us: narrow(wait_us),
            ..Self::admitted(0, reset_after_us, commit)
        }
    }

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

/// Floor division, as the scripts' `idiv`. The usual operands (microseconds, counts) fit in
/// 64 bits, where the division is one instruction instead of a 128-bit routine.
pub(crate) fn idiv(a: i128, b: i128) -> i128 {
    if let (Ok(a64), Ok(b64)) = (i64::try_from(a), i64::try_from(b))
        && let Some(q) = a64.checked_div_euclid(b64)
    {
        return i128::from(q);
    }
    a.div_euclid(b)
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
    /// [`Rule::throttle`](crate::rate_limit::Rule::throttle)'s longest wait (0: none): a request
    /// admitted after a wait of at most this is admitted now, its slot recorded.
    pub(crate) max_wait_us: u64,
}

/// Microseconds to whole milliseconds, rounded up: a client told to wait must not come back early.
pub(crate) const fn ceil_ms(us: u64) -> u64 {
    us.div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::idiv;

    #[test]
    fn floor_division_is_the_same_in_64_and_128_bits() {
        let edges = [
            0,
            1,
            -1,
            7,
            -7,
            999_999,
            -1_000_001,
            i128::from(i64::MAX),
            i128::from(i64::MIN),
            i128::from(i64::MAX) + 1,
            i128::from(i64::MIN) - 1,
            i128::MAX / 3,
            i128::MIN / 3,
        ];
        for a in edges {
            for b in edges.iter().copied().filter(|&b| b != 0) {
                if a == i128::MIN && b == -1 {
                    continue;
                }
                assert_eq!(idiv(a, b), a.div_euclid(b), "{a} / {b}");
            }
        }
    }
}
