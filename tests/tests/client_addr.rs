//! The `ClientAddr` extractor over real HTTP behind a trusted proxy: a handler sees the very
//! address, and key, the rate-limit layer counted the request under.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use redis_guard::client_ip::{ClientAddr, ClientIp, ClientIpLayer};
use redis_guard::rate_limit::{Limiter, Quota, RateLimitLayer, Rule};
use redis_guard_testkit::http::{RawResponse, request};
use redis_guard_tests::{Harness, backend_suite};

/// The proxy in front of the app is the test itself, on loopback.
fn behind_loopback() -> ClientIp {
    ClientIp::trusted_proxies(["127.0.0.1"])
        .expect("valid")
        .ipv6_prefix(56)
}

/// Serves `app` on loopback, with the peer address in each request's extensions.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let make = app.into_make_service_with_connect_info::<SocketAddr>();
        let _ = axum::serve(listener, make).await;
    });
    addr
}

/// `GET /` as the proxy forwards it for `chain` (`X-Forwarded-For`).
async fn forwarded(app: SocketAddr, chain: &str) -> RawResponse {
    let headers: &[(&str, &[u8])] = &[("x-forwarded-for", chain.as_bytes())];
    request(app, "GET", "/", headers, b"")
        .await
        .expect("answer")
}

/// The handler answers the address it extracted, its key, and what the limiter holds for
/// that key: `remaining` drops by one per request only when the key is the one counted.
async fn handler_sees_the_address_the_limiter_counted(h: Harness) {
    let limiter = h.limiter().await;
    let rule = Rule::new("ip", Quota::per_hour(10));
    let layer = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule_with(rule.clone(), behind_loopback())
        .build()
        .expect("valid");
    async fn who(
        State((limiter, rule)): State<(Arc<dyn Limiter>, Rule)>,
        client: ClientAddr,
    ) -> String {
        let seen = limiter.inspect(&rule, client.key()).await.expect("inspect");
        let key = String::from_utf8_lossy(client.key().as_bytes()).into_owned();
        format!("{} {key} {}", client.ip(), seen.state.remaining)
    }
    let app = serve(
        Router::new()
            .route("/", get(who))
            .layer(layer)
            .with_state((limiter, rule)),
    )
    .await;

    // The left entry was written by the client and does not count; the proxy appended the rest.
    let res = forwarded(app, "6.6.6.6, 203.0.113.7").await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.text(), "203.0.113.7 203.0.113.7 9");
    let res = forwarded(app, "7.7.7.7, 203.0.113.7").await;
    assert_eq!(res.text(), "203.0.113.7 203.0.113.7 8");

    // IPv6 clients are grouped by the layer's prefix (/56 here), in the handler too.
    let res = forwarded(app, "2001:db8:1:200::7").await;
    assert_eq!(res.text(), "2001:db8:1:200::7 2001:db8:1:200::/56 9");
    let res = forwarded(app, "[2001:db8:1:2ff::9]:4000").await;
    assert_eq!(res.text(), "2001:db8:1:2ff::9 2001:db8:1:200::/56 8");
}

backend_suite!(handler_sees_the_address_the_limiter_counted);

async fn echo(client: ClientAddr) -> String {
    client.to_string()
}

/// A `ClientIpLayer` outside a rate-limit layer that keys on another `ClientIp` does not make
/// the handler disagree with the limiter: the rate-limit layer's address replaces it.
#[tokio::test]
async fn the_rate_limit_layer_address_wins_over_an_outer_client_ip_layer() {
    let layer = RateLimitLayer::builder(redis_guard::rate_limit::MemoryLimiter::new())
        .rule("ip", behind_loopback(), Quota::per_hour(10))
        .build()
        .expect("valid");
    let app = serve(
        Router::new()
            .route("/", get(echo))
            .layer(layer)
            .layer(ClientIpLayer::new(ClientIp::peer())),
    )
    .await;
    assert_eq!(forwarded(app, "203.0.113.7").await.text(), "203.0.113.7");

    // The other way round the inner `ClientIpLayer` keeps the address the limiter counted.
    let layer = RateLimitLayer::builder(redis_guard::rate_limit::MemoryLimiter::new())
        .rule("ip", behind_loopback(), Quota::per_hour(10))
        .build()
        .expect("valid");
    let app = serve(
        Router::new()
            .route("/", get(echo))
            .layer(ClientIpLayer::new(ClientIp::peer()))
            .layer(layer),
    )
    .await;
    assert_eq!(forwarded(app, "203.0.113.7").await.text(), "203.0.113.7");
}

/// Without a rate-limit rule, a `ClientIpLayer` resolves the address; without either, the
/// extractor answers `500` (a server misconfiguration), never a guess.
#[tokio::test]
async fn client_ip_layer_resolves_and_a_route_without_a_layer_is_a_500() {
    let app = serve(
        Router::new()
            .route("/", get(echo))
            .layer(ClientIpLayer::new(behind_loopback())),
    )
    .await;
    assert_eq!(
        forwarded(app, "6.6.6.6, 198.51.100.4").await.text(),
        "198.51.100.4"
    );

    let bare = serve(Router::new().route("/", get(echo))).await;
    let res = forwarded(bare, "198.51.100.4").await;
    assert_eq!(res.status, 500);
    assert!(res.text().contains("not resolved"), "{}", res.text());
}
