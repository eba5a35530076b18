//! GCRA in Rust, the twin of `gcra.lua`: same integers, same decisions.

use super::{Commit, Params, State, Step, idiv};

/// The key's TAT in the terms of p's quota: a TAT kept under another quota is rescaled so the
/// units it holds carry over, at most the burst; never before `now`.
fn current_tat(state: Option<&State>, now: i128, p: &Params) -> i128 {
    let (e, b) = (i128::from(p.emission_us), i128::from(p.burst));
    let tat = match state {
        Some(&State::Gcra { tat, emission }) if emission != p.emission_us && emission > 0 => {
            let tat = i128::from(tat);
            if tat > now {
                now + super::state::rescaled(tat - now, i128::from(emission), e).min(b * e)
            } else {
                tat
            }
        }
        Some(&State::Gcra { tat, .. }) => i128::from(tat),
        _ => now,
    };
    tat.max(now)
}

/// The state holding `tat`, and how long it lives.
fn stored(tat: i128, now: i128, p: &Params) -> Commit {
    let state = State::Gcra {
        tat: super::narrow(tat),
        emission: p.emission_us,
    };
    Commit::Replace(state, super::narrow(tat - now))
}

pub(super) fn step(state: Option<&State>, now: u64, p: &Params) -> Step {
    // Signed arithmetic, as in Lua: `allow_at` may lie before the clock's origin.
    let now = i128::from(now);
    let (e, b, c) = (
        i128::from(p.emission_us),
        i128::from(p.burst),
        i128::from(p.cost),
    );
    let tat = current_tat(state, now, p);
    let new_tat = tat + c * e;
    let allow_at = new_tat - b * e;
    if now < allow_at {
        if allow_at - now <= i128::from(p.max_wait_us) {
            // Throttled, as in gcra.lua: admitted at `allow_at`, the TAT moved now.
            return Step::throttled(allow_at - now, new_tat - now, stored(new_tat, now, p));
        }
        return Step::denied(idiv(now + b * e - tat, e), allow_at - now, tat - now);
    }
    let commit = stored(new_tat, now, p);
    Step::admitted(idiv(now - allow_at, e), new_tat - now, commit)
}

/// How long until the key is as fresh as a new one, nothing taken (a probe's reset).
pub(super) fn standing_reset(state: Option<&State>, now: u64, p: &Params) -> u64 {
    let now = i128::from(now);
    super::narrow(current_tat(state, now, p) - now)
}

/// `p.cost` more emission intervals whatever is left, as `gcra_charge` in `gcra.lua`.
pub(super) fn charge(state: Option<&State>, now: u64, p: &Params) -> Commit {
    let now = i128::from(now);
    let tat = current_tat(state, now, p);
    stored(tat + i128::from(p.cost) * i128::from(p.emission_us), now, p)
}

/// `p.cost` emission intervals back, as `gcra_refund`: `None` when nothing is left to keep.
pub(super) fn refund(state: &State, now: u64, p: &Params) -> Option<Commit> {
    let now = i128::from(now);
    let tat = current_tat(Some(state), now, p) - i128::from(p.cost) * i128::from(p.emission_us);
    (tat > now).then(|| stored(tat, now, p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::Algorithm;

    fn commit(s: &Step) -> Option<State> {
        match &s.commit {
            Some(super::super::Commit::Replace(st, _)) => Some(st.clone()),
            _ => None,
        }
    }

    #[test]
    fn a_throttled_rule_admits_after_a_wait_and_queues_the_next() {
        // 10 a second, burst 1: one slot every 100 ms.
        let p = Params {
            algorithm: Algorithm::Gcra,
            limit: 10,
            period_us: 1_000_000,
            burst: 1,
            emission_us: 100_000,
            cost: 1,
            max_wait_us: 250_000,
        };
        let first = step(None, 0, &p);
        assert!(first.allowed && first.retry_after_us == 0);
        let second = step(commit(&first).as_ref(), 0, &p);
        assert!(second.allowed);
        assert_eq!(second.retry_after_us, 100_000);
        let third = step(commit(&second).as_ref(), 0, &p);
        assert_eq!(third.retry_after_us, 200_000);
        let fourth = step(commit(&third).as_ref(), 0, &p);
        assert!(
            !fourth.allowed,
            "a wait of 300 ms is past the 250 ms allowed"
        );
        assert_eq!(fourth.retry_after_us, 300_000);
    }
}
