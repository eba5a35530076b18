//! What the variants put in front of the route, checked on one request each over a real socket:
//! the ones whose difference from a neighbour is the point of the comparison.
//!
//! Needs `redis-server`.

use std::time::Duration;

use redis_guard_bench::throughput::{Variant, serve_with_peer};
use redis_guard_testkit::{RedisServer, http};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One `GET /` to `variant`'s app; the response.
async fn get(variant: Variant, redis_url: &str) -> http::RawResponse {
    let app = variant
        .app(redis_url, None)
        .await
        .unwrap_or_else(|e| panic!("{variant}: {e}"));
    let (addr, task) = serve_with_peer(app).await.unwrap_or_else(|e| panic!("{e}"));
    let response = http::request(addr, "GET", "/", &[], b"")
        .await
        .unwrap_or_else(|e| panic!("{variant}: GET /: {e}"));
    task.abort();
    assert_eq!(response.status, 200, "{variant}: {}", response.text());
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_no_headers_answers_without_the_rate_limit_headers() {
    // Never contacted: the memory variants hold no connection.
    let unused = "redis://127.0.0.1:1/";
    let with = get(Variant::Memory, unused).await;
    assert!(with.header("ratelimit").is_some(), "{:?}", with.headers);
    assert!(
        with.header("ratelimit-policy").is_some(),
        "{:?}",
        with.headers
    );
    let without = get(Variant::MemoryNoHeaders, unused).await;
    assert_eq!(without.header("ratelimit"), None, "{:?}", without.headers);
    assert_eq!(
        without.header("ratelimit-policy"),
        None,
        "{:?}",
        without.headers
    );
    assert_eq!(without.text(), "ok");
}

/// What Redis ran (as `MONITOR` prints it) while `variant` served one request.
async fn monitored(variant: Variant, redis: &RedisServer) -> String {
    let mut monitor = BufReader::new(
        TcpStream::connect(("127.0.0.1", redis.port()))
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    monitor
        .get_mut()
        .write_all(b"MONITOR\r\n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut line = String::new();
    monitor
        .read_line(&mut line)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(line.trim(), "+OK");

    assert_eq!(get(variant, &redis.url()).await.text(), "ok");
    // MONITOR shows commands in the order Redis ran them: once the marker shows, the request's
    // commands have.
    let client = redis::Client::open(redis.url()).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _: String = redis::cmd("ECHO")
        .arg(MARK)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut seen = String::new();
    let read = async {
        loop {
            line.clear();
            let n = monitor
                .read_line(&mut line)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            if n == 0 || line.contains(MARK) {
                return;
            }
            seen.push_str(&line);
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .unwrap_or_else(|_| panic!("MONITOR never showed the marker; it showed {seen}"));
    seen
}

const MARK: &str = "variants-test-mark";

/// A private `redis-server`.
async fn redis() -> RedisServer {
    tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fixed_window_decides_with_a_fixed_window() {
    let redis = redis().await;
    // Each algorithm names its state keys with its own tag (`gcra`; `fwc`, the fixed window's
    // plain counter on Redis >= 7): the key the commands name says which algorithm decided.
    // (Read from MONITOR, not from the keys left: a
    // high-quota key may expire before a scan finds it.)
    let gcra = monitored(Variant::Redis, &redis).await;
    assert!(gcra.contains(":gcra:") && !gcra.contains(":fw:"), "{gcra}");
    let fixed = monitored(Variant::RedisFixedWindow, &redis).await;
    assert!(
        fixed.contains(":fwc:")
            && !fixed.contains(":gcra:")
            && !fixed.to_ascii_lowercase().contains("evalsha"),
        "{fixed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_leased_admits_on_its_gcra_key() {
    let redis = redis().await;
    // A cold client's first request is decided per request, on the same GCRA state the blocks
    // of a busy one are reserved from.
    let leased = monitored(Variant::RedisLeased, &redis).await;
    assert!(leased.contains(":gcra:"), "{leased}");
}

/// The cache variants: after the first request fills the page, a hit of the hand-rolled
/// cache-aside is one `GET`, and tower-http-cache reads it from Redis too. `CacheLayer` reads
/// with plain commands (a `GET` of the entry, and on a miss one of its URI's record): scripts
/// only take the fill lock and fill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_variants_serve_hits_from_redis() {
    let redis = redis().await;
    let fill = monitored(Variant::HandCache, &redis).await;
    assert!(fill.contains("\"GET\" \"hc:/\""), "{fill}");
    assert!(
        fill.contains("\"SET\" \"hc:/\" \"ok\" \"EX\" \"60\""),
        "{fill}"
    );
    let hit = monitored(Variant::HandCache, &redis).await;
    assert_eq!(hit.lines().count(), 1, "{hit}");
    assert!(hit.contains("\"GET\" \"hc:/\""), "{hit}");

    monitored(Variant::TowerHttpCache, &redis).await;
    let hit = monitored(Variant::TowerHttpCache, &redis).await;
    assert!(!hit.is_empty(), "a tower-http-cache hit reads Redis");
    assert!(!hit.to_ascii_lowercase().contains("\"set"), "{hit}");

    // Each app listens on a port of its own, so its first request (the host in the key) is a
    // miss: its reads (before taking the fill lock, and again once it holds it) are plain
    // commands; only the lock and the fill run scripts.
    let miss = monitored(Variant::CacheHit, &redis).await;
    let sent: Vec<&str> = miss.lines().filter(|l| !l.contains("[0 lua]")).collect();
    let reads = sent
        .iter()
        .filter(|l| l.contains("\"GET\" \"rg:cr:"))
        .count();
    let scripts = sent.iter().filter(|l| l.contains("\"EVALSHA\"")).count();
    let mgets = sent.iter().filter(|l| l.contains("\"MGET\"")).count();
    assert_eq!((reads, scripts, mgets), (2, 3, 0), "{miss}");
}
