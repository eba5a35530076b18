//! `IdempotencyLayer` on every backend: a retry replayed (over real HTTP), `409` while the first
//! runs, `422` for a key reused on another request, `400` and `413`, two app instances sharing
//! keys, keys released by a `5xx` but kept by a client that went away (its request runs on and
//! is stored), keys scoped per client, leases and retention on the clock, a TTL on every key,
//! values that are not ours, and a full memory store.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request, StatusCode};
use http_body_util::Full;
use redis_guard::backend::ManualClock;
use redis_guard::idempotency::{
    IdempotencyLayer, IdempotencyLayerBuilder, MemoryIdempotencyStore, Rejection,
};
use redis_guard::session::{Session, SessionLayer, SessionUser};
use redis_guard_tests::{Harness, Reply, backend_suite, call};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

/// The payment handler's state: how often it ran, a gate it waits at, the statuses it answers.
struct Payments {
    calls: AtomicUsize,
    /// One permit per call, once the handler is running.
    entered: Semaphore,
    /// What the handler waits for before answering.
    gate: Semaphore,
    /// The statuses of the next answers (then 201).
    statuses: Mutex<VecDeque<u16>>,
}

impl Payments {
    /// A handler that answers at once (`open`) or waits until the gate opens.
    fn new(open: bool) -> Arc<Self> {
        Arc::new(Self {
            calls: AtomicUsize::new(0),
            entered: Semaphore::new(0),
            gate: Semaphore::new(if open { Semaphore::MAX_PERMITS / 2 } else { 0 }),
            statuses: Mutex::default(),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Waits until the handler has been entered once more.
    async fn entered(&self) {
        self.entered.acquire().await.expect("entered").forget();
    }
}

/// `201` with a payment id counted per call, a header, a cookie, and the body echoed.
async fn pay(State(p): State<Arc<Payments>>, body: String) -> Response {
    let n = p.calls.fetch_add(1, Ordering::SeqCst) + 1;
    p.entered.add_permits(1);
    drop(p.gate.acquire().await.expect("gate"));
    let status = p
        .statuses
        .lock()
        .expect("statuses")
        .pop_front()
        .unwrap_or(201);
    let status = StatusCode::from_u16(status).expect("status");
    let headers = [
        ("content-type", "application/json".to_owned()),
        ("x-payment", n.to_string()),
        ("set-cookie", format!("seen={n}")),
    ];
    (
        status,
        headers,
        format!(r#"{{"payment_id":{n},"for":{body:?}}}"#),
    )
        .into_response()
}

fn app(layer: IdempotencyLayer, payments: &Arc<Payments>) -> Router {
    Router::new()
        .route("/payments", post(pay).get(|| async { "the list" }))
        .route("/refunds", post(pay))
        .layer(layer)
        .with_state(Arc::clone(payments))
}

/// A layer on the harness's store, in one scope shared by every request: the scenarios but
/// [`keys_are_scoped_per_client`] send as one client, through no session layer.
async fn builder(h: &Harness) -> IdempotencyLayerBuilder {
    IdempotencyLayer::builder(h.idempotency_store().await).shared_scope()
}

async fn layer(h: &Harness) -> IdempotencyLayer {
    builder(h).await.build().expect("layer")
}

/// Serves `app` on a fresh local port.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// One HTTP/1.1 request over a new connection: `POST path` with `body` and `headers`.
async fn post_http(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut raw = format!("POST {path} HTTP/1.1\r\nhost: app\r\nconnection: close\r\n");
    for (name, value) in headers {
        raw += &format!("{name}: {value}\r\n");
    }
    raw += &format!("content-length: {}\r\n\r\n{body}", body.len());
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(raw.as_bytes()).await.expect("send");
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.expect("read");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP response");
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split(' ').nth(1));
    let mut headers = HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(": ").expect("a header line");
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).expect("name"),
            value.parse().expect("value"),
        );
    }
    Reply {
        status: status.and_then(|s| s.parse().ok()).expect("a status"),
        headers,
        body: body.to_owned(),
    }
}

/// `POST path` with `Idempotency-Key: key` and `body`, over HTTP.
async fn pay_http(addr: SocketAddr, path: &str, key: &str, body: &str) -> Reply {
    answered(post_http(addr, path, &[("idempotency-key", key)], body)).await
}

/// Request headers, as name and value.
type Headers<'a> = &'a [(&'a str, &'a str)];

/// A request for the router, through tower.
fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Request<Full<Bytes>> {
    let mut req = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.body(Full::new(Bytes::from(body.to_owned())))
        .expect("request")
}

/// `POST /payments` with `key` and `body`, through tower.
fn pay_tower(app: &Router, key: &str, body: &str) -> impl Future<Output = Reply> + use<> {
    let req = request("POST", "/payments", &[("idempotency-key", key)], body);
    answered(call(app.clone(), req))
}

/// What `reply` answers, within 10 s: a request the layer should answer at once fails the test
/// instead of hanging it when the layer lets it through to a handler that waits.
async fn answered<T>(reply: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), reply)
        .await
        .expect("answered within 10 s")
}

/// The status, `x-payment`, whether it was replayed, and the body.
fn seen(r: &Reply) -> (u16, &str, &str, &str) {
    (
        r.status,
        r.header("x-payment"),
        r.header("idempotent-replayed"),
        r.body.as_str(),
    )
}

async fn a_retry_is_replayed_a_duplicate_in_flight_is_409_a_reuse_is_422(h: &Harness) {
    let payments = Payments::new(false);
    let addr = serve(app(layer(h).await, &payments)).await;
    let first = tokio::spawn(async move { pay_http(addr, "/payments", "k1", "10").await });
    payments.entered().await;
    // The first is still running: the same request is 409, another one with its key 422.
    let running = pay_http(addr, "/payments", "\"k1\"", "10").await;
    assert_eq!(running.status, 409, "{running:?}");
    assert_eq!(running.header("retry-after"), "1");
    assert_eq!(running.header("content-type"), "application/problem+json");
    assert!(
        running.body.contains("still being processed"),
        "{running:?}"
    );
    assert_eq!(pay_http(addr, "/payments", "k1", "11").await.status, 422);
    payments.gate.add_permits(100);
    let first = first.await.expect("first");
    let paid = r#"{"payment_id":1,"for":"10"}"#;
    assert_eq!(seen(&first), (201, "1", "", paid));
    assert_eq!(first.header("set-cookie"), "seen=1");
    // Replayed: status, headers and body, marked, without the cookie; quoted or bare.
    for key in ["k1", "\"k1\""] {
        let again = pay_http(addr, "/payments", key, "10").await;
        assert_eq!(seen(&again), (201, "1", "true", paid));
        assert_eq!(again.header("content-type"), "application/json");
        assert_eq!(again.header("set-cookie"), "");
    }
    // Reused on another body, another path: 422, also after completion.
    for (path, body) in [
        ("/payments", "11"),
        ("/refunds", "10"),
        ("/payments?x=1", "10"),
    ] {
        let reused = pay_http(addr, path, "k1", body).await;
        assert_eq!(reused.status, 422, "{path} {body}: {reused:?}");
        assert!(reused.body.contains("different request"), "{reused:?}");
    }
    assert_eq!(payments.calls(), 1, "the handler ran once");
    // Another key is another request.
    assert_eq!(seen(&pay_http(addr, "/payments", "k2", "10").await).1, "2");
}

async fn missing_or_malformed_keys_are_400_and_large_bodies_413(h: &Harness) {
    let payments = Payments::new(true);
    let app = app(
        builder(h).await.body_limit(16).build().expect("layer"),
        &payments,
    );
    let too_long = "k".repeat(256);
    let cases: [(Headers<'_>, &str, u16); 7] = [
        (&[], "", 400),
        (&[("idempotency-key", "")], "", 400),
        (&[("idempotency-key", "\"\"")], "", 400),
        (&[("idempotency-key", "\"open")], "", 400),
        (&[("idempotency-key", "a, b")], "", 400),
        (&[("idempotency-key", &too_long)], "", 400),
        (&[("idempotency-key", "k")], "seventeen bytes!!", 413),
    ];
    for (headers, body, status) in cases {
        let r = call(app.clone(), request("POST", "/payments", headers, body)).await;
        assert_eq!(r.status, status, "{headers:?}: {r:?}");
        assert_eq!(r.header("content-type"), "application/problem+json");
    }
    let twice = request(
        "POST",
        "/payments",
        &[("idempotency-key", "a"), ("idempotency-key", "a")],
        "",
    );
    assert_eq!(call(app.clone(), twice).await.status, 400);
    // The rejection is in the answer's extensions.
    let res = tower::ServiceExt::oneshot(app.clone(), request("POST", "/payments", &[], ""))
        .await
        .expect("answer");
    assert_eq!(
        res.extensions().get::<Rejection>(),
        Some(&Rejection::MissingKey)
    );
    assert_eq!(payments.calls(), 0);
    // Safe methods pass without a key; a route that does not require one runs without it.
    assert_eq!(
        call(app.clone(), request("GET", "/payments", &[], ""))
            .await
            .body,
        "the list"
    );
    let optional = self::app(
        builder(h).await.required(false).build().expect("layer"),
        &payments,
    );
    for _ in 0..2 {
        assert_eq!(
            call(optional.clone(), request("POST", "/payments", &[], ""))
                .await
                .status,
            201
        );
    }
    assert_eq!(payments.calls(), 2);
}

async fn two_instances_share_their_keys(h: &Harness) {
    let payments = Payments::new(false);
    let a = serve(app(layer(h).await, &payments)).await;
    let b = serve(app(layer(h).await, &payments)).await;
    // Twenty copies of one request at once, half on each instance: one claims the key and
    // runs (held at the gate); the nineteen others are answered 409 meanwhile.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..20 {
        let (addr, tx) = (if i % 2 == 0 { a } else { b }, tx.clone());
        tokio::spawn(async move {
            let r = post_http(addr, "/payments", &[("idempotency-key", "shared")], "5").await;
            tx.send(r.status).expect("send");
        });
    }
    for _ in 0..19 {
        let status = answered(rx.recv()).await.expect("a status");
        assert_eq!(status, 409);
    }
    payments.entered().await;
    assert_eq!(payments.calls(), 1, "one copy runs");
    assert_eq!(pay_http(b, "/payments", "shared", "6").await.status, 422);
    payments.gate.add_permits(100);
    assert_eq!(answered(rx.recv()).await.expect("a status"), 201);
    let replayed = pay_http(b, "/payments", "shared", "5").await;
    assert_eq!(
        seen(&replayed),
        (201, "1", "true", r#"{"payment_id":1,"for":"5"}"#)
    );
    assert_eq!(payments.calls(), 1);
}

async fn a_5xx_or_an_error_status_releases_the_key_a_dropped_request_does_not(h: &Harness) {
    let payments = Payments::new(true);
    payments
        .statuses
        .lock()
        .expect("statuses")
        .extend([500, 503, 429, 409, 404]);
    let app = app(layer(h).await, &payments);
    // Each answer that says "try again" runs the next retry; the 404 is kept.
    for (n, status) in [(1, 500), (2, 503), (3, 429), (4, 409), (5, 404), (5, 404)] {
        let r = pay_tower(&app, "retry", "1").await;
        assert_eq!((r.status, payments.calls()), (status, n), "{r:?}");
    }
    assert_eq!(
        pay_tower(&app, "retry", "1")
            .await
            .header("idempotent-replayed"),
        "true"
    );
    // A response larger than the response limit reaches the client whole, and is not stored.
    let small = self::app(
        builder(h).await.response_limit(8).build().expect("layer"),
        &payments,
    );
    for n in ["6", "7"] {
        let r = pay_tower(&small, "big", "1").await;
        assert_eq!(seen(&r).0, 201);
        assert_eq!(
            (r.header("x-payment"), r.header("idempotent-replayed")),
            (n, "")
        );
        assert_eq!(r.body, format!(r#"{{"payment_id":{n},"for":"1"}}"#));
    }
    // A request dropped while its handler runs (the client went away) keeps its key: the
    // handler runs on, and its response is stored for the retry.
    let blocked = Payments::new(false);
    let held = self::app(layer(h).await, &blocked);
    let req = request("POST", "/payments", &[("idempotency-key", "gone")], "1");
    let task = tokio::spawn(call(held.clone(), req));
    blocked.entered().await;
    task.abort();
    assert!(task.await.expect_err("aborted").is_cancelled());
    assert_eq!(pay_tower(&held, "gone", "1").await.status, 409);
    blocked.gate.add_permits(100);
    let retry = replayed(|| pay_tower(&held, "gone", "1")).await;
    assert_eq!(
        seen(&retry),
        (201, "1", "true", r#"{"payment_id":1,"for":"1"}"#)
    );
    assert_eq!(blocked.calls(), 1);
}

/// What `send` answers once it answers a replay: retried while it is `409` (the first request
/// still running, or its response not stored yet), for 10 s at most.
async fn replayed<F: Future<Output = Reply>>(mut send: impl FnMut() -> F) -> Reply {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = send().await;
        if r.status != 409 || tokio::time::Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A client that sends a payment over HTTP and closes its connection while the handler runs
/// (its own timeout, say): hyper drops the request's future, yet the handler, which made its
/// effect before waiting, runs to the end and its response is stored. The retry is `409` while
/// it runs, then the stored response: one effect.
async fn a_client_that_goes_away_leaves_its_request_running_and_stored(h: &Harness) {
    let payments = Payments::new(false);
    // Outermost: says when the server dropped a request's future before its response.
    let dropped = Arc::new(tokio::sync::Notify::new());
    let watch = Arc::clone(&dropped);
    let app = app(layer(h).await, &payments).layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let on_drop = OnDrop(Some(Arc::clone(&watch)));
            async move {
                let res = next.run(req).await;
                on_drop.disarm();
                res
            }
        },
    ));
    let addr = serve(app).await;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let raw = "POST /payments HTTP/1.1\r\nhost: app\r\nidempotency-key: left\r\n\
               content-length: 1\r\n\r\n7";
    tcp.write_all(raw.as_bytes()).await.expect("send");
    payments.entered().await;
    assert_eq!(payments.calls(), 1, "the effect is made");
    // The client gives up, as a client with a 300 ms timeout would.
    drop(tcp);
    answered(dropped.notified()).await;
    let running = pay_http(addr, "/payments", "left", "7").await;
    assert_eq!(
        (running.status, running.header("retry-after")),
        (409, "1"),
        "{running:?}"
    );
    payments.gate.add_permits(100);
    let retry = replayed(|| pay_http(addr, "/payments", "left", "7")).await;
    assert_eq!(
        seen(&retry),
        (201, "1", "true", r#"{"payment_id":1,"for":"7"}"#),
        "{retry:?}"
    );
    assert_eq!(payments.calls(), 1, "one effect");
}

/// Notifies its `Notify` when dropped while it holds one.
struct OnDrop(Option<Arc<tokio::sync::Notify>>);

impl OnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(n) = self.0.take() {
            n.notify_one();
        }
    }
}

/// The default layer: keys scoped by the session's user.
async fn session_scoped(h: &Harness) -> IdempotencyLayer {
    IdempotencyLayer::new(h.idempotency_store().await).expect("layer")
}

async fn keys_are_scoped_per_client(h: &Harness) {
    let payments = Payments::new(true);
    // By default, the session's user.
    let app = app(session_scoped(h).await, &payments);
    let as_user = |user: &str| {
        let mut req = request("POST", "/payments", &[("idempotency-key", "same")], "1");
        req.extensions_mut().insert(SessionUser(user.to_owned()));
        call(app.clone(), req)
    };
    assert_eq!(as_user("alice").await.header("x-payment"), "1");
    assert_eq!(as_user("bob").await.header("x-payment"), "2");
    let alice = as_user("alice").await;
    assert_eq!(
        (
            alice.header("x-payment"),
            alice.header("idempotent-replayed")
        ),
        ("1", "true")
    );
    // No session at all (no session layer): refused, never run in a scope every client shares.
    for _ in 0..2 {
        let res = tower::ServiceExt::oneshot(
            app.clone(),
            request("POST", "/payments", &[("idempotency-key", "same")], "1"),
        )
        .await
        .expect("answer");
        assert_eq!(res.status(), 500);
        assert_eq!(
            res.extensions().get::<Rejection>(),
            Some(&Rejection::NoSession)
        );
    }
    assert_eq!(payments.calls(), 2, "the handler did not run");
    // One scope for every request, chosen: the key alone tells clients apart.
    let shared = self::app(builder(h).await.build().expect("layer"), &payments);
    assert_eq!(
        pay_tower(&shared, "one", "1").await.header("x-payment"),
        "3"
    );
    let again = pay_tower(&shared, "one", "1").await;
    assert_eq!(
        (
            again.header("x-payment"),
            again.header("idempotent-replayed")
        ),
        ("3", "true")
    );
    // By an API key header.
    let keyed = session_scoped_builder(h)
        .await
        .scope_header(HeaderName::from_static("x-api-key"))
        .build()
        .expect("layer");
    let keyed = self::app(keyed, &payments);
    for (api_key, payment) in [("a", "4"), ("b", "5"), ("a", "4")] {
        let headers = [("idempotency-key", "same"), ("x-api-key", api_key)];
        let r = call(keyed.clone(), request("POST", "/payments", &headers, "1")).await;
        assert_eq!(r.header("x-payment"), payment, "{api_key}");
    }
    assert_eq!(payments.calls(), 5);
    // The user of a real session, loaded by the layer: a session layer outside it.
    let sessions = SessionLayer::new(h.session_store().await).expect("sessions");
    let app = Router::new()
        .route("/payments", post(pay))
        .route("/login/{user}", axum::routing::get(login))
        .layer(session_scoped(h).await)
        .layer(sessions.clone())
        .with_state(Arc::clone(&payments));
    let cookie_of = async |user: &str| {
        let r = call(
            app.clone(),
            request("GET", &format!("/login/{user}"), &[], ""),
        )
        .await;
        let cookie = r.header("set-cookie").split(';').next().expect("a cookie");
        cookie.to_owned()
    };
    let (carol, dave) = (cookie_of("carol").await, cookie_of("dave").await);
    for (cookie, payment) in [(&carol, "6"), (&dave, "7"), (&carol, "6")] {
        let headers = [("idempotency-key", "same"), ("cookie", cookie.as_str())];
        let r = call(app.clone(), request("POST", "/payments", &headers, "1")).await;
        assert_eq!(r.header("x-payment"), payment, "{cookie}");
    }
    // A session without a user (an anonymous visitor, here without a cookie, so a new session
    // each time) is the anonymous scope: its retry is replayed; a user's same key is theirs.
    for (headers, payment, replayed) in [
        (&[("idempotency-key", "guest")][..], "8", ""),
        (&[("idempotency-key", "guest")][..], "8", "true"),
        (
            &[("idempotency-key", "guest"), ("cookie", carol.as_str())][..],
            "9",
            "",
        ),
    ] {
        let r = call(app.clone(), request("POST", "/payments", headers, "1")).await;
        assert_eq!(
            (r.header("x-payment"), r.header("idempotent-replayed")),
            (payment, replayed),
            "{headers:?}"
        );
    }
    assert_eq!(payments.calls(), 9);
    // The session layer inside the idempotency layer: no session there yet, so refused, and
    // the handler does not run.
    let backwards = Router::new()
        .route("/payments", post(pay))
        .layer(sessions)
        .layer(session_scoped(h).await)
        .with_state(Arc::clone(&payments));
    let headers = [("idempotency-key", "same"), ("cookie", carol.as_str())];
    let r = call(backwards, request("POST", "/payments", &headers, "1")).await;
    assert_eq!(
        (r.status, r.header("content-type")),
        (500, "application/problem+json")
    );
    assert_eq!(payments.calls(), 9);
}

async fn session_scoped_builder(h: &Harness) -> IdempotencyLayerBuilder {
    IdempotencyLayer::builder(h.idempotency_store().await)
}

/// Logs in as the path's user.
async fn login(
    session: Session,
    axum::extract::Path(user): axum::extract::Path<String>,
) -> StatusCode {
    session.cycle_id().await.expect("cycle");
    session.set_user(&user).await.expect("user");
    StatusCode::OK
}

async fn leases_and_retention_end_on_the_store_clock(h: &Harness) {
    // A request that outlives its lease (a replica that died) no longer holds its key.
    let stuck = Payments::new(false);
    let lease = Duration::from_secs(10);
    let app = app(
        builder(h).await.lease(lease).build().expect("layer"),
        &stuck,
    );
    let first = tokio::spawn(pay_tower(&app, "k", "1"));
    stuck.entered().await;
    h.wait(lease - Duration::from_secs(1)).await;
    assert_eq!(pay_tower(&app, "k", "1").await.status, 409);
    h.wait(Duration::from_secs(2)).await;
    let second = tokio::spawn(pay_tower(&app, "k", "1"));
    stuck.entered().await;
    assert_eq!(stuck.calls(), 2, "the key was taken over after its lease");
    stuck.gate.add_permits(100);
    assert_eq!(second.await.expect("second").header("x-payment"), "2");
    assert_eq!(first.await.expect("first").status, 201);
    // The second's response is the one kept: the first's came after its lease.
    assert_eq!(pay_tower(&app, "k", "1").await.header("x-payment"), "2");
    // Kept 24 hours by default, then the key runs again.
    let payments = Payments::new(true);
    let app = self::app(layer(h).await, &payments);
    assert_eq!(pay_tower(&app, "day", "1").await.status, 201);
    h.wait(Duration::from_secs(24 * 3600 - 60)).await;
    assert_eq!(
        pay_tower(&app, "day", "1")
            .await
            .header("idempotent-replayed"),
        "true"
    );
    h.wait(Duration::from_secs(61)).await;
    let later = pay_tower(&app, "day", "1").await;
    assert_eq!(
        (
            later.header("x-payment"),
            later.header("idempotent-replayed")
        ),
        ("2", "")
    );
}

// Scenarios in threes: each cluster a test starts costs seconds.

async fn replays_409_and_422_over_http_on_two_instances_and_after_a_client_left(h: Harness) {
    a_retry_is_replayed_a_duplicate_in_flight_is_409_a_reuse_is_422(&h).await;
    two_instances_share_their_keys(&h).await;
    a_client_that_goes_away_leaves_its_request_running_and_stored(&h).await;
}

async fn bad_keys_are_400_large_bodies_413_and_keys_scoped_per_client(h: Harness) {
    missing_or_malformed_keys_are_400_and_large_bodies_413(&h).await;
    keys_are_scoped_per_client(&h).await;
}

async fn keys_are_released_by_a_5xx_a_lease_and_the_retention_not_a_drop(h: Harness) {
    a_5xx_or_an_error_status_releases_the_key_a_dropped_request_does_not(&h).await;
    leases_and_retention_end_on_the_store_clock(&h).await;
}

backend_suite!(
    replays_409_and_422_over_http_on_two_instances_and_after_a_client_left,
    bad_keys_are_400_large_bodies_413_and_keys_scoped_per_client,
    keys_are_released_by_a_5xx_a_lease_and_the_retention_not_a_drop,
);

/// The records' keys, by scanning.
async fn record_keys(h: &Harness) -> Vec<String> {
    let prefix = format!("{}idem:{{", h.prefix());
    let keys = h.keys().await;
    keys.into_iter()
        .filter(|k| k.starts_with(&prefix))
        .collect()
}

async fn every_key_has_a_ttl_and_values_not_ours_are_503(h: Harness) {
    let payments = Payments::new(false);
    let app = app(layer(&h).await, &payments);
    let first = tokio::spawn(pay_tower(&app, "ttl", "1"));
    payments.entered().await;
    let keys = record_keys(&h).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let pttl = h.pttl(&keys[0]).await;
    assert!(
        (1..=60_000).contains(&pttl),
        "in flight: the lease ({pttl} ms)"
    );
    payments.gate.add_permits(100);
    assert_eq!(first.await.expect("first").status, 201);
    let pttl = h.pttl(&keys[0]).await;
    assert!(
        (86_000_000..=86_400_000).contains(&pttl),
        "done: the retention ({pttl} ms)"
    );
    for key in h.keys().await {
        assert!(h.pttl(&key).await > 0, "{key} has no TTL");
    }
    // A value that is not a record (another format, another type): 503, left as it is.
    let mut conn = h.inspect().await;
    let () = redis::cmd("SET")
        .arg(&keys[0])
        .arg("not a record")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let r = pay_tower(&app, "ttl", "1").await;
    assert_eq!((r.status, r.header("retry-after")), (503, "1"), "{r:?}");
    let () = redis::cmd("DEL")
        .arg(&keys[0])
        .query_async(&mut conn)
        .await
        .expect("DEL");
    let _: i64 = redis::cmd("HSET")
        .arg(&keys[0])
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .expect("HSET");
    assert_eq!(pay_tower(&app, "ttl", "1").await.status, 503);
    // Failing open, it runs unguarded.
    let open = self::app(
        builder(&h).await.fail_open(true).build().expect("layer"),
        &payments,
    );
    assert_eq!(pay_tower(&open, "ttl", "1").await.header("x-payment"), "2");
    let kind: String = redis::cmd("TYPE")
        .arg(&keys[0])
        .query_async(&mut conn)
        .await
        .expect("TYPE");
    assert_eq!(kind, "hash");
}

backend_suite!(redis_only: every_key_has_a_ttl_and_values_not_ours_are_503);

/// A memory store of `capacity` records on `clock`, and a layer over it.
fn bounded_layer(capacity: usize, clock: &ManualClock) -> IdempotencyLayer {
    let store = MemoryIdempotencyStore::builder()
        .capacity(capacity)
        .clock(clock.clone())
        .build();
    IdempotencyLayer::builder(store)
        .shared_scope()
        .lease(Duration::from_secs(10))
        .build()
        .expect("layer")
}

/// A full memory store evicts completed records, the oldest first, to make room for a claim;
/// the claim of a running request stays, so its copies are `409` and it runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_store_evicts_completed_records_before_a_running_claim() {
    let clock = ManualClock::new();
    let layer = bounded_layer(3, &clock);
    let (done, running) = (Payments::new(true), Payments::new(false));
    let completed = app(layer.clone(), &done);
    let blocked = app(layer, &running);
    for key in ["c1", "c2", "c3"] {
        assert_eq!(pay_tower(&completed, key, "1").await.status, 201);
    }
    // Ten copies of a new request at once, in a store full of completed records: one claims
    // the key and runs; the nine others are 409 while it runs.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..10 {
        let (reply, tx) = (pay_tower(&blocked, "run", "1"), tx.clone());
        tokio::spawn(async move { tx.send(reply.await).expect("send") });
    }
    for _ in 0..9 {
        let r = answered(rx.recv()).await.expect("a reply");
        assert_eq!((r.status, r.header("retry-after")), (409, "1"), "{r:?}");
    }
    running.entered().await;
    assert_eq!(running.calls(), 1, "one copy runs");
    // Retried while it runs: still 409, however often.
    for _ in 0..5 {
        assert_eq!(pay_tower(&blocked, "run", "1").await.status, 409);
    }
    running.gate.add_permits(100);
    let first = answered(rx.recv()).await.expect("a reply");
    assert_eq!(seen(&first).0, 201, "{first:?}");
    let replayed = pay_tower(&blocked, "run", "1").await;
    assert_eq!(seen(&replayed), (201, "1", "true", first.body.as_str()));
    assert_eq!(running.calls(), 1);
    // The claim took the oldest completed record's place: c1 runs again (and pushes c2 out),
    // c3 is still replayed.
    assert_eq!(
        pay_tower(&completed, "c3", "1").await.header("x-payment"),
        "3"
    );
    let c1 = pay_tower(&completed, "c1", "1").await;
    assert_eq!(
        (c1.header("x-payment"), c1.header("idempotent-replayed")),
        ("4", "")
    );
    assert_eq!(
        pay_tower(&completed, "c3", "1")
            .await
            .header("idempotent-replayed"),
        "true"
    );
    assert_eq!(done.calls(), 4);
}

/// When running requests fill the memory store, a request with a new key is refused with a
/// `503` and `Retry-After`, never let in at the cost of a running one; the running ones keep
/// their keys and complete as usual, and expired claims make room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_store_full_of_running_requests_refuses_a_new_key() {
    let clock = ManualClock::new();
    let layer = bounded_layer(3, &clock);
    let running = Payments::new(false);
    let app = app(layer, &running);
    let mut firsts = Vec::new();
    for key in ["r1", "r2", "r3"] {
        firsts.push(tokio::spawn(pay_tower(&app, key, "1")));
        running.entered().await;
    }
    for _ in 0..3 {
        let full = answered(pay_tower(&app, "new", "1")).await;
        assert_eq!(
            (full.status, full.header("retry-after")),
            (503, "1"),
            "{full:?}"
        );
        assert_eq!(full.header("content-type"), "application/problem+json");
        assert!(full.body.contains("too many requests"), "{full:?}");
    }
    let res = tower::ServiceExt::oneshot(
        app.clone(),
        request("POST", "/payments", &[("idempotency-key", "new")], "1"),
    )
    .await
    .expect("answer");
    assert_eq!(
        res.extensions().get::<Rejection>(),
        Some(&Rejection::StoreFull)
    );
    assert_eq!(running.calls(), 3, "the new key never ran");
    for key in ["r1", "r2", "r3"] {
        assert_eq!(pay_tower(&app, key, "1").await.status, 409, "{key}");
    }
    running.gate.add_permits(100);
    for (first, key) in firsts.into_iter().zip(["r1", "r2", "r3"]) {
        let first = first.await.expect("first");
        assert_eq!(first.status, 201);
        let again = pay_tower(&app, key, "1").await;
        assert_eq!(
            seen(&again),
            (201, first.header("x-payment"), "true", first.body.as_str())
        );
    }
    // Completed records make room: the new key runs now.
    assert_eq!(pay_tower(&app, "new", "1").await.header("x-payment"), "4");
    // Claims whose lease has ended (10 s) no longer count against the bound.
    let stuck = Payments::new(false);
    let app = self::app(bounded_layer(2, &clock), &stuck);
    let mut tasks = Vec::new();
    for key in ["s1", "s2"] {
        tasks.push(tokio::spawn(pay_tower(&app, key, "1")));
        stuck.entered().await;
    }
    assert_eq!(pay_tower(&app, "s3", "1").await.status, 503);
    clock.advance(Duration::from_secs(11));
    stuck.gate.add_permits(100);
    assert_eq!(pay_tower(&app, "s3", "1").await.status, 201);
    for task in tasks {
        assert_eq!(task.await.expect("task").status, 201);
    }
}
// Over TLS (`rediss://`, a client certificate): a standalone server, a pool, a cluster and
// Sentinel.
backend_suite!(tls_only: replays_409_and_422_over_http_on_two_instances_and_after_a_client_left);
