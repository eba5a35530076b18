//! Rollout modes on every backend: shadow and soft rules beside enforced ones, and candidates.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use redis_guard::rate_limit::{Decision, Mode, Quota, RateLimitLayer, Rejection, Rule};
use redis_guard_tests::{Harness, backend_suite, by_client, call, empty_ok, from};
use tower::{Layer, service_fn};

type Body = Full<Bytes>;

/// "shadow=<verdicts>": what the shadow rules said, `+` admitted and `-` limited, in order.
fn shadow_verdicts(d: &Decision) -> String {
    let verdicts: String = d
        .shadow
        .iter()
        .map(|r| if r.state.allowed { '+' } else { '-' })
        .collect();
    format!("shadow={verdicts}")
}

/// The inner service answers with the shadow verdicts it saw; so does a denial's body.
async fn layer_with_candidate(h: &Harness, enforced: Quota, candidate: Quota) -> RateLimitLayer {
    RateLimitLayer::builder(h.limiter().await)
        .rule_with(Rule::new("api", enforced), by_client())
        .candidate("api", candidate)
        .extensions(true)
        .response(|r| match r {
            Rejection::Limited(d) => Response::builder()
                .status(429)
                .body(shadow_verdicts(d).into())
                .unwrap_or_default(),
            other => other.response(),
        })
        .build()
        .expect("valid")
}

/// The enforced rule stays exact under concurrency from two instances with a candidate beside
/// it, and the candidate, counting on its own, admits exactly its own quota of the same
/// requests: its denials never kept the enforced rule from counting, nor the other way round.
async fn a_candidate_counts_on_its_own_and_the_enforced_rule_stays_exact(h: Harness) {
    let inner = service_fn(|req: Request<Body>| async move {
        let seen = req
            .extensions()
            .get::<Decision>()
            .map(shadow_verdicts)
            .unwrap_or_default();
        Ok::<_, Infallible>(Response::new(Full::from(seen)))
    });
    let a = layer_with_candidate(&h, Quota::per_hour(50), Quota::per_hour(20))
        .await
        .layer(inner);
    let b = layer_with_candidate(&h, Quota::per_hour(50), Quota::per_hour(20))
        .await
        .layer(inner);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let svc = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move { call(svc, from("hot")).await }));
    }
    let (mut allowed, mut candidate_allowed) = (0, 0);
    for t in tasks {
        let reply = t.await.expect("task");
        assert!(
            !reply.header("ratelimit-policy").contains("candidate")
                && !reply.header("ratelimit").contains("candidate"),
            "a candidate never shows: {:?}",
            reply.headers
        );
        allowed += usize::from(reply.status == 200);
        match reply.body.as_str() {
            "shadow=+" => candidate_allowed += 1,
            "shadow=-" => {}
            other => panic!("unexpected body {other:?}"),
        }
    }
    assert_eq!((allowed, candidate_allowed), (50, 20));
}

async fn shadow_and_soft_rules_never_block(h: Harness) {
    let layer = RateLimitLayer::builder(h.limiter().await)
        .rule_with(
            Rule::new("soft", Quota::per_hour(2)).with_mode(Mode::Soft),
            by_client(),
        )
        .rule_with(
            Rule::new("shadow", Quota::per_hour(1)).with_mode(Mode::Shadow),
            by_client(),
        )
        .build()
        .expect("valid");
    let svc = layer.layer(empty_ok());
    let mut seen = Vec::new();
    for _ in 0..4 {
        let reply = call(svc.clone(), from("k")).await;
        assert_eq!(reply.header("ratelimit-policy"), "\"soft\";q=2;w=3600");
        seen.push((reply.status, reply.header("ratelimit-exceeded").to_owned()));
    }
    let exceeded = "\"soft\"".to_owned();
    assert_eq!(
        seen,
        [
            (200, String::new()),
            (200, String::new()),
            (200, exceeded.clone()),
            (200, exceeded),
        ]
    );
}

backend_suite!(
    a_candidate_counts_on_its_own_and_the_enforced_rule_stays_exact,
    shadow_and_soft_rules_never_block,
);
