//! Lost writes under two concurrent requests on one session, side by side on one real Redis:
//! tower-sessions + tower-sessions-redis-store against redis-guard's sessions.
//!
//! tower-sessions-redis-store keeps the whole session record as one value and every save `SET`s
//! all of it, so when both writers load the same snapshot (the server's barrier guarantees they
//! do) the last save erases the other writer's field: that is the known behaviour of a
//! blob-rewriting store, asserted here as the baseline. redis-guard writes only the changed hash
//! fields, so it must lose nothing through the same driver.
//!
//! Run with `cargo test -p redis-guard-bench --test session_race -- --nocapture` to see the figures.

use redis_guard_bench::{RaceReport, lost_writes, redis_guard_app, serve, tower_sessions_app};
use redis_guard_testkit::RedisServer;

const ROUNDS: usize = 100;

async fn measure(app: axum::Router) -> RaceReport {
    let (addr, server) = serve(app).await;
    let report = lost_writes(addr, ROUNDS)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    server.abort();
    assert_eq!(report.rounds, ROUNDS);
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_to_different_keys_side_by_side() {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let theirs = measure(
        tower_sessions_app(&redis.url())
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    let ours = measure(
        redis_guard_app(&redis.url())
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    println!(
        "tower-sessions + tower-sessions-redis-store: lost {} of {} writes in {} rounds",
        theirs.lost_writes,
        theirs.writes(),
        theirs.rounds
    );
    println!(
        "redis-guard RedisSessionStore:               lost {} of {} writes in {} rounds",
        ours.lost_writes,
        ours.writes(),
        ours.rounds
    );
    assert_eq!(ours.lost_writes, 0, "{ours:?}");
    assert!(
        theirs.lost_writes > 0,
        "a blob-rewriting store was expected to lose writes under overlapping saves: {theirs:?}"
    );
}
