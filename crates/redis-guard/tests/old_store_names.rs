//! The store constructors named before `Redis…Store::new` / `Memory…Store::new` still compile
//! and work, deprecated, for code written against them.
#![cfg(feature = "idempotency")]
#![allow(deprecated)]

use std::time::Duration;

use redis_guard::backend::Lock;
use redis_guard::idempotency::{IdempotencyLayer, IdempotencyStore};

#[tokio::test]
async fn the_deprecated_store_constructors_still_work() {
    assert!(IdempotencyLayer::new(IdempotencyStore::memory()).is_ok());
    let small = IdempotencyStore::memory_builder().capacity(10).build();
    assert!(IdempotencyLayer::new(small).is_ok());
    let _redis = |conn: redis_guard::backend::RedisConnection| IdempotencyStore::redis(conn);

    for locks in [Lock::memory(), Lock::memory_builder().capacity(10).build()] {
        let lease = Duration::from_secs(30);
        let held = locks.try_acquire("report", lease).await.unwrap();
        assert!(held.is_some());
        assert!(locks.try_acquire("report", lease).await.unwrap().is_none());
    }
    let _redis = |conn: redis_guard::backend::RedisConnection| Lock::redis(conn);
}
