//! Concurrency leases in Rust, the twin of `concurrency.lua`.

use std::sync::Arc;

use super::{Commit, Params, Step};

/// The most a denial tells a client to wait: a lease usually ends long before its expiry.
const MAX_RETRY_US: u64 = 1_000_000;

/// `leases` are the key's leases (request id, expiry µs; empty when it has none); the expired
/// ones are dropped in place, as the script trims them.
pub(super) fn step(leases: &mut Vec<(Arc<str>, u64)>, now: u64, p: &Params) -> Step {
    leases.retain(|&(_, expiry)| expiry > now);
    let count = leases.len() as u64;
    if count + p.cost > p.limit {
        let first = leases.iter().map(|&(_, e)| e).min();
        let last = leases.iter().map(|&(_, e)| e).max();
        let retry = first.map_or(MAX_RETRY_US, |e| (e - now).min(MAX_RETRY_US));
        let reset = last.map_or(p.period_us, |e| e - now);
        return Step::denied(
            i128::from(p.limit) - i128::from(count),
            i128::from(retry),
            i128::from(reset),
        );
    }
    let lease = Commit::Lease {
        expiry: now + p.period_us,
        ttl: p.period_us,
    };
    Step::admitted(
        i128::from(p.limit - count - p.cost),
        i128::from(p.period_us),
        lease,
    )
}

/// Drops the lease of `request`; whether the key holds none any more.
pub(crate) fn release(leases: &mut Vec<(Arc<str>, u64)>, request: &str) -> bool {
    leases.retain(|(r, _)| &**r != request);
    leases.is_empty()
}

/// Moves the expiry of `request`'s lease to `expiry` if it still holds one (alive at `now`);
/// whether it did.
pub(crate) fn renew(leases: &mut [(Arc<str>, u64)], request: &str, now: u64, expiry: u64) -> bool {
    leases
        .iter_mut()
        .find(|(r, e)| &**r == request && *e > now)
        .map(|lease| lease.1 = expiry)
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::Algorithm;

    fn params(limit: u64, cost: u64) -> Params {
        Params {
            algorithm: Algorithm::Concurrency,
            limit,
            period_us: 30_000_000,
            burst: limit,
            emission_us: 30_000_000 / limit,
            cost,
            max_wait_us: 0,
        }
    }

    #[test]
    fn admits_up_to_the_limit_then_waits_at_most_a_second() {
        let p = params(2, 1);
        let mut leases: Vec<(Arc<str>, u64)> = vec![("a".into(), 30_000_000)];
        let step = step(&mut leases, 0, &p);
        assert!(step.allowed);
        assert_eq!(step.remaining, 0);
        leases.push(("b".into(), 30_000_100));
        let denied = super::step(&mut leases, 100, &p);
        assert!(!denied.allowed);
        assert_eq!(denied.retry_after_us, 1_000_000);
        assert_eq!(denied.reset_after_us, 30_000_000);
        // Close to the first expiry, the wait is the time left.
        let denied = super::step(&mut leases, 29_999_900, &p);
        assert_eq!(denied.retry_after_us, 100);
        // Expired leases count no more.
        assert!(super::step(&mut leases, 30_000_000, &p).allowed);
        assert_eq!(leases.len(), 1);
    }

    #[test]
    fn release_and_renew_touch_only_their_request() {
        let mut leases: Vec<(Arc<str>, u64)> = vec![("a".into(), 10), ("b".into(), 20)];
        assert!(renew(&mut leases, "b", 5, 50));
        assert!(!renew(&mut leases, "a", 10, 50), "expired: lost");
        assert!(!renew(&mut leases, "c", 5, 50));
        assert!(!release(&mut leases, "a"));
        assert_eq!(leases, vec![(Arc::from("b"), 50)]);
        assert!(release(&mut leases, "b"));
    }
}
