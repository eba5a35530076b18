//! The memory limiter's table holds a fixed-size digest per key, never the key: a client that
//! sends 16 KB user names cannot make it grow by 16 KB per name (the audit grew the example app
//! from 11 MB to 319 MB in 12 s that way).
//!
//! Its own test binary, so that no other test allocates while this one measures.

use redis_guard::rate_limit::{Key, MemoryLimiter, Quota, Rule};

/// This process' resident memory in bytes (Linux: `/proc/self/statm`, in pages of 4 KiB or more;
/// counting pages as 4 KiB only under-reports growth, which errs towards passing a fixed table and
/// still catches 32 MB of retained keys).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "current_thread")]
async fn huge_client_keys_cost_a_fixed_size_each() {
    const KEYS: usize = 2_000;
    const KEY_BYTES: usize = 16 * 1024;
    let limiter = MemoryLimiter::new();
    let rule = Rule::new("login", Quota::per_hour(5));
    // Warm up: the table's first allocation, the clock, tokio's bookkeeping.
    limiter.check(&rule, Key::from("warm-up")).await.unwrap();
    let before = resident_bytes();
    for i in 0..KEYS {
        let mut name = vec![b'a'; KEY_BYTES];
        name[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let d = limiter.check(&rule, Key::from(name)).await.unwrap();
        assert!(d.allowed);
    }
    assert_eq!(limiter.len(), KEYS + 1);
    let grown = resident_bytes().saturating_sub(before);
    // The keys themselves are 32 MB; each entry must cost a small fixed amount (a digest, the
    // rule's shared name, the algorithm's state, the hash table's slot): well under 4 MB for
    // all of them. Each key's buffer is freed before the next is made, so the allocator reuses it.
    assert!(
        grown < 4 * 1024 * 1024,
        "resident memory grew by {grown} bytes for {KEYS} keys of {KEY_BYTES} bytes"
    );
}
