//! [`ValueCache`]: cache-aside for values (`remember`, `get_or_set`), typed
//! through serde, on the response cache's stores and with its stampede protection.

mod builder;
mod flow;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use builder::ValueCacheBuilder;
use flow::{Fill, parse, value_write};

use super::lookup::{Call, Look};
use super::policy::{KeyPolicy, Lifetimes};
use super::shared::Shared;
use super::stampede::{Random, Stampede};
use super::store::{CacheStore, NOW, digest};
use crate::ConfigError;
use crate::backend::BackendError;

/// The longest TTL and stale window a value cache takes: 10 years.
const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 86_400);

/// The longest TTL a value gets unless the builder says otherwise: a day.
const DEFAULT_MAX_TTL: Duration = Duration::from_secs(86_400);

/// A cache of values in a [`CacheStore`] (Redis, shared by every replica, or this process):
/// [`get_or_compute`](Self::get_or_compute) is Laravel's `Cache::remember` and Django's
/// `cache.get_or_set`, with one computation for a crowd of callers on every replica. See the
/// [module docs](super#value-cache).
///
/// ```
/// use std::time::Duration;
/// use redis_guard::cache::{MemoryCacheStore, ValueCache};
///
/// # #[derive(serde::Serialize, serde::Deserialize)] struct User { name: String }
/// # async fn find_user(id: u64) -> Result<Option<User>, std::io::Error> { Ok(None) }
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cache = ValueCache::new(MemoryCacheStore::new())?; // or RedisCacheStore::new(backend)
/// let user: Option<User> = cache
///     .get_or_compute("user:7", Duration::from_secs(300), || async { find_user(7).await })
///     .await?;
/// # let _ = user; Ok(()) }
/// ```
///
/// Clones are cheap (an `Arc`) and share the store and the settings.
#[derive(Clone)]
pub struct ValueCache {
    inner: Arc<Inner>,
}

struct Inner {
    /// The layer's settings (store, lifetimes, jitter, stampede, random numbers).
    shared: Arc<Shared>,
    /// The digest of what the keys mean and of the cache's name.
    namespace: String,
    name: String,
    negative: Option<Duration>,
}

impl ValueCache {
    /// A cache with the defaults: values live 60 s when a call passes `None`, 10% jitter, no
    /// stale window, lock on miss, no negative caching.
    ///
    /// # Errors
    ///
    /// The store's settings cannot work (see [`ValueCacheBuilder::build`]).
    pub fn new(store: impl CacheStore) -> Result<Self, ConfigError> {
        Self::builder(store).build()
    }

    /// A builder: settings, then [`build`](ValueCacheBuilder::build).
    pub fn builder(store: impl CacheStore) -> ValueCacheBuilder {
        ValueCacheBuilder {
            shared: Shared {
                store: store.into_backing(),
                key: KeyPolicy::default(),
                life: Lifetimes {
                    ttl: Duration::from_secs(60),
                    max_ttl: MAX_TTL,
                    stale: Duration::ZERO,
                },
                jitter: 0.1,
                body_limit: usize::MAX,
                header: http::HeaderName::from_static("x-cache"),
                tags_header: http::HeaderName::from_static("x-cache-tags"),
                etag: false,
                stampede: Stampede::lock(),
                random: Random::default(),
                tag_space: Some("rg-value-tag"),
                fail_safe: super::fail_safe::FailSafe::default(),
                revalidate: Duration::ZERO,
                memo: super::tags::TagMemo::default(),
                ids: super::ids::IdMemo::default(),
            },
            namespace: String::new(),
            negative: None,
            max_ttl: None,
        }
    }

    /// The value under `key`, computed by `compute` when it is missing: one computation for
    /// every concurrent caller on every replica sharing the store (lock on miss), or early
    /// (XFetch); a stale value (inside [`stale`](ValueCacheBuilder::stale)) is returned at once
    /// while one caller recomputes it in a spawned task. `ttl` (`None`: the builder's
    /// [`ttl`](ValueCacheBuilder::ttl), 60 s; at most the builder's
    /// [`max_ttl`](ValueCacheBuilder::max_ttl), 1 day by default) plus jitter is how long it
    /// stays fresh.
    ///
    /// The closure's error is returned to this caller and never cached (callers waiting for
    /// this computation take the lease in turn and compute for themselves). A value that is
    /// JSON `null` is kept only with a [`negative_ttl`](ValueCacheBuilder::negative_ttl). The
    /// store failing never fails the call: it computes and returns, uncached, logged at
    /// `warn`. A value under the key that is not a `T` (another type, JSON that no longer
    /// decodes after a type change) is a miss, overwritten by the fill.
    ///
    /// The closure and its future are `Send + 'static` (the background refresh runs them in
    /// a task): move what they use into them (`move || async move { … }`, with clones of
    /// `Arc`s or pools). The error is `Debug`: a background refresh that fails has no caller
    /// to return it to, so it is logged at `warn` (and the stale value stays until its window
    /// ends). A zero `ttl` makes a value stale at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cache = ValueCache::new(MemoryCacheStore::new())?;
    /// let id = 7;
    /// let name: String = cache
    ///     .get_or_compute(format!("user:{id}:name"), None, move || async move {
    ///         Ok::<_, std::io::Error>(format!("user {id}")) // the database lookup
    ///     })
    ///     .await?;
    /// assert_eq!(name, "user 7");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The closure's error, when it ran for this caller and failed.
    pub async fn get_or_compute<T, E, F, Fut>(
        &self,
        key: impl AsRef<str>,
        ttl: impl Into<Option<Duration>>,
        compute: F,
    ) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: fmt::Debug + Send + 'static + From<super::FillTimeout>,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.get_or_compute_tagged(key, ttl, [""; 0], compute).await
    }

    /// As [`get_or_compute`](Self::get_or_compute), the value carrying `tags`:
    /// [`invalidate_tag`](Self::invalidate_tag) voids it (Laravel's `Cache::tags([…])`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cache = ValueCache::new(MemoryCacheStore::new())?;
    /// let load = || async { Ok::<_, std::io::Error>(vec![1, 2, 3]) };
    /// let ids: Vec<u64> = cache
    ///     .get_or_compute_tagged("team:3:members", Duration::from_secs(600), ["team:3"], load)
    ///     .await?;
    /// cache.invalidate_tag("team:3").await?; // the next call computes again
    /// # let _ = ids; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`get_or_compute`](Self::get_or_compute).
    pub async fn get_or_compute_tagged<T, E, F, Fut>(
        &self,
        key: impl AsRef<str>,
        ttl: impl Into<Option<Duration>>,
        tags: impl IntoIterator<Item = impl Into<String>>,
        compute: F,
    ) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: fmt::Debug + Send + 'static + From<super::FillTimeout>,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let mut tags: Vec<String> = tags.into_iter().map(Into::into).collect();
        tags.sort();
        tags.dedup();
        let fill = Fill {
            ttl: self.ttl(ttl.into()),
            tags,
            negative: self.inner.negative,
        };
        flow::get_or_compute(self.call(key.as_ref()), fill, compute).await
    }

    /// The value under `key` while it is fresh, if it is a `T` (`None` when absent, stale,
    /// invalidated by a tag, or of another type).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cache = ValueCache::new(MemoryCacheStore::new())?;
    /// cache.set("greeting", &"hello", Duration::from_secs(60)).await?;
    /// assert_eq!(cache.get::<String>("greeting").await?.as_deref(), Some("hello"));
    /// cache.forget("greeting").await?;
    /// assert_eq!(cache.get::<String>("greeting").await?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The store failed (Redis unreachable, too slow).
    pub async fn get<T: DeserializeOwned>(
        &self,
        key: impl AsRef<str>,
    ) -> Result<Option<T>, BackendError> {
        let call = self.call(key.as_ref());
        match call.look().await {
            Look::Fresh(entry, _) => Ok(parse(&call.digest, &entry)),
            Look::Failed(e) => Err(e),
            Look::Stale(..)
            | Look::Expired(..)
            | Look::Failing { .. }
            | Look::Pass(_)
            | Look::Absent(_) => Ok(None),
        }
    }

    /// Stores `value` under `key` for `ttl` (plus jitter; `None`: the builder's
    /// [`ttl`](ValueCacheBuilder::ttl); at most its [`max_ttl`](ValueCacheBuilder::max_ttl)),
    /// then its stale window, replacing what it held (a
    /// `null` too). The value carries no tags. See [`get`](Self::get).
    ///
    /// # Errors
    ///
    /// The store failed; [`BackendError::Encode`] when the value has no JSON form.
    pub async fn set<T: Serialize + ?Sized>(
        &self,
        key: impl AsRef<str>,
        value: &T,
        ttl: impl Into<Option<Duration>>,
    ) -> Result<(), BackendError> {
        let (call, write) = self.write(key.as_ref(), value, ttl.into(), true)?;
        call.shared.store.0.write(call.key(), write).await.map(drop)
    }

    /// Stores `value` under `key` for exactly `ttl` only if the key holds nothing (`SET NX`
    /// with a TTL, in one command): `true` for the first caller only, on every replica
    /// sharing the store. No jitter, no stale window, and not kept for
    /// [`stale_if_error`](ValueCacheBuilder::stale_if_error): once `ttl` has passed, `add`
    /// succeeds again (at most 10 years). An idempotency flag ("send the invoice e-mail
    /// once").
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cache = ValueCache::new(MemoryCacheStore::new())?;
    /// let day = Duration::from_secs(86_400);
    /// if cache.add("invoice:991:mailed", &true, day).await? {
    ///     // only one worker of every replica gets here within the day
    /// }
    /// assert!(!cache.add("invoice:991:mailed", &true, day).await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The store failed; [`BackendError::Encode`] when the value has no JSON form.
    pub async fn add<T: Serialize + ?Sized>(
        &self,
        key: impl AsRef<str>,
        value: &T,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let (call, write) = self.write(key.as_ref(), value, Some(ttl), false)?;
        call.shared.store.0.add(&call.digest, write).await
    }

    /// Deletes the value under `key` (Laravel's `Cache::forget`).
    ///
    /// # Errors
    ///
    /// The store failed.
    pub async fn forget(&self, key: impl AsRef<str>) -> Result<(), BackendError> {
        let call = self.call(key.as_ref());
        call.shared.store.0.remove(&call.digest).await
    }

    /// Voids every value that carries `tag` (on every replica sharing the store): as
    /// [`CacheLayer::invalidate_tag`](super::CacheLayer::invalidate_tag), one key and one
    /// command, no `KEYS`, no `SCAN`. A value computed while the tag was being invalidated is
    /// not returned afterwards. The tags of values are not the layer's: a
    /// [`CacheLayer`](super::CacheLayer)'s `invalidate_tag` on the same store leaves values
    /// alone (and this leaves its responses alone).
    ///
    /// # Errors
    ///
    /// The store failed.
    pub async fn invalidate_tag(&self, tag: &str) -> Result<(), BackendError> {
        let shared = &self.inner.shared;
        let tag = shared.tag_digest(tag);
        shared.store.0.invalidate(&tag, self.longest_life()).await
    }

    /// Marks every value that carries `tag` stale instead of voiding it (a soft purge, on
    /// every replica sharing the store): the next `get_or_compute` of such a value returns
    /// it at once while the one caller that takes its lease recomputes it in a spawned task
    /// ([`get`](Self::get), which returns fresh values only, no longer returns it). One key,
    /// one command, no `KEYS`, no `SCAN`. A value already past its stale window is not
    /// revived.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::cache::{MemoryCacheStore, ValueCache};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cache = ValueCache::new(MemoryCacheStore::new())?;
    /// let load = || async { Ok::<_, std::io::Error>(3_u64) };
    /// let n: u64 = cache.get_or_compute_tagged("count", None, ["team:3"], load).await?;
    /// cache.invalidate_tag_soft("team:3").await?;
    /// let again = || async { Ok::<_, std::io::Error>(4_u64) };
    /// // Returned at once (the old value) while the new one is computed in the background.
    /// let stale: u64 = cache.get_or_compute_tagged("count", None, ["team:3"], again).await?;
    /// assert_eq!((n, stale), (3, 3));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The store failed.
    pub async fn invalidate_tag_soft(&self, tag: &str) -> Result<(), BackendError> {
        let shared = &self.inner.shared;
        let tag = shared.soft_tag_digest(tag);
        shared.store.0.invalidate(&tag, self.longest_life()).await
    }

    /// How long a tag's invalidation is remembered: the longest a value under it lives
    /// (`max_ttl` plus jitter, then the longer of the stale window and `stale_if_error`), and
    /// no longer.
    fn longest_life(&self) -> Duration {
        let shared = &self.inner.shared;
        let after = shared.life.stale.max(shared.fail_safe.stale_if_error);
        shared.life.max_ttl.mul_f64(1.0 + shared.jitter) + after
    }

    /// One call's work on `key`: the settings and the key's digest.
    fn call(&self, key: &str) -> Call {
        Call {
            shared: Arc::clone(&self.inner.shared),
            digest: digest([self.inner.namespace.as_bytes(), key.as_bytes()]).into(),
            group: None,
            read: None,
        }
    }

    /// A call's TTL: the builder's when `None`, at most `max_ttl`.
    fn ttl(&self, ttl: Option<Duration>) -> Duration {
        let shared = &self.inner.shared;
        ttl.unwrap_or(shared.life.ttl).min(shared.life.max_ttl)
    }

    /// The write of `set` (`lasting`: jitter and stale window) or `add` (exactly `ttl`).
    fn write<T: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &T,
        ttl: Option<Duration>,
        lasting: bool,
    ) -> Result<(Call, super::store::Write), BackendError> {
        let json = serde_json::to_vec(value).map_err(|e| BackendError::Encode(Arc::new(e)))?;
        let call = self.call(key);
        // A flag carries no tags: its TTL is its own, up to 10 years.
        let ttl = match ttl {
            Some(ttl) if !lasting => ttl.min(MAX_TTL),
            ttl => self.ttl(ttl),
        };
        let mut write = value_write(&call, &[], &json, ttl, call.shared.life.stale, NOW);
        if !lasting {
            // A flag lives exactly its TTL: `get` says it is gone then, and `add` agrees. No
            // jitter, no stale window, no `stale_if_error` (a flag never stands in for a
            // failing computation).
            write.fresh = ttl;
            write.stale = Duration::ZERO;
            write.grace = Duration::ZERO;
        }
        Ok((call, write))
    }
}

impl fmt::Debug for ValueCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.inner.shared;
        f.debug_struct("ValueCache")
            .field("store", &s.store)
            .field("ttl", &s.life.ttl)
            .field("stale", &s.life.stale)
            .field("jitter", &s.jitter)
            .field("stampede", &s.stampede)
            .field("namespace", &self.inner.name)
            .field("negative_ttl", &self.inner.negative)
            .field("max_ttl", &s.life.max_ttl)
            .finish()
    }
}
