//! End to end: `API_RESERVE_PRO` keeps the last share of `API_TOTAL_LIMIT` (every `/api/*`
//! caller together) for users on the pro plan, on the `axum-app` binary over real HTTP, against
//! a real `redis-server`.

use std::net::SocketAddr;

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::spawn;
use redis_guard_testkit::http::request;

/// Logs `user` in: its session cookie (`id=…`).
async fn session_of(addr: SocketAddr, user: &str) -> String {
    let body = format!(r#"{{"username": "{user}", "password": "password"}}"#);
    let json: &[(&str, &[u8])] = &[("Content-Type", b"application/json")];
    let r = request(addr, "POST", "/login", json, body.as_bytes())
        .await
        .expect("login");
    assert_eq!(r.status, 200, "{}", r.text());
    let cookies = r.headers_named("set-cookie");
    let session = cookies
        .iter()
        .find_map(|c| c.split(';').next().filter(|p| p.contains("id=")));
    session.expect("a session cookie").to_owned()
}

/// The statuses of `n` calls of `GET /api/hello` with `cookie` (`None`: anonymous).
async fn statuses(addr: SocketAddr, cookie: Option<&str>, n: usize) -> Vec<u16> {
    let headers: Vec<(&str, &[u8])> = cookie.iter().map(|c| ("Cookie", c.as_bytes())).collect();
    let mut seen = Vec::new();
    while seen.len() < n {
        let r = request(addr, "GET", "/api/hello", &headers, b"");
        seen.push(r.await.expect("request").status);
    }
    seen
}

/// Free and anonymous traffic stops at 7 of the 10 a minute; the pro user still gets the last 3
/// (and no more), while a logged-in free user does not.
#[tokio::test]
async fn the_pro_reserve_outlasts_bulk_traffic() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let env = [
        ("API_LIMIT", "100/minute"),
        ("API_TOTAL_LIMIT", "10/minute"),
        ("API_RESERVE_PRO", "30%"),
        ("PRO_USERS", "carol"),
        ("REDIS_TIMEOUT_MS", "5000"),
        ("REDIS_URL", url.as_str()),
    ];
    let app = spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await;
    let (dave, carol) = (
        session_of(app.addr, "dave").await,
        session_of(app.addr, "carol").await,
    );
    let mut bulk = vec![200; 7];
    bulk.push(429);
    assert_eq!(statuses(app.addr, None, 8).await, bulk, "anonymous");
    assert_eq!(
        statuses(app.addr, Some(&dave), 1).await,
        [429],
        "dave, free plan"
    );
    assert_eq!(
        statuses(app.addr, Some(&carol), 4).await,
        [200, 200, 200, 429],
        "carol, pro"
    );
}
