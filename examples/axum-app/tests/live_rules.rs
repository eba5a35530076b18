//! End to end: `PUT` / `DELETE /admin/rules/{rule}` (live limits) on two `axum-app` processes
//! sharing one real `redis-server`, over real HTTP: a quota changed on one instance holds on both
//! from their next request, a mode on the other from its second request; bad requests are refused with
//! problem documents and change nothing.

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

/// Calls `GET /api/hello` from `ip` until it is answered `status`, at most `tries` times: once
/// on the instance that made the change, twice on another (its first decision after the change
/// reads the rule's record, the next one follows it).
async fn until_status(app: &RunningApp, ip: &str, status: u16, tries: usize) {
    let got = hello(app, ip, tries).await;
    assert!(
        got.contains(&status),
        "{got:?}: never {status} in {tries} requests"
    );
}

#[tokio::test]
async fn a_live_mode_reaches_every_instance() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let (a, b) = (start(&url).await, start(&url).await);
    let put = |app, body: &'static [u8]| async move {
        let r = admin(app, "PUT", "/admin/rules/api", TOKEN, body).await;
        assert_eq!(r.status, 204, "{}", r.text());
    };
    put(&a, br#"{"quota": "2/minute"}"#).await;
    assert_eq!(hello(&b, "192.0.2.4", 3).await, [200, 200, 429]);
    // Shadowed on a: a client over the limit passes on a at once, on b from its second request.
    put(&a, br#"{"mode": "shadow"}"#).await;
    until_status(&a, "192.0.2.4", 200, 1).await;
    until_status(&b, "192.0.2.4", 200, 2).await;
    // Soft, with a new quota, in one request on b: admitted, and told so.
    put(&b, br#"{"quota": "1/minute", "mode": "soft"}"#).await;
    let headers: &[(&str, &[u8])] = &[("X-Forwarded-For", b"192.0.2.4")];
    let r = request(b.addr, "GET", "/api/hello", headers, b"")
        .await
        .expect("request");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ratelimit-exceeded"), Some("\"api\""), "{r:?}");
    // DELETE clears both: enforced again, with API_LIMIT.
    let del = admin(&a, "DELETE", "/admin/rules/api", TOKEN, b"").await;
    assert_eq!(del.status, 204, "{}", del.text());
    let r = request(a.addr, "GET", "/api/hello", headers, b"")
        .await
        .expect("request");
    assert_eq!(r.status, 200, "60 a minute again");
    assert_eq!(r.header("ratelimit-exceeded"), None);
    assert_eq!(r.header("ratelimit-policy"), Some("\"api\";q=60;w=60"));
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
        ("/admin/rules/api", TOKEN, br#"{}"#, 400),
        ("/admin/rules/api", TOKEN, br#"{"mdoe": "shadow"}"#, 400),
        ("/admin/rules/api", TOKEN, br#"{"mode": 1}"#, 400),
        ("/admin/rules/api", TOKEN, br#"{"mode": "loud"}"#, 422),
        ("/admin/rules/api", TOKEN, br#"{"mode": "Shadow"}"#, 422),
        // The mode is valid, the quota is not: nothing is set.
        (
            "/admin/rules/api",
            TOKEN,
            br#"{"quota": "lots", "mode": "shadow"}"#,
            422,
        ),
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
    // Nothing changed: API_LIMIT still holds, enforced.
    assert_eq!(hello(&app, "192.0.2.9", 1).await, [200]);
    let headers: &[(&str, &[u8])] = &[("X-Forwarded-For", b"192.0.2.9")];
    let r = request(app.addr, "GET", "/api/hello", headers, b"")
        .await
        .expect("request");
    assert_eq!(r.header("ratelimit-policy"), Some("\"api\";q=60;w=60"));
}
