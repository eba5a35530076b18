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
use redis_guard_tests::{ALGORITHMS, Harness, admitted, backend_suite, by_client, empty_ok};
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

/// Sends `n` requests for `path` from `client` through `svcs` in turn: how many were
/// admitted, and the `RateLimit` header of the last reply.
async fn send<S, B>(svcs: &[S], client: &str, path: &str, n: usize) -> (usize, String)
where
    S: tower::Service<Request<Body>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let (count, last) = admitted(svcs, n, || request(client, path)).await;
    (count, last.header("ratelimit").to_owned())
}

/// Two replicas of a layer of `rules` around [`empty_ok`], each on a new limiter of `h`.
async fn replicas(
    h: &Harness,
    rules: Vec<(Rule, HeaderKey)>,
) -> Vec<
    impl tower::Service<
        Request<Body>,
        Response = http::Response<impl http_body::Body<Data = Bytes, Error = impl std::fmt::Debug>>,
        Error = impl std::fmt::Debug,
    > + Clone,
> {
    let mut svcs = Vec::new();
    for _ in 0..2 {
        let mut builder = RateLimitLayer::builder(h.limiter().await);
        for (rule, key) in &rules {
            builder = builder.rule_with(rule.clone(), key.clone());
        }
        svcs.push(builder.build().expect("valid").layer(empty_ok()));
    }
    svcs
}

/// `(client, path, sent, admitted)`: one step of a test.
type Step = (&'static str, &'static str, usize, usize);

/// Sends each step's requests in turn, asserting how many were admitted.
async fn steps<S, B>(svcs: &[S], what: &str, steps: &[Step])
where
    S: tower::Service<Request<Body>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    for (i, &(client, path, sent, expected)) in steps.iter().enumerate() {
        let got = send(svcs, client, path, sent).await.0;
        assert_eq!(got, expected, "{what}, step {i}: {sent} × {client} {path}");
    }
}

/// Rule `api-<algorithm>`, 10 an hour, the last 30 % (3) kept for the checkout.
fn api(algorithm: &Algorithm) -> Rule {
    let rule = Rule::new(format!("api-{algorithm:?}"), Quota::per_hour(10));
    reserved(rule.with_algorithm(algorithm.clone()), 0.3)
}

async fn bulk_traffic_past_its_share_is_limited_while_the_class_passes(h: Harness) {
    for algorithm in ALGORITHMS {
        let name = api(&algorithm).name().to_owned();
        let svcs = replicas(&h, vec![(api(&algorithm), by_client())]).await;
        let what = format!("{algorithm:?}");
        let (bulk, header) = send(&svcs, "acme", "/search", 10).await;
        assert_eq!(bulk, 7, "{what}: bulk stops at its share");
        assert!(
            header.starts_with(&format!("\"{name}\";r=0;")),
            "{what}: {header}"
        );
        // The class still gets the reserve, and no more.
        let (first, header) = send(&svcs, "acme", "/checkout/pay", 1).await;
        assert_eq!(first, 1, "{what}");
        assert!(
            header.starts_with(&format!("\"{name}\";r=2;")),
            "{what}: {header}"
        );
        steps(
            &svcs,
            &what,
            &[
                ("acme", "/checkout", 4, 2),
                ("acme", "/search", 2, 0),
                // The reserve is the last part of one budget, not a second one: a class that
                // came first leaves bulk what is left above the reserve.
                ("globex", "/checkout", 5, 5),
                ("globex", "/search", 5, 2),
                ("globex", "/checkout", 5, 3),
            ],
        )
        .await;
    }
    if h.is_redis() {
        h.assert_every_key_has_a_ttl(ALGORITHMS.len()).await;
    }
}

async fn the_reserve_refills_with_the_quota(h: Harness) {
    // One unit every 6 minutes, a burst of 10, the last 3 kept.
    let unit = Duration::from_secs(6 * 60);
    for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
        let svcs = replicas(&h, vec![(api(&algorithm), by_client())]).await;
        let what = format!("{algorithm:?}");
        steps(
            &svcs,
            &what,
            &[("refill", "/search", 8, 7), ("refill", "/checkout", 4, 3)],
        )
        .await;
        // One unit back: below the reserve, so only the class may take it.
        h.wait(unit + Duration::from_secs(1)).await;
        steps(
            &svcs,
            &what,
            &[("refill", "/search", 2, 0), ("refill", "/checkout", 2, 1)],
        )
        .await;
        // Four units back (the reserve and one): bulk gets the one above the reserve.
        h.wait(unit * 4 + Duration::from_secs(1)).await;
        steps(
            &svcs,
            &what,
            &[("refill", "/search", 3, 1), ("refill", "/checkout", 4, 3)],
        )
        .await;
    }
}

async fn a_bulk_request_another_rule_denies_takes_nothing_of_the_reserve(h: Harness) {
    // The reserved rule per client, a tight rule per IP beside it (another key: another slot
    // on a Cluster, where the first is refunded when the second denies).
    let by_ip = HeaderKey::new(http::HeaderName::from_static("x-ip"));
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::SlidingLog,
    ] {
        let ip = Rule::new(format!("ip-{algorithm:?}"), Quota::per_hour(2));
        let both = replicas(
            &h,
            vec![(api(&algorithm), by_client()), (ip, by_ip.clone())],
        )
        .await;
        let what = format!("{algorithm:?}");
        steps(&both, &what, &[("acme", "/search", 5, 2)]).await;
        // The 3 the IP rule denied took nothing: of the client's 10, 8 are left, 5 for bulk.
        let alone = replicas(&h, vec![(api(&algorithm), by_client())]).await;
        steps(
            &alone,
            &what,
            &[("acme", "/search", 8, 5), ("acme", "/checkout", 5, 3)],
        )
        .await;
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
