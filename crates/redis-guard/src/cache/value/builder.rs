//! [`ValueCacheBuilder`]: the settings of a [`ValueCache`], checked by `build`.

use std::sync::Arc;
use std::time::Duration;

use super::{DEFAULT_MAX_TTL, Inner, MAX_TTL, ValueCache};
use crate::cache::policy::Lifetimes;
use crate::cache::shared::Shared;
use crate::cache::stampede::{Random, Stampede};
use crate::{ConfigError, ConfigErrorKind};

/// Builds a [`ValueCache`]; [`build`](Self::build) checks the settings.
///
/// ```
/// use std::time::Duration;
/// use redis_guard::cache::{MemoryCacheStore, Stampede, ValueCache};
///
/// let cache = ValueCache::builder(MemoryCacheStore::new()) // or RedisCacheStore::new(backend)
///     .ttl(Duration::from_secs(300))          // when a call passes `None`
///     .stale(Duration::from_secs(30))         // served stale while one caller recomputes
///     .jitter(0.2)                            // up to 20% longer, at random
///     .negative_ttl(Duration::from_secs(5))   // remember "not found" for 5 s
///     .stampede(Stampede::xfetch(1.0))
///     .namespace("users")
///     .build()?;
/// # let _ = cache;
/// # Ok::<(), redis_guard::ConfigError>(())
/// ```
#[must_use]
pub struct ValueCacheBuilder {
    pub(super) shared: Shared,
    pub(super) namespace: String,
    pub(super) negative: Option<Duration>,
    /// Set with [`max_ttl`](Self::max_ttl); else 1 day, or the `ttl` or `negative_ttl` when
    /// longer.
    pub(super) max_ttl: Option<Duration>,
}

impl ValueCacheBuilder {
    setters! {
        /// How long a value stays fresh when a call passes `None` as its TTL (default 60 s;
        /// more than zero, at most 10 years).
        pub fn ttl(ttl: Duration) => shared.life.ttl;

        /// How long a value is served stale after its TTL, while one caller recomputes it in
        /// the background (default zero: not at all). Applies to `get_or_compute` and `set`.
        pub fn stale(stale: Duration) => shared.life.stale;

        /// Each value stays fresh up to this fraction of its TTL longer, at random, so that
        /// values filled together do not expire together (default 0.1; 0 to 1).
        pub fn jitter(ratio: f64) => shared.jitter;

        /// The stampede protection (default [`Stampede::lock`]).
        pub fn stampede(stampede: Stampede) => shared.stampede;

        /// Fail-safe: when the closure of `get_or_compute` returns `Err` (or runs past the
        /// [`fill_timeout`](Self::fill_timeout)), the last good value is returned instead if
        /// it is at most `grace` past its TTL; past that, the error as without it. Values are
        /// then kept `grace` past their TTL (at least: longer when the
        /// [`stale`](Self::stale) window is longer), every key still with a TTL. After a
        /// failure the last good value is returned to every caller at once, on every
        /// replica, and one caller a second runs the closure again in a spawned task (see the
        /// [module docs](crate::cache#fail-safe)). Default zero: off. At most 10 years.
        ///
        /// ```
        /// use std::time::Duration;
        /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
        /// let cache = ValueCache::builder(MemoryCacheStore::new())
        ///     .stale_if_error(Duration::from_secs(300)) // a database down for 5 min goes unseen
        ///     .build()?;
        /// # let _ = cache;
        /// # Ok::<(), redis_guard::ConfigError>(())
        /// ```
        pub fn stale_if_error(grace: Duration) => shared.fail_safe.stale_if_error;
    }

    /// Fill timeouts of `get_or_compute` (default none: a caller waits for the closure as
    /// long as it takes). A caller that computes, or waits for another caller's
    /// computation, and has a value it may return instead (one inside
    /// [`stale_if_error`](Self::stale_if_error)) gets that value after `soft`, while the
    /// computation goes on in a spawned task and its value is stored when it comes. One with
    /// no such value waits until `hard`, then gets the closure's error type made from a
    /// [`FillTimeout`](crate::cache::FillTimeout) (the computation still goes on and fills
    /// the key). Both count from the call's start, so no caller returns later than `hard`
    /// (plus scheduling), whether it computed, waited, or both. The fill lock still holds: a
    /// waiting caller waits until its own timeout (the
    /// [`Stampede::wait`](crate::cache::Stampede::wait) does not cut it short) and never
    /// starts a computation of its own while the lease holds. Both above zero, `soft` at
    /// most `hard`, `hard` at most a day.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
    /// let cache = ValueCache::builder(MemoryCacheStore::new())
    ///     .stale_if_error(Duration::from_secs(300))
    ///     .fill_timeout(Duration::from_millis(100), Duration::from_secs(2))
    ///     .build()?;
    /// # let _ = cache;
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    pub fn fill_timeout(mut self, soft: Duration, hard: Duration) -> Self {
        self.shared.fail_safe.timeouts = Some((soft, hard));
        self
    }

    /// The longest TTL a value gets (default 1 day, or the [`ttl`](Self::ttl) or
    /// [`negative_ttl`](Self::negative_ttl) when one is longer; at most 10 years): a call of
    /// `get_or_compute` or `set` that asks for more gets this much. It also bounds how long a
    /// tag's invalidation is remembered (its key's TTL in Redis): as long as a value under the
    /// tag can live, `max_ttl` plus jitter plus the longer of the
    /// [`stale`](Self::stale) window and [`stale_if_error`](Self::stale_if_error), and no
    /// longer. [`add`](ValueCache::add) keeps its flag exactly its own TTL, whatever this says.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
    /// let cache = ValueCache::builder(MemoryCacheStore::new())
    ///     .max_ttl(Duration::from_secs(7 * 86_400)) // values may be kept a week
    ///     .build()?;
    /// # let _ = cache;
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    pub fn max_ttl(mut self, max: Duration) -> Self {
        self.max_ttl = Some(max);
        self
    }

    /// How long `get_or_compute` keeps a computed value that is JSON `null` (an `Ok(None)`:
    /// "not found"), whatever the call's TTL, so that lookups of a missing row do not all
    /// reach the database (default: such a value is returned and not kept; more than zero,
    /// at most 10 years). The closure's errors are never kept, whatever this says.
    pub fn negative_ttl(mut self, ttl: Duration) -> Self {
        self.negative = Some(ttl);
        self
    }

    /// A name for this cache's keys (default none): two value caches on one store share
    /// values when they share a name (replicas do), and never otherwise.
    pub fn namespace(mut self, name: impl Into<String>) -> Self {
        self.namespace = name.into();
        self
    }

    /// Draws the random numbers of the jitter and of XFetch from `random` (uniform in
    /// (0, 1]; values outside are clamped), e.g. a constant in tests.
    ///
    /// ```
    /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
    /// let cache = ValueCache::builder(MemoryCacheStore::new()).random(|| 0.5).build();
    /// # let _ = cache;
    /// ```
    pub fn random(mut self, random: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.shared.random = Random(Arc::new(random));
        self
    }

    /// Checks the settings and builds the cache.
    ///
    /// # Errors
    ///
    /// A `ttl` or a `negative_ttl` of zero or above 10 years (or above a `max_ttl` that is
    /// set), a `max_ttl` of zero or above 10 years, a `stale` window above 10 years, a jitter
    /// outside 0..=1, a stampede setting that cannot work, a `stale_if_error`
    /// above 10 years, fill timeouts that cannot work, or store settings that cannot work.
    ///
    /// ```
    /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
    /// let err = ValueCache::builder(MemoryCacheStore::new()).jitter(3.0).build().unwrap_err();
    /// assert!(err.to_string().contains("jitter 3"));
    /// ```
    pub fn build(self) -> Result<ValueCache, ConfigError> {
        if let Some(problem) = self.problem() {
            return Err(problem.within("value cache"));
        }
        let Self {
            mut shared,
            namespace,
            negative,
            max_ttl,
        } = self;
        shared.life.max_ttl = max_ttl.unwrap_or_else(|| {
            let longest = shared.life.ttl.max(negative.unwrap_or_default());
            DEFAULT_MAX_TTL.max(longest)
        });
        Ok(ValueCache {
            inner: Arc::new(Inner {
                namespace: crate::cache::store::digest([b"rg-value-1", namespace.as_bytes()]),
                name: namespace,
                negative,
                shared: Arc::new(shared),
            }),
        })
    }

    fn problem(&self) -> Option<ConfigError> {
        let s = &self.shared;
        if let Some(problem) = s.store.0.check() {
            return Some(problem.within("cache store"));
        }
        let Lifetimes { ttl, stale, .. } = s.life;
        let durations = [
            ("ValueCacheBuilder::ttl", "ttl", Some(ttl), false),
            ("ValueCacheBuilder::stale", "stale", Some(stale), true),
            (
                "ValueCacheBuilder::negative_ttl",
                "negative_ttl",
                self.negative,
                false,
            ),
            ("ValueCacheBuilder::max_ttl", "max_ttl", self.max_ttl, false),
        ];
        for (setting, name, value, zero_ok) in durations {
            let Some(d) = value else { continue };
            if (d.is_zero() && !zero_ok) || d > MAX_TTL {
                let within = if zero_ok {
                    "at most"
                } else {
                    "above 0 and at most"
                };
                return Some(
                    ConfigError::new(
                        ConfigErrorKind::Duration,
                        format!("{name} {d:?} must be {within} 10 years"),
                    )
                    .with_setting(setting)
                    .with_debug_value(d),
                );
            }
        }
        if let Some(max) = self.max_ttl {
            let over = [
                ("ValueCacheBuilder::ttl", "ttl", Some(ttl)),
                (
                    "ValueCacheBuilder::negative_ttl",
                    "negative_ttl",
                    self.negative,
                ),
            ];
            for (setting, name, value) in over {
                if let Some(d) = value.filter(|d| *d > max) {
                    return Some(
                        ConfigError::new(
                            ConfigErrorKind::Duration,
                            format!("{name} {d:?} must be at most max_ttl {max:?}"),
                        )
                        .with_setting(setting)
                        .with_debug_value(d),
                    );
                }
            }
        }
        if !(0.0..=1.0).contains(&s.jitter) {
            return Some(
                ConfigError::new(
                    ConfigErrorKind::Range,
                    format!("jitter {} must be within 0..=1", s.jitter),
                )
                .with_setting("ValueCacheBuilder::jitter")
                .with_value(s.jitter),
            );
        }
        s.stampede
            .problem()
            .or_else(|| s.fail_safe.problem("ValueCacheBuilder"))
    }
}

impl std::fmt::Debug for ValueCacheBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueCacheBuilder")
            .field("store", &self.shared.store)
            .field("life", &self.shared.life)
            .field("jitter", &self.shared.jitter)
            .field("stampede", &self.shared.stampede)
            .field("namespace", &self.namespace)
            .field("negative_ttl", &self.negative)
            .field("max_ttl", &self.max_ttl)
            .field("fail_safe", &self.shared.fail_safe)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCacheStore;

    /// Each setting that cannot work is named, with its value.
    #[test]
    fn errors_name_the_setting_and_its_value() {
        type Set = fn(ValueCacheBuilder) -> ValueCacheBuilder;
        let ten_years = Duration::from_secs(10 * 365 * 86_400);
        let cases: [(Set, _, _); 5] = [
            (
                |b| b.ttl(Duration::ZERO),
                "ValueCacheBuilder::ttl",
                "value cache: ttl 0ns must be above 0 and at most 10 years",
            ),
            (
                |b| b.negative_ttl(Duration::ZERO),
                "ValueCacheBuilder::negative_ttl",
                "value cache: negative_ttl 0ns must be above 0 and at most 10 years",
            ),
            (
                |b| b.stale(Duration::from_secs(10 * 365 * 86_400 + 1)),
                "ValueCacheBuilder::stale",
                "value cache: stale 315360001s must be at most 10 years",
            ),
            (
                |b| b.jitter(-0.5),
                "ValueCacheBuilder::jitter",
                "value cache: jitter -0.5 must be within 0..=1",
            ),
            (
                |b| b.stampede(Stampede::xfetch(0.0)),
                "Stampede::xfetch",
                "value cache: XFetch beta 0 must be finite and above 0",
            ),
        ];
        for (set, setting, message) in cases {
            let err = set(ValueCache::builder(MemoryCacheStore::new()))
                .build()
                .unwrap_err();
            assert_eq!(err.to_string(), message);
            assert_eq!(err.setting(), Some(setting), "{err}");
        }
        let fine = ValueCache::builder(MemoryCacheStore::new())
            .ttl(ten_years)
            .stale(Duration::ZERO)
            .negative_ttl(ten_years)
            .build();
        assert!(fine.is_ok());
        let err = ValueCache::builder(MemoryCacheStore::new())
            .ttl(Duration::from_secs(120))
            .max_ttl(Duration::from_secs(60))
            .build()
            .unwrap_err();
        assert_eq!(err.setting(), Some("ValueCacheBuilder::ttl"), "{err}");
        assert!(err.to_string().contains("at most max_ttl 60s"), "{err}");
        let err = ValueCache::builder(MemoryCacheStore::new())
            .max_ttl(Duration::ZERO)
            .build()
            .unwrap_err();
        assert_eq!(err.setting(), Some("ValueCacheBuilder::max_ttl"), "{err}");
    }
}
