//! End to end: `GET /report` holds a concurrency lease, on a real `redis-server`, over real HTTP:
//! at most `REPORT_CONCURRENCY` reports in flight per client, and the leases of a killed instance
//! expire.

use std::time::{Duration, Instant};

use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};

async fn start(server: &RedisServer, env: &[(&str, &str)]) -> RunningApp {
    let url = server.url();
    let mut env = env.to_vec();
    env.extend([("REDIS_URL", url.as_str()), ("REDIS_TIMEOUT_MS", "5000")]);
    spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await
}

async fn report(app: &RunningApp, ms: u64) -> u16 {
    let path = format!("/report?ms={ms}");
    request(app.addr, "GET", &path, &[], b"")
        .await
        .expect("request")
        .status
}

#[tokio::test]
async fn two_reports_run_at_once_and_a_third_waits() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start(&server, &[]).await;
    let (a, b, c) = tokio::join!(report(&app, 2000), report(&app, 2000), report(&app, 2000));
    let mut statuses = [a, b, c];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 429]);
    let denied = request(app.addr, "GET", "/report?ms=0", &[], b"")
        .await
        .expect("request");
    assert_eq!(
        denied.status, 200,
        "the leases were released when the reports ended"
    );
}

/// Starts two reports of `ms` on `app` and waits until both hold their lease (read from Redis:
/// a probe request could itself take a lease from them).
async fn take_both(
    app: &RunningApp,
    server: &RedisServer,
    ms: u64,
) -> Vec<tokio::task::JoinHandle<std::io::Result<RawResponse>>> {
    let path = format!("/report?ms={ms}");
    let running = (0..2)
        .map(|_| {
            let (addr, path) = (app.addr, path.clone());
            tokio::spawn(async move { request(addr, "GET", &path, &[], b"").await })
        })
        .collect();
    let held = async {
        while leases_held(server).await < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("both reports running");
    running
}

/// The leases held in Redis, over every report key (one client here).
async fn leases_held(server: &RedisServer) -> u64 {
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rg:rl:report:cc:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    let mut held = 0;
    for key in keys {
        let n: u64 = redis::cmd("ZCARD")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("ZCARD");
        held += n;
    }
    held
}

#[tokio::test]
async fn the_leases_of_a_killed_instance_expire() {
    const EXPIRY: Duration = Duration::from_secs(3);
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let env = [("REPORT_LEASE_EXPIRY_MS", "3000")];
    let first = start(&server, &env).await;
    let sent = Instant::now();
    // Two long reports take both leases…
    let long = take_both(&first, &server, 60_000).await;
    // …and their instance is killed (SIGKILL: no release, no clean shutdown).
    drop(first);
    for t in long {
        assert!(
            t.await.expect("task").is_err(),
            "the connection died with the app"
        );
    }
    let second = start(&server, &env).await;
    assert_eq!(
        report(&second, 0).await,
        429,
        "the dead instance's leases still count"
    );
    let freed = async {
        while report(&second, 0).await != 200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(15), freed)
        .await
        .expect("the leases expired");
    let after = sent.elapsed();
    assert!(
        after >= EXPIRY,
        "admitted {after:?} after the leases were taken: before they expired"
    );
    // Both slots are free again.
    let (a, b) = tokio::join!(report(&second, 500), report(&second, 500));
    assert_eq!((a, b), (200, 200));
}

#[tokio::test]
async fn a_report_slower_than_the_expiry_keeps_its_lease() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    // Leases of 1 s, renewed every third of it while a report runs; the reports take 3 s.
    let app = start(&server, &[("REPORT_LEASE_EXPIRY_MS", "1000")]).await;
    let slow = take_both(&app, &server, 3000).await;
    // Real time has to pass here: the app runs on Redis' clock, with no seam to move it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        report(&app, 0).await,
        429,
        "the running reports kept their leases"
    );
    for t in slow {
        assert_eq!(t.await.expect("task").expect("response").status, 200);
    }
    assert_eq!(report(&app, 0).await, 200);
}
