//! Invalidation after unsafe methods, as RFC 9111 §4.4 requires of a cache
//! (<https://www.rfc-editor.org/rfc/rfc9111#section-4.4>), over real HTTP on every backend:
//! a non-error response to a method not known to be safe voids the stored responses of the
//! target URI, every `Vary` variant, on every replica, and those of a same-origin `Location` /
//! `Content-Location`. And a hit on Redis is plain commands: no script.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::ACCEPT_LANGUAGE;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use redis_guard::backend::ManualClock;
use redis_guard::cache::{CacheLayer, RedisCacheStore};
use redis_guard_tests::{Harness, Monitor, backend_suite, serve};
use tokio::sync::oneshot;
use tower::Layer;

/// What the origin has served: a version per path, bumped by every unsafe request to it
/// (whatever its answer, so that a voided entry shows).
type Versions = Arc<Mutex<HashMap<String, u32>>>;

/// The origin: `GET` answers `<path> v<version> <accept-language>`, fresh for an hour, varying
/// on `Accept-Language`; any other method bumps the path's version and answers the status in
/// `x-status` (default 200) with the `Location` / `Content-Location` named in `x-location` /
/// `x-content-location`.
async fn origin(h: &Harness) -> SocketAddr {
    origins(h, 1).await[0]
}

/// `n` replicas of the origin, each with a cache layer of its own on the harness' store.
async fn origins(h: &Harness, n: usize) -> Vec<SocketAddr> {
    let versions: Versions = Arc::default();
    let mut addrs = Vec::new();
    for _ in 0..n {
        let layer = h
            .cache()
            .await
            .vary([ACCEPT_LANGUAGE])
            .jitter(0.0)
            .build()
            .expect("layer");
        addrs.push(serve(layer.layer(handler(Arc::clone(&versions)))).await);
    }
    addrs
}

fn handler(
    versions: Versions,
) -> impl tower::Service<
    Request<hyper::body::Incoming>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |req: Request<hyper::body::Incoming>| {
        let versions = Arc::clone(&versions);
        async move {
            let path = req.uri().path().to_owned();
            let header = |name: &str| {
                req.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let mut res = Response::builder();
            let body = if req.method() == http::Method::GET || req.method() == http::Method::HEAD {
                let version = versions.lock().expect("lock").get(&path).copied();
                let lang = header("accept-language").unwrap_or_default();
                res = res
                    .header("cache-control", "max-age=3600")
                    .header("vary", "accept-language");
                format!("{path} v{} {lang}", version.unwrap_or(0))
            } else {
                *versions.lock().expect("lock").entry(path).or_default() += 1;
                let status = header("x-status").map_or(200, |s| s.parse().expect("status"));
                res = res.status(StatusCode::from_u16(status).expect("status"));
                if let Some(l) = header("x-location") {
                    res = res.header("location", l);
                }
                if let Some(l) = header("x-content-location") {
                    res = res.header("content-location", l);
                }
                "done".to_owned()
            };
            Ok(res.body(Full::new(Bytes::from(body))).expect("response"))
        }
    })
}

/// What came back: the status, `x-cache`, the body.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    cache: String,
    body: String,
}

/// `method path` over a connection of its own, with `headers`.
async fn send(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("content-length: 0\r\n\r\n");
    let res = redis_guard_testkit::http::send(addr, head.as_bytes())
        .await
        .expect("a response");
    Answer {
        status: res.status,
        cache: res.header("x-cache").unwrap_or_default().to_owned(),
        body: res.text(),
    }
}

/// `GET path` in `lang`: `(x-cache, body)`.
async fn get(addr: SocketAddr, path: &str, lang: &str) -> (String, String) {
    let a = send(addr, "GET", path, &[("accept-language", lang)]).await;
    assert_eq!(a.status, 200, "{a:?}");
    (a.cache, a.body)
}

fn seen(cache: &str, body: &str) -> (String, String) {
    (cache.to_owned(), body.to_owned())
}

/// §4.4: "A cache MUST invalidate the target URI when it receives a non-error status code in
/// response to an unsafe request method (including methods whose safety is unknown)".
async fn unsafe_methods_void_their_target_uri(h: Harness) {
    let addr = origin(&h).await;
    for (i, method) in ["POST", "PUT", "DELETE", "PATCH", "FROBNICATE"]
        .into_iter()
        .enumerate()
    {
        let path = format!("/items/{i}");
        assert_eq!(
            get(addr, &path, "en").await,
            seen("MISS", &format!("{path} v0 en"))
        );
        assert_eq!(
            get(addr, &path, "en").await,
            seen("HIT", &format!("{path} v0 en"))
        );
        let done = send(addr, method, &path, &[]).await;
        assert_eq!((done.status, done.body.as_str()), (200, "done"), "{method}");
        assert_eq!(
            get(addr, &path, "en").await,
            seen("MISS", &format!("{path} v1 en")),
            "{method} voids {path}"
        );
        assert_eq!(
            get(addr, &path, "en").await,
            seen("HIT", &format!("{path} v1 en"))
        );
    }
    // Another URI, another query: untouched.
    assert_eq!(get(addr, "/items/0?page=2", "en").await.0, "MISS");
    assert_eq!(get(addr, "/items/0?page=2", "en").await.0, "HIT");
    send(addr, "PUT", "/items/0", &[]).await;
    assert_eq!(get(addr, "/items/0?page=2", "en").await.0, "HIT");
}

/// §4.4: the stored responses of the target URI are every response stored for it: each
/// `Vary` variant (and the `HEAD` ones), whichever replica stored it, whichever one answered
/// the unsafe request.
async fn every_variant_on_every_replica_is_voided(h: Harness) {
    let replicas = origins(&h, 2).await;
    let (a, b) = (replicas[0], replicas[1]);
    for lang in ["en", "fr", "de"] {
        assert_eq!(
            get(a, "/doc", lang).await,
            seen("MISS", &format!("/doc v0 {lang}"))
        );
        assert_eq!(
            get(b, "/doc", lang).await,
            seen("HIT", &format!("/doc v0 {lang}"))
        );
    }
    let head = send(a, "HEAD", "/doc", &[("accept-language", "en")]).await;
    assert_eq!(head.cache, "MISS");
    assert_eq!(
        send(a, "HEAD", "/doc", &[("accept-language", "en")])
            .await
            .cache,
        "HIT"
    );
    assert_eq!(send(b, "DELETE", "/doc", &[]).await.status, 200);
    for lang in ["en", "fr", "de"] {
        assert_eq!(
            get(a, "/doc", lang).await,
            seen("MISS", &format!("/doc v1 {lang}")),
            "{lang}"
        );
    }
    assert_eq!(
        send(b, "HEAD", "/doc", &[("accept-language", "en")])
            .await
            .cache,
        "MISS"
    );
}

/// §4.4 voids only on a non-error status (2xx, 3xx); an error answer, or a safe method,
/// leaves the stored responses alone.
async fn errors_and_safe_methods_void_nothing(h: Harness) {
    let addr = origin(&h).await;
    assert_eq!(get(addr, "/e", "en").await.0, "MISS");
    for status in ["400", "404", "409", "500", "503"] {
        let done = send(addr, "PUT", "/e", &[("x-status", status)]).await;
        assert_eq!(done.status.to_string(), status);
        assert_eq!(
            get(addr, "/e", "en").await,
            seen("HIT", "/e v0 en"),
            "{status}"
        );
    }
    let options = send(addr, "OPTIONS", "/e", &[]).await;
    assert_eq!(options.status, 200);
    assert_eq!(get(addr, "/e", "en").await, seen("HIT", "/e v0 en"));
    // A redirect is not an error: it voids.
    assert_eq!(
        send(addr, "POST", "/e", &[("x-status", "303")])
            .await
            .status,
        303
    );
    assert_eq!(get(addr, "/e", "en").await, seen("MISS", "/e v7 en"));
}

/// §4.4: "A cache MAY invalidate other URIs when it receives a non-error status code in
/// response to an unsafe request method": those in `Location` and `Content-Location`, only
/// when of the same origin (a response must not void another site's pages).
async fn same_origin_location_and_content_location_are_voided(h: Harness) {
    let addr = origin(&h).await;
    for path in ["/a", "/b", "/c/d", "/x"] {
        assert_eq!(get(addr, path, "en").await.0, "MISS");
        assert_eq!(get(addr, path, "en").await.0, "HIT");
    }
    let done = send(
        addr,
        "POST",
        "/a",
        &[
            ("x-status", "201"),
            ("x-location", "/b"),
            ("x-content-location", "http://test/c/d"),
        ],
    )
    .await;
    assert_eq!(done.status, 201);
    for path in ["/a", "/b", "/c/d"] {
        assert_eq!(get(addr, path, "en").await.0, "MISS", "{path}");
    }
    assert_eq!(get(addr, "/x", "en").await.0, "HIT", "not named: kept");
    // Another origin's URI voids nothing here; a relative reference resolves against the
    // request's URI.
    send(addr, "PUT", "/c/e", &[("x-location", "http://elsewhere/x")]).await;
    assert_eq!(get(addr, "/x", "en").await.0, "HIT", "another origin: kept");
    assert_eq!(get(addr, "/c/d", "en").await.0, "HIT");
    send(addr, "PUT", "/c/e", &[("x-location", "d")]).await;
    assert_eq!(get(addr, "/c/d", "en").await.0, "MISS", "relative: /c/d");
}

/// The first `GET`'s handler, paused after it read the version it answers: it says when it
/// got there, and goes on when told.
type Gate = Arc<Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>>;

/// A response computed across an invalidation of its URI (the `GET` missed, then an unsafe
/// request to the URI was answered, then the handler's response came back) may predate the
/// change: it is not stored, and the next `GET` computes again. On Redis the fill checks the
/// URI's invalidation, since a hit reads none.
async fn a_fill_that_began_before_an_invalidation_is_not_stored(h: Harness) {
    let layer: CacheLayer = h.cache().await.jitter(0.0).build().expect("layer");
    let version = Arc::new(AtomicU32::new(0));
    let gate: Gate = Arc::default();
    let (entered_tx, entered) = oneshot::channel();
    let (release, release_rx) = oneshot::channel();
    *gate.lock().expect("lock") = Some((entered_tx, release_rx));
    let service = {
        let (version, gate) = (Arc::clone(&version), Arc::clone(&gate));
        tower::service_fn(move |req: Request<hyper::body::Incoming>| {
            let (version, gate) = (Arc::clone(&version), Arc::clone(&gate));
            async move {
                if req.method() != http::Method::GET {
                    version.fetch_add(1, Ordering::SeqCst);
                    return Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("done"))));
                }
                let seen = version.load(Ordering::SeqCst);
                let paused = gate.lock().expect("lock").take();
                if let Some((entered, release)) = paused {
                    entered.send(()).expect("the test waits");
                    release.await.expect("the test releases");
                }
                let res = Response::builder()
                    .header("cache-control", "max-age=3600")
                    .body(Full::new(Bytes::from(format!("v{seen}"))))
                    .expect("response");
                Ok(res)
            }
        })
    };
    let addr = serve(layer.layer(service)).await;
    let first = tokio::spawn(async move { send(addr, "GET", "/race", &[]).await });
    entered.await.expect("the first GET reaches the handler");
    assert_eq!(send(addr, "POST", "/race", &[]).await.status, 200);
    release.send(()).expect("the first GET waits");
    let first = first.await.expect("the first GET");
    assert_eq!((first.cache.as_str(), first.body.as_str()), ("MISS", "v0"));
    // Computed before the POST was answered: not served after it.
    let next = send(addr, "GET", "/race", &[]).await;
    assert_eq!((next.cache.as_str(), next.body.as_str()), ("MISS", "v1"));
    let last = send(addr, "GET", "/race", &[]).await;
    assert_eq!((last.cache.as_str(), last.body.as_str()), ("HIT", "v1"));
}

backend_suite!(
    unsafe_methods_void_their_target_uri,
    every_variant_on_every_replica_is_voided,
    errors_and_safe_methods_void_nothing,
    same_origin_location_and_content_location_are_voided,
    a_fill_that_began_before_an_invalidation_is_not_stored,
);

/// A hit on Redis is one round trip of plain commands: one `GET` of the entry when the
/// handler named no tags for it (its URI's invalidation deleted it: no record of the URI is
/// read), with `TIME` in front at most once a second: no `EVALSHA`, no `EVAL`. Tags the handler
/// named are read in the same round trip (in one `MGET` with the entry; one `GET` each on a
/// cluster, where they live in slots of their own); only fills and invalidations run scripts.
async fn a_hit_sends_no_script(h: Harness) {
    let layer: CacheLayer = h.cache().await.build().expect("layer");
    let tagged = tower::service_fn(|req: Request<hyper::body::Incoming>| async move {
        let mut res = Response::builder().header("cache-control", "max-age=3600");
        if req.uri().path() == "/tagged" {
            res = res.header("x-cache-tags", "products, user:7");
        }
        Ok::<_, Infallible>(res.body(Full::new(Bytes::from("page"))).expect("response"))
    });
    let addr = serve(layer.layer(tagged)).await;
    for path in ["/plain", "/tagged"] {
        assert_eq!(send(addr, "GET", path, &[]).await.cache, "MISS");
    }
    // The fill taught the layer the entry's tags: every hit reads their records with it.
    let mut monitor = Monitor::start(&h).await;
    monitor.commands(&h).await;
    for path in ["/plain", "/tagged", "/plain", "/tagged"] {
        assert_eq!(send(addr, "GET", path, &[]).await.cache, "HIT", "{path}");
    }
    let mut sent = monitor.commands(&h).await;
    // A bb8 pool tests each connection it hands out: not the cache's doing.
    sent.retain(|c| c != "\"PING\"");
    let scripts: Vec<&String> = sent
        .iter()
        .filter(|c| c.to_ascii_lowercase().starts_with("\"eval"))
        .collect();
    assert!(scripts.is_empty(), "a hit runs no script: {sent:?}");
    // A read names the entry (`rg:cr:<variant>:{<URI>}`; tag records are `rg:ct:{…}`).
    let reads: Vec<&String> = sent.iter().filter(|c| c.contains(":cr:")).collect();
    assert_eq!(reads.len(), 4, "one read a hit: {sent:?}");
    let cluster = h.kind() == redis_guard_tests::Kind::Cluster;
    for (read, tagged) in reads.iter().zip([false, true, false, true]) {
        // The store's clock, at most once a second, goes in front of the read.
        let read = read.strip_prefix("\"TIME\" | ").unwrap_or(read);
        assert!(!read.contains(" | "), "one command: {read}");
        // Untagged, or on a cluster: a `GET` of the entry alone. Tagged on one server: one
        // `MGET` of the entry and its tags' records.
        if tagged && !cluster {
            assert!(read.starts_with("\"MGET\""), "{read}");
        } else {
            assert!(read.starts_with("\"GET\""), "{read}");
            assert!(!read.contains("ct:{"), "no record of the URI: {read}");
        }
    }
    // `TIME` is only ever read with an entry.
    assert!(
        sent.iter()
            .filter(|c| c.contains("\"TIME\""))
            .all(|c| c.starts_with("\"TIME\" | ") && c.contains(":cr:")),
        "{sent:?}"
    );
    let tag_reads = sent
        .iter()
        .filter(|c| c.starts_with("\"GET\"") && !c.contains(":cr:"))
        .count();
    let tagged_keys: Vec<usize> = reads.iter().map(|r| r.matches("ct:{").count()).collect();
    if cluster {
        // Two tags, a hard and a soft record each, in slots of their own: one GET each.
        assert_eq!(tagged_keys, [0, 0, 0, 0], "{sent:?}");
        assert_eq!(tag_reads, 2 * 4, "{sent:?}");
    } else {
        assert_eq!(tagged_keys, [0, 4, 0, 4], "{sent:?}");
        assert_eq!(tag_reads, 0, "{sent:?}");
    }
    assert_eq!(
        sent.len(),
        reads.len() + tag_reads,
        "nothing else: {sent:?}"
    );
}

/// Hits that arrive while reads are in flight share a round trip: 64 requests for 8 pages,
/// queued behind a Redis that answers no client for a while, take `MGET`s beside the reads
/// sent at once, and each gets its own page. A page whose key holds another type reads as
/// absent in its batch, is computed again, and stored over it.
async fn hits_that_queue_share_a_read(h: Harness) {
    // A clock the store never has to read from Redis: every hit takes the plain read.
    let backend = h.backend().await.frozen_time(ManualClock::new());
    let layer = CacheLayer::builder(RedisCacheStore::new(backend))
        .build()
        .expect("layer");
    let pages = tower::service_fn(|req: Request<hyper::body::Incoming>| async move {
        let res = Response::builder().header("cache-control", "max-age=3600");
        let body = Full::new(Bytes::from(req.uri().path().to_owned()));
        Ok::<_, Infallible>(res.body(body).expect("response"))
    });
    let addr = serve(layer.layer(pages)).await;
    for i in 0..8 {
        assert_eq!(
            send(addr, "GET", &format!("/p{i}"), &[]).await.cache,
            "MISS"
        );
    }
    // Long enough for the requests to queue on a loaded machine, and shorter than the
    // backend's timeout (and, on a cluster, than a node's reply timeout).
    let pause = if h.kind() == redis_guard_tests::Kind::Cluster {
        "600"
    } else {
        "3000"
    };
    // `n` requests for the pages in turn, sent while Redis pauses: their answers, in order.
    let queued = async |n: usize| {
        h.admin(&["CLIENT", "PAUSE", pause, "ALL"]).await;
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                tokio::spawn(async move { send(addr, "GET", &format!("/p{}", i % 8), &[]).await })
            })
            .collect();
        let mut answers = Vec::new();
        for (i, task) in tasks.into_iter().enumerate() {
            let answer = task.await.expect("task");
            assert_eq!(answer.status, 200, "{answer:?}");
            assert_eq!(answer.body, format!("/p{}", i % 8), "{answer:?}");
            answers.push(answer.cache);
        }
        answers
    };
    h.admin(&["CONFIG", "RESETSTAT"]).await;
    let answers = queued(64).await;
    assert!(answers.iter().all(|a| a == "HIT"), "{answers:?}");
    let (gets, mgets) = (h.calls("get").await, h.calls("mget").await);
    assert!(
        mgets >= 1 && gets + mgets < 64,
        "{gets} GET and {mgets} MGET for 64 hits"
    );
    let entries = h.keys_under("cr:").await;
    assert_eq!(entries.len(), 8, "{entries:?}");
    let mut conn = h.inspect().await;
    let () = redis::cmd("DEL")
        .arg(&entries[0])
        .query_async(&mut conn)
        .await
        .expect("DEL");
    let () = redis::cmd("HSET")
        .arg(&entries[0])
        .arg("not")
        .arg("an entry")
        .query_async(&mut conn)
        .await
        .expect("HSET");
    let answers = queued(32).await;
    assert!(
        answers.iter().filter(|a| *a == "HIT").count() >= 32 - 4,
        "{answers:?}"
    );
    // The fill stored the page over the key of another type: every page is a hit again.
    for i in 0..8 {
        assert_eq!(send(addr, "GET", &format!("/p{i}"), &[]).await.cache, "HIT");
    }
}

/// On Redis a URI's invalidation deletes its stored variants, which their fills listed beside
/// them (the list outlives every entry it names), and leaves only its record, with a TTL.
async fn an_invalidation_deletes_the_variants_its_fills_listed(h: Harness) {
    let addr = origin(&h).await;
    for lang in ["en", "fr"] {
        assert_eq!(get(addr, "/doc", lang).await.0, "MISS");
    }
    let [list] = h
        .keys_under("cs:")
        .await
        .try_into()
        .expect("one variant list");
    // The list first: an entry read later has lived longer.
    let kept = h.pttl(&list).await;
    let entries = h.keys_under("cr:").await;
    assert_eq!(entries.len(), 2, "{entries:?}");
    for entry in &entries {
        let pttl = h.pttl(entry).await;
        assert!(
            pttl > 0 && pttl <= kept,
            "{entry}: {pttl} ms, the list {kept} ms"
        );
    }
    assert_eq!(send(addr, "POST", "/doc", &[]).await.status, 200);
    assert_eq!(h.keys_under("cr:").await, Vec::<String>::new());
    assert_eq!(h.keys_under("cs:").await, Vec::<String>::new());
    assert_eq!(h.keys_under("ct:").await.len(), 1, "the URI's record");
    h.assert_every_key_has_a_ttl(1).await;
    assert_eq!(get(addr, "/doc", "en").await, seen("MISS", "/doc v1 en"));
}

backend_suite!(
    redis_only: a_hit_sends_no_script,
    hits_that_queue_share_a_read,
    an_invalidation_deletes_the_variants_its_fills_listed,
);
