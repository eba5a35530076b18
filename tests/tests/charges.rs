//! Costs charged after the fact, on every backend: `Limiter::charge` takes what it says
//! whatever is left, and the layer settles what a response reports (`ActualCost`) or refunds
//! (`Rule::refund_when`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use redis_guard::rate_limit::{
    ActualCost, Algorithm, CustomAlgorithm, HeaderKey, Key, Limiter, LimiterError, MissingKey,
    Quota, RateLimitLayer, RedisLimiter, Rule,
};
use redis_guard_tests::{Harness, backend_suite, by_client, call};
use tower::Layer;

type Body = Full<Bytes>;

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
];

/// What `rule` has left for `key`, as an inspection sees it.
async fn remaining(limiter: &dyn Limiter, rule: &Rule, key: &str) -> u32 {
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
        assert_eq!(remaining(&*limiter, &rule, "k").await, 3, "{algorithm:?}");
        // A charge is never denied: past the limit, the key waits.
        limiter
            .charge(&rule, Key::from("k"), 20)
            .await
            .expect("charge");
        assert_eq!(remaining(&*limiter, &rule, "k").await, 0, "{algorithm:?}");
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
        assert_eq!(remaining(&*limiter, &rule, "k2").await, 10, "{algorithm:?}");
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

/// An inner service that reports the cost its `x-used` header says for rule `tokens` (half of
/// it for rule `calls`; nothing without the header), and answers `500` when it says `fail`.
fn reporting(
    tokens: &str,
    calls: &str,
) -> impl tower::Service<
    http::Request<Body>,
    Response = http::Response<Body>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<http::Response<Body>, std::convert::Infallible>> + Send,
> + Clone
+ Send {
    let (tokens, calls): (Arc<str>, Arc<str>) = (tokens.into(), calls.into());
    tower::service_fn(move |req: http::Request<Body>| {
        let (tokens, calls) = (Arc::clone(&tokens), Arc::clone(&calls));
        async move {
            let used = req
                .headers()
                .get("x-used")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let mut res = http::Response::new(Body::default());
            match used.as_deref() {
                Some("fail") => *res.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR,
                Some(n) => {
                    let n: u32 = n.parse().expect("a cost");
                    res.extensions_mut()
                        .insert(ActualCost::of(tokens, n).and(calls, n / 2));
                }
                None => {}
            }
            Ok::<_, std::convert::Infallible>(res)
        }
    })
}

fn used(client: &str, used: Option<&str>) -> http::Request<Body> {
    let mut req = http::Request::get("/").header("x-client", client);
    if let Some(used) = used {
        req = req.header("x-used", used);
    }
    req.body(Body::default()).expect("request")
}

async fn the_response_settles_what_it_reports(h: Harness) {
    let limiter = h.limiter().await;
    for algorithm in ALGORITHMS {
        // Admitted on a guess of 10, settled on what the response reports.
        let tokens = Rule::new(format!("tokens-{algorithm:?}"), Quota::per_hour(100))
            .with_algorithm(algorithm.clone())
            .with_cost(10)
            .charged_after_response();
        let name = tokens.name().to_owned();
        // A second rule on another key (another slot on a cluster), settled too.
        let calls = Rule::new(format!("calls-{algorithm:?}"), Quota::per_hour(100))
            .with_algorithm(algorithm.clone())
            .with_cost(0)
            .charged_after_response();
        let layer = RateLimitLayer::builder(Arc::clone(&limiter))
            .rule_with(tokens.clone(), by_client())
            .rule_with(
                calls.clone(),
                HeaderKey::new(http::HeaderName::from_static("x-used")),
            )
            .missing_key(MissingKey::Skip)
            .build()
            .expect("valid");
        let svc = layer.layer(reporting(&name, calls.name()));
        for (cost, left) in [
            (Some("25"), 75),
            (Some("3"), 72),
            (None, 62),
            (Some("0"), 62),
        ] {
            let reply = call(svc.clone(), used("k", cost)).await;
            assert_eq!(reply.status, 200, "{algorithm:?}");
            assert_eq!(
                remaining(&*limiter, &tokens, "k").await,
                left,
                "{algorithm:?} {cost:?}"
            );
        }
        // "calls" took nothing on admission (a probe), then what was reported: 12 of "25", 1 of
        // "3", on each key.
        assert_eq!(
            remaining(&*limiter, &calls, "25").await,
            88,
            "{algorithm:?}"
        );
        assert_eq!(remaining(&*limiter, &calls, "3").await, 99, "{algorithm:?}");
        if h.is_redis() && algorithm == Algorithm::FixedWindow {
            // Read back from Redis: the window's count is what the responses reported, 25 + 3,
            // and the 10 of the request that reported nothing, and 0.
            let key = RedisLimiter::new(h.backend().await).key_name(
                &redis_guard::rate_limit::Check::new(tokens.clone(), Key::from("k")),
            );
            let mut conn = h.inspect().await;
            let v: String = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .expect("GET");
            assert_eq!(v.split(':').nth(1), Some("38"), "{v}");
        }
    }
}

async fn a_server_error_refunds_the_request(h: Harness) {
    let limiter = h.limiter().await;
    for algorithm in ALGORITHMS {
        let rule = Rule::new(format!("api-{algorithm:?}"), Quota::per_hour(10))
            .with_algorithm(algorithm.clone())
            .with_cost(2)
            .refund_when(http::StatusCode::is_server_error);
        let svc = RateLimitLayer::builder(Arc::clone(&limiter))
            .rule_with(rule.clone(), by_client())
            .build()
            .expect("valid")
            .layer(reporting("tokens", "calls"));
        assert_eq!(call(svc.clone(), used("k", None)).await.status, 200);
        assert_eq!(remaining(&*limiter, &rule, "k").await, 8, "{algorithm:?}");
        for _ in 0..3 {
            assert_eq!(call(svc.clone(), used("k", Some("fail"))).await.status, 500);
        }
        assert_eq!(
            remaining(&*limiter, &rule, "k").await,
            8,
            "{algorithm:?}: refunded"
        );
    }
}

backend_suite!(
    a_charge_takes_what_it_says_whatever_is_left,
    gcra_keeps_the_debt_the_bucket_does_not,
    a_custom_algorithm_has_no_charge,
    the_response_settles_what_it_reports,
    a_server_error_refunds_the_request,
);
