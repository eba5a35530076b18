//! Helpers of the caches' fail-safe suites: [`Gate`], where a test's handler (or
//! computation) waits, so that a test can hold a computation in flight and count who reached
//! it; [`within`], a bounded wait; [`assert_kept`], how long the one entry lives;
//! [`frozen_cache`] and [`frozen_value_cache`], caches whose clock moves only with the test.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;

use redis_guard::cache::{
    CacheLayer, CacheLayerBuilder, RedisCacheStore, ValueCache, ValueCacheBuilder,
};

use crate::{Harness, Kind};

/// How long a bounded wait of the suites lasts before it fails the test: long, so that a
/// loaded machine never fails it, and only a hang does.
const BOUND: Duration = Duration::from_secs(30);

/// How late past a deadline of the cache (a fill timeout) an answer may come: scheduling and
/// a few store round trips on a loaded machine, far less than any wait the cache could add.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// Open at first; [`close`](Self::close) holds whoever [`pass`](Self::pass)es until
/// [`open`](Self::open). Counts the arrivals, and carries the version of the data behind it
/// (1 at first). Clones share the gate.
#[derive(Clone, Debug)]
pub struct Gate {
    permits: Arc<Semaphore>,
    arrived: Arc<AtomicUsize>,
    version: Arc<AtomicUsize>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            permits: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
            arrived: Arc::new(AtomicUsize::new(0)),
            version: Arc::new(AtomicUsize::new(1)),
        }
    }
}

impl Gate {
    /// The version of the data.
    #[must_use]
    pub fn version(&self) -> usize {
        self.version.load(Ordering::SeqCst)
    }

    /// The data changes: the next version.
    pub fn change(&self) {
        self.version.fetch_add(1, Ordering::SeqCst);
    }

    /// The data changes and the next arrivals are held: a slow origin.
    pub fn stall(&self) {
        self.change();
        self.close();
    }

    /// Counts the arrival, then waits while the gate is closed.
    ///
    /// # Panics
    ///
    /// Never: the semaphore is never closed.
    pub async fn pass(&self) {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        drop(self.permits.acquire().await.expect("gate"));
    }

    /// How many have arrived.
    #[must_use]
    pub fn arrived(&self) -> usize {
        self.arrived.load(Ordering::SeqCst)
    }

    /// Holds the next arrivals.
    pub fn close(&self) {
        self.permits.forget_permits(Semaphore::MAX_PERMITS);
    }

    /// Lets everyone through.
    pub fn open(&self) {
        let missing = Semaphore::MAX_PERMITS - self.permits.available_permits();
        self.permits.add_permits(missing);
    }

    /// Waits (bounded) until `n` have arrived, then opens the gate: what was held in flight
    /// goes on.
    ///
    /// # Panics
    ///
    /// When they have not arrived within the bound.
    pub async fn open_once_arrived(&self, n: usize) {
        self.until_arrived(n).await;
        self.open();
    }

    /// Waits (bounded) until `n` have arrived.
    ///
    /// # Panics
    ///
    /// When they have not within the bound.
    pub async fn until_arrived(&self, n: usize) {
        within("arrivals at the gate", async {
            while self.arrived() < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
    }
}

/// A cache layer builder as [`Harness::cache`], whose clock moves only with
/// [`Harness::wait`] on every backend: on Redis the scripts read the harness' manual clock
/// instead of `TIME` (`RedisBackend::frozen_time`), as the memory store does. For tests of a
/// fixed interval of the cache (the retry after a failed fill) that real time passing during
/// the test must not shorten.
pub async fn frozen_cache(h: &Harness) -> CacheLayerBuilder {
    match h.kind() {
        Kind::Memory => h.cache().await,
        _ => CacheLayer::builder(RedisCacheStore::new(
            h.backend().await.frozen_time(h.clock()),
        )),
    }
}

/// A value cache builder as [`Harness::value_cache`], its clock frozen as
/// [`frozen_cache`]'s.
pub async fn frozen_value_cache(h: &Harness) -> ValueCacheBuilder {
    match h.kind() {
        Kind::Memory => h.value_cache().await,
        _ => ValueCache::builder(RedisCacheStore::new(
            h.backend().await.frozen_time(h.clock()),
        )),
    }
}

/// Runs `n` calls of `f` concurrently (as [`crowd`]) and returns each output with how long
/// after the start of the crowd it came.
///
/// # Panics
///
/// As [`crowd`].
pub async fn timed_crowd<T, Fut>(
    n: usize,
    f: impl Fn(usize) -> Fut,
) -> Vec<(T, std::time::Duration)>
where
    T: Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    let start = std::time::Instant::now();
    crowd(n, |i| {
        let call = f(i);
        async move {
            let out = call.await;
            (out, start.elapsed())
        }
    })
    .await
}

/// `f`'s output, waited for at most 30 s.
///
/// # Panics
///
/// When `f` takes longer (`what` says what never came).
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(BOUND, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: not within {BOUND:?}"),
    }
}

/// Asserts that the store holds one cache entry (or value), every key with a TTL (at least
/// `keys` of them), and that the entry's `PTTL` is within `ms`.
///
/// # Panics
///
/// When it is not so.
pub async fn assert_kept(h: &Harness, keys: usize, ms: std::ops::RangeInclusive<i64>) {
    // A value is `c:{…}`, a response `cr:<variant>:{<URI>}`.
    let mut entries = h.keys_under("c:").await;
    entries.extend(h.keys_under("cr:").await);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let pttl = h.pttl(&entries[0]).await;
    assert!(ms.contains(&pttl), "{pttl} ms not within {ms:?}");
    h.assert_every_key_has_a_ttl(keys).await;
}

/// Runs `n` calls of `f` (given 0..n) concurrently, each in a task, and returns their outputs
/// in order, each waited for at most 30 s.
///
/// # Panics
///
/// When one takes longer, or panics.
pub async fn crowd<T, Fut>(n: usize, f: impl Fn(usize) -> Fut) -> Vec<T>
where
    T: Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    let tasks: Vec<_> = (0..n).map(|i| tokio::spawn(f(i))).collect();
    let mut out = Vec::with_capacity(n);
    for task in tasks {
        out.push(within("a call of the crowd", task).await.expect("task"));
    }
    out
}
