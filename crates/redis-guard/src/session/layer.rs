//! [`SessionLayer`]: the tower layer.

use std::sync::Arc;

use super::service::Sessions;
use super::shared::Shared;

/// Cookie sessions backed by a [`SessionStore`](super::SessionStore): puts a [`Session`](super::Session) into every
/// request and, after the handler, writes what changed and sets or removes the cookie (or,
/// with a header [`Transport`](super::Transport), sends a new token in a response header).
///
/// ```
/// # #[cfg(feature = "axum")] {
/// use axum::{Router, routing::get};
/// use redis_guard::session::{MemorySessionStore, Session, SessionError, SessionLayer};
///
/// async fn handler(session: Session) -> Result<String, SessionError> {
///     Ok(format!("visit {}", session.increment("visits", 1).await?))
/// }
///
/// let app: Router = Router::new()
///     .route("/", get(handler))
///     .layer(SessionLayer::new(MemorySessionStore::new())?); // or RedisSessionStore::new(conn)
/// # }
/// # Ok::<(), redis_guard::ConfigError>(())
/// ```
///
/// Customized:
///
/// ```
/// use redis_guard::session::{FailurePolicy, MemorySessionStore, SessionLayer, Transport};
/// use std::time::Duration;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = SessionLayer::builder(MemorySessionStore::new())
///     .transport(Transport::cookie().host_prefixed())
///     .idle_timeout(Duration::from_secs(15 * 60))
///     .max_lifetime(Duration::from_secs(8 * 3600))
///     .failure_policy(FailurePolicy::Open)
///     .expose_user(true) // SessionUser in the extensions, for per-user rate limits
///     .build()?;
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone)]
pub struct SessionLayer {
    pub(crate) shared: Arc<Shared>,
}

impl_layer!(SessionLayer => Sessions, shared);
