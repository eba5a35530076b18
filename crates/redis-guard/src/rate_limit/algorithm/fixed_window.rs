//! Fixed window in Rust, the twin of `fixed_window.lua`.

use super::{Commit, Params, State, Step};

/// The open window's start and count: a new one at `now` if none is open.
fn open_window(state: Option<&State>, now: i128, p: &Params) -> (i128, i128) {
    match state {
        Some(&State::Window { start, count })
            if now < i128::from(start) + i128::from(p.period_us) && i128::from(start) <= now =>
        {
            (i128::from(start), i128::from(count))
        }
        _ => (now, 0),
    }
}

/// The window starting at `start` with `count`, living until it closes.
fn stored(start: i128, count: i128, now: i128, p: &Params) -> Commit {
    let state = State::Window {
        start: super::narrow(start),
        count: super::narrow(count),
    };
    Commit::Replace(state, super::narrow(start + i128::from(p.period_us) - now))
}

pub(super) fn step(state: Option<&State>, now: u64, p: &Params) -> Step {
    let now = i128::from(now);
    let (limit, cost) = (i128::from(p.limit), i128::from(p.cost));
    let (start, count) = open_window(state, now, p);
    let window_end = start + i128::from(p.period_us);
    if count + cost > limit {
        return Step::denied(limit - count, window_end - now, window_end - now);
    }
    let commit = stored(start, count + cost, now, p);
    Step::admitted(limit - count - cost, window_end - now, commit)
}

/// How long until the window counts nothing, nothing taken (a probe's reset): 0 when no unit
/// is counted in the open window.
pub(super) fn standing_reset(state: Option<&State>, now: u64, p: &Params) -> u64 {
    let now = i128::from(now);
    match open_window(state, now, p) {
        (_, 0) => 0,
        (start, _) => super::narrow(start + i128::from(p.period_us) - now),
    }
}

/// `p.cost` more in the open window whatever is left, as `fixed_window_charge`.
pub(super) fn charge(state: Option<&State>, now: u64, p: &Params) -> Commit {
    let now = i128::from(now);
    let (start, count) = open_window(state, now, p);
    stored(start, count + i128::from(p.cost), now, p)
}

/// `p.cost` back in the window the request was counted in (at `charged_at`), if it is still the
/// open one, as `fixed_window_refund`: `None` when there is nothing to give back.
pub(super) fn refund(state: &State, now: u64, p: &Params, charged_at: u64) -> Option<State> {
    let (start, count) = open_window(Some(state), i128::from(now), p);
    let charged_at = i128::from(charged_at);
    if count == 0 || charged_at < start || charged_at >= start + i128::from(p.period_us) {
        return None;
    }
    Some(State::Window {
        start: super::narrow(start),
        count: super::narrow(count - i128::from(p.cost)),
    })
}
