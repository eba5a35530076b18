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
        u64::try_from(self.clock.now().as_micros()).unwrap_or(u64::MAX)
    }

    /// The state, locked. A panic elsewhere while holding the lock leaves a state that is still
    /// consistent (every step keeps the invariants), so a poisoned lock is taken over.
    pub(crate) fn lock(&self) -> MutexGuard<'_, S> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
