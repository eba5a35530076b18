//! End to end: the `/api/*` rule's rollout modes (`API_LIMIT_MODE`, `API_CANDIDATE_LIMIT`), on
//! the `axum-app` binary over real HTTP, against a real `redis-server`.

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};

const TOKEN: &str = "rollout-test-admin-token-0123456789abcdef";

async fn start(server: &RedisServer, env: &[(&str, &str)]) -> RunningApp {
    let url = server.url();
    let mut env = env.to_vec();
    env.extend([
        ("REDIS_URL", url.as_str()),
        ("REDIS_TIMEOUT_MS", "5000"),
        ("ADMIN_TOKEN", TOKEN),
    ]);
    spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await
}

async fn hello(app: &RunningApp) -> RawResponse {
    request(app.addr, "GET", "/api/hello", &[], b"")
        .await
        .expect("request")
}

/// The value of the sample written exactly as `series` (name and labels), if there is one.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Shadow: never a 429 and no rate-limit header, however far over the limit; the would-be
/// 429s are counted in `/metrics`.
#[tokio::test]
async fn in_shadow_mode_the_api_limit_blocks_nothing() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start(
        &server,
        &[("API_LIMIT", "3/minute"), ("API_LIMIT_MODE", "shadow")],
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let r = hello(&app).await;
        assert_eq!(r.header("ratelimit"), None);
        assert_eq!(r.header("ratelimit-policy"), None);
        statuses.push(r.status);
    }
    let bearer = format!("Bearer {TOKEN}");
    let metrics = request(
        app.addr,
        "GET",
        "/metrics",
        &[("Authorization", bearer.as_bytes())],
        b"",
    )
    .await
    .expect("request")
    .text();
    let count = |name: &str| sample(&metrics, &format!("{name}{{rule=\"api\"}}"));
    let (allowed, shadow, limited) = (
        count("redis_guard_rate_limit_allowed_total"),
        count("redis_guard_rate_limit_shadow_limited_total"),
        count("redis_guard_rate_limit_limited_total"),
    );
    println!(
        "API_LIMIT=3/minute API_LIMIT_MODE=shadow, 10 requests: {statuses:?}; /metrics: allowed {allowed:?}, shadow-limited {shadow:?}, limited {limited:?}"
    );
    assert_eq!(statuses, [200; 10]);
    assert_eq!(
        (allowed, shadow, limited),
        (Some(3.0), Some(7.0), None),
        "{metrics}"
    );
}

/// Soft: admitted, with `RateLimit-Exceeded` once over; a candidate never shows.
#[tokio::test]
async fn in_soft_mode_the_api_limit_admits_and_says_so() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start(
        &server,
        &[
            ("API_LIMIT", "3/minute"),
            ("API_LIMIT_MODE", "soft"),
            ("API_CANDIDATE_LIMIT", "1/minute"),
        ],
    )
    .await;
    let mut seen = Vec::new();
    for _ in 0..5 {
        let r = hello(&app).await;
        assert_eq!(r.header("ratelimit-policy"), Some("\"api\";q=3;w=60"));
        seen.push((r.status, r.header("ratelimit-exceeded").map(str::to_owned)));
    }
    let over = Some("\"api\"".to_owned());
    assert_eq!(
        seen,
        [
            (200, None),
            (200, None),
            (200, None),
            (200, over.clone()),
            (200, over)
        ]
    );
}

/// `GET /export` costs 10 units of the `/api/*` rule: its `RateLimit` remaining drops by 10.
#[tokio::test]
async fn an_export_costs_ten_api_requests() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start(&server, &[("API_LIMIT", "25/minute")]).await;
    let remaining = |r: &RawResponse| {
        r.header("ratelimit")
            .and_then(|v| v.split(';').find_map(|p| p.strip_prefix("r=")))
            .map(str::to_owned)
    };
    let mut seen = Vec::new();
    for path in ["/api/hello", "/export", "/export", "/api/hello", "/export"] {
        let r = request(app.addr, "GET", path, &[], b"")
            .await
            .expect("request");
        seen.push((path, r.status, remaining(&r)));
    }
    let r = |n: &str| Some(n.to_owned());
    assert_eq!(
        seen,
        [
            ("/api/hello", 200, r("24")),
            ("/export", 200, r("14")),
            ("/export", 200, r("4")),
            ("/api/hello", 200, r("3")),
            ("/export", 429, r("3")),
        ]
    );
}

/// The plan comes from the server: a logged-in user named in `PRO_USERS` gets `API_PRO_LIMIT`,
/// everyone else `API_LIMIT`, and an `X-Plan: pro` header changes nothing (it chose the plan
/// once); `RateLimit-Policy` shows the plan's quota.
#[tokio::test]
async fn the_plan_comes_from_pro_users_not_from_a_header() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start(
        &server,
        &[
            ("API_LIMIT", "3/minute"),
            ("API_PRO_LIMIT", "8/minute"),
            ("PRO_USERS", "Carol"),
        ],
    )
    .await;
    let login = |user: &str| {
        let body = serde_json::json!({ "username": user, "password": "password" }).to_string();
        let addr = app.addr;
        async move {
            let r = request(
                addr,
                "POST",
                "/login",
                &[("Content-Type", b"application/json")],
                body.as_bytes(),
            )
            .await
            .expect("login");
            assert_eq!(r.status, 200, "{}", r.text());
            r.headers_named("set-cookie")
                .into_iter()
                .find_map(|c| c.split(';').next().filter(|p| p.contains("id=")))
                .expect("session cookie")
                .to_owned()
        }
    };
    let (dave, carol) = (login("dave").await, login("carol").await);
    let calls = |cookie: Option<String>, n: usize| {
        let addr = app.addr;
        async move {
            let mut seen = Vec::new();
            for _ in 0..n {
                let mut headers: Vec<(&str, &[u8])> = vec![("X-Plan", b"pro")];
                if let Some(c) = &cookie {
                    headers.push(("Cookie", c.as_bytes()));
                }
                let r = request(addr, "GET", "/api/hello", &headers, b"")
                    .await
                    .expect("request");
                seen.push((r.status, r.header("ratelimit-policy").map(str::to_owned)));
            }
            seen
        }
    };
    let free = Some("\"api\";q=3;w=60".to_owned());
    let pro = Some("\"api\";q=8;w=60".to_owned());
    let mut expected = vec![(200, free.clone()); 3];
    expected.push((429, free));
    assert_eq!(calls(None, 4).await, expected, "anonymous, X-Plan: pro");
    assert_eq!(calls(Some(dave), 4).await, expected, "dave, X-Plan: pro");
    let mut expected = vec![(200, pro.clone()); 8];
    expected.push((429, pro));
    assert_eq!(calls(Some(carol), 9).await, expected, "carol, in PRO_USERS");
}
