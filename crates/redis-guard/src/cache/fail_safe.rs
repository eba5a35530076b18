//! Fail-safe settings shared by both caches: how long a copy outlives its freshness for an
//! origin that fails (`stale_if_error`), and the soft and hard fill timeouts; the typed error
//! of a value computation that ran past its hard timeout.

use std::fmt;
use std::time::Duration;

use crate::{ConfigError, ConfigErrorKind};

/// The longest `stale_if_error` window either cache takes: 10 years.
const MAX_GRACE: Duration = Duration::from_secs(10 * 365 * 86_400);

/// How long after a failed fill of a key (the origin failed and a copy stood in) the next
/// try waits: meanwhile every request for the key, on every replica, is answered with the
/// copy at once and none calls the origin. Then one request (the one that takes the key's
/// lease) tries again in the background, while the copy still answers everyone.
pub(crate) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// The fail-safe part of a cache's settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FailSafe {
    /// A copy is served in place of a failing origin up to this long past its freshness
    /// (zero: never).
    pub(crate) stale_if_error: Duration,
    /// The soft and the hard fill timeout, when set.
    pub(crate) timeouts: Option<(Duration, Duration)>,
}

impl FailSafe {
    /// How long the caller that computes (or waits for a computation) waits for it: the soft
    /// timeout when it has a copy to serve instead, else the hard one; `None` without
    /// timeouts.
    pub(crate) fn patience(&self, has_copy: bool) -> Option<Duration> {
        self.timeouts
            .map(|(soft, hard)| if has_copy { soft } else { hard })
    }

    /// When a caller that started at `since` stops waiting ([`patience`](Self::patience)
    /// later), `None` without timeouts. One deadline for the whole call: the wait for another
    /// caller's fill and the computation it may take over both end there.
    pub(crate) fn deadline(
        &self,
        has_copy: bool,
        since: tokio::time::Instant,
    ) -> Option<tokio::time::Instant> {
        self.patience(has_copy).map(|p| since + p)
    }

    /// Why these settings cannot work, naming the builder (`CacheLayerBuilder`, …).
    pub(crate) fn problem(&self, builder: &str) -> Option<ConfigError> {
        let duration = |message: String, setting: &'static str, value: Duration| {
            Some(
                ConfigError::new(ConfigErrorKind::Duration, message)
                    .with_setting(setting)
                    .with_debug_value(value),
            )
        };
        let (sie, timeout) = match builder {
            "ValueCacheBuilder" => (
                "ValueCacheBuilder::stale_if_error",
                "ValueCacheBuilder::fill_timeout",
            ),
            _ => (
                "CacheLayerBuilder::stale_if_error",
                "CacheLayerBuilder::fill_timeout",
            ),
        };
        if self.stale_if_error > MAX_GRACE {
            return duration(
                format!(
                    "stale_if_error {:?} must be at most 10 years",
                    self.stale_if_error
                ),
                sie,
                self.stale_if_error,
            );
        }
        if let Some((soft, hard)) = self.timeouts
            && (soft.is_zero() || soft > hard || hard > crate::backend::MAX_LEASE)
        {
            return duration(
                format!(
                    "fill_timeout soft {soft:?} and hard {hard:?} must be above 0, soft at most hard, hard at most a day"
                ),
                timeout,
                if soft.is_zero() || soft > hard {
                    soft
                } else {
                    hard
                },
            );
        }
        None
    }
}

/// The error of a value computation that ran past the cache's hard
/// [`fill_timeout`](super::ValueCacheBuilder::fill_timeout) with no copy to return instead:
/// the caller stopped waiting; the computation goes on in the background and its value is
/// stored when it comes.
///
/// [`get_or_compute`](super::ValueCache::get_or_compute) returns the closure's error type, so
/// that type converts from this one (`From<FillTimeout>`): done here for `String`,
/// [`std::io::Error`] (kind [`TimedOut`](std::io::ErrorKind::TimedOut)) and, through the
/// standard blanket impls, `Box<dyn Error + Send + Sync>` and `anyhow::Error`; an error enum
/// of yours takes a variant for it (`#[from] FillTimeout` with `thiserror`).
///
/// ```
/// use std::time::Duration;
/// use redis_guard::cache::{FillTimeout, MemoryCacheStore, ValueCache};
///
/// #[derive(Debug)]
/// enum LoadError { Db(String), Slow(FillTimeout) }
/// impl From<FillTimeout> for LoadError {
///     fn from(t: FillTimeout) -> Self { Self::Slow(t) }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cache = ValueCache::builder(MemoryCacheStore::new())
///     .fill_timeout(Duration::from_millis(10), Duration::from_millis(20))
///     .build()?;
/// let slow = || async {
///     tokio::time::sleep(Duration::from_secs(1)).await;
///     Ok::<u64, LoadError>(1)
/// };
/// match cache.get_or_compute("report", None, slow).await {
///     Err(LoadError::Slow(t)) => assert_eq!(t.after(), Duration::from_millis(20)),
///     other => panic!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FillTimeout {
    pub(crate) after: Duration,
}

impl FillTimeout {
    /// How long the caller waited: the hard timeout.
    #[must_use]
    pub fn after(&self) -> Duration {
        self.after
    }
}

impl fmt::Display for FillTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the cached computation did not finish within its hard fill timeout ({:?})",
            self.after
        )
    }
}

impl std::error::Error for FillTimeout {}

impl From<FillTimeout> for String {
    fn from(t: FillTimeout) -> Self {
        t.to_string()
    }
}

impl From<FillTimeout> for std::io::Error {
    fn from(t: FillTimeout) -> Self {
        Self::new(std::io::ErrorKind::TimedOut, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_cannot_work_are_named() {
        let ms = Duration::from_millis;
        let bad = [
            (ms(0), ms(5)),
            (ms(6), ms(5)),
            (ms(1), Duration::from_secs(2 * 86_400)),
        ];
        for timeouts in bad {
            let f = FailSafe {
                stale_if_error: Duration::ZERO,
                timeouts: Some(timeouts),
            };
            let err = f.problem("ValueCacheBuilder").expect("a problem");
            assert_eq!(err.setting(), Some("ValueCacheBuilder::fill_timeout"));
        }
        let long = FailSafe {
            stale_if_error: MAX_GRACE + ms(1),
            timeouts: None,
        };
        let err = long.problem("CacheLayerBuilder").expect("a problem");
        assert_eq!(err.setting(), Some("CacheLayerBuilder::stale_if_error"));
        let fine = FailSafe {
            stale_if_error: ms(1),
            timeouts: Some((ms(5), ms(5))),
        };
        assert!(fine.problem("CacheLayerBuilder").is_none());
        assert_eq!(fine.patience(true), Some(ms(5)));
        let err: std::io::Error = FillTimeout { after: ms(3) }.into();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    }
}
