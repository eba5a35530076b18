//! Costs charged after the fact, on every backend: `Limiter::charge` takes what it says
//! whatever is left, and the layer settles what a response reports (`ActualCost`) or refunds
//! (`Rule::refund_when`).

use std::time::Duration;

use redis_guard::rate_limit::{
    Algorithm, CustomAlgorithm, Key, Limiter, LimiterError, Quota, Rule,
};
use redis_guard_tests::{Harness, backend_suite};

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
];

/// What `rule` has left for `key`, as an inspection sees it.
async fn left(limiter: &dyn Limiter, rule: &Rule, key: &str) -> u32 {
    limiter
        .inspect(rule, Key::from(key))
        .await
        .expect("inspect")
        .state
        .remaining
}

async fn a_charge_takes_what_it_says_whatever_is_left(h: Harness) {
    let limiter = h.limiter().await;
    for algorithm in ALGORITHMS {
        let rule = Rule::new(format!("tokens-{algorithm:?}"), Quota::per_hour(10))
            .with_algorithm(algorithm.clone());
        for _ in 0..2 {
            assert!(
                limiter
                    .check(&rule, Key::from("k"))
                    .await
                    .expect("check")
                    .allowed
            );
        }
        limiter
            .charge(&rule, Key::from("k"), 5)
            .await
            .expect("charge");
        assert_eq!(left(&*limiter, &rule, "k").await, 3, "{algorithm:?}");
        // A charge is never denied: past the limit, the key waits.
        limiter
            .charge(&rule, Key::from("k"), 20)
            .await
            .expect("charge");
        assert_eq!(left(&*limiter, &rule, "k").await, 0, "{algorithm:?}");
        assert!(
            !limiter
                .check(&rule, Key::from("k"))
                .await
                .expect("check")
                .allowed
        );
        // Nothing to charge: nothing changes; another key is untouched.
        limiter
            .charge(&rule, Key::from("k2"), 0)
            .await
            .expect("charge");
        assert_eq!(left(&*limiter, &rule, "k2").await, 10, "{algorithm:?}");
    }
}

/// GCRA keeps the whole debt; the token bucket empties and keeps none below.
async fn gcra_keeps_the_debt_the_bucket_does_not(h: Harness) {
    let limiter = h.limiter().await;
    let gcra = Rule::new("gcra", Quota::per_hour(10));
    let bucket = Rule::new("bucket", Quota::per_hour(10)).with_algorithm(Algorithm::TokenBucket);
    for rule in [&gcra, &bucket] {
        limiter
            .charge(rule, Key::from("k"), 30)
            .await
            .expect("charge");
    }
    // One emission interval (6 min) later, the bucket has a token; GCRA is 20 units in debt.
    h.wait(Duration::from_secs(361)).await;
    assert!(
        limiter
            .check(&bucket, Key::from("k"))
            .await
            .expect("check")
            .allowed
    );
    let denied = limiter.check(&gcra, Key::from("k")).await.expect("check");
    assert!(!denied.allowed);
    h.assert_wait(denied.retry_after, Duration::from_secs(20 * 360 - 1));
}

async fn a_custom_algorithm_has_no_charge(h: Harness) {
    let limiter = h.limiter().await;
    let rule = Rule::new("lua", Quota::per_hour(10)).with_algorithm(Algorithm::Custom(
        CustomAlgorithm::new(
            "noop",
            "return function() return true, 0, 0, 0, function() end end",
        ),
    ));
    let err = limiter
        .charge(&rule, Key::from("k"), 3)
        .await
        .expect_err("no charge");
    assert!(matches!(err, LimiterError::Unsupported(_)), "{err}");
}

backend_suite!(
    a_charge_takes_what_it_says_whatever_is_left,
    gcra_keeps_the_debt_the_bucket_does_not,
    a_custom_algorithm_has_no_charge,
);
