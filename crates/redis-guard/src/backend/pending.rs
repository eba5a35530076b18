//! A connection that is not made yet: a background task keeps trying, and calls fail at once
//! until it succeeds ([`RedisConnection::open_lazy`](super::RedisConnection::open_lazy)).
//!
//! While Redis cannot be reached, every call gets an I/O error without touching the network, so
//! each layer answers by its failure policy and the circuit breaker opens after a few calls, as
//! for a Redis that went away later. No call ever waits for a connection attempt: an application
//! that starts before Redis answers at once, and its calls go to Redis as soon as the task has
//! connected (within [`RETRY_MAX`] plus its jitter, and the breaker's cool-down).

use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult};

/// The first and the longest pause between two attempts to connect, before jitter (up to half
/// as much again): short enough that a Redis coming up is used within half a second.
const RETRY_FIRST: Duration = Duration::from_millis(25);
pub(crate) const RETRY_MAX: Duration = Duration::from_millis(250);

/// The connection `T` once made, and until then why it is not.
pub(crate) struct Pending<T> {
    /// What is connected to (`host:port`, never credentials), for errors and logs.
    addr: String,
    state: RwLock<State<T>>,
}

enum State<T> {
    Down {
        /// Why the last attempt failed.
        why: String,
        attempts: u32,
        since: Instant,
    },
    Up(T),
}

impl<T: Clone + Send + Sync + 'static> Pending<T> {
    /// A connection to `addr` whose first attempt (started at `since`) failed with `first`; a
    /// task calls `connect` again, with a backoff, until it succeeds or the last clone is
    /// dropped.
    pub(crate) fn start<F, Fut>(
        addr: String,
        first: &RedisError,
        since: Instant,
        connect: F,
    ) -> Arc<Self>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = RedisResult<T>> + Send + 'static,
    {
        let why = reason(first);
        tracing::warn!(
            redis = %addr,
            error = %why,
            "redis-guard: Redis is not reachable yet; calls fail (each layer answers by its failure policy) until a connection is made in the background"
        );
        let pending = Arc::new(Self {
            addr,
            state: RwLock::new(State::Down {
                why,
                attempts: 1,
                since,
            }),
        });
        tokio::spawn(retry(Arc::downgrade(&pending), connect));
        pending
    }

    /// The connection, or the error a call gets while there is none (kind
    /// [`Io`](redis::ErrorKind::Io)).
    pub(crate) fn ready(&self) -> RedisResult<T> {
        match &*self.state.read().unwrap_or_else(PoisonError::into_inner) {
            State::Up(conn) => Ok(conn.clone()),
            State::Down {
                why,
                attempts,
                since,
            } => Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!(
                    "not connected to Redis at {} yet: {why} ({}; trying again in the background)",
                    self.addr,
                    tried(*attempts, since.elapsed())
                ),
            )
            .into()),
        }
    }

    fn failed(&self, e: &RedisError) {
        let why = reason(e);
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if let State::Down {
            why: last,
            attempts,
            ..
        } = &mut *state
        {
            *attempts += 1;
            if *last == why {
                tracing::debug!(redis = %self.addr, error = %why, "redis-guard: still cannot connect to Redis");
            } else {
                tracing::warn!(redis = %self.addr, error = %why, "redis-guard: still cannot connect to Redis");
                *last = why;
            }
        }
    }

    fn connected(&self, conn: T) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if let State::Down {
            attempts, since, ..
        } = &*state
        {
            tracing::info!(
                redis = %self.addr,
                "redis-guard: connected to Redis ({})",
                tried(*attempts + 1, since.elapsed())
            );
        }
        *state = State::Up(conn);
    }
}

/// The task: tries again after a pause that doubles from [`RETRY_FIRST`] to [`RETRY_MAX`], plus
/// jitter (so that the replicas of an application do not all knock at once), until connected.
async fn retry<T, F, Fut>(pending: Weak<Pending<T>>, connect: F)
where
    T: Clone + Send + Sync + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = RedisResult<T>>,
{
    let mut pause = RETRY_FIRST;
    loop {
        tokio::time::sleep(pause + jitter(pause / 2)).await;
        if pending.strong_count() == 0 {
            return;
        }
        let outcome = connect().await;
        let Some(p) = pending.upgrade() else { return };
        match outcome {
            Ok(conn) => return p.connected(conn),
            Err(e) => p.failed(&e),
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// A random pause up to `max`.
fn jitter(max: Duration) -> Duration {
    let random = RandomState::new().hash_one(Instant::now());
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX).max(1);
    Duration::from_nanos(random % nanos)
}

/// Why a connection failed, in a few words: "connection refused", or the error's first line.
pub(crate) fn reason(e: &RedisError) -> String {
    if e.is_connection_refusal() {
        "connection refused".to_owned()
    } else {
        e.to_string().lines().next().unwrap_or_default().to_owned()
    }
}

/// "1 attempt over 0.0 s", "6 attempts over 2.1 s".
pub(crate) fn tried(attempts: u32, over: Duration) -> String {
    let plural = if attempts == 1 { "" } else { "s" };
    format!(
        "{attempts} attempt{plural} over {:.1} s",
        over.as_secs_f64()
    )
}
