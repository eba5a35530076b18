//! End to end: `API_THROTTLE_MAX_WAIT` (waiting instead of `429`) on the `axum-app` binary over real
//! HTTP, against a real `redis-server`: requests over `API_LIMIT` by a short wait are held
//! until their slot and answer `200`; one that would wait longer gets `429` at once.

use std::time::{Duration, Instant};

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::spawn;
use redis_guard_testkit::http::request;

/// `n` `GET /api/hello` sent at once from one client: per request its status and how long
/// after the first was sent it answered, in the order they answered.
async fn burst(addr: std::net::SocketAddr, n: usize) -> Vec<(u16, Duration)> {
    let start = Instant::now();
    let calls = (0..n).map(|_| async move {
        let r = request(addr, "GET", "/api/hello", &[], b"")
            .await
            .expect("request");
        // Admitted after a wait: the usual headers, nothing left.
        if r.status == 200 {
            assert!(r.header("ratelimit").is_some(), "no RateLimit header");
        }
        (r.status, start.elapsed())
    });
    let tasks: Vec<_> = calls.map(tokio::spawn).collect();
    let mut answers = Vec::with_capacity(n);
    for task in tasks {
        answers.push(task.await.expect("request task"));
    }
    answers.sort_by_key(|a| a.1);
    answers
}

/// With `API_LIMIT=5/second` and `API_THROTTLE_MAX_WAIT=2s`: 10 requests at once all answer
/// `200`, the last about 1 s later (5 at once, then one every 200 ms); of 15 more sent at once
/// right after, those that would wait past 2 s answer `429` at once.
#[tokio::test]
async fn requests_over_the_limit_wait_for_their_slot() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let env = [
        ("API_LIMIT", "5/second"),
        ("API_THROTTLE_MAX_WAIT", "2s"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_TIMEOUT_MS", "5000"),
    ];
    let app = spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await;
    let first = burst(app.addr, 10).await;
    println!("API_LIMIT=5/second API_THROTTLE_MAX_WAIT=2s, 10 at once: {first:?}");
    assert!(first.iter().all(|a| a.0 == 200), "{first:?}");
    let last = first[9].1;
    assert!(
        last >= Duration::from_millis(950) && last < Duration::from_millis(1600),
        "the last answered after {last:?}"
    );
    // The fifth-from-last slot is 200 ms before the last: never earlier.
    assert!(first[5].1 >= Duration::from_millis(190), "{first:?}");
    let second = burst(app.addr, 15).await;
    println!("then 15 at once: {second:?}");
    let denied: Vec<_> = second.iter().filter(|a| a.0 == 429).collect();
    assert!(denied.len() >= 3, "{second:?}");
    assert!(
        denied.iter().all(|a| a.1 < Duration::from_millis(500)),
        "a 429 waited: {second:?}"
    );
    assert!(
        second
            .iter()
            .filter(|a| a.0 == 200)
            .all(|a| a.1 <= Duration::from_millis(2600)),
        "{second:?}"
    );
}
