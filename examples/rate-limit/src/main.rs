//! Rate limiting in one file: `GET /` admits `RATE_LIMIT` requests (default `5/minute`) per
//! client IP, then answers `429` with `Retry-After`. In process; on Redis when `REDIS_URL` is set.

use axum::{Router, routing::get};
use redis_guard::backend::RedisConnection;
use redis_guard::rate_limit::{
    ClientIp, Limiter, MemoryLimiter, Quota, RateLimitLayer, RedisLimiter,
};
use std::{net::SocketAddr, process::ExitCode, sync::Arc};

async fn run() -> Result<(), String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let bind = var("BIND").unwrap_or_else(|| "127.0.0.1:3000".into());
    let rate = var("RATE_LIMIT").unwrap_or_else(|| "5/minute".into());
    let quota: Quota = rate
        .parse()
        .map_err(|e| format!("RATE_LIMIT={rate:?}: {e}"))?;

    let (limiter, backend): (Arc<dyn Limiter>, &str) = match var("REDIS_URL") {
        Some(url) => {
            let conn = RedisConnection::open_lazy(&url)
                .await
                .map_err(|e| format!("cannot connect to REDIS_URL: {e}"))?;
            (Arc::new(RedisLimiter::new(conn)), "Redis")
        }
        None => (Arc::new(MemoryLimiter::new()), "memory"),
    };
    let limit = RateLimitLayer::new(limiter, "hello", ClientIp::peer(), quota)
        .map_err(|e| format!("RATE_LIMIT={rate:?}: {e}"))?;
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit);

    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .map_err(|e| format!("cannot listen on BIND={bind:?}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{addr} ({rate} per client IP, backend: {backend})");
    // `ClientIp::peer()` reads the TCP peer address: serve with connect info.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    if let Err(e) = run().await {
        eprintln!("example-rate-limit: {e}");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}
