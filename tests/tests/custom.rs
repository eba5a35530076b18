//! Custom Lua algorithms: the documented example against every Redis backend, contract
//! violations reported clearly, and the memory backend refusing them.

use std::sync::Arc;
use std::time::Duration;

use redis_guard::ConfigErrorKind;
use redis_guard::backend::BackendError;
use redis_guard::rate_limit::{
    Algorithm, CustomAlgorithm, FailurePolicy, HeaderKey, Key, Limiter, LimiterError, Mode, Quota,
    RateLimitLayer, Rule,
};
use redis_guard_tests::{Harness, backend_suite, by_client, call, empty_ok, from};
use tower::Layer;

const CALLS_DAILY_CAP: &str =
    include_str!("../../crates/redis-guard/src/rate_limit/algorithm/examples/calls_daily_cap.lua");

fn calls_rule() -> Rule {
    Rule::new("calls", Quota::per_minute(5).burst(20)).with_algorithm(Algorithm::Custom(
        CustomAlgorithm::new("calls_daily_cap", CALLS_DAILY_CAP),
    ))
}

async fn the_documented_example_limits_per_window_and_per_day(h: Harness) {
    let l = h.limiter().await;
    let rule = calls_rule();
    if !h.is_redis() {
        let err = l
            .check(&rule, Key::from("+15550100"))
            .await
            .expect_err("needs Redis");
        assert!(
            matches!(&err, LimiterError::Config(e) if e.kind() == ConfigErrorKind::Unsupported),
            "{err}"
        );
        assert!(err.to_string().contains("needs Redis"), "{err}");
        return;
    }
    let day = Duration::from_secs(86_400);
    h.align(day, Duration::from_secs(3600)).await; // 01:00 UTC
    for window in 0..3 {
        for i in 0..5 {
            let d = l
                .check(&rule, Key::from("+15550100"))
                .await
                .expect("decision");
            assert!(d.allowed, "window {window}, call {i}");
        }
        let d = l
            .check(&rule, Key::from("+15550100"))
            .await
            .expect("decision");
        assert!(!d.allowed, "the sixth call in a minute");
        assert!(
            d.retry_after <= Duration::from_secs(60),
            "window {window}: {d:?}"
        );
        h.wait(Duration::from_secs(61)).await;
    }
    for i in 0..5 {
        assert!(
            l.check(&rule, Key::from("+15550100"))
                .await
                .expect("decision")
                .allowed,
            "call {i}"
        );
    }
    // 20 calls today: the daily cap holds, now and in a fresh window, until midnight.
    let until_midnight = Duration::from_secs(23 * 3600 - 3 * 61);
    for wait in [0, 61] {
        h.wait(Duration::from_secs(wait)).await;
        let d = l
            .check(&rule, Key::from("+15550100"))
            .await
            .expect("decision");
        assert!(!d.allowed);
        let expected = until_midnight - Duration::from_secs(wait);
        assert!(
            d.retry_after <= expected && d.retry_after + Duration::from_secs(2) >= expected,
            "{:?} vs {expected:?}",
            d.retry_after
        );
    }
    // Another number is not affected.
    assert!(
        l.check(&rule, Key::from("+15550199"))
            .await
            .expect("decision")
            .allowed
    );
    // Next day, calls go through again.
    h.wait(until_midnight - Duration::from_secs(60)).await;
    assert!(
        l.check(&rule, Key::from("+15550100"))
            .await
            .expect("decision")
            .allowed
    );
}

async fn a_custom_rule_is_all_or_nothing_with_builtin_ones(h: Harness) {
    let svc = RateLimitLayer::builder(h.limiter().await)
        .rule(
            "ip",
            HeaderKey::new(http::HeaderName::from_static("x-ip")),
            Quota::per_hour(100),
        )
        .rule_with(
            calls_rule(),
            HeaderKey::new(http::HeaderName::from_static("x-from")),
        )
        .build()
        .expect("valid")
        .layer(tower::service_fn(|_| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::<
                bytes::Bytes,
            >::default()))
        }));
    let req = || {
        http::Request::get("/")
            .header("x-ip", "1.2.3.4")
            .header("x-from", "+15550100")
            .body(http_body_util::Full::<bytes::Bytes>::default())
            .expect("request")
    };
    for _ in 0..5 {
        assert_eq!(call(svc.clone(), req()).await.status, 200);
    }
    let denied = call(svc.clone(), req()).await;
    assert_eq!(denied.status, 429);
    let body: serde_json::Value = serde_json::from_str(&denied.body).expect("json");
    assert_eq!(body["rule"], "calls");
    // The IP rule took 5, not 6.
    let l = h.limiter().await;
    let ip = Rule::new("ip", Quota::per_hour(100));
    let d = l.check(&ip, Key::from("1.2.3.4")).await.expect("decision");
    assert_eq!(d.remaining, 100 - 6, "5 admitted + this one");
}

async fn contract_violations_are_clear_errors(h: Harness) {
    let l: Arc<dyn Limiter> = h.limiter().await;
    let cases = [
        ("not_a_function", "return 42", "is not a function"),
        (
            "bad_allowed",
            "return function(key, now, p) return 1, 0, 0, 0 end",
            "must return a boolean first",
        ),
        (
            "negative",
            "return function(key, now, p) return false, -1, 5, 0 end",
            "remaining = -1",
        ),
        (
            "no_commit",
            "return function(key, now, p) return true, 1, 0, 0 end",
            "without returning a commit function",
        ),
        (
            "zero_retry",
            "return function(key, now, p) return false, 0, 0, 0 end",
            "retry_after_us = 0",
        ),
        (
            "syntax",
            "return function(key, now, p) retrun end",
            "compiling",
        ),
        (
            "runtime",
            "return function(key, now, p) return nil + 1 end",
            "user_script",
        ),
    ];
    for (name, source, expect) in cases {
        let rule = Rule::new("c", Quota::per_minute(5))
            .with_algorithm(Algorithm::Custom(CustomAlgorithm::new(name, source)));
        let err = l.check(&rule, Key::from("k")).await.expect_err(name);
        assert!(
            matches!(err, LimiterError::Backend(BackendError::Script { .. })),
            "{name}: {err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(expect), "{name}: {text}");
        if !matches!(name, "syntax" | "runtime") {
            assert!(text.contains(name), "{name} is named: {text}");
        }
    }
    assert!(h.keys().await.is_empty(), "nothing was written");
    // Bad configuration is caught when the layer is built.
    let err = Rule::new("c", Quota::per_minute(5))
        .with_algorithm(Algorithm::Custom(CustomAlgorithm::new(
            "bad name!",
            "return 1",
        )))
        .validate()
        .expect_err("bad name");
    assert!(err.to_string().contains("`bad name!`"), "{err}");
}

/// A shadow or soft rule whose evaluation fails (here a custom algorithm that errors at run
/// time) never blocks: it is left out of the decision, the enforced rule beside it decides,
/// and a layer failing closed does not answer `503` for it.
async fn an_observed_rule_that_fails_never_blocks(h: Harness) {
    let broken = |mode| {
        Rule::new("observed", Quota::per_minute(5))
            .with_algorithm(Algorithm::Custom(CustomAlgorithm::new(
                "broken",
                "return function(key, now, p) return nil + 1 end",
            )))
            .with_mode(mode)
    };
    let limiter = h.limiter().await;
    let layer = |rules: Vec<Rule>| {
        let mut b = RateLimitLayer::builder(limiter.clone()).failure_policy(FailurePolicy::Closed);
        for rule in rules {
            b = b.rule_with(rule, by_client());
        }
        b.build().expect("valid").layer(empty_ok())
    };
    for (mode, client) in [(Mode::Shadow, "s"), (Mode::Soft, "t")] {
        let beside = layer(vec![Rule::new("api", Quota::per_hour(2)), broken(mode)]);
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let reply = call(beside.clone(), from(client)).await;
            assert_eq!(
                reply.header("ratelimit-policy"),
                "\"api\";q=2;w=3600",
                "{mode:?}"
            );
            assert_eq!(reply.header("ratelimit-exceeded"), "", "{mode:?}");
            statuses.push(reply.status);
        }
        assert_eq!(
            statuses,
            [200, 200, 429],
            "{mode:?}: the enforced rule decides"
        );
        let reply = call(layer(vec![broken(mode)]), from(client)).await;
        assert_eq!(reply.status, 200, "{mode:?}: alone, it never blocks");
    }
}

backend_suite!(the_documented_example_limits_per_window_and_per_day);
// Custom rules run as Lua: the memory backend refuses them (the scenario above checks how).
backend_suite!(
    redis_only: a_custom_rule_is_all_or_nothing_with_builtin_ones,
    contract_violations_are_clear_errors,
    an_observed_rule_that_fails_never_blocks,
);
