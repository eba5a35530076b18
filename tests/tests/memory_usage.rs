//! Bytes per key of each algorithm, measured with `MEMORY USAGE` on a real Redis. Run with
//! `cargo test -p redis-guard-tests --test memory_usage -- --nocapture` to see the table that
//! the `Algorithm` docs quote.

use redis_guard::rate_limit::{Algorithm, Check, Key, Quota, RedisLimiter, Rule};
use redis_guard_tests::Harness;

#[tokio::test]
async fn memory_usage_per_key() {
    let h = Harness::redis().await;
    let limiter = h.limiter().await;
    let namer = RedisLimiter::new(h.backend().await);
    let mut conn = h.inspect().await;
    let mut rows = Vec::new();
    // `varying`: the rule's quota is resolved per request, so the state keeps its shape.
    for (name, algorithm, varying) in [
        ("gcra", Algorithm::Gcra, false),
        ("gcra (plans)", Algorithm::Gcra, true),
        ("token_bucket", Algorithm::TokenBucket, false),
        ("fixed_window", Algorithm::FixedWindow, false),
        ("sliding_counter", Algorithm::SlidingCounter, false),
        ("sliding_log", Algorithm::SlidingLog, false),
    ] {
        let mut bytes = Vec::new();
        for limit in [10u32, 100, 1000] {
            let quota = Quota::per_hour(limit);
            let rule = Rule::new(
                format!("{}-{limit}", name.replace([' ', '(', ')'], "")),
                quota,
            )
            .with_algorithm(algorithm.clone());
            // Fill the quota: the log's worst case.
            let mut check = Check::new(rule.clone(), Key::from("client")).with_cost(limit);
            if varying {
                check = check.with_quota(quota);
            }
            let d = limiter.check_all(vec![check]).await.expect("decision");
            assert!(d.allowed);
            let key = namer.key_name(&Check::new(rule, Key::from("client")));
            let used = redis_guard_testkit::inspect::memory_usage(&mut conn, &key)
                .await
                .expect("MEMORY USAGE")
                .expect("the key exists");
            bytes.push(used);
        }
        println!(
            "{name:<16} limit 10: {:>6} B   limit 100: {:>6} B   limit 1000: {:>6} B",
            bytes[0], bytes[1], bytes[2]
        );
        rows.push((algorithm, bytes));
    }
    for (algorithm, bytes) in &rows {
        if *algorithm == Algorithm::SlidingLog {
            assert!(
                bytes[2] > 20 * bytes[0] / 2,
                "the log grows with the limit: {bytes:?}"
            );
            assert!(bytes[2] > 10_000, "{bytes:?}");
        } else {
            assert!(
                bytes.iter().all(|&b| b < 200),
                "{algorithm:?}: O(1) state, {bytes:?}"
            );
        }
    }
}
