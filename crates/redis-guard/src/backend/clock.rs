//! The in-process backends' clock, behind a seam tests can drive.

use std::fmt;
#[cfg(any(test, feature = "test-util"))]
use std::sync::Arc;
#[cfg(any(test, feature = "test-util"))]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `d` in whole µs, saturating: the unit every store keeps its times in.
#[cfg(any(
    feature = "rate-limit",
    feature = "session",
    feature = "cache",
    feature = "idempotency"
))]
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A monotonic clock for the in-process backends. Redis backends never use it: their clock is
/// Redis `TIME`.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Time elapsed since an arbitrary, fixed origin. Must never go backwards.
    fn now(&self) -> Duration;
}

cfg_middleware! {
    unused_without {
        /// The real clock: [`Instant`] since the clock was created; what the in-process backends
        /// use unless given another [`Clock`].
        #[derive(Clone, Copy, Debug)]
        pub(crate) struct MonotonicClock {
            origin: Instant,
        }

        impl MonotonicClock {
            /// A clock whose origin is now.
            #[must_use]
            pub(crate) fn new() -> Self {
                Self {
                    origin: Instant::now(),
                }
            }
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that moves only when told to: exact tests of time-dependent behaviour without sleeps
/// (feature `test-util`). Clones share the same time.
///
/// ```
/// use redis_guard::backend::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_secs(6));
/// assert_eq!(clock.now(), Duration::from_secs(6));
/// ```
#[cfg(any(test, feature = "test-util"))]
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    micros: Arc<AtomicU64>,
}

#[cfg(any(test, feature = "test-util"))]
impl ManualClock {
    /// A clock at zero.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by` (whole microseconds).
    pub fn advance(&self, by: Duration) {
        let us = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        self.micros.fetch_add(us, Ordering::SeqCst);
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::SeqCst))
    }
}
