//! What a request's receipt gives back to a [`MemoryLimiter`]'s table when its response ends
//! or streams on: its concurrency leases released or renewed, its cost settled.

use super::MemoryLimiter;
use super::table::{EntryId, Locked};
use crate::rate_limit::algorithm::{self, Refunded, State, ceil_ms};
use crate::rate_limit::{Check, Few};

/// An evaluation as a [`MemoryLimiter`] recorded it: the state entries of its leases, each with
/// its expiry period (µs); the checks that may be settled after the response, and the time they
/// were decided at.
pub(crate) struct InMemory {
    pub(super) limiter: MemoryLimiter,
    pub(super) leases: Vec<(EntryId, u64)>,
    pub(super) settled: Vec<Check>,
    pub(super) evaluated_at: u64,
}

impl InMemory {
    pub(crate) fn release(&self, request: &str) {
        let (mut table, now) = self.leases_locked();
        for &(id, _) in &self.leases {
            if let Some(State::Leases(held)) = table.state(id, now)
                && algorithm::release_lease(held, request)
            {
                table.remove(id);
            }
        }
    }

    /// Renews `request`'s leases (each for its expiry period from now); how many it still held.
    pub(crate) fn renew(&self, request: &str) -> usize {
        let (mut table, now) = self.leases_locked();
        let mut renewed = 0;
        for &(id, period) in &self.leases {
            let expiry = now + period;
            if let Some(State::Leases(held)) = table.state(id, now)
                && algorithm::renew_lease(held, request, now, expiry)
            {
                renewed += 1;
                table.extend_state(id, now + ceil_ms(period) * 1000);
            }
        }
        renewed
    }

    /// The table locked on the entries of the request's leases, and the time.
    fn leases_locked(&self) -> (Locked<'_>, u64) {
        let (table, now) = (&self.limiter.table, self.limiter.table.now_us());
        (table.lock(self.leases.iter().map(|&(id, _)| id)), now)
    }

    /// Settles the request's rules: per settled check, `delta(name)` more units charged
    /// (positive) or given back (negative).
    pub(crate) fn settle(&self, delta: impl Fn(&str) -> i64) {
        let lines: Vec<(&Check, i64)> = self
            .settled
            .iter()
            .map(|c| (c, delta(c.rule.name())))
            .filter(|&(_, d)| d != 0)
            .collect();
        self.limiter.settle_now(&lines, self.evaluated_at);
    }

    /// The longest a lease lives without renewal, in µs.
    pub(crate) fn shortest_expiry_us(&self) -> Option<u64> {
        self.leases.iter().map(|&(_, e)| e).min()
    }

    pub(crate) fn lease_count(&self) -> usize {
        self.leases.len()
    }
}

impl MemoryLimiter {
    /// Settles `checks` of a request admitted at `charged_at` (this limiter's clock): each
    /// check's `delta` more units charged whatever is left (positive) or given back (negative),
    /// as the Redis charge and refund scripts do.
    pub(crate) fn settle_now(&self, checks: &[(&Check, i64)], charged_at: u64) {
        let mut ids: Few<EntryId> = Few::default();
        for (check, _) in checks {
            ids.push(self.table.state_id(&check.rule, &check.key));
        }
        let now = self.table.now_us();
        let mut table = self.table.lock(ids.as_slice().iter().copied());
        for (&(check, delta), &id) in checks.iter().zip(ids.as_slice()) {
            let mut p = check.params(1);
            p.cost = delta.unsigned_abs();
            if delta > 0 {
                let current = table.state(id, now).map(|s| &*s);
                if let Some(commit) = algorithm::charge(current, now, &p) {
                    // Only a lease names its entry; a charge never makes one.
                    table.apply(id, commit, now, "-");
                }
            } else if delta < 0 {
                let Some(state) = table.state(id, now) else {
                    continue;
                };
                match algorithm::refund(state, now, &p, charged_at) {
                    Refunded::Store(commit) => table.apply(id, commit, now, "-"),
                    Refunded::Delete => table.remove(id),
                    Refunded::Kept | Refunded::Nothing => {}
                }
            }
        }
    }
}
