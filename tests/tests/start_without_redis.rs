//! An application that starts before Redis: `RedisConnection::open_lazy` (and
//! `ConnectOptions::lazy` for a Cluster and Sentinel) returns while nothing listens, every call
//! fails at once with an I/O error (the failure policy answers), and once a `redis-server`
//! starts on that port the decisions are Redis' within a second. `open` on a refused address
//! fails with an error that names the address and the attempts, never the password.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use redis_guard::backend::{
    BackendError, Breaker, ConnectOptions, Lock, LockError, RedisBackend, RedisConnection,
};
use redis_guard::rate_limit::{FailurePolicy, HeaderKey, Quota, RateLimitLayer, RedisLimiter};
use redis_guard_testkit::not_redis::Behaviour;
use redis_guard_testkit::{NotRedis, RedisServer, free_port, unique_prefix};
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt, service_fn};

type Svc = BoxCloneSyncService<Request<Full<Bytes>>, Response<()>, Infallible>;

/// How long Redis may take, once it answers, to decide the requests.
const WITHIN: Duration = Duration::from_secs(1);

/// A limit the test does not reach: a `200` whose `RateLimit-Policy` says `q=1000` was decided by
/// Redis, and its key lives for seconds.
const LIMIT: u32 = 1_000;

fn limited(backend: RedisBackend, policy: FailurePolicy) -> Svc {
    let layer = RateLimitLayer::builder(RedisLimiter::new(backend))
        .rule(
            "api",
            HeaderKey::new(http::HeaderName::from_static("x-client")),
            Quota::per_hour(LIMIT),
        )
        .failure_policy(policy)
        .build()
        .expect("valid");
    let ok = service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    BoxCloneSyncService::new(layer.layer(ok).map_response(|r: Response<_>| r.map(|_| ())))
}

/// `(status, whether Redis decided, how long the answer took)`.
async fn call(svc: &Svc) -> (u16, bool, Duration) {
    let started = Instant::now();
    let request = Request::get("/")
        .header("x-client", "c")
        .body(Full::default())
        .expect("request");
    let r = svc
        .clone()
        .oneshot(request)
        .await
        .unwrap_or_else(|e| match e {});
    let redis = r
        .headers()
        .get("ratelimit-policy")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(&format!("q={LIMIT}")));
    (r.status().as_u16(), redis, started.elapsed())
}

/// The Redis error of one call on `backend` (a lock's), which must fail.
async fn call_error(backend: RedisBackend) -> redis::RedisError {
    match Lock::new(redis_guard::backend::RedisLockStore::new(backend))
        .try_acquire("probe", Duration::from_secs(1))
        .await
    {
        Err(LockError::Backend(BackendError::Redis(e))) => e,
        other => panic!("not a Redis error: {:?}", other.map(|g| g.is_some())),
    }
}

fn no_password(e: &redis::RedisError, secret: &str) {
    let text = format!("{e} {e:?}");
    assert!(!text.contains(secret), "the password leaked: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_names_the_address_and_the_attempts_never_the_password() {
    let port = free_port().expect("a free port");
    let started = Instant::now();
    let e = RedisConnection::open(&format!("redis://app:hunter2x@127.0.0.1:{port}/"))
        .await
        .expect_err("nothing listens");
    let took = started.elapsed();
    let text = e.to_string();
    println!("open on a refused port failed after {took:?}: {text}");
    assert!(
        text.starts_with(&format!(
            "cannot connect to Redis at 127.0.0.1:{port} (connection refused) after "
        )),
        "{text}"
    );
    assert!(text.contains(" attempts over "), "{text}");
    assert!(e.is_connection_refusal(), "{e:?}");
    assert_eq!(e.kind(), redis::ErrorKind::Io);
    no_password(&e, "hunter2x");
    assert!(!text.contains("app:"), "{text}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// Started with nothing listening: `open_lazy` returns at once; with the breaker off and a
/// 2 s timeout every call still answers at once by the policy (no call waits for a connection
/// attempt); a server started on the port then decides within a second, the scripts loaded by
/// their first call. A second layer on the default breaker finds Redis as fast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_connection_answers_by_policy_until_redis_comes_up() {
    let port = free_port().expect("a free port");
    let url = format!("redis://:pw-not-shown@127.0.0.1:{port}/");
    let started = Instant::now();
    let conn = RedisConnection::open_lazy(&url)
        .await
        .expect("nothing listening is not an error");
    let opened = started.elapsed();
    assert!(opened < Duration::from_millis(500), "{opened:?}");
    let prefix = unique_prefix("lazy");
    let patient = RedisBackend::new(conn.clone())
        .prefix(&prefix)
        .timeout(Duration::from_secs(2))
        .breaker(Breaker::off());
    let closed = limited(patient.clone(), FailurePolicy::Closed);
    let guarded = limited(
        RedisBackend::new(conn.clone())
            .prefix(&prefix)
            .timeout(Duration::from_millis(250)),
        FailurePolicy::Closed,
    );
    for _ in 0..10 {
        let (status, redis, took) = call(&closed).await;
        assert_eq!((status, redis), (503, false));
        assert!(took < Duration::from_millis(100), "waited {took:?}");
        let (status, _, took) = call(&guarded).await;
        assert_eq!(status, 503);
        assert!(took < Duration::from_millis(100), "waited {took:?}");
    }
    // The error the policies saw: an I/O error naming the address, never the password.
    let e = call_error(patient.clone()).await;
    println!("a call before Redis is up: {e}");
    assert!(e.is_io_error(), "{e:?}");
    assert!(BackendError::Redis(e.clone()).is_unavailable());
    assert!(
        e.to_string()
            .starts_with(&format!("not connected to Redis at 127.0.0.1:{port} yet")),
        "{e}"
    );
    no_password(&e, "pw-not-shown");

    // Redis comes up with the password the URL carries.
    let server = RedisServer::start_on(port, &["--requirepass", "pw-not-shown"])
        .unwrap_or_else(|e| panic!("{e}"));
    let up = Instant::now();
    let mut first = [None, None];
    while first.iter().any(Option::is_none) && up.elapsed() < Duration::from_secs(5) {
        for (i, svc) in [&closed, &guarded].into_iter().enumerate() {
            if first[i].is_none() && call(svc).await.1 {
                first[i] = Some(up.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!("Redis decided {first:?} after it answered PING");
    for (name, took) in ["breaker off", "default breaker"].iter().zip(first) {
        let took = took.unwrap_or_else(|| panic!("{name}: Redis never decided"));
        assert!(took < WITHIN, "{name}: {took:?}");
    }
    let mut admin = redis::Client::open(format!("redis://:pw-not-shown@127.0.0.1:{port}/"))
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut admin)
        .await
        .expect("KEYS");
    let all: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut admin)
        .await
        .expect("KEYS");
    assert!(!keys.is_empty(), "the decisions are in Redis: {all:?}");
    drop(server);
}

/// A lazy connection still refuses, at once, what waiting would not fix: a server that is not
/// Redis, a Redis that refuses the credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_connection_still_refuses_a_server_that_is_not_redis_or_a_wrong_password() {
    let http = NotRedis::start(Behaviour::Http).expect("listen");
    let e = RedisConnection::open_lazy(&http.url())
        .await
        .expect_err("not Redis");
    assert!(
        e.to_string().contains("does not speak the Redis protocol"),
        "{e}"
    );

    let server =
        RedisServer::start_with(&["--requirepass", "s3cret"]).unwrap_or_else(|e| panic!("{e}"));
    let e = RedisConnection::open_lazy(&format!("redis://:hunter2x@127.0.0.1:{}/", server.port()))
        .await
        .expect_err("a wrong password");
    assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e:?}");
    no_password(&e, "hunter2x");
}

/// A Cluster and Sentinel opened lazily while nothing listens: the connection is made, and calls
/// fail at once with an I/O error that names what it waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_cluster_and_sentinel_connections_start_with_nothing_listening() {
    let lazy = ConnectOptions::new().lazy(true);
    let port = free_port().expect("a free port");
    let cluster = lazy
        .cluster(&[format!("127.0.0.1:{port}")])
        .await
        .expect("a lazy cluster");
    let sentinel = lazy
        .sentinel(&[format!("127.0.0.1:{port}")], "mymaster")
        .await
        .expect("a lazy sentinel");
    for (conn, expect) in [
        (cluster, format!("the Redis Cluster at 127.0.0.1:{port}")),
        (sentinel, "mymaster".to_owned()),
    ] {
        let backend = RedisBackend::new(conn).breaker(Breaker::off());
        let started = Instant::now();
        let e = call_error(backend).await;
        assert!(started.elapsed() < Duration::from_millis(100), "{e}");
        assert!(e.is_io_error(), "{e:?}");
        assert!(e.to_string().contains(&expect), "{e}");
    }
    assert!(
        ConnectOptions::new()
            .cluster(&[format!("127.0.0.1:{port}")])
            .await
            .is_err(),
        "eager: an error"
    );
}
