//! Idempotent requests: [`IdempotencyLayer`] runs an unsafe request that carries an
//! `Idempotency-Key` once, and answers a retry of it with the stored response, on every
//! replica that shares the [`IdempotencyStore`]. It follows the IETF
//! [`Idempotency-Key` header draft](https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/):
//! a client that lost the answer to `POST /payments` sends the request again with the same key,
//! and is charged once.
//!
//! ```
//! # #[cfg(all(feature = "axum", feature = "session"))] {
//! use axum::{Router, routing::post};
//! use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
//! use redis_guard::session::{MemorySessionStore, SessionLayer};
//!
//! async fn pay() -> (http::StatusCode, &'static str) {
//!     (http::StatusCode::CREATED, r#"{"payment_id":"p_1"}"#) // runs once per key
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryIdempotencyStore::new(); // or RedisIdempotencyStore::new(backend), for replicas
//! let app: Router = Router::new()
//!     .route("/payments", post(pay))
//!     .layer(IdempotencyLayer::new(store)?)
//!     // Outside the idempotency layer: keys are scoped to the session's user.
//!     .layer(SessionLayer::new(MemorySessionStore::new())?);
//! # Ok(()) }
//! # }
//! ```
//!
//! # What a request gets
//!
//! For the methods the layer guards ([`methods`](IdempotencyLayerBuilder::methods): `POST` and
//! `PATCH` by default; every other method passes untouched):
//!
//! - **The first request with a key** claims it (one atomic step of the store: a script on
//!   Redis), runs, and its response is stored, then sent.
//! - **A duplicate while the first runs**, here or on another replica: `409 Conflict` with
//!   `Retry-After: 1`.
//! - **A duplicate after it completed**: the stored response (status, headers, body) with
//!   `idempotent-replayed: true` ([`replayed_header`](IdempotencyLayerBuilder::replayed_header)).
//! - **The key reused for another request** (another method, path, query or body), running or
//!   completed: `422 Unprocessable Content`.
//! - **No key**: `400` ([`required`](IdempotencyLayerBuilder::required), the default), or the
//!   request passes unguarded. A key that cannot be used is a `400` either way.
//! - **A body over [`body_limit`](IdempotencyLayerBuilder::body_limit)** (1 MiB): `413`.
//! - **The store failing** (Redis down or too slow, a value under the key that is not a
//!   record): `503` with `Retry-After: 1`, or the request unguarded with
//!   [`fail_open`](IdempotencyLayerBuilder::fail_open).
//! - **A new key while running requests fill the memory store** (its
//!   [capacity](MemoryIdempotencyStore::builder)): `503` with `Retry-After: 1`, also with
//!   `fail_open`. A running request's claim is never evicted to make room; completed records
//!   are, the oldest first.
//!
//! The layer's own answers are `application/problem+json` documents (RFC 9457), with the
//! [`Rejection`] in their extensions; [`response`](IdempotencyLayerBuilder::response) replaces
//! them.
//!
//! # The key
//!
//! The header holds the draft's Structured Field String (`Idempotency-Key: "8e03…"`) or a bare
//! token (`Idempotency-Key: 8e03…`: visible ASCII without `"`, `\`, `,` or `;`); both spell the
//! same key. 1 to 255 bytes, one header line, no parameters. Clients should send a fresh UUID
//! per operation.
//!
//! **Keys are scoped per client**: the same key from two clients names two records.
//!
//! - **By default, the session's user**: the [`SessionUser`](crate::session::SessionUser) a
//!   [`SessionLayer`](crate::session::SessionLayer) outside this layer exposes, else the user of
//!   its [`Session`](crate::session::Session) (feature `session`; the session is loaded for
//!   that). A request that reaches the layer **without a session** (the session layer sits
//!   inside this one, or there is none) is answered `500`
//!   ([`Rejection::NoSession`]; logged once, at `error`) and does not run: every client would
//!   otherwise share one scope, and one be replayed another's response. **A session without a
//!   user** (an anonymous visitor) is the anonymous scope, which every anonymous visitor shares:
//!   a client without a cookie gets a new session on each request, so a scope per session would
//!   run each of its retries again; among anonymous visitors the key alone tells them apart.
//!   Scope such routes otherwise (below) when their clients are not trusted to send fresh
//!   random keys, or when an anonymous response holds data of its own.
//! - [`scope_header`](IdempotencyLayerBuilder::scope_header) scopes by a header (an API key),
//!   [`scope`](IdempotencyLayerBuilder::scope) by what a closure says; a request without the
//!   header, or for which the closure says `None`, is in the anonymous scope.
//! - [`shared_scope`](IdempotencyLayerBuilder::shared_scope) puts every request in one scope,
//!   for routes without sessions whose clients pick fresh keys (a webhook receiver).
//!
//! Records are named by the SHA-256 of scope and key: neither shows in Redis.
//!
//! **The fingerprint** that binds a key to one request is the SHA-256 of the method, the path
//! and query the client asked for (with `axum`, the `OriginalUri` of a `nest`) and the body,
//! read up to [`body_limit`](IdempotencyLayerBuilder::body_limit). Headers are not in it.
//!
//! # What is stored, for how long
//!
//! - **Statuses**: every response below 500 is stored and replayed, but `408`, `409`, `425`
//!   and `429`, which say "try again". Those, a `5xx`, an error of the inner service (or a
//!   panic of it) **release** the key: the handler finished and asked for a retry, which runs
//!   again.
//! - **A client that goes away** (its own timeout, while the handler waits for a payment
//!   provider): hyper drops the request's future, but once a request has claimed its key it runs
//!   in a Tokio task of its own, to its stored response. The retry gets `409` while it runs
//!   and that response after; the key is never released because the client left. (Without a
//!   Tokio runtime the request runs in the response future, and dropping it releases the key.)
//! - **Headers**: all but the hop-by-hop ones (`Connection` and those it names, `Keep-Alive`,
//!   `Transfer-Encoding`, `TE`, `Trailer`, `Upgrade`, `Proxy-*`), `Content-Length` (written
//!   again) and **`Set-Cookie`**: a replay never hands out a cookie, which could bring back a
//!   session the first response started (or one since ended).
//! - **Body**: up to [`response_limit`](IdempotencyLayerBuilder::response_limit) (1 MiB),
//!   buffered before it is sent. A larger one, or one with trailers, streams through and
//!   releases the key (with a `warn`).
//! - **Times**: a running request holds its key for the
//!   [`lease`](IdempotencyLayerBuilder::lease) (60 s), so a replica that dies mid-request
//!   blocks it no longer; a completed one is kept for the
//!   [`retention`](IdempotencyLayerBuilder::retention) (24 h). Every Redis key has one of
//!   them as its TTL.
//!
//! # Layers around it
//!
//! Put the session layer (or whatever authenticates) **outside** this one, so the scope is
//! known: `.layer(idempotency).layer(sessions)` in axum (the last `.layer` is the outermost);
//! in the other order every guarded request is a `500`. A rate limit outside it counts
//! retries too, which is usually what you want. The inner service's request body must be
//! buildable from [`Bytes`](bytes::Bytes) (axum's `Body` is): see [`Idempotency`].
//!
//! # Limits
//!
//! - The lease is **not a fencing token**: a handler that runs longer than the lease lets a
//!   retry run a second time. Keep the lease above your slowest handler.
//! - Between the handler's side effects and the stored response there is a moment where a
//!   crash loses the response: the key then stays claimed until the lease ends, and the retry
//!   after that runs again. Handlers that must never run twice also record their effect
//!   (a payment id) in their own database.
//! - In memory, records live in this process only ([`MemoryIdempotencyStore`]): replicas need
//!   [`RedisIdempotencyStore`].

mod body;
mod flow;
mod future;
mod key;
mod layer;
mod record;
mod rejection;
mod service;
mod store;

pub use body::ResponseBody;
pub use future::ResponseFuture;
pub use layer::{IdempotencyLayer, IdempotencyLayerBuilder};
pub use rejection::Rejection;
pub use service::Idempotency;
pub use store::{IdempotencyStore, MemoryIdempotencyStore, RedisIdempotencyStore};
