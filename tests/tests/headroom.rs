//! Reserved headroom (`Rule::reserve`), on every backend and algorithm: bulk traffic past its
//! share is limited while the reserved class still passes, with exact counts, across two
//! replicas; the reserve refills as the quota does; refused configurations.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use redis_guard::ConfigErrorKind;
use redis_guard::rate_limit::{
    Algorithm, HeaderKey, MemoryLimiter, Quota, RateLimitLayer, Route, Rule,
};
use redis_guard_tests::{ALGORITHMS, Harness, backend_suite, by_client, call, empty_ok};
use tower::Layer;

type Body = Full<Bytes>;

/// `GET path` from `client`: `/checkout` is the reserved class.
fn request(client: &str, path: &str) -> Request<Body> {
    Request::get(path)
        .header("x-client", client)
        .header("x-ip", "192.0.2.1")
        .body(Body::default())
        .expect("request")
}

/// `rule` keeping `share` of its budget for `/checkout`.
fn reserved(rule: Rule, share: f64) -> Rule {
    let checkout = Route::prefix("/checkout");
    rule.reserve(share, move |head| checkout.matches(head))
}

/// Sends `n` requests for `path` from `client`, alternating between `svcs` (replicas): how many
/// were admitted, and the `RateLimit` header of the last reply.
async fn send<S, B>(svcs: &[S], client: &str, path: &str, n: usize) -> (usize, String)
where
    S: tower::Service<Request<Body>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let mut admitted = 0;
    let mut last = String::new();
    for i in 0..n {
        let reply = call(svcs[i % svcs.len()].clone(), request(client, path)).await;
        match reply.status {
            200 => admitted += 1,
            429 => {}
            other => panic!("unexpected status {other}: {}", reply.body),
        }
        last = reply.header("ratelimit").to_owned();
    }
    (admitted, last)
}

/// Two replicas of a layer of `rules`, each on a new limiter of `h`.
async fn replicas(h: &Harness, rules: &[(Rule, HeaderKey)]) -> Vec<RateLimitLayer> {
    let mut layers = Vec::new();
    for _ in 0..2 {
        let mut builder = RateLimitLayer::builder(h.limiter().await);
        for (rule, key) in rules {
            builder = builder.rule_with(rule.clone(), key.clone());
        }
        layers.push(builder.build().expect("valid"));
    }
    layers
}

async fn bulk_traffic_past_its_share_is_limited_while_the_class_passes(h: Harness) {
    for algorithm in ALGORITHMS {
        // 10 an hour, the last 3 kept for the checkout.
        let rule = reserved(
            Rule::new(format!("api-{algorithm:?}"), Quota::per_hour(10))
                .with_algorithm(algorithm.clone()),
            0.3,
        );
        let name = rule.name().to_owned();
        let svcs: Vec<_> = replicas(&h, &[(rule, by_client())])
            .await
            .iter()
            .map(|l| l.layer(empty_ok()))
            .collect();
        let (bulk, header) = send(&svcs, "acme", "/search", 10).await;
        assert_eq!(bulk, 7, "{algorithm:?}: bulk stops at its share");
        assert!(
            header.starts_with(&format!("\"{name}\";r=0;")),
            "{algorithm:?}: {header}"
        );
        // The class still gets the reserve, and no more.
        let (first, header) = send(&svcs, "acme", "/checkout/pay", 1).await;
        assert_eq!(first, 1, "{algorithm:?}");
        assert!(
            header.starts_with(&format!("\"{name}\";r=2;")),
            "{algorithm:?}: {header}"
        );
        assert_eq!(
            send(&svcs, "acme", "/checkout", 4).await.0,
            2,
            "{algorithm:?}"
        );
        assert_eq!(
            send(&svcs, "acme", "/search", 2).await.0,
            0,
            "{algorithm:?}"
        );
        // The reserve is the last part of one budget, not a second one: a class that came
        // first leaves bulk what is left above the reserve.
        assert_eq!(
            send(&svcs, "globex", "/checkout", 5).await.0,
            5,
            "{algorithm:?}"
        );
        assert_eq!(
            send(&svcs, "globex", "/search", 5).await.0,
            2,
            "{algorithm:?}"
        );
        assert_eq!(
            send(&svcs, "globex", "/checkout", 5).await.0,
            3,
            "{algorithm:?}"
        );
    }
    if h.is_redis() {
        h.assert_every_key_has_a_ttl(ALGORITHMS.len()).await;
    }
}

async fn the_reserve_refills_with_the_quota(h: Harness) {
    for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
        // One unit every 6 minutes, a burst of 10, the last 3 kept.
        let rule = reserved(
            Rule::new(format!("api-{algorithm:?}"), Quota::per_hour(10))
                .with_algorithm(algorithm.clone()),
            0.3,
        );
        let svcs: Vec<_> = replicas(&h, &[(rule, by_client())])
            .await
            .iter()
            .map(|l| l.layer(empty_ok()))
            .collect();
        let client = format!("refill-{algorithm:?}");
        assert_eq!(
            send(&svcs, &client, "/search", 8).await.0,
            7,
            "{algorithm:?}"
        );
        assert_eq!(
            send(&svcs, &client, "/checkout", 4).await.0,
            3,
            "{algorithm:?}"
        );
        // One unit back: below the reserve, so only the class may take it.
        h.wait(Duration::from_secs(6 * 60 + 1)).await;
        assert_eq!(
            send(&svcs, &client, "/search", 2).await.0,
            0,
            "{algorithm:?}"
        );
        assert_eq!(
            send(&svcs, &client, "/checkout", 2).await.0,
            1,
            "{algorithm:?}"
        );
        // Four units back (the reserve and one): bulk gets the one above the reserve.
        h.wait(Duration::from_secs(4 * 6 * 60 + 1)).await;
        assert_eq!(
            send(&svcs, &client, "/search", 3).await.0,
            1,
            "{algorithm:?}"
        );
        assert_eq!(
            send(&svcs, &client, "/checkout", 4).await.0,
            3,
            "{algorithm:?}"
        );
    }
}

async fn a_bulk_request_another_rule_denies_takes_nothing_of_the_reserve(h: Harness) {
    // The reserved rule per client, a tight rule per IP beside it (another key: another slot
    // on a Cluster, where the first is refunded when the second denies).
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::SlidingLog,
    ] {
        let api = reserved(
            Rule::new(format!("api-{algorithm:?}"), Quota::per_hour(10))
                .with_algorithm(algorithm.clone()),
            0.3,
        );
        let ip = Rule::new(format!("ip-{algorithm:?}"), Quota::per_hour(2));
        let by_ip = HeaderKey::new(http::HeaderName::from_static("x-ip"));
        let svcs: Vec<_> = replicas(&h, &[(api.clone(), by_client()), (ip, by_ip)])
            .await
            .iter()
            .map(|l| l.layer(empty_ok()))
            .collect();
        assert_eq!(
            send(&svcs, "acme", "/search", 5).await.0,
            2,
            "{algorithm:?}"
        );
        // The 3 the IP rule denied took nothing: of the client's 10, 8 are left, 5 for bulk.
        let alone: Vec<_> = replicas(&h, &[(api, by_client())])
            .await
            .iter()
            .map(|l| l.layer(empty_ok()))
            .collect();
        assert_eq!(
            send(&alone, "acme", "/search", 8).await.0,
            5,
            "{algorithm:?}"
        );
        assert_eq!(
            send(&alone, "acme", "/checkout", 5).await.0,
            3,
            "{algorithm:?}"
        );
    }
}

backend_suite!(
    bulk_traffic_past_its_share_is_limited_while_the_class_passes,
    the_reserve_refills_with_the_quota,
    a_bulk_request_another_rule_denies_takes_nothing_of_the_reserve,
);

#[test]
fn reserves_that_cannot_work_are_refused_when_the_layer_is_built() {
    let per_hour = |n| Rule::new("api", Quota::per_hour(n));
    for (rule, kind) in [
        (per_hour(10).reserve(0.0, |_| true), ConfigErrorKind::Quota),
        (per_hour(10).reserve(1.0, |_| true), ConfigErrorKind::Quota),
        (
            per_hour(10).reserve(f64::NAN, |_| true),
            ConfigErrorKind::Quota,
        ),
        (per_hour(10).reserve(-0.5, |_| true), ConfigErrorKind::Quota),
        // 90 % of 10 is 9: bulk requests costing 2 could never pass.
        (
            per_hour(10).with_cost(2).reserve(0.9, |_| true),
            ConfigErrorKind::Cost,
        ),
        // Any share of a burst of 1 is the whole of it.
        (per_hour(1).reserve(0.01, |_| true), ConfigErrorKind::Cost),
        (
            Rule::concurrency("reports", 4).reserve(0.5, |_| true),
            ConfigErrorKind::Unsupported,
        ),
        (
            per_hour(10).leased(10).reserve(0.5, |_| true),
            ConfigErrorKind::Unsupported,
        ),
    ] {
        let err = RateLimitLayer::builder(MemoryLimiter::new())
            .rule_with(rule.clone(), by_client())
            .build()
            .expect_err("refused");
        assert_eq!(err.kind(), kind, "{rule:?}: {err}");
        assert!(err.to_string().contains("reserve"), "{err}");
    }
    // 10 % of 5 rounds up to 1 unit (and 30 % of 10, 3.0000000000000004 in f64, is 3 above).
    let rule = per_hour(5).reserve(0.1, |_| true);
    assert!(rule.validate().is_ok());
    assert_eq!(rule.reserved_share(), Some(0.1));
}
