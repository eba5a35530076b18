//! The layer's rollout modes, per-rule failure policies and metrics, on the memory limiter (the
//! shared suites in `tests/` run the modes on every backend).

use super::response::tests::{collected, failing, keyed, x_key as key};
use crate::rate_limit::{FailurePolicy, MemoryLimiter, Mode, Quota, RateLimitLayer, Rule};
use crate::telemetry::testing::Captured;
use crate::{ConfigError, ConfigErrorKind};

/// One answer, as a client sees it.
#[derive(Debug)]
struct Answer {
    status: u16,
    policy: Option<String>,
    state: Option<String>,
}

/// Asserts each metric's total under a rule: `(name after redis_guard_rate_limit_, rule, total)`.
fn assert_totals(metrics: &Captured, totals: &[(&str, &str, u64)]) {
    for &(name, rule, total) in totals {
        let name = format!("redis_guard_rate_limit_{name}{{rule=\"{rule}\"}}");
        assert_eq!(metrics.get(&name), total, "{name}");
    }
}

/// `n` requests through a layer with one rule, `api` (2 a minute), in `mode`; their answers
/// and the metrics they recorded.
async fn api_in(mode: Mode, n: usize) -> (Vec<Answer>, Captured) {
    let metrics = Captured::default();
    let _guard = metrics::set_default_local_recorder(&metrics);
    let layer = keyed(Rule::new("api", Quota::per_minute(2)).with_mode(mode))
        .build()
        .unwrap();
    (send(&layer, n).await, metrics.clone())
}

/// `n` requests from key `a`.
async fn send(layer: &RateLimitLayer, n: usize) -> Vec<Answer> {
    let mut out = Vec::new();
    for _ in 0..n {
        let res = collected(layer, Some("a")).await;
        let header = |name| {
            res.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        out.push(Answer {
            status: res.status().as_u16(),
            policy: header("ratelimit-policy"),
            state: header("ratelimit"),
        });
    }
    out
}

fn statuses(answers: &[Answer]) -> Vec<u16> {
    answers.iter().map(|a| a.status).collect()
}

/// What shadow and soft rules count, and what of them shows: a shadow rule nothing, a soft one
/// its state (none left once exceeded). (Their statuses, the soft rule's policy and
/// `RateLimit-Exceeded` on every backend: `rollout.rs` `shadow_and_soft_rules_never_block`.)
#[tokio::test]
async fn shadow_and_soft_rules_count_what_they_would_have_limited() {
    let (answers, metrics) = api_in(Mode::Shadow, 5).await;
    assert_eq!(statuses(&answers), [200; 5]);
    assert!(
        answers
            .iter()
            .all(|a| a.policy.is_none() && a.state.is_none()),
        "{answers:?}"
    );
    assert_totals(
        &metrics,
        &[
            ("allowed_total", "api", 2),
            ("shadow_limited_total", "api", 3),
            ("limited_total", "api", 0),
            // One latency sample per request.
            ("decision_seconds", "api", 5),
        ],
    );
    let (answers, metrics) = api_in(Mode::Soft, 4).await;
    let state = answers[3].state.as_deref().unwrap();
    assert!(state.starts_with("\"api\";r=0;"), "{state}");
    assert_totals(&metrics, &[("soft_limited_total", "api", 2)]);
}

/// A candidate beside an enforced rule: the enforced rule alone decides (alone shows:
/// `rollout.rs`); the candidate counts every request on its own, and its denials never keep the
/// enforced rule from counting. The rules' metric keys are made when the layer is built; a
/// recorder installed after that (here a thread's local one) still gets every verdict and
/// every decision time.
#[tokio::test]
async fn a_candidate_is_tried_beside_the_enforced_rule() {
    let layer = keyed(Rule::new("api", Quota::per_minute(4)))
        .candidate("api", Quota::per_minute(1))
        .build()
        .unwrap();
    let metrics = Captured::default();
    let _guard = metrics::set_default_local_recorder(&metrics);
    let answers = send(&layer, 6).await;
    assert_eq!(statuses(&answers), [200, 200, 200, 200, 429, 429]);
    assert_totals(
        &metrics,
        &[
            ("allowed_total", "api", 4),
            ("limited_total", "api", 2),
            ("decision_seconds", "api", 6),
            ("allowed_total", "api.candidate", 1),
            ("shadow_limited_total", "api.candidate", 5),
            ("decision_seconds", "api.candidate", 6),
        ],
    );
}

#[test]
fn a_candidate_needs_its_rule_first() {
    let err = RateLimitLayer::builder(MemoryLimiter::new())
        .candidate("api", Quota::per_minute(1))
        .rule_with(Rule::new("api", Quota::per_minute(4)), key())
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ConfigErrorKind::UnknownRule);
    assert_eq!(err.rule(), Some("api"));
    assert!(err.to_string().contains("names rule `api`"), "{err}");
}

/// Each rule's own failure policy: a `Closed` rule answers `503` for the request; otherwise the
/// `Fallback` rules decide in process and the `Open` ones are skipped. (A layer whose every
/// rule fails open: `rate_limit.rs` `redis_down_fails_open_or_closed_without_hanging`.)
#[tokio::test]
async fn each_rule_fails_by_its_own_policy() {
    let metrics = Captured::default();
    let _guard = metrics::set_default_local_recorder(&metrics);
    // The layer falls back (the default); "login" fails closed.
    let closed = keyed(failing("api"))
        .rule_with(failing("login").on_failure(FailurePolicy::Closed), key())
        .build()
        .unwrap();
    assert_eq!(statuses(&send(&closed, 2).await), [503, 503]);
    // "api" falls back with its burst of 10; "open" is skipped: no header names it.
    let mixed = keyed(failing("api").with_cost(5))
        .rule_with(failing("open").on_failure(FailurePolicy::Open), key())
        .build()
        .unwrap();
    let answers = send(&mixed, 3).await;
    assert_eq!(statuses(&answers), [200, 200, 429]);
    assert_eq!(answers[0].policy.as_deref(), Some("\"api\";q=10;w=60"));
    // A layer that fails open, with one rule that falls back with a share for 2 replicas.
    let shared = keyed(
        failing("api")
            .with_cost(5)
            .on_failure(FailurePolicy::fallback(2).unwrap()),
    )
    .failure_policy(FailurePolicy::Open)
    .build()
    .unwrap();
    assert_eq!(statuses(&send(&shared, 2).await), [200, 429]);
    assert_totals(&metrics, &[("backend_errors_total", "login", 2)]);
    assert_totals(&metrics, &[("fallback_decisions_total", "api", 3 + 2)]);
    assert_totals(&metrics, &[("fallback_decisions_total", "open", 0)]);
}

/// A rule whose share of the fallback cannot work is refused when the layer is built, by the
/// layer's policy and by the rule's own.
#[test]
fn a_rule_whose_share_cannot_work_is_refused() {
    let rule = Rule::new("api", Quota::per_minute(10)).with_cost(3);
    let five = FailurePolicy::fallback(5).unwrap();
    let by_layer = keyed(rule.clone()).failure_policy(five);
    let by_rule = keyed(rule.on_failure(five)).failure_policy(FailurePolicy::Closed);
    for err in [by_layer, by_rule].map(|b| b.build().unwrap_err()) {
        assert_eq!(
            err.to_string(),
            "FailurePolicy::Fallback with 5 replicas: the share of rule `api`: cost 3 is larger than the burst 2, so no request could ever pass"
        );
        assert_eq!(
            (err.kind(), err.value()),
            (ConfigErrorKind::Fallback, Some("5"))
        );
        let share = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<ConfigError>());
        assert_eq!(share.map(ConfigError::kind), Some(ConfigErrorKind::Cost));
    }
}

/// On Redis: the second denial of a client comes from the deny cache, counted both as a hit
/// and as a limited request.
#[tokio::test]
async fn deny_cache_hits_are_counted_on_redis() {
    let server = redis_guard_testkit::RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let conn = crate::backend::RedisConnection::open(&server.url())
        .await
        .expect("connect");
    let metrics = Captured::default();
    let _guard = metrics::set_default_local_recorder(&metrics);
    let layer = RateLimitLayer::builder(crate::rate_limit::RedisLimiter::new(conn))
        .rule_with(Rule::new("api", Quota::per_hour(1)), key())
        .build()
        .unwrap();
    assert_eq!(statuses(&send(&layer, 3).await), [200, 429, 429]);
    assert_totals(
        &metrics,
        &[
            ("deny_cache_hits_total", "api", 1),
            ("limited_total", "api", 2),
        ],
    );
}

/// `RedisLimiter::check` outside a layer (login, calls per phone number) is counted the same way.
#[tokio::test]
async fn direct_checks_are_counted_too() {
    use crate::rate_limit::Key;
    let metrics = Captured::default();
    let _guard = metrics::set_default_local_recorder(&metrics);
    let limiter = MemoryLimiter::new();
    let login = Rule::new("login", Quota::per_minute(1)).with_mode(Mode::Shadow);
    for _ in 0..3 {
        limiter.check(&login, Key::from("alice")).await.unwrap();
    }
    // Modes are the layer's: a direct call's shadow rule still limits, and is counted so.
    assert_totals(
        &metrics,
        &[("allowed_total", "login", 1), ("limited_total", "login", 2)],
    );
    let failing = limiter.check(&failing("lua"), Key::from("alice")).await;
    assert!(failing.is_err());
    assert_totals(&metrics, &[("backend_errors_total", "lua", 1)]);
}

/// The fallback's share of a rule keeps the rule's static allow list.
#[tokio::test]
async fn the_fallback_keeps_a_rules_allow_list() {
    use crate::rate_limit::Key;
    let layer = keyed(failing("lua"))
        .rule_with(
            Rule::new("api", Quota::per_minute(1)).with_allowed_keys([Key::from("a")]),
            key(),
        )
        .build()
        .unwrap();
    // The Lua rule fails every evaluation: the fallback decides both rules, and "a" is on
    // "api"'s allow list there too.
    assert_eq!(statuses(&send(&layer, 3).await), [200, 200, 200]);
}

/// The fallback's share of a rule: the limit and burst of the quota it resolved for the request
/// (not the rule's own) divided among the replicas, rounded down, never below 1.
#[tokio::test]
async fn the_fallback_shares_the_resolved_quota() {
    let plans = failing("plans").with_quota_from(|_| Some(Quota::per_minute(8)));
    let api = Rule::new("api", Quota::per_minute(10).burst(6))
        .with_algorithm(failing("api").algorithm().clone());
    // 8 a minute over 2 replicas: 4 here (the rule's own 10 would give 5); 10 a minute with a
    // burst of 6 over 4: 2 a minute, a burst of 1; over 1000: 1 a minute.
    for (rule, replicas, admitted, policy) in [
        (plans, 2, 4, "\"plans\";q=4;w=60"),
        (api.clone(), 4, 1, "\"api\";q=2;w=60"),
        (api, 1000, 1, "\"api\";q=1;w=60"),
    ] {
        let layer = keyed(rule)
            .failure_policy(FailurePolicy::fallback(replicas).unwrap())
            .build()
            .unwrap();
        let answers = send(&layer, admitted + 2).await;
        assert_eq!(
            statuses(&answers),
            [vec![200; admitted], vec![429; 2]].concat()
        );
        assert_eq!(answers[0].policy.as_deref(), Some(policy));
    }
}
