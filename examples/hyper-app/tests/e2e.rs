//! End to end: the `hyper-app` binary against a real Redis, over real HTTP.

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};

type App = RunningApp;

async fn start(env: &[(&str, &str)]) -> App {
    spawn(env!("CARGO_BIN_EXE_hyper-app"), env).await
}

async fn send(
    app: &App,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    body: &[u8],
) -> RawResponse {
    let cookie = cookie.map(|c| format!("__Host-id={c}"));
    let mut headers: Vec<(&str, &[u8])> = Vec::new();
    if let Some(c) = &cookie {
        headers.push(("Cookie", c.as_bytes()));
    }
    request(app.addr, method, path, &headers, body)
        .await
        .expect("request")
}

fn cookie_of(r: &RawResponse) -> Option<String> {
    r.headers_named("set-cookie").into_iter().find_map(|c| {
        c.strip_prefix("__Host-id=")?
            .split(';')
            .next()
            .map(str::to_owned)
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
