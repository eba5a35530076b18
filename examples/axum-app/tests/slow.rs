//! End to end: `GET /slow/{n}` is cached by `CacheLayer` on a real `redis-server`, over real
//! HTTP: MISS (computed, ~200 ms), HIT (from Redis, fast), `POST /slow/invalidate` (admin
//! token), MISS again; `SLOW_LIMIT` per client IP; a path number past `u32::MAX` is a `400`.

use std::time::{Duration, Instant};

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::request;

const TOKEN: &str = "slow-test-admin-token-0123456789abcdef";

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
        &[
            ("REDIS_URL", url.as_str()),
            ("REDIS_TIMEOUT_MS", "5000"),
            ("ADMIN_TOKEN", TOKEN),
        ],
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
    let refused = request(app.addr, "POST", "/slow/invalidate", json, b"{}")
        .await
        .expect("request");
    assert_eq!(
        refused.status, 401,
        "the invalidation needs the admin token"
    );
    let bearer = format!("Bearer {TOKEN}");
    let admin: &[(&str, &[u8])] = &[
        ("content-type", b"application/json"),
        ("authorization", bearer.as_bytes()),
    ];
    let done = request(app.addr, "POST", "/slow/invalidate", admin, b"{}")
        .await
        .expect("request");
    assert_eq!(done.status, 204);

    assert_eq!(slow(&app, 7).await.0, "MISS");
    assert_eq!(slow(&app, 7).await.0, "HIT");
    // Counted as the header says: 3 MISS, 2 HIT.
    let metrics = request(app.addr, "GET", "/metrics", admin, b"")
        .await
        .expect("request");
    let text = String::from_utf8(metrics.body).expect("utf-8");
    for line in [
        r#"redis_guard_cache_responses_total{result="miss"} 3"#,
        r#"redis_guard_cache_responses_total{result="hit"} 2"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    // The entry is in Redis, with a TTL of 30 s plus jitter plus the longer of the
    // stale-if-error grace and the revalidation window (it has an ETag).
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let keys: Vec<String> = redis_guard_testkit::inspect::scan_keys(&mut conn)
        .await
        .expect("SCAN")
        .into_iter()
        .filter(|k| k.starts_with("rg:cr:"))
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("PTTL");
        // 30 s fresh less jitter, then kept 1 hour to be revalidated (the default
        // `revalidate`, longer than the 5 min of `CACHE_STALE_IF_ERROR`).
        assert!(ttl > 3_600_000 && ttl <= 3_630_000, "{key}: {ttl}");
    }
}

/// `SLOW_LIMIT` per client IP, cache hits included: varying `n` or the query (a new cache entry
/// each time) does not run the handler past it. Without `ADMIN_TOKEN` the invalidation is a 404.
#[tokio::test]
async fn the_slow_route_is_limited_per_client_ip() {
    let app = spawn(
        env!("CARGO_BIN_EXE_axum-app"),
        &[("SLOW_LIMIT", "3/minute")],
    )
    .await;
    let mut statuses = Vec::new();
    for path in [
        "/slow/1",
        "/slow/2?a=1",
        "/slow/2?a=2",
        "/slow/3",
        "/slow/1",
    ] {
        let r = request(app.addr, "GET", path, &[], b"")
            .await
            .expect("request");
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let json: &[(&str, &[u8])] = &[("content-type", b"application/json")];
    let r = request(app.addr, "POST", "/slow/invalidate", json, b"{}")
        .await
        .expect("request");
    assert_eq!(r.status, 404);
}

/// The square of a `u64` past `u32::MAX` does not fit a JSON number: it panicked the handler
/// and dropped the connection. Now the path number is bounded: a `400`.
#[tokio::test]
async fn a_path_number_past_u32_max_is_a_400() {
    let app = spawn(env!("CARGO_BIN_EXE_axum-app"), &[]).await;
    let r = request(app.addr, "GET", "/slow/4294967296", &[], b"")
        .await
        .expect("a response, not a dropped connection");
    assert_eq!(r.status, 400, "{}", r.text());
    let r = request(app.addr, "GET", "/slow/4294967295", &[], b"")
        .await
        .expect("request");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        r#"{"n":4294967295,"square":18446744065119617025}"#
    );
}
