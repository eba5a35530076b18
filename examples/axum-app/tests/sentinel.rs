//! End to end on Redis Sentinel: the `axum-app` binary with `REDIS_SENTINEL` and
//! `REDIS_SENTINEL_MASTER`, against a real primary and a sentinel watching it.

use std::time::Duration;

use redis_guard_testkit::app::spawn;
use redis_guard_testkit::http::{RawResponse, request};
use redis_guard_testkit::{RedisSentinels, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_axum-app");

async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    cookie: Option<&str>,
    body: &str,
) -> RawResponse {
    let cookie = cookie.map(|c| format!("__Host-id={c}"));
    let mut headers: Vec<(&str, &[u8])> = vec![("Content-Type", b"application/json")];
    if let Some(c) = &cookie {
        headers.push(("Cookie", c.as_bytes()));
    }
    request(addr, "POST", path, &headers, body.as_bytes())
        .await
        .expect("request")
}

#[tokio::test]
async fn calls_are_limited_and_sessions_kept_on_the_primary_a_sentinel_names() {
    let (primary, sentinels) = tokio::task::spawn_blocking(|| {
        let primary = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let sentinels = RedisSentinels::start(primary.port(), 1, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}"));
        (primary, sentinels)
    })
    .await
    .expect("start");
    let list = sentinels.addrs().join(",");
    let app = spawn(
        BIN,
        &[
            ("REDIS_TIMEOUT_MS", "5000"),
            ("REDIS_SENTINEL", &list),
            ("REDIS_SENTINEL_MASTER", RedisSentinels::MASTER),
        ],
    )
    .await;
    assert!(app.line.contains("sentinel"), "{}", app.line);
    let call = r#"{"from":"+15550100000","to":"+15550109999"}"#;
    for i in 0..5 {
        let r = post(app.addr, "/calls", None, call).await;
        assert!(r.text().contains("connected"), "call {i}: {}", r.text());
    }
    assert!(
        post(app.addr, "/calls", None, call)
            .await
            .text()
            .contains("rejected")
    );
    // A session, kept on the primary between requests.
    let r = post(
        app.addr,
        "/login",
        None,
        r#"{"username":"alice","password":"password"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let set = r.header("set-cookie").expect("cookie");
    let id = set
        .split(';')
        .next()
        .and_then(|c| c.split_once('='))
        .expect("id")
        .1
        .to_owned();
    for visits in 1..=2 {
        let me = request(
            app.addr,
            "GET",
            "/me",
            &[("Cookie", format!("__Host-id={id}").as_bytes())],
            b"",
        )
        .await
        .expect("request");
        assert!(
            me.text().contains(&format!("\"visits\":{visits}")),
            "{}",
            me.text()
        );
    }
    let mut conn = primary.connect().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rg:s:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert_eq!(keys.len(), 1, "{keys:?}");
}

#[tokio::test]
async fn bad_sentinel_settings_exit_with_a_message_naming_the_variable() {
    for (env, expect) in [
        (
            &[("REDIS_SENTINEL", "127.0.0.1:1")][..],
            "REDIS_SENTINEL_MASTER must name",
        ),
        (
            &[
                ("REDIS_SENTINEL", "nowhere"),
                ("REDIS_SENTINEL_MASTER", "m"),
            ],
            "is not host:port",
        ),
        (&[("REDIS_SENTINEL_MASTER", "m")], "without REDIS_SENTINEL"),
        // A sentinel that does not answer is one not up yet: the app starts (lazily) and asks
        // again in the background. A master that cannot be a name stops it.
        (
            &[
                ("REDIS_SENTINEL", "127.0.0.1:1"),
                ("REDIS_SENTINEL_MASTER", "a/1"),
            ],
            "is not a master name",
        ),
    ] {
        let out = tokio::process::Command::new(BIN)
            .env_clear()
            .env("BIND", "127.0.0.1:0")
            .envs(env.iter().copied())
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("exits at once")
            .expect("runs");
        assert!(!out.status.success(), "{env:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expect), "{env:?}: {stderr}");
    }
}
