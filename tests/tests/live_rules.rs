//! Live limits (`Rule::live`, `set_rule_quota`, `clear_rule_quota`), on every backend: a change
//! made on one replica is followed by the others from their next request (on a Cluster, within
//! the limiter's refresh), keys keep what they used, the record has a TTL, and on a single
//! Redis the decision still sends one script call, which reads the record itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use redis_guard::ConfigErrorKind;
use redis_guard::rate_limit::{
    Algorithm, Key, Limiter, LimiterError, MemoryLimiter, Quota, RateLimitLayer, RedisLimiter, Rule,
};
use redis_guard_tests::{
    Harness, Kind, Monitor, Reply, admitted, backend_suite, by_client, call, empty_ok, from,
};
use tower::Layer;

type Body = Full<Bytes>;

/// The refresh of the limiters' copies in these tests: what a Cluster replica lags by at most.
const REFRESH: Duration = Duration::from_millis(50);

/// A replica's limiter: on Redis, a new one re-reading live records every [`REFRESH`].
async fn replica(h: &Harness) -> Arc<dyn Limiter> {
    h.live_limiter(REFRESH).await
}

/// Sends `n` requests from `client` through `svc`: how many were admitted, and the last reply.
async fn send<S, B>(svc: &S, client: &str, n: usize) -> (usize, Reply)
where
    S: tower::Service<Request<Body>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    admitted(std::slice::from_ref(svc), n, || from(client)).await
}

/// Waits (at most 10 s) until `limiter` decides `rule` with a limit of `limit`: at once on
/// memory and a single Redis, within [`REFRESH`] and a read on a Cluster.
async fn until_limit(h: &Harness, limiter: &Arc<dyn Limiter>, rule: &Rule, limit: u32) {
    let started = Instant::now();
    loop {
        let seen = limiter
            .inspect(rule, Key::from("probe"))
            .await
            .expect("inspect");
        if seen.state.limit == limit {
            return;
        }
        assert_eq!(h.kind(), Kind::Cluster, "only a Cluster replica may lag");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still {}",
            seen.state.limit
        );
        tokio::time::sleep(REFRESH / 5).await;
    }
}

async fn a_change_reaches_every_replica(h: Harness) {
    let rule = Rule::new("api", Quota::per_hour(100)).live();
    let (a, b) = (replica(&h).await, replica(&h).await);
    let layer = |l: &Arc<dyn Limiter>| {
        RateLimitLayer::builder(Arc::clone(l))
            .rule_with(rule.clone(), by_client())
            .build()
            .expect("valid")
            .layer(empty_ok())
    };
    let (svc_a, svc_b) = (layer(&a), layer(&b));
    assert_eq!(send(&svc_b, "acme", 3).await.0, 3);
    // Cut to 5 an hour on replica a: a follows at once, and says so in its headers.
    let set = a
        .set_rule_quota(&rule, Quota::per_hour(5))
        .await
        .expect("set");
    let (admitted, reply) = send(&svc_a, "acme", 1).await;
    assert_eq!(admitted, 1);
    assert_eq!(reply.header("ratelimit-policy"), "\"api\";q=5;w=3600");
    assert!(
        reply.header("ratelimit").starts_with("\"api\";r=1;"),
        "{:?}",
        reply.headers
    );
    // Replica b from its next request on (a Cluster replica once its copy is read): acme used
    // 4 of the 5, so one more.
    until_limit(&h, &b, &rule, 5).await;
    assert_eq!(send(&svc_b, "acme", 3).await.0, 1);
    assert_eq!(
        send(&svc_b, "globex", 6).await.0,
        5,
        "another key has the whole new quota"
    );
    // Cleared on replica b: the code's quota again everywhere, what acme used carried over.
    let cleared = b.clear_rule_quota(&rule).await.expect("clear");
    assert!(cleared > set, "{cleared} after {set}");
    until_limit(&h, &a, &rule, 100).await;
    let (admitted, reply) = send(&svc_a, "acme", 1).await;
    assert_eq!(admitted, 1);
    assert!(
        reply.header("ratelimit").starts_with("\"api\";r=94;"),
        "{:?}",
        reply.headers
    );
    if h.is_redis() {
        h.assert_every_key_has_a_ttl(3).await;
        let live = h.keys_under("rl:api:live").await;
        assert_eq!(live.len(), 1, "{live:?}");
        let ttl = Duration::from_millis(u64::try_from(h.pttl(&live[0]).await).expect("a TTL"));
        assert!(ttl > Duration::from_secs(29 * 24 * 3600), "{ttl:?}");
    }
}

async fn a_window_rule_and_a_direct_check_follow_too(h: Harness) {
    let rule = Rule::new("calls", Quota::per_minute(10))
        .with_algorithm(Algorithm::SlidingLog)
        .live();
    let (a, b) = (replica(&h).await, replica(&h).await);
    a.set_rule_quota(&rule, Quota::per_minute(2))
        .await
        .expect("set");
    until_limit(&h, &b, &rule, 2).await;
    for expected in [true, true, false] {
        let d = b.check(&rule, Key::from("+15550100")).await.expect("check");
        assert_eq!(d.allowed, expected);
        assert_eq!(d.limit, 2);
    }
}

async fn a_live_quota_wins_over_a_plan(h: Harness) {
    // Every caller with an x-plan header is on a plan of 100 an hour.
    let rule = Rule::new("api", Quota::per_hour(10))
        .with_quota_from(|head| {
            head.headers
                .contains_key("x-plan")
                .then(|| Quota::per_hour(100))
        })
        .live();
    let limiter = replica(&h).await;
    let svc = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule_with(rule.clone(), by_client())
        .build()
        .expect("valid")
        .layer(empty_ok());
    let planned = || {
        let mut req = from("acme");
        req.headers_mut()
            .insert("x-plan", http::HeaderValue::from_static("pro"));
        req
    };
    assert_eq!(
        admitted(std::slice::from_ref(&svc), 12, planned).await.0,
        12
    );
    limiter
        .set_rule_quota(&rule, Quota::per_hour(20))
        .await
        .expect("set");
    // The operator's 20 for everyone: acme used 12 of them.
    let (count, last) = admitted(std::slice::from_ref(&svc), 10, planned).await;
    assert_eq!(count, 8);
    assert_eq!(last.header("ratelimit-policy"), "\"api\";q=20;w=3600");
    limiter.clear_rule_quota(&rule).await.expect("clear");
    assert_eq!(
        admitted(std::slice::from_ref(&svc), 1, planned).await.0,
        1,
        "the plan again"
    );
}

/// Sends `limit + 1` requests from a new `client` through `svc` and checks that every reply
/// names the quota `limit` a minute: `RateLimit-Policy`, `RateLimit` counting down from it, the
/// legacy `X-RateLimit-*`, and a `429` (with its `Retry-After`) on the request past it.
async fn names_what_it_enforces<S, B>(svc: &S, client: &str, limit: u32, when: &str)
where
    S: tower::Service<Request<Body>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    for i in 0..=limit {
        let reply = call(svc.clone(), from(client)).await;
        let admitted = i < limit;
        let at = format!("{when}, request {} of {client}: {:?}", i + 1, reply.headers);
        assert_eq!(reply.status, if admitted { 200 } else { 429 }, "{at}");
        assert_eq!(
            reply.header("ratelimit-policy"),
            format!("\"api\";q={limit};w=60"),
            "{at}"
        );
        assert!(
            reply
                .header("ratelimit")
                .starts_with(&format!("\"api\";r={};", limit - (i + 1).min(limit))),
            "{at}"
        );
        assert_eq!(reply.header("x-ratelimit-limit"), limit.to_string(), "{at}");
        assert_eq!(
            reply.header("x-ratelimit-remaining"),
            (limit - (i + 1).min(limit)).to_string(),
            "{at}"
        );
        assert_eq!(reply.header("retry-after").is_empty(), admitted, "{at}");
    }
}

async fn every_replica_names_the_quota_it_enforces(h: Harness) {
    let rule = Rule::new("api", Quota::per_minute(10)).live();
    // Replica b re-reads its copy once an hour at most: all it learns of a change below, it
    // learns from its decisions (on a Cluster, where its copy decides, nothing).
    let (a, b) = (
        replica(&h).await,
        h.live_limiter(Duration::from_secs(3600)).await,
    );
    let layer = |l: &Arc<dyn Limiter>| {
        RateLimitLayer::builder(Arc::clone(l))
            .rule_with(rule.clone(), by_client())
            .legacy_headers(true)
            .build()
            .expect("valid")
            .layer(empty_ok())
    };
    let (svc_a, svc_b) = (layer(&a), layer(&b));
    // 5 a minute, set on a before b's first decision, which has b's copy read once: once b
    // says 5, its copy holds it.
    a.set_rule_quota(&rule, Quota::per_minute(5))
        .await
        .expect("set");
    let started = Instant::now();
    for i in 0.. {
        let reply = call(svc_b.clone(), from(&format!("probe-{i}"))).await;
        if reply.header("ratelimit-policy") == "\"api\";q=5;w=60" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "b never followed: {:?}",
            reply.headers
        );
        tokio::time::sleep(REFRESH / 5).await;
    }
    names_what_it_enforces(&svc_b, "first", 5, "b, after 5 was set").await;
    // Cut to 2 a minute on a: b's copy still says 5. On one Redis (or a pool) and in memory, b
    // decides with 2 from its next request on, and says so; on a Cluster b goes on deciding with
    // its copy's 5, and says so.
    a.set_rule_quota(&rule, Quota::per_minute(2))
        .await
        .expect("set");
    names_what_it_enforces(&svc_a, "a-cut", 2, "a, after 2 was set").await;
    let cut = if h.kind() == Kind::Cluster { 5 } else { 2 };
    names_what_it_enforces(&svc_b, "b-cut", cut, "b, after 2 was set").await;
    // Cleared on a: the rule's own 10 again, on b from its next request (but on a Cluster).
    a.clear_rule_quota(&rule).await.expect("clear");
    names_what_it_enforces(&svc_a, "a-cleared", 10, "a, after the clear").await;
    let cleared = if h.kind() == Kind::Cluster { 5 } else { 10 };
    names_what_it_enforces(&svc_b, "b-cleared", cleared, "b, after the clear").await;
}

backend_suite!(
    a_change_reaches_every_replica,
    a_window_rule_and_a_direct_check_follow_too,
    a_live_quota_wins_over_a_plan,
    every_replica_names_the_quota_it_enforces,
);

async fn the_decision_reads_the_record_in_its_one_script_call(h: Harness) {
    let rule = Rule::new("api", Quota::per_hour(100)).live();
    // A copy re-read once an hour at most: every read below is the script's.
    let limiter: Arc<dyn Limiter> =
        Arc::new(RedisLimiter::new(h.backend().await).live_refresh(Duration::from_secs(3600)));
    let svc = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule_with(rule.clone(), by_client())
        .build()
        .expect("valid")
        .layer(empty_ok());
    let mut monitor = Monitor::start(&h).await;
    // The first request has the copy read once, in the background.
    assert_eq!(send(&svc, "acme", 1).await.0, 1);
    let started = Instant::now();
    let is = |c: &str, name: &str| c.to_ascii_lowercase().starts_with(&format!("\"{name}\""));
    while !monitor.commands(&h).await.iter().any(|c| is(c, "get")) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the copy was never read"
        );
    }
    // Another replica changes it: this one's copy is an hour from being read again.
    let other = RedisLimiter::new(h.backend().await);
    other
        .set_rule_quota(&rule, Quota::per_hour(3))
        .await
        .expect("set");
    monitor.commands(&h).await;
    assert_eq!(
        send(&svc, "acme", 4).await.0,
        2,
        "decided with the record's quota"
    );
    let (sent, inside) = monitor.split(&h).await;
    assert_eq!(sent.len(), 4, "one call per request: {sent:?}");
    for command in &sent {
        assert!(is(command, "evalsha"), "{command}");
        assert!(
            command.contains(":live:"),
            "the record is one of the call's keys: {command}"
        );
    }
    let reads = inside.iter().filter(|c| c.contains(":live:")).count();
    assert_eq!(reads, 4, "{inside:?}");
}

async fn a_record_that_is_not_one_is_no_record(h: Harness) {
    let rule = Rule::new("api", Quota::per_hour(100)).live();
    let limiter = replica(&h).await;
    // The record's key, as a change writes it.
    limiter
        .set_rule_quota(&rule, Quota::per_hour(7))
        .await
        .expect("set");
    let record = h.keys_under("rl:api:live").await;
    assert_eq!(record.len(), 1, "{record:?}");
    let mut conn = h.inspect().await;
    for (i, stored) in [
        "",
        "x",
        "-5:2:3600000000:2:1800000000",
        "5:0:3600000000:2:1800000000",
        "5:2:3600000000",
        "5:99999999999:3600000000:2:1800000000",
        "5:2:99999999999999999999:2:1800000000",
        "99999999999999999999",
        "99999999999999999999:2:3600000000:2:1800000000",
        "5;loud",
        "5:2:3600000000:2:1800000000;shadow;x",
    ]
    .into_iter()
    .enumerate()
    {
        let () = redis::cmd("SET")
            .arg(&record[0])
            .arg(stored)
            .query_async(&mut conn)
            .await
            .expect("SET");
        // A new replica, whose copy knows nothing but what it reads: decided with the rule's
        // own quota, never an error.
        let fresh = replica(&h).await;
        let seen = fresh
            .check(&rule, Key::from(format!("k{i}")))
            .await
            .unwrap_or_else(|e| panic!("{stored:?}: {e}"));
        assert!(seen.allowed, "{stored:?}");
        assert_eq!(seen.limit, 100, "{stored:?}");
        // And a change made over it starts a record anew.
        let version = fresh
            .set_rule_quota(&rule, Quota::per_hour(3))
            .await
            .unwrap_or_else(|e| panic!("{stored:?}: {e}"));
        assert!(version >= 1, "{stored:?}");
        let d = fresh
            .check(&rule, Key::from(format!("k{i}")))
            .await
            .expect("check");
        assert_eq!(d.limit, 3, "{stored:?}");
    }
}

backend_suite!(
    standalone_only: the_decision_reads_the_record_in_its_one_script_call,
    a_record_that_is_not_one_is_no_record
);

#[tokio::test]
async fn live_quotas_that_cannot_work_are_refused() {
    let limiter = MemoryLimiter::new();
    let kind = |r: Result<u64, LimiterError>| match r {
        Err(LimiterError::Config(e)) => e.kind(),
        other => panic!("not refused: {other:?}"),
    };
    let plain = Rule::new("api", Quota::per_minute(10));
    assert_eq!(
        kind(limiter.set_rule_quota(&plain, Quota::per_minute(5)).await),
        ConfigErrorKind::Unsupported
    );
    assert_eq!(
        kind(limiter.clear_rule_quota(&plain).await),
        ConfigErrorKind::Unsupported
    );
    let costly = plain.clone().with_cost(4).live();
    assert_eq!(
        kind(limiter.set_rule_quota(&costly, Quota::per_minute(3)).await),
        ConfigErrorKind::Cost
    );
    let window = Rule::new("w", Quota::per_minute(10))
        .with_algorithm(Algorithm::FixedWindow)
        .live();
    assert_eq!(
        kind(limiter.set_rule_quota(&window, Quota::per_hour(10)).await),
        ConfigErrorKind::Algorithm
    );
    assert_eq!(
        kind(limiter.set_rule_quota(&window, Quota::per_minute(0)).await),
        ConfigErrorKind::Quota
    );
    // Nothing was set: the rules decide with their own quotas.
    let d = limiter.check(&costly, Key::from("k")).await.expect("check");
    assert_eq!((d.allowed, d.limit), (true, 10));
    for refused in [
        plain.clone().reserve(0.1, |_| true).live(),
        plain.clone().leased(10).live(),
        Rule::concurrency("reports", 2).live(),
    ] {
        let err = refused.validate().expect_err("refused");
        assert_eq!(err.kind(), ConfigErrorKind::Unsupported, "{refused:?}");
    }
}
