//! Header-token sessions end to end over real sockets, on the memory store,
//! Redis (`ConnectionManager` and `bb8`) and a Redis Cluster: one app, two route trees sharing
//! one store, `/api/…` behind a `Transport::bearer()` layer and `/web/…` behind the cookie
//! layer. The client writes raw HTTP/1.1, so it can send what real clients send by mistake
//! (two `Authorization` headers, non-UTF-8 bytes).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use redis_guard::session::{
    Session, SessionId, SessionLayer, SessionStore, SessionUser, Transport,
};
use redis_guard_testkit::http::{RawResponse, request};
use redis_guard_tests::session_routes::{error, route, text};
use redis_guard_tests::{Harness, Monitor, backend_suite, serve};
use tower::{Layer, ServiceExt};

/// The cookie layer's cookie (the default name).
const COOKIE: &str = "__Host-id";
/// The response header new tokens come in (the default).
const TOKEN: &str = "session-token";

/// The handlers behind both layers: the path after the tree's name picks one. The user the
/// layer exposed before the handler (`expose_user`), if any, comes back in `x-exposed-user`.
async fn handle<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    let session = req.extensions().get::<Session>().cloned().expect("layer");
    let exposed = req.extensions().get::<SessionUser>().cloned();
    let path: Vec<&str> = req.uri().path().split('/').skip(2).collect();
    let res = route(&session, &path)
        .await
        .unwrap_or_else(|| Ok(text(StatusCode::NOT_FOUND, "no route")));
    let mut res = res.unwrap_or_else(|e| error(&e));
    if let Some(SessionUser(user)) = exposed {
        res.headers_mut()
            .insert("x-exposed-user", user.parse().expect("a header value"));
    }
    Ok(res)
}

/// The app: `/api/…` with bearer tokens, `/web/…` with the cookie, one store, served on a
/// fresh port.
async fn app(store: Arc<dyn SessionStore>) -> SocketAddr {
    let api = SessionLayer::builder(Arc::clone(&store))
        .transport(Transport::bearer())
        .build()
        .expect("valid")
        .layer(tower::service_fn(handle));
    let web = SessionLayer::new(store)
        .expect("valid")
        .layer(tower::service_fn(handle));
    serve(tower::service_fn(move |req: Request<_>| {
        let (api, web) = (api.clone(), web.clone());
        async move {
            if req.uri().path().starts_with("/api/") {
                api.oneshot(req).await
            } else {
                web.oneshot(req).await
            }
        }
    }))
    .await
}

/// One request on a new connection, with `headers` as raw bytes; the whole response.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
) -> RawResponse {
    request(addr, method, path, headers, b"")
        .await
        .expect("the app answers")
}

/// `GET path` with one header.
async fn get(addr: SocketAddr, path: &str, header: (&str, &[u8])) -> RawResponse {
    send(addr, "GET", path, &[header]).await
}

fn bearer(token: &str) -> Vec<u8> {
    format!("Bearer {token}").into_bytes()
}

async fn api(addr: SocketAddr, method: &str, path: &str, token: &str) -> RawResponse {
    send(
        addr,
        method,
        &format!("/api/{path}"),
        &[("authorization", &bearer(token))],
    )
    .await
}

async fn web(addr: SocketAddr, method: &str, path: &str, id: &str) -> RawResponse {
    let cookie = format!("{COOKIE}={id}");
    send(
        addr,
        method,
        &format!("/web/{path}"),
        &[("cookie", cookie.as_bytes())],
    )
    .await
}

/// The token a response hands out, checked to be a well-formed id on an uncacheable response
/// that sets no cookie.
fn token_of(r: &RawResponse) -> String {
    let token = r.header(TOKEN).unwrap_or_default();
    assert!(SessionId::parse(token).is_some(), "no token in {r:?}");
    assert_eq!(r.header("cache-control"), Some("no-store"), "{r:?}");
    assert!(r.header("set-cookie").is_none(), "{r:?}");
    token.to_owned()
}

/// A response with `status` that hands out nothing: no token, no cookie.
fn assert_silent(r: &RawResponse, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what} {r:?}");
    assert!(r.header(TOKEN).is_none(), "{r:?}");
    assert!(r.header("set-cookie").is_none(), "{r:?}");
}

/// The cookie a response sets.
fn cookie_of(r: &RawResponse) -> String {
    assert!(r.header(TOKEN).is_none(), "{r:?}");
    let v = r.header("set-cookie").unwrap_or_default();
    let id = v
        .strip_prefix(COOKIE)
        .and_then(|v| v.strip_prefix('='))
        .and_then(|v| v.split(';').next())
        .unwrap_or_else(|| panic!("no cookie in {r:?}"));
    id.to_owned()
}

async fn api_login(addr: SocketAddr, user: &str) -> String {
    let r = send(addr, "POST", &format!("/api/login/{user}"), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    token_of(&r)
}

async fn web_login(addr: SocketAddr, user: &str) -> String {
    let r = send(addr, "POST", &format!("/web/login/{user}"), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    cookie_of(&r)
}

/// Create → token in the response → use it → `cycle_id` rotates (the old token is dead, the new
/// one works, the data stays) → destroy → the token is dead.
async fn a_token_session_lives_rotates_and_dies(h: Harness) {
    let addr = app(h.session_store().await).await;
    let first = api_login(addr, "alice").await;

    let r = api(addr, "GET", "whoami", &first).await;
    assert_eq!(r.text(), "alice");
    // The token the client holds stays good: nothing new to send.
    assert_silent(&r, 200, "");
    let r = api(addr, "POST", "set/color/blue", &first).await;
    assert_silent(&r, 200, "");

    let r = api(addr, "POST", "cycle", &first).await;
    assert_eq!(r.status, 200, "{r:?}");
    let second = token_of(&r);
    assert_ne!(first, second);
    let r = api(addr, "GET", "whoami", &first).await;
    assert_silent(&r, 401, "the old token is dead:");
    let r = api(addr, "GET", "whoami", &second).await;
    assert_eq!((r.status, r.text().as_str()), (200, "alice"), "{r:?}");
    let r = api(addr, "GET", "get/color", &second).await;
    assert_eq!((r.status, r.text().as_str()), (200, "blue"), "{r:?}");

    // A login on a live token session rotates too.
    let r = api(addr, "POST", "login/alice", &second).await;
    let third = token_of(&r);
    assert_ne!(third, second);
    assert_eq!(api(addr, "GET", "whoami", &second).await.status, 401);

    let r = api(addr, "POST", "logout", &third).await;
    assert_silent(&r, 204, "");
    let r = api(addr, "GET", "whoami", &third).await;
    assert_eq!(r.status, 401, "a destroyed token is dead: {r:?}");
    let r = api(addr, "GET", "get/color", &third).await;
    assert_silent(&r, 404, "");
}

/// A cookie id sent as a bearer token, or a token sent as the cookie, names no session: the
/// other layer neither reads it, nor writes it, nor ends it, and a write there starts a new
/// session under a fresh id.
async fn tokens_and_cookies_do_not_mix(h: Harness) {
    let addr = app(h.session_store().await).await;
    let cookie = web_login(addr, "carol").await;
    let r = web(addr, "POST", "set/color/red", &cookie).await;
    assert_eq!(r.status, 200, "{r:?}");
    let token = api_login(addr, "dave").await;
    let keys = h.keys().await;

    // Each id works on its own side.
    let r = web(addr, "GET", "whoami", &cookie).await;
    assert_eq!((r.status, r.text().as_str()), (200, "carol"), "{r:?}");
    let r = api(addr, "GET", "whoami", &token).await;
    assert_eq!((r.status, r.text().as_str()), (200, "dave"), "{r:?}");

    // The cookie's id as a bearer token, the token as the cookie: unknown.
    let r = api(addr, "GET", "whoami", &cookie).await;
    assert_silent(&r, 401, "");
    let r = web(addr, "GET", "whoami", &token).await;
    assert_silent(&r, 401, "");
    let r = api(addr, "GET", "get/color", &cookie).await;
    assert_eq!(r.status, 404, "{r:?}");
    // Each layer reads its own transport only: a cookie on the API, a bearer on the pages.
    let as_cookie = format!("{COOKIE}={token}");
    let r = get(addr, "/api/whoami", ("cookie", as_cookie.as_bytes())).await;
    assert_eq!(r.status, 401, "{r:?}");
    let r = get(addr, "/web/whoami", ("authorization", &bearer(&cookie))).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(h.keys().await, keys, "reading a foreign id wrote nothing");

    // Destroying through the wrong side ends nothing.
    let r = api(addr, "POST", "logout", &cookie).await;
    assert_silent(&r, 204, "");
    let r = web(addr, "POST", "logout", &token).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert!(r.header(TOKEN).is_none(), "{r:?}");

    // A write through the wrong side starts a new session under a fresh id (no fixation).
    let r = api(addr, "POST", "set/color/green", &cookie).await;
    assert_eq!(r.status, 200, "{r:?}");
    let fresh = token_of(&r);
    assert!(fresh != cookie && fresh != token);
    let r = web(addr, "POST", "set/color/green", &token).await;
    assert_eq!(r.status, 200, "{r:?}");
    let fresh_cookie = cookie_of(&r);
    assert!(fresh_cookie != cookie && fresh_cookie != token);

    // The originals are untouched.
    let r = web(addr, "GET", "get/color", &cookie).await;
    assert_eq!((r.status, r.text().as_str()), (200, "red"), "{r:?}");
    let r = web(addr, "GET", "whoami", &cookie).await;
    assert_eq!((r.status, r.text().as_str()), (200, "carol"), "{r:?}");
    let r = api(addr, "GET", "whoami", &token).await;
    assert_eq!((r.status, r.text().as_str()), (200, "dave"), "{r:?}");
}

/// Malformed `Authorization` headers are no session: never a 5xx, never a write, never a
/// token adopted; a handler that writes gets a fresh session.
async fn malformed_tokens_are_no_session(h: Harness) {
    let addr = app(h.session_store().await).await;
    let token = api_login(addr, "erin").await;
    let keys = h.keys().await;
    let other = SessionId::generate().expect("random").encode();
    let unknown = bearer(&other);
    let bad: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("no scheme", vec![token.clone().into_bytes()]),
        ("scheme only", vec![b"Bearer".to_vec()]),
        ("scheme and a space", vec![b"Bearer ".to_vec()]),
        (
            "another scheme",
            vec![format!("Basic {token}").into_bytes()],
        ),
        ("glued", vec![format!("Bearer{token}").into_bytes()]),
        (
            "bad base64",
            vec![bearer(
                &token.replace(|c: char| c.is_ascii_alphabetic(), "!"),
            )],
        ),
        ("short", vec![bearer(&token[..42])]),
        ("long", vec![bearer(&format!("{token}A"))]),
        ("padded", vec![bearer(&format!("{token}="))]),
        ("oversize", vec![bearer(&"A".repeat(8000))]),
        ("two tokens", vec![bearer(&format!("{token} {token}"))]),
        ("sent twice", vec![bearer(&token), bearer(&token)]),
        (
            "non-UTF-8",
            vec![[b"Bearer ".as_slice(), &[0xc3; 43]].concat()],
        ),
        ("unknown", vec![unknown.clone()]),
    ];
    for (what, values) in &bad {
        let headers: Vec<(&str, &[u8])> = values
            .iter()
            .map(|v| ("authorization", v.as_slice()))
            .collect();
        let r = send(addr, "GET", "/api/whoami", &headers).await;
        assert_silent(&r, 401, what);
        let r = send(addr, "POST", "/api/logout", &headers).await;
        assert_silent(&r, 204, what);
    }
    assert_eq!(h.keys().await, keys, "malformed tokens wrote nothing");
    // The real session survived all of that.
    let r = api(addr, "GET", "whoami", &token).await;
    assert_eq!((r.status, r.text().as_str()), (200, "erin"), "{r:?}");

    // An unknown but well-formed token is never adopted: a write gets a fresh one.
    let r = send(addr, "POST", "/api/set/k/v", &[("authorization", &unknown)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let fresh = token_of(&r);
    assert_ne!(fresh, other);
    assert_eq!(api(addr, "GET", "get/k", &other).await.status, 404);
    let r = api(addr, "GET", "get/k", &fresh).await;
    assert_eq!((r.status, r.text().as_str()), (200, "v"), "{r:?}");
}

/// `revoke_user` ends a user's token sessions along with their cookie sessions, whichever side
/// asks.
async fn revoke_user_reaches_token_sessions(h: Harness) {
    let addr = app(h.session_store().await).await;
    let phone = api_login(addr, "frank").await;
    let laptop = web_login(addr, "frank").await;
    let tablet = api_login(addr, "frank").await;
    let bystander = api_login(addr, "grace").await;

    let r = web(addr, "POST", "revoke/frank", &laptop).await;
    assert_eq!((r.status, r.text().as_str()), (200, "3"), "{r:?}");
    for token in [&phone, &tablet] {
        let r = api(addr, "GET", "whoami", token).await;
        assert_eq!(r.status, 401, "{r:?}");
    }
    assert_eq!(web(addr, "GET", "whoami", &laptop).await.status, 401);
    let r = api(addr, "GET", "whoami", &bystander).await;
    assert_eq!((r.status, r.text().as_str()), (200, "grace"), "{r:?}");

    // From the API side too, and a revoked token writes nothing back.
    let phone = api_login(addr, "frank").await;
    let r = api(addr, "POST", "revoke/frank", &phone).await;
    assert_eq!(r.text(), "1");
    assert_silent(&r, 200, "");
    assert_eq!(api(addr, "GET", "whoami", &phone).await.status, 401);
}

/// The fields stored for the session `id` names, sorted.
async fn record(h: &Harness, id: &str) -> Vec<(String, String)> {
    let digest = SessionId::parse(id).expect("well-formed").storage_key();
    let key = h
        .keys()
        .await
        .into_iter()
        .find(|k| k.contains(&digest))
        .expect("stored");
    let mut fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&key)
        .query_async(&mut h.inspect().await)
        .await
        .expect("HGETALL");
    fields.sort();
    fields
}

/// Tokens cost what cookies cost: no round trip without one (or with a malformed one), one to
/// load, two to load and save; a cookie id sent as a token costs its load and changes nothing.
/// Token sessions are stored with `$via = header`, cookie sessions as before (no `$via`).
async fn tokens_cost_what_cookies_cost(h: Harness) {
    let addr = app(h.session_store().await).await;
    let token = api_login(addr, "ivan").await;
    let cookie = web_login(addr, "judy").await;
    let via = |fields: &[(String, String)]| {
        fields
            .iter()
            .find(|(k, _)| k == "$via")
            .map(|(_, v)| v.clone())
    };
    assert_eq!(via(&record(&h, &token).await).as_deref(), Some("header"));
    let before = record(&h, &cookie).await;
    assert_eq!(via(&before), None);
    // Warm up: every script loaded.
    api(addr, "POST", "set/x/1", &token).await;
    let mut monitor = Monitor::start(&h).await;
    let malformed = bearer(&token[..42]);
    for (method, path, auth, expected) in [
        ("GET", "whoami", None, 0),
        ("GET", "whoami", Some(malformed), 0),
        ("GET", "whoami", Some(bearer(&token)), 1),
        ("POST", "set/x/2", Some(bearer(&token)), 2),
        ("GET", "whoami", Some(bearer(&cookie)), 1),
        ("GET", "get/x", Some(bearer(&cookie)), 1),
    ] {
        monitor.commands(&h).await;
        let headers: Vec<(&str, &[u8])> = auth.iter().map(|v| ("authorization", &v[..])).collect();
        let r = send(addr, method, &format!("/api/{path}"), &headers).await;
        assert!(r.status < 500, "{path}: {r:?}");
        let sent = monitor.commands(&h).await;
        assert_eq!(sent.len(), expected, "{method} {path}: {sent:?}");
    }
    assert_eq!(
        record(&h, &cookie).await,
        before,
        "the cookie session is unchanged"
    );
}

backend_suite!(standalone_only: tokens_cost_what_cookies_cost);

backend_suite!(
    a_token_session_lives_rotates_and_dies,
    tokens_and_cookies_do_not_mix,
    malformed_tokens_are_no_session,
    revoke_user_reaches_token_sessions,
);

/// A custom header both ways, on real sockets: the bare token in `x-session-token`, new tokens
/// back in the same header; `Authorization` is not read. `expose_user` preloads the token's user
/// for the layers inside (a per-user rate limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_header_carries_the_token_both_ways() {
    let h = Harness::memory().await;
    let layer = SessionLayer::builder(h.session_store().await)
        .transport(Transport::header("X-Session-Token").response_header("X-Session-Token"))
        .expose_user(true)
        .build()
        .expect("valid");
    let addr = serve(layer.layer(tower::service_fn(handle))).await;
    let r = send(addr, "POST", "/x/login/heidi", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let token = r.header("x-session-token").unwrap_or_default().to_owned();
    assert!(SessionId::parse(&token).is_some(), "{r:?}");
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert!(r.header(TOKEN).is_none() && r.header("set-cookie").is_none());
    let r = get(addr, "/x/whoami", ("x-session-token", token.as_bytes())).await;
    assert_eq!((r.status, r.text().as_str()), (200, "heidi"), "{r:?}");
    assert_eq!(r.header("x-exposed-user"), Some("heidi"));
    let r = get(addr, "/x/whoami", ("authorization", &bearer(&token))).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.header("x-exposed-user"), None);
}
