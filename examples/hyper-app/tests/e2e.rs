//! End to end: the `hyper-app` binary against a real Redis, over real HTTP.

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};

use example_shared::testing::slow_loris::{
    assert_a_trickled_body_is_cut_off_after_1s, assert_closed_by_a_1s_header_timeout,
};
use example_shared::testing::tls::{TlsRedis, assert_a_bad_redis_tls_ca_stops_the_app};

type App = RunningApp;

async fn start(env: &[(&str, &str)]) -> App {
    spawn(env!("CARGO_BIN_EXE_hyper-app"), env).await
}

/// Sends a request as the app's own page or curl would: JSON, no cross-site headers.
async fn send(
    app: &App,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    body: &[u8],
) -> RawResponse {
    let mut headers: Vec<(&str, &[u8])> = vec![("Content-Type", b"application/json")];
    if let Some(c) = cookie {
        headers.push(("Cookie", c.as_bytes()));
    }
    request(app.addr, method, path, &headers, body)
        .await
        .expect("request")
}

/// The session cookie a response sets, as `name=value` (`id` or `__Host-id`).
fn cookie_of(r: &RawResponse) -> Option<String> {
    r.headers_named("set-cookie").into_iter().find_map(|c| {
        let pair = c.split(';').next()?.trim();
        (pair.starts_with("id=") || pair.starts_with("__Host-id=")).then(|| pair.to_owned())
    })
}

#[tokio::test]
async fn rate_limits_and_sessions_on_plain_hyper() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let app = start(&[("REDIS_URL", &url), ("API_LIMIT", "2/minute")]).await;

    assert_eq!(send(&app, "GET", "/healthz", None, b"").await.status, 200);
    for i in 0..2 {
        let r = send(&app, "GET", "/api/hello", None, b"").await;
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.header("ratelimit-policy"), Some("\"api\";q=2;w=60"));
    }
    let r = send(&app, "GET", "/api/hello", None, b"").await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());

    let r = send(
        &app,
        "POST",
        "/login",
        None,
        br#"{"username":"zoe","password":"password"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = cookie_of(&r).expect("session cookie");
    let me = send(&app, "GET", "/me", Some(&id), b"").await;
    assert_eq!(me.text(), r#"{"user":"zoe","visits":1}"#);
    assert_eq!(
        send(&app, "POST", "/login", None, b"garbage").await.status,
        400
    );
    assert_eq!(
        send(&app, "POST", "/logout", Some(&id), b"").await.status,
        204
    );
    assert_eq!(send(&app, "GET", "/me", Some(&id), b"").await.status, 401);
}

/// `REDIS_URL=rediss://…` with `REDIS_TLS_CA` naming the PEM of the server's certificate
/// authority: limits and sessions live in that TLS-only Redis (with `LIMIT_ON_ERROR=closed`, a
/// Redis out of reach would answer 503). A `REDIS_TLS_CA` that is missing or holds no
/// certificate stops the app at start, naming the variable and the path.
#[tokio::test]
async fn rate_limits_and_sessions_over_tls_with_redis_tls_ca() {
    let tls = TlsRedis::start();
    let url = tls.server.url();
    let app = start(&[
        ("REDIS_URL", &url),
        ("REDIS_TLS_CA", &tls.ca_file),
        ("API_LIMIT", "1/minute"),
        ("LIMIT_ON_ERROR", "closed"),
        // Generous: a loaded CI machine running debug builds; the timeout is not what is tested.
        ("REDIS_TIMEOUT_MS", "5000"),
    ])
    .await;
    let r = send(&app, "GET", "/api/hello", None, b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(send(&app, "GET", "/api/hello", None, b"").await.status, 429);
    let r = send(
        &app,
        "POST",
        "/login",
        None,
        br#"{"username":"zoe","password":"password"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = cookie_of(&r).expect("session cookie");
    let me = send(&app, "GET", "/me", Some(&id), b"").await;
    assert_eq!(me.text(), r#"{"user":"zoe","visits":1}"#);
    assert!(
        !tls.keys().await.is_empty(),
        "limits and sessions in the TLS Redis"
    );

    assert_a_bad_redis_tls_ca_stops_the_app(env!("CARGO_BIN_EXE_hyper-app"), &url).await;
}

#[tokio::test]
async fn runs_without_redis() {
    let app = start(&[]).await;
    let r = send(
        &app,
        "POST",
        "/login",
        None,
        br#"{"username":"amy","password":"password"}"#,
    )
    .await;
    let id = cookie_of(&r).expect("session cookie");
    assert_eq!(send(&app, "GET", "/me", Some(&id), b"").await.status, 200);
}

#[tokio::test]
async fn cross_site_login_is_refused_with_403_and_no_cookie() {
    let app = start(&[]).await;
    let creds = br#"{"username":"zoe","password":"password"}"#;
    let attack: [(&str, &[u8]); 2] = [
        ("Content-Type", b"text/plain"),
        ("Origin", b"https://evil.example"),
    ];
    for path in ["/login", "/logout"] {
        let r = request(app.addr, "POST", path, &attack, creds)
            .await
            .expect("request");
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert!(r.header("set-cookie").is_none());
    }
    let fetch_meta: [(&str, &[u8]); 2] = [
        ("Content-Type", b"application/json"),
        ("Sec-Fetch-Site", b"cross-site"),
    ];
    let r = request(app.addr, "POST", "/login", &fetch_meta, creds)
        .await
        .expect("request");
    assert_eq!(r.status, 403);
    let plain: [(&str, &[u8]); 1] = [("Content-Type", b"text/plain")];
    let r = request(app.addr, "POST", "/login", &plain, creds)
        .await
        .expect("request");
    assert_eq!(r.status, 415, "{}", r.text());
    assert!(r.header("set-cookie").is_none());
    let origin = format!("http://{}", app.addr);
    let page: [(&str, &[u8]); 3] = [
        ("Content-Type", b"application/json"),
        ("Origin", origin.as_bytes()),
        ("Sec-Fetch-Site", b"same-origin"),
    ];
    let r = request(app.addr, "POST", "/login", &page, creds)
        .await
        .expect("request");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(cookie_of(&r).is_some());
}

#[tokio::test]
async fn a_slow_loris_connection_is_closed_after_the_header_read_timeout() {
    let app = start(&[("HEADER_READ_TIMEOUT", "1s")]).await;
    assert_closed_by_a_1s_header_timeout(app.addr).await;
    assert_eq!(send(&app, "GET", "/healthz", None, b"").await.status, 200);
}

#[tokio::test]
async fn a_trickled_body_is_cut_off_after_the_body_read_timeout() {
    let app = start(&[("BODY_READ_TIMEOUT", "1s"), ("BODY_MIN_RATE", "1000000")]).await;
    assert_a_trickled_body_is_cut_off_after_1s(app.addr, "/login").await;
    assert_eq!(send(&app, "GET", "/healthz", None, b"").await.status, 200);
}

async fn login_from(app: &App, ip: &str, user: &str) -> u16 {
    let body = serde_json::json!({ "username": user, "password": "guess" }).to_string();
    let headers: [(&str, &[u8]); 2] = [
        ("Content-Type", b"application/json"),
        ("X-Forwarded-For", ip.as_bytes()),
    ];
    request(app.addr, "POST", "/login", &headers, body.as_bytes())
        .await
        .expect("request")
        .status
}

#[tokio::test]
async fn login_is_throttled_per_ip_per_username_and_per_both() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let app = start(&[
        ("REDIS_URL", &url),
        ("REDIS_TIMEOUT_MS", "5000"),
        ("TRUSTED_PROXIES", "127.0.0.1/32"),
    ])
    .await;
    // Per IP + username (LOGIN_LIMIT, 5/minute).
    for i in 0..5 {
        assert_eq!(login_from(&app, "203.0.113.1", "amy").await, 401, "{i}");
    }
    assert_eq!(login_from(&app, "203.0.113.1", "amy").await, 429);
    // Per username from many addresses (LOGIN_USER_LIMIT, 10/minute): 5 more from elsewhere.
    for i in 0..5 {
        let ip = format!("198.51.100.{i}");
        assert_eq!(login_from(&app, &ip, " AMY ").await, 401, "{i}");
    }
    assert_eq!(login_from(&app, "192.0.2.1", "amy").await, 429);
    // Per IP over many usernames (LOGIN_IP_LIMIT, 30/minute). Five attempts from .1 counted
    // above; the denied one counted under no rule (all or nothing).
    for i in 0..25 {
        let user = format!("user{i}");
        assert_eq!(login_from(&app, "203.0.113.1", &user).await, 401, "{user}");
    }
    assert_eq!(login_from(&app, "203.0.113.1", "user-new").await, 429);
    // Invalid names never reach the limiter.
    assert_eq!(login_from(&app, "192.0.2.2", "not a name").await, 401);
}
