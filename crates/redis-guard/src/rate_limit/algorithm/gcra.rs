//! GCRA in Rust, the twin of `gcra.lua`: same integers, same decisions.

use super::Params;

/// The outcome of one GCRA step: `(allowed, remaining, retry_after_us, reset_after_us, new TAT)`.
/// `new_tat` is `Some` only when the request is admitted.
pub(crate) struct Step {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after_us: u64,
    pub(crate) reset_after_us: u64,
    pub(crate) new_tat: Option<u64>,
}

pub(crate) fn step(tat: Option<u64>, now: u64, p: &Params) -> Step {
    // Signed arithmetic, as in Lua: `allow_at` may lie before the clock's origin.
    let wide = |v: u64| i128::from(v);
    let (now_w, e, b, c) = (wide(now), wide(p.emission_us), wide(p.burst), wide(p.cost));
    let tat = wide(tat.map_or(now, |t| t.max(now)));
    let new_tat = tat + c * e;
    let allow_at = new_tat - b * e;
    let narrow = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
    if now_w < allow_at {
        return Step {
            allowed: false,
            remaining: narrow((now_w + b * e - tat) / e),
            retry_after_us: narrow(allow_at - now_w),
            reset_after_us: narrow(tat - now_w),
            new_tat: None,
        };
    }
    Step {
        allowed: true,
        remaining: narrow((now_w - allow_at) / e),
        retry_after_us: 0,
        reset_after_us: narrow(new_tat - now_w),
        new_tat: Some(narrow(new_tat)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::Algorithm;

    fn params(limit: u64, period_us: u64, burst: u64, cost: u64) -> Params {
        Params {
            algorithm: Algorithm::Gcra,
            limit,
            period_us,
            burst,
            emission_us: period_us / limit,
            cost,
        }
    }

    #[test]
    fn full_burst_then_one_per_interval() {
        let p = params(10, 60_000_000, 10, 1);
        let mut tat = None;
        for i in 0..10 {
            let s = step(tat, 1_000, &p);
            assert!(s.allowed, "request {i}");
            assert_eq!(s.remaining, 9 - i);
            tat = s.new_tat;
        }
        let denied = step(tat, 1_000, &p);
        assert!(!denied.allowed);
        assert_eq!(denied.retry_after_us, 6_000_000);
        assert_eq!(denied.reset_after_us, 60_000_000);
        assert!(!step(tat, 1_000 + 5_999_999, &p).allowed);
        assert!(step(tat, 1_000 + 6_000_000, &p).allowed);
    }

    #[test]
    fn weighted_cost_and_burst() {
        let p = params(10, 10_000_000, 4, 3);
        let first = step(None, 0, &p);
        assert!(first.allowed);
        assert_eq!(first.remaining, 1);
        let second = step(first.new_tat, 0, &p);
        assert!(!second.allowed, "3 more would exceed the burst of 4");
        assert_eq!(second.remaining, 1);
        assert_eq!(second.retry_after_us, 2_000_000);
    }
}
