//! The value cache's fail-safe on every backend: a failing closure answered
//! with the last good value within `stale_if_error` and with its error after, a soft purge
//! answered at once and recomputed once for a crowd on two replicas, the soft fill timeout
//! returning the copy while the computation goes on and fills, the hard one a typed error
//! without a second computation, and a TTL on every key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_guard::cache::{FillTimeout, Stampede, ValueCache, ValueCacheBuilder};
use redis_guard_tests::fail_safe::{
    ANSWER_MARGIN, Gate, assert_kept, crowd, frozen_value_cache, timed_crowd, within,
};
use redis_guard_tests::{Harness, backend_suite};

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

/// A database: answers `version`, or fails, once through its gate (which counts its runs),
/// after its delay.
#[derive(Clone, Default)]
struct Db {
    gate: Gate,
    delay_ms: Arc<AtomicU64>,
}

impl Db {
    fn new() -> Self {
        Self::default()
    }

    fn runs(&self) -> usize {
        self.gate.arrived()
    }

    /// Every lookup takes `d` (a slow database: one that fails only after a while).
    fn slow(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).expect("a short delay");
        self.delay_ms.store(ms, Ordering::SeqCst);
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
                db.gate.pass().await;
                let delay = db.delay_ms.load(Ordering::SeqCst);
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                if fails {
                    Err(DbError::Down)
                } else {
                    Ok(db.gate.version())
                }
            })
        }
    }
}

const TEN: Duration = Duration::from_secs(10);
const MINUTE: Duration = Duration::from_secs(60);

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
    within("the background computation never stored its value", wait).await;
}

/// A cache with `stale_if_error` 60 s and `more`, its value computed and stored (`1`).
async fn primed(
    h: &Harness,
    db: &Db,
    more: impl FnOnce(ValueCacheBuilder) -> ValueCacheBuilder,
) -> ValueCache {
    let cache = more(builder(h).await.stale_if_error(MINUTE))
        .build()
        .expect("value cache");
    assert_eq!(fetch(&cache, db, false).await, Ok(1));
    cache
}

async fn a_failing_closure_is_answered_stale_within_stale_if_error(h: Harness) {
    let db = Db::new();
    let cache = primed(&h, &db, |b| b).await;
    db.gate.change();
    // 10 s past its TTL, then 55 s: the last good value stands in for the error (the second
    // time at once, while one retry runs in the background).
    for wait in [20, 45] {
        h.wait(Duration::from_secs(wait)).await;
        assert_eq!(fetch(&cache, &db, true).await, Ok(1));
    }
    db.gate.until_arrived(3).await;
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
    db.gate.stall();
    let values = crowd(50, |i| {
        let (cache, db) = (replicas[i % 2].clone(), db.clone());
        async move { fetch(&cache, &db, false).await }
    });
    // Every caller is answered while the recomputation is blocked.
    assert!(values.await.iter().all(|v| *v == Ok(1)));
    db.gate.open_once_arrived(2).await;
    until_stored(&replicas[1], 2).await;
    assert_eq!(fetch(&replicas[0], &db, false).await, Ok(2));
    assert_eq!(db.runs(), 2, "one recomputation for the crowd");
}

async fn the_soft_timeout_returns_the_copy_and_the_value_lands_after(h: Harness) {
    let db = Db::new();
    let soft = Duration::from_millis(100);
    let cache = primed(&h, &db, |b| b.fill_timeout(soft, MINUTE)).await;
    h.wait(Duration::from_secs(20)).await;
    db.gate.stall();
    // The computing caller and a waiting one both get the copy.
    let values = crowd(2, |_| {
        let (cache, db) = (cache.clone(), db.clone());
        async move { fetch(&cache, &db, false).await }
    });
    assert_eq!(values.await, [Ok(1), Ok(1)]);
    // The computation started (a spawned task: under load, perhaps only now).
    db.gate.open_once_arrived(2).await;
    until_stored(&cache, 2).await;
    assert_eq!(db.runs(), 2, "the waiter did not compute");
}

async fn the_hard_timeout_is_a_typed_error_and_computes_once(h: Harness) {
    let db = Db::new();
    let hard = Duration::from_millis(300);
    let replicas = [builder(&h).await, builder(&h).await].map(|b| {
        let b = b.fill_timeout(Duration::from_millis(50), hard);
        b.build().expect("value cache")
    });
    db.gate.close();
    // One caller on each replica: one computes, the other waits for its lease.
    let values = crowd(2, |i| {
        let (cache, db) = (replicas[i].clone(), db.clone());
        async move { fetch(&cache, &db, false).await }
    });
    for value in values.await {
        match value {
            Err(DbError::Slow(t)) => assert_eq!(t.after(), hard),
            other => panic!("not the timeout: {other:?}"),
        }
    }
    db.gate.open_once_arrived(1).await;
    until_stored(&replicas[1], 1).await;
    assert_eq!(db.runs(), 1, "one computation");
}

/// Fill timeouts count from a call's start, whatever the stampede's wait says: a caller
/// waiting for another one's computation waits until its own hard timeout (it never starts a
/// second computation of its own), and nobody returns later than that.
async fn the_hard_timeout_bounds_every_answer_and_computes_once(h: Harness) {
    let db = Db::new();
    let ms = Duration::from_millis;
    let hard = ms(1000);
    // The stampede's wait is shorter than the hard timeout: it must not end the waiting.
    let cache = builder(&h)
        .await
        .stampede(Stampede::lock().wait(ms(300)))
        .fill_timeout(ms(100), hard)
        .build()
        .expect("value cache");
    // The computation is slower than the hard timeout.
    db.gate.close();
    let start = Instant::now();
    let values = crowd(5, |_| {
        let (cache, db) = (cache.clone(), db.clone());
        async move {
            let value = fetch(&cache, &db, false).await;
            (value, start.elapsed())
        }
    });
    for (value, took) in values.await {
        match value {
            Err(DbError::Slow(t)) => assert_eq!(t.after(), hard),
            other => panic!("not the timeout: {other:?}"),
        }
        assert!(took <= hard + ANSWER_MARGIN, "returned after {took:?}");
    }
    assert_eq!(db.runs(), 1, "one computation");
    db.gate.open_once_arrived(1).await;
    until_stored(&cache, 1).await;
    assert_eq!(db.runs(), 1, "one computation");
}

/// How long the failing closure takes to fail.
const FAILING: Duration = Duration::from_millis(800);

/// How soon every answer of a crowd comes (from its start, or from the first answer when
/// one fill runs for all), at most: half the failing call's time, so that no request waited
/// on a call of its own (a queue adds `FAILING` per request ahead). Loose on purpose: a
/// loaded machine answers 20 requests in well under that, a queue never does.
const PROMPT: Duration = Duration::from_millis(400);

/// 20 concurrent calls for the value on the `replicas` (in turn), whose closure fails: each
/// gets the stale copy; how long after the start of the crowd each returned.
async fn stale_crowd(replicas: &[ValueCache; 2], db: &Db) -> Vec<Duration> {
    let values = timed_crowd(20, |i| {
        let (cache, db) = (replicas[i % 2].clone(), db.clone());
        async move { fetch(&cache, &db, true).await }
    });
    let mut times = Vec::new();
    for (value, took) in values.await {
        assert_eq!(value, Ok(1));
        times.push(took);
    }
    times
}

/// While a value's last computation failed, every caller on every replica gets the stale copy
/// at once, and one caller a second runs the closure (in the background): a crowd never
/// queues behind a failing database.
async fn a_failing_closure_runs_once_a_second_and_nobody_queues(h: Harness) {
    let db = Db::new();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let b = frozen_value_cache(&h).await.jitter(0.0).random(|| 1.0);
        replicas.push(b.stale_if_error(MINUTE).build().expect("value cache"));
    }
    let replicas: [ValueCache; 2] = replicas.try_into().expect("two");
    assert_eq!(fetch(&replicas[0], &db, false).await, Ok(1));
    // Past its TTL; the database now fails, and takes `FAILING` to do it.
    h.wait(Duration::from_secs(20)).await;
    db.slow(FAILING);
    // One caller runs the closure; the others wait for its fill, and all return together
    // when it fails, not one failure after another.
    let times = stale_crowd(&replicas, &db).await;
    let (first, last) = (times.iter().min(), times.iter().max());
    let spread = *last.expect("20") - *first.expect("20");
    assert!(spread <= PROMPT, "returned over {spread:?}: {times:?}");
    assert_eq!(db.runs(), 2, "one run of the failing closure");
    // Within the retry interval: the copy at once, the closure not run.
    let times = stale_crowd(&replicas, &db).await;
    assert!(times.iter().all(|t| *t <= PROMPT), "{times:?}");
    assert_eq!(db.runs(), 2);
    // Just over a second later: the copy at once, and one caller runs the closure in the
    // background.
    h.wait(Duration::from_millis(1_100)).await;
    let times = stale_crowd(&replicas, &db).await;
    assert!(times.iter().all(|t| *t <= PROMPT), "{times:?}");
    db.gate.until_arrived(3).await;
    // That run failed too: the next crowd does not run it either.
    let times = stale_crowd(&replicas, &db).await;
    assert!(times.iter().all(|t| *t <= PROMPT), "{times:?}");
    assert_eq!(db.runs(), 3, "one run a second");
}

/// Values live past their TTL for `stale_if_error`, every key with a TTL.
async fn every_fail_safe_key_has_a_ttl(h: Harness) {
    let db = Db::new();
    let cache = primed(&h, &db, |b| b.stale_if_error(5 * MINUTE)).await;
    cache.invalidate_tag_soft("users").await.expect("purge");
    cache.invalidate_tag("other").await.expect("invalidate");
    db.gate.change();
    assert_eq!(
        fetch(&cache, &db, false).await,
        Ok(1),
        "stale after the purge"
    );
    until_stored(&cache, 2).await;
    // Fresh 10 s, kept 300 s past that.
    assert_kept(&h, 3, 300_000..=310_000).await;
}

backend_suite!(
    a_failing_closure_is_answered_stale_within_stale_if_error,
    a_soft_purge_answers_at_once_and_recomputes_once,
    the_soft_timeout_returns_the_copy_and_the_value_lands_after,
    the_hard_timeout_is_a_typed_error_and_computes_once,
    the_hard_timeout_bounds_every_answer_and_computes_once,
    a_failing_closure_runs_once_a_second_and_nobody_queues,
);

backend_suite!(redis_only: every_fail_safe_key_has_a_ttl);
