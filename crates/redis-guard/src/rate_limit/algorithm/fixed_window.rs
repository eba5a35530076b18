//! Fixed window in Rust, the twin of `fixed_window.lua`.

use super::{Params, State, Step};

pub(super) fn step(state: Option<&State>, now: u64, p: &Params) -> Step {
    let (mut start, mut count) = match state {
        Some(State::Window { start, count }) => (i128::from(*start), i128::from(*count)),
        _ => (i128::from(now), 0),
    };
    let now = i128::from(now);
    let (period, limit, cost) = (
        i128::from(p.period_us),
        i128::from(p.limit),
        i128::from(p.cost),
    );
    if now >= start + period || start > now {
        start = now;
        count = 0;
    }
    let window_end = start + period;
    if count + cost > limit {
        return Step::denied(limit - count, window_end - now, window_end - now);
    }
    let state = State::Window {
        start: super::narrow(start),
        count: super::narrow(count + cost),
    };
    Step::admitted(
        limit - count - cost,
        window_end - now,
        state,
        window_end - now,
    )
}
