//! The value cache's fail-safe on every backend (issue 23, item 2): a failing closure answered
//! with the last good value within `stale_if_error` and with its error after, a soft purge
//! answered at once and recomputed once for a crowd on two replicas, the soft fill timeout
//! returning the copy while the computation goes on and fills, the hard one a typed error
//! without a second computation, and a TTL on every key.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis_guard::cache::{FillTimeout, Stampede, ValueCache, ValueCacheBuilder};
use redis_guard_tests::{Harness, backend_suite};
use tokio::sync::Semaphore;

/// The error of the test's "database".
#[derive(Debug, PartialEq, Eq)]
enum DbError {
    Down,
    Slow(FillTimeout),
}

impl From<FillTimeout> for DbError {
    fn from(t: FillTimeout) -> Self {
        Self::Slow(t)
    }
}

/// A database: answers `version`, or fails; waits for a permit of `gate` first; counts its
/// runs.
#[derive(Clone)]
struct Db {
    version: Arc<AtomicUsize>,
    runs: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
}

impl Db {
    fn new() -> Self {
        Self {
            version: Arc::new(AtomicUsize::new(1)),
            runs: Arc::new(AtomicUsize::new(0)),
            gate: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn close(&self) {
        self.gate.forget_permits(Semaphore::MAX_PERMITS);
    }

    fn open(&self) {
        self.gate
            .add_permits(Semaphore::MAX_PERMITS - self.gate.available_permits());
    }

    /// A lookup: the version, or `DbError::Down` when `fails`.
    fn load(
        &self,
        fails: bool,
    ) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = Result<usize, DbError>> + Send>>
    + Send
    + 'static {
        let db = self.clone();
        move || {
            Box::pin(async move {
                db.runs.fetch_add(1, Ordering::SeqCst);
                drop(db.gate.acquire().await.expect("gate"));
                if fails {
                    Err(DbError::Down)
                } else {
                    Ok(db.version.load(Ordering::SeqCst))
                }
            })
        }
    }
}

const TEN: Duration = Duration::from_secs(10);

/// Exact times: no jitter, a fixed random number.
async fn builder(h: &Harness) -> ValueCacheBuilder {
    h.value_cache().await.jitter(0.0).random(|| 1.0)
}

async fn fetch(cache: &ValueCache, db: &Db, fails: bool) -> Result<usize, DbError> {
    let load = db.load(fails);
    cache
        .get_or_compute_tagged("user:7", TEN, ["users"], load)
        .await
}

/// Polls (bounded) until `get` returns `want`.
async fn until_stored(cache: &ValueCache, want: usize) {
    let wait = async {
        while cache.get::<usize>("user:7").await.expect("get") != Some(want) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .expect("the background computation never stored its value");
}

async fn a_failing_closure_is_answered_stale_within_stale_if_error(h: Harness) {
    let db = Db::new();
    let cache = builder(&h)
        .await
        .stale_if_error(Duration::from_secs(60))
        .build()
        .expect("value cache");
    assert_eq!(fetch(&cache, &db, false).await, Ok(1));
    db.version.store(2, Ordering::SeqCst);
    // 10 s past its TTL, then 55 s: the last good value stands in for the error.
    for wait in [20, 45] {
        h.wait(Duration::from_secs(wait)).await;
        assert_eq!(fetch(&cache, &db, true).await, Ok(1));
    }
    assert_eq!(cache.get::<usize>("user:7").await.expect("get"), None);
    // Past the window: the error.
    h.wait(Duration::from_secs(10)).await;
    assert_eq!(fetch(&cache, &db, true).await, Err(DbError::Down));
    assert_eq!(fetch(&cache, &db, false).await, Ok(2));
    assert_eq!(
        fetch(&cache, &db, true).await,
        Ok(2),
        "fresh: no computation"
    );
    assert_eq!(db.runs(), 5);
}

async fn a_soft_purge_answers_at_once_and_recomputes_once(h: Harness) {
    let db = Db::new();
    let replicas = [builder(&h).await, builder(&h).await]
        .map(|b| b.stampede(Stampede::lock().wait(Duration::from_secs(60))))
        .map(|b| b.build().expect("value cache"));
    assert_eq!(fetch(&replicas[0], &db, false).await, Ok(1));
    replicas[1]
        .invalidate_tag_soft("users")
        .await
        .expect("purge");
    db.close();
    db.version.store(2, Ordering::SeqCst);
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (cache, db) = (replicas[i % 2].clone(), db.clone());
            tokio::spawn(async move { fetch(&cache, &db, false).await })
        })
        .collect();
    for task in tasks {
        let got = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("answered at once")
            .expect("task");
        assert_eq!(got, Ok(1));
    }
    let entered = async {
        while db.runs() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), entered)
        .await
        .expect("the recomputation never started");
    db.open();
    until_stored(&replicas[1], 2).await;
    assert_eq!(fetch(&replicas[0], &db, false).await, Ok(2));
    assert_eq!(db.runs(), 2, "one recomputation for the crowd");
}

async fn the_soft_timeout_returns_the_copy_and_the_value_lands_after(h: Harness) {
    let db = Db::new();
    let cache = builder(&h)
        .await
        .stale_if_error(Duration::from_secs(60))
        .fill_timeout(Duration::from_millis(100), Duration::from_secs(60))
        .build()
        .expect("value cache");
    assert_eq!(fetch(&cache, &db, false).await, Ok(1));
    h.wait(Duration::from_secs(20)).await;
    db.close();
    db.version.store(2, Ordering::SeqCst);
    // The computing caller and a waiting one both get the copy.
    for _ in 0..2 {
        let got = tokio::time::timeout(Duration::from_secs(30), fetch(&cache, &db, false))
            .await
            .expect("answered after the soft timeout");
        assert_eq!(got, Ok(1));
    }
    assert_eq!(db.runs(), 2, "the waiter did not compute");
    db.open();
    until_stored(&cache, 2).await;
    assert_eq!(db.runs(), 2);
}

async fn the_hard_timeout_is_a_typed_error_and_computes_once(h: Harness) {
    let db = Db::new();
    let hard = Duration::from_millis(300);
    let cache = builder(&h)
        .await
        .fill_timeout(Duration::from_millis(50), hard)
        .build()
        .expect("value cache");
    db.close();
    for _ in 0..2 {
        let got = tokio::time::timeout(Duration::from_secs(30), fetch(&cache, &db, false))
            .await
            .expect("answered after the hard timeout");
        match got {
            Err(DbError::Slow(t)) => assert_eq!(t.after(), hard),
            other => panic!("not the timeout: {other:?}"),
        }
    }
    assert_eq!(
        db.runs(),
        1,
        "the second caller waited for the first's lease"
    );
    db.open();
    until_stored(&cache, 1).await;
    assert_eq!(db.runs(), 1);
}

/// Values live past their TTL for `stale_if_error`, every key with a TTL.
async fn every_fail_safe_key_has_a_ttl(h: Harness) {
    let db = Db::new();
    let cache = builder(&h)
        .await
        .stale_if_error(Duration::from_secs(300))
        .build()
        .expect("value cache");
    assert_eq!(fetch(&cache, &db, false).await, Ok(1));
    cache.invalidate_tag_soft("users").await.expect("purge");
    cache.invalidate_tag("other").await.expect("invalidate");
    db.version.store(2, Ordering::SeqCst);
    assert_eq!(
        fetch(&cache, &db, false).await,
        Ok(1),
        "stale after the purge"
    );
    until_stored(&cache, 2).await;
    let values = h.keys_under("c:{").await;
    assert_eq!(values.len(), 1, "{values:?}");
    let pttl = h.pttl(&values[0]).await;
    assert!((300_000..=310_000).contains(&pttl), "{pttl}");
    h.assert_every_key_has_a_ttl(3).await;
}

backend_suite!(
    a_failing_closure_is_answered_stale_within_stale_if_error,
    a_soft_purge_answers_at_once_and_recomputes_once,
    the_soft_timeout_returns_the_copy_and_the_value_lands_after,
    the_hard_timeout_is_a_typed_error_and_computes_once,
);

backend_suite!(redis_only: every_fail_safe_key_has_a_ttl);
