//! End to end, the caching and retry routes over real HTTP: `GET`/`PUT /users/{id}` (the value
//! cache over a ~100 ms store), `POST /admin/origin` (failing origins), `ETag` and `304` on
//! `/slow/{n}`, and `POST /payments` with `Idempotency-Key`. One scenario, run on the memory
//! backend (one instance, playing both parts) and on a real `redis-server` shared by two
//! instances (what one fills, the other reads; what one claims, the other sees).

use std::time::{Duration, Instant};

use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::{RawResponse, request};
use redis_guard_testkit::{Browser, RedisCluster, RedisServer};
use serde_json::{Value, json};

const TOKEN: &str = "caches-test-admin-token-0123456789abcdef";

async fn start(extra: &[(&str, &str)]) -> RunningApp {
    let mut env = vec![
        // Generous: a loaded CI machine running debug builds; the timeout is not what is tested.
        ("REDIS_TIMEOUT_MS", "5000"),
        ("ADMIN_TOKEN", TOKEN),
        // Long enough that a second request sent at once always finds the first running.
        ("PAYMENTS_DELAY_MS", "1000"),
        // Room for the stale-if-error test's polling (instances on one Redis share the count).
        ("SLOW_LIMIT", "10000/minute"),
    ];
    env.extend_from_slice(extra);
    spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await
}

async fn send(
    app: &RunningApp,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) -> RawResponse {
    request(app.addr, method, path, headers, body)
        .await
        .expect("request")
}

/// A JSON request with `headers` besides the content type.
async fn json(
    app: &RunningApp,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
    body: &Value,
) -> RawResponse {
    let mut all: Vec<(&str, &[u8])> = vec![("content-type", b"application/json")];
    all.extend_from_slice(headers);
    send(app, method, path, &all, body.to_string().as_bytes()).await
}

fn body(r: &RawResponse) -> Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
}

/// `GET /users/{id}`: the status, the body, and how long it took.
async fn user(app: &RunningApp, id: &str) -> (RawResponse, Duration) {
    let started = Instant::now();
    let r = send(app, "GET", &format!("/users/{id}"), &[], b"").await;
    (r, started.elapsed())
}

/// Asserts user `id` is `name`, loaded from `from` (`db`: through this request's ~100 ms
/// lookup; `cache`: without it).
async fn assert_user(app: &RunningApp, id: u32, name: &str, from: &str) {
    let (r, took) = user(app, &id.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        body(&r),
        json!({ "id": id, "name": name, "loaded_from": from })
    );
    let status = r.header("cache-status").unwrap_or("");
    if from == "db" {
        assert!(took >= Duration::from_millis(100), "looked up: {took:?}");
        assert_eq!(status, "axum-app-users; fwd=miss");
    } else {
        assert_eq!(status, "axum-app-users; hit");
    }
}

/// `PUT /users/{id}` `{"name": name}` with `headers` (a session cookie, a bearer token).
async fn rename(app: &RunningApp, id: u32, name: &str, headers: &[(&str, &[u8])]) -> RawResponse {
    json(
        app,
        "PUT",
        &format!("/users/{id}"),
        headers,
        &json!({ "name": name }),
    )
    .await
}

/// Logs in as `user`: the session cookie to send back (`name=value`).
async fn log_in(app: &RunningApp, user: &str) -> String {
    let creds = json!({ "username": user, "password": "password" });
    let r = json(app, "POST", "/login", &[], &creds).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.headers_named("set-cookie")
        .into_iter()
        .find_map(|c| {
            let pair = c.split(';').next()?.trim();
            (pair.starts_with("id=") || pair.starts_with("__Host-id=")).then(|| pair.to_owned())
        })
        .expect("a session cookie")
}

/// The users: `a` reads through the store, `b` reads what `a` filled; a `PUT` on `a` voids it
/// for both; bad ids, bodies and names get problems, not panics.
async fn users(a: &RunningApp, b: &RunningApp) {
    assert_user(a, 3, "Alan Turing", "db").await;
    assert_user(a, 3, "Alan Turing", "cache").await;
    assert_user(b, 3, "Alan Turing", "cache").await;

    // Renaming takes the user themselves (user 3 logs in as `alan`) or the admin token.
    let (alan, ada) = (log_in(a, "alan").await, log_in(a, "ada").await);
    let as_alan: &[(&str, &[u8])] = &[("cookie", alan.as_bytes())];
    let bearer = format!("Bearer {TOKEN}");
    let as_admin: &[(&str, &[u8])] = &[("authorization", bearer.as_bytes())];
    for (headers, status, who) in [
        (&[][..], 401, "anonymous"),
        (&[("cookie", ada.as_bytes())][..], 403, "another user"),
        (
            &[
                ("cookie", alan.as_bytes()),
                (
                    "authorization",
                    b"Bearer not-the-admin-token-0123456789abcdef",
                ),
            ][..],
            401,
            "a wrong admin token",
        ),
        (
            &[
                ("cookie", alan.as_bytes()),
                ("origin", b"https://evil.example"),
            ][..],
            403,
            "cross-site",
        ),
    ] {
        let r = rename(a, 3, "Mallory", headers).await;
        assert_eq!(r.status, status, "{who}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
    // Refused before the store or the cache: the cached copy stands.
    assert_user(b, 3, "Alan Turing", "cache").await;

    let renamed = rename(a, 3, " A. M. Turing ", as_alan).await;
    assert_eq!(renamed.status, 200, "{}", renamed.text());
    assert_eq!(body(&renamed), json!({ "id": 3, "name": "A. M. Turing" }));
    assert_user(a, 3, "A. M. Turing", "db").await;
    assert_user(b, 3, "A. M. Turing", "cache").await;

    // "No such user" is cached (briefly) like a user: one lookup of the store for both
    // instances.
    let (r, took) = user(a, "999").await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.header("cache-status"), Some("axum-app-users; fwd=miss"));
    assert!(took >= Duration::from_millis(100), "looked up: {took:?}");
    for app in [a, b] {
        let (r, _) = user(app, "999").await;
        assert_eq!(r.status, 404, "{}", r.text());
        assert_eq!(r.header("cache-status"), Some("axum-app-users; hit"));
    }
    for (id, status) in [("999", 404), ("abc", 400), ("-1", 400), ("4294967296", 400)] {
        let (r, _) = user(a, id).await;
        assert_eq!(r.status, status, "/users/{id}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
    let long = format!(r#"{{"name":"{}"}}"#, "x".repeat(65));
    for (id, raw, status, what) in [
        ("3", r#"{"name":"#, 400, "truncated JSON"),
        ("3", r#"{"nom":"x"}"#, 400, "another field"),
        ("3", r#"{"name":42}"#, 400, "not a string"),
        ("3", r#"{"name":"   "}"#, 422, "blank"),
        ("3", long.as_str(), 422, "too long"),
        ("999", r#"{"name":"Nobody"}"#, 404, "no such user"),
        ("x", r#"{"name":"Nobody"}"#, 400, "bad id"),
    ] {
        let headers: &[(&str, &[u8])] = &[
            ("content-type", b"application/json"),
            ("authorization", bearer.as_bytes()),
        ];
        let r = send(a, "PUT", &format!("/users/{id}"), headers, raw.as_bytes()).await;
        assert_eq!(r.status, status, "{what}: {}", r.text());
    }
    let plain = send(a, "PUT", "/users/3", as_alan, br#"{"name":"x"}"#).await;
    assert_eq!(plain.status, 415, "a state-changing route wants JSON");
    assert_user(b, 3, "A. M. Turing", "cache").await;
    // The admin renames anyone.
    let r = rename(a, 2, "G. M. Hopper", as_admin).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_user(a, 2, "G. M. Hopper", "db").await;
}

/// `GET /slow/12` for the host `caches.example` (the host is in the response cache's key: two
/// instances behind one name share entries), with `if_none_match`.
async fn slow_12(app: &RunningApp, if_none_match: Option<&str>) -> RawResponse {
    let mut raw =
        String::from("GET /slow/12 HTTP/1.1\r\nHost: caches.example\r\nConnection: close\r\n");
    if let Some(etag) = if_none_match {
        raw.push_str(&format!("If-None-Match: {etag}\r\n"));
    }
    raw.push_str("\r\n");
    redis_guard_testkit::http::send(app.addr, raw.as_bytes())
        .await
        .expect("request")
}

/// `/slow/{n}` carries an `ETag`; `If-None-Match` with it is a `304` from the cache (on `b`,
/// which never computed it), a stale tag the full response.
async fn etags(a: &RunningApp, b: &RunningApp) {
    let first = slow_12(a, None).await;
    assert_eq!((first.status, first.header("x-cache")), (200, Some("MISS")));
    let etag = first.header("etag").expect("an ETag").to_owned();
    assert!(
        etag.starts_with('"') && etag.ends_with('"'),
        "strong: {etag}"
    );
    let not_modified = slow_12(b, Some(&etag)).await;
    assert_eq!(not_modified.status, 304, "{:?}", not_modified.headers);
    assert!(not_modified.body.is_empty());
    assert_eq!(not_modified.header("etag"), Some(etag.as_str()));
    let status = not_modified.header("cache-status").unwrap_or("");
    assert!(status.starts_with("redis-guard; hit"), "{status}");
    let other = slow_12(b, Some("\"not-it\"")).await;
    assert_eq!((other.status, other.body), (200, first.body));
}

/// `POST /admin/origin` (admin token) fails `a`'s origins with `503`: what is not cached fails,
/// a fresh cached copy is still served; `b`'s origin is its own.
async fn failing_origin(a: &RunningApp, b: &RunningApp) {
    let bearer = format!("Bearer {TOKEN}");
    let admin: &[(&str, &[u8])] = &[("authorization", bearer.as_bytes())];
    let refused = json(a, "POST", "/admin/origin", &[], &json!({ "fail": true })).await;
    assert_eq!(refused.status, 401);
    let bad = json(a, "POST", "/admin/origin", admin, &json!({ "fail": "yes" })).await;
    assert_eq!(bad.status, 400);
    switch_origin(a, true).await;

    let (down, _) = user(a, "4").await;
    assert_eq!(down.status, 503, "{}", down.text());
    assert_eq!(down.header("retry-after"), Some("5"));
    let slow = send(a, "GET", "/slow/13", &[], b"").await;
    assert_eq!(slow.status, 503, "{}", slow.text());
    let put = rename(a, 5, "E. W. Dijkstra", admin).await;
    assert_eq!(put.status, 503, "the store is down for writes too");
    assert_user(a, 3, "A. M. Turing", "cache").await;
    let hit = slow_12(a, None).await;
    assert_eq!((hit.status, hit.header("x-cache")), (200, Some("HIT")));
    if a.addr != b.addr {
        assert_user(b, 4, "Katherine Johnson", "db").await;
        assert_user(a, 4, "Katherine Johnson", "cache").await;
    }

    switch_origin(a, false).await;
    assert_eq!(send(a, "GET", "/slow/13", &[], b"").await.status, 200);
    assert_user(a, 5, "Edsger Dijkstra", "db").await;
}

/// `POST /payments`: one runs, its twin sent at once (to the other instance) is a `409`, a
/// retry after it the same response replayed, another body with the key `422`, no key `400`.
async fn payments(a: &RunningApp, b: &RunningApp, key: &str) {
    let header: &[(&str, &[u8])] = &[("idempotency-key", key.as_bytes())];
    let pay = json!({ "amount": 500 });
    let (first, twin) = tokio::join!(
        json(a, "POST", "/payments", header, &pay),
        json(b, "POST", "/payments", header, &pay),
    );
    let mut statuses = [first.status, twin.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409], "{} / {}", first.text(), twin.text());
    let paid = if first.status == 201 { first } else { twin };
    let id = body(&paid)["payment_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    assert!(id.starts_with("pay_"), "{id}");
    assert_eq!(body(&paid)["amount"], 500);
    assert_eq!(paid.header("idempotent-replayed"), None);

    for app in [a, b] {
        let again = json(app, "POST", "/payments", header, &pay).await;
        assert_eq!(again.status, 201);
        assert_eq!(again.body, paid.body, "the same payment, replayed");
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
    }
    let quoted = format!("\"{key}\"");
    let again = json(
        b,
        "POST",
        "/payments",
        &[("idempotency-key", quoted.as_bytes())],
        &pay,
    )
    .await;
    assert_eq!(
        (again.status, again.body),
        (201, paid.body.clone()),
        "the draft's quoted form"
    );

    let other = json(b, "POST", "/payments", header, &json!({ "amount": 501 })).await;
    assert_eq!(other.status, 422, "{}", other.text());
    let none = json(a, "POST", "/payments", &[], &pay).await;
    assert_eq!(none.status, 400, "{}", none.text());
}

/// The scenario on `a` and `b`.
async fn scenario(a: &RunningApp, b: &RunningApp) {
    users(a, b).await;
    etags(a, b).await;
    failing_origin(a, b).await;
    payments(a, b, "key-1").await;
}

/// `POST /admin/origin` `{"fail": fail}` with the admin token.
async fn switch_origin(app: &RunningApp, fail: bool) {
    let bearer = format!("Bearer {TOKEN}");
    let admin: &[(&str, &[u8])] = &[("authorization", bearer.as_bytes())];
    let r = json(
        app,
        "POST",
        "/admin/origin",
        admin,
        &json!({ "fail": fail }),
    )
    .await;
    assert_eq!((r.status, body(&r)), (200, json!({ "fail": fail })));
}

/// `CACHE_TTL=1s`, `CACHE_STALE_IF_ERROR=2s`: what the stale-if-error test starts with.
const SHORT: [(&str, &str); 2] = [("CACHE_TTL", "1s"), ("CACHE_STALE_IF_ERROR", "2s")];

/// With `PAYMENTS_LIMIT=2/minute`, `PAYMENTS_LIMIT` counts every `POST /payments` of a client, refused ones included: new
/// keys (records kept 24 h) cannot be minted without bound.
async fn payments_limited(app: &RunningApp) {
    let mut statuses = Vec::new();
    for key in ["l-1", "l-2", "l-3"] {
        let header: &[(&str, &[u8])] = &[("idempotency-key", key.as_bytes())];
        let r = json(app, "POST", "/payments", header, &json!({ "amount": 0 })).await;
        statuses.push(r.status);
    }
    assert_eq!(statuses, [400, 400, 429]);
}

/// With [`SHORT`] lifetimes and the origin failing: past `CACHE_TTL` both caches answer with
/// their copy (stale) for `CACHE_STALE_IF_ERROR`, then the `503`. Real time (the app has no
/// clock seam), polled with bounded waits.
async fn stale_if_error(app: &RunningApp) {
    assert_user(app, 1, "Ada Lovelace", "db").await;
    // Filled after the user, so it expires after it (1 s + at most 10% jitter each).
    let slow = || send(app, "GET", "/slow/21", &[], b"");
    let first = slow().await;
    assert_eq!((first.status, first.header("x-cache")), (200, Some("MISS")));
    switch_origin(app, true).await;

    let until = |done: fn(&RawResponse) -> bool| async move {
        let started = Instant::now();
        loop {
            let r = slow().await;
            if done(&r) {
                return r;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "{r:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let stale = until(|r| r.header("x-cache") != Some("HIT")).await;
    assert_eq!(
        (stale.status, stale.header("x-cache")),
        (200, Some("STALE")),
        "{}",
        stale.text()
    );
    assert_eq!(stale.body, first.body);
    let status = stale.header("cache-status").unwrap_or("");
    assert!(status.starts_with("redis-guard; fwd=stale"), "{status}");
    // The user, past its TTL too, is looked up (and fails), then served from the cache.
    let (r, took) = user(app, "1").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(body(&r)["loaded_from"], "cache");
    assert_eq!(r.header("cache-status"), Some("axum-app-users; fwd=stale"));
    assert!(
        took >= Duration::from_millis(100),
        "the store was asked first: {took:?}"
    );

    let down = until(|r| r.status != 200).await;
    assert_eq!(down.status, 503, "{}", down.text());
    let (r, _) = user(app, "1").await;
    assert_eq!(r.status, 503, "past the grace: {}", r.text());
    switch_origin(app, false).await;
    assert_user(app, 1, "Ada Lovelace", "db").await;
}

/// The scenario on two instances started with `env` (one store), and beside it stale-if-error
/// on a third.
async fn two_instances(env: &[(&str, &str)]) {
    let mut short = env.to_vec();
    short.extend(SHORT);
    let (a, b, c) = tokio::join!(start(env), start(env), start(&short));
    tokio::join!(scenario(&a, &b), stale_if_error(&c));
}

#[tokio::test]
async fn the_cache_and_retry_routes_in_memory() {
    // One process for the short lifetimes and the low payments limit (its limiter is its own).
    let mut short = SHORT.to_vec();
    short.push(("PAYMENTS_LIMIT", "2/minute"));
    let (app, short) = tokio::join!(start(&[]), start(&short));
    tokio::join!(
        scenario(&app, &app),
        stale_if_error(&short),
        payments_limited(&short)
    );
}

/// `USERS_LIMIT` counts every `GET /users/{id}` of a client IP: found, unknown, malformed,
/// cached or not.
#[tokio::test]
async fn user_lookups_are_limited_per_client_ip() {
    let app = start(&[("USERS_LIMIT", "4/minute")]).await;
    let mut statuses = Vec::new();
    for id in ["1", "1", "998", "x", "2"] {
        statuses.push(user(&app, id).await.0.status);
    }
    assert_eq!(statuses, [200, 200, 404, 400, 429]);
    let (r, _) = user(&app, "1").await;
    assert_eq!(r.status, 429, "{}", r.text());
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry), "{retry}");
}

/// Asserts the routes wrote some keys, every one with a TTL.
fn assert_every_key_has_a_ttl(keys: &[String], mut pttl: impl FnMut(&str) -> i64) {
    assert!(keys.len() > 3, "{keys:?}");
    for key in keys {
        let ttl = pttl(key);
        assert!(ttl > 0, "{key} has no TTL: {ttl}");
    }
}

#[tokio::test]
async fn the_cache_and_retry_routes_on_redis_shared_by_two_instances() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let redis = [("REDIS_URL", url.as_str())];
    two_instances(&redis).await;

    let mut conn = server.client().get_connection().expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
    assert_every_key_has_a_ttl(&keys, |key| {
        redis::cmd("PTTL").arg(key).query(&mut conn).expect("PTTL")
    });
}

#[tokio::test]
async fn the_cache_and_retry_routes_on_a_redis_cluster_shared_by_two_instances() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("task")
        .unwrap_or_else(|e| panic!("{e}"));
    let nodes = cluster.nodes().join(",");
    let env = [("REDIS_CLUSTER_NODES", nodes.as_str())];
    two_instances(&env).await;
    assert_every_key_has_a_ttl(&cluster.keys(), |key| cluster.pttl(key));
}

/// The demo page's card, in Chromium: a user looked up twice (`db`, then `cache`, with
/// `Cache-Status`) and a payment retried twice with one key (`409` while it runs, then the
/// first answer replayed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_page_shows_the_cache_and_the_retries() {
    let wait = Duration::from_secs(15);
    let (app, browser) = tokio::join!(start(&[]), Browser::start());
    let browser = browser.unwrap_or_else(|e| panic!("{e}"));
    browser
        .goto(&format!("http://{}/", app.addr))
        .await
        .expect("open the page");
    browser.type_text("#user-id", "2").await.expect("type");
    browser.click("#user-button").await.expect("look up");
    let first = browser
        .wait_for("#user-result", |t| t.starts_with("GET: 200"), wait)
        .await
        .expect("an answer");
    assert!(first.contains(r#""loaded_from":"db""#), "{first}");
    assert!(
        first.contains("cache-status: axum-app-users; fwd=miss"),
        "{first}"
    );
    browser.click("#user-button").await.expect("look up again");
    let second = browser
        .wait_for(
            "#user-result",
            |t| t.contains("cache-status: axum-app-users; hit"),
            wait,
        )
        .await
        .expect("a cached answer");
    assert!(second.contains(r#""loaded_from":"cache""#), "{second}");
    // Not logged in: the page shows the refusal.
    browser
        .type_text("#user-name", "Nobody")
        .await
        .expect("type");
    browser.click("#rename-button").await.expect("rename");
    browser
        .wait_for("#user-result", |t| t.starts_with("PUT: 401"), wait)
        .await
        .expect("a 401");

    browser.click("#pay-button").await.expect("pay");
    let paid = browser
        .wait_for("#pay-result", |t| t.contains("retry after it:"), wait)
        .await
        .expect("three answers");
    let section = |label: &str| {
        paid.split("\n\n")
            .find(|s| s.starts_with(label))
            .unwrap_or_else(|| panic!("{label} in {paid}"))
            .to_owned()
    };
    let (original, during, after) = (
        section("first: 201"),
        section("retry while it runs: 409"),
        section("retry after it: 201"),
    );
    assert!(during.contains("retry-after: 1"), "{during}");
    assert!(after.contains("idempotent-replayed: true"), "{after}");
    let body = |s: &str| s.lines().last().unwrap_or("").to_owned();
    assert!(
        body(&original).contains(r#""payment_id":"pay_"#),
        "{original}"
    );
    assert_eq!(body(&original), body(&after), "the same payment");
    // For a person to look at: `tmp/caches-card.png` in the target directory.
    browser
        .execute("document.getElementById('caches-card').scrollIntoView(); return true")
        .await
        .expect("scroll");
    let png = browser.screenshot_png().await.expect("screenshot");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("caches-card.png");
    std::fs::write(&path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
