//! Every algorithm's documented semantics, pinned against the memory backend and a real Redis
//! through the same code. Time moves with the harness' manual clock (Redis: a shift added to
//! `TIME`), so hour-long windows pass instantly and exactly.

use std::sync::Arc;
use std::time::Duration;

use redis_guard::rate_limit::{
    Algorithm, Check, Decision, HeaderKey, Key, Limiter, Quota, RateLimitLayer, Rule,
};
use redis_guard_tests::{ALGORITHMS, Harness, backend_suite, call};
use tower::Layer;

const H: Duration = Duration::from_secs(3600);

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

async fn check(l: &Arc<dyn Limiter>, rule: &Rule, key: &str) -> Decision {
    l.check(rule, Key::from(key)).await.expect("decision")
}

async fn check_cost(l: &Arc<dyn Limiter>, rule: &Rule, key: &str, cost: u32) -> Decision {
    l.check_all(vec![
        Check::new(rule.clone(), Key::from(key)).with_cost(cost),
    ])
    .await
    .expect("decision")
}

/// Admitted requests in a row until the first denial (at most 50).
async fn admitted_in_a_row(l: &Arc<dyn Limiter>, rule: &Rule, key: &str) -> u32 {
    let mut n = 0;
    while n < 50 && check(l, rule, key).await.allowed {
        n += 1;
    }
    n
}

async fn fixed_window_counts_per_window(h: Harness) {
    let l = h.limiter().await;
    let rule = Rule::new("fw", Quota::per_hour(10)).with_algorithm(Algorithm::FixedWindow);
    for i in 0..10 {
        let d = check(&l, &rule, "k").await;
        assert!(d.allowed);
        assert_eq!(d.remaining, 9 - i);
    }
    let d = check(&l, &rule, "k").await;
    assert!(!d.allowed);
    assert_eq!(d.remaining, 0);
    h.assert_wait(d.retry_after, H);
    h.wait(secs(3599.0)).await;
    let d = check(&l, &rule, "k").await;
    assert!(
        !d.allowed,
        "rejected requests were not counted, the window did not move"
    );
    h.assert_wait(d.retry_after, secs(1.0));
    h.wait(secs(2.0)).await;
    let d = check(&l, &rule, "k").await;
    assert!(d.allowed, "a new window");
    assert_eq!(d.remaining, 9);

    let weighted = Rule::new("fw-cost", Quota::per_hour(10)).with_algorithm(Algorithm::FixedWindow);
    assert_eq!(check_cost(&l, &weighted, "w", 4).await.remaining, 6);
    assert_eq!(check_cost(&l, &weighted, "w", 4).await.remaining, 2);
    let d = check_cost(&l, &weighted, "w", 4).await;
    assert!(!d.allowed);
    assert_eq!(d.remaining, 2, "the rejected 4 took nothing");
    let d = check_cost(&l, &weighted, "w", 2).await;
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
}

/// How many requests each algorithm admits within one second around a window edge, for a limit
/// of 10 per hour. The first request opens the windows half a second after an aligned edge.
async fn boundary_burst(h: &Harness, algorithm: Algorithm) -> u32 {
    let l = h.limiter().await;
    let rule = Rule::new(
        format!("edge-{}", algorithm_name(&algorithm)),
        Quota::per_hour(10),
    )
    .with_algorithm(algorithm);
    h.align(H, secs(0.5)).await;
    assert!(check(&l, &rule, "e").await.allowed);
    h.wait(secs(3599.2)).await; // 0.3 s before the fixed window (opened at +0.5 s) closes
    let before = admitted_in_a_row(&l, &rule, "e").await;
    h.wait(secs(1.0)).await; // 0.7 s after it closed
    let after = admitted_in_a_row(&l, &rule, "e").await;
    before + after
}

fn algorithm_name(a: &Algorithm) -> &'static str {
    match a {
        Algorithm::Gcra => "gcra",
        Algorithm::FixedWindow => "fixed",
        Algorithm::SlidingLog => "log",
        Algorithm::SlidingCounter => "counter",
        Algorithm::TokenBucket => "bucket",
        _ => "other",
    }
}

async fn only_fixed_window_bursts_across_an_edge(h: Harness) {
    assert_eq!(
        boundary_burst(&h, Algorithm::FixedWindow).await,
        19,
        "9 before the edge + 10 after, within one second"
    );
    for algorithm in [
        Algorithm::SlidingLog,
        Algorithm::SlidingCounter,
        Algorithm::Gcra,
        Algorithm::TokenBucket,
    ] {
        let n = boundary_burst(&h, algorithm.clone()).await;
        assert!(n <= 10, "{algorithm:?} admitted {n} within one second");
    }
}

async fn sliding_log_is_exact_over_any_window(h: Harness) {
    let l = h.limiter().await;
    let rule = Rule::new("log", Quota::per_hour(3)).with_algorithm(Algorithm::SlidingLog);
    for (i, gap) in [0.0, 10.0, 10.0].into_iter().enumerate() {
        h.wait(secs(gap)).await;
        let d = check(&l, &rule, "s").await;
        assert!(d.allowed);
        assert_eq!(d.remaining, 2 - u32::try_from(i).expect("small"));
    }
    h.wait(secs(10.0)).await; // t = 30 s
    let d = check(&l, &rule, "s").await;
    assert!(!d.allowed);
    h.assert_wait(d.retry_after, secs(3570.0)); // until the t = 0 entry leaves
    h.assert_wait(d.reset_after, secs(3590.0)); // until the t = 20 entry leaves
    h.wait(secs(3569.0)).await; // t = 3599 s
    assert!(!check(&l, &rule, "s").await.allowed);
    h.wait(secs(2.0)).await; // t = 3601 s: only the t = 0 entry has left
    assert!(check(&l, &rule, "s").await.allowed);
    let d = check(&l, &rule, "s").await;
    assert!(!d.allowed);
    h.assert_wait(d.retry_after, secs(9.0)); // the t = 10 entry leaves at 3610 s

    let weighted = Rule::new("log-cost", Quota::per_hour(5)).with_algorithm(Algorithm::SlidingLog);
    assert_eq!(check_cost(&l, &weighted, "w", 3).await.remaining, 2);
    h.wait(secs(60.0)).await;
    let d = check_cost(&l, &weighted, "w", 3).await;
    assert!(!d.allowed);
    assert_eq!(d.remaining, 2);
    h.assert_wait(d.retry_after, secs(3540.0));
    assert_eq!(check_cost(&l, &weighted, "w", 2).await.remaining, 0);
}

async fn sliding_counter_weights_the_previous_window(h: Harness) {
    let l = h.limiter().await;
    let rule = Rule::new("ctr", Quota::per_hour(10)).with_algorithm(Algorithm::SlidingCounter);
    h.align(H, secs(1.0)).await;
    for i in 0..10 {
        assert_eq!(check(&l, &rule, "c").await.remaining, 9 - i);
    }
    let d = check(&l, &rule, "c").await;
    assert!(!d.allowed);
    // The rest of this window, then until 10 × (remaining share) ≤ 9: 360 s into the next.
    h.assert_wait(d.retry_after, secs(3599.0 + 360.0));
    h.wait(secs(3599.0 + 1700.0)).await; // 1700 s into the next window
    // The previous window still covers 1900/3600 of the sliding window: ⌊10 × 0.53⌋ = 5 used.
    for i in 0..5 {
        let d = check(&l, &rule, "c").await;
        assert!(d.allowed, "request {i}");
        assert_eq!(d.remaining, 4 - i);
    }
    let d = check(&l, &rule, "c").await;
    assert!(!d.allowed);
    // 5 now + 10 × (3600 − e)/3600 must fall to 9: at e = 2160 s, 460 s from now.
    h.assert_wait(d.retry_after, secs(460.0));
}

async fn token_bucket_refills_and_never_goes_negative(h: Harness) {
    let l = h.limiter().await;
    let rule = Rule::new("tb", Quota::per_hour(10).burst(5)).with_algorithm(Algorithm::TokenBucket);
    for i in 0..5 {
        assert_eq!(check(&l, &rule, "t").await.remaining, 4 - i);
    }
    let d = check(&l, &rule, "t").await;
    assert!(!d.allowed);
    h.assert_wait(d.retry_after, secs(360.0)); // one token per 360 s
    h.wait(secs(360.0)).await;
    assert!(check(&l, &rule, "t").await.allowed);
    assert!(!check(&l, &rule, "t").await.allowed);
    h.wait(secs(720.0)).await; // two tokens
    let d = check_cost(&l, &rule, "t", 3).await;
    assert!(!d.allowed, "3 tokens asked, 2 there");
    assert_eq!(d.remaining, 2, "and none taken");
    h.assert_wait(d.retry_after, secs(360.0));
    let d = check_cost(&l, &rule, "t", 2).await;
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
    let d = check_cost(&l, &rule, "t", 5).await;
    assert!(!d.allowed);
    assert_eq!(d.remaining, 0, "never negative");
    h.assert_wait(d.reset_after, secs(1800.0));
}

async fn gcra_refills_one_interval_at_a_time(h: Harness) {
    let l = h.limiter().await;
    let rule = Rule::new("g", Quota::per_hour(10).burst(3));
    for i in 0..3 {
        assert_eq!(check(&l, &rule, "g").await.remaining, 2 - i);
    }
    let d = check(&l, &rule, "g").await;
    assert!(!d.allowed);
    h.assert_wait(d.retry_after, secs(360.0));
    h.wait(secs(359.0)).await;
    assert!(!check(&l, &rule, "g").await.allowed);
    h.wait(secs(1.0)).await;
    assert!(check(&l, &rule, "g").await.allowed);
    assert!(!check(&l, &rule, "g").await.allowed);
    h.wait(H).await;
    assert_eq!(
        admitted_in_a_row(&l, &rule, "g").await,
        3,
        "refills to the burst, no further"
    );
}

fn header_key(name: &'static str) -> HeaderKey {
    HeaderKey::new(http::HeaderName::from_static(name))
}

fn req(ip: &str, user: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    http::Request::get("/")
        .header("x-ip", ip)
        .header("x-user", user)
        .body(http_body_util::Full::default())
        .expect("request")
}

fn ok_app() -> impl tower::Service<
    http::Request<http_body_util::Full<bytes::Bytes>>,
    Response = http::Response<http_body_util::Full<bytes::Bytes>>,
    Error = std::convert::Infallible,
    Future = impl Future<
        Output = Result<
            http::Response<http_body_util::Full<bytes::Bytes>>,
            std::convert::Infallible,
        >,
    > + Send,
> + Clone
+ Send {
    tower::service_fn(|_| async { Ok(http::Response::new(http_body_util::Full::default())) })
}

/// Per-IP 5 and per-user 3 on one route, for every algorithm: the request the user rule denies
/// consumes nothing under the IP rule.
async fn several_rules_are_all_or_nothing(h: Harness) {
    for algorithm in ALGORITHMS {
        let name = algorithm_name(&algorithm);
        let ip_rule =
            Rule::new(format!("ip-{name}"), Quota::per_hour(5)).with_algorithm(algorithm.clone());
        let user_rule =
            Rule::new(format!("user-{name}"), Quota::per_hour(3)).with_algorithm(algorithm);
        let svc = RateLimitLayer::builder(h.limiter().await)
            .rule_with(ip_rule.clone(), header_key("x-ip"))
            .rule_with(user_rule.clone(), header_key("x-user"))
            .build()
            .expect("valid")
            .layer(ok_app());
        for i in 0..3u32 {
            let r = call(svc.clone(), req("1.1.1.1", "u")).await;
            assert_eq!(r.status, 200);
            // The tightest rule is reported: the user's.
            let rl = r.header("ratelimit").to_owned();
            assert!(
                rl.contains(&format!("\"user-{name}\";r={}", 2 - i))
                    && rl.contains(&format!("\"ip-{name}\";r={}", 4 - i)),
                "{rl}"
            );
        }
        let snapshot = state_of(&h, &[&ip_rule, &user_rule], &["1.1.1.1", "u"]).await;
        let denied = call(svc.clone(), req("1.1.1.1", "u")).await;
        assert_eq!(denied.status, 429);
        let body: serde_json::Value = serde_json::from_str(&denied.body).expect("json");
        assert_eq!(body["rule"], format!("user-{name}"), "{name}");
        assert_eq!(
            state_of(&h, &[&ip_rule, &user_rule], &["1.1.1.1", "u"]).await,
            snapshot,
            "{name}: the denied request changed stored state"
        );
        // The IP rule still has exactly 2 left: the denied request took nothing.
        let r = call(svc.clone(), req("1.1.1.1", "v")).await;
        assert_eq!(r.status, 200);
        assert!(
            r.header("ratelimit")
                .contains(&format!("\"ip-{name}\";r=1")),
            "{}",
            r.header("ratelimit")
        );
    }
}

/// The raw Redis values behind `rules` for `keys` (empty on the memory backend).
async fn state_of(h: &Harness, rules: &[&Rule], keys: &[&str]) -> Vec<String> {
    if !h.is_redis() {
        return Vec::new();
    }
    let limiter = redis_guard::rate_limit::RedisLimiter::new(h.backend().await);
    let mut conn = h.inspect().await;
    let mut out = Vec::new();
    for (rule, key) in rules.iter().zip(keys) {
        let name = limiter.key_name(&Check::new((*rule).clone(), Key::from(*key)));
        let kind: String = redis::cmd("TYPE")
            .arg(&name)
            .query_async(&mut conn)
            .await
            .expect("TYPE");
        let value: String = match kind.as_str() {
            "zset" => {
                let v: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&name)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async(&mut conn)
                    .await
                    .expect("ZRANGE");
                v.join(",")
            }
            _ => {
                let v: Option<String> = redis::cmd("GET")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
                    .expect("GET");
                let v = v.unwrap_or_default();
                // A token bucket stores "credit:time:emission:burst"; a refund recomputes it at
                // a later time, so compare the invariant time - credit (when the bucket was
                // empty).
                let mut fields = v.split(':');
                match (rule.algorithm(), fields.next().zip(fields.next())) {
                    (&Algorithm::TokenBucket, Some((credit, at))) => {
                        let credit: i128 = credit.parse().expect("credit");
                        let at: i128 = at.parse().expect("time");
                        format!("empty-at {}", at - credit)
                    }
                    _ => v,
                }
            }
        };
        out.push(format!("{name}={value}"));
    }
    out
}

async fn denial_reports_the_longest_wait(h: Harness) {
    let svc = RateLimitLayer::builder(h.limiter().await)
        .rule("burst", header_key("x-ip"), Quota::per_minute(2))
        .rule("hourly", header_key("x-user"), Quota::per_hour(2))
        .build()
        .expect("valid")
        .layer(ok_app());
    assert_eq!(call(svc.clone(), req("a", "u")).await.status, 200);
    assert_eq!(call(svc.clone(), req("a", "u")).await.status, 200);
    let r = call(svc.clone(), req("a", "u")).await;
    assert_eq!(r.status, 429);
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("json");
    assert_eq!(
        body["rule"], "hourly",
        "both deny; the hourly wait is longer"
    );
    let retry: u64 = r.header("retry-after").parse().expect("seconds");
    assert!((1799..=1800).contains(&retry), "{retry}");
}

async fn quota_strings_build_several_rules_over_one_key(h: Harness) {
    let quotas = Quota::parse_many("2/s; 3/h").expect("valid");
    let svc = RateLimitLayer::builder(h.limiter().await)
        .rules("api", header_key("x-ip"), &quotas, Algorithm::Gcra)
        .build()
        .expect("valid")
        .layer(ok_app());
    let first = call(svc.clone(), req("a", "-")).await;
    assert_eq!(
        first.header("ratelimit-policy"),
        "\"api-1s\";q=2;w=1, \"api-1h\";q=3;w=3600"
    );
    assert_eq!(call(svc.clone(), req("a", "-")).await.status, 200);
    let r = call(svc.clone(), req("a", "-")).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.body).expect("json")["rule"],
        "api-1s"
    );
    h.wait(secs(1.0)).await;
    assert_eq!(
        call(svc.clone(), req("a", "-")).await.status,
        200,
        "third of the hour"
    );
    h.wait(secs(1.0)).await;
    let r = call(svc.clone(), req("a", "-")).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.body).expect("json")["rule"],
        "api-1h"
    );
}

async fn invalid_rules_fail_when_the_layer_is_built(h: Harness) {
    let l = h.limiter().await;
    let cases: Vec<(Rule, &str)> = vec![
        (Rule::new("b", Quota::per_minute(10).burst(0)), "burst is 0"),
        (
            Rule::new("c", Quota::per_minute(10).burst(2)).with_cost(3),
            "cost 3 is larger than the burst 2",
        ),
        (
            Rule::new("w", Quota::per_minute(10))
                .with_algorithm(Algorithm::SlidingLog)
                .with_cost(11),
            "cost 11 is larger than the burst 10",
        ),
        (Rule::new("z", Quota::per_minute(0)), "limit is 0"),
        (
            Rule::new("bad name", Quota::per_minute(1)),
            "invalid rule name `bad name`",
        ),
    ];
    for (rule, message) in cases {
        let err = RateLimitLayer::builder(Arc::clone(&l))
            .rule_with(rule.clone(), header_key("x-ip"))
            .build()
            .expect_err(message);
        assert!(
            err.to_string().contains(message),
            "{err} (wanted {message})"
        );
        // The same rule used directly is an error, not a panic or a silent pass.
        assert!(l.check(&rule, Key::from("k")).await.is_err());
    }
    let dup = RateLimitLayer::builder(Arc::clone(&l))
        .rule("same", header_key("x-ip"), Quota::per_minute(1))
        .rule("same", header_key("x-user"), Quota::per_minute(1))
        .build()
        .expect_err("duplicate");
    assert!(dup.to_string().contains("`same`"), "{dup}");
}

/// What the `Quota` docs promise for `per_minute(5)`: a client that sends 5 at once and then one
/// every 12 s gets 9 through GCRA and the token bucket within 60 s, and exactly 5 through the
/// sliding log ("at most 5 in any 60 seconds", exactly).
async fn per_minute_five_admits_what_the_quota_docs_say(h: Harness) {
    let l = h.limiter().await;
    for (algorithm, expected) in [
        (Algorithm::Gcra, 9),
        (Algorithm::TokenBucket, 9),
        (Algorithm::SlidingLog, 5),
    ] {
        let rule = Rule::new("per-minute", Quota::per_minute(5)).with_algorithm(algorithm.clone());
        let key = format!("{algorithm:?}");
        let mut admitted = 0;
        for _ in 0..5 {
            admitted += u32::from(check(&l, &rule, &key).await.allowed);
        }
        // Then one every 12 s (plus 10 ms, so Redis' own milliseconds never decide), up to 59 s.
        let mut elapsed = Duration::ZERO;
        let step = Duration::from_millis(12_010);
        while elapsed + step < Duration::from_secs(60) {
            h.wait(step).await;
            elapsed += step;
            admitted += u32::from(check(&l, &rule, &key).await.allowed);
        }
        assert_eq!(admitted, expected, "{algorithm:?} within 60 s");
        // Let this algorithm's time pass before the next one starts.
        h.wait(Duration::from_secs(120)).await;
    }
}

/// A rolling deploy that switches a rule's algorithm: the new algorithm starts afresh (its state
/// has another shape: a string for GCRA, a sorted set for the sliding log) instead of failing
/// with `WRONGTYPE`, which with fail-open would admit everything while both versions run.
async fn switching_a_rules_algorithm_starts_it_afresh(h: Harness) {
    let l = h.limiter().await;
    let quota = Quota::per_hour(2);
    let algorithms = [
        Algorithm::Gcra,
        Algorithm::SlidingLog,
        Algorithm::FixedWindow,
        Algorithm::SlidingCounter,
        Algorithm::TokenBucket,
    ];
    for (i, algorithm) in algorithms.iter().enumerate() {
        let rule = Rule::new("switch", quota).with_algorithm(algorithm.clone());
        for n in 0..2 {
            let d = l.check(&rule, Key::from("client")).await;
            let d = d.unwrap_or_else(|e| panic!("{algorithm:?} after {i} switches: {e}"));
            assert!(d.allowed, "{algorithm:?}: request {n} of a fresh state");
        }
        let d = check(&l, &rule, "client").await;
        assert!(!d.allowed, "{algorithm:?}: the third in an hour");
        // And back: the old algorithm's state is still there, and still counts.
        if i > 0 {
            let previous = Rule::new("switch", quota).with_algorithm(algorithms[i - 1].clone());
            let d = check(&l, &previous, "client").await;
            assert!(!d.allowed, "{:?} kept its own count", algorithms[i - 1]);
        }
    }
    if h.is_redis() {
        let mut keys = h.keys().await;
        keys.sort();
        assert_eq!(keys.len(), algorithms.len(), "{keys:?}");
        for tag in ["fw", "gcra", "sc", "sl", "tb"] {
            let prefix = format!("{}rl:switch:{tag}:{{", h.prefix());
            assert!(
                keys.iter().any(|k| k.starts_with(&prefix)),
                "{prefix} in {keys:?}"
            );
        }
    }
}

backend_suite!(
    fixed_window_counts_per_window,
    only_fixed_window_bursts_across_an_edge,
    sliding_log_is_exact_over_any_window,
    sliding_counter_weights_the_previous_window,
    token_bucket_refills_and_never_goes_negative,
    gcra_refills_one_interval_at_a_time,
    several_rules_are_all_or_nothing,
    denial_reports_the_longest_wait,
    quota_strings_build_several_rules_over_one_key,
    invalid_rules_fail_when_the_layer_is_built,
    switching_a_rules_algorithm_starts_it_afresh,
    per_minute_five_admits_what_the_quota_docs_say,
);
