//! Sessions in one file: `GET /` counts your visits, `POST /login/{name}` logs you in (a new
//! session id), `POST /logout` ends the session. In process; on Redis when `REDIS_URL` is set.

use axum::routing::{get, post};
use axum::{Router, extract::Path};
use redis_guard::backend::RedisConnection;
use redis_guard::session::{
    MemorySessionStore, RedisSessionStore, Session, SessionError, SessionLayer, SessionStore,
};
use std::{process::ExitCode, sync::Arc};

async fn visit(session: Session) -> Result<String, SessionError> {
    let visits = session.increment("visits", 1).await?; // atomic: no lost count
    let who = session.user().await?.unwrap_or_else(|| "anonymous".into());
    Ok(format!("hello {who}, visit {visits}\n"))
}

async fn login(session: Session, Path(name): Path<String>) -> Result<String, SessionError> {
    session.cycle_id().await?; // (check a password first) a new id on login: no fixation
    session.set_user(&name).await?; // `revoke_user(name)` can end every session of this user
    Ok(format!("logged in as {name}\n"))
}

async fn logout(session: Session) -> Result<&'static str, SessionError> {
    session.destroy().await?;
    Ok("logged out\n")
}

async fn run() -> Result<(), String> {
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let (store, backend): (Arc<dyn SessionStore>, &str) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => {
            let conn = RedisConnection::open_lazy(&url)
                .await
                .map_err(|e| format!("cannot connect to REDIS_URL: {e}"))?;
            (Arc::new(RedisSessionStore::new(conn)), "Redis")
        }
        _ => (Arc::new(MemorySessionStore::new()), "memory"),
    };
    let app = Router::new()
        .route("/", get(visit))
        .route("/login/{name}", post(login))
        .route("/logout", post(logout))
        .layer(SessionLayer::new(store).map_err(|e| e.to_string())?);
    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .map_err(|e| format!("cannot listen on BIND={bind:?}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{addr} (sessions, backend: {backend})");
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    if let Err(e) = run().await {
        eprintln!("example-sessions: {e}");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}
