//! `ValueCache` on every backend: one computation for a crowd of callers
//! on two replicas, XFetch before expiry, stale values served at once, errors returned and
//! never cached, negative caching, `add` true once, `set`/`get`/`forget`, tags, values of
//! another type as misses, a TTL on every key, and a store that fails never failing a call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use redis_guard::cache::{RedisCacheStore, Stampede, ValueCache, ValueCacheBuilder};
use redis_guard_tests::{Harness, backend_suite};
use tokio::sync::Semaphore;

/// Exact times: no jitter, a fixed random number.
async fn builder(h: &Harness) -> ValueCacheBuilder {
    h.value_cache().await.jitter(0.0).random(|| 1.0)
}

async fn cache(h: &Harness) -> ValueCache {
    builder(h).await.build().expect("value cache")
}

const MINUTE: Duration = Duration::from_secs(60);

/// A computation that counts its runs and answers `value`.
fn counted<T: Send + 'static>(
    runs: &Arc<AtomicUsize>,
    value: T,
) -> impl FnOnce() -> std::future::Ready<Result<T, String>> + Send + 'static {
    let runs = Arc::clone(runs);
    move || {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(value))
    }
}

async fn two_hundred_cold_calls_on_two_replicas_compute_once(h: &Harness) {
    let replicas = [
        builder(h).await.stampede(Stampede::lock().wait(MINUTE)),
        builder(h).await.stampede(Stampede::lock().wait(MINUTE)),
    ]
    .map(|b| b.build().expect("value cache"));
    let gate = Arc::new(Semaphore::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let cache = replicas[i % 2].clone();
            let (gate, runs) = (Arc::clone(&gate), Arc::clone(&runs));
            tokio::spawn(async move {
                cache
                    .get_or_compute("user:7", MINUTE, move || async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        drop(gate.acquire().await.expect("gate"));
                        Ok::<_, String>(format!("user 7 ({i})"))
                    })
                    .await
            })
        })
        .collect();
    // The computation is entered once, and stays blocked until the gate opens.
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    gate.add_permits(1_000);
    let mut values = Vec::new();
    for task in tasks {
        values.push(task.await.expect("task").expect("value"));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "exactly one computation");
    values.dedup();
    assert_eq!(
        values.len(),
        1,
        "every caller got the one value: {values:?}"
    );
    // Both replicas read it from then on.
    for cache in &replicas {
        let again: String = cache
            .get_or_compute("user:7", MINUTE, counted(&runs, "other".to_owned()))
            .await
            .expect("value");
        assert_eq!(again, values[0]);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

async fn xfetch_recomputes_before_expiry(h: &Harness) {
    // -ln(draw) = how many recompute times before expiry a hit recomputes.
    let draw = Arc::new(AtomicU64::new(1.0_f64.to_bits()));
    let d = Arc::clone(&draw);
    let cache = h
        .value_cache()
        .await
        .jitter(0.0)
        .stampede(Stampede::xfetch(1.0))
        .random(move || f64::from_bits(d.load(Ordering::SeqCst)))
        .build()
        .expect("value cache");
    let set = |x: f64| draw.store((-x).exp().to_bits(), Ordering::SeqCst);
    let runs = Arc::new(AtomicUsize::new(0));
    let get = || {
        // The computation takes 1 s on the harness' clock: the recompute time kept with it.
        let (clock, runs) = (h.clock(), Arc::clone(&runs));
        cache.get_or_compute("report", MINUTE, move || async move {
            clock.advance(Duration::from_secs(1));
            Ok::<_, String>(runs.fetch_add(1, Ordering::SeqCst) + 1)
        })
    };
    assert_eq!(get().await, Ok(1));
    // 3 s before expiry: two recompute times is not yet early enough.
    h.wait(Duration::from_secs(57)).await;
    set(2.0);
    assert_eq!(get().await, Ok(1));
    // 1.5 s before expiry: a draw of 1 never recomputes early; e^-2 does.
    h.wait(Duration::from_millis(1_500)).await;
    set(0.0);
    assert_eq!(get().await, Ok(1));
    set(2.0);
    assert_eq!(get().await, Ok(2), "recomputed before expiry");
    // Refilled: fresh for another minute.
    set(0.0);
    h.wait(Duration::from_secs(30)).await;
    assert_eq!(get().await, Ok(2));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

async fn a_stale_value_is_served_at_once_and_recomputed_once(h: &Harness) {
    let cache = builder(h)
        .await
        .stale(Duration::from_secs(100))
        .build()
        .expect("value cache");
    let runs = Arc::new(AtomicUsize::new(0));
    let ten = Duration::from_secs(10);
    let v1: String = cache
        .get_or_compute("price", ten, counted(&runs, "v1".to_owned()))
        .await
        .expect("value");
    assert_eq!(v1, "v1");
    // Past its TTL, inside its stale window; the recomputation blocks until released.
    h.wait(Duration::from_secs(20)).await;
    let gate = Arc::new(Semaphore::new(0));
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let (cache, gate, runs) = (cache.clone(), Arc::clone(&gate), Arc::clone(&runs));
            tokio::spawn(async move {
                cache
                    .get_or_compute("price", ten, move || async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        drop(gate.acquire().await.expect("gate"));
                        Ok::<_, String>("v2".to_owned())
                    })
                    .await
            })
        })
        .collect();
    for task in tasks {
        // Every caller is answered while the recomputation is still blocked.
        let value = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("served without waiting for the recomputation")
            .expect("task");
        assert_eq!(value.as_deref(), Ok("v1"));
    }
    gate.add_permits(1_000);
    // The refresh fills the value in the background.
    let mut tries = 0;
    while cache.get::<String>("price").await.expect("get").as_deref() != Some("v2") {
        tries += 1;
        assert!(tries < 1_000, "the refresh never landed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "one background recomputation"
    );
    // Past the stale window a value is gone: a plain miss.
    h.wait(Duration::from_secs(200)).await;
    assert_eq!(cache.get::<String>("price").await.expect("get"), None);
}

async fn errors_are_returned_and_never_cached(h: &Harness) {
    let cache = cache(h).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let failing = |runs: &Arc<AtomicUsize>| {
        let runs = Arc::clone(runs);
        move || async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<u64, _>("database down".to_owned())
        }
    };
    for _ in 0..2 {
        let got = cache.get_or_compute("n", MINUTE, failing(&runs)).await;
        assert_eq!(got, Err("database down".to_owned()));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "an error is not cached");
    assert_eq!(cache.get::<u64>("n").await.expect("get"), None);
    assert_eq!(
        cache.get_or_compute("n", MINUTE, counted(&runs, 5)).await,
        Ok(5)
    );
    assert_eq!(
        cache.get_or_compute("n", MINUTE, failing(&runs)).await,
        Ok(5)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    // "Not found" (`null`) is not kept by default, and kept for the negative TTL when there is
    // one, whatever the call's TTL says.
    let negative = builder(h)
        .await
        .negative_ttl(Duration::from_secs(5))
        .build()
        .expect("value cache");
    for (cache, runs_after) in [(&cache, 5), (&negative, 6)] {
        for _ in 0..2 {
            let got = cache
                .get_or_compute("missing", MINUTE, counted(&runs, None::<u64>))
                .await;
            assert_eq!(got, Ok(None));
        }
        assert_eq!(runs.load(Ordering::SeqCst), runs_after);
    }
    h.wait(Duration::from_secs(6)).await;
    let got = negative
        .get_or_compute("missing", MINUTE, counted(&runs, Some(9_u64)))
        .await;
    assert_eq!(got, Ok(Some(9)));
    assert_eq!(runs.load(Ordering::SeqCst), 7);
    // Its errors are not cached either.
    let got = negative
        .get_or_compute("other", MINUTE, failing(&runs))
        .await;
    assert!(got.is_err());
    let got = negative
        .get_or_compute("other", MINUTE, counted(&runs, 1_u64))
        .await;
    assert_eq!(got, Ok(1));
}

async fn add_is_true_for_the_first_caller_only(h: &Harness) {
    let replicas = [cache(h).await, cache(h).await];
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let cache = replicas[i % 2].clone();
            tokio::spawn(async move { cache.add("invoice:991:mailed", &i, MINUTE).await })
        })
        .collect();
    let mut firsts = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        if task.await.expect("task").expect("add") {
            firsts.push(i);
        }
    }
    let [first] = firsts[..] else {
        panic!("one caller added: {firsts:?}");
    };
    for cache in &replicas {
        assert_eq!(
            cache.get::<usize>("invoice:991:mailed").await.expect("get"),
            Some(first)
        );
        assert!(
            !cache
                .add("invoice:991:mailed", &0, MINUTE)
                .await
                .expect("add")
        );
    }
    // Exactly its TTL (no jitter, no stale window): then the key is free again.
    if h.is_redis() {
        let [key] = h.keys_under("c:{").await.try_into().expect("one key");
        let ttl = h.pttl(&key).await;
        assert!((50_000..=60_000).contains(&ttl), "{ttl} ms");
    } else {
        h.wait(MINUTE - Duration::from_millis(1)).await;
        assert!(
            !replicas[1]
                .add("invoice:991:mailed", &1, MINUTE)
                .await
                .expect("add")
        );
        h.wait(Duration::from_secs(1)).await;
        assert!(
            replicas[1]
                .add("invoice:991:mailed", &1, MINUTE)
                .await
                .expect("add")
        );
    }
}

async fn set_get_and_forget(h: &Harness) {
    let cache = cache(h).await;
    let other = builder(h)
        .await
        .namespace("other")
        .build()
        .expect("value cache");
    let greeting = |cache: &ValueCache| {
        let cache = cache.clone();
        async move { cache.get::<String>("greeting").await.expect("get") }
    };
    cache.set("greeting", "hello", MINUTE).await.expect("set");
    assert_eq!(greeting(&cache).await.as_deref(), Some("hello"));
    // Another type than the one stored: none.
    assert_eq!(cache.get::<u64>("greeting").await.expect("get"), None);
    // Another namespace: another key.
    assert_eq!(greeting(&other).await, None);
    cache.set("greeting", "bonjour", None).await.expect("set");
    assert_eq!(greeting(&cache).await.as_deref(), Some("bonjour"));
    cache.forget("greeting").await.expect("forget");
    assert_eq!(greeting(&cache).await, None);
    // A value set is what get_or_compute returns; past its TTL it is gone.
    cache
        .set("answer", &41_u64, Duration::from_secs(10))
        .await
        .expect("set");
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(
        cache
            .get_or_compute("answer", MINUTE, counted(&runs, 1_u64))
            .await,
        Ok(41)
    );
    h.wait(Duration::from_secs(11)).await;
    assert_eq!(cache.get::<u64>("answer").await.expect("get"), None);
    assert_eq!(
        cache
            .get_or_compute("answer", MINUTE, counted(&runs, 42_u64))
            .await,
        Ok(42)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // A value with no JSON form is an error, not a panic and not a write.
    let map = std::collections::HashMap::from([((1, 2), "a tuple key")]);
    let err = cache.set("map", &map, MINUTE).await.unwrap_err();
    assert!(err.to_string().contains("no JSON form"), "{err}");
}

async fn tags_invalidate_their_values(h: &Harness) {
    let replicas = [cache(h).await, cache(h).await];
    let runs = Arc::new(AtomicUsize::new(0));
    let team = |i: usize, n: u64| {
        replicas[i].get_or_compute_tagged("team:3", MINUTE, ["team:3", "teams"], counted(&runs, n))
    };
    assert_eq!(team(0, 1).await, Ok(1));
    assert_eq!(team(1, 2).await, Ok(1));
    let solo = replicas[0]
        .get_or_compute("solo", MINUTE, counted(&runs, 10_u64))
        .await;
    assert_eq!(solo, Ok(10));
    // Invalidated on one replica: void on both.
    replicas[1]
        .invalidate_tag("teams")
        .await
        .expect("invalidate");
    assert_eq!(replicas[0].get::<u64>("team:3").await.expect("get"), None);
    assert_eq!(team(0, 3).await, Ok(3));
    assert_eq!(team(1, 4).await, Ok(3));
    replicas[0]
        .invalidate_tag("team:3")
        .await
        .expect("invalidate");
    assert_eq!(team(1, 5).await, Ok(5));
    // An untagged value, an unknown tag and a response cache's tag of that name are untouched.
    let layer = h
        .cache()
        .await
        .ttl(Duration::from_secs(60))
        .build()
        .expect("layer");
    layer.invalidate_tag("team:3").await.expect("invalidate");
    replicas[0]
        .invalidate_tag("nobody")
        .await
        .expect("invalidate");
    let solo = replicas[1]
        .get_or_compute("solo", MINUTE, counted(&runs, 11_u64))
        .await;
    assert_eq!(solo, Ok(10));
    assert_eq!(team(0, 6).await, Ok(5));
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

/// A type change between deploys: the old JSON does not decode as the new type.
async fn a_value_of_another_type_is_a_miss(h: &Harness) {
    let cache = cache(h).await;
    let runs = Arc::new(AtomicUsize::new(0));
    cache
        .set("user:9", "an old format", MINUTE)
        .await
        .expect("set");
    let got = cache
        .get_or_compute("user:9", MINUTE, counted(&runs, (9_u64, "Ann".to_owned())))
        .await;
    assert_eq!(got, Ok((9, "Ann".to_owned())));
    // Overwritten by the fill: read from the cache from then on.
    let got = cache
        .get_or_compute("user:9", MINUTE, counted(&runs, (0_u64, String::new())))
        .await;
    assert_eq!(got, Ok((9, "Ann".to_owned())));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The stampede protection: a crowd on a cold key, XFetch, stale values (one harness: one
/// server start for three scenarios, on distinct keys).
async fn stampedes(h: Harness) {
    two_hundred_cold_calls_on_two_replicas_compute_once(&h).await;
    xfetch_recomputes_before_expiry(&h).await;
    a_stale_value_is_served_at_once_and_recomputed_once(&h).await;
}

/// What is kept and for how long: errors, `null`, `set`/`get`/`forget`, tags, a type change.
async fn values(h: Harness) {
    errors_are_returned_and_never_cached(&h).await;
    set_get_and_forget(&h).await;
    tags_invalidate_their_values(&h).await;
    a_value_of_another_type_is_a_miss(&h).await;
}

/// `add` alone: on Redis it reads the one key it wrote.
async fn add(h: Harness) {
    add_is_true_for_the_first_caller_only(&h).await;
}

/// A flag lives exactly its TTL even when the cache keeps values for `stale_if_error`: once
/// `get` says it is gone, `add` succeeds again.
async fn add_keeps_its_flag_exactly_its_ttl_under_stale_if_error(h: Harness) {
    let cache = builder(&h)
        .await
        .stale_if_error(Duration::from_secs(300))
        .build()
        .expect("value cache");
    let ttl = Duration::from_secs(10);
    assert!(
        cache
            .add("invoice:992:mailed", &true, ttl)
            .await
            .expect("add")
    );
    if h.is_redis() {
        let [key] = h.keys_under("c:{").await.try_into().expect("one key");
        let pttl = h.pttl(&key).await;
        assert!((1..=10_000).contains(&pttl), "{pttl} ms");
    } else {
        h.wait(ttl - Duration::from_millis(1)).await;
        assert!(
            !cache
                .add("invoice:992:mailed", &true, ttl)
                .await
                .expect("add")
        );
        h.wait(Duration::from_millis(10)).await;
        let got = cache.get::<bool>("invoice:992:mailed").await.expect("get");
        assert_eq!(got, None);
        assert!(
            cache
                .add("invoice:992:mailed", &true, ttl)
                .await
                .expect("add")
        );
    }
}

backend_suite!(
    stampedes,
    values,
    add,
    add_keeps_its_flag_exactly_its_ttl_under_stale_if_error
);

async fn redis(h: &Harness, args: &[&str]) {
    let mut conn = h.inspect().await;
    let _: redis::Value = redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(&mut conn)
        .await
        .expect("command");
}

async fn foreign_values_at_a_key_are_misses(h: &Harness) {
    let cache = cache(h).await;
    let runs = Arc::new(AtomicUsize::new(0));
    cache.set("k", &1_u64, MINUTE).await.expect("set");
    let [key] = h.keys_under("c:{").await.try_into().expect("one key");
    assert!(!key.contains("k\""), "no raw key text in {key}");
    let garbage: [&[&str]; 3] = [
        &["SET", &key, "not a cache entry"],
        &["HSET", &key, "field", "value"],
        &["SET", &key, "RGC2 E 1 2 3 4\nshort"],
    ];
    for (n, command) in (2_u64..).zip(garbage) {
        redis(h, &["DEL", &key]).await;
        redis(h, command).await;
        assert_eq!(
            cache.get::<u64>("k").await.expect("get"),
            None,
            "{command:?}"
        );
        assert_eq!(
            cache.get_or_compute("k", MINUTE, counted(&runs, n)).await,
            Ok(n)
        );
        assert_eq!(
            cache.get::<u64>("k").await.expect("get"),
            Some(n),
            "{command:?}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

async fn every_key_has_a_ttl(h: &Harness) {
    let cache = builder(h)
        .await
        .stale(Duration::from_secs(30))
        .negative_ttl(Duration::from_secs(5))
        .build()
        .expect("value cache");
    let runs = Arc::new(AtomicUsize::new(0));
    cache.set("a", &1, MINUTE).await.expect("set");
    cache.set("b", &1, None).await.expect("set");
    assert!(cache.add("c", &true, MINUTE).await.expect("add"));
    let _ = cache.get_or_compute("d", MINUTE, counted(&runs, 1)).await;
    let _ = cache
        .get_or_compute("e", MINUTE, counted(&runs, None::<u8>))
        .await;
    let _ = cache
        .get_or_compute_tagged("f", MINUTE, ["t"], counted(&runs, 1))
        .await;
    cache.invalidate_tag("t").await.expect("invalidate");
    // A stale value's background refresh takes (and releases) a lock.
    h.wait(Duration::from_secs(61)).await;
    let _ = cache.get_or_compute("d", MINUTE, counted(&runs, 2)).await;
    while cache.get::<i32>("d").await.expect("get") != Some(2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    h.assert_every_key_has_a_ttl(6).await;
}

/// Redis gone: `get_or_compute` computes and returns, the other calls say the store failed.
async fn the_store_failing_never_fails_a_computation(mut h: Harness) {
    // A short timeout: a dead server behind a pool answers nothing until it runs out (a
    // timeout before the kill would change no assertion: the first call fails open too).
    let backend = h.backend().await.timeout(Duration::from_millis(300));
    let cache = ValueCache::new(RedisCacheStore::new(backend)).expect("value cache");
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(
        cache.get_or_compute("k", MINUTE, counted(&runs, 1)).await,
        Ok(1)
    );
    h.kill_redis();
    for n in 2..4 {
        assert_eq!(
            cache.get_or_compute("k", MINUTE, counted(&runs, n)).await,
            Ok(n)
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert!(cache.get::<i32>("k").await.is_err());
    assert!(cache.set("k", &1, MINUTE).await.is_err());
    assert!(cache.add("k", &1, MINUTE).await.is_err());
    assert!(cache.forget("k").await.is_err());
    assert!(cache.invalidate_tag("t").await.is_err());
}

/// What Redis holds: foreign values first (it reads the one key it wrote), then the TTLs.
async fn keys(h: Harness) {
    foreign_values_at_a_key_are_misses(&h).await;
    every_key_has_a_ttl(&h).await;
}

/// Every key in Redis under `part` (`ct:{`: tag records) with its `PTTL`.
async fn pttls(h: &Harness, part: &str) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for key in h.keys_under(part).await {
        let pttl = h.pttl(&key).await;
        out.push((key, pttl));
    }
    out
}

/// A tag's invalidation is remembered as long as a value under it can live (`max_ttl` plus
/// jitter, then the longer of the stale window and `stale_if_error`), and no longer; a value
/// asked to live longer than `max_ttl` is cut to it. The response cache's records likewise.
async fn tag_records_live_as_long_as_their_values(h: Harness) {
    const DAY_MS: i64 = 86_400_000;
    let grace = Duration::from_secs(300);
    // The default max_ttl (1 day) and jitter (10%).
    let cache = h
        .value_cache()
        .await
        .stale_if_error(grace)
        .build()
        .expect("value cache");
    let runs = Arc::new(AtomicUsize::new(0));
    let week = Duration::from_secs(7 * 86_400);
    let got = cache
        .get_or_compute_tagged("team:3", week, ["team:3"], counted(&runs, 3_u64))
        .await;
    assert_eq!(got, Ok(3));
    let longest = DAY_MS + DAY_MS / 10 + 300_000;
    let [(_, value)] = pttls(&h, "c:{").await.try_into().expect("one value");
    assert!((1..=longest).contains(&value), "the value lives {value} ms");
    cache.invalidate_tag("team:3").await.expect("invalidate");
    cache.invalidate_tag_soft("team:4").await.expect("purge");
    let records = pttls(&h, "ct:{").await;
    assert_eq!(records.len(), 2, "{records:?}");
    for (key, pttl) in &records {
        assert!((value..=longest).contains(pttl), "{key}: {pttl} ms");
    }
    // A response cache on the same store: 1 day plus jitter, then the longer of its stale
    // window (at most max_ttl, 1 day) and stale_if_error.
    let layer = h
        .cache()
        .await
        .stale_if_error(grace)
        .build()
        .expect("layer");
    layer.invalidate_tag("products").await.expect("invalidate");
    let mut layer_records = pttls(&h, "ct:{").await;
    layer_records.retain(|r| !records.iter().any(|(key, _)| *key == r.0));
    let [(key, pttl)] = layer_records.try_into().expect("one more record");
    let longest = 2 * DAY_MS + DAY_MS / 10;
    assert!(
        (longest - 60_000..=longest).contains(&pttl),
        "{key}: {pttl} ms"
    );
}

backend_suite!(
    redis_only: keys,
    the_store_failing_never_fails_a_computation,
    tag_records_live_as_long_as_their_values
);
// Over TLS (`rediss://`, a client certificate): a standalone server, a pool, a cluster and
// Sentinel.
backend_suite!(tls_only: values);
