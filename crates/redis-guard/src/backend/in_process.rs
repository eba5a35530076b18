//! [`InProcess`]: a memory backend's state behind one lock, on one clock.

use std::sync::{Mutex, MutexGuard};

use super::{Clock, MonotonicClock};

/// A memory backend's state `S` behind a mutex, read at a time from `clock` in µs.
#[derive(Debug)]
pub(crate) struct InProcess<S> {
    clock: Box<dyn Clock>,
    state: Mutex<S>,
}

impl<S> InProcess<S> {
    pub(crate) fn new(state: S, clock: Option<Box<dyn Clock>>) -> Self {
        Self {
            clock: clock.unwrap_or_else(|| Box::new(MonotonicClock::new())),
            state: Mutex::new(state),
        }
    }

    /// Now, in whole µs on the backend's clock.
    pub(crate) fn now_us(&self) -> u64 {
        super::micros(self.clock.now())
    }

    /// The state, locked. A panic elsewhere while holding the lock leaves a state that is still
    /// consistent (every step keeps the invariants), so a poisoned lock is taken over.
    pub(crate) fn lock(&self) -> MutexGuard<'_, S> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Builds an in-process backend ([`MemoryLimiter`](crate::rate_limit::MemoryLimiter) or
/// [`MemorySessionStore`](crate::session::MemorySessionStore)): its capacity and, for tests, its
/// clock. The capacity is fixed when the backend is built; clones of it share the state.
///
/// ```
/// # #[cfg(all(feature = "rate-limit", feature = "session"))] {
/// use redis_guard::rate_limit::MemoryLimiter;
/// use redis_guard::session::MemorySessionStore;
/// let limiter = MemoryLimiter::builder().capacity(10_000).build();
/// let sessions = MemorySessionStore::builder().capacity(1_000).build();
/// # let _ = (limiter, sessions); }
/// ```
#[must_use]
pub struct InProcessBuilder<T> {
    capacity: usize,
    /// A byte bound, for the backends that have one (the response cache's store).
    pub(crate) bytes: usize,
    clock: Option<Box<dyn Clock>>,
    build: Build<T>,
}

/// How the backend is made from the settings.
enum Build<T> {
    Counted(fn(usize, Option<Box<dyn Clock>>) -> T),
    #[cfg_attr(not(feature = "cache"), allow(dead_code))]
    Sized(fn(usize, usize, Option<Box<dyn Clock>>) -> T),
}

impl<T> InProcessBuilder<T> {
    pub(crate) fn new(capacity: usize, build: fn(usize, Option<Box<dyn Clock>>) -> T) -> Self {
        Self {
            capacity,
            bytes: 0,
            clock: None,
            build: Build::Counted(build),
        }
    }

    /// A backend bounded by entries and by `bytes`.
    #[cfg_attr(not(feature = "cache"), allow(dead_code))]
    pub(crate) fn sized(
        capacity: usize,
        bytes: usize,
        build: fn(usize, usize, Option<Box<dyn Clock>>) -> T,
    ) -> Self {
        Self {
            capacity,
            bytes,
            clock: None,
            build: Build::Sized(build),
        }
    }

    /// The most entries (rate-limit keys, sessions) held at once, at least 1; past it, the
    /// entries closest to expiry go first.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Reads time from `clock` instead of the monotonic clock, e.g. a `ManualClock` (feature
    /// `test-util`) in tests.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// The backend.
    pub fn build(self) -> T {
        match self.build {
            Build::Counted(build) => build(self.capacity, self.clock),
            Build::Sized(build) => build(self.capacity, self.bytes, self.clock),
        }
    }
}

impl<T> std::fmt::Debug for InProcessBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessBuilder")
            .field("capacity", &self.capacity)
            .field("bytes", &self.bytes)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// What a future of an in-process store gives, at once: it never waits (tests).
#[cfg(test)]
pub(crate) fn ready<F: std::future::Future + Unpin>(f: F) -> F::Output {
    futures_util::FutureExt::now_or_never(f).expect("an in-process store never waits")
}
