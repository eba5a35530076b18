//! End to end: the `axum-app` binary, started as a process against a real `redis-server`, over
//! real HTTP on loopback.

use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};
use redis_guard_testkit::{RedisCluster, RedisServer};
use tokio::process::Command;

use example_shared::testing::slow_loris::{
    assert_a_trickled_body_is_cut_off_after_1s, assert_closed_by_a_1s_header_timeout,
};

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

/// One Redis command with one argument.
async fn redis_query<T: redis::FromRedisValue>(server: &RedisServer, cmd: &str, arg: &str) -> T {
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::cmd(cmd)
        .arg(arg)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
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
    // At most 5 in ANY minute: the next call fits only when the first one leaves the window,
    // a minute after it was made (these six calls take far less than 10 s). GCRA with burst 5
    // would say 12 s here, and admit a 6th, 7th… call every 12 s: 9 within the first minute.
    assert!(
        (50..=60).contains(&retry),
        "the first call must leave the 60 s window first: {retry}"
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
async fn calls_admit_at_most_the_limit_in_any_window() {
    // 10 per 4 s. Under GCRA (burst 10, one call per 400 ms) the 11th call is admitted 400 ms
    // after the 10th; the sliding log admits it only when the 1st call is 4 s old.
    // Margins: we wait 1 s after the last call, 2.5 × GCRA's 400 ms, so GCRA would admit
    // whatever the scheduling; and the check stays inside the first call's 4 s window as long as
    // eleven loopback requests take under 3 s (they take milliseconds).
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_with_redis(&server, &[("CALLS_LIMIT", "10/4s")]).await;
    let started = std::time::Instant::now();
    for i in 0..10 {
        let r = call(&app, "+15550100000", "+15550109999").await;
        assert_eq!(status_of(&r), "connected", "call {i}");
    }
    assert_eq!(
        status_of(&call(&app, "+15550100000", "+15550109999").await),
        "rejected"
    );
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let r = call(&app, "+15550100000", "+15550109999").await;
    assert!(
        started.elapsed() < std::time::Duration::from_millis(3500),
        "too slow to tell the algorithms apart: {:?}",
        started.elapsed()
    );
    assert_eq!(status_of(&r), "rejected", "an 11th call within 4 s");
    // The limiter keeps a log of admitted calls (a sorted set), not a single timestamp.
    let keys: Vec<String> = redis_query(&server, "KEYS", "rg:rl:calls:*").await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let kind: String = redis_query(&server, "TYPE", &keys[0]).await;
    assert_eq!(kind, "zset");
}

#[tokio::test]
async fn calls_share_one_bucket_across_number_formats() {
    let app = start(&[("CALLS_LIMIT", "3/minute")]).await;
    // One number, written three ways: international with +, with the 00 prefix, without either.
    for from in ["+15550100000", "0015550100000", "15550100000"] {
        let r = call(&app, from, "+15550109999").await;
        assert_eq!(status_of(&r), "connected", "{from}");
    }
    for from in ["+1 555 010 0000", "00 1 (555) 010-0000", "15550100000"] {
        let r = call(&app, from, "+15550109999").await;
        assert_eq!(r.status, 429, "{from}: the same number");
        assert_eq!(status_of(&r), "rejected");
    }
    // A national number (leading 0) is not guessed into an international one.
    assert_eq!(
        status_of(&call(&app, "05550100000", "+15550109999").await),
        "connected"
    );
    // What cannot be normalized is a 400, and touches no bucket.
    for bad in ["+0 555 010 0000", "000", "0015", "+1555"] {
        let r = call(&app, bad, "+15550109999").await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
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

// Redis killed under each LIMIT_ON_ERROR policy, and started again: tests/faults.rs.

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
            "TRUSTED_PROXIES",
            "10.0.0.0/33",
            "TRUSTED_PROXIES=\"10.0.0.0/33\"",
        ),
        (
            "FORWARDED_HEADER",
            "x-real-ip",
            "FORWARDED_HEADER=\"x-real-ip\"",
        ),
        ("REDIS_URL", "not a url", "cannot connect to REDIS_URL"),
        // Parses, but overflowed the session expiry: every login failed.
        ("SESSION_MAX", "300000000d", "SESSION_MAX=\"300000000d\""),
        // Parses, but every Redis call timed out at once: limiting silently off.
        ("REDIS_TIMEOUT_MS", "0", "REDIS_TIMEOUT_MS=\"0\""),
        ("HEADER_READ_TIMEOUT", "0s", "HEADER_READ_TIMEOUT=\"0s\""),
        (
            "LIMIT_ON_ERROR",
            "fail-open",
            "LIMIT_ON_ERROR=\"fail-open\"",
        ),
        ("REPLICAS", "0", "REPLICAS=\"0\""),
    ] {
        let run = Command::new(env!("CARGO_BIN_EXE_axum-app"))
            .env_clear()
            .env("BIND", "127.0.0.1:0")
            .env(name, value)
            .kill_on_drop(true)
            .output();
        // An app that accepts the value starts serving and never exits.
        let out = tokio::time::timeout(std::time::Duration::from_secs(30), run)
            .await
            .unwrap_or_else(|_| panic!("{name}={value:?} was accepted: the app kept running"))
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

#[tokio::test]
async fn a_rotating_forwarded_header_gets_no_fresh_bucket_behind_xff_proxies() {
    // The audit's probe: nginx-style proxies append to X-Forwarded-For and pass a client's own
    // `Forwarded` through. A fresh `Forwarded: for=` per request must not mean a fresh bucket.
    let app = start(&[
        ("API_LIMIT", "3/minute"),
        ("TRUSTED_PROXIES", "127.0.0.1/32"),
    ])
    .await;
    let mut statuses = Vec::new();
    for i in 0..6 {
        let spoof = format!("for=198.51.100.{i}");
        let r = get(
            &app,
            "/api/hello",
            &[
                ("X-Forwarded-For", b"203.0.113.7"),
                ("Forwarded", spoof.as_bytes()),
            ],
        )
        .await;
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);

    // FORWARDED_HEADER=forwarded: now X-Forwarded-For is the header a client could forge.
    let rfc = start(&[
        ("API_LIMIT", "1/minute"),
        ("TRUSTED_PROXIES", "127.0.0.1/32"),
        ("FORWARDED_HEADER", "forwarded"),
    ])
    .await;
    let mut statuses = Vec::new();
    for i in 0..3 {
        let spoof = format!("198.51.100.{i}");
        let r = get(
            &rfc,
            "/api/hello",
            &[
                ("X-Forwarded-For", spoof.as_bytes()),
                ("Forwarded", b"for=203.0.113.7"),
            ],
        )
        .await;
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 429, 429]);
}

/// The session cookie a response sets, as `name=value` to send back (`name=` for a removal
/// cookie). The name is `id`, or `__Host-id` when the library uses the prefix.
fn cookie_of(r: &RawResponse) -> Option<String> {
    r.headers_named("set-cookie").into_iter().find_map(|c| {
        let pair = c.split(';').next()?.trim();
        (pair.starts_with("id=") || pair.starts_with("__Host-id=")).then(|| pair.to_owned())
    })
}

fn is_removal(cookie: Option<&str>) -> bool {
    cookie.is_some_and(|c| c.ends_with('='))
}

async fn with_cookie(
    app: &App,
    method: &str,
    path: &str,
    cookie: &str,
    body: &[u8],
) -> RawResponse {
    request(
        app.addr,
        method,
        path,
        &[
            ("Cookie", cookie.as_bytes()),
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
            serde_json::json!({ "user": "alice", "visits": visits, "name": null })
        );
    }
    let hello = with_cookie(&app, "GET", "/api/hello", &id, b"").await;
    assert_eq!(json(&hello)["hello"], "alice");
    let out = with_cookie(&app, "POST", "/logout", &id, b"").await;
    assert_eq!(out.status, 204);
    // A new anonymous session carries the logout message, under a new id.
    let anonymous = cookie_of(&out).expect("a cookie for the message");
    assert!(
        !is_removal(Some(&anonymous)) && anonymous != id,
        "{anonymous}"
    );
    assert_eq!(with_cookie(&app, "GET", "/me", &id, b"").await.status, 401);
    assert_eq!(
        with_cookie(&app, "GET", "/me", &anonymous, b"")
            .await
            .status,
        401
    );
    let flash = with_cookie(&app, "GET", "/flash", &anonymous, b"").await;
    assert_eq!(json(&flash)["flash"], "You have been logged out.");
    let again = with_cookie(&app, "GET", "/flash", &anonymous, b"").await;
    assert_eq!(json(&again)["flash"], serde_json::Value::Null, "shown once");
    // The logged-in session's hash is gone: one session is left, the anonymous one.
    let keys: Vec<String> = redis_query(&server, "KEYS", "rg:s:*").await;
    assert_eq!(keys.len(), 1, "{keys:?}");
}

/// `GET /sessions` and `POST /sessions/{handle}/revoke` over real HTTP: a user's
/// devices, and logging one of them out.
#[tokio::test]
async fn devices_are_listed_and_revoked_over_http() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_with_redis(&server, &[]).await;
    let mut ids = Vec::new();
    for agent in ["laptop", "phone"] {
        let body = serde_json::json!({ "username": "alice", "password": "password" }).to_string();
        let r = request(
            app.addr,
            "POST",
            "/login",
            &[
                ("Content-Type", b"application/json"),
                ("User-Agent", agent.as_bytes()),
            ],
            body.as_bytes(),
        )
        .await
        .expect("request");
        assert_eq!(r.status, 200, "{}", r.text());
        ids.push(cookie_of(&r).expect("id"));
    }
    let bob = cookie_of(&login(&app, "bob", "password").await).expect("bob");
    let listed = json(&with_cookie(&app, "GET", "/sessions", &ids[0], b"").await);
    let list = listed.as_array().expect("a list");
    assert_eq!(list.len(), 2, "{listed}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    for s in list {
        assert_eq!(s["ip"], "127.0.0.1", "{s}");
        assert_eq!(s["handle"].as_str().expect("handle").len(), 22, "{s}");
        let created = s["created"].as_u64().expect("created");
        let seen = s["last_seen"].as_u64().expect("last seen");
        assert!(created <= now + 1 && created + 60 >= now, "{s}");
        assert!(seen >= created && seen <= now + 1, "{s}");
        assert!(
            s["expires"].as_u64().expect("expires") > now + 23 * 3600,
            "{s}"
        );
    }
    let laptop = list.iter().find(|s| s["current"] == true).expect("current");
    assert_eq!(laptop["user_agent"], "laptop");
    let phone = list
        .iter()
        .find(|s| s["current"] == false)
        .expect("the other");
    assert_eq!(phone["user_agent"], "phone");
    let body = listed.to_string();
    for id in &ids {
        let value = id.split('=').nth(1).expect("value");
        assert!(!body.contains(value), "an id leaked into the listing");
    }

    // Forged and foreign handles: 404, nothing ended.
    let bobs = json(&with_cookie(&app, "GET", "/sessions", &bob, b"").await);
    let bob_handle = bobs[0]["handle"].as_str().expect("handle").to_owned();
    for forged in [
        bob_handle.as_str(),
        "AAAAAAAAAAAAAAAAAAAAAA",
        "..%2F..%2Fadmin",
    ] {
        let path = format!("/sessions/{forged}/revoke");
        let r = with_cookie(&app, "POST", &path, &ids[0], b"{}").await;
        assert_eq!(r.status, 404, "{forged}: {}", r.text());
    }
    assert_eq!(with_cookie(&app, "GET", "/me", &bob, b"").await.status, 200);
    // Logged out: 401.
    let r = request(app.addr, "GET", "/sessions", &[], b"")
        .await
        .expect("request");
    assert_eq!(r.status, 401);

    let path = format!(
        "/sessions/{}/revoke",
        phone["handle"].as_str().expect("handle")
    );
    assert_eq!(
        with_cookie(&app, "POST", &path, &ids[0], b"{}")
            .await
            .status,
        204
    );
    assert_eq!(
        with_cookie(&app, "GET", "/me", &ids[1], b"").await.status,
        401
    );
    assert_eq!(
        with_cookie(&app, "GET", "/me", &ids[0], b"").await.status,
        200
    );

    // "Log out everywhere else".
    let third = cookie_of(&login(&app, "alice", "password").await).expect("id");
    let r = with_cookie(&app, "POST", "/logout-others", &third, b"{}").await;
    assert_eq!(json(&r)["ended"], 1);
    assert_eq!(
        with_cookie(&app, "GET", "/me", &ids[0], b"").await.status,
        401
    );
    assert_eq!(
        with_cookie(&app, "GET", "/me", &third, b"").await.status,
        200
    );
}

/// `POST /profile` is an HTML form guarded by the session's CSRF token: missing, wrong or another
/// session's token is a `403` that changes nothing; the right one saves and redirects.
#[tokio::test]
async fn the_profile_form_needs_this_sessions_csrf_token() {
    let app = start(&[]).await;
    let alice = cookie_of(&login(&app, "alice", "password").await).expect("alice");
    let bob = cookie_of(&login(&app, "bob", "password").await).expect("bob");
    let token_of = |r: RawResponse| json(&r)["token"].as_str().expect("token").to_owned();
    let mine = token_of(with_cookie(&app, "GET", "/csrf", &alice, b"").await);
    let again = token_of(with_cookie(&app, "GET", "/csrf", &alice, b"").await);
    assert_eq!(mine, again, "one token per session");
    let bobs = token_of(with_cookie(&app, "GET", "/csrf", &bob, b"").await);
    assert_ne!(mine, bobs);
    let form = |cookie: &str, body: String| {
        let cookie = cookie.to_owned();
        let addr = app.addr;
        async move {
            request(
                addr,
                "POST",
                "/profile",
                &[
                    ("Cookie", cookie.as_bytes()),
                    ("Content-Type", b"application/x-www-form-urlencoded"),
                ],
                body.as_bytes(),
            )
            .await
            .expect("request")
        }
    };
    for body in [
        "name=Mallory".to_owned(),
        "name=Mallory&csrf_token=".to_owned(),
        format!("name=Mallory&csrf_token={bobs}"),
        format!("name=Mallory&csrf_token={}", "A".repeat(43)),
        format!("name=Mallory&csrf_token={}", "A".repeat(10_000)),
    ] {
        let r = form(&alice, body.clone()).await;
        assert_eq!(r.status, 403, "{body:.60}: {}", r.text());
        assert!(cookie_of(&r).is_none(), "no session write");
    }
    let me = json(&with_cookie(&app, "GET", "/me", &alice, b"").await);
    assert_eq!(me["name"], serde_json::Value::Null, "nothing saved");
    let r = form(&alice, format!("name=Alice+A.&csrf_token={mine}")).await;
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(r.header("location"), Some("/"));
    let me = json(&with_cookie(&app, "GET", "/me", &alice, b"").await);
    assert_eq!(me["name"], "Alice A.");
    let flash = json(&with_cookie(&app, "GET", "/flash", &alice, b"").await);
    assert_eq!(flash["flash"], "Saved your display name.");
}

/// "Remember me": the cookie carries `Max-Age` for 30 days; without it, a browser-session cookie.
#[tokio::test]
async fn remember_me_sets_a_persistent_cookie() {
    let app = start(&[]).await;
    let plain = login(&app, "alice", "password").await;
    assert!(
        !plain
            .header("set-cookie")
            .expect("cookie")
            .contains("Max-Age")
    );
    let body = serde_json::json!({ "username": "alice", "password": "password", "remember": true });
    let r = post(&app, "/login", body.to_string().as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let set = r.header("set-cookie").expect("cookie");
    assert!(set.contains("; Max-Age=2592000"), "{set}");
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
    // At most 3 in any minute: wait until the first attempt is a minute old (GCRA: 20 s).
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((50..=60).contains(&retry), "{retry}");
    assert_eq!(
        login(&app, "bob", "password").await.status,
        200,
        "bob has his own bucket"
    );
}

#[tokio::test]
async fn login_from_one_ip_over_30_usernames_is_throttled() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_with_redis(&server, &[]).await;
    // Names that can never log in are refused before they reach the limiter: no key, no count.
    for i in 0..40 {
        let r = login(&app, &format!("not a name {i}"), "password").await;
        assert_eq!(r.status, 401, "{i}");
    }
    assert_eq!(dbsize(&server).await, 0, "invalid names wrote nothing");
    // Default LOGIN_IP_LIMIT: 30 attempts per minute from one address, whatever the username.
    for i in 0..30 {
        let r = login(&app, &format!("user{i}"), "guess").await;
        assert_eq!(r.status, 401, "attempt {i}: {}", r.text());
    }
    let r = login(&app, "user30", "guess").await;
    assert_eq!(r.status, 429, "the 31st username from one IP");
    assert!(r.header("retry-after").is_some());
    // Denied means denied: even the right password, for a fresh name.
    assert_eq!(login(&app, "someone-new", "password").await.status, 429);
}

#[tokio::test]
async fn login_for_one_username_from_many_addresses_is_throttled() {
    let app = start(&[("TRUSTED_PROXIES", "127.0.0.1/32")]).await;
    let from = |app: &App, ip: String, user: &'static str| {
        let addr = app.addr;
        async move {
            let body = serde_json::json!({ "username": user, "password": "guess" }).to_string();
            request(
                addr,
                "POST",
                "/login",
                &[
                    ("Content-Type", b"application/json"),
                    ("X-Forwarded-For", ip.as_bytes()),
                ],
                body.as_bytes(),
            )
            .await
            .expect("request")
        }
    };
    // Default LOGIN_USER_LIMIT: 10 per minute for one account, two from each of five addresses
    // (well under the per-address and per-pair limits). Case and spaces do not make a new name.
    for i in 0..10 {
        let user = if i % 2 == 0 { "victim" } else { " Victim " };
        let r = from(&app, format!("203.0.113.{}", i / 2), user).await;
        assert_eq!(r.status, 401, "attempt {i}: {}", r.text());
    }
    let r = from(&app, "198.51.100.99".to_owned(), "VICTIM").await;
    assert_eq!(
        r.status, 429,
        "an 11th attempt on one account from a new address"
    );
    // Other accounts, from the same addresses, are not affected.
    let r = from(&app, "203.0.113.1".to_owned(), "bystander").await;
    assert_eq!(r.status, 401);
    // A successful login is recorded under the normalized name.
    let ok = login(&app, "  Bystander ", "password").await;
    assert_eq!(json(&ok)["user"], "bystander");
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
async fn cross_site_login_is_refused_with_403_and_no_cookie() {
    let app = start(&[]).await;
    let creds = br#"{"username": "alice", "password": "password"}"#;
    let same_origin = format!("http://{}", app.addr);
    let send = |path: &'static str, headers: Vec<(&'static str, Vec<u8>)>| {
        let addr = app.addr;
        async move {
            let headers: Vec<(&str, &[u8])> =
                headers.iter().map(|(n, v)| (*n, v.as_slice())).collect();
            request(addr, "POST", path, &headers, creds)
                .await
                .expect("request")
        }
    };
    // The attack: a cross-site form posting a text/plain body that happens to parse as JSON.
    let attack = |path| {
        send(
            path,
            vec![
                ("Content-Type", b"text/plain".to_vec()),
                ("Origin", b"https://evil.example".to_vec()),
                ("Sec-Fetch-Site", b"cross-site".to_vec()),
            ],
        )
    };
    for path in ["/login", "/logout", "/logout-all", "/calls"] {
        let r = attack(path).await;
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert_eq!(json(&r)["status"], 403);
        assert!(r.header("set-cookie").is_none(), "{path}");
    }
    // Older browsers send only Origin; a sibling subdomain is still another site's page.
    for headers in [
        vec![("Origin", b"https://evil.example".to_vec())],
        vec![("Sec-Fetch-Site", b"same-site".to_vec())],
        vec![("Origin", b"null".to_vec())],
    ] {
        let mut headers = headers;
        headers.push(("Content-Type", b"application/json".to_vec()));
        let r = send("/login", headers).await;
        assert_eq!(r.status, 403, "{}", r.text());
        assert!(r.header("set-cookie").is_none());
    }
    // Not JSON, even from the same origin (or from curl): 415.
    let r = send(
        "/login",
        vec![
            ("Content-Type", b"text/plain".to_vec()),
            ("Origin", same_origin.clone().into_bytes()),
        ],
    )
    .await;
    assert_eq!(r.status, 415, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(r.header("set-cookie").is_none());
    assert_eq!(send("/login", vec![]).await.status, 415, "no Content-Type");
    // The page's own request still logs in.
    let r = send(
        "/login",
        vec![
            ("Content-Type", b"application/json".to_vec()),
            ("Origin", same_origin.into_bytes()),
            ("Sec-Fetch-Site", b"same-origin".to_vec()),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(cookie_of(&r).is_some());
}

#[tokio::test]
async fn the_page_is_served_and_healthz_sets_no_cookie() {
    let app = start(&[]).await;
    let page = get(&app, "/", &[]).await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("id=\"login-form\""));
    let h = get(&app, "/healthz", &[("Cookie", b"id=garbage")]).await;
    assert_eq!((h.status, h.header("set-cookie")), (200, None));
}

#[tokio::test]
async fn a_slow_loris_connection_is_closed_after_the_header_read_timeout() {
    let app = start(&[("HEADER_READ_TIMEOUT", "1s")]).await;
    assert_closed_by_a_1s_header_timeout(app.addr).await;
    // Ordinary requests are unaffected.
    assert_eq!(get(&app, "/healthz", &[]).await.status, 200);
}

#[tokio::test]
async fn a_trickled_body_is_cut_off_after_the_body_read_timeout() {
    let app = start(&[("BODY_READ_TIMEOUT", "1s"), ("BODY_MIN_RATE", "1000000")]).await;
    assert_a_trickled_body_is_cut_off_after_1s(app.addr, "/login").await;
    assert_eq!(get(&app, "/healthz", &[]).await.status, 200);
}

/// A client that pipelines requests for the page and never reads the answers: the server's
/// writes stall, and `RESPONSE_WRITE_TIMEOUT` closes the connection long before it has written
/// them all.
#[tokio::test]
async fn a_client_that_does_not_read_is_cut_off_after_the_write_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = start(&[("RESPONSE_WRITE_TIMEOUT", "1s")]).await;
    let page = get(&app, "/", &[]).await.body.len();
    const REQUESTS: usize = 3000;
    let (mut read, mut write) = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect")
        .into_split();
    let writer = tokio::spawn(async move {
        for _ in 0..REQUESTS {
            if write
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .is_err()
            {
                break;
            }
        }
        write
    });
    // Not reading: the stall the server must notice (1 s) and then some.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let mut received = Vec::new();
    let read_all = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        read.read_to_end(&mut received),
    )
    .await;
    assert!(read_all.is_ok(), "the connection stayed open");
    // Without the timeout every answer arrives (~90 MB); socket buffers hold a few MB.
    assert!(
        received.len() < REQUESTS * page / 2,
        "{} of {} bytes arrived",
        received.len(),
        REQUESTS * page
    );
    drop(writer.await);
    assert_eq!(get(&app, "/healthz", &[]).await.status, 200);
}

/// Cookie-less (or unknown-cookie) `GET /csrf` starts a session each time: `SESSION_CREATE_LIMIT`
/// per client IP bounds how many one address can put in the store.
#[tokio::test]
async fn session_creation_is_limited_per_client_ip() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_with_redis(&server, &[("SESSION_CREATE_LIMIT", "5/minute")]).await;
    let mut statuses = Vec::new();
    for i in 0..12 {
        // Half of them with an id the store does not know: it starts a new session too.
        let bogus = format!("__Host-id={i:0>43}");
        let headers: &[(&str, &[u8])] = if i % 2 == 0 {
            &[]
        } else {
            &[("Cookie", bogus.as_bytes())]
        };
        let r = get(&app, "/csrf", headers).await;
        assert_eq!(
            r.status == 200,
            cookie_of(&r).is_some(),
            "{i}: {}",
            r.text()
        );
        statuses.push(r.status);
    }
    let mut expected = vec![200; 5];
    expected.extend([429; 7]);
    assert_eq!(statuses, expected);
    let sessions: Vec<String> = redis_query(&server, "KEYS", "rg:s:*").await;
    assert_eq!(sessions.len(), 5, "{sessions:?}");
    // Not the other routes: a cookie-less visitor still reaches the rest of the app.
    assert_eq!(get(&app, "/api/hello", &[]).await.status, 200);
}
