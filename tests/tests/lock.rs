//! `backend::Lock` on every backend: a lease that only its holder releases or extends, that
//! frees itself when its holder dies, and that two contenders never hold at once; the memory
//! lock's bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis_guard::ConfigErrorKind;
use redis_guard::backend::{Lock, LockError, ManualClock, MemoryLockStore};
use redis_guard_tests::{Harness, backend_suite};

const LEASE: Duration = Duration::from_secs(60);

/// Tries to take the lock `job` for [`LEASE`].
async fn take(locks: &Lock) -> Option<redis_guard::backend::LockGuard> {
    locks.try_acquire("job", LEASE).await.expect("lock")
}

/// Tries to take the lock `name` for [`LEASE`].
async fn take_named(locks: &Lock, name: &str) -> Option<redis_guard::backend::LockGuard> {
    locks.try_acquire(name, LEASE).await.expect("lock")
}

async fn only_its_holder_releases_it(h: Harness) {
    let locks = h.lock().await;
    let first = take(&locks).await.expect("free");
    assert!(take(&locks).await.is_none(), "held");
    // The first holder's lease runs out; a second holder takes the lock.
    h.wait(LEASE + Duration::from_secs(1)).await;
    let second = take(&locks).await.expect("expired");
    // The first holder's release (its token is not the one stored) does nothing, nor its
    // extension.
    assert!(!first.extend(LEASE).await.expect("extend"));
    assert!(!first.release().await.expect("release"));
    assert!(take(&locks).await.is_none(), "still the second's");
    assert!(second.release().await.expect("release"));
    assert!(take(&locks).await.is_some(), "free again");
}

async fn a_dead_holders_lease_runs_out(h: Harness) {
    let locks = h.lock().await;
    let other = h.lock().await;
    // The holder dies without releasing (its guard never drops).
    std::mem::forget(take(&locks).await.expect("free"));
    h.wait(LEASE - Duration::from_secs(5)).await;
    assert!(take(&other).await.is_none(), "within the lease");
    h.wait(Duration::from_secs(6)).await;
    assert!(take(&other).await.is_some(), "after it");
}

async fn renewal_keeps_it(h: Harness) {
    let locks = h.lock().await;
    let guard = take(&locks).await.expect("free");
    for _ in 0..3 {
        h.wait(LEASE - Duration::from_secs(10)).await;
        assert!(guard.extend(LEASE).await.expect("extend"));
    }
    // 150 s after it was taken with a 60 s lease: still held.
    assert!(take(&locks).await.is_none());
    h.wait(LEASE + Duration::from_secs(1)).await;
    assert!(
        !guard.extend(LEASE).await.expect("extend"),
        "not renewed in time"
    );
    assert!(take(&locks).await.is_some());
}

async fn a_dropped_guard_releases_it(h: Harness) {
    let locks = h.lock().await;
    drop(take(&locks).await.expect("free"));
    // On Redis the release runs in a spawned task: wait for it, briefly.
    let again = locks
        .acquire("job", LEASE, Duration::from_secs(2))
        .await
        .expect("lock");
    assert!(again.is_some(), "released on drop");
}

async fn two_contenders_never_both_hold_it(h: Harness) {
    const ROUNDS: usize = 1000;
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        // Two replicas: two instances (on Redis, two connections).
        let locks: Lock = h.lock().await;
        let (inside, done) = (Arc::clone(&inside), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let mut max = 0;
            while done.load(Ordering::SeqCst) < ROUNDS {
                let Some(guard) = locks
                    .acquire("hot", LEASE, Duration::from_secs(10))
                    .await
                    .expect("lock")
                else {
                    continue;
                };
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                max = max.max(now);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                assert!(guard.release().await.expect("release"));
            }
            max
        }));
    }
    for task in tasks {
        assert_eq!(task.await.expect("task"), 1, "never two holders at once");
    }
    assert!(done.load(Ordering::SeqCst) >= ROUNDS);
}

async fn bad_names_and_leases_are_refused(h: Harness) {
    let locks = h.lock().await;
    for (name, lease) in [
        ("", LEASE),
        ("a{b}", LEASE),
        (&*"x".repeat(257), LEASE),
        ("job", Duration::ZERO),
        ("job", Duration::from_secs(2 * 24 * 3600)),
    ] {
        let err = locks.try_acquire(name, lease).await.expect_err("invalid");
        let want = if lease == LEASE {
            ConfigErrorKind::Name
        } else {
            ConfigErrorKind::Duration
        };
        assert!(
            matches!(&err, LockError::Config(e) if e.kind() == want),
            "{err}"
        );
    }
}

backend_suite!(
    only_its_holder_releases_it,
    a_dead_holders_lease_runs_out,
    renewal_keeps_it,
    a_dropped_guard_releases_it,
    two_contenders_never_both_hold_it,
    bad_names_and_leases_are_refused,
);

/// A key that holds something else is an error, never overwritten.
async fn a_key_that_is_not_a_lock_is_an_error(h: Harness) {
    let locks = h.lock().await;
    let mut conn = h.inspect().await;
    let key = format!("{}lock:{{job}}", h.prefix());
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("someone else's")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let err = locks
        .try_acquire("job", LEASE)
        .await
        .expect_err("not a lock");
    assert!(err.to_string().contains("RG_LOCK"), "{err}");
    let kept: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(kept, "someone else's");
}

backend_suite!(redis_only: a_key_that_is_not_a_lock_is_an_error);

/// A memory lock is bounded like every in-process table: leases that ran out are swept, and
/// when every slot holds a live lease a new name is refused (`LockError::Full`) while the
/// live leases are kept; room comes back when one is released or runs out.
#[tokio::test]
async fn a_full_memory_lock_refuses_new_names_and_keeps_its_holders() {
    let clock = ManualClock::new();
    let locks = Lock::new(
        MemoryLockStore::builder()
            .capacity(10)
            .clock(clock.clone())
            .build(),
    );
    // 1,000 holders whose leases ran out before they released.
    for i in 0..1_000 {
        let name = format!("dead-{i}");
        let guard = locks.try_acquire(&name, Duration::from_millis(1)).await;
        let guard = guard.expect("lock").expect("free");
        clock.advance(Duration::from_millis(2));
        drop(guard);
    }
    let mut live = Vec::new();
    for i in 0..10 {
        live.push(
            take_named(&locks, &format!("live-{i}"))
                .await
                .expect("free"),
        );
    }
    let full = locks.try_acquire("one-more", LEASE).await;
    assert!(
        matches!(full, Err(LockError::Full { capacity: 10 })),
        "{full:?}"
    );
    // Every holder still holds its lock.
    for (i, guard) in live.iter().enumerate() {
        assert!(take_named(&locks, &format!("live-{i}")).await.is_none());
        assert!(guard.extend(LEASE).await.expect("extend"));
    }
    // A release makes room for one.
    assert!(
        live.pop()
            .expect("a guard")
            .release()
            .await
            .expect("release")
    );
    let _more = take_named(&locks, "one-more").await.expect("room");
    let full = locks.try_acquire("two-more", LEASE).await;
    assert!(matches!(full, Err(LockError::Full { .. })), "{full:?}");
    // So do leases that run out.
    clock.advance(LEASE * 2);
    assert!(take_named(&locks, "two-more").await.is_some());
}
// Over TLS (`rediss://`, a client certificate): a standalone server, a pool, a cluster and
// Sentinel.
backend_suite!(tls_only: two_contenders_never_both_hold_it);
