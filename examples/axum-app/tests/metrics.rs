//! `GET /metrics` of the `axum-app` binary over real HTTP, on the memory backend and on a real
//! `redis-server`: the Prometheus text format, outside the session and rate-limit layers, and
//! the `api` rule's counters after requests past `API_LIMIT`; behind the admin token on the main
//! address, open on `METRICS_BIND`.

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};

const TOKEN: &str = "metrics-test-admin-token-0123456789abcdef";

/// `path` with the admin token.
async fn get(app: &RunningApp, path: &str) -> RawResponse {
    let bearer = format!("Bearer {TOKEN}");
    request(
        app.addr,
        "GET",
        path,
        &[("Authorization", bearer.as_bytes())],
        b"",
    )
    .await
    .expect("request")
}

/// The value of the sample written exactly as `series` (name and labels), if there is one.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn counts_the_api_rule(env: &[(&str, &str)], backend: &str) {
    let mut env = env.to_vec();
    env.extend([
        ("API_LIMIT", "5/minute"),
        ("REDIS_TIMEOUT_MS", "5000"),
        ("ADMIN_TOKEN", TOKEN),
    ]);
    let app = spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await;

    let first = get(&app, "/metrics").await;
    assert_eq!(first.status, 200);
    let content_type = first.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    // Outside the session and rate-limit layers.
    for header in ["set-cookie", "ratelimit", "ratelimit-policy"] {
        assert_eq!(first.header(header), None, "{header} on /metrics");
    }
    let info = format!("axum_app_info{{backend=\"{backend}\"}}");
    assert_eq!(sample(&first.text(), &info), Some(1.0), "{}", first.text());

    // Scrapes cost no quota: after these, the API still has its 5.
    for _ in 0..10 {
        assert_eq!(get(&app, "/metrics").await.status, 200);
    }
    let mut statuses = Vec::new();
    for _ in 0..7 {
        statuses.push(get(&app, "/api/hello").await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);

    let text = get(&app, "/metrics").await.text();
    for (series, expected) in [
        ("redis_guard_rate_limit_allowed_total{rule=\"api\"}", 5.0),
        ("redis_guard_rate_limit_limited_total{rule=\"api\"}", 2.0),
    ] {
        assert_eq!(sample(&text, series), Some(expected), "{series} in\n{text}");
    }
    // Rule names, never keys: the client address appears in no label.
    assert!(!text.contains("127.0.0.1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_the_memory_backend() {
    counts_the_api_rule(&[], "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_redis() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    counts_the_api_rule(&[("REDIS_URL", &url)], "redis").await;
}

/// On the main address `/metrics` needs the admin token (a 404 without `ADMIN_TOKEN`);
/// `METRICS_BIND` serves it without one on its own address, and only it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_token_or_their_own_address() {
    let app = spawn(
        env!("CARGO_BIN_EXE_axum-app"),
        &[("ADMIN_TOKEN", TOKEN), ("METRICS_BIND", "127.0.0.1:0")],
    )
    .await;
    let anonymous = request(app.addr, "GET", "/metrics", &[], b"")
        .await
        .expect("request");
    assert_eq!(anonymous.status, 401);
    assert!(!anonymous.text().contains("axum_app_info"));
    let wrong = request(
        app.addr,
        "GET",
        "/metrics",
        &[("Authorization", b"Bearer not-the-token")],
        b"",
    )
    .await
    .expect("request");
    assert_eq!(wrong.status, 401);
    assert_eq!(get(&app, "/metrics").await.status, 200);

    let metrics_addr: std::net::SocketAddr = app
        .line
        .split("metrics on http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no metrics address in {:?}", app.line));
    let open = request(metrics_addr, "GET", "/metrics", &[], b"")
        .await
        .expect("request");
    assert_eq!(open.status, 200);
    assert!(open.text().contains("axum_app_info"), "{}", open.text());
    // Nothing else is served there.
    let other = request(metrics_addr, "GET", "/api/hello", &[], b"")
        .await
        .expect("request");
    assert_eq!(other.status, 404);

    let without_token = spawn(env!("CARGO_BIN_EXE_axum-app"), &[]).await;
    let r = request(without_token.addr, "GET", "/metrics", &[], b"")
        .await
        .expect("request");
    assert_eq!(r.status, 404);
}
