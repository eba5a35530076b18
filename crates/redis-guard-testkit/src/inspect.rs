//! Reading what a Redis holds, for tests and benchmarks: every key (`SCAN`), what one key
//! occupies (`MEMORY USAGE`), and how many calls of a command it served (`INFO commandstats`).

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

/// The calls of `command` (lower case, as `INFO commandstats` names it: `evalsha`,
/// `script|load`) in the text of one `INFO commandstats` reply; 0 when it was never called.
///
/// # Panics
///
/// When the count is not a number (not a Redis reply).
#[must_use]
pub fn command_calls(commandstats: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    commandstats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count of calls"))
}
