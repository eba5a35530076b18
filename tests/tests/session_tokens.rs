//! Header-token sessions (issue 12, item 5) end to end over real sockets, on the memory store,
//! Redis (`ConnectionManager` and `bb8`) and a Redis Cluster: one app, two route trees sharing
//! one store, `/api/…` behind a `Transport::bearer()` layer and `/web/…` behind the cookie
//! layer. The client writes raw HTTP/1.1, so it can send what real clients send by mistake
//! (two `Authorization` headers, non-UTF-8 bytes).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use redis_guard::session::{
    Session, SessionError, SessionId, SessionLayer, SessionStore, Transport,
};
use redis_guard_tests::{Harness, Reply, backend_suite, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::{Layer, ServiceExt};

/// The cookie layer's cookie (the default name).
const COOKIE: &str = "__Host-id";
/// The response header new tokens come in (the default).
const TOKEN: &str = "session-token";

fn text(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::from(body.into()));
    *res.status_mut() = status;
    res
}

/// The handlers behind both layers: the path after the tree's name picks one.
async fn handle<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    let session = req.extensions().get::<Session>().cloned().expect("layer");
    let path: Vec<&str> = req.uri().path().split('/').skip(2).collect();
    let res = match path.as_slice() {
        ["login", user] => {
            async {
                session.cycle_id().await?;
                session.set_user(user).await?;
                Ok(text(StatusCode::OK, "in"))
            }
            .await
        }
        ["whoami"] => session.user().await.map(|u| match u {
            Some(u) => text(StatusCode::OK, u),
            None => text(StatusCode::UNAUTHORIZED, ""),
        }),
        ["set", key, value] => session
            .insert(key, &(*value).to_owned())
            .await
            .map(|()| text(StatusCode::OK, "set")),
        ["get", key] => session.get::<String>(key).await.map(|v| match v {
            Some(v) => text(StatusCode::OK, v),
            None => text(StatusCode::NOT_FOUND, ""),
        }),
        ["cycle"] => session
            .cycle_id()
            .await
            .map(|()| text(StatusCode::OK, "cycled")),
        ["logout"] => session
            .destroy()
            .await
            .map(|()| text(StatusCode::NO_CONTENT, "")),
        ["revoke", user] => session
            .revoke_user(user)
            .await
            .map(|n| text(StatusCode::OK, n.to_string())),
        _ => Ok(text(StatusCode::NOT_FOUND, "no route")),
    };
    Ok(res.unwrap_or_else(|e: SessionError| {
        let status = if e.is_store_error() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::BAD_REQUEST
        };
        text(status, e.to_string())
    }))
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
async fn send(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &[u8])]) -> Reply {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-length: 0\r\n"
    )
    .into_bytes();
    for (name, value) in headers {
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    let exchange = async {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(&head).await.expect("send");
        let mut raw = Vec::new();
        tcp.read_to_end(&mut raw).await.expect("read");
        raw
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("the app answers");
    parse(&raw)
}

fn parse(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let mut headers = HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').expect("a header line");
        headers.append(
            HeaderName::from_bytes(name.trim().as_bytes()).expect("header name"),
            HeaderValue::from_str(value.trim()).expect("header value"),
        );
    }
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn bearer(token: &str) -> Vec<u8> {
    format!("Bearer {token}").into_bytes()
}

async fn api(addr: SocketAddr, method: &str, path: &str, token: &str) -> Reply {
    send(
        addr,
        method,
        &format!("/api/{path}"),
        &[("authorization", &bearer(token))],
    )
    .await
}

async fn web(addr: SocketAddr, method: &str, path: &str, id: &str) -> Reply {
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
fn token_of(r: &Reply) -> String {
    let token = r.header(TOKEN);
    assert!(SessionId::parse(token).is_some(), "no token in {r:?}");
    assert_eq!(r.header("cache-control"), "no-store", "{r:?}");
    assert!(!r.headers.contains_key("set-cookie"), "{r:?}");
    token.to_owned()
}

/// A response that hands out nothing: no token, no cookie.
fn assert_silent(r: &Reply) {
    assert!(!r.headers.contains_key(TOKEN), "{r:?}");
    assert!(!r.headers.contains_key("set-cookie"), "{r:?}");
}

/// The cookie a response sets.
fn cookie_of(r: &Reply) -> String {
    assert!(!r.headers.contains_key(TOKEN), "{r:?}");
    let v = r.header("set-cookie");
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
    assert_eq!((r.status, r.body.as_str()), (200, "alice"), "{r:?}");
    assert_silent(&r); // the token the client holds stays good: nothing new to send
    let r = api(addr, "POST", "set/color/blue", &first).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_silent(&r);

    let r = api(addr, "POST", "cycle", &first).await;
    assert_eq!(r.status, 200, "{r:?}");
    let second = token_of(&r);
    assert_ne!(first, second);
    let r = api(addr, "GET", "whoami", &first).await;
    assert_eq!(r.status, 401, "the old token is dead: {r:?}");
    assert_silent(&r);
    let r = api(addr, "GET", "whoami", &second).await;
    assert_eq!((r.status, r.body.as_str()), (200, "alice"), "{r:?}");
    let r = api(addr, "GET", "get/color", &second).await;
    assert_eq!((r.status, r.body.as_str()), (200, "blue"), "{r:?}");

    // A login on a live token session rotates too.
    let r = api(addr, "POST", "login/alice", &second).await;
    let third = token_of(&r);
    assert_ne!(third, second);
    assert_eq!(api(addr, "GET", "whoami", &second).await.status, 401);

    let r = api(addr, "POST", "logout", &third).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_silent(&r);
    let r = api(addr, "GET", "whoami", &third).await;
    assert_eq!(r.status, 401, "a destroyed token is dead: {r:?}");
    let r = api(addr, "GET", "get/color", &third).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_silent(&r);
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
    assert_eq!((r.status, r.body.as_str()), (200, "carol"), "{r:?}");
    let r = api(addr, "GET", "whoami", &token).await;
    assert_eq!((r.status, r.body.as_str()), (200, "dave"), "{r:?}");

    // The cookie's id as a bearer token, the token as the cookie: unknown.
    let r = api(addr, "GET", "whoami", &cookie).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_silent(&r);
    let r = web(addr, "GET", "whoami", &token).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_silent(&r);
    let r = api(addr, "GET", "get/color", &cookie).await;
    assert_eq!(r.status, 404, "{r:?}");
    // Each layer reads its own transport only: a cookie on the API, a bearer on the pages.
    let as_cookie = format!("{COOKIE}={token}");
    let r = send(
        addr,
        "GET",
        "/api/whoami",
        &[("cookie", as_cookie.as_bytes())],
    )
    .await;
    assert_eq!(r.status, 401, "{r:?}");
    let r = send(
        addr,
        "GET",
        "/web/whoami",
        &[("authorization", &bearer(&cookie))],
    )
    .await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(h.keys().await, keys, "reading a foreign id wrote nothing");

    // Destroying through the wrong side ends nothing.
    let r = api(addr, "POST", "logout", &cookie).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_silent(&r);
    let r = web(addr, "POST", "logout", &token).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert!(!r.headers.contains_key(TOKEN), "{r:?}");

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
    assert_eq!((r.status, r.body.as_str()), (200, "red"), "{r:?}");
    let r = web(addr, "GET", "whoami", &cookie).await;
    assert_eq!((r.status, r.body.as_str()), (200, "carol"), "{r:?}");
    let r = api(addr, "GET", "whoami", &token).await;
    assert_eq!((r.status, r.body.as_str()), (200, "dave"), "{r:?}");
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
        assert_eq!(r.status, 401, "{what}: {r:?}");
        assert_silent(&r);
        let r = send(addr, "POST", "/api/logout", &headers).await;
        assert_eq!(r.status, 204, "{what}: {r:?}");
        assert_silent(&r);
    }
    assert_eq!(h.keys().await, keys, "malformed tokens wrote nothing");
    // The real session survived all of that.
    let r = api(addr, "GET", "whoami", &token).await;
    assert_eq!((r.status, r.body.as_str()), (200, "erin"), "{r:?}");

    // An unknown but well-formed token is never adopted: a write gets a fresh one.
    let r = send(addr, "POST", "/api/set/k/v", &[("authorization", &unknown)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let fresh = token_of(&r);
    assert_ne!(fresh, other);
    assert_eq!(api(addr, "GET", "get/k", &other).await.status, 404);
    let r = api(addr, "GET", "get/k", &fresh).await;
    assert_eq!((r.status, r.body.as_str()), (200, "v"), "{r:?}");
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
    assert_eq!((r.status, r.body.as_str()), (200, "3"), "{r:?}");
    for token in [&phone, &tablet] {
        let r = api(addr, "GET", "whoami", token).await;
        assert_eq!(r.status, 401, "{r:?}");
    }
    assert_eq!(web(addr, "GET", "whoami", &laptop).await.status, 401);
    let r = api(addr, "GET", "whoami", &bystander).await;
    assert_eq!((r.status, r.body.as_str()), (200, "grace"), "{r:?}");

    // From the API side too, and a revoked token writes nothing back.
    let phone = api_login(addr, "frank").await;
    let r = api(addr, "POST", "revoke/frank", &phone).await;
    assert_eq!((r.status, r.body.as_str()), (200, "1"), "{r:?}");
    assert_silent(&r);
    assert_eq!(api(addr, "GET", "whoami", &phone).await.status, 401);
}

backend_suite!(
    a_token_session_lives_rotates_and_dies,
    tokens_and_cookies_do_not_mix,
    malformed_tokens_are_no_session,
    revoke_user_reaches_token_sessions,
);

/// A custom header both ways, on real sockets: the bare token in `x-session-token`, new tokens
/// back in the same header; `Authorization` is not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_header_carries_the_token_both_ways() {
    let h = Harness::memory().await;
    let layer = SessionLayer::builder(h.session_store().await)
        .transport(Transport::header("X-Session-Token").response_header("X-Session-Token"))
        .build()
        .expect("valid");
    let addr = serve(layer.layer(tower::service_fn(handle))).await;
    let r = send(addr, "POST", "/x/login/heidi", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let token = r.header("x-session-token").to_owned();
    assert!(SessionId::parse(&token).is_some(), "{r:?}");
    assert_eq!(r.header("cache-control"), "no-store");
    assert!(!r.headers.contains_key(TOKEN) && !r.headers.contains_key("set-cookie"));
    let r = send(
        addr,
        "GET",
        "/x/whoami",
        &[("x-session-token", token.as_bytes())],
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (200, "heidi"), "{r:?}");
    let r = send(
        addr,
        "GET",
        "/x/whoami",
        &[("authorization", &bearer(&token))],
    )
    .await;
    assert_eq!(r.status, 401, "{r:?}");
}
