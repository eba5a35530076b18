//! [`Stampede`]: what concurrent requests do when an entry is missing or about to expire.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{ConfigError, ConfigErrorKind};

/// How a layer keeps many concurrent requests for one key from all recomputing it.
///
/// - [`Stampede::lock`] (the default), lock on miss: the first request for a missing entry
///   takes a short lease ([`backend::Lock`](crate::backend::Lock)), computes and fills; the
///   others poll the store (2 ms, doubling to 50 ms) for at most [`wait`](Self::wait), then
///   serve the filled entry. Exactly one recomputation per miss while the handler is faster
///   than the wait and the lease. Past the wait a request computes on its own.
/// - [`Stampede::xfetch`], probabilistic early recomputation ("XFetch", Vattani et al.,
///   *Optimal Probabilistic Cache Stampede Prevention*, VLDB 2015): each hit recomputes
///   before expiry with a probability that grows as expiry nears, scaled by how long the last
///   recomputation took (measured by the store's clock and stored with the entry) and by
///   `beta` (1.0 is the paper's; more recomputes earlier). No lock, no waiting; a cold key is
///   not protected: every concurrent request of the first burst computes.
///
/// With both, a **stale** entry (inside its `stale-while-revalidate` window) is served at
/// once to every request, and one of them (the one that takes the lease) refreshes it in the
/// background.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stampede {
    pub(crate) xfetch: Option<f64>,
    pub(crate) wait: Duration,
    pub(crate) lease: Duration,
}

impl Stampede {
    /// Lock on miss: wait up to 3 s for the fill; the lease is 10 s.
    #[must_use]
    pub const fn lock() -> Self {
        Self {
            xfetch: None,
            wait: Duration::from_secs(3),
            lease: Duration::from_secs(10),
        }
    }

    /// XFetch with `beta` (1.0 is the usual choice; it must be finite and above zero).
    #[must_use]
    pub const fn xfetch(beta: f64) -> Self {
        Self {
            xfetch: Some(beta),
            ..Self::lock()
        }
    }

    /// How long a request waits for another one's fill (lock on miss; default 3 s), then
    /// computes on its own. With fill timeouts (`fill_timeout` of either cache) a request
    /// waits until its fill timeout instead, and never computes on its own while the lease
    /// holds.
    ///
    /// ```
    /// use redis_guard::cache::Stampede;
    /// use std::time::Duration;
    /// let s = Stampede::lock().wait(Duration::from_millis(500)).lease(Duration::from_secs(2));
    /// # let _ = s;
    /// ```
    #[must_use]
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The lease of the request that recomputes (default 10 s): past it another request may
    /// recompute too. The lease is not a fencing token: see [`Lock`](crate::backend::Lock).
    #[must_use]
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    pub(crate) fn problem(&self) -> Option<ConfigError> {
        if let Some(beta) = self.xfetch
            && !(beta.is_finite() && beta > 0.0)
        {
            return Some(
                ConfigError::new(
                    ConfigErrorKind::Range,
                    format!("XFetch beta {beta} must be finite and above 0"),
                )
                .with_setting("Stampede::xfetch")
                .with_value(beta),
            );
        }
        let range = Duration::from_millis(1)..=crate::backend::MAX_LEASE;
        let duration = |message: String, setting, value: Duration| {
            Some(
                ConfigError::new(ConfigErrorKind::Duration, message)
                    .with_setting(setting)
                    .with_debug_value(value),
            )
        };
        if !range.contains(&self.lease) {
            return duration(
                format!("lease {:?} is outside 1 ms..=1 day", self.lease),
                "Stampede::lease",
                self.lease,
            );
        }
        if self.wait > crate::backend::MAX_LEASE {
            return duration(
                format!("wait {:?} is longer than a day", self.wait),
                "Stampede::wait",
                self.wait,
            );
        }
        None
    }
}

impl Default for Stampede {
    fn default() -> Self {
        Self::lock()
    }
}

/// Where the layer draws its random numbers (jitter, XFetch): uniform in (0, 1].
#[derive(Clone)]
pub(crate) struct Random(pub(crate) Arc<dyn Fn() -> f64 + Send + Sync>);

impl Random {
    /// A number in (0, 1].
    pub(crate) fn draw(&self) -> f64 {
        let r = (self.0)();
        if r.is_nan() {
            1.0
        } else {
            r.clamp(f64::MIN_POSITIVE, 1.0)
        }
    }
}

impl Default for Random {
    fn default() -> Self {
        Self(Arc::new(|| {
            use std::hash::BuildHasher;
            let bits = std::hash::RandomState::new().hash_one(0_u8) >> 11;
            // 53 random bits, shifted into (0, 1].
            #[allow(clippy::cast_precision_loss)]
            let r = (bits as f64 + 1.0) / (1_u64 << 53) as f64;
            r
        }))
    }
}

impl fmt::Debug for Random {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Random")
    }
}
