//! Costs taken from the request, on every backend: weighted requests, and cost 0 as a probe that
//! checks without consuming.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use redis_guard::rate_limit::{Algorithm, Check, Key, Quota, RateLimitLayer, Rule};
use redis_guard_tests::{ALGORITHMS, Harness, backend_suite, by_client, call, empty_ok};
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

/// One step of an exact table: a check of this cost, time passing, or a reset of the key.
#[derive(Clone, Copy, Debug)]
enum Step {
    Cost(u32),
    WaitMs(u64),
    Reset,
}

/// Runs `steps` on one fresh key of a 10/s (burst 10) GCRA rule through the harness' exact
/// limiter (Redis: deny cache on, its clock frozen on the harness'), one line per step:
/// `cost: allowed remaining retry_after reset_after`, in milliseconds.
async fn table(h: &Harness, key: &str, steps: &[Step]) -> Vec<String> {
    let limiter = h.exact_limiter().await;
    let rule = Rule::new("ten", Quota::per_second(10));
    let mut seen = Vec::new();
    for &step in steps {
        match step {
            Step::Cost(cost) => {
                let check = Check::new(rule.clone(), Key::from(key)).with_cost(cost);
                seen.push(match limiter.check_all(vec![check]).await {
                    Ok(d) => format!(
                        "{cost}: {} r={} retry={} reset={}",
                        if d.allowed { "admit" } else { "deny" },
                        d.remaining,
                        d.retry_after.as_millis(),
                        d.reset_after.as_millis()
                    ),
                    Err(_) => format!("{cost}: refused"),
                });
            }
            Step::WaitMs(ms) => h.wait(Duration::from_millis(ms)).await,
            Step::Reset => limiter.reset(&rule, Key::from(key)).await.expect("reset"),
        }
    }
    seen
}

/// go-redis/redis_rate's GCRA cases (TestAllow, TestAllowN_IncrementZero, the sequence of
/// TestAllowAtMost as single costs, TestRetryAfter's 1 ms refill), replayed exactly on every
/// backend with the deny cache on: memory and Redis give the same answers, to the millisecond.
/// A denial cached before an admitted request on the same key is not what the next request
/// gets, and a probe (cost 0) reports the state as it stands (a fresh key resets in 0 ms).
async fn redis_rate_cases_are_answered_exactly(h: Harness) {
    use Step::{Cost, Reset, WaitMs};
    let cases: [(&str, &[Step], &[&str]); 4] = [
        (
            "allow",
            &[
                Cost(1),
                Reset,
                Cost(1),
                Cost(2),
                Cost(7),
                Cost(1000),
                Cost(1),
            ],
            &[
                "1: admit r=9 retry=0 reset=100",
                "1: admit r=9 retry=0 reset=100",
                "2: admit r=7 retry=0 reset=300",
                "7: admit r=0 retry=0 reset=1000",
                // More than the burst can ever admit: the cost's bug, not the client's.
                "1000: refused",
                "1: deny r=0 retry=100 reset=1000",
            ],
        ),
        (
            "increment-zero",
            &[Cost(0), Cost(1), Cost(0)],
            &[
                "0: admit r=10 retry=0 reset=0",
                "1: admit r=9 retry=0 reset=100",
                "0: admit r=9 retry=0 reset=100",
            ],
        ),
        (
            "at-most",
            &[
                Cost(1),
                Cost(2),
                Cost(0),
                Cost(10),
                Cost(7),
                Cost(0),
                Cost(10),
                WaitMs(1000),
                Cost(10),
            ],
            &[
                "1: admit r=9 retry=0 reset=100",
                "2: admit r=7 retry=0 reset=300",
                "0: admit r=7 retry=0 reset=300",
                "10: deny r=7 retry=300 reset=300",
                "7: admit r=0 retry=0 reset=1000",
                "0: deny r=0 retry=100 reset=1000",
                // Not the cached denial of the first cost 10 (r=7, retry=300).
                "10: deny r=0 retry=1000 reset=1000",
                "10: admit r=0 retry=0 reset=1000",
            ],
        ),
        (
            "retry-after",
            &[
                Cost(10),
                Cost(1),
                WaitMs(99),
                Cost(1),
                WaitMs(1),
                Cost(1),
                Cost(0),
            ],
            &[
                "10: admit r=0 retry=0 reset=1000",
                "1: deny r=0 retry=100 reset=1000",
                "1: deny r=0 retry=1 reset=901",
                "1: admit r=0 retry=0 reset=1000",
                "0: deny r=0 retry=100 reset=1000",
            ],
        ),
    ];
    for (key, steps, expected) in cases {
        assert_eq!(table(&h, key, steps).await, expected, "{key}");
    }
}

/// A probe (cost 0) records nothing, so on every algorithm it reports the state as it stands: a
/// fresh key resets in 0 ms (not as if one unit were taken), and after one request exactly what
/// that request's answer said.
async fn a_probe_reports_the_reset_as_the_state_stands(h: Harness) {
    let limiter = h.exact_limiter().await;
    for algorithm in ALGORITHMS {
        let rule = Rule::new("probe", Quota::per_second(10)).with_algorithm(algorithm.clone());
        let key = format!("{algorithm:?}");
        let check = |cost| Check::new(rule.clone(), Key::from(key.as_str())).with_cost(cost);
        let answer = |d: redis_guard::rate_limit::Decision| (d.allowed, d.remaining, d.reset_after);
        let fresh = limiter.check_all(vec![check(0)]).await.expect("probe");
        assert_eq!(answer(fresh), (true, 10, Duration::ZERO), "{algorithm:?}");
        let one = limiter.check_all(vec![check(1)]).await.expect("one");
        assert!(
            one.allowed && one.reset_after > Duration::ZERO,
            "{algorithm:?}"
        );
        let probe = limiter.check_all(vec![check(0)]).await.expect("probe");
        assert_eq!(answer(probe), answer(one), "{algorithm:?}");
    }
}

backend_suite!(
    the_request_says_what_it_costs_and_zero_only_checks,
    redis_rate_cases_are_answered_exactly,
    a_probe_reports_the_reset_as_the_state_stands
);
