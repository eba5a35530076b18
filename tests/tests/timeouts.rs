//! The backend's timeout against a real `redis-server` that never answers (frozen with
//! `SIGSTOP`): every call in flight fails with [`BackendError::Timeout`] after the timeout and
//! within a margin of it, wherever it is polled, and the calls made once Redis is back succeed.
//! Each test prints the latencies it measured (`cargo test --test timeouts -- --nocapture`).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis_guard::backend::{BackendError, Breaker, Lock, LockError, RedisBackend, RedisLockStore};
use redis_guard::rate_limit::{Key, LimiterError, Quota, RedisLimiter, Rule};
use redis_guard_tests::Harness;

/// The Redis timeout of these tests.
const TIMEOUT: Duration = Duration::from_millis(200);

/// How much later than [`TIMEOUT`] a timed-out call may end: the deadline's own slack (1 ms)
/// plus the scheduling of a loaded 2-core machine running debug builds (a few ms when idle). A
/// call whose deadline were never kept would wait for Redis to come back: seconds.
const MARGIN: Duration = Duration::from_millis(250);

/// Calls in flight at once, half of them rate limit checks (batched, each batch with a deadline
/// of its own), half lock acquisitions (one call each, the timeout from its start).
const CALLS: usize = 64;

/// How long the calls may take in all before the test gives up on them (and fails): far past
/// [`TIMEOUT`], so only calls whose deadline is never kept take that long.
const HUNG: Duration = Duration::from_secs(5);

fn rule() -> Rule {
    Rule::new("timeouts", Quota::per_day(1000))
}

/// What a call ended with: `Ok` for a timeout, else the outcome it had instead.
type Ended = Result<(), String>;

async fn check(limiter: &RedisLimiter, key: String) -> Ended {
    match limiter.check(&rule(), Key::from(key)).await {
        Err(LimiterError::Backend(BackendError::Timeout(t))) if t == TIMEOUT => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

async fn acquire(lock: &Lock, name: String) -> Ended {
    match lock.try_acquire(&name, Duration::from_secs(10)).await {
        Err(LockError::Backend(BackendError::Timeout(t))) if t == TIMEOUT => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// A rate-limit check and a lock under `name`, both decided by Redis.
async fn answered(limiter: &RedisLimiter, lock: &Lock, name: &str) {
    let decision = limiter.check(&rule(), Key::from(name)).await;
    assert_eq!(decision.expect("Redis decides").remaining, 999);
    let acquired = lock.try_acquire(name, TIMEOUT).await.expect("Redis");
    assert!(acquired.is_some());
}

/// Runs `call` on a runtime of its own, in a thread of its own, built without Tokio's timer: a
/// call made there still ends by its deadline. Sends the time it took and how it ended.
fn on_a_runtime_without_timer(
    call: impl Future<Output = Ended> + Send + 'static,
) -> mpsc::Receiver<(Duration, Ended)> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let started = Instant::now();
        let ended = runtime.block_on(call);
        let _ = sender.send((started.elapsed(), ended));
    });
    receiver
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_redis_that_never_answers_end_at_the_timeout_and_later_calls_succeed() {
    let h = Harness::redis().await;
    // No breaker: every call goes to Redis, and the first calls after it is back too.
    let backend: RedisBackend = h.backend().await.timeout(TIMEOUT).breaker(Breaker::off());
    let limiter = RedisLimiter::new(backend.clone());
    let lock = Lock::new(RedisLockStore::new(backend.clone()));
    // The scripts are loaded before Redis stops answering.
    answered(&limiter, &lock, "before").await;

    let server = h.server().expect("a standalone Redis");
    server.freeze().expect("SIGSTOP");
    let tasks: Vec<_> = (0..CALLS)
        .map(|i| {
            let (limiter, lock) = (limiter.clone(), lock.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let ended = if i % 2 == 0 {
                    check(&limiter, format!("client-{i}")).await
                } else {
                    acquire(&lock, format!("lock-{i}")).await
                };
                (i % 2 == 1, started.elapsed(), ended)
            })
        })
        .collect();
    let elsewhere = [
        on_a_runtime_without_timer({
            let limiter = limiter.clone();
            async move { check(&limiter, "elsewhere".to_owned()).await }
        }),
        on_a_runtime_without_timer({
            let lock = lock.clone();
            async move { acquire(&lock, "elsewhere".to_owned()).await }
        }),
    ];
    let joined = tokio::time::timeout(HUNG, futures_util::future::join_all(tasks)).await;
    let elsewhere: Vec<_> = tokio::task::block_in_place(|| {
        elsewhere
            .iter()
            .map(|ended| {
                let hung = || (HUNG, Err("still waiting".to_owned()));
                ended.recv_timeout(HUNG).unwrap_or_else(|_| hung())
            })
            .collect()
    });
    server.thaw().expect("SIGCONT");
    let joined = joined.expect("every call ended, by its deadline or Redis' answer");

    let mut took = Vec::new();
    for (one_call, elapsed, ended) in joined.into_iter().map(|task| task.expect("task")) {
        assert_eq!(ended, Ok(()), "a timeout, after {elapsed:?}");
        // A lock call's deadline is the timeout from its start; a check's is its batch's,
        // which may have been made before the check joined it.
        if one_call {
            assert!(elapsed >= TIMEOUT, "ended before the timeout: {elapsed:?}");
        }
        took.push(elapsed);
    }
    for (elapsed, ended) in elsewhere {
        assert_eq!(
            ended,
            Ok(()),
            "a timeout on another runtime, after {elapsed:?}"
        );
        took.push(elapsed);
    }
    took.sort();
    println!(
        "{} calls to a frozen Redis, timeout {TIMEOUT:?}: min {:.1?}, median {:.1?}, max {:.1?}",
        took.len(),
        took[0],
        took[took.len() / 2],
        took[took.len() - 1]
    );
    assert!(
        took[took.len() - 1] < TIMEOUT + MARGIN,
        "a call ended later than the timeout and the margin: {took:?}"
    );

    // Redis answers again: so do the calls.
    answered(&limiter, &lock, "after").await;
}
