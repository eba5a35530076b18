//! Clusters started ahead of the tests that ask for them.
//!
//! Every cluster waits about two seconds for Redis' writable delay, asleep: a test binary that
//! started one per test, two tests at a time, spent most of its run waiting for them. Here a few
//! start in background threads before they are asked for, and each one taken is replaced at
//! once, so a test finds one ready (or nearly) and a binary waits the two seconds about once.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::RedisCluster;
use crate::server::TestkitError;

/// How many clusters are kept started or starting beyond those callers are waiting for: enough
/// for two test threads whose cluster tests take a fraction of a second each. Fewer while this
/// process has taken fewer: one that takes one cluster (a test run alone, or under a runner
/// that starts a process per test) starts no spare for nothing.
const AHEAD: usize = 4;

struct Pool {
    ready: Vec<RedisCluster>,
    /// Clusters being started by background threads.
    starting: usize,
    /// Callers waiting for a cluster.
    waiting: usize,
    /// Clusters handed out so far.
    taken: usize,
    /// Why the last start failed, for a caller that finds nothing else coming.
    failed: Option<TestkitError>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    ready: Vec::new(),
    starting: 0,
    waiting: 0,
    taken: 0,
    failed: None,
});
static CHANGED: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A started cluster: one started ahead, or the next to finish starting. The error of a start
/// that failed when no other start is under way.
pub(super) fn take() -> Result<RedisCluster, TestkitError> {
    let mut pool = lock();
    pool.waiting += 1;
    loop {
        top_up(&mut pool);
        if let Some(cluster) = pool.ready.pop() {
            pool.waiting -= 1;
            pool.taken += 1;
            top_up(&mut pool);
            return Ok(cluster);
        }
        if pool.starting == 0
            && let Some(e) = pool.failed.take()
        {
            pool.waiting -= 1;
            return Err(e);
        }
        pool = CHANGED.wait(pool).unwrap_or_else(PoisonError::into_inner);
    }
}

/// Starts clusters in the background until `AHEAD` (or as many as were taken, if fewer) more
/// than the waiting callers are started or starting. A start that fails is not retried here beyond its own attempts: the next caller
/// tops up again.
fn top_up(pool: &mut Pool) {
    // After a failure, start only for callers that wait: a missing redis-server should not
    // start a batch of doomed attempts per caller.
    let ahead = if pool.failed.is_some() {
        0
    } else {
        AHEAD.min(pool.taken)
    };
    while pool.ready.len() + pool.starting < pool.waiting + ahead {
        pool.starting += 1;
        let spawned = std::thread::Builder::new()
            .name("redis-guard-cluster-start".into())
            .spawn(|| {
                let started = RedisCluster::start_now(&[], None);
                let mut pool = lock();
                pool.starting -= 1;
                match started {
                    Ok(cluster) => {
                        pool.ready.push(cluster);
                        pool.failed = None;
                    }
                    Err(e) => pool.failed = Some(e),
                }
                CHANGED.notify_all();
            });
        if let Err(e) = spawned {
            pool.starting -= 1;
            pool.failed = Some(TestkitError::Io(e));
            return;
        }
    }
}
