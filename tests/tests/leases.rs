//! Concurrency leases ([`Rule::concurrency`]) on every backend: in-flight requests limited across
//! two app instances on real sockets, leases released when bodies end or are dropped, expired
//! when their instance is lost, and all or nothing with the rate rules beside them.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use http_body_util::channel::Channel;
use redis_guard::ConfigErrorKind;
use redis_guard::rate_limit::{
    FailurePolicy, Global, Key, Limiter, MemoryLimiter, Quota, RateLimitLayer, RedisLimiter, Rule,
};
use redis_guard_tests::{Harness, backend_suite, by_client, call, empty_ok, from, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tower::{Layer, Service, ServiceExt, service_fn};

/// The lease expiry of the suites' rules.
const EXPIRY: Duration = Duration::from_secs(30);

fn reports(max: u32) -> Rule {
    Rule::concurrency("report", max).lease_expiry(EXPIRY)
}

/// A layer of `rules` (keyed by the `x-client` header) on a new limiter instance of `h`: one
/// app instance.
async fn layer(h: &Harness, rules: impl IntoIterator<Item = Rule>) -> RateLimitLayer {
    let mut builder = RateLimitLayer::builder(h.limiter().await);
    for rule in rules {
        builder = builder.rule_with(rule, by_client());
    }
    builder.build().expect("valid")
}

/// Sends `GET /` from `client` on a new connection (`Connection: close`, so the server ends
/// the response, and releases its lease, before the connection closes).
async fn open(addr: SocketAddr, client: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let head =
        format!("GET / HTTP/1.1\r\nhost: t\r\nx-client: {client}\r\nconnection: close\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.expect("send");
    tcp
}

/// The status of a whole response, read to the end of the connection.
async fn get(addr: SocketAddr, client: &str) -> u16 {
    let mut tcp = open(addr, client).await;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.expect("read");
    status(&raw)
}

fn status(raw: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(raw);
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"))
}

/// Reads from `tcp` until what was read contains `needle`.
async fn read_until(tcp: &mut TcpStream, needle: &str) -> String {
    let mut raw = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tcp.read(&mut buf).await.expect("read");
        assert!(
            n > 0,
            "connection closed before {needle:?}: {:?}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw).into_owned();
        if text.contains(needle) {
            return text;
        }
    }
}

/// How many leases of `rule` are free for `client`, read without taking one.
async fn free(limiter: &dyn Limiter, rule: &Rule, client: &str) -> u32 {
    free_key(limiter, rule, Key::from(client)).await
}

/// How many leases of `rule` are free for `key`.
async fn free_key(limiter: &dyn Limiter, rule: &Rule, key: Key) -> u32 {
    let seen = limiter.inspect(rule, key).await.expect("inspect");
    if seen.state.allowed {
        seen.state.remaining
    } else {
        0
    }
}

/// Waits until `client` has `n` free leases: a release after a dropped body runs in a task of
/// its own. Fails after 10 s.
async fn until_free(limiter: &dyn Limiter, rule: &Rule, client: &str, n: u32) {
    until_free_key(limiter, rule, Key::from(client), n).await;
}

/// As [`until_free`], for `key`.
async fn until_free_key(limiter: &dyn Limiter, rule: &Rule, key: Key, n: u32) {
    let wait = async {
        while free_key(limiter, rule, key.clone()).await != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("{key:?} never got {n} free leases"));
}

/// The handler's view: requests in flight now and at most.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl InFlight {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An app whose handler counts itself in flight and waits for `gate` (a permit each; a closed
/// semaphore lets everyone through), then answers `200`.
async fn gated_app(
    h: &Harness,
    rules: [Rule; 1],
    seen: &Arc<InFlight>,
    gate: &Arc<Semaphore>,
) -> SocketAddr {
    let (seen, gate) = (Arc::clone(seen), Arc::clone(gate));
    let handler = service_fn(move |_: Request<hyper::body::Incoming>| {
        let (seen, gate) = (Arc::clone(&seen), Arc::clone(&gate));
        async move {
            seen.enter();
            // A permit lets one request through, once; a closed gate lets every one through.
            if let Ok(permit) = gate.acquire().await {
                permit.forget();
            }
            seen.leave();
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        }
    });
    serve(layer(h, rules).await.layer(handler)).await
}

async fn in_flight_requests_never_exceed_the_limit_across_two_instances(h: Harness) {
    let rule = reports(5);
    let seen = Arc::new(InFlight::default());
    let gate = Arc::new(Semaphore::new(0));
    let apps = [
        gated_app(&h, [rule.clone()], &seen, &gate).await,
        gated_app(&h, [rule.clone()], &seen, &gate).await,
    ];
    // 200 at once, the handlers held: exactly 5 get in, the others are told to come back.
    let (done, mut statuses) = mpsc::unbounded_channel();
    for i in 0..200 {
        let (addr, done) = (apps[i % 2], done.clone());
        tokio::spawn(async move { done.send(get(addr, "hot").await) });
    }
    for _ in 0..195 {
        assert_eq!(
            statuses.recv().await,
            Some(429),
            "admitted while the gate is closed"
        );
    }
    assert_eq!(seen.now.load(Ordering::SeqCst), 5, "in the handler");
    assert!(
        statuses.try_recv().is_err(),
        "the admitted ones wait at the gate"
    );
    // Their bodies end: the leases are released before the connections close, so 5 new
    // requests get in at once.
    gate.add_permits(5);
    for _ in 0..5 {
        assert_eq!(statuses.recv().await, Some(200));
    }
    let limiter = h.limiter().await;
    assert_eq!(free(&*limiter, &rule, "hot").await, 5);
    let again: Vec<_> = (0..5)
        .map(|i| tokio::spawn(get(apps[i % 2], "hot")))
        .collect();
    while seen.now.load(Ordering::SeqCst) < 5 {
        tokio::task::yield_now().await;
    }
    assert_eq!(get(apps[0], "hot").await, 429, "the sixth waits");

    gate.add_permits(5);
    for t in again {
        assert_eq!(t.await.expect("task"), 200);
    }
    // Churn: 200 requests, the handlers let through as they come; never more than 5 inside.
    gate.close();
    let tasks: Vec<_> = (0..200)
        .map(|i| tokio::spawn(get(apps[i % 2], "churn")))
        .collect();
    let (mut ok, mut limited) = (0, 0);
    for t in tasks {
        match t.await.expect("task") {
            200 => ok += 1,
            429 => limited += 1,
            other => panic!("status {other}"),
        }
    }
    assert_eq!(ok + limited, 200);
    assert!(ok >= 5, "{ok} admitted");
    assert_eq!(
        seen.max.load(Ordering::SeqCst),
        5,
        "the handler saw more than 5 at once"
    );
    assert_eq!(
        free(&*limiter, &rule, "churn").await,
        5,
        "every lease came back"
    );
}

async fn a_stream_holds_its_lease_until_it_ends_or_is_dropped(h: Harness) {
    let rule = reports(1);
    let (feeds, mut fed) = mpsc::unbounded_channel();
    let handler = service_fn(move |_: Request<hyper::body::Incoming>| {
        let feeds = feeds.clone();
        async move {
            let (mut tx, body) = Channel::<Bytes>::new(1);
            tx.send_data(Bytes::from_static(b"first\n"))
                .await
                .expect("open");
            feeds.send(tx).expect("test alive");
            Ok::<_, Infallible>(Response::new(body))
        }
    });
    let app = serve(layer(&h, [rule.clone()]).await.layer(handler)).await;
    let limiter = h.limiter().await;
    // A stream ends: its lease is held while it streams, released when it ends.
    let mut client = open(app, "k").await;
    read_until(&mut client, "first").await;
    let mut feed = fed.recv().await.expect("a stream");
    assert_eq!(get(app, "k").await, 429, "the stream holds the lease");
    feed.send_data(Bytes::from_static(b"second\n"))
        .await
        .expect("streaming");
    read_until(&mut client, "second").await;
    assert_eq!(get(app, "k").await, 429, "still streaming");
    drop(feed);
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.expect("the end");
    assert_eq!(
        free(&*limiter, &rule, "k").await,
        1,
        "released when the stream ended"
    );
    // A client that goes away mid-stream: the server drops the body, which frees the lease.
    let mut client = open(app, "k").await;
    read_until(&mut client, "first").await;
    let mut feed = fed.recv().await.expect("a stream");
    assert_eq!(get(app, "k").await, 429);
    drop(client);
    // The server notices when it writes to the closed connection.
    let gone = async {
        while feed.send_data(Bytes::from_static(b"more\n")).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), gone)
        .await
        .expect("the server dropped the body");
    until_free(&*limiter, &rule, "k", 1).await;
    let mut client = open(app, "k").await;
    read_until(&mut client, "first").await;
    drop(fed.recv().await.expect("admitted again"));
}

/// A request from `client` through `svc` (in process), its body kept unread.
async fn hold_for<S, B>(svc: S, client: &str) -> (u16, B)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
{
    let res = svc.oneshot(from(client)).await.expect("infallible");
    (res.status().as_u16(), res.into_body())
}

/// A request from client `k` through `svc` (in process), its body kept unread.
async fn hold<S, B>(svc: S) -> (u16, B)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
{
    hold_for(svc, "k").await
}

async fn leases_of_a_lost_instance_expire(h: Harness) {
    let rule = reports(2);
    let lost = layer(&h, [rule.clone()]).await.layer(empty_ok());
    // The instance takes both leases and dies without releasing them.
    for _ in 0..2 {
        let (status, body) = hold(lost.clone()).await;
        assert_eq!(status, 200);
        std::mem::forget(body);
    }
    drop(lost);
    let alive = layer(&h, [rule.clone()]).await.layer(empty_ok());
    assert_eq!(call(alive.clone(), from("k")).await.status, 429);
    h.wait(EXPIRY - Duration::from_secs(1)).await;
    assert_eq!(
        call(alive.clone(), from("k")).await.status,
        429,
        "not expired yet"
    );
    h.wait(Duration::from_secs(1)).await;
    assert_eq!(call(alive.clone(), from("k")).await.status, 200, "expired");
    assert_eq!(call(alive, from("k")).await.status, 200);
}

async fn a_body_never_polled_loses_its_lease_at_the_expiry(h: Harness) {
    let rule = reports(1);
    let svc = layer(&h, [rule.clone()]).await.layer(empty_ok());
    let (status, idle) = hold(svc.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(call(svc.clone(), from("k")).await.status, 429);
    h.wait(EXPIRY).await;
    // The idle body still exists, but its lease expired: another request takes the slot.
    let (status, active) = hold(svc.clone()).await;
    assert_eq!(status, 200);
    // Dropping the idle body releases only its own (expired) lease, not the new one.
    drop(idle);
    let limiter = h.limiter().await;
    tokio::task::yield_now().await;
    assert_eq!(call(svc.clone(), from("k")).await.status, 429);
    drop(active);
    until_free(&*limiter, &rule, "k", 1).await;
}

async fn leases_and_rate_rules_are_all_or_nothing(h: Harness) {
    let lease = reports(1);
    let rate = Rule::new("api", Quota::per_hour(3));
    let svc = layer(&h, [rate.clone(), lease.clone()])
        .await
        .layer(empty_ok());
    let limiter = h.limiter().await;
    // Denied by the lease rule: no rate quota consumed.
    let (status, held) = hold(svc.clone()).await;
    assert_eq!(status, 200);
    for _ in 0..3 {
        let reply = call(svc.clone(), from("k")).await;
        assert_eq!(reply.status, 429);
        assert_eq!(reply.header("retry-after"), "1");
        assert!(reply.body.contains("`report`"), "{}", reply.body);
    }
    let api = limiter
        .inspect(&rate, Key::from("k"))
        .await
        .expect("inspect");
    assert_eq!(api.state.remaining, 2, "only the admitted request counted");
    // The lease rule stays out of the IETF headers; the rate rule is in them.
    drop(held);
    until_free(&*limiter, &lease, "k", 1).await;
    let reply = call(svc.clone(), from("k")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("ratelimit-policy"), "\"api\";q=3;w=3600");
    assert!(
        reply.header("ratelimit").starts_with("\"api\";r=1;"),
        "{:?}",
        reply.headers
    );
    call(svc.clone(), from("k")).await;
    // Denied by the rate rule: no lease taken.
    let reply = call(svc.clone(), from("k")).await;
    assert_eq!(reply.status, 429);
    assert!(reply.body.contains("`api`"), "{}", reply.body);
    assert_eq!(free(&*limiter, &lease, "k").await, 1);
}

/// A lease rule keyed apart from the rate rule: on a Cluster the two are decided in two script
/// calls (one per hash tag), and the one that admitted is refunded when the other denies.
async fn rules_in_two_slots_are_all_or_nothing_too(h: Harness) {
    let lease = reports(1);
    let rate = Rule::new("api", Quota::per_hour(3));
    let build = |rules: [(Rule, bool); 2]| async {
        let mut builder = RateLimitLayer::builder(h.limiter().await);
        for (rule, global) in rules {
            builder = if global {
                builder.rule_with(rule, Global)
            } else {
                builder.rule_with(rule, by_client())
            };
        }
        builder.build().expect("valid").layer(empty_ok())
    };
    let rate_first = build([(rate.clone(), false), (lease.clone(), true)]).await;
    let lease_first = build([(lease.clone(), true), (rate.clone(), false)]).await;
    let limiter = h.limiter().await;
    // The key `Global` extracts.
    let global = Key::from("global");
    let remaining = |client: &'static str| {
        let (limiter, rate) = (Arc::clone(&limiter), rate.clone());
        async move {
            let seen = limiter.inspect(&rate, Key::from(client)).await;
            seen.expect("inspect").state.remaining
        }
    };
    let (status, held) = hold_for(lease_first.clone(), "a").await;
    assert_eq!(status, 200);
    // The rate rule admits `b`, the lease rule denies: `b`'s rate unit is given back.
    assert_eq!(call(rate_first.clone(), from("b")).await.status, 429);
    assert_eq!(remaining("b").await, 3);
    drop(held);
    until_free_key(&*limiter, &lease, global.clone(), 1).await;
    for _ in 0..3 {
        assert_eq!(call(rate_first.clone(), from("c")).await.status, 200);
    }
    // The lease rule admits `c`, the rate rule denies: the lease is given back.
    assert_eq!(call(lease_first.clone(), from("c")).await.status, 429);
    let seen = limiter.inspect(&lease, global).await.expect("inspect");
    assert_eq!(seen.state.remaining, 1);
}

async fn direct_calls_hold_the_lease_in_the_decision(h: Harness) {
    let limiter = h.limiter().await;
    let rule = reports(2);
    let a = limiter.check(&rule, Key::from("d")).await.expect("check");
    let b = limiter.check(&rule, Key::from("d")).await.expect("check");
    assert!(a.allowed && b.allowed);
    let c = limiter.check(&rule, Key::from("d")).await.expect("check");
    assert!(!c.allowed && c.lease().is_none());
    assert_eq!(c.retry_after, Duration::from_secs(1));
    // A clone shares the lease: released once, by either.
    let a2 = a.clone();
    drop(a);
    assert_eq!(free(&*limiter, &rule, "d").await, 0);
    a2.lease().expect("held").release().await.expect("release");
    assert!(a2.lease().expect("held").is_released());
    assert_eq!(free(&*limiter, &rule, "d").await, 1);
    // Renewal moves the expiry: the lease outlives its first one.
    let lease = b.lease().expect("held");
    h.wait(EXPIRY - Duration::from_secs(1)).await;
    assert!(lease.renew().await.expect("renew"));
    h.wait(Duration::from_secs(2)).await;
    assert_eq!(
        free(&*limiter, &rule, "d").await,
        1,
        "still held after the first expiry"
    );
    h.wait(EXPIRY).await;
    assert!(!lease.renew().await.expect("renew"), "expired: lost");
    assert_eq!(free(&*limiter, &rule, "d").await, 2);
    // A reset drops every lease of the key.
    let held = limiter.check(&rule, Key::from("d")).await.expect("check");
    assert_eq!(free(&*limiter, &rule, "d").await, 1);
    limiter.reset(&rule, Key::from("d")).await.expect("reset");
    assert_eq!(free(&*limiter, &rule, "d").await, 2);
    drop(held);
}

backend_suite!(
    in_flight_requests_never_exceed_the_limit_across_two_instances,
    a_stream_holds_its_lease_until_it_ends_or_is_dropped,
    leases_of_a_lost_instance_expire,
    a_body_never_polled_loses_its_lease_at_the_expiry,
    leases_and_rate_rules_are_all_or_nothing,
    rules_in_two_slots_are_all_or_nothing_too,
    direct_calls_hold_the_lease_in_the_decision,
);

#[test]
fn bad_concurrency_rules_are_refused_when_the_layer_is_built() {
    let build = |rule: Rule| {
        RateLimitLayer::builder(MemoryLimiter::new())
            .rule_with(rule, by_client())
            .build()
            .expect_err("refused")
    };
    let err = build(Rule::concurrency("report", 0));
    assert_eq!(err.kind(), ConfigErrorKind::Concurrency);
    assert_eq!(
        err.to_string(),
        "rule `report`: a concurrency rule needs a maximum in flight of at least 1"
    );
    assert_eq!(
        build(Rule::concurrency("report", 2).lease_expiry(Duration::ZERO)).to_string(),
        "rule `report`: a concurrency rule needs a lease expiry of at least 1 ms"
    );
    let cost = "rule `report`: a concurrency rule takes one lease per request: its cost is 1 (or 0, a probe), never a cost function";
    assert_eq!(
        build(Rule::concurrency("report", 2).with_cost(2)).to_string(),
        cost
    );
    assert_eq!(
        build(Rule::concurrency("report", 2).with_cost_from(|_| 1)).to_string(),
        cost
    );
}

/// With Redis down, [`FailurePolicy::Fallback`] keeps leasing in process: each replica's share
/// of the maximum in flight, released as on Redis when the body ends.
#[tokio::test]
async fn redis_down_falls_back_to_in_process_leases() {
    let mut h = Harness::redis().await;
    let limiter = RedisLimiter::new(h.backend().await.timeout(Duration::from_millis(300)));
    let svc = RateLimitLayer::builder(limiter)
        .rule_with(reports(4), by_client())
        .failure_policy(FailurePolicy::fallback(2).expect("2 replicas"))
        .build()
        .expect("valid")
        .layer(empty_ok());
    h.kill_redis();
    // The share: 4 ÷ 2 in flight.
    let (first, a) = hold(svc.clone()).await;
    let (second, b) = hold(svc.clone()).await;
    assert_eq!((first, second), (200, 200));
    assert_eq!(call(svc.clone(), from("k")).await.status, 429);
    drop(a);
    let (third, _c) = hold(svc.clone()).await;
    assert_eq!(third, 200, "released in process");
    assert_eq!(call(svc.clone(), from("k")).await.status, 429);
    drop(b);
}
