//! The response cache and sessions in one axum app, over real sockets, on
//! every backend, with the cache outside the session layer (`.layer(sessions).layer(cache)`)
//! and inside it (`route(get(h).layer(cache)).layer(sessions)`, the usual axum layout): no
//! user's page is ever served to another user or to an anonymous visitor, whether the session
//! travels in a header token or a cookie, and no page rendered from a fresh anonymous session
//! (its CSRF token, its flash) is served to the next visitor. Routes that depend on no session
//! are still cached, and a nested router keys its full path.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::{get, post};
use redis_guard::cache::CacheLayer;
use redis_guard::session::{Session, SessionError, SessionLayer, Transport};
use redis_guard_testkit::http::{RawResponse, request, send};
use redis_guard_tests::{Harness, backend_suite, serve};

/// The request header the header transport reads.
const TOKEN: &str = "x-session-token";

#[derive(Clone, Copy, Debug)]
enum Order {
    /// `.layer(sessions).layer(cache)`: the cache sees the request first.
    CacheOutside,
    /// `route(get(h).layer(cache)).layer(sessions)`: the session layer sees it first.
    CacheInside,
}

const ORDERS: [Order; 2] = [Order::CacheOutside, Order::CacheInside];

async fn me(session: Session) -> Result<String, SessionError> {
    Ok(match session.user().await? {
        Some(user) => format!("user {user}"),
        None => "anonymous".to_owned(),
    })
}

async fn login(session: Session, Path(user): Path<String>) -> Result<&'static str, SessionError> {
    session.cycle_id().await?;
    session.set_user(&user).await?;
    Ok("in")
}

async fn page() -> &'static str {
    "the same for everyone"
}

async fn form(session: Session) -> Result<String, SessionError> {
    Ok(format!("csrf {}", session.csrf_token().await?))
}

async fn flash(session: Session) -> Result<String, SessionError> {
    let flash: Option<String> = session.take("flash").await?;
    Ok(format!("flash {}", flash.as_deref().unwrap_or("none")))
}

/// The app with the cache and sessions (over `transport`) layered in `order`.
async fn app(h: &Harness, order: Order, transport: Transport) -> SocketAddr {
    let sessions = SessionLayer::builder(h.session_store().await)
        .transport(transport)
        .build()
        .expect("sessions");
    let cache: CacheLayer = h
        .cache()
        .await
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .build()
        .expect("cache");
    let cached = [
        ("/me", get(me)),
        ("/page", get(page)),
        ("/form", get(form)),
        ("/flash", get(flash)),
    ];
    let mut router = Router::new().route("/login/{user}", post(login));
    match order {
        Order::CacheOutside => {
            for (path, route) in cached {
                router = router.route(path, route);
            }
            router = router.layer(sessions).layer(cache);
        }
        Order::CacheInside => {
            for (path, route) in cached {
                router = router.route(path, route.layer(cache.clone()));
            }
            router = router.layer(sessions);
        }
    }
    serve(router).await
}

async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &[u8])]) -> RawResponse {
    request(addr, "GET", path, headers, b"")
        .await
        .expect("the app answers")
}

/// Every value of the response's `Vary`, lower case.
fn vary(r: &RawResponse) -> Vec<String> {
    r.headers_named("vary")
        .iter()
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_ascii_lowercase())
        .collect()
}

/// Logs `user` in over the header transport; their token.
async fn token_of(addr: SocketAddr, user: &str) -> String {
    let r = request(addr, "POST", &format!("/login/{user}"), &[], b"")
        .await
        .expect("login");
    assert_eq!(r.status, 200, "{r:?}");
    r.header("session-token").expect("a token").to_owned()
}

async fn header_sessions_are_never_served_to_another_client(h: Harness) {
    for order in ORDERS {
        let addr = app(&h, order, Transport::header(TOKEN)).await;
        let alice = token_of(addr, "alice").await;
        let bob = token_of(addr, "bob").await;
        for round in 0..2 {
            for (token, body) in [(&alice, "user alice"), (&bob, "user bob")] {
                let r = get_with(addr, "/me", &[(TOKEN, token.as_bytes())]).await;
                let ctx = format!("{order:?}, round {round}: {r:?}");
                assert_eq!(r.text(), body, "{ctx}");
                assert_ne!(r.header("x-cache"), Some("HIT"), "{ctx}");
                assert!(vary(&r).contains(&TOKEN.to_owned()), "{ctx}");
                let cc = r.header("cache-control").unwrap_or("");
                assert!(cc.contains("private"), "{ctx}");
            }
            let r = get_with(addr, "/me", &[]).await;
            assert_eq!(r.text(), "anonymous", "{order:?}: {r:?}");
            assert_ne!(r.header("x-cache"), Some("HIT"), "{order:?}: {r:?}");
            assert!(vary(&r).contains(&TOKEN.to_owned()), "{order:?}: {r:?}");
        }
        // A route that depends on no session is still cached, and served to token holders.
        // (Both orders share the store: the query keeps their entries apart.)
        let page = format!("/page?{order:?}");
        let first = get_with(addr, &page, &[]).await;
        assert_eq!(first.header("x-cache"), Some("MISS"), "{order:?}");
        let second = get_with(addr, &page, &[]).await;
        assert_eq!(second.header("x-cache"), Some("HIT"), "{order:?}");
        let r = get_with(addr, &page, &[(TOKEN, alice.as_bytes())]).await;
        assert_eq!(r.text(), "the same for everyone", "{order:?}");
        // ... and the token holder's visit filled nothing of theirs.
        let r = get_with(addr, "/me", &[]).await;
        assert_eq!(r.text(), "anonymous", "{order:?}");
    }
}

async fn pages_of_fresh_anonymous_sessions_are_never_cached(h: Harness) {
    for order in ORDERS {
        let addr = app(&h, order, Transport::cookie()).await;
        // Each visitor gets their own CSRF token, and the cookie of the session holding it.
        let a = get_with(addr, "/form", &[]).await;
        let b = get_with(addr, "/form", &[]).await;
        for r in [&a, &b] {
            assert_eq!(r.status, 200, "{order:?}: {r:?}");
            assert_ne!(r.header("x-cache"), Some("HIT"), "{order:?}: {r:?}");
            assert!(r.header("set-cookie").is_some(), "{order:?}: {r:?}");
            assert!(vary(r).contains(&"cookie".to_owned()), "{order:?}: {r:?}");
        }
        assert_ne!(a.text(), b.text(), "{order:?}: one token for two visitors");
        // The first visitor's session still holds the token their page showed.
        let cookie = a.header("set-cookie").expect("cookie");
        let pair = cookie.split(';').next().expect("name=value").to_owned();
        let again = get_with(addr, "/form", &[("cookie", pair.as_bytes())]).await;
        assert_eq!(again.text(), a.text(), "{order:?}");
        // A page that only read an anonymous session varies on the cookie and is not stored.
        for _ in 0..2 {
            let r = get_with(addr, "/flash", &[]).await;
            assert_eq!(r.text(), "flash none", "{order:?}");
            assert_eq!(r.header("x-cache"), Some("MISS"), "{order:?}: {r:?}");
            assert!(vary(&r).contains(&"cookie".to_owned()), "{order:?}: {r:?}");
        }
    }
}

/// `GET path` with `Host: host`, raw.
async fn get_host(addr: SocketAddr, path: &str, host: &str) -> RawResponse {
    let raw = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    send(addr, raw.as_bytes()).await.expect("the app answers")
}

async fn keys_hold_the_host_and_the_path_before_nest(h: Harness) {
    for order in ORDERS {
        let sessions = SessionLayer::new(h.session_store().await).expect("sessions");
        let cache: CacheLayer = h
            .cache()
            .await
            .ttl(Duration::from_secs(60))
            .jitter(0.0)
            .build()
            .expect("cache");
        let site = |name: &'static str| {
            let echo = move |headers: http::HeaderMap| async move {
                let host = headers
                    .get("host")
                    .map(|v| v.to_str().unwrap_or("?").to_owned());
                format!("{name} for {}", host.unwrap_or_default())
            };
            match order {
                Order::CacheOutside => Router::new()
                    .route("/x", get(echo))
                    .layer(sessions.clone())
                    .layer(cache.clone()),
                Order::CacheInside => Router::new()
                    .route("/x", get(echo).layer(cache.clone()))
                    .layer(sessions.clone()),
            }
        };
        let addr = serve(Router::new().nest("/a", site("a")).nest("/b", site("b"))).await;
        let fetch = |path: &'static str, host: &'static str| async move {
            // Both orders share the store: the query keeps their entries apart.
            let r = get_host(addr, &format!("{path}?{order:?}"), host).await;
            (r.header("x-cache").unwrap_or("").to_owned(), r.text())
        };
        let expected = [
            ("/a/x", "one.example", "MISS", "a for one.example"),
            ("/b/x", "one.example", "MISS", "b for one.example"),
            ("/a/x", "two.example", "MISS", "a for two.example"),
            ("/a/x", "one.example", "HIT", "a for one.example"),
            ("/b/x", "one.example", "HIT", "b for one.example"),
            ("/a/x", "two.example", "HIT", "a for two.example"),
        ];
        for (path, host, outcome, body) in expected {
            let got = fetch(path, host).await;
            assert_eq!(
                (got.0.as_str(), got.1.as_str()),
                (outcome, body),
                "{order:?} {host}{path}"
            );
        }
    }
}

backend_suite!(
    header_sessions_are_never_served_to_another_client,
    pages_of_fresh_anonymous_sessions_are_never_cached,
    keys_hold_the_host_and_the_path_before_nest,
);
