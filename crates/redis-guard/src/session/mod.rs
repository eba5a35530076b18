//! Cookie (or header-token) sessions on Redis hashes: [`SessionLayer`], the [`Session`] handle,
//! and the stores.
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use axum::{Router, routing::{get, post}};
//! use redis_guard::session::{MemorySessionStore, Session, SessionError, SessionLayer};
//!
//! async fn login(session: Session) -> Result<&'static str, SessionError> {
//!     session.cycle_id().await?; // a new id on login: no fixation
//!     session.set_user("alice").await?;
//!     Ok("welcome")
//! }
//!
//! async fn logout(session: Session) -> Result<&'static str, SessionError> {
//!     session.destroy().await?;
//!     Ok("bye")
//! }
//!
//! let app: Router = Router::new()
//!     .route("/login", post(login))
//!     .route("/logout", post(logout))
//!     .layer(SessionLayer::new(MemorySessionStore::new())?);
//! # }
//! # Ok::<(), redis_guard::ConfigError>(())
//! ```
//!
//! What it does, and why:
//!
//! - **The cookie holds only a random id**: 256 bits from the OS CSPRNG, base64url. The store
//!   knows the session by the id's SHA-256, so a Redis dump or `MONITOR` never shows a usable
//!   token. Cookies default to `__Host-id` with `HttpOnly; Secure; SameSite=Lax; Path=/`, no
//!   `Domain` (see [`Transport`]): the `__Host-` prefix means no sibling subdomain can plant
//!   or overwrite the cookie.
//! - **Reading the cookie**: the `Cookie` header is read as bytes, so another cookie's odd
//!   value never hides ours; every well-formed value of our cookie counts, in order, and the
//!   first that names a live session wins (at most 4, one round trip each until
//!   found), so a planted id cannot shadow the real one.
//! - **One hash field per key.** After the handler only the changed fields are written (`HSET` /
//!   `HDEL`, one script, one round trip), so two concurrent requests that change different keys
//!   both keep their change; for the same key the last writer wins. `increment` is an atomic
//!   `HINCRBY`.
//! - **Round trips**: none for a request without a cookie whose handler does not touch the
//!   session; one to load (on Redis, one `HGETALL` without a script while the idle refresh is
//!   not due; two when it is: the read, then the script that refreshes); one to
//!   save. An untouched session that came with a cookie costs that load, after a successful
//!   response, to restart its idle timeout.
//! - **Two expiries**, both enforced by the store's own clock: an idle timeout (sliding) and an
//!   absolute lifetime. The Redis store marks a session used at most once per 1 % of its
//!   idle timeout, so most read-only requests write nothing, and most writes only their
//!   changes.
//! - **No resurrection**: a write that arrives after `destroy`, `revoke_user` or expiry is
//!   dropped; the session is never re-created and no cookie is re-issued for it. **No fixation**:
//!   a cookie naming an unknown id is never adopted; a fresh id is issued when something is
//!   stored.
//! - **Users**: `set_user` records the session under its user (the id is 1 to 256 bytes; stores
//!   key the index by its SHA-256); `revoke_user` ends all of them ("log out everywhere");
//!   [`RedisSessionStore::user_sessions`] lists them. [`SessionStore`] is sealed and has nothing
//!   to call: an admin task calls the store itself (`revoke_user`, `user_sessions`,
//!   `revoke_session`, `revoke_user_except` on either store, or on the `Arc<dyn SessionStore>`
//!   of an app that picks its store at run time), a handler its [`Session`]. The index follows
//!   `cycle_id` to the new id, and loses entries on `destroy`; entries of sessions that are gone
//!   are pruned before the per-user cap ([`SessionLayerBuilder::max_sessions_per_user`]) ends a
//!   live session. A session with a user is never handed to the client unless it is indexed.
//! - **Devices**: each session keeps, in reserved fields, when it was created and last used, the
//!   client's address (read with the same [`ClientIp`](crate::client_ip::ClientIp) as the rate
//!   limiter, so proxies are handled: [`SessionLayerBuilder::client_ip`]) and its user agent
//!   (visible ASCII, at most 256 bytes), plus a random public handle that
//!   survives id rotation. The last use is recorded by the load at most once per
//!   [`last_seen_interval`](SessionLayerBuilder::last_seen_interval) (a load within it is one
//!   read that writes nothing); the address and user agent, in one field, with the session's
//!   writes (its creation, a login, any change, the atomic helpers) and after a load that
//!   records the use: then, if the client has moved and nothing else is written, with one
//!   save of their own (at most once per interval). Address and user agent can be turned off for privacy
//!   ([`client_ip(None)`](SessionLayerBuilder::client_ip),
//!   [`record_user_agent(false)`](SessionLayerBuilder::record_user_agent)); the times are what
//!   the expiries run on. [`Session::sessions`] lists the user's sessions for a "your devices"
//!   page, the current one marked; [`Session::revoke_session`] ends one by its handle (never
//!   another user's), [`Session::revoke_other_sessions`] all but the current one.
//! - **Remember me**: [`Session::set_max_lifetime`] and [`Session::set_idle_timeout`] give one
//!   session its own lifetimes, up to the layer's
//!   [`lifetime_ceiling`](SessionLayerBuilder::lifetime_ceiling) (30 days by default); its
//!   cookie then carries `Max-Age` for the time left, so it survives a browser restart.
//!   [`Session::flush`] logs out and carries on with an empty anonymous session, for a message
//!   on the next page.
//! - **Revocation is airtight under concurrency**: `revoke_user` takes the user's index in one
//!   atomic step, then deletes the sessions. A login indexed at the same moment is either ended
//!   or stays in the index for the next revocation; a rotation racing a revocation ends the
//!   session. On a Redis Cluster the session keys and the index sit on different slots, so the
//!   steps are ordered such that a crash between any two leaves no session or an indexed one,
//!   never a live session that `revoke_user` cannot reach.
//! - **Atomic helpers**, each one step of the store on a stored session (one round trip):
//!   [`Session::take`] reads and deletes (flash messages, shown once even when two tabs load at
//!   once), [`Session::ensure`] sets if absent and returns the value that won,
//!   [`Session::compare_and_set`] sets if the key holds what was expected (as serialized JSON).
//!   A key changed earlier in the request, or a session not stored yet, is resolved in the
//!   request and written after the handler as usual.
//! - **CSRF** (synchronizer token): [`Session::csrf_token`] (256 random bits in a reserved
//!   field, one per session even under concurrent first requests) and
//!   [`Session::verify_csrf`] (constant time). With the `axum` feature, the `CsrfHeader` and
//!   `CsrfForm` extractors check a header or a field of the urlencoded body (never the query
//!   string) and answer a missing, wrong or foreign token with `403` before the handler runs,
//!   writing nothing. They refuse safe methods (`GET`, `HEAD`, `OPTIONS`, `TRACE`) with `403`
//!   too: a handler that serves them takes no CSRF extractor.
//! - **Caching**: a response that sets or removes the cookie carries `Vary: Cookie` and a
//!   `Cache-Control` that is `private` (the handler's `public` and `s-maxage` are removed) with
//!   `no-cache="Set-Cookie"` unless it already says `no-cache` or `no-store`. A response to a
//!   request that carried a session (cookie or token), or whose handler used the session, carries
//!   `Vary` with the credential header (`Cookie`, or the token's header); it is `private` too when
//!   the request carried a token, or a cookie whose session the handler used. The layer also
//!   tells a [`CacheLayer`](crate::cache::CacheLayer) inside or outside it which pages depend on a
//!   session, so that it never stores them (see
//!   [the cache docs](crate::cache#cache-and-sessions)).
//! - **Redis down**: `503` (default) or carry on without a session ([`FailurePolicy`]); every call
//!   has a timeout. After a failed load nothing is written and no cookie is set (the user's
//!   cookie stays); a failed idle refresh never changes a response; a failed save of changed
//!   data is a `503` under [`FailurePolicy::Closed`]. That `503` is the layer's only answer of
//!   its own: an `application/problem+json` body with `Retry-After: 1` and a [`Rejection`] in
//!   its extensions; [`SessionLayerBuilder::response`] writes it your way. The inner service's
//!   body, whatever its type, passes through in [`ResponseBody`].
//! - **Header tokens for API clients** ([`Transport`]): with
//!   [`SessionLayerBuilder::transport`]`(`[`Transport::bearer`]`())` the id travels as
//!   `Authorization: Bearer <token>` (or in a header you name); a new token comes back in the
//!   `session-token` response header, with `Cache-Control: no-store`, on creation and
//!   on `cycle_id`, and is dead after `destroy` or `revoke_user`. The store, the round trips and
//!   the guarantees above are the same. A session records the transport that created it (a
//!   reserved `$via` field, absent on cookie sessions) and a layer treats the other
//!   transport's sessions as unknown: a cookie id does not work as a token nor the reverse, so
//!   a cookie layer for the pages and a token layer for the API can share one store. A
//!   malformed or duplicated `Authorization` header is no session (the handler decides, e.g.
//!   `401`), never a 5xx or a write.
//! - **Memory store**: bounded ([`InProcessBuilder::capacity`](crate::backend::InProcessBuilder::capacity)); expired sessions leave a
//!   few at a time and, when full, the sessions closest to expiry are evicted, in O(log n) per
//!   session, never a scan of the table under its lock.
//! - **Configuration** is checked when the layer is built
//!   ([`SessionLayerBuilder::build`]): lifetimes over zero and at most 10 years, a
//!   `__Host-` cookie name with `Secure`, `Path=/` and no `Domain`, a Redis timeout over zero.
//!
//! What it does not defend against: a stolen cookie is a bearer credential until it expires,
//! is rotated or revoked (no binding to the client); a live session id planted through a channel
//! that can set `__Host-` cookies (the site itself, over HTTPS) is still tried first; with
//! [`Transport::secure`] off or a `Domain` set, the cookie is named `id` and sibling
//! subdomains can plant one; on Redis, a session whose user changes keeps its entry in the previous
//! user's index until it ends (revoking that user ends it too).

mod admin;
mod body;
mod builder;
mod cache_control;
mod cookie;
mod cookie_header;
mod csrf;
mod error;
mod future;
mod handle;
mod id;
mod layer;
mod memory_store;
mod memory_table;
mod memory_users;
#[cfg(feature = "metrics")]
mod metered;
mod policy;
mod redis_load;
mod redis_store;
mod rejection;
mod scripts;
mod service;
mod shared;
mod state;
mod store;
mod token;
mod user;

pub use body::ResponseBody;
pub use builder::SessionLayerBuilder;
pub use cookie::SameSite;
#[cfg(feature = "axum")]
pub use csrf::{CsrfConfig, CsrfForm, CsrfHeader, CsrfRejection};
pub use error::SessionError;
pub use future::ResponseFuture;
pub use handle::Session;
pub use id::SessionId;
pub use layer::SessionLayer;
pub use memory_store::MemorySessionStore;
pub use policy::FailurePolicy;
pub use redis_store::RedisSessionStore;
pub use rejection::Rejection;
pub use service::Sessions;
pub use store::{SessionInfo, SessionStore};
pub use token::Transport;
pub use user::SessionUser;
