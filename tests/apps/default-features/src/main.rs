//! `GET /` admits 5 requests a minute per client IP (`ClientIp::peer()`), on redis-guard's
//! default features, served by `axum::serve` with connect info. Prints its address, then serves.

use std::net::SocketAddr;

use axum::{Router, routing::get};
use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limit = RateLimitLayer::new(
        MemoryLimiter::new(),
        "hello",
        ClientIp::peer(),
        Quota::per_minute(5),
    )?;
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
