//! Token bucket in Rust, the twin of `token_bucket.lua`.

use super::{Commit, Params, State, Step, idiv};

/// The key's credit refilled up to `now`, in the terms of p's quota: under another quota, the
/// tokens it lacks carry over.
fn current_credit(state: Option<&State>, now: u64, p: &Params) -> i128 {
    let e = i128::from(p.emission_us);
    let cap = i128::from(p.burst) * e;
    match state {
        Some(&State::Bucket {
            credit,
            at,
            emission,
            burst,
        }) if at <= now && emission > 0 => {
            let (was_e, was_cap) = (
                i128::from(emission),
                i128::from(burst) * i128::from(emission),
            );
            let credit = was_cap.min(i128::from(credit) + (i128::from(now) - i128::from(at)));
            if emission == p.emission_us && burst == p.burst {
                credit
            } else {
                (cap - super::state::rescaled(was_cap - credit, was_e, e)).max(0)
            }
        }
        _ => cap,
    }
}

/// The state holding `credit` at `now`, living until the bucket is full again.
fn stored(credit: i128, now: u64, p: &Params) -> Commit {
    let cap = i128::from(p.burst) * i128::from(p.emission_us);
    let state = State::Bucket {
        credit: i64::try_from(credit).unwrap_or(if credit < 0 { i64::MIN } else { i64::MAX }),
        at: now,
        emission: p.emission_us,
        burst: p.burst,
    };
    Commit::Replace(state, super::narrow(cap - credit))
}

pub(super) fn step(state: Option<&State>, now: u64, p: &Params) -> Step {
    let e = i128::from(p.emission_us);
    let cap = i128::from(p.burst) * e;
    let need = i128::from(p.cost) * e;
    let credit = current_credit(state, now, p);
    if credit < need {
        if need - credit <= i128::from(p.max_wait_us) {
            // Throttled, as in token_bucket.lua: the tokens taken now, as a debt.
            let owed = credit - need;
            return Step::throttled(need - credit, cap - owed, stored(owed, now, p));
        }
        return Step::denied(idiv(credit, e), need - credit, cap - credit);
    }
    let left = credit - need;
    Step::admitted(idiv(left, e), cap - left, stored(left, now, p))
}

/// How long until the bucket is full, nothing taken (a probe's reset).
pub(super) fn standing_reset(state: Option<&State>, now: u64, p: &Params) -> u64 {
    let cap = i128::from(p.burst) * i128::from(p.emission_us);
    super::narrow(cap - current_credit(state, now, p))
}

/// `p.cost` more tokens whatever is left, as `token_bucket_charge`: empty at worst.
pub(super) fn charge(state: Option<&State>, now: u64, p: &Params) -> Commit {
    let was = current_credit(state, now, p);
    // A throttled waiter's debt stays as it is.
    let credit = was - i128::from(p.cost) * i128::from(p.emission_us);
    stored(credit.max(was.min(0)), now, p)
}

/// `p.cost` tokens back, as `token_bucket_refund`: `None` when the bucket is full again.
pub(super) fn refund(state: &State, now: u64, p: &Params) -> Option<Commit> {
    let cap = i128::from(p.burst) * i128::from(p.emission_us);
    let credit =
        current_credit(Some(state), now, p) + i128::from(p.cost) * i128::from(p.emission_us);
    (credit < cap).then(|| stored(credit, now, p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::Algorithm;

    fn params(max_wait_us: u64) -> Params {
        Params {
            algorithm: Algorithm::TokenBucket,
            limit: 10,
            period_us: 1_000_000,
            burst: 1,
            emission_us: 100_000,
            cost: 1,
            max_wait_us,
        }
    }

    fn after(s: &Step) -> State {
        match &s.commit {
            Some(Commit::Replace(state, _)) => state.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_throttled_bucket_owes_the_tokens_of_its_waiters_and_gets_them_back() {
        let p = params(250_000);
        let first = step(None, 0, &p);
        let second = step(Some(&after(&first)), 0, &p);
        assert!(second.allowed);
        assert_eq!(second.retry_after_us, 100_000);
        let third = step(Some(&after(&second)), 0, &p);
        assert_eq!((third.allowed, third.retry_after_us), (true, 200_000));
        assert!(matches!(
            after(&third),
            State::Bucket {
                credit: -200_000,
                ..
            }
        ));
        // Past the max wait: denied, nothing taken.
        let fourth = step(Some(&after(&third)), 0, &p);
        assert_eq!((fourth.allowed, fourth.remaining), (false, 0));
        assert_eq!(fourth.retry_after_us, 300_000);
        // The third waiter goes away: its token comes back, and the next waits 200 ms again.
        let back = refund(&after(&third), 0, &p).expect("still owing");
        let Commit::Replace(state, _) = back else {
            panic!()
        };
        assert_eq!(step(Some(&state), 0, &p).retry_after_us, 200_000);
        // A charge keeps the debt as it is (never forgives it).
        let Commit::Replace(charged, _) = charge(Some(&after(&third)), 0, &p) else {
            panic!()
        };
        assert!(matches!(
            charged,
            State::Bucket {
                credit: -200_000,
                ..
            }
        ));
    }
}
