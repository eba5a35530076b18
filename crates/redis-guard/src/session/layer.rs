//! [`SessionLayer`] and its builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::cookie::CookieConfig;
use super::service::SessionService;
use super::session::Shared;
use super::store::{Lifetimes, SessionStore};

/// What to do when the session store fails (Redis down, slow or answering nonsense).
///
/// Whatever the policy:
///
/// - After a failed **load**, nothing is written for the rest of the request and no
///   `Set-Cookie` is sent: the client's cookie may name a perfectly good session, and replacing
///   it with a new one would log the user out.
/// - A failed **idle refresh** (the one round trip after a response whose handler never touched
///   the session) never changes the response; it is logged at `warn`. The session keeps its
///   previous idle deadline.
/// - A session that gets a user but cannot be indexed under it is never handed to the client
///   (no `Set-Cookie`), since `revoke_user` could not reach it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreFailure {
    /// Answer `503 Service Unavailable` with `Retry-After: 1` (the default): a request that
    /// needed its session is not served without it. This covers a failed load that the handler
    /// saw as an error, and a failed **save** of changed data after the handler: the handler
    /// believes its changes are stored, so its response (say, "logged in") would be a lie.
    /// The handler's side effects have happened by then; make handlers idempotent or save
    /// critical state elsewhere.
    #[default]
    ServiceUnavailable,
    /// Carry on as if the request had no session (reads see nothing, writes are dropped, no
    /// cookie is set) and log a warning: for sites where sessions are a convenience. A failed
    /// save keeps the handler's response and sends no cookie.
    ContinueWithoutSession,
}

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
///     .layer(SessionLayer::new(MemorySessionStore::new())); // or RedisSessionStore::new(conn)
/// ```
///
/// Customized:
///
/// ```
/// use redis_guard::session::{CookieConfig, MemorySessionStore, SessionLayer, StoreFailure};
/// use std::time::Duration;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = SessionLayer::builder(MemorySessionStore::new())
///     .cookie(CookieConfig::default().host_prefixed())
///     .idle_timeout(Duration::from_secs(15 * 60))
///     .max_lifetime(Duration::from_secs(8 * 3600))
///     .on_store_error(StoreFailure::ContinueWithoutSession)
///     .expose_user(true) // SessionUser in the extensions, for per-user rate limits
///     .build()?;
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone)]
pub struct SessionLayer {
    shared: Arc<Shared>,
}

impl SessionLayer {
    /// A layer with the default cookie, 30 minutes idle, 24 hours absolute. It does not run
    /// [`SessionStore::check`]: use [`builder`](Self::builder) to have the store's settings
    /// checked too.
    #[must_use]
    pub fn new(store: impl SessionStore) -> Self {
        Self {
            shared: Arc::new(Shared {
                store: Arc::new(store),
                life: Lifetimes::default(),
                cookie: CookieConfig::default(),
                on_store_error: StoreFailure::default(),
                expose_user: false,
            }),
        }
    }

    /// A builder for other settings.
    pub fn builder(store: impl SessionStore) -> SessionLayerBuilder {
        SessionLayerBuilder {
            store: Arc::new(store),
            life: Lifetimes::default(),
            cookie: CookieConfig::default(),
            on_store_error: StoreFailure::default(),
            expose_user: false,
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
            .field("on_store_error", &self.shared.on_store_error)
            .finish()
    }
}

/// Builds a [`SessionLayer`]; [`build`](Self::build) checks the settings.
#[must_use]
pub struct SessionLayerBuilder {
    store: Arc<dyn SessionStore>,
    life: Lifetimes,
    cookie: CookieConfig,
    on_store_error: StoreFailure,
    expose_user: bool,
}

impl SessionLayerBuilder {
    /// The cookie's name and attributes.
    pub fn cookie(mut self, cookie: CookieConfig) -> Self {
        self.cookie = cookie;
        self
    }

    /// Idle timeout (default 30 minutes; more than zero, at most the absolute lifetime).
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.life.idle = idle;
        self
    }

    /// Absolute lifetime (default 24 hours; more than zero, at most [`MAX_LIFETIME`]).
    pub fn max_lifetime(mut self, max: Duration) -> Self {
        self.life.max = max;
        self
    }

    /// Sessions one user may hold at once (default 64, at most [`MAX_SESSIONS_PER_USER`]);
    /// past it, the live session closest to its absolute expiry ends. Sessions that are gone
    /// (logged out, rotated, expired) do not count.
    pub fn max_sessions_per_user(mut self, n: u32) -> Self {
        self.life.per_user = n;
        self
    }

    /// What to do when the store fails (default [`StoreFailure::ServiceUnavailable`]).
    pub fn on_store_error(mut self, policy: StoreFailure) -> Self {
        self.on_store_error = policy;
        self
    }

    /// Load the session before the handler when the request carries a cookie, and put the
    /// user ([`SessionUser`](super::SessionUser)) into the request extensions, where a rate
    /// limiter placed inside this layer can key on it. Costs the load round trip that the idle
    /// refresh would cost anyway.
    pub fn expose_user(mut self, on: bool) -> Self {
        self.expose_user = on;
        self
    }

    /// Checks the settings and builds the layer.
    ///
    /// # Errors
    ///
    /// Cookie attributes that do not work together, lifetimes that cannot work (zero, over
    /// [`MAX_LIFETIME`], idle longer than absolute), a per-user cap outside
    /// 1..=[`MAX_SESSIONS_PER_USER`], or store settings that cannot work
    /// ([`SessionStore::check`]).
    ///
    /// ```
    /// use redis_guard::session::{MemorySessionStore, SessionLayer};
    /// use std::time::Duration;
    ///
    /// let err = SessionLayer::builder(MemorySessionStore::new())
    ///     .max_lifetime(Duration::from_secs(300_000_000 * 86_400))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("longer than 10 years"));
    /// ```
    pub fn build(self) -> Result<SessionLayer, SessionConfigError> {
        self.cookie.validate().map_err(SessionConfigError::Cookie)?;
        self.store.check().map_err(SessionConfigError::Store)?;
        for (what, d) in [
            ("idle timeout", self.life.idle),
            ("absolute lifetime", self.life.max),
        ] {
            if d.is_zero() {
                return Err(SessionConfigError::Lifetimes(format!(
                    "{what} {d:?} must be positive"
                )));
            }
            if d > MAX_LIFETIME {
                return Err(SessionConfigError::Lifetimes(format!(
                    "{what} {d:?} is longer than 10 years ({MAX_LIFETIME:?})"
                )));
            }
        }
        if self.life.idle > self.life.max {
            return Err(SessionConfigError::Lifetimes(format!(
                "idle timeout {:?} is longer than the absolute lifetime {:?}",
                self.life.idle, self.life.max
            )));
        }
        if self.life.per_user == 0 || self.life.per_user > MAX_SESSIONS_PER_USER {
            return Err(SessionConfigError::Lifetimes(format!(
                "max sessions per user {} is not within 1..={MAX_SESSIONS_PER_USER}",
                self.life.per_user
            )));
        }
        Ok(SessionLayer {
            shared: Arc::new(Shared {
                store: self.store,
                life: self.life,
                cookie: self.cookie,
                on_store_error: self.on_store_error,
                expose_user: self.expose_user,
            }),
        })
    }
}

impl fmt::Debug for SessionLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLayerBuilder")
            .field("store", &self.store)
            .field("life", &self.life)
            .field("cookie", &self.cookie)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::MemorySessionStore;

    fn build(
        f: impl FnOnce(SessionLayerBuilder) -> SessionLayerBuilder,
    ) -> Result<SessionLayer, SessionConfigError> {
        f(SessionLayer::builder(MemorySessionStore::new())).build()
    }

    /// Issue 7, item 8: lifetimes that overflow the store's clock, or make no sense, fail at
    /// build with the bad value in the message.
    #[test]
    fn lifetimes_are_validated() {
        let centuries = Duration::from_secs(300_000_000 * 86_400);
        let err = build(|b| b.max_lifetime(centuries).idle_timeout(centuries))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("{centuries:?}")), "{err}");
        let err = build(|b| b.idle_timeout(Duration::ZERO)).unwrap_err();
        assert!(err.to_string().contains("0ns"), "{err}");
        let err = build(|b| b.max_lifetime(Duration::ZERO)).unwrap_err();
        assert!(err.to_string().contains("0ns"), "{err}");
        let err = build(|b| b.idle_timeout(Duration::from_secs(172_800))).unwrap_err();
        assert!(err.to_string().contains("172800s"), "{err}");
        assert!(build(|b| b.max_sessions_per_user(0)).is_err());
        assert!(build(|b| b.max_sessions_per_user(100_000)).is_err());
        let ten_years = Duration::from_secs(10 * 365 * 86_400);
        assert!(build(|b| b.max_lifetime(ten_years)).is_ok());
    }
}
