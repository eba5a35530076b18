//! [`DenyCache`]: requests denied until a known time are answered in process until then.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{ExpiringTable, InProcess, micros};
use crate::prehashed::KeyedHash;

/// A bounded table of "denied until": after Redis denies a request with a known wait, the same
/// request (same rules, keys and costs) is denied in process, with zero round trips, until that
/// wait has passed. The denial itself stays right for every built-in algorithm, since a denial
/// consumes nothing and other replicas can only use more quota, never give it back; a limit
/// raised in the meantime, a reset, or a Cluster refund takes effect for that client only when
/// its cached wait ends.
///
/// The numbers of a cached denial are Redis' at the time it denied, the waits counted down. A
/// decision this process admits on one of the request's state keys (another request of the same
/// client with a smaller cost, say) forgets the cached denials on that key, so that the next
/// answer comes from Redis with the numbers that decision left. What another replica admits
/// meanwhile is not seen here: until the cached wait ends, the denial may show more remaining
/// and a shorter wait than Redis would.
///
/// Generic over what is remembered with the deadline (the limiter keeps the rules' states). The
/// clock is the process' monotonic clock plus the backend's test shift, so tests that move Redis
/// time move this one too.
#[derive(Debug)]
pub(crate) struct DenyCache<V> {
    table: InProcess<Tables<V>>,
    hasher: KeyedHash,
    /// How many denials the table held when last changed: an admitted decision (the common
    /// case) skips the lock while none is cached.
    denied: AtomicUsize,
}

#[derive(Debug)]
struct Tables<V> {
    /// By request: its states, and when it was denied.
    denied: ExpiringTable<u64, (V, u64)>,
    /// By state key: when this process last admitted a decision on it, kept while a denial
    /// cached before it could still be live.
    admitted: ExpiringTable<u64, u64>,
}

impl<V> DenyCache<V> {
    /// A cache of at most `capacity` denied requests.
    pub(crate) fn new(capacity: usize) -> Self {
        let tables = Tables {
            denied: ExpiringTable::new(capacity),
            admitted: ExpiringTable::new(capacity),
        };
        Self {
            table: InProcess::new(tables, None),
            hasher: KeyedHash::default(),
            denied: AtomicUsize::new(0),
        }
    }

    /// The key of a request, or of one of its state keys: a [`KeyedHash`] seeded at random per
    /// cache, so clients cannot aim collisions at each other (as the in-process table names a
    /// rule's state).
    pub(crate) fn key(&self, request: impl Hash) -> u64 {
        self.hasher.hash_one(request)
    }

    /// Whether some denial may be cached (a hint, read without the lock).
    pub(crate) fn has_denials(&self) -> bool {
        self.denied.load(Ordering::Relaxed) > 0
    }

    /// Now on the cache's clock, in µs: monotonic plus `shift_us`.
    pub(crate) fn now(&self, shift_us: u64) -> u64 {
        self.table.now_us().saturating_add(shift_us)
    }

    /// What was stored for `key`, and how long ago (µs), while it is still denied at `now` and
    /// no decision on any of its state keys (`state_keys()`) was admitted since.
    pub(crate) fn get<I>(
        &self,
        key: u64,
        now: u64,
        state_keys: impl FnOnce() -> I,
    ) -> Option<(V, Duration)>
    where
        V: Clone,
        I: IntoIterator<Item = u64>,
    {
        let mut guard = self.table.lock();
        let tables = &mut *guard;
        let mut hit = tables
            .denied
            .get_live_mut(&key, now)
            .map(|(v, at)| (v.clone(), *at));
        if let Some((_, at)) = hit
            && tables.admitted.len() > 0
            && state_keys().into_iter().any(|k| {
                tables
                    .admitted
                    .get_live_mut(&k, now)
                    .is_some_and(|admitted| *admitted >= at)
            })
        {
            tables.denied.remove(&key);
            hit = None;
        }
        tables.denied.maintain(now, |_, _| {});
        tables.admitted.maintain(now, |_, _| {});
        self.denied.store(tables.denied.len(), Ordering::Relaxed);
        hit.map(|(v, at)| (v, Duration::from_micros(now.saturating_sub(at))))
    }

    /// Remembers that `key` is denied for `wait` from `now`, with `value`.
    pub(crate) fn insert(&self, key: u64, value: V, now: u64, wait: Duration) {
        let until = now.saturating_add(micros(wait));
        let mut tables = self.table.lock();
        tables.denied.insert(key, (value, now), until);
        tables.denied.maintain(now, |_, _| {});
        self.denied.store(tables.denied.len(), Ordering::Relaxed);
    }

    /// Records that a decision admitted at `now` changed the state keys `state_keys()`: cached
    /// denials on them (at most `horizon` long) are stale. Nothing is hashed while no denial is
    /// cached.
    pub(crate) fn admitted<I>(&self, now: u64, horizon: Duration, state_keys: impl FnOnce() -> I)
    where
        I: IntoIterator<Item = u64>,
    {
        // A denial cached after this read was decided after this admission was recorded in
        // Redis (or concurrently with it, as under the lock): nothing to forget for it.
        if self.denied.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut guard = self.table.lock();
        let tables = &mut *guard;
        if tables.denied.len() == 0 {
            return;
        }
        let until = now.saturating_add(micros(horizon));
        for k in state_keys() {
            tables.admitted.insert(k, now, until);
        }
        tables.admitted.maintain(now, |_, _| {});
    }

    /// Forgets every cached denial (an operation changed what Redis would answer).
    pub(crate) fn clear(&self) {
        let mut tables = self.table.lock();
        tables.denied.clear();
        tables.admitted.clear();
        self.denied.store(0, Ordering::Relaxed);
    }
}
