//! End to end: the admin routes of the `axum-app` binary (`ADMIN_TOKEN`), started as a process
//! against a real `redis-server` (and in memory), over real HTTP on loopback.

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};
use tokio::process::Command;

const TOKEN: &str = "s3cret-admin-token-of-32-bytes-at-least";

async fn start(env: &[(&str, &str)]) -> RunningApp {
    let mut env = env.to_vec();
    // Generous: a loaded CI machine running debug builds; the timeout is not what is tested.
    env.insert(0, ("REDIS_TIMEOUT_MS", "5000"));
    spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await
}

/// The app on a fresh Redis with the admin token set and `API_LIMIT=10/minute`.
async fn start_admin(server: &RedisServer) -> RunningApp {
    let url = server.url();
    start(&[
        ("REDIS_URL", &url),
        ("ADMIN_TOKEN", TOKEN),
        ("API_LIMIT", "10/minute"),
    ])
    .await
}

async fn send(
    app: &RunningApp,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> RawResponse {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers: Vec<(&str, &[u8])> = Vec::new();
    if let Some(b) = &bearer {
        headers.push(("Authorization", b.as_bytes()));
    }
    request(app.addr, method, path, &headers, body)
        .await
        .expect("request")
}

async fn admin(app: &RunningApp, method: &str, path: &str, body: &[u8]) -> RawResponse {
    send(app, method, path, Some(TOKEN), body).await
}

fn json(r: &RawResponse) -> serde_json::Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
}

fn assert_problem(r: &RawResponse, status: u16) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(json(r)["status"], status);
}

async fn hello(app: &RunningApp) -> RawResponse {
    send(app, "GET", "/api/hello", None, b"").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_there_are_no_admin_routes() {
    let app = start(&[]).await;
    for (method, path) in [
        ("GET", "/admin/limits/api/127.0.0.1"),
        ("DELETE", "/admin/limits/api/127.0.0.1"),
        ("POST", "/admin/limits/api/127.0.0.1/penalize"),
    ] {
        let r = send(&app, method, path, Some("anything"), br#"{"seconds": 5}"#).await;
        assert_eq!(r.status, 404, "{method} {path}");
    }
}

/// What the app printed on stderr when it refused to start (exit code 2) with `ADMIN_TOKEN`.
async fn refused_at_start(value: &str) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_axum-app"))
        .env_clear()
        .env("BIND", "127.0.0.1:0")
        .env("ADMIN_TOKEN", value)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .unwrap_or_else(|_| panic!("ADMIN_TOKEN={value:?} was accepted"))
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_token_is_refused_at_start() {
    for value in ["", "   "] {
        let stderr = refused_at_start(value).await;
        assert!(stderr.contains("ADMIN_TOKEN is set but empty"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_shorter_than_32_bytes_is_refused_at_start() {
    let short = &TOKEN[..31];
    let stderr = refused_at_start(short).await;
    assert!(
        stderr.contains("ADMIN_TOKEN is 31 bytes long: at least 32 are required"),
        "{stderr}"
    );
    // The message names the variable, never the secret.
    assert!(!stderr.contains(short), "{stderr}");
}

/// After 10 wrong tokens in a minute, the address gets a `429` for any token — the right one
/// too, so a guess cannot be told apart — while another address still gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_throttled_per_client_ip() {
    let app = start(&[("ADMIN_TOKEN", TOKEN), ("TRUSTED_PROXIES", "127.0.0.1/32")]).await;
    let path = "/admin/limits/api/127.0.0.1";
    let addr = app.addr;
    let from = |ip: &'static str, token: &'static str| {
        let bearer = format!("Bearer {token}");
        async move {
            request(
                addr,
                "GET",
                path,
                &[
                    ("Authorization", bearer.as_bytes()),
                    ("X-Forwarded-For", ip.as_bytes()),
                ],
                b"",
            )
            .await
            .expect("request")
        }
    };
    for i in 0..10 {
        assert_eq!(from("203.0.113.9", "guess").await.status, 401, "guess {i}");
    }
    // No token at all is no guess: a plain 401.
    assert_eq!(send(&app, "GET", path, None, b"").await.status, 401);
    for token in ["guess", TOKEN] {
        let r = from("203.0.113.9", token).await;
        assert_problem(&r, 429);
        let retry: u64 = r
            .header("retry-after")
            .and_then(|v| v.parse().ok())
            .expect("Retry-After");
        assert!((1..=60).contains(&retry), "{retry}");
    }
    assert_eq!(from("198.51.100.1", TOKEN).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_token_is_a_401() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_admin(&server).await;
    let path = "/admin/limits/api/127.0.0.1";
    for token in [
        None,
        Some("wrong"),
        Some(&TOKEN[..TOKEN.len() - 1]),
        Some(""),
    ] {
        let r = send(&app, "GET", path, token, b"").await;
        assert_problem(&r, 401);
        assert_eq!(
            r.header("www-authenticate"),
            Some(r#"Bearer realm="admin""#)
        );
    }
    // Not even the rule names leak to a caller without the token.
    let r = send(&app, "GET", "/admin/limits/nope/x", Some("wrong"), b"").await;
    assert_eq!(r.status, 401);
    // Basic credentials are not a bearer token.
    let r = request(
        app.addr,
        "GET",
        path,
        &[("Authorization", format!("Basic {TOKEN}").as_bytes())],
        b"",
    )
    .await
    .expect("request");
    assert_eq!(r.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reset_and_penalize_the_api_rule() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_admin(&server).await;
    for _ in 0..3 {
        assert_eq!(hello(&app).await.status, 200);
    }
    // The test connects from 127.0.0.1: logged out, the `api` key is the client IP.
    let path = "/admin/limits/api/127.0.0.1";
    for _ in 0..2 {
        let r = admin(&app, "GET", path, b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let seen = json(&r);
        assert_eq!(seen["limit"], 10);
        assert_eq!(seen["remaining"], 7, "{seen}");
        assert_eq!(seen["allowed"], true);
        assert_eq!(seen["blocked_for_ms"], serde_json::Value::Null);
    }
    let r = admin(&app, "DELETE", path, b"").await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(json(&admin(&app, "GET", path, b"").await)["remaining"], 10);

    let r = admin(
        &app,
        "POST",
        &format!("{path}/penalize"),
        br#"{"seconds": 120}"#,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text());
    let limited = hello(&app).await;
    assert_eq!(limited.status, 429);
    let retry: u64 = limited
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((119..=120).contains(&retry), "Retry-After {retry}");
    let seen = json(&admin(&app, "GET", path, b"").await);
    assert!(
        seen["blocked_for_ms"].as_u64().expect("blocked") > 118_000,
        "{seen}"
    );

    // The runtime allow list lifts the penalty and counts nothing.
    let r = admin(
        &app,
        "POST",
        &format!("{path}/allow"),
        br#"{"seconds": 60}"#,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text());
    for _ in 0..15 {
        assert_eq!(hello(&app).await.status, 200);
    }
    let seen = json(&admin(&app, "GET", path, b"").await);
    assert_eq!(seen["remaining"], 10, "{seen}");
    assert!(seen["allowed_for_ms"].as_u64().expect("allowed") > 58_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start_admin(&server).await;
    let r = admin(&app, "GET", "/admin/limits/nope/127.0.0.1", b"").await;
    assert_problem(&r, 404);
    assert!(json(&r)["detail"].as_str().unwrap().contains("api, calls"));
    for key in ["not-an-ip", "300.1.1.1", "user:", "user:bad%20name", "%00"] {
        let r = admin(&app, "GET", &format!("/admin/limits/api/{key}"), b"").await;
        assert_problem(&r, 400);
    }
    assert_problem(
        &admin(&app, "DELETE", "/admin/limits/calls/hello", b"").await,
        400,
    );
    let penalize = "/admin/limits/api/127.0.0.1/penalize";
    for body in [
        &b""[..],
        b"{",
        br#"{"seconds": 0}"#,
        br#"{"seconds": -5}"#,
        br#"{"seconds": "ten"}"#,
        br#"{"seconds": 1e99}"#,
        br#"{"seconds": 99999999999}"#,
        br#"{"minutes": 5}"#,
    ] {
        let r = admin(&app, "POST", penalize, body).await;
        assert_problem(&r, 400);
    }
    // None of it touched the client: its quota is whole.
    let seen = json(&admin(&app, "GET", "/admin/limits/api/127.0.0.1", b"").await);
    assert_eq!(seen["remaining"], 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logged_in_users_key_and_the_calls_rule() {
    let app = start(&[("ADMIN_TOKEN", TOKEN), ("CALLS_LIMIT", "3/minute")]).await;
    // Calls from one number, spelled two ways: one key.
    for from in ["+1 (555) 010-0000", "0015550100000"] {
        let body = serde_json::json!({ "from": from, "to": "+15550100001" }).to_string();
        let r = request(
            app.addr,
            "POST",
            "/calls",
            &[("Content-Type", b"application/json")],
            body.as_bytes(),
        )
        .await
        .expect("request");
        assert_eq!(r.status, 200);
    }
    let seen = json(&admin(&app, "GET", "/admin/limits/calls/+15550100000", b"").await);
    assert_eq!(seen["remaining"], 1, "{seen}");
    // Memory backend: the same routes; a user that never logged in has the whole quota.
    let seen = json(&admin(&app, "GET", "/admin/limits/api/user:alice", b"").await);
    assert_eq!(seen["remaining"], 60, "{seen}");
}

/// Every admin operation leaves a line on stderr naming it and the client; the token never
/// appears, not even when a wrong one is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_operations_are_logged_without_the_token() {
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_axum-app"))
        .env_clear()
        .env("BIND", "127.0.0.1:0")
        .env("ADMIN_TOKEN", TOKEN)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(std::time::Duration::from_secs(30), stdout.next_line())
        .await
        .expect("listening in time")
        .expect("stdout")
        .expect("a line");
    let addr: std::net::SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let bearer = format!("Bearer {TOKEN}");
    let with_token: &[(&str, &[u8])] = &[
        ("Authorization", bearer.as_bytes()),
        ("Content-Type", b"application/json"),
    ];
    let path = "/admin/limits/api/127.0.0.1";
    for (method, path, body, status) in [
        ("GET", path.to_owned(), &b""[..], 200),
        ("DELETE", path.to_owned(), b"", 204),
        (
            "POST",
            format!("{path}/penalize"),
            br#"{"seconds": 5}"#,
            204,
        ),
        ("POST", format!("{path}/allow"), br#"{"seconds": 5}"#, 204),
        ("POST", "/slow/invalidate".to_owned(), b"{}", 204),
    ] {
        let r = request(addr, method, &path, with_token, body)
            .await
            .expect("request");
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
    }
    let wrong = format!("Bearer {}", &TOKEN[1..]);
    let r = request(
        addr,
        "GET",
        path,
        &[("Authorization", wrong.as_bytes())],
        b"",
    )
    .await
    .expect("request");
    assert_eq!(r.status, 401);
    child.start_kill().expect("kill");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .await
        .expect("read stderr");
    let logged = |needle: &[&str]| {
        stderr
            .lines()
            .any(|l| needle.iter().all(|n| l.contains(n)) && l.contains("127.0.0.1"))
    };
    for op in ["inspect", "reset", "penalize", "allow"] {
        assert!(
            logged(&["admin operation", op, "api"]),
            "{op} in:\n{stderr}"
        );
    }
    assert!(
        logged(&["admin operation", "/slow/invalidate"]),
        "invalidate in:\n{stderr}"
    );
    assert!(logged(&["wrong admin token"]), "{stderr}");
    assert!(
        !stderr.contains(&TOKEN[1..]),
        "the token was logged:\n{stderr}"
    );
}
