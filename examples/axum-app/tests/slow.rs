//! End to end: `GET /slow/{n}` is cached by `CacheLayer` on a real `redis-server`, over real
//! HTTP: MISS (computed, ~200 ms), HIT (from Redis, fast), `POST /slow/invalidate`, MISS again.

use std::time::{Duration, Instant};

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::request;

async fn slow(app: &RunningApp, n: u64) -> (String, String, Duration) {
    let started = Instant::now();
    let res = request(app.addr, "GET", &format!("/slow/{n}"), &[], b"")
        .await
        .expect("request");
    assert_eq!(res.status, 200);
    let took = started.elapsed();
    let body = String::from_utf8(res.body.clone()).expect("utf-8");
    (res.header("x-cache").unwrap_or("").to_owned(), body, took)
}

#[tokio::test]
async fn miss_hit_invalidate_miss() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let app = spawn(
        env!("CARGO_BIN_EXE_axum-app"),
        &[("REDIS_URL", url.as_str()), ("REDIS_TIMEOUT_MS", "5000")],
    )
    .await;

    let (outcome, body, took) = slow(&app, 7).await;
    assert_eq!(outcome, "MISS");
    assert_eq!(body, r#"{"n":7,"square":49}"#);
    assert!(took >= Duration::from_millis(200), "computed: {took:?}");
    let (outcome, hit, _) = slow(&app, 7).await;
    assert_eq!((outcome.as_str(), hit.as_str()), ("HIT", body.as_str()));
    assert_eq!(slow(&app, 8).await.0, "MISS", "another n, another entry");

    let refused = request(app.addr, "POST", "/slow/invalidate", &[], b"")
        .await
        .expect("request");
    assert_eq!(refused.status, 415, "a state-changing route wants JSON");
    let json: &[(&str, &[u8])] = &[("content-type", b"application/json")];
    let done = request(app.addr, "POST", "/slow/invalidate", json, b"{}")
        .await
        .expect("request");
    assert_eq!(done.status, 204);

    assert_eq!(slow(&app, 7).await.0, "MISS");
    assert_eq!(slow(&app, 7).await.0, "HIT");
    // Counted as the header says: 3 MISS, 2 HIT.
    let metrics = request(app.addr, "GET", "/metrics", &[], b"")
        .await
        .expect("request");
    let text = String::from_utf8(metrics.body).expect("utf-8");
    for line in [
        r#"redis_guard_cache_responses_total{result="miss"} 3"#,
        r#"redis_guard_cache_responses_total{result="hit"} 2"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    // The entry is in Redis, with a TTL of at most 30 s plus jitter.
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let keys: Vec<String> = redis_guard_testkit::inspect::scan_keys(&mut conn)
        .await
        .expect("SCAN")
        .into_iter()
        .filter(|k| k.starts_with("rg:c:"))
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("PTTL");
        assert!(ttl > 0 && ttl <= 33_000, "{key}: {ttl}");
    }
}
