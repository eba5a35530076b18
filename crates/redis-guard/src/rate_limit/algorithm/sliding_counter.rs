//! Sliding-window counter in Rust, the twin of `sliding_counter.lua`.

use super::{Params, State, Step, idiv};

pub(super) fn step(state: Option<&State>, now: u64, p: &Params) -> Step {
    let now = i128::from(now);
    let (period, limit, cost) = (
        i128::from(p.period_us),
        i128::from(p.limit),
        i128::from(p.cost),
    );
    let w = idiv(now, period);
    let elapsed = now - w * period;
    let (prev, cur) = match state {
        Some(State::Counter { window, prev, cur }) if i128::from(*window) == w => {
            (i128::from(*prev), i128::from(*cur))
        }
        Some(State::Counter { window, cur, .. }) if i128::from(*window) == w - 1 => {
            (i128::from(*cur), 0)
        }
        _ => (0, 0),
    };
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
    let state = State::Counter {
        window: super::narrow(w),
        prev: super::narrow(prev),
        cur: super::narrow(cur + cost),
    };
    Step::admitted(
        limit - estimate - cost,
        (period - elapsed) + period,
        state,
        2 * period - elapsed,
    )
}
