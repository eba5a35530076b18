//! The harness of the end-to-end suites: one test body runs against every backend.
//!
//! A [`Harness`] owns what a backend needs (a private `redis-server`, or a manual clock) and hands
//! out limiters that share state, as two app instances sharing one Redis would. The
//! [`backend_suite!`] macro turns each `async fn scenario(h: Harness)` into one `#[tokio::test]`
//! per backend.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use redis_guard::backend::{Clock, ManualClock, RedisConnection};
use redis_guard::rate_limit::{Limiter, MemoryLimiter, RedisLimiter};
use redis_guard_testkit::{RedisServer, unique_prefix};

/// Which backend a harness runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// [`MemoryLimiter`] on a [`ManualClock`].
    Memory,
    /// [`RedisLimiter`] on a private standalone `redis-server`.
    Redis,
}

/// A backend under test.
#[derive(Debug)]
pub struct Harness {
    kind: Kind,
    clock: ManualClock,
    memory: MemoryLimiter,
    server: Option<RedisServer>,
    prefix: String,
}

/// Timeout the suites give Redis: generous, because a loaded 2-core CI machine running debug
/// builds can stall for longer than the production default, and a timeout is not what the
/// suites test.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(5);

impl Harness {
    /// A memory backend.
    pub async fn memory() -> Self {
        let clock = ManualClock::new();
        Self {
            kind: Kind::Memory,
            memory: MemoryLimiter::with_clock(clock.clone()),
            clock,
            server: None,
            prefix: unique_prefix("mem"),
        }
    }

    /// A Redis backend on a fresh private server.
    ///
    /// # Panics
    ///
    /// When `redis-server` cannot be started; the message says how to install it.
    pub async fn redis() -> Self {
        let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let clock = ManualClock::new();
        Self {
            kind: Kind::Redis,
            memory: MemoryLimiter::with_clock(clock.clone()),
            clock,
            server: Some(server),
            prefix: unique_prefix("redis"),
        }
    }

    /// The backend kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// A limiter instance. Every call returns a new instance (for Redis: a new connection) that
    /// shares state with the others, like separate app replicas.
    pub async fn limiter(&self) -> Arc<dyn Limiter> {
        match self.kind {
            Kind::Memory => Arc::new(self.memory.clone()),
            Kind::Redis => Arc::new(
                RedisLimiter::new(self.connection().await)
                    .prefix(self.prefix.clone())
                    .timeout(TEST_TIMEOUT)
                    .time_shift(self.clock.clone()),
            ),
        }
    }

    /// A new Redis connection (Redis backends only).
    ///
    /// # Panics
    ///
    /// On the memory backend, or when the connection fails.
    pub async fn connection(&self) -> RedisConnection {
        let server = self.server.as_ref().expect("a Redis backend");
        RedisConnection::open(&server.url())
            .await
            .expect("connect to the test redis")
    }

    /// A plain async connection for inspecting Redis (Redis backends only).
    ///
    /// # Panics
    ///
    /// As [`connection`](Self::connection).
    pub async fn inspect(&self) -> redis::aio::MultiplexedConnection {
        let server = self.server.as_ref().expect("a Redis backend");
        server
            .client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis")
    }

    /// The key prefix this harness's limiters use.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The private Redis server, if any.
    pub fn server(&self) -> Option<&RedisServer> {
        self.server.as_ref()
    }

    /// Stops the Redis server (to test failures).
    pub fn kill_redis(&mut self) {
        self.server = None;
    }

    /// Lets `d` pass without waiting: the manual clock moves, and with it the memory backend's
    /// clock and the shift every Redis limiter of this harness adds to Redis `TIME`.
    pub async fn wait(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// Moves time to `into` past the start of the next window of `period` (windows aligned to
    /// the backend's clock, as the sliding counter's are). On Redis the position is computed from
    /// `TIME`, so it is exact to within the few milliseconds the test itself takes.
    pub async fn align(&self, period: Duration, into: Duration) {
        let now = match self.kind {
            Kind::Memory => self.clock.now(),
            Kind::Redis => {
                let mut conn = self.inspect().await;
                let (s, us): (u64, u64) = redis::cmd("TIME")
                    .query_async(&mut conn)
                    .await
                    .expect("TIME");
                Duration::from_secs(s) + Duration::from_micros(us) + self.clock.now()
            }
        };
        let p = period.as_micros();
        let next = (now.as_micros() / p + 1) * p;
        let to = u64::try_from(next - now.as_micros()).expect("fits");
        self.clock.advance(Duration::from_micros(to) + into);
    }
}

/// Runs each listed scenario against every backend, as `memory::name` and `standalone::name`.
#[macro_export]
macro_rules! backend_suite {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Harness::memory().await).await;
                }
            )*
        }
        mod standalone {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Harness::redis().await).await;
                }
            )*
        }
    };
}

/// A test response: status, headers and body text.
#[derive(Debug)]
pub struct Reply {
    /// The status.
    pub status: u16,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body.
    pub body: String,
}

impl Reply {
    /// Header `name` as a string ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// Calls `svc` once with `req` and collects the response.
///
/// # Panics
///
/// When the service fails (the layer never changes the inner error type; the inner services in
/// the suites never fail).
pub async fn call<S, B>(svc: S, req: Request<Full<Bytes>>) -> Reply
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    use tower::ServiceExt;
    let res = svc.oneshot(req).await.expect("service call");
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}
