//! `CacheLayer` as an HTTP cache, over real HTTP on every backend: each scenario checks one
//! requirement of RFC 9111 (HTTP Caching) or RFC 5861 (the `stale-*` extensions), named in its
//! title. The layer is built with its defaults unless the scenario says otherwise; time moves
//! on the harness' clock (the store's), whole seconds at a time, so no answer depends on how
//! fast the machine is.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use redis_guard::cache::CacheLayerBuilder;
use redis_guard_testkit::http::{RawResponse, request};
use redis_guard_tests::{Harness, backend_suite, serve};

/// What the origin answers for a path on its `n`th call of that path (from 1): a status and
/// headers; the body says which call it was.
type Script = dyn Fn(&str, usize) -> (u16, Vec<(&'static str, String)>) + Send + Sync;

/// The origin's calls, by path: how many, and the conditional headers each one carried.
#[derive(Clone)]
struct Calls {
    counts: Arc<Mutex<HashMap<String, Vec<String>>>>,
    /// The calls of a path under `/held/` after its second wait for a permit.
    held: Arc<tokio::sync::Semaphore>,
}

impl Default for Calls {
    fn default() -> Self {
        Self {
            counts: Arc::default(),
            held: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

impl Calls {
    /// Counts a call of `path` with these request headers: its number, from 1.
    fn next(&self, path: &str, headers: &HeaderMap) -> usize {
        let condition = ["if-none-match", "if-modified-since"]
            .iter()
            .filter_map(|name| {
                let value = headers.get(*name)?.to_str().ok()?;
                Some(format!("{name}: {value}"))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let mut counts = self.counts.lock().expect("calls");
        let seen = counts.entry(path.to_owned()).or_default();
        seen.push(condition);
        seen.len()
    }

    fn of(&self, path: &str) -> usize {
        self.conditions(path).len()
    }

    /// The conditional request headers of each call of `path` ("" for none), in order.
    fn conditions(&self, path: &str) -> Vec<String> {
        let counts = self.counts.lock().expect("calls");
        counts.get(path).cloned().unwrap_or_default()
    }
}

/// An app whose every path is answered by `script`, behind the cache `layer` builds.
async fn site(
    layer: CacheLayerBuilder,
    script: impl Fn(&str, usize) -> (u16, Vec<(&'static str, String)>) + Send + Sync + 'static,
) -> (SocketAddr, Calls) {
    let calls = Calls::default();
    (replica(layer, script, calls.clone()).await, calls)
}

/// One replica of an app answered by `script`, counting into `calls` (shared by the
/// replicas). A path under `/slow/` answers after 200 ms, so that concurrent requests meet;
/// from its third call, a path under `/held/` answers once the test adds a permit to
/// `calls.held`.
async fn replica(
    layer: CacheLayerBuilder,
    script: impl Fn(&str, usize) -> (u16, Vec<(&'static str, String)>) + Send + Sync + 'static,
    calls: Calls,
) -> SocketAddr {
    let script: Arc<Script> = Arc::new(script);
    let origin = move |uri: Uri, request: HeaderMap| {
        let (script, calls) = (Arc::clone(&script), calls.clone());
        async move {
            let path = uri.path().to_owned();
            let n = calls.next(&path, &request);
            if path.starts_with("/slow/") {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if path.starts_with("/held/") && n > 2 {
                let permit = calls.held.acquire().await.expect("the gate stays open");
                permit.forget();
            }
            let (status, headers) = script(&path, n);
            let mut res: Response = format!("call {n}").into_response();
            *res.status_mut() = StatusCode::from_u16(status).expect("status");
            for (name, value) in headers {
                res.headers_mut()
                    .append(name, value.parse().expect("header value"));
            }
            res
        }
    };
    let layer = layer.build().expect("layer");
    serve(Router::new().fallback(origin).layer(layer)).await
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> RawResponse {
    let headers: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
    request(addr, "GET", path, &headers, b"")
        .await
        .expect("the app answers")
}

/// `x-cache` of a GET of `path`.
async fn outcome(addr: SocketAddr, path: &str) -> String {
    let r = get(addr, path, &[]).await;
    r.header("x-cache").unwrap_or_default().to_owned()
}

/// An HTTP-date `secs` from now (negative: in the past).
fn http_date(secs: i64) -> String {
    let now = SystemTime::now();
    let d = Duration::from_secs(secs.unsigned_abs());
    httpdate(if secs < 0 { now - d } else { now + d })
}

fn httpdate(t: SystemTime) -> String {
    // IMF-fixdate by hand: the tests crate has no date dependency.
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let days = i64::try_from(secs / 86_400).expect("days");
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
        [usize::try_from(days % 7).expect("weekday")];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        months[usize::try_from(month - 1).expect("month")],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn cc(value: &str) -> Vec<(&'static str, String)> {
    vec![("cache-control", value.to_owned())]
}

/// RFC 9111 §4.2.1: `s-maxage` (a shared cache's), then `max-age`, the first of two.
async fn rfc9111_4_2_1_s_maxage_then_the_first_max_age(h: Harness) {
    let (addr, calls) = site(h.cache().await, |path, _| match path {
        "/shared" => (200, cc("max-age=1, s-maxage=100")),
        "/twice" => (200, cc("max-age=100, max-age=1")),
        _ => (
            200,
            vec![
                ("cache-control", "max-age=100".into()),
                ("cache-control", "max-age=1".into()),
            ],
        ),
    })
    .await;
    for path in ["/shared", "/twice", "/lines"] {
        assert_eq!(outcome(addr, path).await, "MISS", "{path}");
    }
    h.wait(Duration::from_secs(50)).await;
    for path in ["/shared", "/twice", "/lines"] {
        assert_eq!(outcome(addr, path).await, "HIT", "{path}");
        assert_eq!(calls.of(path), 1, "{path}");
    }
    h.wait(Duration::from_secs(51)).await;
    for path in ["/shared", "/twice", "/lines"] {
        assert_eq!(outcome(addr, path).await, "MISS", "{path}");
    }
}

/// RFC 9111 §5.3 and §4.2.1: `Expires` − `Date` is the freshness lifetime; an `Expires` that
/// is not a valid date (`0`) or is past means already expired.
async fn rfc9111_5_3_expires_sets_freshness_and_invalid_means_expired(h: Harness) {
    let (addr, calls) = site(h.cache().await, |path, _| {
        let expires = match path {
            "/future" => http_date(100),
            "/zero" => "0".to_owned(),
            "/invalid" => "next week".to_owned(),
            _ => http_date(-100),
        };
        (200, vec![("date", http_date(0)), ("expires", expires)])
    })
    .await;
    assert_eq!(outcome(addr, "/future").await, "MISS");
    assert_eq!(outcome(addr, "/future").await, "HIT");
    for path in ["/zero", "/invalid", "/past"] {
        assert_eq!(outcome(addr, path).await, "MISS", "{path}");
        assert_eq!(outcome(addr, path).await, "MISS", "{path}");
        assert_eq!(calls.of(path), 2, "{path}: never served from the cache");
    }
    h.wait(Duration::from_secs(101)).await;
    assert_eq!(outcome(addr, "/future").await, "MISS");
}

/// RFC 9111 §4.2.2: a response without explicit freshness is reused only under a heuristic,
/// which the layer applies only when `ttl` is set; never when an expiration is explicit.
async fn rfc9111_4_2_2_heuristic_freshness_only_when_configured(h: Harness) {
    let script = |path: &str, _| match path {
        "/silent" => (200, Vec::new()),
        _ => (200, vec![("expires", "0".to_owned())]),
    };
    let (defaults, calls) = site(h.cache().await, script).await;
    assert_eq!(outcome(defaults, "/silent").await, "MISS");
    assert_eq!(outcome(defaults, "/silent").await, "MISS");
    assert_eq!(calls.of("/silent"), 2);
    let heuristic = h.cache().await.ttl(Duration::from_secs(60));
    let (addr, calls) = site(heuristic.namespace("heuristic"), script).await;
    assert_eq!(outcome(addr, "/silent").await, "MISS");
    assert_eq!(outcome(addr, "/silent").await, "HIT");
    assert_eq!(outcome(addr, "/expired").await, "MISS");
    assert_eq!(outcome(addr, "/expired").await, "MISS");
    assert_eq!(
        calls.of("/expired"),
        2,
        "no heuristic over an explicit expiration"
    );
}

/// RFC 9111 §4.2.3 and §5.1: the `Age` a response arrives with counts against its freshness;
/// one that arrives older than its lifetime is not served as fresh; `Age` is delta-seconds,
/// its first value, an invalid one ignored.
async fn rfc9111_4_2_3_upstream_age_counts_against_freshness(h: Harness) {
    let (addr, calls) = site(h.cache().await, |path, _| {
        let age = match path {
            "/old" => "150",
            "/aged" => "60",
            "/list" => "60, 10",
            _ => "soon",
        };
        (
            200,
            vec![("cache-control", "max-age=100".into()), ("age", age.into())],
        )
    })
    .await;
    assert_eq!(outcome(addr, "/old").await, "MISS");
    assert_eq!(outcome(addr, "/old").await, "MISS");
    assert_eq!(calls.of("/old"), 2, "stale on arrival: never a hit");
    for path in ["/aged", "/list", "/invalid"] {
        assert_eq!(outcome(addr, path).await, "MISS", "{path}");
        assert_eq!(outcome(addr, path).await, "HIT", "{path}");
    }
    // 40 s of freshness left (less up to 10% of jitter): stale after 41.
    h.wait(Duration::from_secs(41)).await;
    assert_eq!(outcome(addr, "/aged").await, "MISS");
    assert_eq!(outcome(addr, "/list").await, "MISS");
    assert_eq!(
        outcome(addr, "/invalid").await,
        "HIT",
        "an invalid Age is ignored"
    );
}

/// RFC 9111 §5.1 and §4.2.3: the `Age` of a hit is the entry's current age: its age on
/// arrival plus its time in the cache.
async fn rfc9111_5_1_the_age_of_a_hit_is_its_current_age(h: Harness) {
    let (addr, _) = site(h.cache().await, |path, _| {
        let mut headers = cc("max-age=1000");
        if path == "/relayed" {
            headers.push(("age", "60".into()));
        }
        (200, headers)
    })
    .await;
    for path in ["/relayed", "/origin"] {
        get(addr, path, &[]).await;
    }
    h.wait(Duration::from_secs(10)).await;
    let relayed = get(addr, "/relayed", &[]).await;
    assert_eq!(relayed.header("x-cache"), Some("HIT"));
    // Exact on memory; on Redis the real milliseconds the test takes may add a second.
    let age = |r: &RawResponse| r.header("age").and_then(|a| a.parse::<u64>().ok());
    assert!(
        matches!(age(&relayed), Some(70 | 71)),
        "{:?}",
        relayed.headers
    );
    let origin = get(addr, "/origin", &[]).await;
    assert!(
        matches!(age(&origin), Some(10 | 11)),
        "{:?}",
        origin.header("age")
    );
}

/// RFC 9111 §4.2.1 (a cache may expire a response early, never late): the layer's jitter
/// shortens freshness, never lengthens it.
async fn rfc9111_4_2_1_jitter_never_lengthens_freshness(h: Harness) {
    // The largest jitter draw: the most a default layer moves a lifetime.
    let layer = h.cache().await.random(|| 1.0);
    let (addr, _) = site(layer, |_, _| (200, cc("max-age=30"))).await;
    get(addr, "/j", &[]).await;
    let hit = get(addr, "/j", &[]).await;
    let status = hit.header("cache-status").unwrap_or_default().to_owned();
    let ttl: u64 = status
        .rsplit("ttl=")
        .next()
        .and_then(|t| t.parse().ok())
        .expect("a ttl");
    assert!((27..=30).contains(&ttl), "{status}");
    h.wait(Duration::from_secs(30)).await;
    assert_eq!(outcome(addr, "/j").await, "MISS");
}

/// RFC 9111 §5.2.2.2, §5.2.2.8, §5.2.2.10: a response marked `must-revalidate` or
/// `proxy-revalidate`, or carrying `s-maxage`, is never served stale in place of a failing
/// handler, whatever the layer's `stale_if_error`.
async fn rfc9111_5_2_2_stale_if_error_respects_revalidation_directives(h: Harness) {
    let layer = h.cache().await.stale_if_error(Duration::from_secs(300));
    let (addr, _) = site(layer, |path, n| {
        if n > 1 {
            return (500, Vec::new());
        }
        match path {
            "/must" => (200, cc("max-age=10, must-revalidate")),
            "/proxy" => (200, cc("max-age=10, proxy-revalidate")),
            "/shared" => (200, cc("s-maxage=10")),
            _ => (200, cc("max-age=10")),
        }
    })
    .await;
    for path in ["/must", "/proxy", "/shared", "/plain"] {
        assert_eq!(get(addr, path, &[]).await.status, 200, "{path}");
    }
    h.wait(Duration::from_secs(20)).await;
    for path in ["/must", "/proxy", "/shared"] {
        let r = get(addr, path, &[]).await;
        assert_eq!((r.status, r.text()), (500, "call 2".to_owned()), "{path}");
    }
    let plain = get(addr, "/plain", &[]).await;
    assert_eq!((plain.status, plain.text()), (200, "call 1".to_owned()));
    assert_eq!(plain.header("x-cache"), Some("STALE"));
}

/// RFC 5861 §4: a response's own `stale-if-error` is honoured, with the layer's
/// `stale_if_error` off, for as long as it says.
async fn rfc5861_4_the_responses_stale_if_error_is_honoured(h: Harness) {
    let (addr, _) = site(h.cache().await, |_, n| {
        if n > 1 {
            return (503, Vec::new());
        }
        (200, cc("max-age=10, stale-if-error=60"))
    })
    .await;
    assert_eq!(get(addr, "/e", &[]).await.status, 200);
    h.wait(Duration::from_secs(30)).await;
    let r = get(addr, "/e", &[]).await;
    assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
    assert_eq!(r.header("x-cache"), Some("STALE"));
    h.wait(Duration::from_secs(45)).await;
    assert_eq!(get(addr, "/e", &[]).await.status, 503);
}

/// RFC 5861 §3 and RFC 9111 §4.2.4: a response's own `stale-while-revalidate` is honoured;
/// `must-revalidate` forbids serving stale, and the layer's own `stale` window is not applied
/// to a response with `s-maxage`.
async fn rfc5861_3_stale_while_revalidate_as_the_response_allows(h: Harness) {
    let layer = h.cache().await.stale(Duration::from_secs(60));
    let (addr, _) = site(layer, |path, _| match path {
        "/swr" => (200, cc("max-age=10, stale-while-revalidate=60")),
        "/must" => (
            200,
            cc("max-age=10, must-revalidate, stale-while-revalidate=60"),
        ),
        _ => (200, cc("s-maxage=10")),
    })
    .await;
    for path in ["/swr", "/must", "/shared"] {
        assert_eq!(outcome(addr, path).await, "MISS", "{path}");
    }
    h.wait(Duration::from_secs(20)).await;
    assert_eq!(outcome(addr, "/swr").await, "STALE");
    assert_eq!(outcome(addr, "/must").await, "MISS");
    assert_eq!(outcome(addr, "/shared").await, "MISS");
}

/// RFC 9111 §5.2.1.5: the response to a request that says `no-store` is not stored; a stored
/// response still answers it.
async fn rfc9111_5_2_1_5_request_no_store_is_not_stored(h: Harness) {
    let (addr, calls) = site(h.cache().await, |_, _| (200, cc("max-age=100"))).await;
    let no_store = [("cache-control", "no-store")];
    assert_eq!(
        get(addr, "/n", &no_store).await.header("x-cache"),
        Some("MISS")
    );
    assert_eq!(outcome(addr, "/n").await, "MISS", "nothing was stored");
    assert_eq!(outcome(addr, "/n").await, "HIT");
    assert_eq!(
        get(addr, "/n", &no_store).await.header("x-cache"),
        Some("HIT")
    );
    assert_eq!(calls.of("/n"), 2);
}

/// RFC 9111 §5.2.1.7: `only-if-cached` is answered from the cache, else `504` without calling
/// the handler.
async fn rfc9111_5_2_1_7_only_if_cached_answers_504_when_nothing_is_stored(h: Harness) {
    let (addr, calls) = site(h.cache().await, |_, _| (200, cc("max-age=100"))).await;
    let only = [("cache-control", "only-if-cached")];
    assert_eq!(get(addr, "/o", &only).await.status, 504);
    assert_eq!(calls.of("/o"), 0);
    assert_eq!(outcome(addr, "/o").await, "MISS");
    let r = get(addr, "/o", &only).await;
    assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
    assert_eq!(r.header("x-cache"), Some("HIT"));
}

/// RFC 9111 §5.2.1 leaves a cache free to ignore a client's request to bypass it: a shared
/// cache in front of the application does, so that no client can make every request reach
/// the handler. `no-cache`, `max-age=0` and `min-fresh` are answered from the cache.
async fn rfc9111_5_2_1_client_requests_to_bypass_are_ignored(h: Harness) {
    let (addr, calls) = site(h.cache().await, |_, _| (200, cc("max-age=100"))).await;
    assert_eq!(outcome(addr, "/b").await, "MISS");
    for directive in ["no-cache", "max-age=0", "min-fresh=1000"] {
        let r = get(addr, "/b", &[("cache-control", directive)]).await;
        assert_eq!(r.header("x-cache"), Some("HIT"), "{directive}");
    }
    assert_eq!(calls.of("/b"), 1);
}

/// The validators of a response, by path: an `ETag`, a `Last-Modified`, or both.
fn validators(path: &str, modified: &str) -> Vec<(&'static str, String)> {
    if path.ends_with("/etag") {
        vec![("etag", "\"v1\"".into())]
    } else if path.ends_with("/modified") {
        vec![("last-modified", modified.to_owned())]
    } else {
        vec![
            ("etag", "W/\"v1\"".into()),
            ("last-modified", modified.to_owned()),
        ]
    }
}

/// RFC 9111 §4.3.1 and §4.3.4: a stale entry with a validator is passed to the handler as a
/// conditional request (`If-None-Match` with its `ETag`, else `If-Modified-Since` with its
/// `Last-Modified`); the handler's `304` freshens it: its headers are the `304`'s, its body
/// is kept, and it is fresh for the `304`'s lifetime. The client gets the stored response.
async fn rfc9111_4_3_1_a_stale_entry_is_revalidated_with_its_validator(h: Harness) {
    let modified = http_date(-1000);
    let last = modified.clone();
    let (addr, calls) = site(h.cache().await, move |path, n| {
        let mut headers = validators(path, &last);
        if n == 1 {
            headers.extend(cc("max-age=10"));
            return (200, headers);
        }
        headers.extend(cc("max-age=100"));
        headers.push(("x-version", n.to_string()));
        (304, headers)
    })
    .await;
    let paths = ["/etag", "/modified", "/both"];
    for path in paths {
        assert_eq!(outcome(addr, path).await, "MISS", "{path}");
    }
    h.wait(Duration::from_secs(11)).await;
    for path in paths {
        let r = get(addr, path, &[]).await;
        assert_eq!((r.status, r.text()), (200, "call 1".to_owned()), "{path}");
        assert_eq!(r.header("x-cache"), Some("REVALIDATED"), "{path}");
        assert_eq!(
            r.header("cache-status"),
            Some("redis-guard; fwd=stale; fwd-status=304; stored"),
            "{path}"
        );
        assert_eq!(r.header("x-version"), Some("2"), "{path}");
        assert_eq!(r.header("cache-control"), Some("max-age=100"), "{path}");
    }
    assert_eq!(calls.conditions("/etag"), ["", "if-none-match: \"v1\""]);
    assert_eq!(
        calls.conditions("/modified"),
        [String::new(), format!("if-modified-since: {modified}")]
    );
    assert_eq!(
        calls.conditions("/both"),
        ["", "if-none-match: W/\"v1\""],
        "If-None-Match when there is an ETag"
    );
    // Fresh for the 304's 100 s (less jitter), with its headers.
    h.wait(Duration::from_secs(50)).await;
    for path in paths {
        let r = get(addr, path, &[]).await;
        assert_eq!(r.header("x-cache"), Some("HIT"), "{path}");
        assert_eq!(r.text(), "call 1", "{path}");
        assert_eq!(r.header("x-version"), Some("2"), "{path}");
        assert_eq!(calls.of(path), 2, "{path}");
    }
}

/// With no revalidation window an entry is dropped at the end of its stale window, as a
/// cache may always drop a stale entry (RFC 9111 §4.3): the next request is a plain miss.
async fn rfc9111_4_3_without_a_revalidation_window_a_stale_entry_is_recomputed(h: Harness) {
    let layer = h.cache().await.revalidate(Duration::ZERO);
    let (addr, calls) = site(layer, |_, _| {
        (
            200,
            vec![
                ("etag", "\"v1\"".into()),
                ("cache-control", "max-age=10".into()),
            ],
        )
    })
    .await;
    assert_eq!(outcome(addr, "/z").await, "MISS");
    h.wait(Duration::from_secs(11)).await;
    let r = get(addr, "/z", &[]).await;
    assert_eq!(
        (r.text(), r.header("x-cache")),
        ("call 2".to_owned(), Some("MISS"))
    );
    assert_eq!(calls.conditions("/z"), ["", ""]);
}

/// RFC 9111 §4.3.3: a full response to the layer's conditional request replaces the entry as
/// a fill does; a 5xx is the client's answer, or the stale copy where the response's own
/// `stale-if-error` allows (RFC 5861 §4).
async fn rfc9111_4_3_3_a_full_response_replaces_the_entry(h: Harness) {
    let (addr, calls) = site(h.cache().await, |path, n| match (path, n) {
        ("/allowed", 1) => (
            200,
            vec![
                ("etag", "\"v1\"".into()),
                ("cache-control", "max-age=10, stale-if-error=60".into()),
            ],
        ),
        (_, 1) => (
            200,
            vec![
                ("etag", "\"v1\"".into()),
                ("cache-control", "max-age=10".into()),
            ],
        ),
        ("/error" | "/allowed", _) => (500, Vec::new()),
        _ => (
            200,
            vec![
                ("etag", "\"v2\"".into()),
                ("cache-control", "max-age=100".into()),
            ],
        ),
    })
    .await;
    for path in ["/new", "/error", "/allowed"] {
        assert_eq!(outcome(addr, path).await, "MISS", "{path}");
    }
    h.wait(Duration::from_secs(11)).await;
    let r = get(addr, "/new", &[]).await;
    assert_eq!((r.status, r.text()), (200, "call 2".to_owned()));
    assert_eq!(r.header("x-cache"), Some("MISS"));
    assert_eq!(calls.conditions("/new"), ["", "if-none-match: \"v1\""]);
    let r = get(addr, "/new", &[]).await;
    assert_eq!(
        (r.text(), r.header("etag")),
        ("call 2".to_owned(), Some("\"v2\""))
    );
    assert_eq!(r.header("x-cache"), Some("HIT"));
    let r = get(addr, "/error", &[]).await;
    assert_eq!((r.status, r.text()), (500, "call 2".to_owned()));
    assert_eq!(calls.conditions("/error"), ["", "if-none-match: \"v1\""]);
    let r = get(addr, "/allowed", &[]).await;
    assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
    assert_eq!(r.header("x-cache"), Some("STALE"));
    assert_eq!(calls.conditions("/allowed"), ["", "if-none-match: \"v1\""]);
}

/// RFC 5861 §3 and RFC 9111 §4.3.1: inside its `stale-while-revalidate` window a stale entry
/// is served at once, and the refresh in the background is a revalidation: the handler's
/// `304` freshens the entry.
async fn rfc9111_4_3_1_the_background_refresh_revalidates(h: Harness) {
    let (addr, calls) = site(h.cache().await, |_, n| {
        let mut headers = vec![("etag", "\"v1\"".to_owned())];
        if n == 1 {
            headers.extend(cc("max-age=10, stale-while-revalidate=60"));
            return (200, headers);
        }
        headers.extend(cc("max-age=100"));
        headers.push(("x-version", n.to_string()));
        (304, headers)
    })
    .await;
    assert_eq!(outcome(addr, "/swr").await, "MISS");
    h.wait(Duration::from_secs(11)).await;
    let r = get(addr, "/swr", &[]).await;
    assert_eq!(
        (r.text(), r.header("x-cache")),
        ("call 1".to_owned(), Some("STALE"))
    );
    // The refresh is a spawned task: wait (bounded) for it to land.
    let landed = async {
        loop {
            let r = get(addr, "/swr", &[]).await;
            if r.header("x-cache") == Some("HIT") {
                return r;
            }
            assert_eq!(r.text(), "call 1");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let r = tokio::time::timeout(Duration::from_secs(30), landed)
        .await
        .expect("the background revalidation never landed");
    assert_eq!(
        (r.text(), r.header("x-version")),
        ("call 1".to_owned(), Some("2"))
    );
    assert_eq!(calls.conditions("/swr"), ["", "if-none-match: \"v1\""]);
}

/// RFC 9111 §4.3.2 and §4.3.4: a client's own conditional request is never forwarded (the
/// handler sees the layer's condition, or none on a miss, so no `304` is stored as the
/// entry); on a revalidated entry the client gets `304` if its condition matches, else the
/// stored response, and the `304` to the layer's own request is never shown to a client that
/// did not ask conditionally.
async fn rfc9111_4_3_2_the_clients_condition_on_a_revalidated_entry(h: Harness) {
    let (addr, calls) = site(h.cache().await, |_, n| {
        let headers = vec![
            ("etag", "\"v1\"".into()),
            ("cache-control", "max-age=10".into()),
        ];
        (if n == 1 { 200 } else { 304 }, headers)
    })
    .await;
    let matching = [("if-none-match", "\"v1\"")];
    let r = get(addr, "/c", &matching).await;
    assert_eq!((r.status, r.text()), (200, "call 1".to_owned()), "a miss");
    h.wait(Duration::from_secs(11)).await;
    let r = get(addr, "/c", &matching).await;
    assert_eq!((r.status, r.text()), (304, String::new()));
    assert_eq!(r.header("x-cache"), Some("REVALIDATED"));
    assert_eq!(r.header("etag"), Some("\"v1\""));
    h.wait(Duration::from_secs(11)).await;
    let r = get(addr, "/c", &[]).await;
    assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
    assert_eq!(r.header("x-cache"), Some("REVALIDATED"));
    h.wait(Duration::from_secs(11)).await;
    let r = get(addr, "/c", &[("if-none-match", "\"v0\"")]).await;
    assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
    let r = get(addr, "/c", &matching).await;
    assert_eq!((r.status, r.header("x-cache")), (304, Some("HIT")));
    let layers = "if-none-match: \"v1\"";
    assert_eq!(calls.conditions("/c"), ["", layers, layers, layers]);
}

/// RFC 9111 §4.3.1 with the fill lock: one revalidation of a key across two replicas, however
/// many requests arrive while it runs; the others get the freshened entry.
async fn rfc9111_4_3_one_revalidation_across_replicas(h: Harness) {
    let calls = Calls::default();
    let script = |_: &str, n| {
        let headers = vec![
            ("etag", "\"v1\"".into()),
            ("cache-control", "max-age=10".into()),
        ];
        (if n == 1 { 200 } else { 304 }, headers)
    };
    // Two replicas of one site: their ports differ, not the key.
    let a = replica(h.cache().await.key_host(false), script, calls.clone()).await;
    let b = replica(h.cache().await.key_host(false), script, calls.clone()).await;
    assert_eq!(outcome(a, "/slow/r").await, "MISS");
    assert_eq!(outcome(b, "/slow/r").await, "HIT");
    h.wait(Duration::from_secs(11)).await;
    let requests = (0..8).map(|i| get(if i % 2 == 0 { a } else { b }, "/slow/r", &[]));
    let answers = futures_util::future::join_all(requests).await;
    let mut revalidated = 0;
    for r in &answers {
        assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
        let x_cache = r.header("x-cache").unwrap_or_default();
        assert!(matches!(x_cache, "HIT" | "REVALIDATED"), "{x_cache}");
        revalidated += usize::from(x_cache == "REVALIDATED");
    }
    assert_eq!(revalidated, 1);
    assert_eq!(calls.of("/slow/r"), 2);
}

/// RFC 5861 §4 with the fail-safe: after a failed fill, a copy served under the response's
/// own `stale-if-error` (the layer's `stale_if_error` off) answers every request at once,
/// also past the first second, while one request tries the origin again in the background:
/// nobody waits for a failing origin.
async fn rfc5861_4_after_a_failure_nobody_waits_for_the_origin(h: Harness) {
    let (addr, calls) = site(h.cache().await, |_, n| match n {
        1 => (200, cc("max-age=10, stale-if-error=60")),
        _ => (503, Vec::new()),
    })
    .await;
    assert_eq!(get(addr, "/held/f", &[]).await.status, 200);
    h.wait(Duration::from_secs(20)).await;
    let r = get(addr, "/held/f", &[]).await;
    assert_eq!((r.status, r.header("x-cache")), (200, Some("STALE")));
    assert_eq!(calls.of("/held/f"), 2);
    // The next try is due; it is held at the origin, and the copy answers meanwhile.
    h.wait(Duration::from_secs(2)).await;
    let r = tokio::time::timeout(Duration::from_secs(5), get(addr, "/held/f", &[]))
        .await
        .expect("answered at once, not after the origin");
    assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
    assert_eq!(r.header("x-cache"), Some("STALE"));
    calls.held.add_permits(10);
}

/// RFC 9111 §3: a response with any final status may be stored when it states an explicit
/// expiration (§4.2.1); without one only a heuristically cacheable status is, under the
/// heuristic. A status the cache does not know, marked `must-understand`, is not stored
/// (§5.2.2.3); nor is a `206` (the layer does not combine partial content).
async fn rfc9111_3_any_final_status_with_an_explicit_expiration_is_stored(h: Harness) {
    let layer = h.cache().await.ttl(Duration::from_secs(60));
    let (addr, calls) = site(layer, |path, _| {
        let status: u16 = path[1..4].parse().expect("a status");
        let headers = match &path[4..] {
            "/explicit" => cc("max-age=100"),
            "/expires" => vec![("date", http_date(0)), ("expires", http_date(100))],
            "/understood" => cc("max-age=100, must-understand"),
            _ => Vec::new(),
        };
        (status, headers)
    })
    .await;
    for status in [
        200, 203, 299, 302, 303, 307, 400, 403, 499, 500, 502, 503, 599,
    ] {
        for tail in ["/explicit", "/expires"] {
            let path = format!("/{status}{tail}");
            assert_eq!(outcome(addr, &path).await, "MISS", "{path}");
            let r = get(addr, &path, &[]).await;
            assert_eq!(
                (r.status, r.text()),
                (status, "call 1".to_owned()),
                "{path}"
            );
            assert_eq!(r.header("x-cache"), Some("HIT"), "{path}");
        }
    }
    // The heuristic covers only statuses that are heuristically cacheable and not errors.
    for (status, hit) in [
        (200, true),
        (301, true),
        (302, false),
        (404, false),
        (500, false),
    ] {
        let path = format!("/{status}/silent");
        get(addr, &path, &[]).await;
        let expected = if hit { "HIT" } else { "MISS" };
        assert_eq!(outcome(addr, &path).await, expected, "{path}");
    }
    for (status, hit) in [(200, true), (599, false), (206, false)] {
        let path = format!("/{status}/understood");
        get(addr, &path, &[]).await;
        let expected = if hit { "HIT" } else { "MISS" };
        assert_eq!(outcome(addr, &path).await, expected, "{path}");
    }
    assert_eq!(calls.of("/599/understood"), 2);
    // Stale after its lifetime, whatever the status.
    h.wait(Duration::from_secs(101)).await;
    assert_eq!(outcome(addr, "/503/explicit").await, "MISS");
}

/// RFC 9111 §4.2.1, §4.2.3 and §4.3.1: a response that is stale when it arrives (`max-age=0`,
/// or an `Age` past its lifetime) is never served without asking the handler; when it has
/// a validator it is kept, so that the next request asks the handler conditionally and a
/// `304` answers from it. Without a validator it is not kept: the next request is a plain
/// one.
async fn rfc9111_4_3_1_a_response_stale_on_arrival_is_kept_to_be_revalidated(h: Harness) {
    let (addr, calls) = site(h.cache().await, |path, n| {
        let mut headers = match path {
            "/aged" => vec![
                ("cache-control", "max-age=100".to_owned()),
                ("age", "150".to_owned()),
                ("last-modified", "Tue, 01 Jan 2019 00:00:00 GMT".to_owned()),
            ],
            "/plain" => cc("max-age=0"),
            _ => vec![
                ("cache-control", "max-age=0".to_owned()),
                ("etag", "\"v1\"".to_owned()),
            ],
        };
        headers.push(("x-call", n.to_string()));
        (if n > 1 && path != "/plain" { 304 } else { 200 }, headers)
    })
    .await;
    for path in ["/zero", "/aged", "/plain"] {
        let r = get(addr, path, &[]).await;
        assert_eq!((r.status, r.text()), (200, "call 1".to_owned()), "{path}");
        assert_eq!(r.header("x-cache"), Some("MISS"), "{path}");
    }
    for round in 2..=3 {
        for path in ["/zero", "/aged"] {
            let r = get(addr, path, &[]).await;
            assert_eq!((r.status, r.text()), (200, "call 1".to_owned()), "{path}");
            assert_eq!(r.header("x-cache"), Some("REVALIDATED"), "{path}");
            assert_eq!(
                r.header("x-call"),
                Some(round.to_string().as_str()),
                "{path}"
            );
        }
        let r = get(addr, "/plain", &[]).await;
        assert_eq!(r.text(), format!("call {round}"));
        assert_eq!(r.header("x-cache"), Some("MISS"));
    }
    assert_eq!(
        calls.conditions("/zero"),
        ["", "if-none-match: \"v1\"", "if-none-match: \"v1\""]
    );
    let since = "if-modified-since: Tue, 01 Jan 2019 00:00:00 GMT";
    assert_eq!(calls.conditions("/aged"), ["", since, since]);
    assert_eq!(calls.conditions("/plain"), ["", "", ""]);
    // A client that asks only for what is stored gets nothing stale on arrival.
    let r = get(addr, "/zero", &[("cache-control", "only-if-cached")]).await;
    assert_eq!(r.status, 504);
}

/// RFC 9111 §4.3.1 with the fill lock, for a response stale when it arrives (`max-age=0` and
/// an `ETag`): one revalidation across two replicas for the requests that arrive while it
/// runs; those waiting get its answer, which the handler gave after they arrived, instead of
/// each asking the handler in turn. On the stores that share real time (the memory store's
/// clock stands still in these tests, so no answer comes after an arrival).
async fn rfc9111_4_3_1_waiting_requests_share_a_revalidation_of_a_response_stale_on_arrival(
    h: Harness,
) {
    let calls = Calls::default();
    let script = |_: &str, n| {
        let headers = vec![
            ("etag", "\"v1\"".into()),
            ("cache-control", "max-age=0".into()),
        ];
        (if n == 1 { 200 } else { 304 }, headers)
    };
    let a = replica(h.cache().await.key_host(false), script, calls.clone()).await;
    let b = replica(h.cache().await.key_host(false), script, calls.clone()).await;
    assert_eq!(outcome(a, "/slow/s").await, "MISS");
    let requests = (0..8).map(|i| get(if i % 2 == 0 { a } else { b }, "/slow/s", &[]));
    let answers = futures_util::future::join_all(requests).await;
    let mut revalidated = 0;
    for r in &answers {
        assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
        let x_cache = r.header("x-cache").unwrap_or_default();
        assert!(matches!(x_cache, "STALE" | "REVALIDATED"), "{x_cache}");
        revalidated += usize::from(x_cache == "REVALIDATED");
    }
    assert_eq!(revalidated, 1);
    assert_eq!(calls.conditions("/slow/s"), ["", "if-none-match: \"v1\""]);
}

/// RFC 9111 §5.2.2.4: a `no-cache` response is never reused without the handler's `304`,
/// whatever its lifetime: with a validator it is kept and every use asks the handler
/// conditionally; without one it is not kept. It never stands in for a failing handler,
/// even under the layer's `stale_if_error`.
async fn rfc9111_5_2_2_4_a_no_cache_response_is_revalidated_on_every_use(h: Harness) {
    let layer = h.cache().await.stale_if_error(Duration::from_secs(600));
    let (addr, calls) = site(layer, |path, n| {
        let mut headers = cc("no-cache, max-age=100");
        if path != "/plain" {
            headers.push(("etag", "\"v1\"".into()));
        }
        match (path, n) {
            (_, 1) | ("/plain", _) => (200, headers),
            (_, 2) => (304, headers),
            _ => (503, Vec::new()),
        }
    })
    .await;
    for path in ["/nc", "/plain"] {
        assert_eq!(outcome(addr, path).await, "MISS", "{path}");
    }
    let r = get(addr, "/nc", &[]).await;
    assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
    assert_eq!(r.header("x-cache"), Some("REVALIDATED"));
    assert_eq!(calls.conditions("/nc"), ["", "if-none-match: \"v1\""]);
    // The handler fails: its answer, not the stored copy.
    let r = get(addr, "/nc", &[]).await;
    assert_eq!((r.status, r.header("x-cache")), (503, Some("MISS")));
    assert_eq!(outcome(addr, "/plain").await, "MISS");
    assert_eq!(calls.conditions("/plain"), ["", ""]);
}

/// RFC 9111 §5.2.2.3: `must-understand` leaves `no-store` to the caches that do not know the
/// response's status; the layer stores a `200` so marked, and not a `599`.
async fn rfc9111_5_2_2_3_must_understand_with_a_known_status_overrides_no_store(h: Harness) {
    let (addr, _) = site(h.cache().await, |path, _| {
        let status = if path == "/known" { 200 } else { 599 };
        (status, cc("max-age=100, no-store, must-understand"))
    })
    .await;
    assert_eq!(outcome(addr, "/known").await, "MISS");
    assert_eq!(outcome(addr, "/known").await, "HIT");
    assert_eq!(outcome(addr, "/unknown").await, "MISS");
    assert_eq!(outcome(addr, "/unknown").await, "MISS");
}

/// RFC 9111 §4.3.2: a client's `If-Modified-Since` is answered from a stored response without
/// `Last-Modified` by its `Date`: `304` when the date given is not older than it.
async fn rfc9111_4_3_2_if_modified_since_against_the_stored_date(h: Harness) {
    let date = http_date(-100);
    let stored = date.clone();
    let (addr, calls) = site(h.cache().await, move |_, _| {
        (
            200,
            vec![
                ("cache-control", "max-age=1000".into()),
                ("date", stored.clone()),
            ],
        )
    })
    .await;
    assert_eq!(outcome(addr, "/d").await, "MISS");
    let r = get(addr, "/d", &[("if-modified-since", &date)]).await;
    assert_eq!((r.status, r.header("x-cache")), (304, Some("HIT")));
    let later = http_date(0);
    let r = get(addr, "/d", &[("if-modified-since", &later)]).await;
    assert_eq!(r.status, 304);
    let earlier = http_date(-200);
    let r = get(addr, "/d", &[("if-modified-since", &earlier)]).await;
    assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
    assert_eq!(calls.of("/d"), 1);
}

/// RFC 9111 §4.3.3 and §4.3.1: when the handler answers the layer's conditional request with
/// a `200` and a new `ETag`, the entry is replaced, validator included: clients holding the
/// old `ETag` get the new response, those holding the new one a `304`, and the next
/// revalidation asks with the new one.
async fn rfc9111_4_3_3_a_new_etag_replaces_the_entry_and_its_validator(h: Harness) {
    let (addr, calls) = site(h.cache().await, |_, n| {
        let (status, etag) = match n {
            1 => (200, "\"v1\""),
            2 => (200, "\"v2\""),
            _ => (304, "\"v2\""),
        };
        (
            status,
            vec![
                ("etag", etag.into()),
                ("cache-control", "max-age=10".into()),
            ],
        )
    })
    .await;
    assert_eq!(outcome(addr, "/e").await, "MISS");
    h.wait(Duration::from_secs(11)).await;
    let r = get(addr, "/e", &[("if-none-match", "\"v1\"")]).await;
    assert_eq!((r.status, r.text()), (200, "call 2".to_owned()));
    assert_eq!(r.header("etag"), Some("\"v2\""));
    let r = get(addr, "/e", &[("if-none-match", "\"v1\"")]).await;
    assert_eq!((r.status, r.text()), (200, "call 2".to_owned()));
    assert_eq!(r.header("x-cache"), Some("HIT"));
    let r = get(addr, "/e", &[("if-none-match", "\"v2\"")]).await;
    assert_eq!((r.status, r.header("x-cache")), (304, Some("HIT")));
    h.wait(Duration::from_secs(11)).await;
    let r = get(addr, "/e", &[]).await;
    assert_eq!(
        (r.text(), r.header("x-cache")),
        ("call 2".to_owned(), Some("REVALIDATED"))
    );
    assert_eq!(
        calls.conditions("/e"),
        ["", "if-none-match: \"v1\"", "if-none-match: \"v2\""]
    );
}

/// RFC 9111 §3 with RFC 5861 §4: a 5xx that states an explicit expiration is stored like any
/// response, but never in place of a copy kept for `stale_if_error`: the copy goes on
/// answering for the failing handler.
async fn rfc5861_4_a_server_error_never_replaces_a_copy_kept_for_stale_if_error(h: Harness) {
    let layer = h.cache().await.stale_if_error(Duration::from_secs(60));
    let (addr, calls) = site(layer, |path, n| {
        if path == "/kept" && n == 1 {
            (200, cc("max-age=10"))
        } else {
            (503, cc("max-age=100"))
        }
    })
    .await;
    assert_eq!(outcome(addr, "/kept").await, "MISS");
    h.wait(Duration::from_secs(11)).await;
    for _ in 0..2 {
        let r = get(addr, "/kept", &[]).await;
        assert_eq!((r.status, r.text()), (200, "call 1".to_owned()));
        assert_eq!(r.header("x-cache"), Some("STALE"));
    }
    assert_eq!(calls.of("/kept"), 2);
    // With no copy to stand in, the 503 is the handler's answer, and stored as it says.
    let r = get(addr, "/none", &[]).await;
    assert_eq!((r.status, r.header("x-cache")), (503, Some("MISS")));
    let r = get(addr, "/none", &[]).await;
    assert_eq!((r.status, r.header("x-cache")), (503, Some("HIT")));
}

backend_suite!(
    rfc9111_4_2_1_s_maxage_then_the_first_max_age,
    rfc9111_5_3_expires_sets_freshness_and_invalid_means_expired,
    rfc9111_4_2_2_heuristic_freshness_only_when_configured,
    rfc9111_4_2_3_upstream_age_counts_against_freshness,
    rfc9111_5_1_the_age_of_a_hit_is_its_current_age,
    rfc9111_4_2_1_jitter_never_lengthens_freshness,
    rfc9111_5_2_2_stale_if_error_respects_revalidation_directives,
    rfc5861_4_the_responses_stale_if_error_is_honoured,
    rfc5861_3_stale_while_revalidate_as_the_response_allows,
    rfc9111_5_2_1_5_request_no_store_is_not_stored,
    rfc9111_5_2_1_7_only_if_cached_answers_504_when_nothing_is_stored,
    rfc9111_5_2_1_client_requests_to_bypass_are_ignored,
    rfc9111_4_3_1_a_stale_entry_is_revalidated_with_its_validator,
    rfc9111_4_3_3_a_full_response_replaces_the_entry,
    rfc9111_4_3_without_a_revalidation_window_a_stale_entry_is_recomputed,
    rfc9111_4_3_1_the_background_refresh_revalidates,
    rfc9111_4_3_2_the_clients_condition_on_a_revalidated_entry,
    rfc9111_4_3_one_revalidation_across_replicas,
    rfc5861_4_after_a_failure_nobody_waits_for_the_origin,
    rfc9111_3_any_final_status_with_an_explicit_expiration_is_stored,
    rfc9111_4_3_1_a_response_stale_on_arrival_is_kept_to_be_revalidated,
    rfc9111_5_2_2_4_a_no_cache_response_is_revalidated_on_every_use,
    rfc9111_5_2_2_3_must_understand_with_a_known_status_overrides_no_store,
    rfc9111_4_3_2_if_modified_since_against_the_stored_date,
    rfc9111_4_3_3_a_new_etag_replaces_the_entry_and_its_validator,
    rfc5861_4_a_server_error_never_replaces_a_copy_kept_for_stale_if_error,
);

backend_suite!(
    redis_only: rfc9111_4_3_1_waiting_requests_share_a_revalidation_of_a_response_stale_on_arrival
);
