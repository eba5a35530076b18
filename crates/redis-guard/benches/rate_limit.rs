//! Micro-benchmarks of the rate limiter's pure-Rust paths, through the public API only:
//!
//! - `key`: the client key from the peer address, and from `X-Forwarded-For` / `Forwarded`
//!   behind trusted proxies: work done on every request before a limiter is asked;
//! - `layer`: a whole `RateLimitLayer` on a `MemoryLimiter` around a trivial service, for an
//!   admitted request (decision and `RateLimit` headers) and a denied one (the `429` with
//!   `Retry-After` and its problem document), next to the trivial service alone;
//! - `memory_limiter`: decisions from two OS threads at once, on distinct keys and on one shared
//!   key, next to one thread: what the limiter's shared table costs under contention.
//!
//! The end-to-end figures (HTTP, Redis) are the harness's, in `docs/benchmarks.md`.

mod common;

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Barrier;
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use http::header::RETRY_AFTER;
use http::{Request, Response, StatusCode};
use redis_guard::rate_limit::{
    ClientIp, Decision, ForwardedHeader, Key, KeyExtractor, MemoryLimiter, PeerAddr, Quota,
    RateLimitLayer, Rule,
};
use tower::Layer;

/// The proxies of a typical deployment: the private ranges.
const TRUSTED: [&str; 4] = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fd00::/8"];

/// A client that connects directly.
const CLIENT: &str = "203.0.113.7:51234";

/// A quota no benchmark reaches (1 per µs, with a burst of over an hour of them), so that every
/// decision takes the admitting path.
fn unlimited() -> Quota {
    Quota::per_second(1_000_000).burst(u32::MAX)
}

/// A request from the TCP peer `peer`.
fn from_peer(peer: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut req = common::request(headers);
    req.extensions_mut()
        .insert(PeerAddr(peer.parse().expect("a socket address")));
    req
}

fn key(c: &mut Criterion) {
    let proxied = ClientIp::trusted_proxies(TRUSTED).expect("valid CIDRs");
    // Behind the proxies, each chain is walked from the right over two trusted hops to the
    // client, 203.0.113.7; the left-most entry is whatever the client sent.
    let xff = "198.51.100.23, 203.0.113.7, 172.16.4.2, 10.1.2.3";
    let forwarded = "for=198.51.100.23, for=203.0.113.7;proto=https, \
                     for=\"[fd00::17]:8080\";by=10.1.2.3, for=10.1.2.3;host=example.com";
    let cases = [
        ("peer_ipv4", ClientIp::peer(), CLIENT, vec![], "203.0.113.7"),
        (
            "peer_ipv6",
            ClientIp::peer(),
            "[2001:db8:85a3:8d3:1319:8a2e:370:7348]:443",
            vec![],
            "2001:db8:85a3:8d3::/64",
        ),
        (
            "x_forwarded_for_4_hops",
            proxied.clone(),
            "10.0.0.1:40000",
            vec![("x-forwarded-for", xff)],
            "203.0.113.7",
        ),
        (
            "forwarded_4_hops",
            proxied.forwarded_header(ForwardedHeader::Forwarded),
            "10.0.0.1:40000",
            vec![("forwarded", forwarded)],
            "203.0.113.7",
        ),
    ];
    let mut group = c.benchmark_group("key");
    for (name, extractor, peer, headers, client) in cases {
        let (parts, ()) = from_peer(peer, &headers).into_parts();
        assert_eq!(extractor.extract(&parts), Ok(Key::from(client)), "{name}");
        group.bench_function(name, |b| b.iter(|| extractor.extract(black_box(&parts))));
    }
    group.finish();
}

fn layer(c: &mut Criterion) {
    let rt = common::runtime();
    let inner = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    });
    let limited = |quota| {
        RateLimitLayer::new(MemoryLimiter::new(), "api", ClientIp::peer(), quota)
            .expect("a valid layer")
            .layer(inner)
    };
    let admit = limited(unlimited());
    let deny = limited(Quota::per_hour(1));
    let req = || from_peer(CLIENT, &[]);
    rt.block_on(async {
        let admitted = common::call(admit.clone(), req()).await;
        assert_eq!(admitted.status(), StatusCode::OK);
        assert!(admitted.headers().contains_key("ratelimit"));
        // The hour's one request; every later one is denied.
        assert_eq!(
            common::call(deny.clone(), req()).await.status(),
            StatusCode::OK
        );
        let denied = common::call(deny.clone(), req()).await;
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(denied.headers().contains_key(RETRY_AFTER));
    });
    let mut group = c.benchmark_group("layer");
    group.bench_function("bare", |b| common::bench_calls(b, &rt, &inner, req));
    group.bench_function("admitted", |b| common::bench_calls(b, &rt, &admit, req));
    group.bench_function("denied_429", |b| common::bench_calls(b, &rt, &deny, req));
    group.finish();
}

/// One decision: a `MemoryLimiter` decides without waiting, so its future is ready when first
/// polled and no runtime is needed on the threads.
fn decide(limiter: &MemoryLimiter, rule: &Rule, key: &Key) -> Decision {
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::pin!(limiter.check(rule, key.clone())).poll(&mut cx) {
        Poll::Ready(decision) => decision.expect("a decision"),
        Poll::Pending => panic!("a MemoryLimiter decision waited"),
    }
}

/// Wall time for `n` decisions split evenly over one OS thread per entry of `keys`, each thread
/// deciding for its key: from the moment all threads are released together until the last one
/// is done (thread start-up and joining are not counted).
fn decisions(limiter: &MemoryLimiter, rule: &Rule, keys: &[Key], n: u64) -> Duration {
    let threads = u64::try_from(keys.len()).expect("a few threads");
    let start = Barrier::new(keys.len());
    let spans: Vec<(Instant, Instant)> = thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .zip(keys)
            .map(|(i, key)| {
                let share = n / threads + u64::from(i < n % threads);
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    for _ in 0..share {
                        black_box(decide(limiter, rule, key));
                    }
                    (began, Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker"))
            .collect()
    });
    let began = spans.iter().map(|s| s.0).min().expect("one thread");
    let ended = spans.iter().map(|s| s.1).max().expect("one thread");
    ended - began
}

fn memory_limiter(c: &mut Criterion) {
    let limiter = MemoryLimiter::new();
    let rule = Rule::new("api", unlimited());
    let cases = [
        ("1_thread", vec![Key::from("client-a")]),
        (
            "2_threads_distinct_keys",
            vec![Key::from("client-a"), Key::from("client-b")],
        ),
        (
            "2_threads_shared_key",
            vec![Key::from("client-a"), Key::from("client-a")],
        ),
    ];
    let mut group = c.benchmark_group("memory_limiter");
    for (name, keys) in cases {
        assert!(decide(&limiter, &rule, &keys[0]).allowed, "{name}");
        group.bench_function(name, |b| {
            b.iter_custom(|n| decisions(&limiter, &rule, &keys, n));
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = key, layer, memory_limiter
}
criterion_main!(benches);
