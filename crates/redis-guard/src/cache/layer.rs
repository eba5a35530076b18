//! [`CacheLayer`]: the tower layer, and how it is built.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;

use super::fail_safe::FailSafe;
use super::ids::IdMemo;
use super::policy::{KeyPolicy, Lifetimes};
use super::query::QueryKey;
use super::service::Cache;
use super::shared::Shared;
use super::stampede::{Random, Stampede};
use super::store::CacheStore;
use super::tags::TagMemo;
use crate::backend::BackendError;
use crate::{ConfigError, ConfigErrorKind};

/// The default entry size limit: 1 MiB.
pub(crate) const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// How long past its freshness an entry with a validator is kept by default, to be
/// revalidated: 1 hour.
const DEFAULT_REVALIDATE: Duration = Duration::from_secs(3600);

/// Caches the responses of `GET` and `HEAD` requests in a [`CacheStore`]; see the
/// [module docs](super) for what is cached and what never is.
///
/// ```
/// # #[cfg(feature = "axum")] {
/// use axum::{Router, routing::get};
/// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
///
/// let app: Router = Router::new()
///     .route("/report", get(|| async { "expensive" }))
///     .layer(CacheLayer::new(MemoryCacheStore::new())?); // or RedisCacheStore::new(backend)
/// # }
/// # Ok::<(), redis_guard::ConfigError>(())
/// ```
///
/// Customized:
///
/// ```
/// use std::time::Duration;
/// use http::header::ACCEPT_LANGUAGE;
/// use redis_guard::cache::{CacheLayer, MemoryCacheStore, Stampede};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = CacheLayer::builder(MemoryCacheStore::new())
///     .ttl(Duration::from_secs(30))           // when the handler says nothing of freshness
///     .stale(Duration::from_secs(10))         // when it sends no stale-while-revalidate
///     .jitter(0.2)                            // up to 20% shorter, at random
///     .vary([ACCEPT_LANGUAGE])                // one entry per language
///     .body_limit(256 * 1024)
///     .stampede(Stampede::xfetch(1.0))
///     .build()?;
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone)]
pub struct CacheLayer {
    pub(crate) shared: Arc<Shared>,
}

impl_layer!(CacheLayer => Cache, shared);

impl CacheLayer {
    /// A layer with the defaults: the handler's headers say how long a response stays fresh
    /// (`Cache-Control`, `Expires`, `Age`), and one that says nothing is not stored; up to 10%
    /// jitter (shorter, never longer), no stale window, 1 MiB per entry, no `Vary` headers in the key, lock on
    /// miss.
    ///
    /// # Errors
    ///
    /// The store's settings cannot work (see [`CacheLayerBuilder::build`]).
    pub fn new(store: impl CacheStore) -> Result<Self, ConfigError> {
        Self::builder(store).build()
    }

    /// A builder: settings, then [`build`](CacheLayerBuilder::build).
    pub fn builder(store: impl CacheStore) -> CacheLayerBuilder {
        CacheLayerBuilder {
            shared: Shared {
                store: store.into_backing(),
                key: KeyPolicy::default(),
                life: Lifetimes {
                    ttl: Duration::ZERO,
                    max_ttl: Duration::from_secs(24 * 3600),
                    stale: Duration::ZERO,
                },
                jitter: 0.1,
                body_limit: DEFAULT_BODY_LIMIT,
                header: HeaderName::from_static("x-cache"),
                tags_header: HeaderName::from_static("x-cache-tags"),
                etag: false,
                stampede: Stampede::lock(),
                random: Random::default(),
                tag_space: None,
                fail_safe: FailSafe::default(),
                revalidate: DEFAULT_REVALIDATE,
                memo: TagMemo::default(),
                ids: IdMemo::default(),
            },
        }
    }

    /// Voids every entry that carries `tag` (on every replica sharing the store). No `KEYS`,
    /// no `SCAN`: the store records when the tag was invalidated (one key, one command), and
    /// an entry computed before that is a miss from then on.
    ///
    /// ```
    /// # use redis_guard::cache::{CacheLayer, MemoryCacheStore};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cache = CacheLayer::new(MemoryCacheStore::new())?;
    /// // In the handler that changed user 42:
    /// cache.invalidate_tag("user:42").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The store failed (Redis unreachable, too slow).
    pub async fn invalidate_tag(&self, tag: &str) -> Result<(), BackendError> {
        let keep = self.shared.longest_life();
        let tag = self.shared.tag_digest(tag);
        self.shared.store.0.invalidate(&tag, keep).await
    }

    /// Marks every entry that carries `tag` stale instead of voiding it (a soft purge, on
    /// every replica sharing the store): the next request for such an entry is answered at
    /// once from it (`x-cache: STALE`, `Cache-Status: …; fwd=stale; ttl=<0 or less>`) while
    /// the one request that takes its lease recomputes it in the background. Recorded as
    /// [`invalidate_tag`](Self::invalidate_tag) is, in a key of its own: one key, one
    /// command, no `KEYS`, no `SCAN`. An entry already past its stale window is not revived:
    /// it is a miss, as before.
    ///
    /// ```
    /// # use redis_guard::cache::{CacheLayer, MemoryCacheStore};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cache = CacheLayer::new(MemoryCacheStore::new())?;
    /// // The product list changed; the old page may still be shown while one request rebuilds it:
    /// cache.invalidate_tag_soft("products").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The store failed (Redis unreachable, too slow).
    pub async fn invalidate_tag_soft(&self, tag: &str) -> Result<(), BackendError> {
        let keep = self.shared.longest_life();
        let tag = self.shared.soft_tag_digest(tag);
        self.shared.store.0.invalidate(&tag, keep).await
    }
}

/// Builds a [`CacheLayer`]; [`build`](Self::build) checks the settings.
#[must_use]
pub struct CacheLayerBuilder {
    shared: Shared,
}

impl CacheLayerBuilder {
    setters! {
        /// The heuristic freshness (RFC 9111 §4.2.2): how long a response that states no
        /// expiration time (no `s-maxage`, `max-age` nor `Expires`) stays fresh. Default zero:
        /// such a response is not stored, as HTTP caches do in practice, and the handler's
        /// headers alone decide. At most [`max_ttl`](Self::max_ttl). An error status is never
        /// cached under it.
        ///
        /// ```
        /// use std::time::Duration;
        /// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
        /// // A handler that sends no `Cache-Control` is cached for 60 s.
        /// let layer = CacheLayer::builder(MemoryCacheStore::new())
        ///     .ttl(Duration::from_secs(60))
        ///     .build()?;
        /// # let _ = layer;
        /// # Ok::<(), redis_guard::ConfigError>(())
        /// ```
        pub fn ttl(ttl: Duration) => shared.life.ttl;

        /// The most any response stays fresh, and the most it is served stale after that,
        /// whatever its `Cache-Control` says (default 1 day). A tag's invalidation is
        /// remembered as long as an entry can live: this plus jitter, then the longer of this
        /// and [`stale_if_error`](Self::stale_if_error).
        pub fn max_ttl(max: Duration) => shared.life.max_ttl;

        /// How long a response is served stale (while one request refreshes it) when it
        /// carries no `stale-while-revalidate` (default zero: not at all).
        pub fn stale(stale: Duration) => shared.life.stale;

        /// Each entry stays fresh up to this fraction of its freshness shorter, at random, so
        /// that entries filled together do not expire together (default 0.1; 0 to 1). Never
        /// longer: `max-age=30` is fresh 27 to 30 s with the default.
        pub fn jitter(ratio: f64) => shared.jitter;

        /// The largest body cached (default 1 MiB). A larger one, or
        /// one announced larger, streams through uncached; at most this much is held while
        /// deciding.
        pub fn body_limit(bytes: usize) => shared.body_limit;

        /// The response header that says `HIT`, `MISS`, `STALE` or `REVALIDATED` (default
        /// `x-cache`).
        pub fn header(name: HeaderName) => shared.header;

        /// The response header a handler may list its tags in, comma-separated; the layer
        /// strips it (default `x-cache-tags`).
        pub fn tags_header(name: HeaderName) => shared.tags_header;

        /// The stampede protection (default [`Stampede::lock`]).
        pub fn stampede(stampede: Stampede) => shared.stampede;

        /// Whether an entry whose handler sent no `ETag` gets a strong one computed from its
        /// body (SHA-256), stored with it and sent on every response made from it, so that
        /// `If-None-Match` is answered `304` from the cache (default `false`: it costs a hash
        /// of each body filled, and changes what the handler sent). A handler's own `ETag`
        /// is always kept and used; see the [module docs](super#conditional-requests).
        ///
        /// ```
        /// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
        /// let layer = CacheLayer::builder(MemoryCacheStore::new()).etag(true).build()?;
        /// # let _ = layer;
        /// # Ok::<(), redis_guard::ConfigError>(())
        /// ```
        pub fn etag(on: bool) => shared.etag;

        /// Fail-safe: when the handler fails (the inner service returns an error, answers
        /// 5xx, or runs past the [`fill_timeout`](Self::fill_timeout)), the last good copy is
        /// served instead if it is at most `grace` past its freshness (`x-cache: STALE`,
        /// `Cache-Status: redis-guard; fwd=stale; ttl=<0 or less>`); past that, the error or
        /// the 5xx as without it. Entries are then kept `grace` past their freshness (at
        /// least: longer when their stale window is longer), every key still with a TTL.
        /// After a failure the copy answers every request at once, on every replica, and one
        /// request a second tries the handler again in the background (see the
        /// [module docs](super#fail-safe)). Default zero: off. At most 10 years.
        ///
        /// ```
        /// use std::time::Duration;
        /// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
        /// let layer = CacheLayer::builder(MemoryCacheStore::new())
        ///     .stale_if_error(Duration::from_secs(300)) // an origin down for 5 min goes unseen
        ///     .build()?;
        /// # let _ = layer;
        /// # Ok::<(), redis_guard::ConfigError>(())
        /// ```
        pub fn stale_if_error(grace: Duration) => shared.fail_safe.stale_if_error;

        /// How long past its freshness an entry that has a validator (an `ETag` or a
        /// `Last-Modified`) is kept so that the handler can revalidate it (default 1 hour;
        /// at most 10 years). The next request for it past its stale window is passed to the
        /// handler as a conditional request (`If-None-Match` with the stored `ETag`, else
        /// `If-Modified-Since` with the stored `Last-Modified`; RFC 9111 §4.3): a `304` freshens
        /// the stored entry (its headers updated from the `304`'s, its body kept) and the
        /// client gets the stored response; any other answer is handled as a fill. One
        /// request per key revalidates, across replicas, as for a fill; the others wait for
        /// it. Zero: an entry is dropped at the end of its stale window and recomputed in full
        /// (one inside its stale window, or kept for [`stale_if_error`](Self::stale_if_error),
        /// is revalidated all the same).
        ///
        /// ```
        /// use std::time::Duration;
        /// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
        /// let layer = CacheLayer::builder(MemoryCacheStore::new())
        ///     .revalidate(Duration::from_secs(24 * 3600)) // a version column answers 304 cheaply
        ///     .build()?;
        /// # let _ = layer;
        /// # Ok::<(), redis_guard::ConfigError>(())
        /// ```
        pub fn revalidate(window: Duration) => shared.revalidate;
    }

    /// Fill timeouts (default none: a request waits for its handler as long as it takes).
    /// A request that computes an entry, or waits for another request's computation, and
    /// has a copy it may serve instead (one inside [`stale_if_error`](Self::stale_if_error))
    /// gets that copy after `soft`, while the computation goes on in the background and its
    /// response is stored when it comes. One with no such copy waits until `hard`, then gets
    /// `504 Gateway Timeout` (the computation still goes on and fills the entry). Both count
    /// from the request's arrival, so no request answers later than `hard` (plus scheduling),
    /// whether it computed, waited, or both. The fill lock still holds: a waiting request
    /// waits until its own timeout (the [`Stampede::wait`](super::Stampede::wait) does not
    /// cut it short) and never starts a computation of its own while the lease holds. Both
    /// above zero, `soft` at most `hard`, `hard` at most a day.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
    /// let layer = CacheLayer::builder(MemoryCacheStore::new())
    ///     .stale_if_error(Duration::from_secs(300))
    ///     .fill_timeout(Duration::from_millis(200), Duration::from_secs(5))
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    pub fn fill_timeout(mut self, soft: Duration, hard: Duration) -> Self {
        self.shared.fail_safe.timeouts = Some((soft, hard));
        self
    }

    /// Request headers whose values go into the key: one entry per combination (e.g.
    /// `Accept-Encoding`, `Accept-Language`). A response whose own `Vary` names a header not
    /// listed here is not cached. Listing a credential header (`Cookie`, `Authorization`)
    /// caches per credential.
    ///
    /// Every request input the handler reads must be in the key: the method, host, path and
    /// query are; a header the handler reads is only if it is listed here (or the handler
    /// must not read it).
    pub fn vary(self, headers: impl IntoIterator<Item = HeaderName>) -> Self {
        self.keyed(|k| k.vary.extend(headers))
    }

    /// The request headers that carry credentials: a request with one of them passes
    /// uncached, unless the header is in [`vary`](Self::vary) (default `Authorization`,
    /// `Cookie`, `Proxy-Authorization`). The list replaces the default: keep those you still
    /// want. Add the header a [`Transport::header`](crate::session::Transport::header)
    /// session travels in when the cache does not sit inside the session layer of a layer
    /// that marks it (see the [module docs](super#cache-and-sessions)).
    ///
    /// ```
    /// use http::header::{AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION};
    /// use http::HeaderName;
    /// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
    ///
    /// let layer = CacheLayer::builder(MemoryCacheStore::new())
    ///     .credential_headers([
    ///         AUTHORIZATION,
    ///         COOKIE,
    ///         PROXY_AUTHORIZATION,
    ///         HeaderName::from_static("x-api-key"),
    ///     ])
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    pub fn credential_headers(self, headers: impl IntoIterator<Item = HeaderName>) -> Self {
        self.keyed(|k| k.credentials = headers.into_iter().collect())
    }

    /// Caches requests that carry a `Cookie` (default: they pass uncached), with cookies
    /// left out of the key: only for routes whose responses never depend on cookies. A
    /// request that carried a [`SessionLayer`](crate::session::SessionLayer)'s session never
    /// fills an entry all the same (see the [module docs](super#cache-and-sessions)).
    pub fn ignore_cookies(self, on: bool) -> Self {
        self.keyed(|k| k.ignore_cookies = on)
    }

    /// Whether the host (the URI's authority, else the `Host` header, lower case) is in the
    /// key (default `true`): two sites served by one app never share a page. Turn it off
    /// only when every host serves the same content.
    pub fn key_host(self, on: bool) -> Self {
        self.keyed(|k| k.host = on)
    }

    /// How the query string enters the key (default [`QueryKey::exact`]): sorted, or only
    /// some parameters, to stop spellings of one query from making new entries.
    pub fn query(self, query: QueryKey) -> Self {
        self.keyed(|k| k.query = query)
    }

    /// A name for this layer's entries (default none). Layers that key differently never
    /// share entries; two layers with the same settings on one store do, for one request,
    /// unless they are named apart. Replicas share entries by using the same name.
    pub fn namespace(self, name: impl Into<String>) -> Self {
        self.keyed(|k| k.name = name.into())
    }

    /// Changes the key settings, then seals them (sorted lists, the namespace).
    fn keyed(mut self, change: impl FnOnce(&mut KeyPolicy)) -> Self {
        change(&mut self.shared.key);
        self.shared.key.seal();
        self
    }

    /// Draws the random numbers of the jitter and of XFetch from `random` (uniform in
    /// (0, 1]; values outside are clamped), e.g. a seeded generator or a constant in tests.
    ///
    /// ```
    /// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
    /// let layer = CacheLayer::builder(MemoryCacheStore::new()).random(|| 0.5).build();
    /// # let _ = layer;
    /// ```
    pub fn random(mut self, random: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.shared.random = Random(Arc::new(random));
        self
    }

    /// Checks the settings and builds the layer.
    ///
    /// # Errors
    ///
    /// A zero `max_ttl`, a `ttl` above `max_ttl`, a jitter outside 0..=1, a zero body
    /// limit, a `revalidate` window above 10 years, a stampede setting that cannot work, a `stale_if_error` above 10 years, fill
    /// timeouts that cannot work, or store settings that cannot work.
    ///
    /// ```
    /// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
    /// let err = CacheLayer::builder(MemoryCacheStore::new()).jitter(3.0).build().unwrap_err();
    /// assert!(err.to_string().contains("jitter 3"));
    /// ```
    pub fn build(self) -> Result<CacheLayer, ConfigError> {
        let s = &self.shared;
        let invalid = |kind, message: String, setting, value: String| {
            Err(ConfigError::new(kind, message)
                .with_setting(setting)
                .with_value(value)
                .within("cache layer"))
        };
        if let Some(problem) = s.store.0.check() {
            return Err(problem.within("cache store"));
        }
        let (ttl, max_ttl) = (s.life.ttl, s.life.max_ttl);
        let ten_years = Duration::from_secs(10 * 365 * 86_400);
        let ttl_problem = if max_ttl.is_zero() {
            Some(format!("max_ttl {max_ttl:?} must be positive"))
        } else if ttl > max_ttl || max_ttl > ten_years {
            Some(format!(
                "ttl {ttl:?} must be at most max_ttl {max_ttl:?}, at most 10 years"
            ))
        } else {
            None
        };
        if let Some(message) = ttl_problem {
            // Blamed: a zero or too long max_ttl; else the ttl above it.
            let (setting, value) = if !(max_ttl.is_zero() || max_ttl > ten_years) {
                ("CacheLayerBuilder::ttl", ttl)
            } else {
                ("CacheLayerBuilder::max_ttl", max_ttl)
            };
            return invalid(
                ConfigErrorKind::Duration,
                message,
                setting,
                format!("{value:?}"),
            );
        }
        if !(0.0..=1.0).contains(&s.jitter) {
            return invalid(
                ConfigErrorKind::Range,
                format!("jitter {} must be within 0..=1", s.jitter),
                "CacheLayerBuilder::jitter",
                s.jitter.to_string(),
            );
        }
        if s.body_limit == 0 {
            return invalid(
                ConfigErrorKind::Range,
                "body_limit 0 would cache nothing".to_owned(),
                "CacheLayerBuilder::body_limit",
                "0".to_owned(),
            );
        }
        if s.revalidate > ten_years {
            return invalid(
                ConfigErrorKind::Duration,
                format!("revalidate {:?} must be at most 10 years", s.revalidate),
                "CacheLayerBuilder::revalidate",
                format!("{:?}", s.revalidate),
            );
        }
        if let Some(problem) = s.stampede.problem() {
            return Err(problem.within("cache layer"));
        }
        if let Some(problem) = s.fail_safe.problem("CacheLayerBuilder") {
            return Err(problem.within("cache layer"));
        }
        Ok(CacheLayer {
            shared: Arc::new(self.shared),
        })
    }
}

impl std::fmt::Debug for CacheLayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheLayerBuilder")
            .field("shared", &self.shared)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCacheStore;

    /// Each setting that cannot work is named in the error, with its value.
    #[test]
    fn errors_name_the_setting_and_its_value() {
        type Set = fn(CacheLayerBuilder) -> CacheLayerBuilder;
        let cases: [(Set, _, _, _, _); 6] = [
            (
                |b| b.max_ttl(Duration::ZERO),
                ConfigErrorKind::Duration,
                "CacheLayerBuilder::max_ttl",
                "0ns",
                "cache layer: max_ttl 0ns must be positive",
            ),
            (
                |b| b.ttl(Duration::from_secs(90_000)),
                ConfigErrorKind::Duration,
                "CacheLayerBuilder::ttl",
                "90000s",
                "cache layer: ttl 90000s must be at most max_ttl 86400s, at most 10 years",
            ),
            (
                |b| b.jitter(3.0),
                ConfigErrorKind::Range,
                "CacheLayerBuilder::jitter",
                "3",
                "cache layer: jitter 3 must be within 0..=1",
            ),
            (
                |b| b.revalidate(Duration::from_secs(11 * 365 * 86_400)),
                ConfigErrorKind::Duration,
                "CacheLayerBuilder::revalidate",
                "346896000s",
                "cache layer: revalidate 346896000s must be at most 10 years",
            ),
            (
                |b| b.body_limit(0),
                ConfigErrorKind::Range,
                "CacheLayerBuilder::body_limit",
                "0",
                "cache layer: body_limit 0 would cache nothing",
            ),
            (
                |b| b.stampede(Stampede::lock().lease(Duration::ZERO)),
                ConfigErrorKind::Duration,
                "Stampede::lease",
                "0ns",
                "cache layer: lease 0ns is outside 1 ms..=1 day",
            ),
        ];
        for (set, kind, setting, value, message) in cases {
            let err = set(CacheLayer::builder(MemoryCacheStore::new()))
                .build()
                .unwrap_err();
            assert_eq!(err.to_string(), message);
            assert_eq!(err.kind(), kind, "{err}");
            assert_eq!(err.setting(), Some(setting), "{err}");
            assert_eq!(err.value(), Some(value), "{err}");
        }
    }
}
