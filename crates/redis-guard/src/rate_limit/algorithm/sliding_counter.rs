//! Sliding-window counter in Rust, the twin of `sliding_counter.lua`.

use super::{Commit, Params, State, Step, idiv};

/// The current window's index, how far into it `now` is, and the previous and current counts.
fn counts(state: Option<&State>, now: i128, period: i128) -> (i128, i128, i128, i128) {
    let w = idiv(now, period);
    let (prev, cur) = match state {
        Some(State::Counter { window, prev, cur }) if i128::from(*window) == w => {
            (i128::from(*prev), i128::from(*cur))
        }
        Some(State::Counter { window, cur, .. }) if i128::from(*window) == w - 1 => {
            (i128::from(*cur), 0)
        }
        _ => (0, 0),
    };
    (w, now - w * period, prev, cur)
}

/// The counts of window `w`, living two periods after it opened.
fn stored(w: i128, prev: i128, cur: i128, elapsed: i128, period: i128) -> Commit {
    let state = State::Counter {
        window: super::narrow(w),
        prev: super::narrow(prev),
        cur: super::narrow(cur),
    };
    Commit::Replace(state, super::narrow(2 * period - elapsed))
}

pub(super) fn step(state: Option<&State>, now: u64, p: &Params) -> Step {
    let now = i128::from(now);
    let (period, limit, cost) = (
        i128::from(p.period_us),
        i128::from(p.limit),
        i128::from(p.cost),
    );
    let (w, elapsed, prev, cur) = counts(state, now, period);
    let estimate = idiv(prev * (period - elapsed), period) + cur;
    if estimate + cost > limit {
        let retry = if cur + cost <= limit {
            period - idiv((limit - cur - cost) * period, prev) - elapsed
        } else {
            (period - elapsed) + (period - idiv((limit - cost) * period, cur)).max(0)
        };
        let reset = (period - elapsed) + if cur > 0 { period } else { 0 };
        return Step::denied(limit - estimate, retry.max(1), reset);
    }
    let commit = stored(w, prev, cur + cost, elapsed, period);
    Step::admitted(limit - estimate - cost, (period - elapsed) + period, commit)
}

/// How long until both windows count nothing, nothing taken (a probe's reset).
pub(super) fn standing_reset(state: Option<&State>, now: u64, p: &Params) -> u64 {
    let period = i128::from(p.period_us);
    let (_, elapsed, prev, cur) = counts(state, i128::from(now), period);
    super::narrow(match (prev, cur) {
        (_, 1..) => 2 * period - elapsed,
        (1.., _) => period - elapsed,
        _ => 0,
    })
}

/// `p.cost` more in the current window whatever is left, as `sliding_counter_charge`.
pub(super) fn charge(state: Option<&State>, now: u64, p: &Params) -> Commit {
    let period = i128::from(p.period_us);
    let (w, elapsed, prev, cur) = counts(state, i128::from(now), period);
    stored(w, prev, cur + i128::from(p.cost), elapsed, period)
}

/// `p.cost` back from the window the request was counted in (at `charged_at`), as
/// `sliding_counter_refund`: `None` when the stored state has moved on further.
pub(super) fn refund(state: &State, p: &Params, charged_at: u64) -> Option<State> {
    let State::Counter { window, prev, cur } = *state else {
        return None;
    };
    let charged = charged_at / p.period_us;
    let cost = p.cost;
    if window == charged {
        Some(State::Counter {
            window,
            prev,
            cur: cur.saturating_sub(cost),
        })
    } else if window == charged + 1 {
        Some(State::Counter {
            window,
            prev: prev.saturating_sub(cost),
            cur,
        })
    } else {
        None
    }
}
