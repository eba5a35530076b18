//! `CacheLayer` on every backend: one recomputation for a crowd, stale copies served without
//! waiting, what is cached and what never is, variants never mixed, tags, the body limit,
//! values that are not ours, XFetch with a fixed random number, and a TTL on every key.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use redis_guard::cache::{Cache, CacheLayer, CacheLayerBuilder, CacheTags, QueryKey, Stampede};
use redis_guard_tests::{Harness, Reply, backend_suite, call};
use tokio::sync::Semaphore;
use tower::Layer;

type Body = BoxBody<Bytes, Infallible>;
type Handler = Arc<
    dyn Fn(Request<Full<Bytes>>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>>
        + Send
        + Sync,
>;

/// An inner service that runs `handler` and counts its calls.
#[derive(Clone)]
struct App {
    handler: Handler,
    calls: Arc<AtomicUsize>,
}

impl tower::Service<Request<Full<Bytes>>> for App {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let fut = (self.handler)(req);
        Box::pin(async move { Ok(fut.await) })
    }
}

fn app<F, Fut>(f: F) -> App
where
    F: Fn(Request<Full<Bytes>>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    App {
        handler: Arc::new(move |req| Box::pin(f(req))),
        calls: Arc::new(AtomicUsize::new(0)),
    }
}

fn text(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed()
}

/// `200` with `body` and these headers.
fn ok(headers: &[(&str, &str)], body: impl Into<Bytes>) -> Response<Body> {
    let mut res = Response::builder();
    for (n, v) in headers {
        res = res.header(*n, *v);
    }
    res.body(text(body)).expect("response")
}

fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri).body(Full::default()).expect("request")
}

/// Exact times: no jitter, a fixed random number; a response that says nothing of its
/// freshness is fresh 60 s (the heuristic).
async fn builder(h: &Harness) -> CacheLayerBuilder {
    h.cache()
        .await
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .random(|| 1.0)
}

fn cached(layer: &CacheLayer, app: &App) -> Cache<App> {
    layer.layer(app.clone())
}

async fn send(svc: &Cache<App>, req: Request<Full<Bytes>>) -> Reply {
    call(svc.clone(), req).await
}

/// `(x-cache, body)` of a GET of `uri`.
async fn fetch(svc: &Cache<App>, uri: &str) -> (String, String) {
    let r = send(svc, get(uri)).await;
    (r.header("x-cache").to_owned(), r.body)
}

fn pair(outcome: &str, body: &str) -> (String, String) {
    (outcome.to_owned(), body.to_owned())
}

async fn two_hundred_cold_requests_compute_once(h: Harness) {
    let gate = Arc::new(Semaphore::new(0));
    let g = Arc::clone(&gate);
    let handler = app(move |_| {
        let g = Arc::clone(&g);
        async move {
            drop(g.acquire().await.expect("gate"));
            ok(&[], "computed")
        }
    });
    let layer = builder(&h)
        .await
        .stampede(Stampede::lock().wait(Duration::from_secs(60)))
        .build()
        .expect("layer");
    let svc = cached(&layer, &handler);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move { fetch(&svc, "/cold").await })
        })
        .collect();
    // The handler is entered once, and stays blocked until the gate opens.
    while handler.calls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    gate.add_permits(1_000);
    let mut outcomes = Vec::new();
    for task in tasks {
        let (outcome, body) = task.await.expect("task");
        assert_eq!(body, "computed");
        outcomes.push(outcome);
    }
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        1,
        "exactly one recomputation"
    );
    assert_eq!(outcomes.iter().filter(|o| *o == "MISS").count(), 1);
    assert_eq!(outcomes.iter().filter(|o| *o == "HIT").count(), 199);
}

async fn a_stale_copy_is_served_without_waiting(h: Harness) {
    let version = Arc::new(AtomicUsize::new(1));
    let gate = Arc::new(Semaphore::new(1_000));
    let (v, g) = (Arc::clone(&version), Arc::clone(&gate));
    let handler = app(move |_| {
        let (v, g) = (Arc::clone(&v), Arc::clone(&g));
        async move {
            drop(g.acquire().await.expect("gate"));
            let body = format!("v{}", v.load(Ordering::SeqCst));
            ok(
                &[("cache-control", "max-age=10, stale-while-revalidate=100")],
                body,
            )
        }
    });
    let layer = builder(&h).await.build().expect("layer");
    let svc = cached(&layer, &handler);
    assert_eq!(fetch(&svc, "/s").await, pair("MISS", "v1"));
    assert_eq!(fetch(&svc, "/s").await, pair("HIT", "v1"));
    // Past its freshness, inside its stale window; the handler now blocks until released.
    h.wait(Duration::from_secs(20)).await;
    gate.forget_permits(1_000);
    version.store(2, Ordering::SeqCst);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move { fetch(&svc, "/s").await })
        })
        .collect();
    for task in tasks {
        // Every request completes while the refresh is still blocked.
        let reply = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("served without waiting for the recompute")
            .expect("task");
        assert_eq!(reply, pair("STALE", "v1"));
    }
    // The refresh is a spawned task: under load it may not have reached the handler yet when
    // the 200 answers are in. Wait for it (bounded), then count.
    let refresh = async {
        while handler.calls.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), refresh)
        .await
        .expect("the background refresh never reached the handler");
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        2,
        "one background refresh"
    );
    gate.add_permits(1_000);
    // The refresh fills the entry in the background.
    let mut tries = 0;
    loop {
        let reply = fetch(&svc, "/s").await;
        if reply == pair("HIT", "v2") {
            break;
        }
        assert_eq!(reply, pair("STALE", "v1"));
        tries += 1;
        assert!(tries < 1_000, "the refresh never landed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(handler.calls.load(Ordering::SeqCst), 2);
}

async fn headers_and_cache_control_decide(h: Harness) {
    let handler = app(|req: Request<Full<Bytes>>| async move {
        let cc = match req.uri().path() {
            "/no-store" => "no-store",
            "/private" => "private, max-age=60",
            "/no-cache" => "no-cache",
            "/zero" => "max-age=0",
            "/five" => "max-age=5",
            "/shared" => "max-age=5, s-maxage=50",
            _ => "public",
        };
        let body = format!("{} {}", req.method(), req.uri());
        ok(&[("cache-control", cc)], body)
    });
    let layer = builder(&h).await.build().expect("layer");
    let svc = cached(&layer, &handler);
    let calls = || handler.calls.load(Ordering::SeqCst);

    // Default TTL (60 s): MISS, HIT, then MISS once it expires.
    assert_eq!(fetch(&svc, "/d?q=1").await, pair("MISS", "GET /d?q=1"));
    let hit = send(&svc, get("/d?q=1")).await;
    assert_eq!(
        (hit.header("x-cache"), hit.body.as_str()),
        ("HIT", "GET /d?q=1")
    );
    assert_eq!(
        hit.header("cache-control"),
        "public",
        "the handler's header is forwarded"
    );
    assert_eq!(calls(), 1);
    assert_eq!(
        fetch(&svc, "/d?q=2").await.0,
        "MISS",
        "the query is in the key"
    );
    h.wait(Duration::from_secs(61)).await;
    assert_eq!(fetch(&svc, "/d?q=1").await.0, "MISS");
    assert_eq!(calls(), 3);

    for path in ["/no-store", "/private", "/no-cache", "/zero"] {
        for _ in 0..2 {
            assert_eq!(fetch(&svc, path).await.0, "MISS", "{path}");
        }
    }
    assert_eq!(calls(), 11);

    // max-age sets the lifetime; s-maxage wins over it.
    assert_eq!(fetch(&svc, "/five").await.0, "MISS");
    assert_eq!(fetch(&svc, "/shared").await.0, "MISS");
    h.wait(Duration::from_secs(4)).await;
    assert_eq!(fetch(&svc, "/five").await.0, "HIT");
    h.wait(Duration::from_secs(2)).await;
    assert_eq!(fetch(&svc, "/five").await.0, "MISS");
    assert_eq!(fetch(&svc, "/shared").await.0, "HIT");

    // HEAD is cached apart from GET; POST never.
    let head = || {
        Request::head("/d?q=1")
            .body(Full::default())
            .expect("request")
    };
    assert_eq!(send(&svc, head()).await.header("x-cache"), "MISS");
    assert_eq!(send(&svc, head()).await.header("x-cache"), "HIT");
    let before = calls();
    for _ in 0..2 {
        let post = Request::post("/d?q=1")
            .body(Full::default())
            .expect("request");
        let r = send(&svc, post).await;
        assert_eq!((r.header("x-cache"), r.body.as_str()), ("", "POST /d?q=1"));
    }
    assert_eq!(calls(), before + 2);
}

async fn cookies_are_never_cached(h: Harness) {
    let handler = app(|req: Request<Full<Bytes>>| async move {
        if req.uri().path() == "/login" {
            ok(&[("set-cookie", "id=secret")], "welcome")
        } else {
            ok(&[], "page")
        }
    });
    let layer = builder(&h).await.build().expect("layer");
    let svc = cached(&layer, &handler);
    for _ in 0..2 {
        let r = send(&svc, get("/login")).await;
        assert_eq!(
            (r.header("x-cache"), r.header("set-cookie")),
            ("MISS", "id=secret")
        );
    }
    // A request carrying credentials passes uncached, and does not see a shared entry.
    assert_eq!(fetch(&svc, "/page").await.0, "MISS");
    for (name, value) in [("cookie", "id=1"), ("authorization", "Bearer t")] {
        let req = Request::get("/page")
            .header(name, value)
            .body(Full::default())
            .expect("request");
        assert_eq!(send(&svc, req).await.header("x-cache"), "", "{name}");
    }
    assert_eq!(handler.calls.load(Ordering::SeqCst), 5);
    // Opted in: cookies stay out of the key.
    let layer = builder(&h)
        .await
        .ignore_cookies(true)
        .build()
        .expect("layer");
    let svc = cached(&layer, &handler);
    let req = Request::get("/page")
        .header("cookie", "id=1")
        .body(Full::default())
        .expect("request");
    assert_eq!(send(&svc, req).await.header("x-cache"), "HIT");
}

async fn vary_variants_never_mix(h: Harness) {
    let handler = app(|req: Request<Full<Bytes>>| async move {
        let lang = req
            .headers()
            .get("accept-language")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        if req.uri().path() == "/other" {
            ok(&[("vary", "Accept-Encoding")], lang)
        } else if req.uri().path() == "/star" {
            ok(&[("vary", "*")], lang)
        } else {
            ok(&[("vary", "Accept-Language")], lang)
        }
    });
    let layer = builder(&h)
        .await
        .vary([http::header::ACCEPT_LANGUAGE])
        .build()
        .expect("layer");
    let svc = cached(&layer, &handler);
    let with = |path: &str, lang: &'static [u8]| {
        Request::get(path)
            .header(
                "accept-language",
                http::HeaderValue::from_bytes(lang).expect("value"),
            )
            .body(Full::default())
            .expect("request")
    };
    let fetch_lang = |path: &'static str, lang: &'static [u8]| {
        let svc = svc.clone();
        async move {
            let r = send(&svc, with(path, lang)).await;
            (r.header("x-cache").to_owned(), r.body)
        }
    };
    assert_eq!(fetch_lang("/p", b"fr").await, pair("MISS", "fr"));
    assert_eq!(fetch_lang("/p", b"en").await, pair("MISS", "en"));
    assert_eq!(fetch_lang("/p", b"fr").await, pair("HIT", "fr"));
    assert_eq!(fetch_lang("/p", b"en").await, pair("HIT", "en"));
    // A non-UTF-8 value is a variant of its own.
    assert_eq!(fetch_lang("/p", b"d\xe9").await.0, "MISS");
    assert_eq!(fetch_lang("/p", b"d\xe9").await.0, "HIT");
    assert_eq!(fetch(&svc, "/p").await, pair("MISS", ""));
    assert_eq!(fetch(&svc, "/p").await, pair("HIT", ""));
    // Vary on a header outside the key, or `*`: never cached.
    for path in ["/other", "/star"] {
        assert_eq!(fetch_lang(path, b"fr").await.0, "MISS");
        assert_eq!(fetch_lang(path, b"fr").await.0, "MISS");
    }
}

async fn tags_invalidate_their_entries(h: Harness) {
    let version = Arc::new(AtomicUsize::new(1));
    let v = Arc::clone(&version);
    let handler = app(move |req: Request<Full<Bytes>>| {
        let v = v.load(Ordering::SeqCst);
        async move {
            let body = format!("{} v{v}", req.uri().path());
            match req.uri().path() {
                "/u1" => {
                    let mut res = ok(&[], body);
                    res.extensions_mut()
                        .insert(CacheTags::new(["user:1", "users"]));
                    res
                }
                "/u2" => ok(&[("x-cache-tags", "user:2, users")], body),
                _ => ok(&[], body),
            }
        }
    });
    let layer = builder(&h).await.build().expect("layer");
    let svc = cached(&layer, &handler);
    for path in ["/u1", "/u2", "/plain"] {
        assert_eq!(fetch(&svc, path).await.0, "MISS");
        let r = send(&svc, get(path)).await;
        assert_eq!(r.header("x-cache"), "HIT");
        assert!(
            r.headers.get("x-cache-tags").is_none(),
            "the tags header is stripped"
        );
    }
    version.store(2, Ordering::SeqCst);
    layer.invalidate_tag("user:1").await.expect("invalidate");
    assert_eq!(fetch(&svc, "/u1").await, pair("MISS", "/u1 v2"));
    assert_eq!(fetch(&svc, "/u1").await, pair("HIT", "/u1 v2"));
    assert_eq!(fetch(&svc, "/u2").await, pair("HIT", "/u2 v1"));
    // Another replica's layer invalidates for everyone.
    let other = builder(&h).await.build().expect("layer");
    other.invalidate_tag("users").await.expect("invalidate");
    assert_eq!(fetch(&svc, "/u1").await, pair("MISS", "/u1 v2"));
    assert_eq!(fetch(&svc, "/u2").await, pair("MISS", "/u2 v2"));
    assert_eq!(fetch(&svc, "/plain").await, pair("HIT", "/plain v1"));
    // An invalidation remembered past the longest entry life is forgotten only once no entry
    // from before it can be alive.
    h.wait(Duration::from_secs(3 * 24 * 3600)).await;
    assert_eq!(fetch(&svc, "/u1").await.0, "MISS");
    assert_eq!(fetch(&svc, "/u1").await.0, "HIT");
}

async fn bodies_over_the_limit_stream_through(h: Harness) {
    let handler = app(|req: Request<Full<Bytes>>| async move {
        let chunks: Vec<&'static [u8]> = match req.uri().path() {
            "/big" => return ok(&[], vec![b'x'; 20]),
            "/stream-big" => vec![b"aaaaaaaa", b"bbbbbbbb", b"cccccccc"],
            _ => vec![b"aaaa", b"bbbb"],
        };
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(c))));
        Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed())
    });
    let layer = builder(&h).await.body_limit(10).build().expect("layer");
    let svc = cached(&layer, &handler);
    for _ in 0..2 {
        assert_eq!(fetch(&svc, "/big").await, pair("MISS", &"x".repeat(20)));
        let r = fetch(&svc, "/stream-big").await;
        assert_eq!(r, pair("MISS", "aaaaaaaabbbbbbbbcccccccc"));
    }
    assert_eq!(handler.calls.load(Ordering::SeqCst), 4);
    // A body of unknown length within the limit is cached.
    assert_eq!(fetch(&svc, "/stream-small").await, pair("MISS", "aaaabbbb"));
    assert_eq!(fetch(&svc, "/stream-small").await, pair("HIT", "aaaabbbb"));
}

async fn xfetch_recomputes_early_with_a_fixed_random_number(h: Harness) {
    // The handler takes 1 s on the harness' clock: the recompute time stored with the entry.
    let clock = h.clock();
    let handler = app(move |_| {
        clock.advance(Duration::from_secs(1));
        async { ok(&[("cache-control", "max-age=60")], "x") }
    });
    // -ln(draw) = how many recompute times before expiry a hit recomputes.
    let draw = Arc::new(AtomicU64::new(1.0_f64.to_bits()));
    let d = Arc::clone(&draw);
    let layer = h
        .cache()
        .await
        .jitter(0.0)
        .stampede(Stampede::xfetch(1.0))
        .random(move || f64::from_bits(d.load(Ordering::SeqCst)))
        .build()
        .expect("layer");
    let svc = cached(&layer, &handler);
    let set = |x: f64| draw.store((-x).exp().to_bits(), Ordering::SeqCst);
    assert_eq!(fetch(&svc, "/x").await.0, "MISS");
    // 3 s before expiry: two recompute times is not yet early enough.
    h.wait(Duration::from_secs(57)).await;
    set(2.0);
    assert_eq!(fetch(&svc, "/x").await.0, "HIT");
    // 1.5 s before expiry: a draw of 1 never recomputes early; e^-2 does.
    h.wait(Duration::from_millis(1_500)).await;
    set(0.0);
    assert_eq!(fetch(&svc, "/x").await.0, "HIT");
    set(2.0);
    assert_eq!(fetch(&svc, "/x").await.0, "MISS");
    assert_eq!(handler.calls.load(Ordering::SeqCst), 2);
    // The entry was refilled: fresh for another minute.
    set(0.0);
    assert_eq!(fetch(&svc, "/x").await.0, "HIT");
}

/// Any path spelling is a 404 of its own, so an error is cached only when the
/// handler gives it a lifetime.
async fn errors_are_cached_only_when_the_handler_says_so(h: Harness) {
    let handler = app(|req: Request<Full<Bytes>>| async move {
        let mut res = if req.uri().path() == "/gone" {
            ok(&[("cache-control", "max-age=30")], "gone")
        } else {
            ok(&[], "no such page")
        };
        *res.status_mut() = if req.uri().path() == "/gone" {
            http::StatusCode::GONE
        } else {
            http::StatusCode::NOT_FOUND
        };
        res
    });
    let layer = builder(&h).await.build().expect("layer");
    let svc = cached(&layer, &handler);
    for path in ["/missing/1", "/missing/1", "/missing/%31"] {
        assert_eq!(fetch(&svc, path).await, pair("MISS", "no such page"));
    }
    assert_eq!(fetch(&svc, "/gone").await, pair("MISS", "gone"));
    assert_eq!(fetch(&svc, "/gone").await, pair("HIT", "gone"));
    assert_eq!(handler.calls.load(Ordering::SeqCst), 4);
}

/// Queries normalized: spellings of one query share an entry, and the
/// handler sees the query the key holds.
async fn normalized_queries_share_an_entry(h: Harness) {
    let handler = app(|req: Request<Full<Bytes>>| async move {
        let body = req.uri().to_string();
        ok(&[], body)
    });
    let only = builder(&h)
        .await
        .query(QueryKey::only(["q", "page"]))
        .build()
        .expect("layer");
    let svc = cached(&only, &handler);
    let searched = "/s?page=2&q=rust";
    assert_eq!(
        fetch(&svc, "/s?q=rust&utm=x&page=2").await,
        pair("MISS", searched)
    );
    for spelling in [
        "/s?page=2&q=rust",
        "/s?utm=y&&q=rust&page=2&",
        "/s?q=rust&page=2",
    ] {
        assert_eq!(
            fetch(&svc, spelling).await,
            pair("HIT", searched),
            "{spelling}"
        );
    }
    assert_eq!(fetch(&svc, "/s?utm=x").await, pair("MISS", "/s"));
    assert_eq!(fetch(&svc, "/s").await, pair("HIT", "/s"));
    let sorted = builder(&h)
        .await
        .query(QueryKey::sorted())
        .build()
        .expect("layer");
    let svc = cached(&sorted, &handler);
    assert_eq!(
        fetch(&svc, "/t?b=1&a=2&a=1").await,
        pair("MISS", "/t?a=2&a=1&b=1")
    );
    assert_eq!(
        fetch(&svc, "/t?a=2&b=1&a=1").await,
        pair("HIT", "/t?a=2&a=1&b=1")
    );
    // Repeated names keep their order: another order is another query.
    assert_eq!(fetch(&svc, "/t?a=1&a=2&b=1").await.0, "MISS");
    assert_eq!(handler.calls.load(Ordering::SeqCst), 4);
}

/// Two layers on one store: named apart, they never share entries; the
/// same name shares them (replicas). Credential headers are configurable.
async fn namespaces_and_credential_headers(h: Harness) {
    let one = app(|_| async { ok(&[], "one") });
    let two = app(|_| async { ok(&[], "two") });
    let named = |name: &'static str| {
        let h = &h;
        async move { builder(h).await.namespace(name).build().expect("layer") }
    };
    let (a, b) = (named("a").await, named("b").await);
    let (svc_a, svc_b) = (cached(&a, &one), cached(&b, &two));
    assert_eq!(fetch(&svc_a, "/n").await, pair("MISS", "one"));
    assert_eq!(fetch(&svc_b, "/n").await, pair("MISS", "two"));
    assert_eq!(fetch(&svc_a, "/n").await, pair("HIT", "one"));
    assert_eq!(fetch(&svc_b, "/n").await, pair("HIT", "two"));
    // Another replica's layer of the same name shares the entries.
    let replica = cached(&named("a").await, &two);
    assert_eq!(fetch(&replica, "/n").await, pair("HIT", "one"));

    let api_key = http::HeaderName::from_static("x-api-key");
    let with_key = || {
        Request::get("/k")
            .header("x-api-key", "secret")
            .body(Full::default())
            .expect("request")
    };
    let strict = builder(&h)
        .await
        .namespace("strict")
        .credential_headers([api_key, http::header::AUTHORIZATION])
        .build()
        .expect("layer");
    let svc = cached(&strict, &one);
    for _ in 0..2 {
        let r = send(&svc, with_key()).await;
        assert_eq!((r.header("x-cache"), r.body.as_str()), ("", "one"));
    }
    // The list replaces the default: `Cookie` is no longer one.
    let cookie = Request::get("/k")
        .header("cookie", "a=b")
        .body(Full::default())
        .expect("request");
    assert_eq!(send(&svc, cookie).await.header("x-cache"), "MISS");
    // By default `x-api-key` is not a credential, and `Proxy-Authorization` is.
    let svc = cached(&a, &one);
    assert_eq!(send(&svc, with_key()).await.header("x-cache"), "MISS");
    let proxy = Request::get("/k")
        .header("proxy-authorization", "Basic eA==")
        .body(Full::default())
        .expect("request");
    assert_eq!(send(&svc, proxy).await.header("x-cache"), "");
}

/// `GET` of `uri` with these request headers.
fn get_with(uri: &str, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut req = Request::get(uri);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    req.body(Full::default()).expect("request")
}

/// Conditional requests and `Cache-Status`: `304` from the cache on the handler's validators
/// and on a computed `ETag`; RFC 9211 members for a hit, a stale hit and a miss.
async fn conditional_requests_and_cache_status(h: Harness) {
    const MODIFIED: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    let handler = app(|req: Request<Full<Bytes>>| async move {
        match req.uri().path() {
            "/tagged" => ok(
                &[
                    ("etag", "\"v1\""),
                    ("last-modified", MODIFIED),
                    ("cache-control", "max-age=10, stale-while-revalidate=100"),
                    ("content-type", "text/plain"),
                    ("cache-status", "Origin; fwd=uri-miss"),
                ],
                "tagged body",
            ),
            "/no-store" => ok(&[("cache-control", "no-store")], "not stored"),
            // A handler that answers conditions itself.
            "/validating" if req.headers().contains_key("if-none-match") => {
                let mut res = ok(&[("etag", "\"h\"")], "");
                *res.status_mut() = http::StatusCode::NOT_MODIFIED;
                res
            }
            "/validating" => ok(&[("etag", "\"h\"")], "validated body"),
            _ => ok(&[], "plain body"),
        }
    });
    let layer = builder(&h).await.etag(true).build().expect("layer");
    let svc = cached(&layer, &handler);
    let status = |r: &Reply| {
        (
            r.status,
            r.header("x-cache").to_owned(),
            r.header("cache-status").to_owned(),
            r.body.clone(),
        )
    };
    let reply =
        |code, x: &str, cs: &str, body: &str| (code, x.to_owned(), cs.to_owned(), body.to_owned());

    // The computing request is answered in full, condition or not.
    let miss = send(&svc, get_with("/tagged", &[("if-none-match", "\"v1\"")])).await;
    assert_eq!(
        status(&miss),
        reply(
            200,
            "MISS",
            "Origin; fwd=uri-miss, redis-guard; fwd=miss; stored",
            "tagged body"
        )
    );
    assert_eq!(miss.header("etag"), "\"v1\"", "the handler's ETag is kept");
    let hit_status = "Origin; fwd=uri-miss, redis-guard; hit; ttl=10";
    for condition in [
        ("if-none-match", "\"v1\""),
        ("if-none-match", "W/\"v1\""),
        ("if-none-match", "\"v0\", \"v1\""),
        ("if-none-match", "*"),
        ("if-modified-since", MODIFIED),
        ("if-modified-since", "Mon, 07 Nov 1994 08:49:37 GMT"),
    ] {
        let r = send(&svc, get_with("/tagged", &[condition])).await;
        assert_eq!(
            status(&r),
            reply(304, "HIT", hit_status, ""),
            "{condition:?}"
        );
        assert_eq!(
            (
                r.header("etag"),
                r.header("last-modified"),
                r.header("cache-control"),
                r.header("content-type"),
            ),
            (
                "\"v1\"",
                MODIFIED,
                "max-age=10, stale-while-revalidate=100",
                ""
            ),
            "{condition:?}"
        );
        assert!(!r.header("age").is_empty(), "{condition:?}");
    }
    for conditions in [
        &[("if-none-match", "\"v2\"")][..],
        &[("if-none-match", "\"v1")],
        &[("if-none-match", "v1")],
        &[("if-none-match", "\"v1\" junk")],
        &[("if-modified-since", "Sun, 06 Nov 1994 08:49:36 GMT")],
        &[("if-modified-since", "yesterday")],
        &[("if-modified-since", "Sun, 99 Nov 1994 08:49:37 GMT")],
        // If-None-Match rules alone when both are sent.
        &[("if-none-match", "\"v2\""), ("if-modified-since", MODIFIED)],
    ] {
        let r = send(&svc, get_with("/tagged", conditions)).await;
        assert_eq!(
            status(&r),
            reply(200, "HIT", hit_status, "tagged body"),
            "{conditions:?}"
        );
    }
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);

    // No ETag from the handler: one computed from the body, stored and sent, and matched.
    let first = send(&svc, get("/plain")).await;
    let etag = first.header("etag").to_owned();
    assert!(
        etag.len() > 2 && etag.starts_with('"') && etag.ends_with('"'),
        "{etag}"
    );
    let r = send(&svc, get_with("/plain", &[("if-none-match", &etag)])).await;
    assert_eq!(
        status(&r),
        reply(304, "HIT", "redis-guard; hit; ttl=60", "")
    );
    assert_eq!(r.header("etag"), etag);
    let r = send(&svc, get_with("/plain", &[("if-none-match", "\"other\"")])).await;
    assert_eq!(
        (r.status, r.header("etag"), r.body.as_str()),
        (200, etag.as_str(), "plain body")
    );
    // A HEAD response has no body to compute one from.
    let head = Request::head("/plain")
        .body(Full::default())
        .expect("request");
    assert_eq!(send(&svc, head).await.header("etag"), "");
    // Without `etag(true)` no ETag is made up.
    let bare = cached(
        &builder(&h).await.namespace("bare").build().expect("layer"),
        &handler,
    );
    assert_eq!(send(&bare, get("/plain")).await.header("etag"), "");
    assert_eq!(send(&bare, get("/plain")).await.header("etag"), "");

    // Not stored: a miss that says so, and never a 304.
    for _ in 0..2 {
        let r = send(&svc, get_with("/no-store", &[("if-none-match", "*")])).await;
        assert_eq!(
            status(&r),
            reply(200, "MISS", "redis-guard; fwd=miss", "not stored")
        );
    }

    // The handler is asked without the client's validators: its answer is an entry.
    let r = send(&svc, get_with("/validating", &[("if-none-match", "\"h\"")])).await;
    assert_eq!(
        status(&r),
        reply(
            200,
            "MISS",
            "redis-guard; fwd=miss; stored",
            "validated body"
        )
    );
    let r = send(&svc, get_with("/validating", &[("if-none-match", "\"h\"")])).await;
    assert_eq!(
        status(&r),
        reply(304, "HIT", "redis-guard; hit; ttl=60", "")
    );

    // Stale (past 10 s, inside the 100 s window): a hit with a negative ttl, 304 or 200.
    let calls = handler.calls.load(Ordering::SeqCst);
    // Half a second off a whole one, so that the time the requests take never changes the ttl.
    h.wait(Duration::from_millis(20_500)).await;
    let stale_status = "Origin; fwd=uri-miss, redis-guard; hit; ttl=-10";
    let r = send(&svc, get_with("/tagged", &[("if-none-match", "\"v1\"")])).await;
    assert_eq!(status(&r), reply(304, "STALE", stale_status, ""));
    let r = send(&svc, get("/tagged")).await;
    let (code, x) = (r.status, r.header("x-cache").to_owned());
    assert_eq!((code, r.body.as_str()), (200, "tagged body"));
    assert!(x == "STALE" || x == "HIT", "{x}");
    // The background refresh lands.
    while fetch(&svc, "/tagged").await.0 != "HIT" {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(handler.calls.load(Ordering::SeqCst), calls + 1);
}

backend_suite!(
    two_hundred_cold_requests_compute_once,
    a_stale_copy_is_served_without_waiting,
    headers_and_cache_control_decide,
    cookies_are_never_cached,
    vary_variants_never_mix,
    tags_invalidate_their_entries,
    bodies_over_the_limit_stream_through,
    xfetch_recomputes_early_with_a_fixed_random_number,
    errors_are_cached_only_when_the_handler_says_so,
    normalized_queries_share_an_entry,
    namespaces_and_credential_headers,
    conditional_requests_and_cache_status,
);

/// The cache's entry keys (`cr:<variant>:{<URI>}`), by scanning.
async fn entry_keys(h: &Harness) -> Vec<String> {
    h.keys_under("cr:").await
}

async fn set(h: &Harness, args: &[&[u8]]) {
    let mut conn = h.inspect().await;
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("name"));
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query_async(&mut conn).await.expect("command");
}

async fn values_that_are_not_ours_are_misses(h: Harness) {
    let handler = app(|req: Request<Full<Bytes>>| async move {
        let body = req.uri().path().to_owned();
        ok(&[], body)
    });
    let layer = builder(&h).await.build().expect("layer");
    let svc = cached(&layer, &handler);
    assert_eq!(fetch(&svc, "/a").await.0, "MISS");
    let [key_a] = entry_keys(&h).await.try_into().expect("one entry");
    assert_eq!(fetch(&svc, "/b").await.0, "MISS");
    let key_b = entry_keys(&h)
        .await
        .into_iter()
        .find(|k| *k != key_a)
        .expect("b");
    let mut conn = h.inspect().await;
    let value_b: Vec<u8> = redis::cmd("GET")
        .arg(&key_b)
        .query_async(&mut conn)
        .await
        .expect("GET");
    // An entry of the earlier format (names and values u32-length-prefixed), fresh for
    // years: the variant digest from its key, a 200, no header, no tag, a body.
    let digest = key_a
        .split("cr:")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .expect("the variant digest");
    let mut earlier = b"RGC1 E 9000000000000000 9000000000000000 1 0\n".to_vec();
    earlier.extend_from_slice(digest.as_bytes());
    earlier.extend_from_slice(&200u16.to_be_bytes());
    earlier.extend_from_slice(&[0; 8]);
    earlier.extend_from_slice(b"stale body");
    // Another variant's entry, garbage, another type, a truncated entry, an entry of the
    // earlier format: each a miss, then overwritten by the fill.
    let garbage: [Vec<&[u8]>; 5] = [
        vec![b"SET", key_a.as_bytes(), &value_b],
        vec![b"SET", key_a.as_bytes(), b"\xff\x00 not a cache entry"],
        vec![b"HSET", key_a.as_bytes(), b"field", b"value"],
        vec![b"SET", key_a.as_bytes(), &value_b[..value_b.len() / 2]],
        vec![b"SET", key_a.as_bytes(), &earlier],
    ];
    for command in garbage {
        if command[0] == b"HSET" {
            set(&h, &[b"DEL", key_a.as_bytes()]).await;
        }
        set(&h, &command).await;
        assert_eq!(fetch(&svc, "/a").await, pair("MISS", "/a"), "{command:?}");
        assert_eq!(fetch(&svc, "/a").await, pair("HIT", "/a"));
    }
}

async fn every_key_the_cache_writes_has_a_ttl(h: Harness) {
    let handler = app(|req: Request<Full<Bytes>>| async move {
        match req.uri().path() {
            "/no-store" => ok(&[("cache-control", "no-store")], "n"),
            "/stale" => ok(
                &[("cache-control", "max-age=1, stale-while-revalidate=60")],
                "s",
            ),
            _ => ok(&[("x-cache-tags", "t1, t2")], "t"),
        }
    });
    let layer = builder(&h).await.build().expect("layer");
    let svc = cached(&layer, &handler);
    for path in ["/tagged", "/no-store", "/stale", "/tagged", "/no-store"] {
        fetch(&svc, path).await;
    }
    layer.invalidate_tag("t1").await.expect("invalidate");
    h.wait(Duration::from_secs(2)).await;
    assert_eq!(fetch(&svc, "/stale").await.0, "STALE");
    // Wait for the background refresh to land and release its lock.
    while fetch(&svc, "/stale").await.0 != "HIT" {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    h.assert_every_key_has_a_ttl(4).await;
}

/// Redis gone: every request is served by the handler, uncached, never an error.
async fn the_store_failing_never_fails_a_request(mut h: Harness) {
    let handler = app(|_| async { ok(&[], "fresh") });
    // Each request pays the store's timeout once Redis is gone: a short one keeps the test
    // short (with the suite's 5 s, a pool's requests took 20 s), and answers stay the same.
    let backend = h.backend().await.timeout(Duration::from_millis(300));
    let layer = CacheLayer::builder(redis_guard::cache::RedisCacheStore::new(backend))
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .random(|| 1.0)
        .build()
        .expect("layer");
    let svc = cached(&layer, &handler);
    assert_eq!(fetch(&svc, "/r").await, pair("MISS", "fresh"));
    assert_eq!(fetch(&svc, "/r").await, pair("HIT", "fresh"));
    h.kill_redis();
    for _ in 0..3 {
        let r = send(&svc, get("/r")).await;
        assert_eq!(
            (r.status, r.header("x-cache"), r.body.as_str()),
            (200, "MISS", "fresh")
        );
    }
    assert_eq!(handler.calls.load(Ordering::SeqCst), 4);
    assert!(
        layer.invalidate_tag("t").await.is_err(),
        "an invalidation says it failed"
    );
}

backend_suite!(
    redis_only: values_that_are_not_ours_are_misses,
    every_key_the_cache_writes_has_a_ttl,
    the_store_failing_never_fails_a_request,
);
// Over TLS (`rediss://`, a client certificate): a standalone server, a pool, a cluster and
// Sentinel.
backend_suite!(tls_only: two_hundred_cold_requests_compute_once);
