//! Costs taken from the request, on every backend: weighted requests, and cost 0 as a probe that
//! checks without consuming.

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use redis_guard::rate_limit::{Algorithm, Quota, RateLimitLayer, Rule};
use redis_guard_tests::{Harness, backend_suite, by_client, call, empty_ok};
use tower::Layer;

type Body = Full<Bytes>;

/// A request from one client costing what its `x-cost` header says.
fn costing(cost: u32) -> Request<Body> {
    Request::get("/")
        .header("x-client", "k")
        .header("x-cost", cost)
        .body(Body::default())
        .expect("request")
}

fn header_cost(head: &http::request::Parts) -> u32 {
    head.headers
        .get("x-cost")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1)
}

/// Status and remaining count (`r` of the `RateLimit` header) of each cost in turn, with the
/// rule on `algorithm` (GCRA runs the lean script on Redis, the others the general one).
async fn spend(h: &Harness, algorithm: Algorithm, costs: &[u32]) -> Vec<(u16, String)> {
    let rule = Rule::new("api", Quota::per_hour(10))
        .with_algorithm(algorithm)
        .with_cost_from(header_cost);
    let svc = RateLimitLayer::builder(h.limiter().await)
        .rule_with(rule, by_client())
        .build()
        .expect("valid")
        .layer(empty_ok());
    let mut seen = Vec::new();
    for &cost in costs {
        let reply = call(svc.clone(), costing(cost)).await;
        let remaining = reply
            .header("ratelimit")
            .split(';')
            .find_map(|p| p.strip_prefix("r="))
            .unwrap_or("-")
            .to_owned();
        seen.push((reply.status, remaining));
    }
    seen
}

async fn the_request_says_what_it_costs_and_zero_only_checks(h: Harness) {
    let costs = [4, 0, 5, 0, 2, 0, 1, 0, 11];
    let expected: Vec<(u16, String)> = [
        (200, "6"),
        (200, "6"), // a probe: admitted, nothing consumed
        (200, "1"),
        (200, "1"),
        (429, "1"), // 2 > 1 left: denied, nothing consumed
        (200, "1"),
        (200, "0"),
        (429, "0"), // nothing left: the probe is denied
        (500, "-"), // more than the burst: the cost function's bug, not the client's
    ]
    .map(|(s, r)| (s, r.to_owned()))
    .to_vec();
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::SlidingLog,
        Algorithm::FixedWindow,
    ] {
        assert_eq!(
            spend(&h, algorithm.clone(), &costs).await,
            expected,
            "{algorithm:?}"
        );
    }
}

backend_suite!(the_request_says_what_it_costs_and_zero_only_checks);
