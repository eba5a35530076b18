//! Fault injection at the example's level: the `axum-app` binary as a process, over real HTTP on
//! loopback, its Redis killed and restarted; and `REDIS_URL`s that cannot work, at start.
//! Figures printed (`cargo test -p example-axum-app --test faults -- --nocapture`).

use std::process::Output;
use std::time::{Duration, Instant};

use example_shared::testing::tls::{TlsRedis, assert_a_bad_redis_tls_ca_stops_the_app};
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};
use redis_guard_testkit::not_redis::Behaviour;
use redis_guard_testkit::{NotRedis, RedisServer};
use tokio::process::Command;

/// How long Redis may take to decide again once it is back.
const RECOVERY: Duration = Duration::from_secs(2);

/// How long the app may take to refuse a `REDIS_URL` that cannot work: the handshake timeout
/// (2 s), plus a margin for a loaded machine.
const BAD_URL_EXIT: Duration = Duration::from_secs(5);

async fn hello(app: &RunningApp) -> RawResponse {
    request(app.addr, "GET", "/api/hello", &[], b"")
        .await
        .expect("request")
}

/// The quota the answer's `RateLimit-Policy` names: 10 when Redis decided, 5 when the fallback
/// did (`API_LIMIT=10/minute` ÷ `REPLICAS=2`), none when nobody did.
fn quota(r: &RawResponse) -> Option<u32> {
    r.header("ratelimit-policy")?
        .split(";q=")
        .nth(1)?
        .split(';')
        .next()?
        .parse()
        .ok()
}

/// `API_LIMIT=10/minute` and `REPLICAS=2`: with Redis down, `fallback` admits 5 per client in
/// this instance then 429, `closed` answers 503 with `Retry-After`, `open` admits everything
/// without headers. Redis restarted on the same port decides again within two seconds, in the
/// same processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_then_restarted_under_each_policy() {
    let mut server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let start = |policy| {
        let url = url.clone();
        async move {
            spawn(
                env!("CARGO_BIN_EXE_axum-app"),
                &[
                    ("REDIS_URL", url.as_str()),
                    ("API_LIMIT", "10/minute"),
                    ("REPLICAS", "2"),
                    ("REDIS_TIMEOUT_MS", "250"),
                    ("LIMIT_ON_ERROR", policy),
                ],
            )
            .await
        }
    };
    let apps = [
        ("fallback", start("fallback").await),
        ("closed", start("closed").await),
        ("open", start("open").await),
    ];
    for (name, app) in &apps {
        assert_eq!(quota(&hello(app).await), Some(10), "{name}: Redis decides");
    }
    server.stop();
    println!("axum-app, API_LIMIT=10/minute, REPLICAS=2, Redis killed:");
    for (name, app) in &apps {
        let started = Instant::now();
        let mut answers = Vec::new();
        for _ in 0..8 {
            answers.push(hello(app).await);
        }
        let took = started.elapsed();
        let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
        println!(
            "  LIMIT_ON_ERROR={name}: {statuses:?} in {:.0} ms",
            took.as_secs_f64() * 1e3
        );
        match *name {
            "fallback" => {
                assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
                assert!(
                    answers.iter().all(|r| quota(r) == Some(5)),
                    "the fallback's share"
                );
            }
            "closed" => {
                assert_eq!(statuses, [503; 8]);
                assert!(answers.iter().all(|r| r.header("retry-after").is_some()));
            }
            _ => {
                assert_eq!(statuses, [200; 8]);
                assert!(
                    answers.iter().all(|r| quota(r).is_none()),
                    "admitted undecided"
                );
            }
        }
    }

    tokio::task::block_in_place(|| server.restart()).expect("restart on the same port");
    let restarted = Instant::now();
    println!("Redis restarted on the same port:");
    let (a, b, c) = tokio::join!(
        redis_decides_again(&apps[0], restarted),
        redis_decides_again(&apps[1], restarted),
        redis_decides_again(&apps[2], restarted),
    );
    for ((name, _), (status, took)) in apps.iter().zip([a, b, c]) {
        println!(
            "  LIMIT_ON_ERROR={name}: Redis decides again ({status} after {:.0} ms)",
            took.as_secs_f64() * 1e3
        );
        assert!(took < RECOVERY, "{name}: {took:?}");
    }
}

/// Polls `/api/hello` every 20 ms until Redis decides (`q=10`); that answer's status, and when.
async fn redis_decides_again((name, app): &(&str, RunningApp), since: Instant) -> (u16, Duration) {
    loop {
        let r = hello(app).await;
        if quota(&r) == Some(10) {
            return (r.status, since.elapsed());
        }
        assert!(
            since.elapsed() < RECOVERY,
            "{name}: Redis does not decide again within {RECOVERY:?}; last answer {} {:?}",
            r.status,
            r.header("ratelimit-policy")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the app with `REDIS_URL=url` and nothing else; its output and how long it ran.
async fn run_with_url(url: &str) -> (Duration, Output) {
    let started = Instant::now();
    let run = Command::new(env!("CARGO_BIN_EXE_axum-app"))
        .env_clear()
        .env("BIND", "127.0.0.1:0")
        .env("REDIS_URL", url)
        .kill_on_drop(true)
        .output();
    // An app that accepts the URL starts serving and never exits.
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap_or_else(|_| panic!("REDIS_URL={url:?} was accepted: the app kept running"))
        .expect("run");
    (started.elapsed(), out)
}

/// A `REDIS_URL` that cannot work stops the app at start, within a few seconds, with exit
/// status 2 and a message naming `REDIS_URL` and what is wrong: unparsable, a server that is not
/// Redis (an HTTP reply), a Redis that wants a password. The password of a URL is never printed.
/// (Nothing listening, or a server that does not answer, is a Redis not up yet: the app starts,
/// see `the_app_starts_with_redis_down_and_decides_in_redis_once_it_is_up`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_url_that_cannot_work_stops_the_app_at_start() {
    let http = NotRedis::start(Behaviour::Http).expect("listen");
    let guarded =
        RedisServer::start_with(&["--requirepass", "s3cret"]).unwrap_or_else(|e| panic!("{e}"));
    let cases = [
        ("unparsable", "not a url".to_owned(), "REDIS_URL"),
        (
            "an HTTP server",
            http.url(),
            "does not speak the Redis protocol",
        ),
        ("Redis wants a password", guarded.url(), "wants a password"),
        (
            "a wrong password",
            format!("redis://:hunter2x@127.0.0.1:{}/", guarded.port()),
            "wants a password",
        ),
    ];
    println!("axum-app with a REDIS_URL that cannot work:");
    for (name, url, expect) in cases {
        let (took, out) = run_with_url(&url).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let message = stderr
            .lines()
            .find(|l| l.contains("REDIS_URL"))
            .unwrap_or_else(|| panic!("{name}: no line names REDIS_URL in {stderr}"));
        println!(
            "  {name}: exit {:?} after {:.0} ms: {message}",
            out.status.code(),
            took.as_secs_f64() * 1e3
        );
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(message.contains(expect), "{name}: {message}");
        assert!(
            !stderr.contains("hunter2x"),
            "{name}: the password leaked: {stderr}"
        );
        assert!(took < BAD_URL_EXIT, "{name}: {took:?}");
    }
}

/// Two instances started while nothing listens at `REDIS_URL` (`API_LIMIT=10/minute`,
/// `REPLICAS=2`): both serve at once, `/healthz` answers 200, and `/api/hello` is answered by
/// each one's `LIMIT_ON_ERROR` (`closed`: 503; `fallback`: this instance's share, 5). Once a
/// `redis-server` starts on that port, both decide in Redis (quota 10, the keys in that Redis)
/// within a second, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_starts_with_redis_down_and_decides_in_redis_once_it_is_up() {
    let port = redis_guard_testkit::free_port().expect("a free port");
    let url = format!("redis://127.0.0.1:{port}/");
    let start = |policy| {
        let url = url.clone();
        async move {
            spawn(
                env!("CARGO_BIN_EXE_axum-app"),
                &[
                    ("REDIS_URL", url.as_str()),
                    ("API_LIMIT", "10/minute"),
                    ("REPLICAS", "2"),
                    ("REDIS_TIMEOUT_MS", "250"),
                    ("LIMIT_ON_ERROR", policy),
                ],
            )
            .await
        }
    };
    let closed = start("closed").await;
    let fallback = start("fallback").await;
    for app in [&closed, &fallback] {
        let health = request(app.addr, "GET", "/healthz", &[], b"")
            .await
            .expect("request");
        assert_eq!(health.status, 200, "{}", health.text());
    }
    let r = hello(&closed).await;
    assert_eq!((r.status, quota(&r)), (503, None), "{}", r.text());
    let r = hello(&fallback).await;
    assert_eq!((r.status, quota(&r)), (200, Some(5)), "{}", r.text());

    let server = RedisServer::start_on(port, &[]).unwrap_or_else(|e| panic!("{e}"));
    let up = Instant::now();
    let mut decided = [None, None];
    while decided.iter().any(Option::is_none) && up.elapsed() < Duration::from_secs(5) {
        for (i, app) in [&closed, &fallback].into_iter().enumerate() {
            if decided[i].is_none() && quota(&hello(app).await) == Some(10) {
                decided[i] = Some(up.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("axum-app started with Redis down; Redis decided {decided:?} after it came up");
    for (name, took) in ["closed", "fallback"].iter().zip(decided) {
        let took = took.unwrap_or_else(|| panic!("{name}: Redis never decided"));
        assert!(took < Duration::from_secs(1), "{name}: {took:?}");
    }
    let keys: i64 = redis::cmd("DBSIZE")
        .query_async(&mut server.connect().await)
        .await
        .expect("DBSIZE");
    assert!(keys > 0, "the decisions are in Redis");
}

/// `REDIS_URL=rediss://…` with `REDIS_TLS_CA` naming the PEM of the server's certificate
/// authority: the app decides in that TLS-only Redis. A `REDIS_TLS_CA` that is missing or holds
/// no certificate stops it at start, naming the variable and the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_connects_over_tls_with_redis_tls_ca() {
    let tls = TlsRedis::start();
    let app = spawn(
        env!("CARGO_BIN_EXE_axum-app"),
        &[
            ("REDIS_URL", tls.server.url().as_str()),
            ("REDIS_TLS_CA", tls.ca_file.as_str()),
            ("API_LIMIT", "10/minute"),
            ("REPLICAS", "2"),
            ("REDIS_TIMEOUT_MS", "250"),
            ("LIMIT_ON_ERROR", "closed"),
        ],
    )
    .await;
    let r = hello(&app).await;
    assert_eq!((r.status, quota(&r)), (200, Some(10)), "{}", r.text());
    let keys: i64 = redis::cmd("DBSIZE")
        .query_async(&mut tls.server.connect().await)
        .await
        .expect("DBSIZE");
    assert!(keys > 0, "the decisions are in the TLS Redis");

    assert_a_bad_redis_tls_ca_stops_the_app(env!("CARGO_BIN_EXE_axum-app"), &tls.server.url())
        .await;
}
