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
        statuses.push(hello_once(app, ip).await.status);
    }
    statuses
}

/// One call of `GET /api/hello` from client address `ip`.
async fn hello_once(app: &RunningApp, ip: &str) -> RawResponse {
    let headers: &[(&str, &[u8])] = &[("X-Forwarded-For", ip.as_bytes())];
    request(app.addr, "GET", "/api/hello", headers, b"")
        .await
        .expect("request")
}

/// Checks that calls of `GET /api/hello` from a client `ip` that has used nothing are decided
/// with `limit` a minute and say so: `RateLimit-Policy`, `RateLimit` counting down from it, and,
/// for a limit of at most 2, a `429` with its `Retry-After` past it (else two calls).
async fn names_the_quota(app: &RunningApp, ip: &str, limit: u32, instance: &str) {
    let calls = if limit <= 2 { limit + 1 } else { 2 };
    for i in 1..=calls {
        let r = hello_once(app, ip).await;
        let at = format!("instance {instance}, call {i} from {ip}: {r:?}");
        let admitted = i <= limit;
        assert_eq!(r.status, if admitted { 200 } else { 429 }, "{at}");
        let policy = format!("\"api\";q={limit};w=60");
        assert_eq!(r.header("ratelimit-policy"), Some(policy.as_str()), "{at}");
        let left = format!("\"api\";r={};", limit - i.min(limit));
        assert!(
            r.header("ratelimit").is_some_and(|v| v.starts_with(&left)),
            "{at}"
        );
        assert_eq!(r.header("retry-after").is_some(), !admitted, "{at}");
    }
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
    // Each instance decides with 2 a minute, and its headers say so (instance b's own copy of
    // the rule's record, read at its first request, is older than the change).
    names_the_quota(&b, "192.0.2.2", 2, "b").await;
    names_the_quota(&a, "192.0.2.3", 2, "a").await;
    let del = admin(&b, "DELETE", "/admin/rules/api", TOKEN, b"").await;
    assert_eq!(del.status, 204, "{}", del.text());
    // API_LIMIT again, on a (whose copy still holds the 2 it set) as on b: 58 of 60 left for
    // the clients that used 2, 60 for a new one.
    assert_eq!(hello(&a, "192.0.2.2", 1).await, [200]);
    assert_eq!(hello(&b, "192.0.2.3", 1).await, [200]);
    names_the_quota(&a, "192.0.2.5", 60, "a").await;
    names_the_quota(&b, "192.0.2.6", 60, "b").await;
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
