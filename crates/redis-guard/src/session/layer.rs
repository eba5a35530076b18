//! [`SessionLayer`]: the tower layer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::builder::SessionLayerBuilder;
use super::service::SessionService;
use super::shared::Shared;
use super::store::SessionStore;

/// Why a session layer cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionConfigError {
    /// The cookie settings do not work together.
    #[error("session cookie: {0}")]
    Cookie(String),
    /// A lifetime is zero or longer than [`MAX_LIFETIME`], the idle timeout is longer than the
    /// absolute lifetime, or the per-user cap is outside 1..=[`MAX_SESSIONS_PER_USER`].
    #[error("session lifetimes: {0}")]
    Lifetimes(String),
    /// The store's own settings cannot work (e.g. a zero Redis timeout), as
    /// [`SessionStore::check`] reports them.
    #[error("session store: {0}")]
    Store(String),
}

/// The longest idle timeout or absolute lifetime a layer accepts: 10 years. Expiries are
/// microseconds on the store's clock; far longer lifetimes would overflow them.
pub const MAX_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The largest per-user cap a layer accepts: indexing a session past the cap checks each of
/// the user's sessions, so the cap bounds that work.
pub const MAX_SESSIONS_PER_USER: u32 = 1024;

/// Cookie sessions backed by a [`SessionStore`]: puts a [`Session`](super::Session) into every
/// request and, after the handler, writes what changed and sets or removes the cookie.
///
/// ```
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
/// # Ok::<(), redis_guard::session::SessionConfigError>(())
/// ```
///
/// Customized:
///
/// ```
/// use redis_guard::session::{CookieConfig, FailurePolicy, MemorySessionStore, SessionLayer};
/// use std::time::Duration;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = SessionLayer::builder(MemorySessionStore::new())
///     .cookie(CookieConfig::default().host_prefixed())
///     .idle_timeout(Duration::from_secs(15 * 60))
///     .max_lifetime(Duration::from_secs(8 * 3600))
///     .failure_policy(FailurePolicy::Open)
///     .expose_user(true) // SessionUser in the extensions, for per-user rate limits
///     .build()?;
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone)]
pub struct SessionLayer {
    shared: Arc<Shared>,
}

impl SessionLayer {
    /// A layer with the default cookie (`__Host-id`, `HttpOnly`, `Secure`, `SameSite=Lax`), 30
    /// minutes idle, 24 hours absolute, [`FailurePolicy::Closed`](super::FailurePolicy::Closed).
    ///
    /// # Errors
    ///
    /// The store's settings cannot work (see [`SessionLayerBuilder::build`]).
    pub fn new(store: impl SessionStore) -> Result<Self, SessionConfigError> {
        Self::builder(store).build()
    }

    /// A builder: settings, then [`build`](SessionLayerBuilder::build).
    pub fn builder(store: impl SessionStore) -> SessionLayerBuilder {
        SessionLayerBuilder::new(Arc::new(store))
    }

    pub(crate) fn from_shared(shared: Shared) -> Self {
        Self {
            shared: Arc::new(shared),
        }
    }
}

impl<S> Layer<S> for SessionLayer {
    type Service = SessionService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SessionService::new(inner, Arc::clone(&self.shared))
    }
}

impl fmt::Debug for SessionLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLayer")
            .field("store", &self.shared.store)
            .field("life", &self.shared.life)
            .field("cookie", &self.shared.cookie)
            .field("failure", &self.shared.failure)
            .field("expose_user", &self.shared.expose_user)
            .finish()
    }
}
