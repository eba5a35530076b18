//! Costs charged after the fact, on every backend: a limiter's `charge` takes what it says
//! whatever is left, and the layer settles what a response reports (`ActualCost`) or refunds
//! (`Rule::refund_when`).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, Full};
use redis_guard::ConfigErrorKind;
use redis_guard::rate_limit::{
    ActualCost, Algorithm, CostReport, CustomAlgorithm, HeaderKey, Key, Limiter, LimiterError,
    MissingKey, Quota, RateLimitBody, RateLimitLayer, RedisLimiter, ResponseBody, Rule,
};
use redis_guard_tests::{ALGORITHMS, Harness, backend_suite, by_client, call, from, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tower::{Layer, ServiceExt};

type Body = Full<Bytes>;

/// What `rule` has left for `key`, as an inspection sees it.
async fn remaining(limiter: &dyn Limiter, rule: &Rule, key: &str) -> u32 {
    limiter
        .inspect(rule, Key::from(key))
        .await
        .expect("inspect")
        .state
        .remaining
}

async fn a_charge_takes_what_it_says_whatever_is_left(h: Harness) {
    let limiter = h.limiter().await;
    for algorithm in ALGORITHMS {
        let rule = Rule::new(format!("tokens-{algorithm:?}"), Quota::per_hour(10))
            .with_algorithm(algorithm.clone());
        for _ in 0..2 {
            assert!(
                limiter
                    .check(&rule, Key::from("k"))
                    .await
                    .expect("check")
                    .allowed
            );
        }
        limiter
            .charge(&rule, Key::from("k"), 5)
            .await
            .expect("charge");
        assert_eq!(remaining(&*limiter, &rule, "k").await, 3, "{algorithm:?}");
        // A charge is never denied: past the limit, the key waits.
        limiter
            .charge(&rule, Key::from("k"), 20)
            .await
            .expect("charge");
        assert_eq!(remaining(&*limiter, &rule, "k").await, 0, "{algorithm:?}");
        assert!(
            !limiter
                .check(&rule, Key::from("k"))
                .await
                .expect("check")
                .allowed
        );
        // Nothing to charge: nothing changes; another key is untouched.
        limiter
            .charge(&rule, Key::from("k2"), 0)
            .await
            .expect("charge");
        assert_eq!(remaining(&*limiter, &rule, "k2").await, 10, "{algorithm:?}");
    }
}

/// GCRA keeps the whole debt; the token bucket empties and keeps none below.
async fn gcra_keeps_the_debt_the_bucket_does_not(h: Harness) {
    let limiter = h.limiter().await;
    let gcra = Rule::new("gcra", Quota::per_hour(10));
    let bucket = Rule::new("bucket", Quota::per_hour(10)).with_algorithm(Algorithm::TokenBucket);
    for rule in [&gcra, &bucket] {
        limiter
            .charge(rule, Key::from("k"), 30)
            .await
            .expect("charge");
    }
    // One emission interval (6 min) later, the bucket has a token; GCRA is 20 units in debt.
    h.wait(Duration::from_secs(361)).await;
    assert!(
        limiter
            .check(&bucket, Key::from("k"))
            .await
            .expect("check")
            .allowed
    );
    let denied = limiter.check(&gcra, Key::from("k")).await.expect("check");
    assert!(!denied.allowed);
    h.assert_wait(denied.retry_after, Duration::from_secs(20 * 360 - 1));
}

async fn a_custom_algorithm_has_no_charge(h: Harness) {
    let limiter = h.limiter().await;
    let rule = Rule::new("lua", Quota::per_hour(10)).with_algorithm(Algorithm::Custom(
        CustomAlgorithm::new(
            "noop",
            "return function() return true, 0, 0, 0, function() end end",
        ),
    ));
    let err = limiter
        .charge(&rule, Key::from("k"), 3)
        .await
        .expect_err("no charge");
    assert!(
        matches!(&err, LimiterError::Config(e) if e.kind() == ConfigErrorKind::Unsupported),
        "{err}"
    );
}

/// An inner service that reports the cost its `x-used` header says for rule `tokens` (half of
/// it for rule `calls`; nothing without the header), and answers `500` when it says `fail`.
fn reporting(
    tokens: &str,
    calls: &str,
) -> impl tower::Service<
    http::Request<Body>,
    Response = http::Response<Body>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<http::Response<Body>, std::convert::Infallible>> + Send,
> + Clone
+ Send {
    let (tokens, calls): (Arc<str>, Arc<str>) = (tokens.into(), calls.into());
    tower::service_fn(move |req: http::Request<Body>| {
        let (tokens, calls) = (Arc::clone(&tokens), Arc::clone(&calls));
        async move {
            let used = req
                .headers()
                .get("x-used")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let mut res = http::Response::new(Body::default());
            match used.as_deref() {
                Some("fail") => *res.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR,
                Some(n) => {
                    let n: u32 = n.parse().expect("a cost");
                    res.extensions_mut()
                        .insert(ActualCost::of(tokens, n).and(calls, n / 2));
                }
                None => {}
            }
            Ok::<_, std::convert::Infallible>(res)
        }
    })
}

fn used(client: &str, used: Option<&str>) -> http::Request<Body> {
    let mut req = http::Request::get("/").header("x-client", client);
    if let Some(used) = used {
        req = req.header("x-used", used);
    }
    req.body(Body::default()).expect("request")
}

async fn the_response_settles_what_it_reports(h: Harness) {
    let limiter = h.limiter().await;
    for algorithm in ALGORITHMS {
        // Admitted on a guess of 10, settled on what the response reports.
        let tokens = Rule::new(format!("tokens-{algorithm:?}"), Quota::per_hour(100))
            .with_algorithm(algorithm.clone())
            .with_cost(10)
            .charged_after_response();
        let name = tokens.name().to_owned();
        // A second rule on another key (another slot on a cluster), settled too.
        let calls = Rule::new(format!("calls-{algorithm:?}"), Quota::per_hour(100))
            .with_algorithm(algorithm.clone())
            .with_cost(1)
            .charged_after_response();
        let layer = RateLimitLayer::builder(Arc::clone(&limiter))
            .rule_with(tokens.clone(), by_client())
            .rule_with(
                calls.clone(),
                HeaderKey::new(http::HeaderName::from_static("x-used")),
            )
            .missing_key(MissingKey::Skip)
            .build()
            .expect("valid");
        let svc = layer.layer(reporting(&name, calls.name()));
        for (cost, left) in [
            (Some("25"), 75),
            (Some("3"), 72),
            (None, 62),
            (Some("0"), 62),
        ] {
            let reply = call(svc.clone(), used("k", cost)).await;
            assert_eq!(reply.status, 200, "{algorithm:?}");
            assert_eq!(
                remaining(&*limiter, &tokens, "k").await,
                left,
                "{algorithm:?} {cost:?}"
            );
        }
        // "calls" reserved 1 on admission, then took what was reported: 12 of "25", 1 of "3", on
        // each key.
        assert_eq!(
            remaining(&*limiter, &calls, "25").await,
            88,
            "{algorithm:?}"
        );
        assert_eq!(remaining(&*limiter, &calls, "3").await, 99, "{algorithm:?}");
        if h.is_redis() && algorithm == Algorithm::FixedWindow {
            // Read back from Redis: the window's count is what the responses reported, 25 + 3,
            // and the 10 of the request that reported nothing, and 0.
            let key = RedisLimiter::new(h.backend().await).key_name(
                &redis_guard::rate_limit::Check::new(tokens.clone(), Key::from("k")),
            );
            let mut conn = h.inspect().await;
            let v: String = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .expect("GET");
            assert_eq!(v.split(':').nth(1), Some("38"), "{v}");
        }
    }
}

async fn a_server_error_refunds_the_request(h: Harness) {
    let limiter = h.limiter().await;
    for algorithm in ALGORITHMS {
        let rule = Rule::new(format!("api-{algorithm:?}"), Quota::per_hour(10))
            .with_algorithm(algorithm.clone())
            .with_cost(2)
            .refund_when(http::StatusCode::is_server_error);
        let svc = RateLimitLayer::builder(Arc::clone(&limiter))
            .rule_with(rule.clone(), by_client())
            .build()
            .expect("valid")
            .layer(reporting("tokens", "calls"));
        assert_eq!(call(svc.clone(), used("k", None)).await.status, 200);
        assert_eq!(remaining(&*limiter, &rule, "k").await, 8, "{algorithm:?}");
        for _ in 0..3 {
            assert_eq!(call(svc.clone(), used("k", Some("fail"))).await.status, 500);
        }
        assert_eq!(
            remaining(&*limiter, &rule, "k").await,
            8,
            "{algorithm:?}: refunded"
        );
    }
}

/// Waits until `key` has `n` left of `rule`: a settlement after a dropped body or response
/// future runs in a task of its own. Fails after 10 s.
async fn until_remaining(limiter: &dyn Limiter, rule: &Rule, key: &str, n: u32) {
    let wait = async {
        while remaining(limiter, rule, key).await != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("{key} never had {n} left of {}", rule.name()));
}

/// A rule of `algorithm`, 100 units an hour, reserving `reserve` per request and settled on
/// what the response reports.
fn tokens(algorithm: &Algorithm, reserve: u32) -> Rule {
    Rule::new(format!("tokens-{algorithm:?}"), Quota::per_hour(100))
        .with_algorithm(algorithm.clone())
        .with_cost(reserve)
        .charged_after_response()
}

/// An inner service that sends `0` on `events` when a request enters it, waits for a permit of
/// `gate` when the request has an `x-hold` header, and reports the cost its `x-used` header
/// says for rule `rule`.
fn gated(
    rule: Arc<str>,
    gate: Arc<Semaphore>,
    events: mpsc::UnboundedSender<u16>,
) -> impl tower::Service<
    http::Request<Body>,
    Response = http::Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<http::Response<Body>, Infallible>> + Send,
> + Clone
+ Send {
    tower::service_fn(move |req: http::Request<Body>| {
        let (rule, gate, events) = (Arc::clone(&rule), Arc::clone(&gate), events.clone());
        async move {
            if req.headers().contains_key("x-hold") {
                events.send(0).expect("test alive");
                gate.acquire().await.expect("open").forget();
            }
            let used = req.headers().get("x-used").and_then(|v| v.to_str().ok());
            let used: u32 = used.expect("x-used").parse().expect("a cost");
            let mut res = http::Response::new(Body::default());
            res.extensions_mut().insert(ActualCost::of(rule, used));
            Ok::<_, Infallible>(res)
        }
    })
}

async fn a_reservation_bounds_concurrent_requests(h: Harness) {
    let limiter = h.limiter().await;
    // A guess of 0 reserves nothing: every concurrent request would pass on one unit left.
    let refused = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule_with(tokens(&Algorithm::Gcra, 0), by_client())
        .build()
        .err()
        .map(|e| e.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("reservation")),
        "{refused:?}"
    );
    for algorithm in ALGORITHMS {
        let rule = tokens(&algorithm, 1);
        let gate = Arc::new(Semaphore::new(0));
        let (events, mut seen) = mpsc::unbounded_channel();
        let svc = RateLimitLayer::builder(Arc::clone(&limiter))
            .rule_with(rule.clone(), by_client())
            .build()
            .expect("valid")
            .layer(gated(rule.name().into(), Arc::clone(&gate), events.clone()));
        // 99 used: one unit left.
        assert_eq!(call(svc.clone(), used("k", Some("99"))).await.status, 200);
        assert_eq!(remaining(&*limiter, &rule, "k").await, 1, "{algorithm:?}");
        // 100 at once, each reserving 1; an admitted one waits in the handler, so every request
        // is either inside (0) or told to come back (429) before any answer 200.
        for _ in 0..100 {
            let (svc, events) = (svc.clone(), events.clone());
            let mut req = used("k", Some("1"));
            req.headers_mut()
                .insert("x-hold", http::HeaderValue::from_static("1"));
            tokio::spawn(async move { events.send(call(svc, req).await.status) });
        }
        let (mut inside, mut limited) = (0, 0);
        for _ in 0..100 {
            let event = tokio::time::timeout(Duration::from_secs(10), seen.recv()).await;
            match event.expect("every request decided").expect("open") {
                0 => inside += 1,
                429 => limited += 1,
                other => panic!("{algorithm:?}: status {other} before the gate opened"),
            }
        }
        assert_eq!((inside, limited), (1, 99), "{algorithm:?}");
        gate.add_permits(1);
        assert_eq!(seen.recv().await, Some(200));
        assert_eq!(remaining(&*limiter, &rule, "k").await, 0, "{algorithm:?}");
    }
}

/// A streamed response body: the chunks sent on its channel, then its end once every sender
/// is gone. One queue carries both, so a chunk sent just before the sender is dropped is always
/// read before the end. (`http_body_util::channel::Channel` learns of its end from a second
/// channel, which it checks after finding no frame: a sender that sends its last frame and is
/// dropped while the server polls the body between those two checks ends the body without
/// that frame. Under load that dropped the last frame of a response sent over a socket below.)
struct Feed(mpsc::Receiver<Bytes>);

impl http_body::Body for Feed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

/// The layer answers over it in a `ResponseBody` around it.
impl RateLimitBody for Feed {
    type Out = ResponseBody<Self>;

    fn passed(body: Self) -> Self::Out {
        ResponseBody::new(body)
    }

    fn holding(body: ResponseBody<Self>) -> Self::Out {
        body
    }

    fn answer(bytes: Bytes) -> Self::Out {
        ResponseBody::full(bytes)
    }
}

/// An inner service that streams its body: it hands the test the body's sender and the
/// request's [`CostReport`], and reports 30 units of rule `rule` in the response head.
fn streaming<B: Send + 'static>(
    rule: Arc<str>,
    feeds: mpsc::UnboundedSender<(mpsc::Sender<Bytes>, CostReport)>,
) -> impl tower::Service<
    http::Request<B>,
    Response = http::Response<Feed>,
    Error = Infallible,
    Future = impl Future<Output = Result<http::Response<Feed>, Infallible>> + Send,
> + Clone
+ Send {
    tower::service_fn(move |req: http::Request<B>| {
        let (rule, feeds) = (Arc::clone(&rule), feeds.clone());
        async move {
            let report = req.extensions().get::<CostReport>().cloned();
            let (tx, rx) = mpsc::channel(1);
            let body = Feed(rx);
            feeds
                .send((tx, report.expect("the layer's report")))
                .expect("test alive");
            let mut res = http::Response::new(body);
            res.extensions_mut().insert(ActualCost::of(rule, 30));
            Ok::<_, Infallible>(res)
        }
    })
}

async fn a_streamed_body_settles_after_its_last_frame(h: Harness) {
    let limiter = h.limiter().await;
    for algorithm in ALGORITHMS {
        let rule = tokens(&algorithm, 10);
        let (feeds, mut fed) = mpsc::unbounded_channel();
        let svc = RateLimitLayer::builder(Arc::clone(&limiter))
            .rule_with(rule.clone(), by_client())
            .build()
            .expect("valid")
            .layer(streaming(rule.name().into(), feeds));
        let res = svc.clone().oneshot(from("k")).await.expect("infallible");
        assert_eq!(res.status(), 200);
        let (tx, report) = fed.recv().await.expect("a stream");
        let mut body = res.into_body();
        tx.send(Bytes::from_static(b"first")).await.expect("open");
        let frame = body.frame().await.expect("a frame").expect("data");
        assert_eq!(frame.into_data().ok().as_deref(), Some(&b"first"[..]));
        assert_eq!(
            remaining(&*limiter, &rule, "k").await,
            90,
            "{algorithm:?}: the reservation stands while the body streams"
        );
        // The stream learns its cost at its end, and reports it: it replaces the head's 30.
        report.report(rule.name(), 25);
        tx.send(Bytes::from_static(b"last")).await.expect("open");
        drop(tx);
        let rest = body.collect().await.expect("body").to_bytes();
        assert_eq!(&rest[..], b"last");
        assert_eq!(
            remaining(&*limiter, &rule, "k").await,
            75,
            "{algorithm:?}: settled on the report once the last frame is out"
        );
        // The client goes away mid-stream: the body is dropped, and the cost reported by then
        // is settled in the background.
        let res = svc.clone().oneshot(from("k")).await.expect("infallible");
        let (tx, report) = fed.recv().await.expect("a stream");
        assert_eq!(remaining(&*limiter, &rule, "k").await, 65, "{algorithm:?}");
        report.report(rule.name(), 40);
        drop(res);
        until_remaining(&*limiter, &rule, "k", 35).await;
        drop(tx);
    }
}

async fn a_stream_is_settled_before_its_end_reaches_the_client(h: Harness) {
    let limiter = h.limiter().await;
    let rule = tokens(&Algorithm::Gcra, 10);
    let (feeds, mut fed) = mpsc::unbounded_channel();
    let layer = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule_with(rule.clone(), by_client())
        .build()
        .expect("valid");
    let app = serve(layer.layer(streaming(rule.name().into(), feeds))).await;
    let mut client = TcpStream::connect(app).await.expect("connect");
    client
        .write_all(b"GET / HTTP/1.1\r\nhost: test\r\nx-client: k\r\nconnection: close\r\n\r\n")
        .await
        .expect("request");
    let (tx, report) = fed.recv().await.expect("a stream");
    tx.send(Bytes::from_static(b"first")).await.expect("open");
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("first") {
        let mut buf = [0; 1024];
        let n = client.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed before the first frame");
        seen.extend_from_slice(&buf[..n]);
    }
    assert_eq!(remaining(&*limiter, &rule, "k").await, 90, "streaming");
    report.report(rule.name(), 25);
    tx.send(Bytes::from_static(b"last")).await.expect("open");
    drop(tx);
    // The server closes the connection once the end is written: the cost is settled by then.
    client.read_to_end(&mut seen).await.expect("the end");
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.contains("last"), "the whole response: {seen:?}");
    assert_eq!(remaining(&*limiter, &rule, "k").await, 75);
}

async fn a_dropped_response_future_still_settles(h: Harness) {
    let limiter = h.limiter().await;
    for algorithm in ALGORITHMS {
        let rule = tokens(&algorithm, 10);
        let name: Arc<str> = rule.name().into();
        let (entered, mut inside) = mpsc::unbounded_channel();
        // A handler that reports what its `x-used` header says, then never answers.
        let handler = tower::service_fn(move |req: http::Request<Body>| {
            let (name, entered) = (Arc::clone(&name), entered.clone());
            async move {
                let report = req.extensions().get::<CostReport>().cloned();
                let report = report.expect("the layer's report");
                if let Some(used) = req.headers().get("x-used").and_then(|v| v.to_str().ok()) {
                    report.report(name, used.parse().expect("a cost"));
                }
                entered.send(()).expect("test alive");
                std::future::pending::<Result<http::Response<Body>, Infallible>>().await
            }
        });
        let svc = RateLimitLayer::builder(Arc::clone(&limiter))
            .rule_with(rule.clone(), by_client())
            .build()
            .expect("valid")
            .layer(handler);
        // The client goes away while the handler works: the future is dropped, and the cost
        // reported by then is settled in a task of its own.
        let mut pending = Box::pin(svc.clone().oneshot(used("k", Some("50"))));
        tokio::select! {
            _ = &mut pending => panic!("the handler never answers"),
            _ = inside.recv() => {}
        }
        assert_eq!(remaining(&*limiter, &rule, "k").await, 90, "{algorithm:?}");
        drop(pending);
        until_remaining(&*limiter, &rule, "k", 50).await;
        // Nothing reported: the reservation stands.
        let mut pending = Box::pin(svc.clone().oneshot(used("k", None)));
        tokio::select! {
            _ = &mut pending => panic!("the handler never answers"),
            _ = inside.recv() => {}
        }
        drop(pending);
        assert_eq!(remaining(&*limiter, &rule, "k").await, 40, "{algorithm:?}");
    }
}

backend_suite!(
    a_reservation_bounds_concurrent_requests,
    a_streamed_body_settles_after_its_last_frame,
    a_stream_is_settled_before_its_end_reaches_the_client,
    a_dropped_response_future_still_settles,
    a_charge_takes_what_it_says_whatever_is_left,
    gcra_keeps_the_debt_the_bucket_does_not,
    a_custom_algorithm_has_no_charge,
    the_response_settles_what_it_reports,
    a_server_error_refunds_the_request,
);
