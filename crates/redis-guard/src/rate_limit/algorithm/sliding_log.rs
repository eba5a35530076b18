//! Sliding-window log in Rust, the twin of `sliding_log.lua`.

use std::collections::VecDeque;

use super::{Commit, Params, Step};

/// `log` is the key's log (empty when it has none); trimmed in place.
pub(super) fn step(log: &mut VecDeque<u64>, now: u64, p: &Params) -> Step {
    let now_w = i128::from(now);
    let (period, limit, cost) = (
        i128::from(p.period_us),
        i128::from(p.limit),
        i128::from(p.cost),
    );
    // ZREMRANGEBYSCORE -inf (now - period): entries at exactly now - period leave too.
    while log
        .front()
        .is_some_and(|&t| i128::from(t) <= now_w - period)
    {
        log.pop_front();
    }
    let count = i128::try_from(log.len()).unwrap_or(i128::MAX);
    if count + cost > limit {
        let k = usize::try_from(count + cost - limit).unwrap_or(usize::MAX);
        let retry = log
            .get(k.saturating_sub(1))
            .map_or(period, |&t| i128::from(t) + period - now_w);
        let reset = log
            .back()
            .map_or(period, |&t| i128::from(t) + period - now_w);
        return Step::denied(limit - count, retry, reset);
    }
    let commit = Commit::Append {
        at: now,
        n: p.cost,
        ttl: p.period_us,
    };
    Step::admitted(limit - count - cost, period, commit)
}
