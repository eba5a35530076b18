//! The rate-limit suite: every scenario runs against the memory backend and a real Redis.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use redis::AsyncCommands;
use redis_guard::rate_limit::{
    Algorithm, Check, Decision, FailurePolicy, Key, Limiter, MissingKey, Mode, Quota,
    RateLimitLayer, RateLimitLayerBuilder, Rejection, Rule,
};
use redis_guard_tests::{Harness, Kind, Reply, backend_suite, by_client, call, from};
use tower::{Layer, Service, ServiceExt, service_fn};

type Body = Full<Bytes>;

/// The inner service: 200, echoing the remaining count it saw in the `Decision` extension.
fn app() -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone
+ Send {
    service_fn(|req: Request<Body>| async move {
        let seen = req
            .extensions()
            .get::<Decision>()
            .map(|d| format!("remaining={}", d.remaining))
            .unwrap_or_default();
        Ok::<_, Infallible>(Response::new(Full::from(seen)))
    })
}

/// One rule named `default`, keyed by `x-client`, the decision handed to the inner service;
/// settings go on the builder.
async fn builder(h: &Harness, quota: Quota) -> RateLimitLayerBuilder {
    RateLimitLayer::builder(h.limiter().await)
        .rule("default", by_client(), quota)
        .extensions(true)
}

async fn layer(h: &Harness, quota: Quota) -> RateLimitLayer {
    builder(h, quota).await.build().expect("valid quota")
}

/// A layer with one rule `default` keyed by `x-client`, `quota`, and `policy` when Redis fails.
fn with_policy(
    limiter: redis_guard::rate_limit::RedisLimiter,
    quota: Quota,
    policy: FailurePolicy,
) -> RateLimitLayer {
    RateLimitLayer::builder(limiter)
        .rule("default", by_client(), quota)
        .failure_policy(policy)
        .extensions(true)
        .build()
        .expect("valid")
}

/// Redis time runs on while a test talks to it; memory time stands still. `exact` is what the
/// memory backend must give; Redis may be up to one second less, never more.
fn assert_secs(h: &Harness, got: &str, exact: u64) {
    let got: u64 = got
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {got:?}"));
    match h.kind() {
        Kind::Memory => assert_eq!(got, exact),
        _ => assert!(
            (exact - 1..=exact).contains(&got),
            "{got} not within a second below {exact}"
        ),
    }
}

async fn ten_per_minute_then_429(h: Harness) {
    let svc = layer(&h, Quota::per_minute(10)).await.layer(app());
    for i in 0..10u32 {
        let r = call(svc.clone(), from("alice")).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        assert_eq!(r.body, format!("remaining={}", 9 - i));
        assert_eq!(r.header("ratelimit-policy"), "\"default\";q=10;w=60");
        let rl = r.header("ratelimit");
        assert!(
            rl.starts_with(&format!("\"default\";r={};t=", 9 - i)),
            "{rl}"
        );
    }
    let denied = call(svc.clone(), from("alice")).await;
    assert_eq!(denied.status, 429);
    // One request per 6 s: the 11th may come when the first slot frees up.
    assert_secs(&h, denied.header("retry-after"), 6);
    assert_eq!(denied.header("content-type"), "application/problem+json");
    assert_eq!(denied.header("ratelimit-policy"), "\"default\";q=10;w=60");
    let rl = denied.header("ratelimit");
    let t = rl.strip_prefix("\"default\";r=0;t=").expect(rl);
    assert_secs(&h, t, 60);
    let problem: serde_json::Value = serde_json::from_str(&denied.body).expect("json body");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["rule"], "default");
    assert_eq!(problem["title"], "Too Many Requests");

    // Still denied, and the denial consumed nothing: a different client is unaffected.
    assert_eq!(call(svc.clone(), from("alice")).await.status, 429);
    let bob = call(svc.clone(), from("bob")).await;
    assert_eq!(bob.status, 200);
    assert_eq!(bob.body, "remaining=9");
}

/// The same on a long period, where Redis' running clock cannot blur the numbers.
async fn retry_after_matches_the_quota_on_long_periods(h: Harness) {
    let svc = layer(&h, Quota::per_hour(10)).await.layer(app());
    for _ in 0..10 {
        assert_eq!(call(svc.clone(), from("carol")).await.status, 200);
    }
    let denied = call(svc.clone(), from("carol")).await;
    assert_eq!(denied.status, 429);
    assert_secs(&h, denied.header("retry-after"), 360);
    let t = denied.header("ratelimit");
    assert_secs(&h, t.strip_prefix("\"default\";r=0;t=").expect(t), 3600);
}

async fn burst_spaces_requests_out(h: Harness) {
    // 20 per 10 s, at most 2 at once: then one every 500 ms. (Long enough that a stalled CI
    // machine does not see a slot free up between two consecutive requests.)
    let quota = Quota::new(20, Duration::from_secs(10)).burst(2);
    let svc = layer(&h, quota).await.layer(app());
    assert_eq!(call(svc.clone(), from("c")).await.status, 200);
    assert_eq!(call(svc.clone(), from("c")).await.status, 200);
    let denied = call(svc.clone(), from("c")).await;
    assert_eq!(denied.status, 429);
    assert_eq!(denied.header("retry-after"), "1", "500 ms rounds up to 1 s");

    let limiter = h.limiter().await;
    let rule = Rule::new("default", quota);
    let d = limiter
        .check(&rule, Key::from("c"))
        .await
        .expect("decision");
    assert!(!d.allowed);
    assert!(d.retry_after <= Duration::from_millis(500), "{d:?}");
    if h.kind() == Kind::Memory {
        assert_eq!(d.retry_after, Duration::from_millis(500));
    }
    // After exactly the advertised wait, one more request passes, and only one.
    h.wait(d.retry_after).await;
    assert_eq!(call(svc.clone(), from("c")).await.status, 200);
    assert_eq!(call(svc.clone(), from("c")).await.status, 429);
}

async fn weighted_cost(h: Harness) {
    let limiter = h.limiter().await;
    let rule = Rule::new("upload", Quota::per_hour(10)).with_cost(3);
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let d = limiter
            .check(&rule, Key::from("u"))
            .await
            .expect("decision");
        assert!(d.allowed);
        remaining.push(d.remaining);
    }
    assert_eq!(remaining, [7, 4, 1]);
    let d = limiter
        .check(&rule, Key::from("u"))
        .await
        .expect("decision");
    assert!(!d.allowed, "3 more do not fit in 1");
    assert_eq!(d.remaining, 1, "the denied request consumed nothing");
    let one = Check::new(rule.clone(), Key::from("u")).with_cost(1);
    let d = limiter.check_all(vec![one]).await.expect("decision");
    assert!(d.allowed, "but 1 does");
    assert_eq!(d.remaining, 0);
}

async fn exact_under_concurrency_across_instances(h: Harness) {
    // Two app instances, each with its own limiter (its own connection), one shared store.
    let a = layer(&h, Quota::per_hour(50)).await.layer(app());
    let b = layer(&h, Quota::per_hour(50)).await.layer(app());
    let mut tasks = Vec::new();
    for i in 0..200 {
        let svc = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(
            async move { call(svc, from("hot")).await.status },
        ));
    }
    let mut allowed = 0;
    let mut denied = 0;
    for t in tasks {
        match t.await.expect("task") {
            200 => allowed += 1,
            429 => denied += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!((allowed, denied), (50, 150));
}

async fn cloned_services_share_one_limit(h: Harness) {
    let mut svc = layer(&h, Quota::per_hour(3)).await.layer(app());
    let mut statuses = Vec::new();
    for _ in 0..5 {
        // A clone per "connection", as hyper and axum make them.
        let mut conn = svc.clone();
        let ready = conn.ready().await.expect("ready");
        let res = ready.call(from("k")).await.expect("call");
        statuses.push(res.status().as_u16());
        svc = conn;
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
}

async fn missing_key_policies(h: Harness) {
    let no_key = || Request::get("/").body(Body::default()).expect("request");
    let reject = layer(&h, Quota::per_hour(1)).await.layer(app());
    let r = call(reject, no_key()).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.header("content-type"), "application/problem+json");

    let custom = builder(&h, Quota::per_hour(1))
        .await
        .missing_key(MissingKey::Reject(http::StatusCode::UNAUTHORIZED))
        .build()
        .expect("valid")
        .layer(app());
    assert_eq!(call(custom, no_key()).await.status, 401);

    let skip = builder(&h, Quota::per_hour(1))
        .await
        .missing_key(MissingKey::Skip)
        .build()
        .expect("valid")
        .layer(app());
    for _ in 0..3 {
        let r = call(skip.clone(), no_key()).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body, "", "no decision for a skipped rule");
        assert_eq!(r.header("ratelimit"), "");
    }
}

async fn misconfigured_peer_is_a_500_not_a_panic(h: Harness) {
    let svc = RateLimitLayer::new(
        h.limiter().await,
        "default",
        redis_guard::rate_limit::ClientIp::peer(),
        Quota::per_hour(1),
    )
    .expect("valid")
    .layer(app());
    let r = call(svc, from("x")).await;
    assert_eq!(r.status, 500);
}

async fn custom_response_and_legacy_headers(h: Harness) {
    let svc = builder(&h, Quota::per_hour(1))
        .await
        .legacy_headers(true)
        .response(|r| match r {
            Rejection::Limited(d) => {
                let mut res = Response::new(Bytes::from(format!("slow down ({})", d.rule)));
                *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                res
            }
            other => other.response(),
        })
        .build()
        .expect("valid")
        .layer(app());
    let ok = call(svc.clone(), from("z")).await;
    assert_eq!(ok.header("x-ratelimit-limit"), "1");
    assert_eq!(ok.header("x-ratelimit-remaining"), "0");
    let r = call(svc, from("z")).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.body, "slow down (default)");
    assert_secs(&h, r.header("retry-after"), 3600);
    assert_eq!(r.header("x-ratelimit-remaining"), "0");
    assert!(r.header("ratelimit").starts_with("\"default\";r=0;t="));
}

async fn headers_can_be_turned_off_on_admitted_responses(h: Harness) {
    let svc = builder(&h, Quota::per_hour(1))
        .await
        .rate_limit_headers(false)
        .build()
        .expect("valid")
        .layer(app());
    let ok = call(svc.clone(), from("q")).await;
    assert_eq!(ok.status, 200);
    assert!(ok.headers.get("ratelimit").is_none());
    assert!(ok.headers.get("ratelimit-policy").is_none());
    let denied = call(svc, from("q")).await;
    assert_eq!(denied.status, 429);
    assert!(
        denied.headers.get("ratelimit").is_some(),
        "denied responses always say why"
    );
}

backend_suite!(
    ten_per_minute_then_429,
    retry_after_matches_the_quota_on_long_periods,
    burst_spaces_requests_out,
    weighted_cost,
    exact_under_concurrency_across_instances,
    cloned_services_share_one_limit,
    missing_key_policies,
    misconfigured_peer_is_a_500_not_a_panic,
    custom_response_and_legacy_headers,
    headers_can_be_turned_off_on_admitted_responses,
);
backend_suite!(
    redis_only: every_key_has_a_ttl_and_no_raw_client_key,
    script_flush_between_calls_does_not_fail_a_request,
);

// ---- Redis only: what the store holds, and Redis misbehaving. ----

async fn every_key_has_a_ttl_and_no_raw_client_key(h: Harness) {
    let svc = layer(&h, Quota::per_hour(5)).await.layer(app());
    let raw = ["+380501234567", "alice@example.com", "sk_live_SECRET"];
    for client in raw {
        for _ in 0..7 {
            call(svc.clone(), from(client)).await;
        }
    }
    let keys = h.keys().await;
    assert_eq!(keys.len(), 3, "{keys:?}");
    for key in &keys {
        assert!(
            key.starts_with(&format!("{}rl:default:gcra:{{", h.prefix())),
            "{key}"
        );
        for r in raw {
            assert!(!key.contains(r), "{key} contains {r}");
            assert!(!key.contains(&r[1..6]), "{key} contains part of {r}");
        }
        let pttl = h.pttl(key).await;
        assert!(pttl > 0 && pttl <= 3_600_000, "{key}: PTTL {pttl}");
    }
}

async fn script_flush_between_calls_does_not_fail_a_request(h: Harness) {
    let svc = builder(&h, Quota::per_hour(3))
        .await
        .failure_policy(FailurePolicy::Closed)
        .build()
        .expect("valid")
        .layer(app());
    let mut statuses = Vec::new();
    for _ in 0..4 {
        h.script_flush().await;
        statuses.push(call(svc.clone(), from("f")).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429], "counted across reloads");
}

#[tokio::test]
async fn redis_down_fails_open_or_closed_without_hanging() {
    let mut h = Harness::redis().await;
    let limiter = redis_guard::rate_limit::RedisLimiter::new(
        h.backend().await.timeout(Duration::from_millis(300)),
    );
    let open = with_policy(limiter.clone(), Quota::per_hour(1), FailurePolicy::Open).layer(app());
    let closed =
        with_policy(limiter.clone(), Quota::per_hour(1), FailurePolicy::Closed).layer(app());
    // The same rule, plain (no decision handed over): the lean path meets the failure.
    let plain = |policy| {
        RateLimitLayer::builder(limiter.clone())
            .rule("default", by_client(), Quota::per_hour(1))
            .failure_policy(policy)
            .build()
            .expect("valid")
            .layer(app())
    };
    let (plain_open, plain_closed) = (plain(FailurePolicy::Open), plain(FailurePolicy::Closed));
    h.kill_redis();
    let started = std::time::Instant::now();
    for r in [
        call(open.clone(), from("d")).await,
        call(plain_open, from("d")).await,
    ] {
        assert_eq!(r.status, 200, "fail open admits");
        assert!(
            r.headers.get("ratelimit").is_none(),
            "no decision, no headers"
        );
    }
    for r in [
        call(closed, from("d")).await,
        call(plain_closed, from("d")).await,
    ] {
        assert_eq!(r.status, 503);
        assert_eq!(r.header("retry-after"), "1");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the timeout"
    );
}

/// Redis killed, every layer `FailurePolicy::Closed`: a shadow or soft rule never blocks, so a
/// layer of one alone admits the request (without headers: nothing was decided), while an
/// enforced rule beside a shadow one still fails closed.
#[tokio::test]
async fn redis_down_shadow_and_soft_rules_never_block() {
    let mut h = Harness::redis().await;
    let limiter = redis_guard::rate_limit::RedisLimiter::new(
        h.backend().await.timeout(Duration::from_millis(300)),
    );
    let layer = |rules: &[(&str, Mode)]| {
        let mut b = RateLimitLayer::builder(limiter.clone()).failure_policy(FailurePolicy::Closed);
        for (name, mode) in rules {
            b = b.rule_with(
                Rule::new(*name, Quota::per_hour(1)).with_mode(*mode),
                by_client(),
            );
        }
        b.build().expect("valid").layer(app())
    };
    let shadow = layer(&[("shadow", Mode::Shadow)]);
    let soft = layer(&[("soft", Mode::Soft)]);
    let both = layer(&[("shadow", Mode::Shadow), ("soft", Mode::Soft)]);
    let mixed = layer(&[("api", Mode::Enforce), ("shadow", Mode::Shadow)]);
    h.kill_redis();
    for (what, svc) in [("shadow", shadow), ("soft", soft), ("both", both)] {
        let r = call(svc, from("d")).await;
        assert_eq!(r.status, 200, "{what}: an observed rule never blocks");
        assert!(r.headers.get("ratelimit").is_none(), "{what}: no headers");
    }
    let r = call(mixed, from("d")).await;
    assert_eq!(r.status, 503, "the enforced rule fails closed");
}

/// Redis killed: a `Fallback` layer over 10/min with 2 replicas admits each key its share, 5,
/// then answers `429` with headers that describe the share; keys stay apart.
#[tokio::test]
async fn redis_down_falls_back_to_the_replicas_share_of_each_quota() {
    let mut h = Harness::redis().await;
    let limiter = redis_guard::rate_limit::RedisLimiter::new(
        h.backend().await.timeout(Duration::from_millis(300)),
    );
    let svc = with_policy(
        limiter,
        Quota::per_minute(10),
        FailurePolicy::fallback(2).expect("2 replicas"),
    )
    .layer(app());
    // Two requests while Redis answers: state does not carry over to the fallback.
    for _ in 0..2 {
        assert_eq!(call(svc.clone(), from("a")).await.status, 200);
    }
    h.kill_redis();
    let started = std::time::Instant::now();
    for client in ["a", "b"] {
        for i in 0..5u32 {
            let r = call(svc.clone(), from(client)).await;
            assert_eq!(r.status, 200, "{client} request {i}: {}", r.body);
            assert_eq!(r.body, format!("remaining={}", 4 - i));
            assert_eq!(r.header("ratelimit-policy"), "\"default\";q=5;w=60");
        }
        let r = call(svc.clone(), from(client)).await;
        assert_eq!(r.status, 429, "{client}: the share is 10 / 2");
        assert_eq!(r.header("ratelimit-policy"), "\"default\";q=5;w=60");
        // One request per 12 s, the share full again 60 s after the first: both counted from
        // the first fallback decision, which the failed calls before the breaker opened delayed.
        let t: u64 = r
            .header("ratelimit")
            .strip_prefix("\"default\";r=0;t=")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{}", r.header("ratelimit")));
        let retry: u64 = r.header("retry-after").parse().expect("seconds");
        assert!(
            t <= 60 && retry <= 12 && t - retry == 48,
            "t={t}, retry-after={retry}"
        );
    }
    println!(
        "Redis killed: Fallback (10/min, 2 replicas) admitted 5 per key, then 429; 12 requests in {:.1?}",
        started.elapsed()
    );
}

/// Redis frozen: once the backend's breaker is open, both policies answer without waiting for
/// the timeout (figures printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_breaker_open_the_failure_policies_answer_at_once() {
    let h = Harness::redis().await;
    let timeout = Duration::from_millis(200);
    let backend = h.backend().await.timeout(timeout).breaker(
        // A cool-down on a clock that never moves: the circuit stays open for the whole test.
        redis_guard::backend::Breaker::new()
            .failures(3)
            .clock(redis_guard::backend::ManualClock::new()),
    );
    let limiter = redis_guard::rate_limit::RedisLimiter::new(backend.clone());
    let closed =
        with_policy(limiter.clone(), Quota::per_hour(1), FailurePolicy::Closed).layer(app());
    let open = with_policy(limiter.clone(), Quota::per_hour(1), FailurePolicy::Open).layer(app());
    let fallback = RateLimitLayer::new(limiter, "default", by_client(), Quota::per_hour(1))
        .expect("valid: Fallback is the default")
        .layer(app());
    h.server()
        .expect("a standalone Redis")
        .freeze()
        .expect("SIGSTOP");
    let mut waited = Vec::new();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        assert_eq!(call(closed.clone(), from("c")).await.status, 503);
        waited.push(started.elapsed());
    }
    println!("frozen, breaker closed: Closed answered 503 after {waited:.1?}");
    assert!(
        waited
            .iter()
            .all(|&d| d >= timeout - Duration::from_millis(10))
    );
    // The breaker records a call's outcome in the future that made it (maybe another
    // request's): wait until it has.
    let started = std::time::Instant::now();
    while backend.breaker_state() == redis_guard::backend::BreakerState::Closed {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the breaker never opened"
        );
        tokio::task::yield_now().await;
    }
    for (name, svc, statuses) in [
        ("Closed", closed.boxed_clone(), [503; 20]),
        ("Open", open.boxed_clone(), [200; 20]),
        ("Fallback", fallback.boxed_clone(), {
            let mut s = [429; 20];
            s[0] = 200;
            s
        }),
    ] {
        let mut took = Vec::new();
        for status in statuses {
            let started = std::time::Instant::now();
            let r = call(svc.clone(), from("c")).await;
            took.push(started.elapsed());
            assert_eq!(r.status, status, "{name}");
        }
        took.sort();
        println!(
            "frozen, breaker open: {name} answered {} in median {:.2?}, max {:.2?}",
            statuses[statuses.len() - 1],
            took[took.len() / 2],
            took[took.len() - 1]
        );
        // Half the timeout: a loaded machine may take a while, a wait for the timeout is longer.
        assert!(took[took.len() - 1] < timeout / 2, "{took:?}");
    }
    h.server()
        .expect("a standalone Redis")
        .thaw()
        .expect("SIGCONT");
}

#[tokio::test]
async fn garbage_state_in_redis_is_overwritten_not_a_failure() {
    let h = Harness::redis().await;
    let limiter: Arc<dyn Limiter> = h.limiter().await;
    let rule = Rule::new("default", Quota::per_hour(2));
    let check = Check::new(rule.clone(), Key::from("g"));
    let key = redis_guard::rate_limit::RedisLimiter::new(h.backend().await).key_name(&check);
    let mut conn = h.inspect().await;
    let () = conn.set(&key, "not a number").await.expect("SET");
    let d = limiter
        .check(&rule, Key::from("g"))
        .await
        .expect("decision");
    assert!(d.allowed);
    assert_eq!(d.remaining, 1);
    let stored: String = conn.get(&key).await.expect("GET");
    assert!(stored.parse::<u64>().is_ok(), "{stored}");
    // A key of the wrong type is an error the failure policy handles, not a panic.
    let () = conn.del(&key).await.expect("DEL");
    let () = conn.hset(&key, "f", "v").await.expect("HSET");
    assert!(limiter.check(&rule, Key::from("g")).await.is_err());
    // Through a layer of the plain rule (its lean path), alike.
    let svc = RateLimitLayer::builder(limiter)
        .rule_with(rule, by_client())
        .failure_policy(FailurePolicy::Closed)
        .build()
        .expect("valid")
        .layer(app());
    assert_eq!(call(svc.clone(), from("g")).await.status, 503);
    let () = conn.del(&key).await.expect("DEL");
    let () = conn.set(&key, "not a number").await.expect("SET");
    let r = call(svc, from("g")).await;
    assert_eq!(
        (r.status, r.header("ratelimit")),
        (200, "\"default\";r=1;t=1800")
    );
}

/// A zero timeout would make every decision time out, and with the default fail-open policy
/// silently admit everything: it is refused when the layer is built and on every direct check.
#[tokio::test]
async fn a_zero_redis_timeout_is_refused_when_the_layer_is_built() {
    let h = Harness::redis().await;
    let limiter =
        redis_guard::rate_limit::RedisLimiter::new(h.backend().await.timeout(Duration::ZERO));
    let Err(err) = RateLimitLayer::new(limiter.clone(), "z", by_client(), Quota::per_minute(5))
    else {
        panic!("a zero timeout must not build");
    };
    assert!(err.to_string().contains("timeout is 0"), "{err}");
    assert_eq!(err.kind(), redis_guard::ConfigErrorKind::Store);
    assert_eq!(
        (err.setting(), err.value()),
        (Some("RedisBackend::timeout"), Some("0ns"))
    );
    let err = limiter
        .check(&Rule::new("direct", Quota::per_minute(5)), Key::from("k"))
        .await
        .expect_err("a zero timeout must not decide");
    assert!(err.to_string().contains("timeout is 0"), "{err}");
    assert!(
        matches!(&err, redis_guard::rate_limit::LimiterError::Config(e) if e.kind() == redis_guard::ConfigErrorKind::Store),
        "{err}"
    );
    // One microsecond is a (short) timeout, not a misconfiguration.
    assert!(
        RateLimitLayer::new(
            redis_guard::rate_limit::RedisLimiter::new(
                h.backend().await.timeout(Duration::from_micros(1))
            ),
            "z",
            by_client(),
            Quota::per_minute(5)
        )
        .is_ok()
    );
}

async fn decide(
    limiter: &redis_guard::rate_limit::RedisLimiter,
    rule: &Rule,
    key: &str,
) -> Decision {
    limiter.check(rule, Key::from(key)).await.expect("decision")
}

/// The deny cache: a client hammering past its limit is answered in process until its wait has passed,
/// with zero round trips; then Redis decides again. Other clients are not affected, and
/// `deny_cache(0)` sends every request to Redis.
#[tokio::test]
async fn a_denied_client_costs_redis_nothing_until_its_wait_passes() {
    let h = Harness::redis().await;
    let limiter = redis_guard::rate_limit::RedisLimiter::new(h.backend().await);
    let rule = Rule::new("deny", Quota::per_hour(2));
    for _ in 0..2 {
        assert!(decide(&limiter, &rule, "a").await.allowed);
    }
    let first = decide(&limiter, &rule, "a").await;
    assert!(!first.allowed);
    let before = h.calls("evalsha").await;
    for _ in 0..50 {
        let d = decide(&limiter, &rule, "a").await;
        assert!(!d.allowed);
        assert_eq!(d.rule.as_ref(), "deny");
        assert!(d.retry_after <= first.retry_after && d.retry_after > Duration::ZERO);
    }
    assert_eq!(
        h.calls("evalsha").await,
        before,
        "denied in process, no round trip"
    );
    // Another client still reaches Redis.
    assert!(decide(&limiter, &rule, "b").await.allowed);
    assert_eq!(h.calls("evalsha").await, before + 1);
    // Once the wait has passed (Redis time and the cache's clock move together), Redis decides.
    h.wait(first.retry_after + Duration::from_millis(1)).await;
    assert!(decide(&limiter, &rule, "a").await.allowed);
    assert_eq!(h.calls("evalsha").await, before + 2);

    // Without the cache, every denial is a round trip.
    let uncached = redis_guard::rate_limit::RedisLimiter::new(h.backend().await).deny_cache(0);
    let rule = Rule::new("nocache", Quota::per_hour(1));
    assert!(decide(&uncached, &rule, "c").await.allowed);
    let before = h.calls("evalsha").await;
    for _ in 0..5 {
        assert!(!decide(&uncached, &rule, "c").await.allowed);
    }
    assert_eq!(h.calls("evalsha").await, before + 5);
}

/// Through the layer, a cached denial is answered in `call` (no future, no Redis),
/// with the same `429`, `Retry-After` and `RateLimit` headers counted down; another client
/// still reaches Redis.
#[tokio::test]
async fn the_layer_answers_a_cached_denial_without_redis() {
    let h = Harness::redis().await;
    let limiter = redis_guard::rate_limit::RedisLimiter::new(h.backend().await);
    let svc = RateLimitLayer::builder(limiter.clone())
        .rule("default", by_client(), Quota::per_hour(2))
        .build()
        .expect("valid")
        .layer(app());
    for _ in 0..2 {
        assert_eq!(call(svc.clone(), from("a")).await.status, 200);
    }
    let first = call(svc.clone(), from("a")).await;
    assert_eq!(first.status, 429);
    let wait: u64 = first.header("retry-after").parse().expect("Retry-After");
    assert!(wait > 0, "{:?}", first.headers);
    let before = h.calls("evalsha").await;
    for _ in 0..20 {
        let r = call(svc.clone(), from("a")).await;
        assert_eq!(r.status, 429);
        let again: u64 = r.header("retry-after").parse().expect("Retry-After");
        assert!(again <= wait && again > 0, "{again} after {wait}");
        assert!(r.header("ratelimit").contains("r=0"), "{:?}", r.headers);
    }
    assert_eq!(h.calls("evalsha").await, before, "answered in process");
    // Another client still reaches Redis.
    assert_eq!(call(svc, from("b")).await.status, 200);
    assert_eq!(h.calls("evalsha").await, before + 1);
}

/// A cached denial is decided in the layer's `call`, before its future is polled: the
/// future holds neither the request nor a boxed evaluation (which held both until polled).
#[tokio::test]
async fn a_cached_denial_lets_go_of_the_request_in_call() {
    let h = Harness::redis().await;
    let limiter = redis_guard::rate_limit::RedisLimiter::new(h.backend().await);
    let mut svc = RateLimitLayer::builder(limiter)
        .rule("default", by_client(), Quota::per_hour(1))
        .build()
        .expect("valid")
        .layer(app());
    assert_eq!(call(svc.clone(), from("a")).await.status, 200);
    assert_eq!(call(svc.clone(), from("a")).await.status, 429);
    let witness = Arc::new(());
    let witnessed = |client| {
        let mut req = from(client);
        // Counts who still holds the request.
        req.extensions_mut().insert(Arc::clone(&witness));
        req
    };
    let cached = svc.call(witnessed("a"));
    assert_eq!(
        Arc::strong_count(&witness),
        1,
        "a cached denial holds no request"
    );
    assert_eq!(cached.await.expect("infallible").status(), 429);
    // A request Redis decides is held until Redis answers.
    let decided = svc.call(witnessed("b"));
    assert_eq!(Arc::strong_count(&witness), 2);
    assert_eq!(decided.await.expect("infallible").status(), 200);
}

/// A limiter on `h` that waits up to 10 s for Redis: decisions queued behind a paused Redis
/// must not time out.
async fn patient_limiter(h: &Harness) -> redis_guard::rate_limit::RedisLimiter {
    redis_guard::rate_limit::RedisLimiter::new(h.backend().await.timeout(Duration::from_secs(10)))
}

/// Decisions that arrive while script calls are in flight go to Redis together: 500 decisions
/// queued behind a paused Redis take a handful of `EVALSHA`s (per script, and per set of GCRA
/// rules, whose numbers go once per call: the two calls let out at once, then batches of at
/// most 64), not 500, and every one of them is still exact: a GCRA
/// limit of 50 on one hot key admits exactly 50, 100 other clients with a limit of 1 get exactly
/// one each, and a sliding-log limit of 30 (the general script) admits exactly 30 of 100. A
/// client whose key Redis cannot read fails alone, not the decisions it went with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_decisions_coalesce_into_few_script_calls_and_stay_exact() {
    let h = Harness::redis().await;
    let limiter = patient_limiter(&h).await;
    let hot = Rule::new("hot", Quota::per_hour(50));
    let each = Rule::new("each", Quota::per_hour(1));
    let log = Rule::new("log", Quota::per_hour(30)).with_algorithm(Algorithm::SlidingLog);
    // Load the scripts first, so the count below is of decisions only.
    for rule in [&each, &log] {
        limiter.check(rule, Key::from("w")).await.expect("decision");
    }
    let mut conn = h.inspect().await;
    let poisoned = limiter.key_name(&Check::new(each.clone(), Key::from("poisoned")));
    let () = conn.hset(&poisoned, "f", "v").await.expect("HSET");
    h.admin(&["CONFIG", "RESETSTAT"]).await;
    // Redis answers nothing for 200 ms (within the limiter's 10 s timeout): the decisions
    // below queue behind the first two.
    h.admin(&["CLIENT", "PAUSE", "200", "ALL"]).await;
    let mut tasks = Vec::new();
    for i in 0..501 {
        let limiter = limiter.clone();
        let (rule, key) = match i {
            0..200 => (hot.clone(), "hot".to_owned()),
            200..400 => (each.clone(), format!("client-{}", i % 100)),
            400..500 => (log.clone(), "logged".to_owned()),
            _ => (each.clone(), "poisoned".to_owned()),
        };
        tasks.push(tokio::spawn(async move {
            let d = limiter.check(&rule, Key::from(key)).await;
            (i, d.map(|d| d.allowed))
        }));
    }
    let (mut hot_allowed, mut each_allowed, mut log_allowed) = (0, 0, 0);
    for task in tasks {
        match task.await.expect("task") {
            (0..200, Ok(true)) => hot_allowed += 1,
            (200..400, Ok(true)) => each_allowed += 1,
            (400..500, Ok(true)) => log_allowed += 1,
            (500, Ok(_)) => panic!("a key of the wrong type got a decision"),
            (0..500, Err(e)) => panic!("decision failed: {e}"),
            _ => {}
        }
    }
    assert_eq!((hot_allowed, each_allowed, log_allowed), (50, 100, 30));
    let calls = h.calls("evalsha").await;
    let bound = (2 + 198_u64.div_ceil(64)) + (2 + 199_u64.div_ceil(64)) + (2 + 98_u64.div_ceil(64));
    assert!(
        (1..=bound).contains(&calls),
        "{calls} EVALSHA calls for 501 decisions"
    );
}

/// What each kind of decision sends to Redis, counted with `MONITOR`: one at a time, a GCRA
/// decision is one `EVALSHA` and a fixed-window one one `MULTI` … `EXEC` (five commands: a
/// counter, its expiry and its TTL); 64 at once on one key (queued behind a paused Redis), both
/// coalesce: at most four calls (two let out at once, then the rest together).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_decision_sends_no_more_than_one_call_per_request() {
    let h = Harness::redis().await;
    // On Redis' own clock, as in production: the fixed window takes its plain transaction.
    let backend = h
        .redis_time_backend()
        .await
        .timeout(Duration::from_secs(10));
    let limiter = redis_guard::rate_limit::RedisLimiter::new(backend);
    let per_call = [
        ("gcra", Algorithm::Gcra, 1),
        ("fixed", Algorithm::FixedWindow, 5),
    ];
    for (name, algorithm, commands) in per_call {
        let rule = Rule::new(name, Quota::per_hour(10_000)).with_algorithm(algorithm);
        // Scripts loaded, the server's version known: what follows is decisions only.
        limiter
            .check(&rule, Key::from("warm"))
            .await
            .expect("decision");
        let mut monitor = redis_guard_tests::Monitor::start(&h).await;
        for _ in 0..10 {
            assert!(
                limiter
                    .check(&rule, Key::from("one"))
                    .await
                    .expect("decision")
                    .allowed
            );
        }
        let sent = monitor.commands(&h).await;
        assert_eq!(sent.len(), 10 * commands, "{name}, one at a time: {sent:?}");
        // Redis answers nothing for 200 ms: the 64 are all asked before the first call returns.
        h.admin(&["CLIENT", "PAUSE", "200", "ALL"]).await;
        let checks = (0..64).map(|_| limiter.check(&rule, Key::from("many")));
        for decision in futures_util::future::join_all(checks).await {
            assert!(decision.expect("decision").allowed);
        }
        let sent = monitor.commands(&h).await;
        let calls = sent.len() / commands;
        assert!(
            (1..=4).contains(&calls) && sent.len() % commands == 0,
            "{name}, 64 at once: {} commands: {sent:?}",
            sent.len()
        );
        // The same through a layer of the plain rule: its lean path sends the same.
        let svc = RateLimitLayer::builder(limiter.clone())
            .rule_with(rule.clone(), by_client())
            .build()
            .expect("valid")
            .layer(app());
        // Its script loaded: what follows is decisions only.
        assert_eq!(call(svc.clone(), from("warm")).await.status, 200);
        monitor.commands(&h).await;
        for _ in 0..10 {
            assert_eq!(call(svc.clone(), from("layer-one")).await.status, 200);
        }
        let sent = monitor.commands(&h).await;
        assert_eq!(sent.len(), 10 * commands, "{name}, layer: {sent:?}");
        // On the same key as a direct decision.
        let direct = limiter.check(&rule, Key::from("layer-one")).await;
        assert_eq!(direct.expect("decision").remaining, 10_000 - 11, "{name}");
        monitor.commands(&h).await;
        h.admin(&["CLIENT", "PAUSE", "200", "ALL"]).await;
        let requests = (0..64).map(|_| call(svc.clone(), from("layer-many")));
        for reply in futures_util::future::join_all(requests).await {
            assert_eq!(reply.status, 200);
        }
        let sent = monitor.commands(&h).await;
        let calls = sent.len() / commands;
        assert!(
            (1..=4).contains(&calls) && sent.len() % commands == 0,
            "{name}, layer, 64 at once: {} commands: {sent:?}",
            sent.len()
        );
    }
}

/// A decision whose request is dropped while it waits for room is left out of its batch's
/// call: nothing is counted for a request that got no answer. And requests dropped at any moment,
/// the one making its batch's call included, leave the others their answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_requests_are_not_counted_and_never_strand_the_others() {
    let h = Harness::redis().await;
    let limiter = patient_limiter(&h).await;
    let rule = Rule::new("dropped", Quota::per_hour(12));
    limiter
        .check(&rule, Key::from("warm"))
        .await
        .expect("decision");
    let spawn = |n: usize, key: &'static str| -> Vec<_> {
        (0..n)
            .map(|_| {
                let (limiter, rule) = (limiter.clone(), rule.clone());
                tokio::spawn(async move { limiter.check(&rule, Key::from(key)).await })
            })
            .collect()
    };
    // Redis answers nothing for 500 ms: two decisions are out, twenty queue behind them.
    h.admin(&["CLIENT", "PAUSE", "500", "ALL"]).await;
    let out = spawn(2, "x");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = spawn(20, "x");
    tokio::time::sleep(Duration::from_millis(100)).await;
    for task in &queued[..10] {
        task.abort();
    }
    let mut allowed = 0;
    for task in out.into_iter().chain(queued.into_iter().skip(10)) {
        allowed += usize::from(task.await.expect("task").expect("decision").allowed);
    }
    assert_eq!(
        allowed, 12,
        "the 2 sent and the 10 still waiting, all admitted"
    );
    let next = limiter
        .check(&rule, Key::from("x"))
        .await
        .expect("decision");
    assert!(!next.allowed, "12 counted, not 22");
    // Dropped while their batches go out: every other request still gets its answer.
    for round in 0..5 {
        h.admin(&["CLIENT", "PAUSE", "100", "ALL"]).await;
        let tasks = spawn(64, if round % 2 == 0 { "y" } else { "z" });
        tokio::time::sleep(Duration::from_millis(100 + 10 * round)).await;
        for task in tasks.iter().step_by(3) {
            task.abort();
        }
        for task in tasks.into_iter().skip(1).step_by(3) {
            let answer = tokio::time::timeout(Duration::from_secs(5), task).await;
            answer.expect("answered").expect("task").expect("decision");
        }
    }
}

/// On a Redis Cluster, decisions on keys of one hash slot go together as on a
/// single Redis. 200 decisions on one hot key queued behind paused masters take a handful of
/// `EVALSHA`s (the two calls let out at once, then batches of at most 64), and a limit of 50
/// admits exactly 50. Keys of different slots never share a call: 300 decisions over 100
/// clients (a limit of 1 each), queued at once, all get an answer (no `CROSSSLOT`), exactly one
/// admitted per client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_decisions_coalesce_per_slot_and_stay_exact() {
    let h = Harness::cluster().await;
    let limiter = patient_limiter(&h).await;
    let hot = Rule::new("hot", Quota::per_hour(50));
    let each = Rule::new("each", Quota::per_hour(1));
    // Load the script on every master first, so the count below is of decisions only.
    for i in 0..30 {
        limiter
            .check(&hot, Key::from(format!("w{i}")))
            .await
            .expect("decision");
    }
    h.admin(&["CONFIG", "RESETSTAT"]).await;
    h.admin(&["CLIENT", "PAUSE", "200", "ALL"]).await;
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let (limiter, hot) = (limiter.clone(), hot.clone());
            tokio::spawn(async move { limiter.check(&hot, Key::from("hot")).await })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += u32::from(task.await.expect("task").expect("decision").allowed);
    }
    assert_eq!(allowed, 50, "a limit of 50 on one key");
    let calls = h.calls("evalsha").await;
    let bound = 2 + 198_u64.div_ceil(64);
    assert!(
        (1..=bound).contains(&calls),
        "{calls} EVALSHA calls for 200 decisions on one key"
    );
    h.admin(&["CLIENT", "PAUSE", "200", "ALL"]).await;
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let (limiter, each) = (limiter.clone(), each.clone());
            let key = Key::from(format!("client-{}", i % 100));
            tokio::spawn(async move { (i % 100, limiter.check(&each, key).await) })
        })
        .collect();
    let mut admitted = [0_u32; 100];
    for task in tasks {
        let (client, decision) = task.await.expect("task");
        admitted[client] += u32::from(decision.expect("decision").allowed);
    }
    assert_eq!(admitted, [1; 100], "one admitted per client");
}

/// After `NOSCRIPT` (a restarted Redis, a failover, `SCRIPT FLUSH`) the same call runs again as
/// `EVAL` with the script's source: one command, which proxies route like any keyed command and
/// which caches the script again, never `SCRIPT LOAD` (that twemproxy does not forward).
#[tokio::test]
async fn a_flushed_script_comes_back_through_eval_never_script_load() {
    let h = Harness::redis().await;
    let limiter = redis_guard::rate_limit::RedisLimiter::new(h.backend().await);
    let rule = Rule::new("flushed", Quota::per_hour(5));
    assert!(decide(&limiter, &rule, "f").await.allowed);
    h.script_flush().await;
    h.admin(&["CONFIG", "RESETSTAT"]).await;
    let remaining: Vec<u64> = three_decisions(&limiter, &rule).await;
    assert_eq!(remaining, [3, 2, 1], "counted across the flush");
    assert_eq!(h.calls("eval").await, 1, "the call after NOSCRIPT");
    assert_eq!(h.calls("script|load").await, 0);
    assert_eq!(
        h.calls("evalsha").await,
        3,
        "the NOSCRIPT one, then two from the cache"
    );
}

/// Three decisions in a row for client `f`: their remaining counts.
async fn three_decisions(limiter: &redis_guard::rate_limit::RedisLimiter, rule: &Rule) -> Vec<u64> {
    let mut remaining = Vec::new();
    for _ in 0..3 {
        remaining.push(u64::from(decide(limiter, rule, "f").await.remaining));
    }
    remaining
}
// Over TLS (`rediss://`, a client certificate): a standalone server, a pool, a cluster and
// Sentinel.
backend_suite!(tls_only: ten_per_minute_then_429, script_flush_between_calls_does_not_fail_a_request);

// ---- Plain rules: the lean path answers as the general engine does. ----

/// One rule of a random layer: algorithm (0 to 3 GCRA, 4 a fixed window, 5 a sliding log, 6
/// a sliding counter, 7 a token bucket), limit, burst, period (s), cost, its key (0 global, 1
/// `x-k<i>`, 2 the peer's address, 3 the client's address behind proxies in 10.0.0.0/8, 4 the
/// address an earlier rule left in the request), and whether `vip` is on its allow list.
type RuleSpec = (u8, u32, u32, u64, u32, u8, bool);

/// A layer of `specs` on `limiter`. `general`: the layer hands its decision to the inner
/// service (`extensions`), which keeps it on the general engine; otherwise plain rules take the
/// lean path. `None` when the rules cannot work.
fn random_layer(
    limiter: Arc<dyn Limiter>,
    specs: &[RuleSpec],
    (ietf, legacy): (bool, bool),
    general: bool,
) -> Option<RateLimitLayer> {
    let mut builder = RateLimitLayer::builder(limiter)
        .rate_limit_headers(ietf)
        .legacy_headers(legacy)
        .extensions(general);
    for (i, &(algorithm, limit, burst, period, cost, keyed, allow)) in specs.iter().enumerate() {
        let algorithm = match algorithm {
            0..=3 => Algorithm::Gcra,
            4 => Algorithm::FixedWindow,
            5 => Algorithm::SlidingLog,
            6 => Algorithm::SlidingCounter,
            _ => Algorithm::TokenBucket,
        };
        let quota = Quota::new(limit, Duration::from_secs(period)).burst(burst);
        let mut rule = Rule::new(format!("r{i}"), quota)
            .with_algorithm(algorithm)
            .with_cost(cost);
        if allow {
            rule = rule.with_allowed_keys([Key::from("vip")]);
        }
        use redis_guard::rate_limit::{ClientAddr, ClientIp, ExtensionKey, Global, HeaderKey};
        builder = match keyed {
            0 => builder.rule_with(rule, Global),
            1 => builder.rule_with(rule, HeaderKey::new(format!("x-k{i}"))),
            2 => builder.rule_with(rule, ClientIp::peer()),
            3 => builder.rule_with(rule, ClientIp::trusted_proxies(["10.0.0.0/8"]).ok()?),
            _ => builder.rule_with(rule, ExtensionKey::new(|a: &ClientAddr| Key::from(a.ip()))),
        };
    }
    builder.build().ok()
}

/// `GET /` whose keys (`x-k0` to `x-k2`) are all `key` (`a`, `b` or `vip`), from client
/// 203.0.113.<`key`'s index> forwarded by `peer` (0 a trusted proxy, 1 an untrusted peer, 2
/// none: a misconfiguration for a rule keyed by the address).
fn keyed(key: usize, peer: usize) -> Request<Body> {
    let mut req = Request::get("/").body(Full::default()).expect("request");
    let headers = req.headers_mut();
    for i in 0..3 {
        let name = http::HeaderName::try_from(format!("x-k{i}")).expect("name");
        headers.insert(name, ["a", "b", "vip"][key].parse().expect("value"));
    }
    let forwarded = format!("203.0.113.{key}").parse().expect("value");
    headers.insert("x-forwarded-for", forwarded);
    if let Some(peer) = ["10.0.0.1:4000", "192.0.2.9:4000"].get(peer) {
        let peer = redis_guard::rate_limit::PeerAddr(peer.parse().expect("address"));
        req.extensions_mut().insert(peer);
    }
    req
}

/// Plain rules take the lean path (in memory: decided at once; on Redis: keys on the stack, one
/// call, an integer per rule), and answer every request as the general engine does: status,
/// headers and body (the handler's: the client address the layer left it), over `cases` random
/// rule sets, header settings and requests (keys, peers, and time between). The two layers of a
/// case share nothing but a frozen clock, moved alike (on Redis: each has its own key prefix),
/// so every answer is exact.
fn the_plain_path_answers_as_the_general_engine(kind: Kind, cases: u32) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let h = &rt.block_on(async {
        match kind {
            Kind::Memory => Harness::memory().await,
            _ => Harness::redis().await,
        }
    });
    let strategy = (
        prop::collection::vec(
            (
                0u8..8,
                1u32..6,
                1u32..6,
                1u64..4,
                1u32..3,
                0u8..5,
                any::<bool>(),
            ),
            1..4,
        ),
        (any::<bool>(), any::<bool>()),
        prop::collection::vec((0usize..3, 0usize..3, 0u64..1500), 1..40),
    );
    let case = std::sync::atomic::AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let outcome = runner.run(&strategy, |(specs, headers, requests)| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        rt.block_on(async {
            let clock = redis_guard::backend::ManualClock::new();
            let limiter = |side: &str| {
                let prefix = format!("{}{n}{side}:", h.prefix());
                let clock = clock.clone();
                async move {
                    if h.kind() == Kind::Memory {
                        let limiter =
                            redis_guard::rate_limit::MemoryLimiter::builder().clock(clock);
                        return Arc::new(limiter.build()) as Arc<dyn Limiter>;
                    }
                    let backend = redis_guard::backend::RedisBackend::new(h.connection().await)
                        .prefix(prefix)
                        .timeout(redis_guard_tests::TEST_TIMEOUT)
                        .frozen_time(clock);
                    Arc::new(redis_guard::rate_limit::RedisLimiter::new(backend))
                }
            };
            let Some(lean) = random_layer(limiter("l").await, &specs, headers, false) else {
                return Ok(());
            };
            let general =
                random_layer(limiter("g").await, &specs, headers, true).expect("the same rules");
            let ok = service_fn(|req: Request<Body>| async move {
                let addr = req
                    .extensions()
                    .get::<redis_guard::rate_limit::ClientAddr>();
                let addr = addr.map(ToString::to_string).unwrap_or_default();
                Ok::<_, Infallible>(Response::new(Full::from(addr)))
            });
            let (lean, general) = (lean.layer(ok), general.layer(ok));
            for (i, (key, peer, after_ms)) in requests.into_iter().enumerate() {
                let a = call(lean.clone(), keyed(key, peer)).await;
                let b = call(general.clone(), keyed(key, peer)).await;
                let same = (a.status, &a.headers, &a.body) == (b.status, &b.headers, &b.body);
                prop_assert!(
                    same,
                    "request {} ({}, {}): {:?} vs {:?}",
                    i,
                    key,
                    peer,
                    a,
                    b
                );
                clock.advance(Duration::from_millis(after_ms));
            }
            Ok(())
        })
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

#[test]
fn the_plain_path_in_memory_answers_as_the_general_engine() {
    the_plain_path_answers_as_the_general_engine(Kind::Memory, 200);
}

#[test]
fn the_plain_path_on_redis_answers_as_the_general_engine() {
    the_plain_path_answers_as_the_general_engine(Kind::Redis, 60);
}

/// A plain fixed window on Redis >= 7 (its plain transaction, on Redis' own clock) answers
/// through the lean path as through the general engine: status, `RateLimit` remaining and
/// `Retry-After` alike, the window's end within the second that passes between the two calls.
#[tokio::test]
async fn a_plain_fixed_window_answers_as_the_general_engine() {
    let h = Harness::redis().await;
    let layer = |general: bool| {
        let h = &h;
        async move {
            let backend = h
                .redis_time_backend()
                .await
                .prefix(format!("{}{general}:", h.prefix()));
            let rule = Rule::new("fw", Quota::per_hour(3)).with_algorithm(Algorithm::FixedWindow);
            RateLimitLayer::builder(redis_guard::rate_limit::RedisLimiter::new(backend))
                .rule_with(rule, by_client())
                .extensions(general)
                .build()
                .expect("valid")
                .layer(app())
        }
    };
    let (lean, general) = (layer(false).await, layer(true).await);
    // `"fw";r=<remaining>;t=<seconds>`: the two parts.
    let parts = |r: &Reply| {
        let value = r.header("ratelimit").to_owned();
        let (remaining, t) = value.split_once(";t=").expect("RateLimit");
        let t: u64 = t.parse().expect("seconds");
        (remaining.to_owned(), t)
    };
    for i in 0..6 {
        let (a, b) = (
            call(lean.clone(), from("c")).await,
            call(general.clone(), from("c")).await,
        );
        assert_eq!(a.status, if i < 3 { 200 } else { 429 }, "request {i}");
        assert_eq!(a.status, b.status, "request {i}");
        let ((ra, ta), (rb, tb)) = (parts(&a), parts(&b));
        assert_eq!(ra, rb, "request {i}");
        assert!(ta.abs_diff(tb) <= 1, "request {i}: t={ta} and t={tb}");
        let retry = |r: &Reply| r.header("retry-after").parse::<u64>().unwrap_or(0);
        assert!(retry(&a).abs_diff(retry(&b)) <= 1, "request {i}");
    }
    assert_eq!(h.calls("evalsha").await, 0, "only plain transactions");
}
