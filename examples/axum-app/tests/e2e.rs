//! End to end: the `axum-app` binary, started as a process against a real `redis-server`, over
//! real HTTP on loopback.

use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};
use redis_guard_testkit::{RedisCluster, RedisServer};
use tokio::process::Command;

type App = RunningApp;

async fn start(env: &[(&str, &str)]) -> App {
    let mut env = env.to_vec();
    // Generous: a loaded CI machine running debug builds; the timeout is not what is tested.
    env.insert(0, ("REDIS_TIMEOUT_MS", "5000"));
    spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await
}

async fn start_with_redis(server: &RedisServer, env: &[(&str, &str)]) -> App {
    let url = server.url();
    let mut env = env.to_vec();
    env.push(("REDIS_URL", &url));
    start(&env).await
}

async fn call(app: &App, from: &str, to: &str) -> RawResponse {
    let body = serde_json::json!({ "from": from, "to": to }).to_string();
    post(app, "/calls", body.as_bytes()).await
}

async fn post(app: &App, path: &str, body: &[u8]) -> RawResponse {
    request(
        app.addr,
        "POST",
        path,
        &[("Content-Type", b"application/json")],
        body,
    )
    .await
    .expect("request")
}

async fn get(app: &App, path: &str, headers: &[(&str, &[u8])]) -> RawResponse {
    request(app.addr, "GET", path, headers, b"")
        .await
        .expect("request")
}

fn status_of(r: &RawResponse) -> String {
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json body");
    v["status"].as_str().expect("status field").to_owned()
}

async fn dbsize(server: &RedisServer) -> i64 {
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::cmd("DBSIZE")
        .query_async(&mut conn)
        .await
        .expect("DBSIZE")
}

#[tokio::test]
async fn calls_are_rejected_after_five_from_one_number_on_redis() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_with_redis(&server, &[]).await;
    for i in 0..5 {
        // Formatting does not make a new number.
        let from = if i % 2 == 0 {
            "+1 (555) 010-0000"
        } else {
            "+15550100000"
        };
        let r = call(&app, from, "+15550109999").await;
        assert_eq!(r.status, 200, "call {i}: {}", r.text());
        assert_eq!(status_of(&r), "connected");
    }
    let r = call(&app, "+15550100000", "+15550109999").await;
    assert_eq!(r.status, 429);
    assert_eq!(status_of(&r), "rejected");
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!(
        (1..=12).contains(&retry),
        "one call per 12 s frees up: {retry}"
    );

    let other = call(&app, "+15550100001", "+15550109999").await;
    assert_eq!(other.status, 200);
    assert_eq!(status_of(&other), "connected");

    // A second instance of the app shares the limit through Redis.
    let second = start_with_redis(&server, &[]).await;
    let r = call(&second, "+15550100000", "+15550109999").await;
    assert_eq!(status_of(&r), "rejected");
}

#[tokio::test]
async fn calls_work_on_the_memory_backend_too() {
    let app = start(&[("CALLS_LIMIT", "2/minute")]).await;
    let statuses: Vec<String> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(status_of(&call(&app, "0501234567", "0507654321").await));
        }
        v
    };
    assert_eq!(statuses, ["connected", "connected", "rejected"]);
}

#[tokio::test]
async fn api_is_limited_per_client_ip_and_healthz_never() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_with_redis(&server, &[("API_LIMIT", "3/minute")]).await;
    for i in 0..3 {
        let r = get(&app, "/api/hello", &[]).await;
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.header("ratelimit-policy"), Some("\"api\";q=3;w=60"));
        assert!(
            r.header("ratelimit")
                .is_some_and(|v| v.starts_with(&format!("\"api\";r={};", 2 - i))),
            "{:?}",
            r.header("ratelimit")
        );
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
        assert_eq!(v["hello"], "anonymous");
    }
    let r = get(&app, "/api/hello", &[]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(r.header("retry-after").is_some());
    for _ in 0..5 {
        let h = get(&app, "/healthz", &[]).await;
        assert_eq!((h.status, h.text().as_str()), (200, "ok"));
    }
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx_and_writes_nothing() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_with_redis(&server, &[]).await;
    let before = dbsize(&server).await;

    let bodies: [&[u8]; 8] = [
        b"not json",
        b"",
        b"{\"from\": \"+15550100000\"}",
        b"{\"from\": 5, \"to\": \"+15550100000\"}",
        b"{\"from\": \"call me\", \"to\": \"+15550100000\"}",
        b"{\"from\": \"+15550100000\", \"to\": \"'; DROP TABLE\"}",
        b"\xff\xfe\x00garbage",
        b"[1,2,3]",
    ];
    for body in bodies {
        let r = post(&app, "/calls", body).await;
        assert_eq!(
            r.status,
            400,
            "{:?} -> {}",
            String::from_utf8_lossy(body),
            r.text()
        );
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json error");
        assert!(v["error"].is_string());
    }
    let long_number = format!(
        "{{\"from\": \"{}\", \"to\": \"1234567\"}}",
        "1".repeat(100_000)
    );
    assert_eq!(
        post(&app, "/calls", long_number.as_bytes()).await.status,
        400
    );
    assert_eq!(
        dbsize(&server).await,
        before,
        "rejected input wrote nothing to Redis"
    );

    // Headers the limiter never reads, and headers no client should send: no 5xx.
    let huge = vec![b'a'; 100_000];
    let weird: [(&str, &[u8]); 4] = [
        (
            "X-Forwarded-For",
            b"999.1.1.1, , ::::, 1.2.3.4:99999, \"[::1]\"",
        ),
        ("X-Forwarded-For", &huge),
        ("X-Api-Key", b"\xff\xfe\x80 not utf-8"),
        (
            "Forwarded",
            b"for=\"[2001:db8::1%eth0]\";proto=http, for=unknown",
        ),
    ];
    for (name, value) in weird {
        let r = get(&app, "/api/hello", &[(name, value)]).await;
        assert!(
            r.status < 500 && r.status >= 200,
            "{name}: {} {}",
            r.status,
            r.text()
        );
    }
}

#[tokio::test]
async fn bad_configuration_exits_with_a_message_naming_the_variable() {
    for (name, value, expect) in [
        ("API_LIMIT", "abc", "API_LIMIT=\"abc\""),
        ("CALLS_LIMIT", "0/minute", "CALLS_LIMIT=\"0/minute\""),
        (
            "REDIS_CLUSTER_NODES",
            "127.0.0.1:1",
            "cannot connect to REDIS_CLUSTER_NODES",
        ),
        (
            "TRUSTED_PROXIES",
            "10.0.0.0/33",
            "TRUSTED_PROXIES=\"10.0.0.0/33\"",
        ),
        (
            "REDIS_URL",
            "redis://127.0.0.1:1/",
            "cannot connect to REDIS_URL",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_axum-app"))
            .env_clear()
            .env("BIND", "127.0.0.1:0")
            .env(name, value)
            .output()
            .await
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expect), "{name}: {stderr}");
    }
}

#[tokio::test]
async fn calls_are_limited_on_a_redis_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("task")
        .unwrap_or_else(|e| panic!("{e}"));
    let nodes = cluster.nodes().join(",");
    let app = start(&[("REDIS_CLUSTER_NODES", &nodes)]).await;
    for i in 0..5 {
        let r = call(&app, "+15550100000", "+15550109999").await;
        assert_eq!(status_of(&r), "connected", "call {i}");
    }
    assert_eq!(
        status_of(&call(&app, "+15550100000", "+15550109999").await),
        "rejected"
    );
    assert_eq!(
        status_of(&call(&app, "+15550100001", "+15550109999").await),
        "connected"
    );
    // Every key the app wrote has a TTL.
    let keys = cluster.keys();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for key in keys {
        assert!(cluster.pttl(&key) > 0, "{key}");
    }
}

#[tokio::test]
async fn forwarded_addresses_count_only_from_trusted_proxies() {
    let xff = |ip: &'static str| -> [(&'static str, &'static [u8]); 1] {
        [("X-Forwarded-For", ip.as_bytes())]
    };
    // The test connects from 127.0.0.1: trusted here, so each forwarded client has its bucket.
    let behind_proxy = start(&[
        ("API_LIMIT", "1/minute"),
        ("TRUSTED_PROXIES", "127.0.0.0/8, ::1"),
    ])
    .await;
    assert_eq!(
        get(&behind_proxy, "/api/hello", &xff("203.0.113.7"))
            .await
            .status,
        200
    );
    assert_eq!(
        get(&behind_proxy, "/api/hello", &xff("203.0.113.7"))
            .await
            .status,
        429
    );
    assert_eq!(
        get(&behind_proxy, "/api/hello", &xff("198.51.100.1"))
            .await
            .status,
        200
    );
    // A spoofed left-most entry does not give a new bucket: the proxy appended the real client.
    assert_eq!(
        get(&behind_proxy, "/api/hello", &xff("1.1.1.1, 203.0.113.7"))
            .await
            .status,
        429
    );

    // Without TRUSTED_PROXIES the header is ignored: every request is the peer, 127.0.0.1.
    let direct = start(&[("API_LIMIT", "1/minute")]).await;
    assert_eq!(
        get(&direct, "/api/hello", &xff("203.0.113.7")).await.status,
        200
    );
    assert_eq!(
        get(&direct, "/api/hello", &xff("198.51.100.1"))
            .await
            .status,
        429
    );
}

/// The `__Host-id` cookie a response sets (`Some("")` for a removal cookie).
fn cookie_of(r: &RawResponse) -> Option<String> {
    r.headers_named("set-cookie").into_iter().find_map(|c| {
        c.strip_prefix("__Host-id=")?
            .split(';')
            .next()
            .map(str::to_owned)
    })
}

async fn with_cookie(
    app: &App,
    method: &str,
    path: &str,
    cookie: &str,
    body: &[u8],
) -> RawResponse {
    let header = format!("__Host-id={cookie}");
    request(
        app.addr,
        method,
        path,
        &[
            ("Cookie", header.as_bytes()),
            ("Content-Type", b"application/json"),
        ],
        body,
    )
    .await
    .expect("request")
}

async fn login(app: &App, user: &str, password: &str) -> RawResponse {
    let body = serde_json::json!({ "username": user, "password": password }).to_string();
    post(app, "/login", body.as_bytes()).await
}

fn json(r: &RawResponse) -> serde_json::Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|_| panic!("not JSON: {}", r.text()))
}

#[tokio::test]
async fn login_me_logout_on_redis() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_with_redis(&server, &[]).await;
    let r = login(&app, "alice", "password").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(json(&r)["user"], "alice");
    let set = r.header("set-cookie").expect("cookie").to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("Secure") && set.contains("SameSite=Lax"),
        "{set}"
    );
    let id = cookie_of(&r).expect("id");
    for visits in 1..=2 {
        let me = with_cookie(&app, "GET", "/me", &id, b"").await;
        assert_eq!(
            json(&me),
            serde_json::json!({ "user": "alice", "visits": visits })
        );
    }
    let hello = with_cookie(&app, "GET", "/api/hello", &id, b"").await;
    assert_eq!(json(&hello)["hello"], "alice");
    let out = with_cookie(&app, "POST", "/logout", &id, b"").await;
    assert_eq!(out.status, 204);
    assert_eq!(cookie_of(&out).as_deref(), Some(""), "removal cookie");
    assert_eq!(with_cookie(&app, "GET", "/me", &id, b"").await.status, 401);
    // The session hash is gone; only rate-limit keys and the user index may remain.
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rg:s:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test]
async fn bad_logins_are_rejected_and_throttled() {
    let app = start(&[("LOGIN_LIMIT", "3/minute")]).await;
    assert_eq!(login(&app, "alice", "wrong").await.status, 401);
    assert_eq!(login(&app, "bad user!", "password").await.status, 401);
    assert_eq!(post(&app, "/login", b"not json").await.status, 400);
    assert_eq!(login(&app, "alice", "wrong").await.status, 401);
    assert_eq!(
        login(&app, "alice", "password").await.status,
        200,
        "third attempt for alice"
    );
    let r = login(&app, "alice", "password").await;
    assert_eq!(r.status, 429, "fourth attempt for alice from this IP");
    assert!(r.header("retry-after").is_some());
    assert_eq!(
        login(&app, "bob", "password").await.status,
        200,
        "bob has his own bucket"
    );
}

#[tokio::test]
async fn api_limit_is_per_user_when_logged_in() {
    let app = start(&[("API_LIMIT", "2/minute")]).await;
    for _ in 0..2 {
        assert_eq!(get(&app, "/api/hello", &[]).await.status, 200);
    }
    assert_eq!(
        get(&app, "/api/hello", &[]).await.status,
        429,
        "anonymous, by IP"
    );
    let id = cookie_of(&login(&app, "carol", "password").await).expect("id");
    for _ in 0..2 {
        let r = with_cookie(&app, "GET", "/api/hello", &id, b"").await;
        assert_eq!(r.status, 200, "carol has her own bucket");
    }
    assert_eq!(
        with_cookie(&app, "GET", "/api/hello", &id, b"")
            .await
            .status,
        429
    );
}

#[tokio::test]
async fn logout_all_ends_every_session_of_the_user() {
    let app = start(&[]).await;
    let a = cookie_of(&login(&app, "dave", "password").await).expect("id");
    let b = cookie_of(&login(&app, "dave", "password").await).expect("id");
    let other = cookie_of(&login(&app, "erin", "password").await).expect("id");
    assert_eq!(
        with_cookie(&app, "POST", "/logout-all", &a, b"")
            .await
            .status,
        204
    );
    assert_eq!(with_cookie(&app, "GET", "/me", &a, b"").await.status, 401);
    assert_eq!(with_cookie(&app, "GET", "/me", &b, b"").await.status, 401);
    assert_eq!(
        with_cookie(&app, "GET", "/me", &other, b"").await.status,
        200
    );
    assert_eq!(
        post(&app, "/logout-all", b"").await.status,
        401,
        "not logged in"
    );
}

#[tokio::test]
async fn the_page_is_served_and_healthz_sets_no_cookie() {
    let app = start(&[]).await;
    let page = get(&app, "/", &[]).await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("id=\"login-form\""));
    let h = get(&app, "/healthz", &[("Cookie", b"__Host-id=garbage")]).await;
    assert_eq!((h.status, h.header("set-cookie")), (200, None));
}
