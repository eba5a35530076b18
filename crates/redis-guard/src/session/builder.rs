//! How a [`SessionLayer`] is made: `new` with the defaults, or [`SessionLayerBuilder`] with
//! every setting, checked by `build`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::cookie::CookieConfig;
use super::shared::{Metadata, Shared};
use super::store::{Lifetimes, SessionStore};
use super::token::Transport;
use super::{FailurePolicy, SessionLayer};

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
    /// The store's own settings cannot work (e.g. a zero Redis timeout).
    #[error("session store: {0}")]
    Store(String),
    /// A header name of the [`Transport`] is not a valid header name, or cannot carry a token.
    #[error("session transport: {0}")]
    Transport(String),
}

/// The longest idle timeout or absolute lifetime a layer accepts: 10 years. Expiries are
/// microseconds on the store's clock; far longer lifetimes would overflow them.
pub const MAX_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The largest per-user cap a layer accepts: indexing a session past the cap checks each of
/// the user's sessions, so the cap bounds that work.
pub const MAX_SESSIONS_PER_USER: u32 = 1024;

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
        SessionLayerBuilder::new(store)
    }
}

/// Builds a [`SessionLayer`]; [`build`](Self::build) checks the settings.
#[must_use]
pub struct SessionLayerBuilder {
    store: Arc<dyn SessionStore>,
    life: Lifetimes,
    cookie: CookieConfig,
    transport: Transport,
    failure: FailurePolicy,
    expose_user: bool,
    metadata: Metadata,
}

impl SessionLayerBuilder {
    pub(crate) fn new(store: impl SessionStore) -> Self {
        Self {
            store: Arc::new(store),
            life: Lifetimes::default(),
            cookie: CookieConfig::default(),
            transport: Transport::default(),
            failure: FailurePolicy::default(),
            expose_user: false,
            metadata: Metadata::default(),
        }
    }

    setters! {
        /// The cookie's name and attributes.
        pub fn cookie(cookie: CookieConfig) => cookie;

        /// How the session id travels (default [`Transport::cookie`]): the cookie, or a token
        /// in `Authorization: Bearer` or a header you name, for API and mobile clients. A
        /// layer only knows the sessions its own transport created.
        ///
        /// ```
        /// use redis_guard::session::{MemorySessionStore, SessionLayer, Transport};
        ///
        /// let api = SessionLayer::builder(MemorySessionStore::new())
        ///     .transport(Transport::bearer())
        ///     .build()?;
        /// # let _ = api;
        /// # Ok::<(), redis_guard::session::SessionConfigError>(())
        /// ```
        pub fn transport(transport: Transport) => transport;

        /// Idle timeout (default 30 minutes; more than zero, at most the absolute lifetime).
        pub fn idle_timeout(idle: Duration) => life.idle;

        /// Absolute lifetime (default 24 hours; more than zero, at most [`MAX_LIFETIME`]).
        pub fn max_lifetime(max: Duration) => life.max;

        /// Sessions one user may hold at once (default 64, at most [`MAX_SESSIONS_PER_USER`]);
        /// past it, the live session closest to its absolute expiry ends. Sessions that are gone
        /// (logged out, rotated, expired) do not count.
        pub fn max_sessions_per_user(n: u32) => life.per_user;

        /// What to do when the store fails (default [`FailurePolicy::Closed`]).
        pub fn failure_policy(policy: FailurePolicy) => failure;

        /// Load the session before the handler when the request carries a cookie, and put the
        /// user ([`SessionUser`](super::SessionUser)) into the request extensions, where a rate
        /// limiter placed inside this layer can key on it. Costs the load round trip that the idle
        /// refresh would cost anyway.
        pub fn expose_user(on: bool) => expose_user;

        /// Whether each session keeps its client's user agent (default on), as listings show it
        /// ([`SessionInfo::user_agent`](super::SessionInfo::user_agent)): written with the
        /// session's writes, visible ASCII only, at most
        /// [`MAX_USER_AGENT_LEN`](super::MAX_USER_AGENT_LEN) bytes. Turn it off when the user
        /// agent counts as personal data you do not want to keep.
        pub fn record_user_agent(on: bool) => metadata.user_agent;

        /// The longest idle timeout or absolute lifetime one session may be given
        /// ([`Session::set_max_lifetime`](super::Session::set_max_lifetime)); longer ones are cut
        /// to it (default 30 days; more than zero, at most [`MAX_LIFETIME`]).
        pub fn lifetime_ceiling(ceiling: Duration) => life.ceiling;
    }

    /// How often a session's use is recorded (default: 1 % of the idle timeout; less than the
    /// idle timeout). A request within it of the last use recorded writes nothing, which is
    /// what most requests cost: one read. The last-seen time listings show, the client
    /// address, and the start of the idle timeout are as of the last use recorded, so a
    /// session may end up to this long before a full idle timeout after its very last request.
    ///
    /// ```
    /// use redis_guard::session::{MemorySessionStore, SessionLayer};
    /// use std::time::Duration;
    ///
    /// let layer = SessionLayer::builder(MemorySessionStore::new())
    ///     .last_seen_interval(Duration::from_secs(60))
    ///     .build()?;
    /// # Ok::<(), redis_guard::session::SessionConfigError>(())
    /// ```
    pub fn last_seen_interval(mut self, every: Duration) -> Self {
        self.life.seen_every = Some(every);
        self
    }

    /// How each session's client address is read (default: the TCP peer,
    /// [`ClientIp::peer`](crate::rate_limit::ClientIp::peer)); behind reverse proxies, give the
    /// same [`ClientIp`](crate::rate_limit::ClientIp) the rate limiter uses, so a client cannot
    /// write its own address into the listing. `None` keeps no address. The address is recorded
    /// with the session's writes (its creation, a login, any change, the atomic helpers), and
    /// after a load that records the use
    /// ([`last_seen_interval`](Self::last_seen_interval)): a client that moved and only reads
    /// costs one save then, at most once per interval.
    ///
    /// ```
    /// use redis_guard::rate_limit::ClientIp;
    /// use redis_guard::session::{MemorySessionStore, SessionLayer};
    ///
    /// let behind_proxy = SessionLayer::builder(MemorySessionStore::new())
    ///     .client_ip(Some(ClientIp::trusted_proxies(["10.0.0.0/8"])?))
    ///     .build();
    /// let no_addresses = SessionLayer::builder(MemorySessionStore::new())
    ///     .client_ip(None)
    ///     .build();
    /// # let _ = (behind_proxy, no_addresses);
    /// # Ok::<(), redis_guard::rate_limit::ProxyConfigError>(())
    /// ```
    #[cfg(feature = "rate-limit")]
    pub fn client_ip(mut self, ip: Option<crate::rate_limit::ClientIp>) -> Self {
        self.metadata.ip = ip;
        self
    }

    /// Checks the settings and builds the layer.
    ///
    /// # Errors
    ///
    /// Cookie attributes that do not work together, a transport header name that is not
    /// valid, lifetimes that cannot work (zero, over
    /// [`MAX_LIFETIME`], idle longer than absolute), a per-user cap outside
    /// 1..=[`MAX_SESSIONS_PER_USER`], or store settings that cannot work (e.g. a zero Redis
    /// timeout).
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
        let transport = self
            .transport
            .resolve()
            .map_err(SessionConfigError::Transport)?;
        self.store.check().map_err(SessionConfigError::Store)?;
        for (what, d) in [
            ("idle timeout", self.life.idle),
            ("absolute lifetime", self.life.max),
            ("lifetime ceiling", self.life.ceiling),
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
        if let Some(every) = self.life.seen_every
            && every >= self.life.idle
        {
            return Err(SessionConfigError::Lifetimes(format!(
                "last-seen interval {every:?} is not shorter than the idle timeout {:?}",
                self.life.idle
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
                #[cfg(feature = "metrics")]
                store: Arc::new(super::metered::Metered(self.store)),
                #[cfg(not(feature = "metrics"))]
                store: self.store,
                life: self.life,
                cookie: self.cookie,
                transport,
                failure: self.failure,
                expose_user: self.expose_user,
                metadata: self.metadata,
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
            .field("transport", &self.transport)
            .field("failure", &self.failure)
            .field("expose_user", &self.expose_user)
            .field("metadata", &self.metadata)
            .finish()
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
