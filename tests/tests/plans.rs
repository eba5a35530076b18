//! Quotas resolved per request (a caller's plan), on every backend: a key's state carries over
//! when its plan changes mid-window, on every algorithm and across two instances; `async`
//! lookups; resolvers whose quota cannot work.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use redis_guard::rate_limit::{Algorithm, Check, HeaderKey, Key, Quota, RateLimitLayer, Rule};

/// How long a request waits for an async quota lookup (`Rule::with_quota_from_async`): the
/// crate's `QUOTA_LOOKUP_TIMEOUT`, 1 s.
const QUOTA_LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);
use redis_guard_tests::{ALGORITHMS, Harness, Reply, backend_suite, by_client, call, empty_ok};
use tower::Layer;

type Body = Full<Bytes>;

/// The plans: free is the rule's own quota (10 an hour).
fn plan_quota(head: &http::request::Parts) -> Option<Quota> {
    match head.headers.get("x-plan")?.as_bytes() {
        b"pro" => Some(Quota::per_hour(100)),
        b"tiny" => Some(Quota::per_hour(3)),
        _ => None,
    }
}

fn request(client: &str, plan: &str) -> Request<Body> {
    Request::get("/")
        .header("x-client", client)
        .header("x-plan", plan)
        .header("x-ip", "192.0.2.1")
        .body(Body::default())
        .expect("request")
}

/// `n` requests from `client` on `plan`, alternating between the services (replicas): how many
/// were admitted, and the last admitted reply.
async fn send<S, B>(svcs: &[S], client: &str, plan: &str, n: usize) -> (usize, Option<Reply>)
where
    S: tower::Service<Request<Body>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let mut admitted = 0;
    let mut last = None;
    for i in 0..n {
        let reply = call(svcs[i % svcs.len()].clone(), request(client, plan)).await;
        match reply.status {
            200 => {
                admitted += 1;
                last = Some(reply);
            }
            429 => {}
            other => panic!("unexpected status {other}: {}", reply.body),
        }
    }
    (admitted, last)
}

/// Asserts that `reply` was admitted and its `RateLimit` header says `state`.
fn assert_admitted_with(reply: &Reply, state: &str) {
    assert_eq!(reply.status, 200, "{}", reply.body);
    let header = reply.header("ratelimit");
    assert!(header.contains(state), "{header}");
}

/// A layer of `rule` alone, keyed by client, on a new limiter of `h` (a replica).
async fn layer_of(h: &Harness, rule: Rule) -> RateLimitLayer {
    RateLimitLayer::builder(h.limiter().await)
        .rule_with(rule, by_client())
        .build()
        .expect("valid")
}

async fn a_plan_change_mid_window_admits_what_the_new_quota_allows(h: Harness) {
    for algorithm in ALGORITHMS {
        let rule = Rule::new(format!("api-{algorithm:?}"), Quota::per_hour(10))
            .with_algorithm(algorithm.clone())
            .with_quota_from(plan_quota);
        let name = rule.name().to_owned();
        // Two replicas: two limiters sharing the backend's state.
        let mut svcs = Vec::new();
        for _ in 0..2 {
            svcs.push(layer_of(&h, rule.clone()).await.layer(empty_ok()));
        }
        let (free, _) = send(&svcs, "acme", "free", 12).await;
        assert_eq!(free, 10, "{algorithm:?}: the free plan");
        // Upgraded mid-window: what the new quota leaves, not a fresh 100, not still nothing.
        let (pro, last) = send(&svcs, "acme", "pro", 100).await;
        assert_eq!(pro, 90, "{algorithm:?}: upgraded to pro after using 10");
        let last = last.expect("admitted");
        assert_eq!(
            last.header("ratelimit-policy"),
            format!("\"{name}\";q=100;w=3600"),
            "{algorithm:?}: the header shows the plan's quota"
        );
        // Downgraded below what it used: nothing left.
        assert_eq!(send(&svcs, "acme", "tiny", 5).await.0, 0, "{algorithm:?}");
        // Quotas differ per key: another client on pro has its whole quota.
        assert_eq!(
            send(&svcs, "globex", "pro", 101).await.0,
            100,
            "{algorithm:?}"
        );
        assert_eq!(
            send(&svcs, "initech", "tiny", 4).await.0,
            3,
            "{algorithm:?}"
        );
    }
}

async fn a_planned_rule_stays_all_or_nothing_with_the_others(h: Harness) {
    let svc = RateLimitLayer::builder(h.limiter().await)
        .rule_with(
            Rule::new("api", Quota::per_hour(10)).with_quota_from(plan_quota),
            by_client(),
        )
        .rule_with(
            Rule::new("ip", Quota::per_hour(5)).with_algorithm(Algorithm::SlidingLog),
            HeaderKey::new(http::HeaderName::from_static("x-ip")),
        )
        .build()
        .expect("valid")
        .layer(empty_ok());
    assert_eq!(
        send(std::slice::from_ref(&svc), "acme", "pro", 8).await.0,
        5
    );
    // The 3 requests the IP rule denied took nothing from the plan's quota.
    let other_ip = Request::get("/")
        .header("x-client", "acme")
        .header("x-plan", "pro")
        .header("x-ip", "192.0.2.2")
        .body(Body::default())
        .expect("request");
    assert_admitted_with(&call(svc, other_ip).await, "\"api\";r=94;");
}

async fn a_resolver_whose_quota_cannot_work_gets_a_500(h: Harness) {
    let broken = |head: &http::request::Parts| match head.headers.get("x-plan")?.as_bytes() {
        b"zero" => Some(Quota::per_hour(0)),
        b"minute" => Some(Quota::per_minute(10)),
        b"small" => Some(Quota::per_hour(5)),
        _ => None,
    };
    for (algorithm, plan) in [
        (Algorithm::Gcra, "zero"),
        // A window algorithm's windows are cut by the rule's period.
        (Algorithm::SlidingLog, "minute"),
        // Each request costs 8: more than the plan's burst of 5.
        (Algorithm::Gcra, "small"),
    ] {
        let rule = Rule::new("api", Quota::per_hour(10))
            .with_algorithm(algorithm.clone())
            .with_cost(8)
            .with_quota_from(broken);
        let svc = layer_of(&h, rule).await.layer(empty_ok());
        let client = format!("{plan}-{algorithm:?}");
        let reply = call(svc.clone(), request(&client, plan)).await;
        assert_eq!(reply.status, 500, "{algorithm:?} {plan}");
        assert!(reply.body.contains("misconfigured"), "{}", reply.body);
        // Nothing was recorded: the rule's own quota is whole.
        assert_admitted_with(&call(svc, request(&client, "free")).await, "\"api\";r=2;");
    }
}

async fn an_async_lookup_decides_the_quota(h: Harness) {
    let rule = Rule::new("api", Quota::per_hour(10)).with_quota_from_async(|head| {
        let plan = head.headers.get("x-plan").cloned();
        async move {
            match plan.as_ref().map(http::HeaderValue::as_bytes) {
                Some(b"pro") => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Some(Quota::per_hour(100))
                }
                Some(b"zero") => Some(Quota::per_hour(0)),
                // A lookup that hangs: the rule's own quota once the wait is over.
                Some(b"stuck") => std::future::pending().await,
                _ => None,
            }
        }
    });
    let svc = layer_of(&h, rule).await.layer(empty_ok());
    let svcs = [svc.clone()];
    assert_eq!(send(&svcs, "acme", "free", 4).await.0, 4);
    let (pro, last) = send(&svcs, "acme", "pro", 100).await;
    assert_eq!(pro, 96, "upgraded after using 4");
    assert_eq!(
        last.expect("admitted").header("ratelimit-policy"),
        "\"api\";q=100;w=3600"
    );
    assert_eq!(call(svc.clone(), request("zeta", "zero")).await.status, 500);
    let started = Instant::now();
    let reply = call(svc, request("stuck", "stuck")).await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("ratelimit-policy"), "\"api\";q=10;w=3600");
    assert!(
        waited >= QUOTA_LOOKUP_TIMEOUT && waited < QUOTA_LOOKUP_TIMEOUT * 3,
        "{waited:?}"
    );
}

/// A plan sets how many requests of a key may be in flight: a concurrency rule's quota
/// resolved per request (here given directly, as the layer's resolver would).
async fn a_plan_sets_how_many_may_be_in_flight(h: Harness) {
    let limiter = h.limiter().await;
    let jobs = Rule::concurrency("jobs", 1);
    // A concurrency rule's period is its lease expiry: 30 s by default (`Rule::lease_expiry`).
    let pro = Quota::new(3, Duration::from_secs(30));
    let on_pro = || vec![Check::new(jobs.clone(), Key::from("acme")).with_quota(pro)];
    let mut held = Vec::new();
    for _ in 0..3 {
        let d = limiter.check_all(on_pro()).await.expect("decision");
        assert!(d.allowed, "pro: 3 in flight");
        held.push(d);
    }
    assert!(
        !limiter.check_all(on_pro()).await.expect("decision").allowed,
        "a fourth"
    );
    // Back on the rule's own quota of 1: three in flight already, no more.
    assert!(
        !limiter
            .check(&jobs, Key::from("acme"))
            .await
            .expect("decision")
            .allowed
    );
    for d in held {
        d.lease()
            .expect("a lease")
            .release()
            .await
            .expect("release");
    }
    let d = limiter
        .check(&jobs, Key::from("acme"))
        .await
        .expect("decision");
    assert!(d.allowed, "all released");
}

backend_suite!(
    a_plan_sets_how_many_may_be_in_flight,
    a_plan_change_mid_window_admits_what_the_new_quota_allows,
    a_planned_rule_stays_all_or_nothing_with_the_others,
    a_resolver_whose_quota_cannot_work_gets_a_500,
    an_async_lookup_decides_the_quota,
);
