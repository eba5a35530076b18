//! Waiting instead of `429` ([`Rule::throttle`]) on every backend, for GCRA
//! and the token bucket: a request over the limit by a short wait is admitted at its reserved
//! time, over real sockets; the layer bounds its waiters; a waiter whose client goes away gives
//! its slot back; on Redis, a throttled decision is still one script call.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use redis_guard::rate_limit::{
    Algorithm, Decision, Global, Key, Quota, RateLimit, RateLimitLayer, Rejection, Rule,
};
use redis_guard_tests::{Harness, backend_suite, by_client, call, from, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::{Layer, service_fn};

const ALGORITHMS: [Algorithm; 2] = [Algorithm::Gcra, Algorithm::TokenBucket];

/// A rule of `quota` with burst 1 (each request after the first waits one emission interval
/// more than the one before), throttled up to `max_wait`.
fn rule(name: &str, algorithm: &Algorithm, per: Quota, max_wait: Duration) -> Rule {
    Rule::new(name, per.burst(1))
        .with_algorithm(algorithm.clone())
        .throttle(max_wait)
}

/// The layer of `rule` on a new limiter instance of `h`, keyed by `x-client`, at most
/// `max_waiters` waiting; denials carry their exact `retry_after` in `x-retry-ms`.
async fn layer(h: &Harness, rule: Rule, max_waiters: usize) -> RateLimitLayer {
    RateLimitLayer::builder(h.limiter().await)
        .rule_with(rule, by_client())
        .max_waiters(max_waiters)
        .extensions(true)
        .response(|rejection| {
            let mut res = rejection.response();
            if let Rejection::Limited(d) = rejection {
                res.headers_mut().insert(
                    "x-retry-ms",
                    u64::try_from(d.retry_after.as_millis())
                        .unwrap_or(u64::MAX)
                        .into(),
                );
            }
            res
        })
        .build()
        .expect("valid")
}

/// An inner service that answers `200` with the decision's wait in `x-wait-ms`.
fn echo_wait() -> impl tower::Service<
    Request<hyper::body::Incoming>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    service_fn(|req: Request<hyper::body::Incoming>| async move {
        let wait = req.extensions().get::<Decision>().map_or(u64::MAX, |d| {
            u64::try_from(d.wait.as_millis()).unwrap_or(u64::MAX)
        });
        let mut res = Response::new(Full::default());
        res.headers_mut().insert("x-wait-ms", wait.into());
        Ok::<_, Infallible>(res)
    })
}

/// `GET /` from `client` over a new connection to `addr`: status, `x-wait-ms` (0 when absent),
/// and when it answered.
async fn get(addr: SocketAddr, client: &str) -> (u16, u64, Instant) {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let head =
        format!("GET / HTTP/1.1\r\nhost: t\r\nx-client: {client}\r\nconnection: close\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.expect("read");
    let at = Instant::now();
    let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok());
    let wait = text
        .lines()
        .find_map(|l| l.strip_prefix("x-wait-ms: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (
        status.unwrap_or_else(|| panic!("not HTTP: {text:?}")),
        wait,
        at,
    )
}

/// Requests over the limit by less than the max wait all answer `200`, each at its reserved
/// time (never before, within scheduling noise after); one that would wait longer is `429` at
/// once; each decision is one script call on Redis; every key has a TTL.
async fn throttled_requests_are_admitted_at_their_reserved_time(h: Harness) {
    const PERIOD: Duration = Duration::from_millis(100);
    // Scheduling noise on a loaded 2-core machine (other suites start clusters meanwhile);
    // never early is exact.
    let tolerance = Duration::from_millis(250);
    let evalsha = if h.is_redis() {
        h.calls("evalsha").await
    } else {
        0
    };
    for algorithm in &ALGORITHMS {
        let rule = rule(
            "batch",
            algorithm,
            Quota::per_second(10),
            Duration::from_millis(250),
        );
        let addr = serve(layer(&h, rule, 16).await.layer(echo_wait())).await;
        let client = format!("c-{algorithm:?}");
        // Four at once: three fit within 250 ms (at 0, 100 and 200 ms); the fourth would wait
        // 300 ms, past the 250 ms allowed: denied at once, consuming nothing.
        let start = Instant::now();
        let answers = futures_util::future::join_all((0..4).map(|_| get(addr, &client))).await;
        let (admitted, denied): (Vec<_>, Vec<_>) = answers
            .into_iter()
            .map(|(s, w, at)| (s, w, at - start))
            .partition(|a| a.0 == 200);
        assert_eq!(denied.len(), 1, "{algorithm:?} {admitted:?} {denied:?}");
        assert_eq!(denied[0].0, 429, "{algorithm:?} {denied:?}");
        let mut answers = admitted;
        answers.sort_by_key(|a| a.1);
        assert_eq!(answers.len(), 3);
        // At once: before the last admitted one, which waited 200 ms.
        assert!(
            denied[0].2 < answers[2].2 && denied[0].2 < tolerance,
            "{denied:?} {answers:?}"
        );
        for (i, (_, wait_ms, took)) in answers.iter().enumerate() {
            let reserved = PERIOD * u32::try_from(i).unwrap();
            // The wait is Redis TIME's (or the frozen memory clock's): exact on memory, up to the
            // few ms the requests were decided apart on Redis.
            let wait = Duration::from_millis(*wait_ms);
            if h.is_redis() {
                assert!(
                    wait <= reserved && wait + Duration::from_millis(50) >= reserved,
                    "{algorithm:?} {answers:?}"
                );
            } else {
                assert_eq!(wait, reserved, "{algorithm:?} {answers:?}");
            }
            // Never before its slot; after it by scheduling noise only.
            assert!(*took >= wait, "{algorithm:?} {answers:?}");
            assert!(*took <= reserved + tolerance, "{algorithm:?} {answers:?}");
        }
    }
    if h.is_redis() {
        // 4 decisions per algorithm, one script call each (or fewer: coalesced), no refund.
        let calls = h.calls("evalsha").await - evalsha;
        assert!((1..=8).contains(&calls), "{calls} script calls");
        // One by one, a throttled decision (its slot reserved, its wait read from TIME) is
        // exactly one script call, as any decision.
        const MINUTE: Duration = Duration::from_secs(60);
        let rule = rule("one", &Algorithm::Gcra, Quota::per_minute(1), 5 * MINUTE);
        let limiter = h.limiter().await;
        let before = h.calls("evalsha").await;
        let first = limiter.check(&rule, Key::from("one")).await.expect("check");
        assert!(first.allowed && first.wait.is_zero());
        for i in 1..3 {
            let d = limiter.check(&rule, Key::from("one")).await.expect("check");
            assert!(d.allowed);
            h.assert_wait(d.wait, i * MINUTE);
        }
        assert_eq!(h.calls("evalsha").await - before, 3);
        // The GCRA key may have expired already: its TAT has passed.
        h.assert_every_key_has_a_ttl(1).await;
    }
}

/// The rule's wait for the next request of `client`, as an operator's inspect reports it.
async fn next_wait(h: &Harness, rule: &Rule, client: &str) -> Duration {
    let seen = h
        .limiter()
        .await
        .inspect(rule, Key::from(client))
        .await
        .expect("inspect");
    assert!(!seen.state.allowed);
    seen.state.retry_after
}

/// Waits (bounded) until `client`'s next request under `rule` would wait as `fits` says: on
/// Redis a slot is given back by a task the drop spawned, and a spawned waiter decides when it
/// is scheduled.
async fn until(h: &Harness, rule: &Rule, client: &str, fits: impl Fn(Duration) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let wait = next_wait(h, rule, client).await;
        if fits(wait) {
            return;
        }
        assert!(Instant::now() < deadline, "{wait:?} never fit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (bounded) until `n` requests wait for their slot in `svc`: the limiter counts a
/// waiter a moment before its answer reaches it and it takes its place among the waiters.
async fn waiting<S>(svc: &RateLimit<S>, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while svc.waiting() != n {
        assert!(
            Instant::now() < deadline,
            "{} wait, never {n}",
            svc.waiting()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// At most `max_waiters` wait: the next throttled request is `429` at once, offered wait in
/// hand, and gives its slot back; a waiter whose future is dropped (its client went away) gives
/// its slot back too, and its place among the waiters. Minute-long slots, never waited for:
/// the slots before and after each give-back are a minute apart.
async fn waiters_are_bounded_and_give_their_slot_back(h: Harness) {
    const MINUTE: Duration = Duration::from_secs(60);
    for algorithm in &ALGORITHMS {
        let rule = rule("bulk", algorithm, Quota::per_minute(1), 5 * MINUTE);
        let svc =
            layer(&h, rule.clone(), 1)
                .await
                .layer(service_fn(|_: Request<Full<Bytes>>| async {
                    Ok::<_, Infallible>(Response::new(Full::default()))
                }));
        let client = format!("w-{algorithm:?}");
        assert_eq!(call(svc.clone(), from(&client)).await.status, 200);
        // The second waits a minute: the one place among the waiters.
        let waiter = tokio::spawn(call(svc.clone(), from(&client)));
        until(&h, &rule, &client, |w| w > MINUTE + MINUTE / 2).await;
        waiting(&svc, 1).await;
        // The third is offered two minutes, finds no place: 429 at once, its slot given back.
        let asked = Instant::now();
        let third = tokio::time::timeout(Duration::from_secs(5), call(svc.clone(), from(&client)))
            .await
            .expect("429 at once");
        assert_eq!(third.status, 429, "{algorithm:?}");
        assert!(asked.elapsed() < Duration::from_secs(1));
        let offered = Duration::from_millis(third.header("x-retry-ms").parse().unwrap());
        h.assert_wait(offered, 2 * MINUTE);
        until(&h, &rule, &client, |w| w <= 2 * MINUTE).await;
        assert!(next_wait(&h, &rule, &client).await > MINUTE + MINUTE / 2);
        // The waiter's client goes away: its slot comes back (the next waits a minute, not
        // two), and its place: the next request waits rather than being refused.
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        until(&h, &rule, &client, |w| w <= MINUTE).await;
        h.assert_wait(next_wait(&h, &rule, &client).await, MINUTE);
        let again =
            tokio::time::timeout(Duration::from_millis(200), call(svc.clone(), from(&client)))
                .await;
        assert!(again.is_err(), "admitted after a wait: still waiting");
        until(&h, &rule, &client, |w| w <= MINUTE).await;
    }
    every_rule_of_a_cancelled_waiter_is_given_back(&h).await;
    if h.is_redis() {
        h.assert_every_key_has_a_ttl(3).await;
    }
}

/// A waiter's other rules counted it at once (all or nothing); when it goes away, each gives it
/// back: the throttled per-client rule and a plain global one (another hash slot on a Cluster,
/// so another script call).
async fn every_rule_of_a_cancelled_waiter_is_given_back(h: &Harness) {
    const MINUTE: Duration = Duration::from_secs(60);
    let bulk = rule("both", &Algorithm::Gcra, Quota::per_minute(1), 5 * MINUTE);
    let daily = Rule::new("daily", Quota::per_day(100));
    let svc = RateLimitLayer::builder(h.limiter().await)
        .rule_with(bulk.clone(), by_client())
        .rule_with(daily.clone(), Global)
        .build()
        .expect("valid")
        .layer(service_fn(|_: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::default()))
        }));
    let left = || async {
        let seen = h.limiter().await.inspect(&daily, Key::from("global")).await;
        seen.expect("inspect").state.remaining
    };
    assert_eq!(call(svc.clone(), from("both")).await.status, 200);
    assert_eq!(left().await, 99);
    let waiter = tokio::spawn(call(svc.clone(), from("both")));
    until(h, &bulk, "both", |w| w > MINUTE + MINUTE / 2).await;
    waiting(&svc, 1).await;
    assert_eq!(left().await, 98, "counted while it waits");
    waiter.abort();
    until(h, &bulk, "both", |w| w <= MINUTE).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while left().await != 99 {
        assert!(Instant::now() < deadline, "the daily unit never came back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

backend_suite!(
    throttled_requests_are_admitted_at_their_reserved_time,
    waiters_are_bounded_and_give_their_slot_back,
);
