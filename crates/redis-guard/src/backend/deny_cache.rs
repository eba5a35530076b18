//! [`DenyCache`]: requests denied until a known time are answered in process until then.

use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use super::{ExpiringTable, InProcess};

/// A bounded table of "denied until": after Redis denies a request with a known wait, the same
/// request (same rules, keys and costs) is denied in process, with zero round trips, until that
/// wait has passed. Exact for every built-in algorithm, since a denial consumes nothing and other
/// replicas can only use more quota, never give it back; a limit raised in the meantime, a reset,
/// or a Cluster refund takes effect for that client only when its cached wait ends.
///
/// Generic over what is remembered with the deadline (the limiter keeps the rules' states). The
/// clock is the process' monotonic clock plus the backend's test shift, so tests that move Redis
/// time move this one too.
#[derive(Debug)]
pub(crate) struct DenyCache<V> {
    table: InProcess<ExpiringTable<u64, (V, u64)>>,
    hasher: std::collections::hash_map::RandomState,
}

impl<V> DenyCache<V> {
    /// A cache of at most `capacity` denied requests.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            table: InProcess::new(ExpiringTable::new(capacity), None),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// The key of a request; SipHash with a per-cache random key, so clients cannot aim
    /// collisions at each other.
    pub(crate) fn key(&self, request: impl Hash) -> u64 {
        self.hasher.hash_one(request)
    }

    /// Now on the cache's clock, in µs: monotonic plus `shift_us`.
    pub(crate) fn now(&self, shift_us: u64) -> u64 {
        self.table.now_us().saturating_add(shift_us)
    }

    /// What was stored for `key`, and how long ago (µs), while it is still denied at `now`.
    pub(crate) fn get(&self, key: u64, now: u64) -> Option<(V, Duration)>
    where
        V: Clone,
    {
        let mut table = self.table.lock();
        let hit = table
            .get_live_mut(&key, now)
            .map(|(v, at)| (v.clone(), Duration::from_micros(now.saturating_sub(*at))));
        table.maintain(now, |_, _| {});
        hit
    }

    /// Remembers that `key` is denied for `wait` from `now`, with `value`.
    pub(crate) fn insert(&self, key: u64, value: V, now: u64, wait: Duration) {
        let until = now.saturating_add(u64::try_from(wait.as_micros()).unwrap_or(u64::MAX));
        let mut table = self.table.lock();
        table.insert(key, (value, now), until);
        table.maintain(now, |_, _| {});
    }

    /// Forgets every cached denial (an operation changed what Redis would answer).
    pub(crate) fn clear(&self) {
        self.table.lock().clear();
    }
}
