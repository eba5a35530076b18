//! Per-route rules on every backend: one layer, a limit per endpoint.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use redis_guard::rate_limit::{Quota, RateLimitLayer, Route, Rule};
use redis_guard_testkit::http::request;
use redis_guard_tests::{Harness, backend_suite, by_client, call, empty_ok};
use tower::Layer;

type Body = Full<Bytes>;

fn req(method: Method, path: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("x-client", "k")
        .body(Body::default())
        .expect("request")
}

/// Each endpoint spends only its own rule (and the layer-wide one); a request no route matches
/// passes without a decision, even with its key missing.
async fn each_route_has_its_own_limit_in_one_layer(h: Harness) {
    let layer = RateLimitLayer::builder(h.limiter().await)
        .rule_with(
            Rule::new("all", Quota::per_hour(5)).for_route(Route::prefix("/api")),
            by_client(),
        )
        .rule_with(
            Rule::new("export", Quota::per_hour(1))
                .for_route(Route::prefix("/api/export").method(Method::GET)),
            by_client(),
        )
        .rule_with(
            Rule::new("upload", Quota::per_hour(2))
                .for_route(Route::path("/api/files").method(Method::POST)),
            by_client(),
        )
        .build()
        .expect("valid");
    let svc = layer.layer(empty_ok());
    let mut seen = Vec::new();
    for (method, path) in [
        (Method::GET, "/api/export/1"),
        (Method::GET, "/api/export/2"),
        (Method::POST, "/api/export/3"),
        (Method::POST, "/api/files"),
        (Method::POST, "/api/files"),
        (Method::POST, "/api/files"),
        (Method::GET, "/api/files"),
        (Method::GET, "/api/other"),
    ] {
        let reply = call(svc.clone(), req(method.clone(), path)).await;
        seen.push((reply.status, reply.header("ratelimit-policy").to_owned()));
    }
    let all = "\"all\";q=5;w=3600";
    let with = |other: &str| format!("{all}, {other}");
    let export = with("\"export\";q=1;w=3600");
    let upload = with("\"upload\";q=2;w=3600");
    assert_eq!(
        seen,
        [
            (200, export.clone()),
            (429, export),
            (200, all.to_owned()),
            (200, upload.clone()),
            (200, upload.clone()),
            (429, upload),
            // "all" admitted 4 so far (denials consume nothing): one left, then none.
            (200, all.to_owned()),
            (429, all.to_owned()),
        ]
    );
    let outside = Request::get("/health")
        .body(Body::default())
        .expect("request");
    let reply = call(svc, outside).await;
    assert_eq!((reply.status, reply.header("ratelimit")), (200, ""));
}

/// Over real HTTP, a layer inside `nest("/api", …)` matches the rule's full path
/// (`/api/search`, not the `/search` the nest leaves), and its `GET` rule covers the `HEAD`
/// axum answers with the same handler: `curl -I` spends the same quota.
async fn a_get_route_covers_head_under_a_nest(h: Harness) {
    let layer = RateLimitLayer::builder(h.limiter().await)
        .rule_with(
            Rule::new("search", Quota::per_hour(2))
                .for_route(Route::path("/api/search").method(Method::GET)),
            by_client(),
        )
        .build()
        .expect("valid");
    let api = axum::Router::new()
        .route("/search", axum::routing::get(|| async { "found" }))
        .route("/other", axum::routing::get(|| async { "other" }))
        .layer(layer);
    let app = axum::Router::new().nest("/api", api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut seen = Vec::new();
    for (method, path) in [
        ("HEAD", "/api/search"),
        ("GET", "/api/search?q=x"),
        ("HEAD", "/api/search"),
        ("GET", "/api/search"),
        ("GET", "/api/other"),
    ] {
        let reply = request(addr, method, path, &[("x-client", b"k")], b"")
            .await
            .expect("the app answers");
        seen.push((
            method,
            path,
            reply.status,
            reply.header("ratelimit-policy").unwrap_or("").to_owned(),
        ));
    }
    let policy = "\"search\";q=2;w=3600".to_owned();
    assert_eq!(
        seen,
        [
            ("HEAD", "/api/search", 200, policy.clone()),
            ("GET", "/api/search?q=x", 200, policy.clone()),
            ("HEAD", "/api/search", 429, policy.clone()),
            ("GET", "/api/search", 429, policy),
            ("GET", "/api/other", 200, String::new()),
        ]
    );
}

backend_suite!(
    each_route_has_its_own_limit_in_one_layer,
    a_get_route_covers_head_under_a_nest
);
