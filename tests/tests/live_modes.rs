//! Live modes (`Rule::live`, `set_rule_mode`, `clear_rule_mode`), on every backend: a rule put
//! in `Shadow` or `Soft` at run time stops denying, on the replica that made the change at once
//! and on the others within the limiters' refresh; it is then decided on its own, so that it
//! keeps no enforced rule from counting; its quota (live or not) stays as it was.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use redis_guard::ConfigErrorKind;
use redis_guard::rate_limit::{
    Key, Limiter, LimiterError, MemoryLimiter, Mode, Quota, RateLimitLayer, Rule,
};
use redis_guard_tests::{Harness, Monitor, Reply, backend_suite, by_client, call, empty_ok, from};
use tower::Layer;

type Body = Full<Bytes>;

/// The refresh of the limiters' copies in these tests: what another replica lags by at most.
const REFRESH: Duration = Duration::from_millis(50);

/// A replica's limiter: on Redis, a new one re-reading live records every [`REFRESH`].
async fn replica(h: &Harness) -> Arc<dyn Limiter> {
    h.live_limiter(REFRESH).await
}

/// A layer of `rules` (each keyed by client) on `limiter`.
fn layer(
    limiter: Arc<dyn Limiter>,
    rules: Vec<Rule>,
) -> impl tower::Service<
    Request<Body>,
    Response = http::Response<impl http_body::Body<Data = Bytes, Error = impl std::fmt::Debug>>,
    Error = impl std::fmt::Debug,
    Future = impl Send,
> + Clone {
    let mut builder = RateLimitLayer::builder(limiter);
    for rule in rules {
        builder = builder.rule_with(rule, by_client());
    }
    builder.build().expect("valid").layer(empty_ok())
}

/// Sends requests from `client` until one is answered `status`: at the first on the limiter
/// that made the change (`lag` false) and on memory; within 10 s (the copy's refresh and a
/// read) on another Redis replica. Each request that is not the answer looked for is a `429`
/// of a client over its limit, which counts nothing.
async fn until_status<S, B>(h: &Harness, svc: &S, client: &str, status: u16, lag: bool) -> Reply
where
    S: tower::Service<Request<Body>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let started = Instant::now();
    loop {
        let reply = call(svc.clone(), from(client)).await;
        if reply.status == status {
            return reply;
        }
        assert!(
            lag && h.is_redis(),
            "answered {} at once: only another Redis replica may lag",
            reply.status
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still {}",
            reply.status
        );
        tokio::time::sleep(REFRESH / 5).await;
    }
}

async fn a_mode_change_reaches_every_replica(h: Harness) {
    let api = Rule::new("api", Quota::per_hour(2)).live();
    let (a, b) = (replica(&h).await, replica(&h).await);
    let (svc_a, svc_b) = (
        layer(Arc::clone(&a), vec![api.clone()]),
        layer(Arc::clone(&b), vec![api.clone()]),
    );
    for expected in [200, 200, 429] {
        assert_eq!(call(svc_b.clone(), from("acme")).await.status, expected);
    }
    // Shadowed on replica a: a admits acme at once, and clients see nothing of the rule.
    let shadowed = a.set_rule_mode(&api, Mode::Shadow).await.expect("set");
    let reply = until_status(&h, &svc_a, "acme", 200, false).await;
    assert_eq!(reply.header("ratelimit"), "", "{:?}", reply.headers);
    assert_eq!(reply.header("ratelimit-policy"), "", "{:?}", reply.headers);
    // Replica b follows.
    until_status(&h, &svc_b, "acme", 200, true).await;
    // Soft, set on replica b: admitted and named in RateLimit-Exceeded, on a too.
    let soft = b.set_rule_mode(&api, Mode::Soft).await.expect("set");
    assert!(soft > shadowed, "{soft} after {shadowed}");
    let reply = until_status(&h, &svc_b, "acme", 200, false).await;
    assert_eq!(reply.header("ratelimit-exceeded"), "\"api\"");
    let started = Instant::now();
    loop {
        let reply = call(svc_a.clone(), from("acme")).await;
        assert_eq!(reply.status, 200);
        if reply.header("ratelimit-exceeded") == "\"api\"" {
            assert!(reply.header("ratelimit").starts_with("\"api\";r=0;"));
            break;
        }
        assert!(h.is_redis(), "memory follows at once: {:?}", reply.headers);
        assert!(started.elapsed() < Duration::from_secs(10), "never soft");
        tokio::time::sleep(REFRESH / 5).await;
    }
    // Cleared on replica a: enforced again everywhere.
    let cleared = a.clear_rule_mode(&api).await.expect("clear");
    assert!(cleared > soft);
    until_status(&h, &svc_a, "acme", 429, false).await;
    until_status(&h, &svc_b, "acme", 429, true).await;
    assert_eq!(
        call(svc_b.clone(), from("globex")).await.status,
        200,
        "another client has its own quota"
    );
    if h.is_redis() {
        h.assert_every_key_has_a_ttl(2).await;
    }
}

async fn a_shadowed_rule_keeps_no_enforced_rule_from_counting(h: Harness) {
    let api = Rule::new("api", Quota::per_hour(1)).live();
    let day = Rule::new("day", Quota::per_day(100));
    let limiter = replica(&h).await;
    let svc = layer(Arc::clone(&limiter), vec![api.clone(), day]);
    let day_left = |reply: &Reply| {
        let header = reply.header("ratelimit").to_owned();
        header
            .split(", ")
            .find(|item| item.starts_with("\"day\""))
            .unwrap_or_else(|| panic!("no day item: {header}"))
            .to_owned()
    };
    let first = call(svc.clone(), from("acme")).await;
    assert_eq!(first.status, 200);
    assert!(day_left(&first).starts_with("\"day\";r=99;"), "{first:?}");
    // Enforced, api denies: all or nothing, so day counts nothing.
    for _ in 0..2 {
        assert_eq!(call(svc.clone(), from("acme")).await.status, 429);
    }
    limiter
        .set_rule_mode(&api, Mode::Shadow)
        .await
        .expect("set");
    // Shadowed, api is decided on its own: over its limit, and day counts the request.
    let reply = call(svc.clone(), from("acme")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        day_left(&reply).split(';').nth(1),
        Some("r=98"),
        "{reply:?}"
    );
    assert!(!reply.header("ratelimit").contains("\"api\""), "{reply:?}");
}

/// The `api` rule's live record as Redis stores it.
async fn stored_record(h: &Harness) -> String {
    let record = h.keys_under("rl:api:live").await;
    assert_eq!(record.len(), 1, "{record:?}");
    let mut conn = h.inspect().await;
    redis::cmd("GET")
        .arg(&record[0])
        .query_async(&mut conn)
        .await
        .expect("GET")
}

async fn a_mode_keeps_the_live_quota_and_a_quota_keeps_the_mode(h: Harness) {
    let api = Rule::new("api", Quota::per_hour(100)).live();
    let limiter = replica(&h).await;
    let svc = layer(Arc::clone(&limiter), vec![api.clone()]);
    limiter
        .set_rule_quota(&api, Quota::per_hour(3))
        .await
        .expect("quota");
    limiter.set_rule_mode(&api, Mode::Soft).await.expect("mode");
    // Soft, with the live quota of 3 (on a single Redis the script reads the quota from the
    // record, which now carries the mode too).
    for (n, exceeded) in [(1, ""), (2, ""), (3, ""), (4, "\"api\"")] {
        let reply = call(svc.clone(), from("acme")).await;
        assert_eq!(reply.status, 200, "request {n}");
        assert_eq!(reply.header("ratelimit-exceeded"), exceeded, "request {n}");
        assert_eq!(reply.header("ratelimit-policy"), "\"api\";q=3;w=3600");
    }
    if h.is_redis() {
        assert_eq!(stored_record(&h).await, "2:3:3600000000:3:1200000000;soft");
    }
    // The quota cleared: the mode stays, with the rule's own quota.
    limiter.clear_rule_quota(&api).await.expect("clear quota");
    let reply = call(svc.clone(), from("acme")).await;
    assert_eq!(reply.header("ratelimit-policy"), "\"api\";q=100;w=3600");
    assert_eq!(reply.header("ratelimit-exceeded"), "");
    // The mode cleared too: a limit of 100 enforced, acme at 5 of them.
    limiter.clear_rule_mode(&api).await.expect("clear mode");
    let reply = call(svc.clone(), from("acme")).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.header("ratelimit").starts_with("\"api\";r=95;"),
        "{reply:?}"
    );
    if h.is_redis() {
        assert_eq!(
            stored_record(&h).await,
            "4",
            "nothing set, the version kept"
        );
    }
}

async fn a_live_shadow_rule_never_waits(h: Harness) {
    // Throttled: enforced, a request over the limit would wait for its slot, a minute away.
    let api = Rule::new("api", Quota::per_minute(1))
        .throttle(Duration::from_secs(120))
        .live();
    let limiter = replica(&h).await;
    let svc = layer(Arc::clone(&limiter), vec![api.clone()]);
    assert_eq!(call(svc.clone(), from("acme")).await.status, 200);
    limiter
        .set_rule_mode(&api, Mode::Shadow)
        .await
        .expect("set");
    // Shadowed, it is admitted at once: only an enforced rule waits.
    let started = Instant::now();
    let reply = call(svc.clone(), from("acme")).await;
    assert_eq!(reply.status, 200);
    assert!(started.elapsed() < Duration::from_secs(5), "it waited");
    // Nor did it reserve the slot a minute away, as a waiter would: the key is full for at most
    // the minute its first request takes.
    let seen = limiter
        .inspect(&api, Key::from("acme"))
        .await
        .expect("inspect");
    assert!(
        seen.state.reset_after <= Duration::from_secs(60),
        "{:?}",
        seen.state
    );
}

backend_suite!(
    a_mode_change_reaches_every_replica,
    a_shadowed_rule_keeps_no_enforced_rule_from_counting,
    a_mode_keeps_the_live_quota_and_a_quota_keeps_the_mode,
    a_live_shadow_rule_never_waits,
);

async fn a_replica_follows_a_mode_change_from_its_second_request(h: Harness) {
    let api = Rule::new("api", Quota::per_hour(1)).live();
    let a = h.live_limiter(REFRESH).await;
    // Replica b re-reads its copy once an hour at most: only its decisions tell it of a change.
    let b = h.live_limiter(Duration::from_secs(3600)).await;
    let svc_b = layer(Arc::clone(&b), vec![api.clone()]);
    let mut monitor = Monitor::start(&h).await;
    // b's first decision has its copy read, in the background: wait until it was.
    assert_eq!(call(svc_b.clone(), from("acme")).await.status, 200);
    let started = Instant::now();
    let get = |c: &String| c.to_ascii_lowercase().starts_with("\"get\"");
    while !monitor.commands(&h).await.iter().any(get) {
        assert!(started.elapsed() < Duration::from_secs(10), "never read");
    }
    let statuses = |n| {
        let svc = svc_b.clone();
        async move {
            let mut got = Vec::new();
            for _ in 0..n {
                got.push(call(svc.clone(), from("acme")).await.status);
            }
            got
        }
    };
    // The first decision after the change is taken by the old mode and reads the new one in
    // its script call; the second follows it.
    a.set_rule_mode(&api, Mode::Shadow).await.expect("set");
    assert_eq!(statuses(3).await, [429, 200, 200]);
    a.clear_rule_mode(&api).await.expect("clear");
    assert_eq!(statuses(3).await, [200, 429, 429]);
    let (sent, _) = monitor.split(&h).await;
    assert!(
        !sent.iter().any(get),
        "the copy was not read again: {sent:?}"
    );
}

backend_suite!(standalone_only: a_replica_follows_a_mode_change_from_its_second_request);

#[tokio::test]
async fn a_rule_that_is_not_live_keeps_its_mode() {
    let limiter = MemoryLimiter::new();
    let plain = Rule::new("api", Quota::per_minute(1));
    for refused in [
        limiter.set_rule_mode(&plain, Mode::Shadow).await,
        limiter.clear_rule_mode(&plain).await,
    ] {
        match refused {
            Err(LimiterError::Config(e)) => assert_eq!(e.kind(), ConfigErrorKind::Unsupported),
            other => panic!("not refused: {other:?}"),
        }
    }
    // A direct call enforces a live rule whatever its mode.
    let live = plain.live();
    limiter
        .set_rule_mode(&live, Mode::Shadow)
        .await
        .expect("set");
    assert!(
        limiter
            .check(&live, Key::from("k"))
            .await
            .expect("check")
            .allowed
    );
    assert!(
        !limiter
            .check(&live, Key::from("k"))
            .await
            .expect("check")
            .allowed
    );
}
