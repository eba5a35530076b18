//! Reading what a Redis holds, for tests and benchmarks: every key (`SCAN`), and what one key
//! occupies (`MEMORY USAGE`).

use redis::RedisResult;
use redis::aio::ConnectionLike;

/// At most this many `SCAN` pages (of up to 1000 keys) are read: a test Redis holds far fewer.
const MAX_PAGES: usize = 10_000;

/// Every key of the server behind `conn` (one node of a cluster: its own keys), by `SCAN`, sorted.
///
/// # Errors
///
/// A `SCAN` failed.
pub async fn scan_keys(conn: &mut impl ConnectionLike) -> RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor = 0_u64;
    for _ in 0..MAX_PAGES {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    keys.sort();
    Ok(keys)
}

/// `MEMORY USAGE <key> SAMPLES 0`: the bytes `key` occupies, name included, or `None` when it
/// does not exist.
///
/// # Errors
///
/// The command failed.
pub async fn memory_usage(conn: &mut impl ConnectionLike, key: &str) -> RedisResult<Option<u64>> {
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(conn)
        .await
}
