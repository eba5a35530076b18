//! End to end: `API_RESERVE_PRO` keeps the last share of `API_TOTAL_LIMIT` (every `/api/*`
//! caller together) for users on the pro plan, on the `axum-app` binary over real HTTP, against
//! a real `redis-server`.

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::spawn;
use redis_guard_testkit::http::request;

/// Free and anonymous traffic stops at 7 of the 10 a minute; the pro user still gets the last 3
/// (and no more), while a logged-in free user does not.
#[tokio::test]
async fn the_pro_reserve_outlasts_bulk_traffic() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let app = spawn(
        env!("CARGO_BIN_EXE_axum-app"),
        &[
            ("REDIS_URL", url.as_str()),
            ("REDIS_TIMEOUT_MS", "5000"),
            ("API_LIMIT", "100/minute"),
            ("API_TOTAL_LIMIT", "10/minute"),
            ("API_RESERVE_PRO", "30%"),
            ("PRO_USERS", "carol"),
        ],
    )
    .await;
    let addr = app.addr;
    let login = |user: &'static str| async move {
        let body = serde_json::json!({ "username": user, "password": "password" }).to_string();
        let headers: &[(&str, &[u8])] = &[("Content-Type", b"application/json")];
        let r = request(addr, "POST", "/login", headers, body.as_bytes())
            .await
            .expect("login");
        assert_eq!(r.status, 200, "{}", r.text());
        r.headers_named("set-cookie")
            .into_iter()
            .find_map(|c| c.split(';').next().filter(|p| p.contains("id=")))
            .expect("session cookie")
            .to_owned()
    };
    let (dave, carol) = (login("dave").await, login("carol").await);
    let statuses = |cookie: Option<String>, n: usize| async move {
        let mut seen = Vec::new();
        for _ in 0..n {
            let headers: Vec<(&str, &[u8])> =
                cookie.iter().map(|c| ("Cookie", c.as_bytes())).collect();
            let r = request(addr, "GET", "/api/hello", &headers, b"")
                .await
                .expect("request");
            seen.push(r.status);
        }
        seen
    };
    let mut bulk = vec![200; 7];
    bulk.push(429);
    assert_eq!(statuses(None, 8).await, bulk, "anonymous");
    assert_eq!(statuses(Some(dave), 1).await, [429], "dave, free plan");
    assert_eq!(
        statuses(Some(carol), 4).await,
        [200, 200, 200, 429],
        "carol, pro"
    );
}
