//! Hot-key quota leasing ([`Rule::leased`]) on every backend: two replicas hammering one key
//! (directly, and as two apps over real sockets) never admit more than its quota, hold back at
//! most `replicas × k` units while their blocks are open, and give the unused units back when
//! the leases end; the headers stay truthful.
//! The Redis limiters read the harness' frozen clock, so no window refills while they run and
//! every count is exact. (In memory, leasing does nothing: the same bounds hold trivially.)

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use redis_guard::rate_limit::{
    Algorithm, Key, Limiter, MemoryLimiter, Quota, RateLimitLayer, Rule,
};
use redis_guard::{ConfigError, ConfigErrorKind};
use redis_guard_testkit::http as raw;
use redis_guard_tests::{Harness, backend_suite, by_client, serve};
use tower::{Layer, service_fn};

/// The suites' quota: an hour's window, so nothing refills while a test runs.
const QUOTA: u32 = 1000;

/// At most 10 % of the burst per block: `k` ≤ 100 of the quota's 1000.
const PERCENT: u8 = 10;

/// Longer than a lease (100 ms) and than the deny cache's longest wait (2 s), shorter than
/// one emission interval (3.6 s): the leases end, no unit comes back with time.
const LEASES_END: Duration = Duration::from_secs(3);

fn hot(limit: u32) -> Rule {
    Rule::new("hot", Quota::per_hour(limit)).leased(PERCENT)
}

/// Admits `rule` on `key` through `limiter` until it denies; how many it admitted.
async fn until_denied(limiter: &dyn Limiter, rule: &Rule, key: &str) -> u32 {
    let mut admitted = 0;
    while limiter
        .check(rule, Key::from(key))
        .await
        .expect("decided")
        .allowed
    {
        admitted += 1;
        assert!(admitted <= QUOTA, "admitted past the quota");
    }
    admitted
}

/// Two replicas, 16 tasks each, a little more than the quota of requests on one key at once
/// (so that blocks are still open when they stop): never more than the quota, and at most one
/// block per replica held back; once the leases end and the blocks come back, the quota is
/// admitted exactly.
async fn two_replicas_never_admit_more_than_the_quota(h: Harness) {
    let rule = hot(QUOTA);
    let replicas = [h.exact_limiter().await, h.exact_limiter().await];
    let admitted = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for limiter in &replicas {
        for _ in 0..16 {
            let (limiter, rule, admitted) =
                (Arc::clone(limiter), rule.clone(), Arc::clone(&admitted));
            tasks.push(tokio::spawn(async move {
                for _ in 0..QUOTA / 32 + 1 {
                    let d = limiter.check(&rule, Key::from("k")).await.expect("decided");
                    if d.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    let replicas = &replicas;
    let rule = &rule;
    bounds_then_exact(&h, QUOTA, admitted.load(Ordering::Relaxed), async |i| {
        admits(&*replicas[i], rule).await
    })
    .await;
}

/// The units a replica reserved and did not use serve the other replica once its lease ends.
async fn unused_units_come_back_to_the_other_replica(h: Harness) {
    let rule = hot(100);
    let (a, b) = (h.exact_limiter().await, h.exact_limiter().await);
    for _ in 0..10 {
        assert!(
            a.check(&rule, Key::from("k"))
                .await
                .expect("decided")
                .allowed
        );
    }
    let b_first = until_denied(&*b, &rule, "k").await;
    let held = 90 - b_first;
    if h.is_redis() {
        // `a`'s last block (of up to 8: its rate so far) is what `b` could not use.
        assert!(held > 0 && held < 10, "a holds {held}");
    } else {
        assert_eq!(held, 0);
    }
    h.wait(LEASES_END).await;
    // `a`'s next request gives its block back, then takes one unit of it.
    let a_next = a.check(&rule, Key::from("k")).await.expect("decided");
    assert_eq!(a_next.allowed, held > 0);
    let b_second = until_denied(&*b, &rule, "k").await;
    assert_eq!(b_second, held.saturating_sub(1));
    assert!(
        !a.check(&rule, Key::from("k"))
            .await
            .expect("decided")
            .allowed
    );
}

/// One replica alone: every request admitted from a block reports what the per-request path
/// would (remaining, reset), and the denial after the quota is Redis' own.
async fn headers_stay_truthful(h: Harness) {
    let rule = hot(100);
    let emission = Duration::from_secs(36);
    let limiter = h.exact_limiter().await;
    for used in 1..=100 {
        let d = limiter.check(&rule, Key::from("k")).await.expect("decided");
        assert!(d.allowed, "request {used}");
        assert_eq!(d.remaining, 100 - used, "request {used}");
        assert_eq!(d.reset_after, emission * used, "request {used}");
    }
    let d = limiter.check(&rule, Key::from("k")).await.expect("decided");
    assert!(!d.allowed);
    assert_eq!(d.remaining, 0);
    assert_eq!(d.retry_after, emission);
    assert_eq!(d.reset_after, emission * 100);
    // Another replica sees what Redis holds: everything is used or in this replica's block.
    let other = h.exact_limiter().await;
    let d = other.check(&rule, Key::from("k")).await.expect("decided");
    assert!(!d.allowed);
    assert_eq!(d.retry_after, emission);
}

/// The same through two app instances over real sockets: `RateLimitLayer` on each, one leased
/// rule keyed by the `x-client` header, many connections at once.
async fn two_apps_over_http_never_admit_more_than_the_quota(h: Harness) {
    const LIMIT: u32 = 200;
    let rule = hot(LIMIT);
    let mut apps = Vec::new();
    for _ in 0..2 {
        let layer = RateLimitLayer::builder(h.exact_limiter().await)
            .rule_with(rule.clone(), by_client())
            .build()
            .expect("valid");
        let handler = service_fn(|_: Request<Incoming>| async {
            Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
        });
        apps.push(serve(layer.layer(handler)).await);
    }
    let admitted = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for &addr in &apps {
        for _ in 0..8 {
            let admitted = Arc::clone(&admitted);
            tasks.push(tokio::spawn(async move {
                for _ in 0..LIMIT / 16 + 1 {
                    if status(addr).await == 200 {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    let apps = &apps;
    bounds_then_exact(
        &h,
        LIMIT,
        admitted.load(Ordering::Relaxed),
        async |i| match status(apps[i]).await {
            200 => true,
            429 => false,
            other => panic!("status {other}"),
        },
    )
    .await;
}

/// After `during` of `limit` were admitted by two replicas at once: at most `limit`, at least
/// `limit − 2 × k`. Then the leases end, and `one(i)` (a request on replica `i`: admitted?)
/// alternates between the two until both deny: the blocks came back, and exactly `limit` were
/// admitted in all.
async fn bounds_then_exact(
    h: &Harness,
    limit: u32,
    during: u32,
    mut one: impl AsyncFnMut(usize) -> bool,
) {
    let k = limit * u32::from(PERCENT) / 100;
    assert!(during <= limit, "{during} admitted of {limit}");
    assert!(
        during >= limit - 2 * k,
        "{during} admitted: more than 2 × k held back"
    );
    // The leases end: each replica gives its block back on its next request.
    h.wait(LEASES_END).await;
    let mut after = 0;
    loop {
        let mut denied = 0;
        for i in 0..2 {
            if one(i).await {
                after += 1;
            } else {
                denied += 1;
            }
        }
        if denied == 2 {
            break;
        }
        assert!(during + after <= limit, "admitted past the quota");
    }
    assert_eq!(during + after, limit, "{during} + {after}");
}

/// The status of `GET /` from client `k` to the app at `addr`, on a connection of its own.
async fn status(addr: SocketAddr) -> u16 {
    let response = raw::request(addr, "GET", "/", &[("x-client", b"k")], b"")
        .await
        .expect("GET /");
    response.status
}

backend_suite!(
    two_replicas_never_admit_more_than_the_quota,
    two_apps_over_http_never_admit_more_than_the_quota,
    unused_units_come_back_to_the_other_replica,
    headers_stay_truthful,
);

/// A busy key costs a handful of script calls, not one per request: blocks grow with the local
/// rate (2, 4, 8, …, at most `k`).
async fn a_busy_key_costs_few_calls(h: Harness) {
    let limiter = h.exact_limiter().await;
    let calls = script_calls(&h, &*limiter, &hot(QUOTA), 200).await;
    assert!(calls <= 12, "{calls} script calls for 200 requests");
    // Without leasing, one call per request.
    let plain = Rule::new("plain", Quota::per_hour(QUOTA));
    assert_eq!(script_calls(&h, &*limiter, &plain, 20).await, 20);
}

/// The script calls Redis serves while `limiter` admits `n` requests on `rule`.
async fn script_calls(h: &Harness, limiter: &dyn Limiter, rule: &Rule, n: u32) -> u64 {
    let before = h.calls("evalsha").await;
    for i in 0..n {
        assert!(admits(limiter, rule).await, "request {i}");
    }
    h.calls("evalsha").await - before
}

/// Whether `limiter` admits one request on `rule` for key `k`.
async fn admits(limiter: &dyn Limiter, rule: &Rule) -> bool {
    limiter
        .check(rule, Key::from("k"))
        .await
        .expect("decided")
        .allowed
}

/// Redis gone: a replica admits what its open block holds (reserved already: the quota counts
/// it), then its next reservation fails as any call does, an error the layer's failure policy
/// answers; nothing panics or hangs.
async fn a_failed_reservation_is_an_error_like_any_call(mut h: Harness) {
    let rule = hot(QUOTA);
    let limiter = h.exact_limiter().await;
    // Blocks of 2 and 4: the second is open with 3 units left after these 4 requests.
    for _ in 0..4 {
        assert!(admits(&*limiter, &rule).await);
    }
    h.kill_redis();
    for i in 0..3 {
        assert!(admits(&*limiter, &rule).await, "from the block: {i}");
    }
    let failed = limiter.check(&rule, Key::from("k")).await;
    assert!(failed.is_err(), "{failed:?}");
}

backend_suite!(standalone_only: a_busy_key_costs_few_calls, a_failed_reservation_is_an_error_like_any_call);

/// A layer of `rule` alone, built.
fn build(rule: Rule) -> Result<RateLimitLayer, ConfigError> {
    RateLimitLayer::builder(MemoryLimiter::new())
        .rule_with(rule, by_client())
        .build()
}

#[test]
fn rules_that_must_be_exact_per_request_refuse_to_lease_at_build() {
    let login = Rule::new("login", Quota::per_minute(5))
        .with_algorithm(Algorithm::SlidingLog)
        .leased(PERCENT);
    match build(login) {
        Err(e) if e.kind() == ConfigErrorKind::Leasing => {
            assert_eq!(e.rule(), Some("login"));
            assert!(e.to_string().contains("sliding log"), "{e}");
        }
        other => panic!("expected a leasing refusal, got {:?}", other.map(|_| ())),
    }
    let calls = Rule::concurrency("calls", 5).leased(PERCENT);
    assert!(matches!(build(calls), Err(e) if e.kind() == ConfigErrorKind::Leasing));
    assert!(build(Rule::new("api", Quota::per_hour(QUOTA)).leased(PERCENT)).is_ok());
}
