//! Token bucket in Rust, the twin of `token_bucket.lua`.

use super::{Params, State, Step, idiv};

pub(super) fn step(state: Option<&State>, now: u64, p: &Params) -> Step {
    let e = i128::from(p.emission_us);
    let cap = i128::from(p.burst) * e;
    let need = i128::from(p.cost) * e;
    let now_w = i128::from(now);
    let credit = match state {
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
            let credit = was_cap.min(i128::from(credit) + (now_w - i128::from(at)));
            if emission == p.emission_us && burst == p.burst {
                credit
            } else {
                // Another quota: the tokens the key lacks carry over.
                (cap - super::step::rescaled(was_cap - credit, was_e, e)).max(0)
            }
        }
        _ => cap,
    };
    if credit < need {
        return Step::denied(idiv(credit, e), need - credit, cap - credit);
    }
    let left = credit - need;
    let state = State::Bucket {
        credit: super::narrow(left),
        at: now,
        emission: p.emission_us,
        burst: p.burst,
    };
    Step::admitted(idiv(left, e), cap - left, state, cap - left)
}
