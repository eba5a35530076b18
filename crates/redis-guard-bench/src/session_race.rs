//! Lost writes when two concurrent requests on one session change different keys.
//!
//! A session store that keeps the whole session as one blob loses one of two concurrent writes:
//! both requests load the same snapshot, each adds its own key, and the last save overwrites the
//! first. A store with one Redis hash field per key keeps both. This module measures
//! it, without sleeps or timing luck.
//!
//! # The protocol an app under test serves
//!
//! | route | what the handler does |
//! | --- | --- |
//! | `POST /race/start` | creates a fresh session (stores something in it), so the response sets the session cookie; 2xx |
//! | `POST /race/write/{field}` | `field` is `a` or `b`: **loads** the session (reads a key), waits on a shared [`RaceBarrier`], then inserts `field` and returns 2xx; the session layer saves after the handler |
//! | `GET /race/read` | `200`, JSON `{"a": bool, "b": bool}`: which of the two fields the session holds |
//!
//! The barrier is the point: both writers hold a loaded session before either of them changes
//! it, so the saves always overlap in the worst way a real deployment can produce. One barrier
//! per app instance is enough because [`lost_writes`] sends exactly two writes at a time and waits
//! for both answers before the next round.
//!
//! [`lost_writes`] drives the rounds; [`tower_sessions_app`] serves the protocol with
//! `tower-sessions` 0.14 and `tower-sessions-redis-store` 0.16, [`redis_guard_app`] with
//! redis-guard's sessions; [`serve`] puts any router on a loopback port.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use redis_guard_testkit::http::{self, RawResponse};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::Barrier;
use tokio::task::JoinHandle;
use tower_sessions::{Session, SessionManagerLayer};
use tower_sessions_redis_store::RedisStore;
use tower_sessions_redis_store::fred::prelude::{ClientLike, Config, Pool};

/// How long a writer waits for its partner at the [`RaceBarrier`] before giving up.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(5);

/// The outcome of [`lost_writes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaceReport {
    /// Rounds run; each round sends two writes.
    pub rounds: usize,
    /// Writes that were acknowledged (2xx) but are missing from the session afterwards.
    pub lost_writes: usize,
}

impl RaceReport {
    /// Writes sent: two per round.
    #[must_use]
    pub fn writes(&self) -> usize {
        self.rounds * 2
    }
}

/// The rendezvous of the two concurrent writers of a round: each one waits here after loading the
/// session and before changing it.
///
/// Cheap to clone: clones share one `tokio::sync::Barrier` for two parties. Create one per app
/// instance.
#[derive(Clone, Debug)]
pub struct RaceBarrier {
    barrier: Arc<Barrier>,
}

impl RaceBarrier {
    /// A barrier for two writers.
    #[must_use]
    pub fn new() -> Self {
        Self {
            barrier: Arc::new(Barrier::new(2)),
        }
    }

    /// Waits until the other writer of the round arrives, or [`BARRIER_TIMEOUT`] passes.
    ///
    /// # Errors
    ///
    /// The partner did not arrive in time (the driver sent one write, or the app handles writes
    /// one at a time). The barrier should not be reused after that.
    pub async fn wait(&self) -> Result<(), String> {
        tokio::time::timeout(BARRIER_TIMEOUT, self.barrier.wait())
            .await
            .map(drop)
            .map_err(|_| {
                format!(
                    "the other writer did not reach the barrier within {BARRIER_TIMEOUT:?}: \
                     the two writes of a round must be handled concurrently"
                )
            })
    }
}

impl Default for RaceBarrier {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs `rounds` rounds of the protocol (see the [module docs](self)) against the app at `base`
/// and counts the writes that went missing.
///
/// Each round: `POST /race/start` and keep its cookies; send `POST /race/write/a` and
/// `POST /race/write/b` at the same time, on two TCP connections, with those cookies; then
/// `GET /race/read`. Every field the read reports absent is one lost write.
///
/// # Errors
///
/// A connection or parse failure, a non-2xx answer, or a start that set no cookie; the message
/// names the round and the request.
pub async fn lost_writes(base: SocketAddr, rounds: usize) -> Result<RaceReport, String> {
    let mut lost = 0;
    for round in 0..rounds {
        lost += race_round(base)
            .await
            .map_err(|e| format!("round {round}: {e}"))?;
    }
    Ok(RaceReport {
        rounds,
        lost_writes: lost,
    })
}

/// What `GET /race/read` answers.
#[derive(Debug, Deserialize)]
struct Fields {
    a: bool,
    b: bool,
}

/// One round; returns how many of its two writes are missing.
async fn race_round(base: SocketAddr) -> Result<usize, String> {
    let start = call(base, "POST", "/race/start", &[]).await?;
    let cookie = cookie_header(&start)?;
    let headers: [(&str, &[u8]); 1] = [("Cookie", cookie.as_bytes())];

    let (a, b) = tokio::join!(
        call(base, "POST", "/race/write/a", &headers),
        call(base, "POST", "/race/write/b", &headers),
    );
    a?;
    b?;

    let read = call(base, "GET", "/race/read", &headers).await?;
    let fields: Fields = serde_json::from_slice(&read.body)
        .map_err(|e| format!("GET /race/read: bad body {:?}: {e}", read.text()))?;
    Ok(usize::from(!fields.a) + usize::from(!fields.b))
}

/// Sends one request on its own connection and insists on a 2xx answer.
async fn call(
    base: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
) -> Result<RawResponse, String> {
    let response = http::request(base, method, path, headers, b"")
        .await
        .map_err(|e| format!("{method} {path}: {e}"))?;
    if (200..300).contains(&response.status) {
        Ok(response)
    } else {
        Err(format!(
            "{method} {path}: status {}, body {:?}",
            response.status,
            response.text()
        ))
    }
}

/// The `Cookie` request header that echoes every cookie `response` sets (`name=value; …`), or
/// `None` when it sets none. The throughput harness sends the same header.
pub(crate) fn echo_cookies(response: &RawResponse) -> Option<String> {
    let pairs: Vec<&str> = response
        .headers_named("set-cookie")
        .into_iter()
        .filter_map(|c| c.split(';').next())
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .collect();
    (!pairs.is_empty()).then(|| pairs.join("; "))
}

/// The `Cookie` request header that echoes every cookie `response` sets (`name=value; …`).
fn cookie_header(response: &RawResponse) -> Result<String, String> {
    match echo_cookies(response) {
        None => Err("POST /race/start set no cookie: it must create the session".to_owned()),
        Some(header) => Ok(header),
    }
}

/// The key `/race/start` stores and `/race/write/{field}` reads, so the session exists and is
/// loaded before the barrier.
const STARTED: &str = "started";

/// The protocol served by `tower-sessions` 0.14 with `tower-sessions-redis-store` 0.16 on the
/// Redis at `redis_url` (a `redis://` URL), through a fred pool of two connections.
///
/// The cookie is not `Secure`, so the driver can send it back over plain HTTP on loopback. Each
/// call builds its own [`RaceBarrier`].
///
/// # Errors
///
/// The URL is invalid, or Redis cannot be reached.
pub async fn tower_sessions_app(redis_url: &str) -> Result<Router, String> {
    Ok(race_router::<Session>().layer(tower_sessions_layer(redis_url).await?))
}

/// The `tower-sessions` layer both measurements use: `tower-sessions-redis-store` on the Redis
/// at `redis_url`, through a fred pool of two connections, with a cookie that is not `Secure`.
///
/// # Errors
///
/// The URL is invalid, or Redis cannot be reached.
pub async fn tower_sessions_layer(
    redis_url: &str,
) -> Result<SessionManagerLayer<RedisStore<Pool>>, String> {
    let config = Config::from_url(redis_url).map_err(|e| format!("redis url {redis_url}: {e}"))?;
    let pool = Pool::new(config, None, None, None, 2).map_err(|e| format!("fred pool: {e}"))?;
    // `init` connects every client and returns once they are ready; the connection tasks keep
    // running in the background for as long as the pool lives.
    let _connection_task = pool
        .init()
        .await
        .map_err(|e| format!("connecting to {redis_url}: {e}"))?;
    Ok(SessionManagerLayer::new(RedisStore::new(pool)).with_secure(false))
}

/// The protocol served by redis-guard's own [`SessionLayer`](redis_guard::session::SessionLayer)
/// on a [`RedisSessionStore`](redis_guard::session::RedisSessionStore) at `redis_url`, through a
/// `ConnectionManager`. The cookie is not `Secure`, as in [`tower_sessions_app`].
///
/// # Errors
///
/// The URL is invalid, or Redis cannot be reached.
pub async fn redis_guard_app(redis_url: &str) -> Result<Router, String> {
    Ok(race_router::<redis_guard::session::Session>()
        .layer(redis_guard_session_layer(redis_url).await?))
}

/// redis-guard's [`SessionLayer`](redis_guard::session::SessionLayer) as both measurements use
/// it: a [`RedisSessionStore`](redis_guard::session::RedisSessionStore) at `redis_url` through a
/// `ConnectionManager`, defaults except a cookie that is not `Secure` (as
/// [`tower_sessions_layer`]).
///
/// # Errors
///
/// The URL is invalid, or Redis cannot be reached.
pub async fn redis_guard_session_layer(
    redis_url: &str,
) -> Result<redis_guard::session::SessionLayer, String> {
    use redis_guard::session::{RedisSessionStore, SessionLayer, Transport};
    let conn = redis_guard::backend::RedisConnection::open(redis_url)
        .await
        .map_err(|e| format!("connecting to {redis_url}: {e}"))?;
    SessionLayer::builder(RedisSessionStore::new(crate::throughput::backend(conn)))
        .transport(Transport::cookie().secure(false))
        .build()
        .map_err(|e| format!("session layer: {e}"))
}

/// The session calls the race handlers make, on either library's `Session` extractor.
trait RaceSession: FromRequestParts<RaceBarrier> + Send + Sync + 'static {
    /// Stores `true` under `key`.
    fn set(&self, key: &str) -> impl Future<Output = Result<(), SessionFailure>> + Send;
    /// The flag stored under `key`, if any.
    fn flag(&self, key: &str) -> impl Future<Output = Result<Option<bool>, SessionFailure>> + Send;
}

/// A 500 carrying a session error.
type SessionFailure = (StatusCode, String);

fn session_error(e: &impl std::fmt::Display) -> SessionFailure {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("session error: {e}"),
    )
}

impl RaceSession for Session {
    async fn set(&self, key: &str) -> Result<(), SessionFailure> {
        self.insert(key, true).await.map_err(|e| session_error(&e))
    }

    async fn flag(&self, key: &str) -> Result<Option<bool>, SessionFailure> {
        self.get(key).await.map_err(|e| session_error(&e))
    }
}

impl RaceSession for redis_guard::session::Session {
    async fn set(&self, key: &str) -> Result<(), SessionFailure> {
        self.insert(key, &true).await.map_err(|e| session_error(&e))
    }

    async fn flag(&self, key: &str) -> Result<Option<bool>, SessionFailure> {
        self.get(key).await.map_err(|e| session_error(&e))
    }
}

/// The three routes of the protocol on session type `S`, with a fresh [`RaceBarrier`].
fn race_router<S: RaceSession>() -> Router {
    Router::new()
        .route("/race/start", post(race_start::<S>))
        .route("/race/write/{field}", post(race_write::<S>))
        .route("/race/read", get(race_read::<S>))
        .with_state(RaceBarrier::new())
}

async fn race_start<S: RaceSession>(session: S) -> Result<StatusCode, SessionFailure> {
    session.set(STARTED).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn race_write<S: RaceSession>(
    State(barrier): State<RaceBarrier>,
    Path(field): Path<String>,
    session: S,
) -> Result<StatusCode, SessionFailure> {
    if field != "a" && field != "b" {
        return Err((StatusCode::NOT_FOUND, format!("no field {field:?}")));
    }
    // tower-sessions loads lazily: this read makes it fetch the record now, before the barrier.
    if session.flag(STARTED).await? != Some(true) {
        return Err((
            StatusCode::CONFLICT,
            "no started session: POST /race/start first and send its cookie".to_owned(),
        ));
    }
    barrier
        .wait()
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e))?;
    session.set(&field).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn race_read<S: RaceSession>(session: S) -> Result<impl IntoResponse, SessionFailure> {
    let a = session.flag("a").await?.unwrap_or(false);
    let b = session.flag("b").await?.unwrap_or(false);
    Ok((
        [(CONTENT_TYPE, "application/json")],
        format!(r#"{{"a":{a},"b":{b}}}"#),
    ))
}

/// Serves `router` on `127.0.0.1:<free port>` in a background task; returns the address and the
/// task (abort it to stop serving).
///
/// # Panics
///
/// No loopback port can be bound.
pub async fn serve(router: Router) -> (SocketAddr, JoinHandle<()>) {
    #[allow(clippy::expect_used)]
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding 127.0.0.1:0");
    #[allow(clippy::expect_used)]
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("redis-guard-bench: serving {addr} failed: {e}");
        }
    });
    (addr, task)
}
