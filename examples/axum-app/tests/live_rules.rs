//! End to end: `PUT` / `DELETE /admin/rules/{rule}` (live limits) on two `axum-app` processes
//! sharing one real `redis-server`, over real HTTP: a change made on one instance holds on both
//! from their next request; bad requests are refused with problem documents.

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};

const TOKEN: &str = "live-rules-admin-token-0123456789abcdef";

async fn start(url: &str) -> RunningApp {
    spawn(
        env!("CARGO_BIN_EXE_axum-app"),
        &[
            ("REDIS_URL", url),
            ("REDIS_TIMEOUT_MS", "5000"),
            ("ADMIN_TOKEN", TOKEN),
            ("API_LIMIT", "60/minute"),
            // The test names its clients by X-Forwarded-For.
            ("TRUSTED_PROXIES", "127.0.0.1/32"),
        ],
    )
    .await
}

/// `n` calls of `GET /api/hello` from client address `ip`: their statuses.
async fn hello(app: &RunningApp, ip: &str, n: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..n {
        let headers: &[(&str, &[u8])] = &[("X-Forwarded-For", ip.as_bytes())];
        let r = request(app.addr, "GET", "/api/hello", headers, b"")
            .await
            .expect("request");
        statuses.push(r.status);
    }
    statuses
}

async fn admin(
    app: &RunningApp,
    method: &str,
    path: &str,
    token: &str,
    body: &[u8],
) -> RawResponse {
    let bearer = format!("Bearer {token}");
    let headers: &[(&str, &[u8])] = &[
        ("Authorization", bearer.as_bytes()),
        ("Content-Type", b"application/json"),
    ];
    request(app.addr, method, path, headers, body)
        .await
        .expect("request")
}

#[tokio::test]
async fn a_live_quota_holds_on_every_instance_from_the_next_request() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let (a, b) = (start(&url).await, start(&url).await);
    // Both instances have decided `api` before the change.
    assert_eq!(hello(&a, "192.0.2.1", 1).await, [200]);
    assert_eq!(hello(&b, "192.0.2.1", 1).await, [200]);
    let put = admin(
        &a,
        "PUT",
        "/admin/rules/api",
        TOKEN,
        br#"{"quota": "2/minute"}"#,
    )
    .await;
    assert_eq!(put.status, 204, "{}", put.text());
    assert_eq!(
        hello(&b, "192.0.2.2", 3).await,
        [200, 200, 429],
        "instance b"
    );
    assert_eq!(
        hello(&a, "192.0.2.3", 3).await,
        [200, 200, 429],
        "instance a"
    );
    let del = admin(&b, "DELETE", "/admin/rules/api", TOKEN, b"").await;
    assert_eq!(del.status, 204, "{}", del.text());
    // API_LIMIT again: 58 of 60 left for the client that used 2.
    assert_eq!(hello(&a, "192.0.2.2", 1).await, [200]);
    assert_eq!(hello(&b, "192.0.2.3", 1).await, [200]);
}

#[tokio::test]
async fn bad_live_rule_requests_are_refused() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start(&server.url()).await;
    let json = |r: &RawResponse| r.header("content-type") == Some("application/problem+json");
    for (path, token, body, status) in [
        (
            "/admin/rules/api",
            "wrong-token-wrong-token-wrong-token-x",
            &br#"{"quota": "2/minute"}"#[..],
            401,
        ),
        (
            "/admin/rules/calls",
            TOKEN,
            br#"{"quota": "2/minute"}"#,
            404,
        ),
        ("/admin/rules/nope", TOKEN, br#"{"quota": "2/minute"}"#, 404),
        ("/admin/rules/api", TOKEN, b"2/minute", 400),
        ("/admin/rules/api", TOKEN, br#"{"quota": 2}"#, 400),
        ("/admin/rules/api", TOKEN, br#"{"quota": "lots"}"#, 422),
        ("/admin/rules/api", TOKEN, br#"{"quota": "0/minute"}"#, 422),
    ] {
        let r = admin(&app, "PUT", path, token, body).await;
        assert_eq!(
            r.status,
            status,
            "{path} {}: {}",
            String::from_utf8_lossy(body),
            r.text()
        );
        assert!(json(&r), "{path}: {:?}", r.header("content-type"));
    }
    // Nothing changed: API_LIMIT still holds.
    assert_eq!(hello(&app, "192.0.2.9", 1).await, [200]);
}
