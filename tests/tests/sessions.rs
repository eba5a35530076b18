//! The session suite: every scenario runs on the memory store, on Redis through a
//! `ConnectionManager` and a `bb8` pool, and on a 3-master Redis Cluster.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use redis_guard::session::{
    RedisSessionStore, Rejection, SessionId, SessionLayer, SessionLayerBuilder, SessionStore,
};
use redis_guard_tests::session_routes::{error, route, session_and_path, text};
use redis_guard_tests::{Harness, Monitor, Reply, backend_suite, call, stored};
use tokio::sync::{Barrier, Notify};
use tower::{Layer, Service};

type Body = Full<Bytes>;

/// The session cookie's name (the default).
const COOKIE: &str = "__Host-id";

/// Hooks that let a test hold a request inside its handler.
#[derive(Default)]
struct Hooks {
    /// `/race/{field}` waits here after loading, so two writers overlap for sure.
    barrier: Option<Barrier>,
    /// `/slow/{field}` announces it has loaded, then waits to be released before writing.
    loaded: Notify,
    release: Notify,
    /// `/gate/{field}` waits at the first barrier after loading, at the second before writing,
    /// so a test acts between every load and every write.
    gate: Option<(Barrier, Barrier)>,
}

/// The app under the session layer: a small router over the handle's API.
fn app(
    hooks: Arc<Hooks>,
) -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |req: Request<Body>| {
        let hooks = Arc::clone(&hooks);
        async move {
            let (session, path) = session_and_path(&req);
            let parts: Vec<&str> = path.iter().map(String::as_str).collect();
            let res = match parts.as_slice() {
                ["noop"] => Ok(text(StatusCode::OK, "noop")),
                ["public", key, value] => session.insert(key, &value.to_string()).await.map(|()| {
                    let mut res = text(StatusCode::OK, "cacheable?");
                    res.headers_mut().insert(
                        "cache-control",
                        http::HeaderValue::from_static("public, max-age=60, s-maxage=600"),
                    );
                    res
                }),
                ["race", field] => {
                    async {
                        let _: Option<String> = session.get("x").await?;
                        if let Some(b) = &hooks.barrier {
                            tokio::time::timeout(Duration::from_secs(5), b.wait())
                                .await
                                .expect("the other writer never came");
                        }
                        session.insert(field, &"v".to_owned()).await?;
                        Ok(text(StatusCode::OK, "raced"))
                    }
                    .await
                }
                ["gate", field] => {
                    async {
                        let _: Option<String> = session.get("x").await?;
                        if let Some((loaded, release)) = &hooks.gate {
                            loaded.wait().await;
                            release.wait().await;
                        }
                        session.insert(field, &"v".to_owned()).await?;
                        Ok(text(StatusCode::OK, "gated"))
                    }
                    .await
                }
                ["slow", field] => {
                    async {
                        let _: Option<String> = session.get("x").await?;
                        hooks.loaded.notify_one();
                        hooks.release.notified().await;
                        session.insert(field, &"late".to_owned()).await?;
                        Ok(text(StatusCode::OK, "slow"))
                    }
                    .await
                }
                _ => route(&session, &parts)
                    .await
                    .unwrap_or_else(|| Ok(text(StatusCode::NOT_FOUND, "no route"))),
            };
            Ok::<_, Infallible>(res.unwrap_or_else(|e| error(&e)))
        }
    })
}

struct Client {
    layer: SessionLayer,
    hooks: Arc<Hooks>,
}

impl Client {
    async fn new(h: &Harness) -> Self {
        Self::with_hooks(h, Hooks::default()).await
    }

    async fn with_hooks(h: &Harness, hooks: Hooks) -> Self {
        Self::with_store(h.session_store().await, hooks, |b| b)
    }

    /// A client of a layer on `store`, built with the suite's lifetimes and then `configure`.
    fn with_store(
        store: Arc<dyn SessionStore>,
        hooks: Hooks,
        configure: impl FnOnce(SessionLayerBuilder) -> SessionLayerBuilder,
    ) -> Self {
        let builder = SessionLayer::builder(store)
            .idle_timeout(Duration::from_secs(30 * 60))
            .max_lifetime(Duration::from_secs(24 * 3600));
        let layer = configure(builder).build().expect("valid");
        Self {
            layer,
            hooks: Arc::new(hooks),
        }
    }

    async fn send(&self, method: &str, path: &str, cookie: Option<&str>) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(c) = cookie {
            req = req.header("cookie", format!("{COOKIE}={c}"));
        }
        let svc = self.layer.layer(app(Arc::clone(&self.hooks)));
        call(svc, req.body(Body::default()).expect("request")).await
    }
}

/// The session id a response sets, if it sets one.
fn set_id(r: &Reply) -> Option<String> {
    let v = r.header("set-cookie");
    let value = v
        .strip_prefix(COOKIE)?
        .strip_prefix('=')?
        .split(';')
        .next()?;
    (!value.is_empty()).then(|| value.to_owned())
}

fn storage_key(id: &str) -> String {
    SessionId::parse(id).expect("well-formed").storage_key()
}

async fn new_session(c: &Client) -> String {
    let r = c.send("POST", "/set/name/alice", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    set_id(&r).expect("a new session sets its cookie")
}

async fn concurrent_writes_to_different_fields_both_survive(h: Harness) {
    let c = Client::with_hooks(
        &h,
        Hooks {
            barrier: Some(Barrier::new(2)),
            ..Hooks::default()
        },
    )
    .await;
    let store = h.session_store().await;
    let mut lost = 0;
    for _ in 0..100 {
        let id = new_session(&c).await;
        let (a, b) = tokio::join!(
            c.send("POST", "/race/a", Some(&id)),
            c.send("POST", "/race/b", Some(&id))
        );
        assert_eq!((a.status, b.status), (200, 200), "{} {}", a.body, b.body);
        // Read back from the store itself.
        let record = stored(&*store, &storage_key(&id))
            .await
            .expect("load")
            .expect("session");
        lost += usize::from(record.get("a").is_none()) + usize::from(record.get("b").is_none());
    }
    println!(
        "redis-guard sessions ({:?}): lost {lost} of 200 writes in 100 rounds",
        h.kind()
    );
    assert_eq!(lost, 0);
}

async fn a_write_after_destroy_or_revoke_does_not_resurrect(h: Harness) {
    for end in ["/logout", "/revoke/alice"] {
        let c = Client::new(&h).await;
        let first = c.send("POST", "/login/alice", None).await;
        let id = set_id(&first).expect("cookie");
        let slow = {
            let id = id.clone();
            let hooks = Arc::clone(&c.hooks);
            let svc_layer = c.layer.clone();
            tokio::spawn(async move {
                let svc = svc_layer.layer(app(hooks));
                let req = Request::post("/slow/late")
                    .header("cookie", format!("{COOKIE}={id}"))
                    .body(Body::default())
                    .expect("request");
                call(svc, req).await
            })
        };
        c.hooks.loaded.notified().await;
        let ended = c.send("POST", end, Some(&id)).await;
        assert!(ended.status < 300, "{end}: {}", ended.status);
        c.hooks.release.notify_one();
        let slow = slow.await.expect("task");
        assert_eq!(slow.status, 200);
        assert_eq!(set_id(&slow), None, "{end}: no usable cookie re-issued");
        assert_eq!(
            c.send("GET", "/whoami", Some(&id)).await.status,
            401,
            "{end}"
        );
        if h.is_redis() {
            let keys = h.keys().await;
            assert!(
                !keys.iter().any(|k| k.contains(&storage_key(&id))),
                "{end}: the session came back: {keys:?}"
            );
        }
    }
}

async fn an_unknown_id_is_never_adopted(h: Harness) {
    let c = Client::new(&h).await;
    let planted = SessionId::generate().expect("random").encode();
    let r = c.send("POST", "/set/k/v", Some(&planted)).await;
    assert_eq!(r.status, 200);
    let issued = set_id(&r).expect("a fresh id");
    assert_ne!(issued, planted);
    assert_eq!(c.send("GET", "/get/k", Some(&issued)).await.body, "v");
    assert_eq!(c.send("GET", "/get/k", Some(&planted)).await.status, 404);
    if h.is_redis() {
        let keys = h.keys().await;
        assert!(
            !keys.iter().any(|k| k.contains(&storage_key(&planted))),
            "{keys:?}"
        );
    }
}

async fn login_rotates_the_id_and_keeps_the_data(h: Harness) {
    let c = Client::new(&h).await;
    let before = new_session(&c).await;
    let r = c.send("POST", "/login/alice", Some(&before)).await;
    let after = set_id(&r).expect("rotated");
    assert_ne!(after, before);
    assert_eq!(
        c.send("GET", "/get/name", Some(&after)).await.body,
        "alice",
        "data kept"
    );
    assert_eq!(c.send("GET", "/whoami", Some(&after)).await.body, "alice");
    assert_eq!(
        c.send("GET", "/get/name", Some(&before)).await.status,
        404,
        "old id dead"
    );
    assert_eq!(c.send("GET", "/whoami", Some(&before)).await.status, 401);
}

async fn idle_timeout_slides_and_absolute_lifetime_ends(h: Harness) {
    let c = Client::new(&h).await;
    let id = new_session(&c).await;
    // Used every 20 minutes, within the 30-minute idle timeout: alive...
    for step in 1..=71 {
        h.wait(Duration::from_secs(20 * 60)).await;
        let r = c.send("GET", "/get/name", Some(&id)).await;
        assert_eq!(r.status, 200, "step {step} ({} min)", step * 20);
    }
    // ...until 24 hours after creation (72 × 20 min), however it is used.
    h.wait(Duration::from_secs(20 * 60)).await;
    assert_eq!(c.send("GET", "/get/name", Some(&id)).await.status, 404);

    // Idle: 31 minutes unused ends it.
    let id = new_session(&c).await;
    h.wait(Duration::from_secs(29 * 60)).await;
    assert_eq!(c.send("GET", "/noop", Some(&id)).await.status, 200); // untouched: still refreshes
    h.wait(Duration::from_secs(29 * 60)).await;
    assert_eq!(c.send("GET", "/get/name", Some(&id)).await.status, 200);
    h.wait(Duration::from_secs(31 * 60)).await;
    assert_eq!(c.send("GET", "/get/name", Some(&id)).await.status, 404);
}

async fn the_raw_cookie_value_never_reaches_the_store(h: Harness) {
    let c = Client::new(&h).await;
    let mut ids = Vec::new();
    for user in ["alice", "bob"] {
        let id = new_session(&c).await;
        let r = c.send("POST", &format!("/login/{user}"), Some(&id)).await;
        ids.push(id);
        ids.push(set_id(&r).expect("rotated"));
    }
    let keys = h.keys().await;
    let mut conn = h.inspect().await;
    for key in &keys {
        let kind: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("TYPE");
        let dump: Vec<String> = match kind.as_str() {
            "hash" => redis::cmd("HGETALL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .expect("HGETALL"),
            "zset" => redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .expect("ZRANGE"),
            other => panic!("unexpected {other} at {key}"),
        };
        for id in &ids {
            assert!(!key.contains(id.as_str()), "{key}");
            assert!(
                !dump.iter().any(|v| v.contains(id.as_str())),
                "{key}: {dump:?}"
            );
        }
        assert!(!key.contains("alice") && !key.contains("bob"), "{key}");
    }
}

async fn cookie_attributes_on_the_wire(h: Harness) {
    let c = Client::new(&h).await;
    let r = c.send("POST", "/set/k/v", None).await;
    let set = r.header("set-cookie").to_owned();
    let id = set_id(&r).expect("cookie");
    assert_eq!(
        set,
        format!("{COOKIE}={id}; Path=/; HttpOnly; Secure; SameSite=Lax")
    );
    assert!(!set.contains("Domain"));
    assert_eq!(r.header("vary"), "Cookie");
    assert_eq!(
        r.header("cache-control"),
        "private, no-cache=\"Set-Cookie\""
    );
    let out = c.send("POST", "/logout", Some(&id)).await;
    assert_eq!(
        out.header("set-cookie"),
        format!(
            "{COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
        )
    );
    // A response that sets nothing says nothing about cookies.
    let plain = c.send("GET", "/noop", None).await;
    assert!(plain.headers.get("set-cookie").is_none());
}

async fn round_trips_per_request(h: Harness) {
    let c = Client::new(&h).await;
    let id = new_session(&c).await;
    // Warm up: every script loaded, the connection established.
    c.send("GET", "/get/name", Some(&id)).await;
    c.send("POST", "/set/x/1", Some(&id)).await;
    c.send("GET", "/noop", Some(&id)).await;
    let mut monitor = Monitor::start(&h).await;
    // A load whose refresh is not due is a plain read (HGETALL, with TIME in the same round
    // trip at most once a second); a save is one script call, which reads the session's
    // metadata in one HMGET and writes the changed field in one HSET (within the last-seen
    // interval: no new last use, no TTL).
    for (method, path, cookie, expected, in_scripts) in [
        ("GET", "/noop", None, &[][..], &[][..]),
        ("GET", "/get/name", Some(&id), &["read"], &[]),
        (
            "POST",
            "/set/x/2",
            Some(&id),
            &["read", "evalsha"],
            &["time", "hmget", "hset"],
        ),
        ("GET", "/noop", Some(&id), &["read"], &[]),
    ] {
        monitor.commands(&h).await;
        let r = c.send(method, path, cookie.map(String::as_str)).await;
        assert!(r.status < 400, "{path}: {}", r.status);
        let (sent, inside) = monitor.split(&h).await;
        let kinds: Vec<&str> = sent
            .iter()
            .map(|c| match c.to_ascii_lowercase() {
                c if c.starts_with("\"hgetall\"") => "read",
                c if c.starts_with("\"evalsha\"") => "evalsha",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            expected,
            "{method} {path} with cookie {}: {sent:?}",
            cookie.is_some()
        );
        let names: Vec<String> = inside
            .iter()
            .map(|c| {
                let name = c.split(' ').next().unwrap_or_default();
                name.trim_matches('"').to_ascii_lowercase()
            })
            .collect();
        assert_eq!(names, in_scripts, "{method} {path}: {inside:?}");
    }
}

async fn malformed_cookies_are_ignored_without_writes(h: Harness) {
    let c = Client::new(&h).await;
    let unknown = SessionId::generate().expect("random").encode();
    let long = "A".repeat(4096);
    let cookies: Vec<String> = vec![
        String::new(),
        long,
        "not base64!".to_owned(),
        "%%%%".to_owned(),
        unknown.clone(),
        format!("{unknown}; {COOKIE}={unknown}"),
        format!("{}=", &unknown[..42]),
    ];
    let before = if h.is_redis() {
        h.keys().await
    } else {
        Vec::new()
    };
    for cookie in &cookies {
        for path in ["/noop", "/get/name", "/whoami"] {
            let r = c.send("GET", path, Some(cookie)).await;
            assert!(r.status < 500, "{cookie:?} {path}: {}", r.status);
            assert_eq!(set_id(&r), None, "no session for {cookie:?}");
        }
    }
    if h.is_redis() {
        assert_eq!(h.keys().await, before, "no Redis write");
    }
}

async fn bad_keys_and_values_are_errors_not_panics(h: Harness) {
    let c = Client::new(&h).await;
    let r = c.send("POST", "/set/$user/mallory", None).await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("reserved"), "{}", r.body);
    let id = new_session(&c).await;
    // "name" holds a string: incrementing it is an error the handler can match on.
    let r = c.send("POST", "/incr/name", Some(&id)).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("integer"), "{}", r.body);
    // A stored number read as a string: a Deserialize error.
    c.send("POST", "/incr/n", Some(&id)).await;
    let r = c.send("GET", "/get/n", Some(&id)).await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("requested type"), "{}", r.body);
}

async fn increments_are_atomic(h: Harness) {
    let c = Client::new(&h).await;
    let id = new_session(&c).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let layer = c.layer.clone();
        let hooks = Arc::clone(&c.hooks);
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            let svc = layer.layer(app(hooks));
            let req = Request::post("/incr/visits")
                .header("cookie", format!("{COOKIE}={id}"))
                .body(Body::default())
                .expect("request");
            call(svc, req).await.status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("task"), 200);
    }
    assert_eq!(c.send("POST", "/incr/visits", Some(&id)).await.body, "21");
}

async fn log_out_everywhere_and_list(h: Harness) {
    let c = Client::new(&h).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = c.send("POST", "/login/carol", None).await;
        ids.push(set_id(&r).expect("cookie"));
    }
    let other = set_id(&c.send("POST", "/login/dave", None).await).expect("cookie");
    let store = h.session_store().await;
    assert_eq!(store.user_sessions("carol").await.expect("list").len(), 3);
    let r = c.send("POST", "/revoke/carol", Some(&ids[0])).await;
    assert_eq!(r.body, "3");
    for id in &ids {
        assert_eq!(c.send("GET", "/whoami", Some(id)).await.status, 401);
    }
    assert_eq!(c.send("GET", "/whoami", Some(&other)).await.body, "dave");
    assert!(store.user_sessions("carol").await.expect("list").is_empty());
}

async fn listed(store: &Arc<dyn SessionStore>, user: &str) -> Vec<String> {
    store
        .user_sessions(user)
        .await
        .expect("list")
        .into_iter()
        .map(|i| i.storage_key)
        .collect()
}

/// `cycle_id` on a logged-in session must move its index entry along, or
/// "log out everywhere" misses the rotated session.
async fn a_rotated_session_is_still_revoked(h: Harness) {
    let c = Client::new(&h).await;
    let store = h.session_store().await;
    let first = set_id(&c.send("POST", "/login/erin", None).await).expect("cookie");
    // Rotation alone, in a later request.
    let r = c.send("POST", "/cycle", Some(&first)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rotated = set_id(&r).expect("rotated");
    assert_ne!(rotated, first);
    assert_eq!(c.send("GET", "/whoami", Some(&rotated)).await.body, "erin");
    assert_eq!(
        listed(&store, "erin").await,
        vec![storage_key(&rotated)],
        "the index names the rotated session, not the dead one"
    );
    c.send("POST", "/revoke/erin", None).await;
    assert_eq!(
        c.send("GET", "/whoami", Some(&rotated)).await.status,
        401,
        "log out everywhere reaches the rotated session"
    );
    assert!(listed(&store, "erin").await.is_empty());
}

/// Destroyed and rotated sessions must not count towards the per-user cap.
async fn the_per_user_cap_counts_only_live_sessions(h: Harness) {
    let c = Client::with_store(h.session_store().await, Hooks::default(), |b| {
        b.max_sessions_per_user(2)
    });
    let store = h.session_store().await;
    let live = set_id(&c.send("POST", "/login/frank", None).await).expect("cookie");
    for _ in 0..3 {
        h.wait(Duration::from_secs(1)).await;
        let id = set_id(&c.send("POST", "/login/frank", None).await).expect("cookie");
        let rotated = set_id(&c.send("POST", "/cycle", Some(&id)).await).expect("rotated");
        assert_eq!(c.send("POST", "/logout", Some(&rotated)).await.status, 204);
    }
    assert_eq!(listed(&store, "frank").await, vec![storage_key(&live)]);
    h.wait(Duration::from_secs(1)).await;
    let newer = set_id(&c.send("POST", "/login/frank", None).await).expect("cookie");
    assert_eq!(
        c.send("GET", "/whoami", Some(&live)).await.body,
        "frank",
        "the only live session survives a new login under a cap of 2"
    );
    assert_eq!(c.send("GET", "/whoami", Some(&newer)).await.body, "frank");
    assert_eq!(listed(&store, "frank").await.len(), 2);
}

/// A session indexed while a revocation runs is either revoked by it or stays
/// in the index, so a later revocation reaches it. Driven through the store's test seam, which
/// runs a login between the revocation's steps.
async fn a_login_during_revocation_stays_revocable(h: Harness) {
    let plain = Client::new(&h).await;
    let old = set_id(&plain.send("POST", "/login/gina", None).await).expect("cookie");
    let during: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let hook = {
        let layer = plain.layer.clone();
        let during = Arc::clone(&during);
        move || {
            let layer = layer.clone();
            let during = Arc::clone(&during);
            async move {
                if during.lock().expect("lock").is_some() {
                    return;
                }
                let svc = layer.layer(app(Arc::default()));
                let req = Request::post("/login/gina")
                    .body(Body::default())
                    .expect("request");
                let id = set_id(&call(svc, req).await).expect("cookie");
                *during.lock().expect("lock") = Some(id);
            }
        }
    };
    let store = RedisSessionStore::new(h.backend().await).between_revoke_steps(hook);
    let revoker = Client::with_store(Arc::new(store), Hooks::default(), |b| b);
    revoker.send("POST", "/revoke/gina", None).await;
    let during = during.lock().expect("lock").clone().expect("the hook ran");
    assert_eq!(plain.send("GET", "/whoami", Some(&old)).await.status, 401);
    let listing = listed(&h.session_store().await, "gina").await;
    let alive = plain.send("GET", "/whoami", Some(&during)).await.status == 200;
    assert!(
        !alive || listing.contains(&storage_key(&during)),
        "a live session of gina fell out of her index: {listing:?}"
    );
    plain.send("POST", "/revoke/gina", None).await;
    assert_eq!(
        plain.send("GET", "/whoami", Some(&during)).await.status,
        401,
        "the session logged in during the revocation is revocable"
    );
}

/// User ids are bounded.
async fn overlong_user_ids_are_refused(h: Harness) {
    let c = Client::new(&h).await;
    let long = "u".repeat(257);
    let r = c.send("POST", &format!("/login/{long}"), None).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("user id"), "{}", r.body);
    assert_eq!(set_id(&r), None);
    let ok = "u".repeat(256);
    assert_eq!(
        c.send("POST", &format!("/login/{ok}"), None).await.status,
        200
    );
}

/// Breaks the session named by `id` in Redis: its key holds a string, so every script on it fails
/// with WRONGTYPE while the rest of Redis keeps working.
async fn break_session(h: &Harness, id: &str) {
    let key = format!("{}s:{{{}}}", h.prefix(), storage_key(id));
    let mut conn = h.inspect().await;
    let () = redis::cmd("SET")
        .arg(&key)
        .arg("not a hash")
        .query_async(&mut conn)
        .await
        .expect("SET");
}

fn lenient(h: &Harness, store: Arc<dyn SessionStore>) -> Client {
    let _ = h;
    Client::with_store(store, Hooks::default(), |b| {
        b.failure_policy(redis_guard::session::FailurePolicy::Open)
    })
}

/// After a failed load, `ContinueWithoutSession` drops writes: no new session,
/// no `Set-Cookie` replacing the user's cookie.
async fn a_failed_load_writes_nothing_and_keeps_the_cookie(h: Harness) {
    let c = lenient(&h, h.session_store().await);
    let id = new_session(&c).await;
    break_session(&h, &id).await;
    let before = h.keys().await;
    let r = c.send("POST", "/set/k/v", Some(&id)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.headers.get("set-cookie").is_none(),
        "the cookie is not replaced: {:?}",
        r.header("set-cookie")
    );
    assert_eq!(h.keys().await, before, "nothing written");
    let strict = Client::new(&h).await;
    let r = strict.send("POST", "/set/k/v", Some(&id)).await;
    assert_eq!(r.status, 503);
    assert!(r.headers.get("set-cookie").is_none());
    assert_eq!(h.keys().await, before, "nothing written");
}

/// A failed idle refresh never replaces the handler's response; a failed save
/// of changed data is a 503 under `ServiceUnavailable` (the handler believes it stored them).
async fn a_failed_refresh_keeps_the_response_a_failed_save_does_not(h: Harness) {
    let strict = Client::new(&h).await;
    let id = new_session(&strict).await;
    break_session(&h, &id).await;
    let r = strict.send("GET", "/noop", Some(&id)).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "noop"),
        "only the refresh failed"
    );
    assert!(r.headers.get("set-cookie").is_none());

    for (client, expected) in [
        (Client::new(&h).await, 503),
        (lenient(&h, h.session_store().await), 200),
    ] {
        let id = new_session(&client).await;
        let slow = {
            let id = id.clone();
            let hooks = Arc::clone(&client.hooks);
            let layer = client.layer.clone();
            tokio::spawn(async move {
                let req = Request::post("/slow/late")
                    .header("cookie", format!("{COOKIE}={id}"))
                    .body(Body::default())
                    .expect("request");
                call(layer.layer(app(hooks)), req).await
            })
        };
        client.hooks.loaded.notified().await;
        break_session(&h, &id).await;
        client.hooks.release.notify_one();
        let r = slow.await.expect("task");
        assert_eq!(r.status, expected, "{}", r.body);
        assert!(r.headers.get("set-cookie").is_none());
    }
}

/// A well-formed id planted before the real one (by a sibling subdomain) does
/// not shadow it, and a non-ASCII cookie of someone else does not hide ours.
async fn a_planted_or_foreign_cookie_does_not_shadow_ours(h: Harness) {
    let c = Client::new(&h).await;
    let real = new_session(&c).await;
    let planted = SessionId::generate().expect("random").encode();
    let r = c
        .send(
            "GET",
            "/get/name",
            Some(&format!("{planted}; {COOKIE}={real}")),
        )
        .await;
    assert_eq!((r.status, r.body.as_str()), (200, "alice"), "planted first");
    let svc = c.layer.layer(app(Arc::clone(&c.hooks)));
    let mut value = b"theme=\xc3\xa9t\xc3\xa9; ".to_vec();
    value.extend_from_slice(format!("{COOKIE}={real}").as_bytes());
    let req = Request::get("/get/name")
        .header(
            "cookie",
            http::HeaderValue::from_bytes(&value).expect("obs-text is a valid header value"),
        )
        .body(Body::default())
        .expect("request");
    let r = call(svc, req).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "alice"),
        "non-ASCII sibling"
    );
}

/// A response that sets the session cookie is never cacheable by a shared
/// cache, whatever the handler said.
async fn responses_setting_the_cookie_are_private(h: Harness) {
    let c = Client::new(&h).await;
    let r = c.send("POST", "/public/k/v", None).await;
    assert!(set_id(&r).is_some());
    let cc = r.header("cache-control");
    assert!(cc.contains("private"), "{cc}");
    assert!(!cc.contains("public") && !cc.contains("s-maxage"), "{cc}");
    assert!(
        cc.contains("max-age=60"),
        "the handler's own max-age stays: {cc}"
    );
    assert!(cc.contains("no-cache=\"Set-Cookie\""), "{cc}");
}

backend_suite!(
    a_planted_or_foreign_cookie_does_not_shadow_ours,
    responses_setting_the_cookie_are_private,
    a_rotated_session_is_still_revoked,
    the_per_user_cap_counts_only_live_sessions,
    overlong_user_ids_are_refused,
    concurrent_writes_to_different_fields_both_survive,
    a_write_after_destroy_or_revoke_does_not_resurrect,
    an_unknown_id_is_never_adopted,
    login_rotates_the_id_and_keeps_the_data,
    idle_timeout_slides_and_absolute_lifetime_ends,
    cookie_attributes_on_the_wire,
    malformed_cookies_are_ignored_without_writes,
    bad_keys_and_values_are_errors_not_panics,
    increments_are_atomic,
    log_out_everywhere_and_list,
);
backend_suite!(
    // Need a store failure on one key while the store works.
    redis_only: a_failed_load_writes_nothing_and_keeps_the_cookie,
    a_failed_refresh_keeps_the_response_a_failed_save_does_not,
    // The memory store revokes under one lock: there is no "between".
    a_login_during_revocation_stays_revocable,
    // Reads what Redis holds.
    the_raw_cookie_value_never_reaches_the_store,
);
// Counts commands with MONITOR on one server: a pool adds its own (PING on checkout), and a
// cluster has no single server to watch.
backend_suite!(standalone_only: round_trips_per_request);

/// A read-only request slides the idle timeout (the key's TTL goes back up), except within 1 %
/// of the idle timeout of the last use, when it writes nothing at all (most reads are
/// then one HMGET + HGETALL, nothing to write or replicate).
#[tokio::test]
async fn idle_ttl_goes_back_up_on_a_read_only_request() {
    let h = Harness::redis().await;
    let c = Client::new(&h).await;
    let id = new_session(&c).await;
    let key = format!("{}s:{{{}}}", h.prefix(), storage_key(&id));
    let mut conn = h.inspect().await;
    let shorten = redis::cmd("PEXPIRE").arg(&key).arg(5000).clone();
    // Used again right away (within 1 % of the 30-minute idle timeout): not marked again.
    let () = shorten.query_async(&mut conn).await.expect("PEXPIRE");
    assert_eq!(c.send("GET", "/get/name", Some(&id)).await.status, 200);
    assert!(h.pttl(&key).await <= 5000, "no write for a read this soon");
    // A minute later (more than 18 s, 1 % of the idle timeout): marked, the TTL is back up.
    h.wait(Duration::from_secs(60)).await;
    assert_eq!(c.send("GET", "/get/name", Some(&id)).await.status, 200);
    let pttl = h.pttl(&key).await;
    assert!(
        pttl > 29 * 60 * 1000,
        "PTTL back to the idle timeout: {pttl}"
    );
}

#[tokio::test]
async fn redis_down_is_a_503_or_no_session_never_a_hang() {
    use redis_guard::session::{FailurePolicy, RedisSessionStore};
    let mut h = Harness::redis().await;
    let store = RedisSessionStore::new(h.backend().await.timeout(Duration::from_millis(300)));
    let strict = SessionLayer::new(store.clone()).expect("valid");
    let hooked = SessionLayer::builder(store.clone())
        .response(|why| {
            let mut res = Response::new(Bytes::from(format!("down: {why}")));
            *res.status_mut() = why.status();
            res
        })
        .build()
        .expect("valid");
    let lenient = SessionLayer::builder(store)
        .failure_policy(FailurePolicy::Open)
        .build()
        .expect("valid");
    let id = SessionId::generate().expect("random").encode();
    h.kill_redis();
    let started = std::time::Instant::now();
    let hooks = Arc::new(Hooks::default());
    let send = |layer: &SessionLayer, path: &str, cookie: Option<&str>| {
        let svc = layer.layer(app(Arc::clone(&hooks)));
        let mut req = Request::get(path);
        if let Some(c) = cookie {
            req = req.header("cookie", format!("{COOKIE}={c}"));
        }
        call(svc, req.body(Body::default()).expect("request"))
    };
    // Reading a session needs the store: 503 with Retry-After, or carry on without one.
    let r = send(&strict, "/get/name", Some(&id)).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), "1");
    // The layer's own answer is a problem document, as the limiter's.
    assert_eq!(r.header("content-type"), "application/problem+json");
    assert_eq!(
        r.body,
        r#"{"detail":"The session store is unavailable; retry shortly.","status":503,"title":"Service Unavailable","type":"about:blank"}"#
    );
    // Why is in the answer's extensions; a hook writes the answer, the layer adds Retry-After.
    let req = Request::get("/get/name")
        .header("cookie", format!("{COOKIE}={id}"))
        .body(Body::default())
        .expect("request");
    let res = tower::ServiceExt::oneshot(hooked.layer(app(Arc::clone(&hooks))), req)
        .await
        .expect("infallible");
    assert_eq!(
        res.extensions().get::<Rejection>(),
        Some(&Rejection::StoreUnavailable)
    );
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    let body = res.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(
        body,
        "down: The session store is unavailable; retry shortly."
    );
    let r = send(&lenient, "/get/name", Some(&id)).await;
    assert_eq!(r.status, 404, "no session, no value");
    // Writing: the strict layer refuses the whole response; the lenient one drops the write.
    assert_eq!(send(&strict, "/set/k/v", None).await.status, 503);
    let r = send(&lenient, "/set/k/v", None).await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers.get("set-cookie").is_none(),
        "no cookie for a session never stored"
    );
    // A request that never needs the store is unaffected.
    assert_eq!(send(&strict, "/noop", None).await.status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "bounded by the timeout"
    );
}

/// A zero Redis timeout (every call would fail at once) fails at build.
#[tokio::test]
async fn a_zero_redis_timeout_fails_at_build() {
    let h = Harness::redis().await;
    let store = RedisSessionStore::new(h.backend().await.timeout(Duration::ZERO));
    let err = SessionLayer::builder(store).build().expect_err("refused");
    assert!(err.to_string().contains("timeout"), "{err}");
    assert!(err.to_string().contains("0ns"), "{err}");
    assert_eq!(err.kind(), redis_guard::ConfigErrorKind::Store);
    assert_eq!(err.setting(), Some("RedisBackend::timeout"));
    assert_eq!(err.value(), Some("0ns"));
}

/// Loads that arrive while load calls are in flight go to Redis together: 200 due loads of two
/// sessions queued behind a Redis that pauses writes take a handful of `EVALSHA`s, not 200, and each load
/// still gets its session. A session key Redis cannot read as a hash fails its own load only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_loads_coalesce_into_few_script_calls() {
    let h = Harness::redis().await;
    let c = Client::new(&h).await;
    let ids = [new_session(&c).await, new_session(&c).await];
    let redis = RedisSessionStore::new(h.backend().await.timeout(Duration::from_secs(10)));
    let store: Arc<dyn SessionStore> = Arc::new(redis.clone());
    // Load the script first, so the count below is of these loads only.
    stored(&*store, &storage_key(&ids[0])).await.expect("load");
    let mut conn = h.inspect().await;
    let poisoned = String::from("poisoned");
    let () = redis::AsyncCommands::set(&mut conn, redis.session_key(&poisoned), "x")
        .await
        .expect("SET");
    // Past 1 % of the idle timeout, so every load's refresh is due: its plain read is followed
    // by the load script.
    h.wait(Duration::from_secs(60)).await;
    // Writes (the load script among them) wait three seconds; the plain reads do not, so
    // every load's script is queued behind the first call while Redis holds it. (One second
    // was once too short for 201 tasks on a loaded machine: a call left after the pause.)
    h.admin(&["CONFIG", "RESETSTAT"]).await;
    h.admin(&["CLIENT", "PAUSE", "3000", "WRITE"]).await;
    let mut tasks = Vec::new();
    for i in 0..201 {
        let store = Arc::clone(&store);
        let key = match i {
            200 => poisoned.clone(),
            _ => storage_key(&ids[i % 2]),
        };
        tasks.push(tokio::spawn(async move { stored(&*store, &key).await }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        match (i, task.await.expect("task")) {
            (200, Ok(_)) => panic!("a key of the wrong type loaded"),
            (200, Err(_)) => {}
            (_, Ok(Some(record))) => assert_eq!(record.get("name"), Some("\"alice\"")),
            (_, other) => panic!("load {i}: {other:?}"),
        }
    }
    let calls = h.calls("evalsha").await;
    assert!(
        (1..=2 + 199_u64.div_ceil(64)).contains(&calls),
        "{calls} EVALSHA calls for 201 loads"
    );
}

/// Saves are coalesced as loads are: 200 concurrent requests, each setting a
/// field of its own on one of two sessions, whose saves queue behind a Redis that pauses writes,
/// take a handful of `EVALSHA`s, not 200, and every field is there afterwards: no write lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_saves_coalesce_into_few_script_calls() {
    const REQUESTS: usize = 200;
    let h = Harness::redis().await;
    let hooks = Hooks {
        gate: Some((Barrier::new(REQUESTS + 1), Barrier::new(REQUESTS + 1))),
        ..Hooks::default()
    };
    let c = Client::with_hooks(&h, hooks).await;
    let ids = [new_session(&c).await, new_session(&c).await];
    let mut tasks = Vec::new();
    for i in 0..REQUESTS {
        let svc = c.layer.layer(app(Arc::clone(&c.hooks)));
        let req = Request::post(format!("/gate/f{i}"))
            .header("cookie", format!("{COOKIE}={}", ids[i % 2]))
            .body(Body::default())
            .expect("request");
        tasks.push(tokio::spawn(call(svc, req)));
    }
    let (loaded, release) = c.hooks.gate.as_ref().expect("gated");
    loaded.wait().await;
    // Every load is done. Writes (scripts included) now wait 300 ms (less than the connection's
    // 500 ms response timeout), while every save is queued.
    h.admin(&["CONFIG", "RESETSTAT"]).await;
    h.admin(&["CLIENT", "PAUSE", "300", "WRITE"]).await;
    release.wait().await;
    for task in tasks {
        let r = task.await.expect("task");
        assert_eq!(r.status, 200, "{} {:?}", r.body, r.headers);
    }
    let calls = h.calls("evalsha").await;
    assert!(
        (1..=2 + 198_u64.div_ceil(64)).contains(&calls),
        "{calls} EVALSHA calls for 200 saves"
    );
    let store = h.session_store().await;
    for (n, id) in ids.iter().enumerate() {
        let record = stored(&*store, &storage_key(id))
            .await
            .expect("load")
            .expect("live");
        let lost: Vec<usize> = (n..REQUESTS)
            .step_by(2)
            .filter(|i| record.get(&format!("f{i}")).is_none())
            .collect();
        assert!(lost.is_empty(), "writes lost: {lost:?}");
    }
}

/// A flood of cookie-less requests that each create an anonymous session
/// fills a small memory store far past its capacity; it evicts sessions that never had a user
/// before any logged-in one, so every user stays logged in.
#[tokio::test]
async fn anonymous_sessions_are_evicted_before_logged_in_ones() {
    use redis_guard::session::MemorySessionStore;
    let store = MemorySessionStore::builder().capacity(20).build();
    let c = Client::with_store(Arc::new(store.clone()), Hooks::default(), |b| b);
    let mut users = Vec::new();
    for i in 0..5 {
        let anonymous = new_session(&c).await;
        let r = c
            .send("POST", &format!("/login/user{i}"), Some(&anonymous))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        users.push((format!("user{i}"), set_id(&r).expect("rotated")));
    }
    for _ in 0..1_000 {
        let r = c.send("POST", "/set/flood/1", None).await;
        assert!(set_id(&r).is_some(), "an anonymous session is created");
        assert!(store.len() <= 20, "{} sessions", store.len());
    }
    for (user, id) in &users {
        let r = c.send("GET", "/whoami", Some(id)).await;
        assert_eq!(
            (r.status, r.body.as_str()),
            (200, user.as_str()),
            "{user} was evicted"
        );
    }
    // Anonymous sessions still work: the newest of the flood is there.
    let newest = new_session(&c).await;
    assert_eq!(c.send("GET", "/get/name", Some(&newest)).await.status, 200);
}
// Over TLS (`rediss://`, a client certificate): a standalone server, a pool, a cluster and
// Sentinel.
backend_suite!(tls_only: concurrent_writes_to_different_fields_both_survive);
