//! End to end: the `tonic-app` binary, started as a process on the memory backend and against a
//! real `redis-server`, called by tonic's generated client over HTTP/2 on loopback.

use std::time::Duration;

use example_shared::testing::tls::{TlsRedis, assert_a_bad_redis_tls_ca_stops_the_app};
use redis_guard_testkit::RedisServer;
use redis_guard_testkit::app::{RunningApp, spawn};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Status, Streaming};
use tonic_app::MAX_STREAM_LEN;
use tonic_app::pb::quotes_client::QuotesClient;
use tonic_app::pb::{GetRequest, Quote, StreamRequest};
use tonic_types::StatusExt;

type Client = QuotesClient<Channel>;

/// Runs `scenario` against the app on the memory backend (`memory`) and on a fresh Redis
/// (`redis`), with `env` added to both.
macro_rules! on_both_backends {
    ($name:ident, $env:expr, $scenario:expr) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn memory() {
                let app = start(None, $env).await;
                ($scenario)(app).await;
            }

            #[tokio::test]
            async fn redis() {
                let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
                let app = start(Some(&server), $env).await;
                ($scenario)(app).await;
            }
        }
    };
}

async fn start(redis: Option<&RedisServer>, env: &[(&str, &str)]) -> RunningApp {
    let url = redis.map(RedisServer::url);
    let mut env = env.to_vec();
    // Generous: a loaded CI machine running debug builds; the timeout is not what is tested.
    env.push(("REDIS_TIMEOUT_MS", "5000"));
    if let Some(url) = &url {
        env.push(("REDIS_URL", url));
    }
    spawn(env!("CARGO_BIN_EXE_tonic-app"), &env).await
}

async fn client(app: &RunningApp) -> Client {
    QuotesClient::connect(format!("http://{}", app.addr))
        .await
        .expect("connect")
}

/// A `Get` call from the caller with API key `key` (none: by client IP).
fn get(key: Option<&str>) -> Request<GetRequest> {
    let mut req = Request::new(GetRequest { index: 1 });
    if let Some(key) = key {
        req.metadata_mut()
            .insert("x-api-key", key.parse().expect("ascii key"));
    }
    req
}

fn metadata<'a>(status: &'a Status, name: &str) -> &'a str {
    status
        .metadata()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
}

/// Asserts `status` is the layer's `RESOURCE_EXHAUSTED` for `rule`, with the same retry delay in
/// every place the layer puts it: the quota's delay `max`, less the time since the call that
/// filled it (under a second, or a few on a very loaded machine).
fn assert_exhausted(status: &Status, rule: &str, max: Duration) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let secs: u64 = metadata(status, "retry-after")
        .parse()
        .expect("retry-after");
    assert!(
        secs <= max.as_secs() && secs + 5 > max.as_secs() && secs > 0,
        "retry-after: {secs}"
    );
    assert_eq!(
        status.message(),
        format!("Rate limit `{rule}` exceeded: retry in {secs} s.")
    );
    // The exact delay, rounded up to the second by `retry-after`, to the millisecond here.
    let pushback: u64 = metadata(status, "grpc-retry-pushback-ms")
        .parse()
        .expect("grpc-retry-pushback-ms");
    assert!(
        (secs - 1) * 1000 < pushback && pushback <= secs * 1000,
        "{pushback} ms"
    );
    if rule == "api" {
        assert!(metadata(status, "ratelimit").starts_with("\"api\";r=0;"));
    }
    let details = status.check_error_details().expect("google.rpc.Status");
    let delay = details
        .retry_info()
        .and_then(|r| r.retry_delay)
        .expect("RetryInfo");
    assert!(
        delay <= Duration::from_millis(pushback) && delay > Duration::from_millis(pushback - 1),
        "{delay:?} vs {pushback} ms"
    );
    let violation = details
        .quota_failure()
        .and_then(|q| q.violations.first().cloned())
        .expect("QuotaFailure");
    assert_eq!(violation.subject, format!("rule:{rule}"));
    assert_eq!(violation.description, status.message());
}

on_both_backends!(
    unary_calls_are_limited_per_api_key_then_resource_exhausted,
    &[("API_LIMIT", "3/minute")],
    |app: RunningApp| async move {
        let mut c = client(&app).await;
        for i in 0..3 {
            let res = c.get(get(Some("alice"))).await.expect("under the limit");
            assert_eq!(
                res.get_ref().text,
                "Make it work, make it right, make it fast."
            );
            // `r` calls left; the quota is full again in `t` s: 20 s per call made, less the
            // time since the first (under a second, or a few on a very loaded machine).
            let left = 2 - i;
            let header = res.metadata().get("ratelimit").map(|v| v.to_str());
            let Some(Ok(header)) = header else {
                panic!("call {i}: no RateLimit header")
            };
            let t: u32 = header
                .strip_prefix(&format!("\"api\";r={left};t="))
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("call {i}: {header}"));
            let full = 20 * (i + 1);
            assert!(t <= full && t + 5 > full, "call {i}: {header}");
        }
        // 3 a minute: one every 20 s.
        let status = c.get(get(Some("alice"))).await.expect_err("limited");
        assert_exhausted(&status, "api", Duration::from_secs(20));
        // Per key: another caller is not limited, nor a caller without a key (by IP).
        c.get(get(Some("bob"))).await.expect("another key");
        c.get(get(None)).await.expect("by IP");
        // The stream method counts against the same quota.
        for _ in 0..2 {
            c.get(get(Some("carol"))).await.expect("under the limit");
        }
        let mut req = Request::new(StreamRequest { n: 1 });
        req.metadata_mut()
            .insert("x-api-key", "carol".parse().unwrap());
        let mut quotes = c.stream(req).await.expect("third call").into_inner();
        assert_eq!(
            quotes.message().await.expect("quote").map(|q| q.index),
            Some(0)
        );
        assert_eq!(quotes.message().await.expect("end"), None);
        let mut req = Request::new(StreamRequest { n: 1 });
        req.metadata_mut()
            .insert("x-api-key", "carol".parse().unwrap());
        assert_exhausted(
            &c.stream(req).await.expect_err("limited"),
            "api",
            Duration::from_secs(20),
        );
    }
);

on_both_backends!(
    bad_input_gets_an_answer_never_a_crash,
    &[("API_LIMIT", "2/minute")],
    |app: RunningApp| async move {
        let mut c = client(&app).await;
        // A stream longer than the bound: INVALID_ARGUMENT, at once (the call counts).
        for n in [MAX_STREAM_LEN + 1, u32::MAX] {
            let mut req = Request::new(StreamRequest { n });
            req.metadata_mut()
                .insert("x-api-key", "greedy".parse().unwrap());
            let status = c.stream(req).await.expect_err("too long");
            assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
            assert_eq!(
                status.message(),
                format!("n = {n}: a stream has at most {MAX_STREAM_LEN} quotes")
            );
        }
        // Odd API keys are keys like any other: hashed, counted, limited.
        let long = "k".repeat(8 * 1024);
        let odd: [&[u8]; 4] = [b"\xff\xfe not utf-8", long.as_bytes(), b"a b\tc", b"%00"];
        for key in odd {
            let value = MetadataValue::try_from(key).expect("a valid header value");
            for _ in 0..2 {
                let mut req = Request::new(GetRequest { index: 7 });
                req.metadata_mut().insert("x-api-key", value.clone());
                c.get(req).await.expect("under the limit");
            }
            let mut req = Request::new(GetRequest { index: 7 });
            req.metadata_mut().insert("x-api-key", value.clone());
            assert_exhausted(
                &c.get(req).await.expect_err("limited"),
                "api",
                Duration::from_secs(30),
            );
        }
        // An empty key is no key: the caller is counted by IP.
        for _ in 0..2 {
            c.get(get(Some(""))).await.expect("by IP");
        }
        assert_exhausted(
            &c.get(get(None)).await.expect_err("the same IP"),
            "api",
            Duration::from_secs(30),
        );
        // A repeated key: the first value counts.
        let mut req = get(Some("dave"));
        req.metadata_mut()
            .append("x-api-key", "erin".parse().unwrap());
        c.get(req).await.expect("dave's first call");
        c.get(get(Some("dave"))).await.expect("dave's second call");
        assert_exhausted(
            &c.get(get(Some("dave"))).await.expect_err("dave limited"),
            "api",
            Duration::from_secs(30),
        );
        c.get(get(Some("erin"))).await.expect("erin untouched");
    }
);

/// Opens `Quotes.Stream` for `n` quotes as the caller with API key `key`, and reads the first
/// quote: once it arrives, the server is serving the stream (and holds its lease).
async fn open_stream(c: &mut Client, key: &str, n: u32) -> Result<Streaming<Quote>, Status> {
    let mut req = Request::new(StreamRequest { n });
    req.metadata_mut()
        .insert("x-api-key", key.parse().expect("ascii key"));
    let mut quotes = c.stream(req).await?.into_inner();
    let first = quotes.message().await?.expect("a first quote");
    assert_eq!(first.index, 0);
    Ok(quotes)
}

/// Opens a stream as soon as the server has released a lease of `key`: the release follows the
/// end (or the cancellation) of a stream asynchronously, by one more limiter call.
async fn open_stream_once_released(c: &mut Client, key: &str, n: u32) -> Streaming<Quote> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match open_stream(c, key, n).await {
            Ok(quotes) => return quotes,
            Err(status) if status.code() == Code::ResourceExhausted => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no lease released within 10 s: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
}

on_both_backends!(
    a_stream_holds_a_lease_until_it_ends_or_is_dropped,
    &[
        ("API_LIMIT", "1000/minute"),
        ("STREAM_CONCURRENCY", "2"),
        // The second stream (2 quotes) stays open for this second, ample time to be seen
        // holding its lease.
        ("STREAM_INTERVAL_MS", "1000")
    ],
    |app: RunningApp| async move {
        let mut c = client(&app).await;
        let long = open_stream(&mut c, "alice", MAX_STREAM_LEN)
            .await
            .expect("first stream");
        let mut short = open_stream(&mut c, "alice", 2)
            .await
            .expect("second stream");
        // Two streams in flight: a third is refused, for a second (the earliest a lease may be
        // free again; the rule's lease expiry is much longer).
        let status = open_stream(&mut c, "alice", 1)
            .await
            .expect_err("third stream");
        assert_exhausted(&status, "streams", Duration::from_secs(1));
        // Per key, and streams only: other callers stream, alice's unary calls pass.
        open_stream(&mut c, "bob", 1).await.expect("bob's stream");
        c.get(get(Some("alice"))).await.expect("a unary call");

        // The short stream ends: its lease goes back.
        assert_eq!(
            short.message().await.expect("quote").map(|q| q.index),
            Some(1)
        );
        assert_eq!(short.message().await.expect("end"), None);
        let mut again = open_stream_once_released(&mut c, "alice", MAX_STREAM_LEN).await;
        let status = open_stream(&mut c, "alice", 1)
            .await
            .expect_err("two in flight again");
        assert_eq!(status.code(), Code::ResourceExhausted);

        // The client drops the long stream mid-way: the server cancels it and frees the lease.
        drop(long);
        let _third = open_stream_once_released(&mut c, "alice", MAX_STREAM_LEN).await;
        assert_eq!(
            open_stream(&mut c, "alice", 1)
                .await
                .expect_err("two in flight again")
                .code(),
            Code::ResourceExhausted
        );
        again.message().await.expect("still streaming");
    }
);

/// With `LIMIT_ON_ERROR=closed`, a call Redis cannot decide is `UNAVAILABLE` with a retry
/// delay of one second: what gRPC clients retry on.
#[tokio::test]
async fn redis_down_with_limit_on_error_closed_is_unavailable() {
    let mut server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let app = start(Some(&server), &[("LIMIT_ON_ERROR", "closed")]).await;
    let mut c = client(&app).await;
    c.get(get(Some("alice"))).await.expect("Redis up");
    server.stop();
    let status = c.get(get(Some("alice"))).await.expect_err("Redis down");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        status.message(),
        "The rate limiter is unavailable; retry shortly."
    );
    assert_eq!(metadata(&status, "retry-after"), "1");
    assert_eq!(metadata(&status, "grpc-retry-pushback-ms"), "1000");
    let details = status.check_error_details().expect("google.rpc.Status");
    assert_eq!(
        details.retry_info().and_then(|r| r.retry_delay),
        Some(Duration::from_secs(1))
    );
}

/// `REDIS_URL=rediss://…` with `REDIS_TLS_CA` naming the PEM of the server's certificate
/// authority: calls are decided in that TLS-only Redis (with `LIMIT_ON_ERROR=closed`, a Redis
/// out of reach would answer `UNAVAILABLE`). A `REDIS_TLS_CA` that is missing or holds no
/// certificate stops the app at start, naming the variable and the path.
#[tokio::test]
async fn calls_are_decided_in_redis_over_tls_with_redis_tls_ca() {
    let tls = TlsRedis::start();
    let url = tls.server.url();
    let app = spawn(
        env!("CARGO_BIN_EXE_tonic-app"),
        &[
            ("REDIS_URL", &url),
            ("REDIS_TLS_CA", &tls.ca_file),
            ("API_LIMIT", "1/minute"),
            ("LIMIT_ON_ERROR", "closed"),
            ("REDIS_TIMEOUT_MS", "5000"),
        ],
    )
    .await;
    let mut c = client(&app).await;
    c.get(get(Some("alice")))
        .await
        .expect("decided in the TLS Redis");
    let status = c.get(get(Some("alice"))).await.expect_err("over the limit");
    assert_exhausted(&status, "api", Duration::from_secs(60));
    assert!(
        !tls.keys().await.is_empty(),
        "the decisions are in the TLS Redis"
    );

    assert_a_bad_redis_tls_ca_stops_the_app(env!("CARGO_BIN_EXE_tonic-app"), &url).await;
}

#[tokio::test]
async fn bad_configuration_exits_with_a_message_naming_the_variable() {
    for (name, value) in [
        ("STREAM_INTERVAL_MS", "fast"),
        ("STREAM_INTERVAL_MS", "10001"),
        ("API_LIMIT", "0/minute"),
        ("LIMIT_ON_ERROR", "maybe"),
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tonic-app"))
            .env_clear()
            .env("BIND", "127.0.0.1:0")
            .env(name, value)
            .output()
            .await
            .expect("run tonic-app");
        assert_eq!(out.status.code(), Some(2), "{name}={value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{name}={value:?}")),
            "{name}={value}: {stderr}"
        );
    }
}

/// On the wire, a limited call is *trailers-only*: one HEADERS frame that ends the stream and
/// carries `grpc-status`, as gRPC's protocol spec has servers answer an immediate error;
/// an admitted call has headers, a message and trailers.
#[tokio::test]
async fn a_limited_call_is_one_headers_frame_on_the_wire() {
    let app = start(None, &[("API_LIMIT", "1/minute")]).await;
    let tcp = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    let (mut h2, connection) = h2::client::handshake(tcp).await.expect("HTTP/2");
    tokio::spawn(connection);
    let mut answers = Vec::new();
    for _ in 0..2 {
        h2 = h2.ready().await.expect("ready");
        let req = http::Request::post(format!("http://{}/quotes.v1.Quotes/Get", app.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("x-api-key", "wire")
            .body(())
            .expect("request");
        let (res, mut body) = h2.send_request(req, false).expect("send");
        // One length-prefixed message: uncompressed, 0 bytes (an empty GetRequest).
        body.send_data(bytes::Bytes::from_static(&[0; 5]), true)
            .expect("send the message");
        let res = res.await.expect("response");
        let grpc_status = |h: &http::HeaderMap| {
            h.get("grpc-status")
                .map(|v| v.to_str().unwrap_or("?").to_owned())
        };
        let headers = grpc_status(res.headers());
        answers.push((res.status(), headers, res.body().is_end_stream()));
        if !res.body().is_end_stream() {
            let mut body = res.into_body();
            while let Some(data) = body.data().await {
                data.expect("data");
            }
            let trailers = body.trailers().await.expect("trailers");
            assert_eq!(
                trailers.as_ref().and_then(grpc_status).as_deref(),
                Some("0")
            );
        }
    }
    assert_eq!(
        answers,
        [
            (http::StatusCode::OK, None, false),
            (http::StatusCode::OK, Some("8".to_owned()), true),
        ]
    );
}
