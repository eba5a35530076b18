//! How a [`SessionLayer`] is made: `new` with the defaults, or [`SessionLayerBuilder`] with
//! every setting, checked by `build`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;

use super::shared::{Metadata, Shared};
use super::store::{Lifetimes, SessionStore};
use super::token::Transport;
use super::{FailurePolicy, Rejection, SessionLayer};
use crate::problem::Respond;
use crate::{ConfigError, ConfigErrorKind};

/// A lifetime setting that cannot work: `setting` is `value`.
fn lifetimes(
    kind: ConfigErrorKind,
    message: String,
    setting: &'static str,
    value: impl fmt::Debug,
) -> Result<SessionLayer, ConfigError> {
    Err(ConfigError::new(kind, message)
        .with_setting(setting)
        .with_debug_value(value)
        .within("session lifetimes"))
}

/// The longest idle timeout or absolute lifetime a layer accepts: 10 years. Expiries are
/// microseconds on the store's clock; far longer lifetimes would overflow them.
pub(crate) const MAX_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The largest per-user cap a layer accepts: indexing a session past the cap checks each of
/// the user's sessions, so the cap bounds that work.
pub(crate) const MAX_SESSIONS_PER_USER: u32 = 1024;

impl SessionLayer {
    /// A layer with the default cookie (`__Host-id`, `HttpOnly`, `Secure`, `SameSite=Lax`), 30
    /// minutes idle, 24 hours absolute, [`FailurePolicy::Closed`](super::FailurePolicy::Closed).
    ///
    /// # Errors
    ///
    /// The store's settings cannot work (see [`SessionLayerBuilder::build`]).
    pub fn new(store: impl SessionStore) -> Result<Self, ConfigError> {
        Self::builder(store).build()
    }

    /// A builder: settings, then [`build`](SessionLayerBuilder::build).
    pub fn builder(store: impl SessionStore) -> SessionLayerBuilder {
        SessionLayerBuilder::new(store)
    }
}

/// Builds a [`SessionLayer`]; [`build`](Self::build) checks the settings.
#[derive(Debug)]
#[must_use]
pub struct SessionLayerBuilder {
    store: Arc<dyn SessionStore>,
    life: Lifetimes,
    transport: Transport,
    failure: FailurePolicy,
    expose_user: bool,
    metadata: Metadata,
    response: Option<Respond<Rejection>>,
}

impl SessionLayerBuilder {
    pub(crate) fn new(store: impl SessionStore) -> Self {
        Self {
            store: Arc::new(store),
            life: Lifetimes::default(),
            transport: Transport::default(),
            failure: FailurePolicy::default(),
            expose_user: false,
            metadata: Metadata::default(),
            response: None,
        }
    }

    setters! {
        /// How the session id travels (default [`Transport::cookie`]): the cookie, with its
        /// name and attributes, or a token in `Authorization: Bearer` or a header you name, for
        /// API and mobile clients. A layer only knows the sessions its own transport created.
        ///
        /// ```
        /// use redis_guard::session::{MemorySessionStore, SameSite, SessionLayer, Transport};
        ///
        /// let pages = SessionLayer::builder(MemorySessionStore::new())
        ///     .transport(Transport::cookie().same_site(SameSite::Strict))
        ///     .build()?;
        /// let api = SessionLayer::builder(MemorySessionStore::new())
        ///     .transport(Transport::bearer())
        ///     .build()?;
        /// # let _ = (pages, api);
        /// # Ok::<(), redis_guard::ConfigError>(())
        /// ```
        pub fn transport(transport: Transport) => transport;

        /// Idle timeout (default 30 minutes; more than zero, at most the absolute lifetime).
        pub fn idle_timeout(idle: Duration) => life.idle;

        /// Absolute lifetime (default 24 hours; more than zero, at most 10 years).
        pub fn max_lifetime(max: Duration) => life.max;

        /// Sessions one user may hold at once (default 64, at most 1024, a bound on the
        /// work of indexing a session past the cap); past it, the live session closest to its absolute expiry ends. Sessions that are gone
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
        /// 256 bytes. Turn it off when the user
        /// agent counts as personal data you do not want to keep.
        pub fn record_user_agent(on: bool) => metadata.user_agent;

        /// The longest idle timeout or absolute lifetime one session may be given
        /// ([`Session::set_max_lifetime`](super::Session::set_max_lifetime)); longer ones are cut
        /// to it (default 30 days; more than zero, at most 10 years).
        pub fn lifetime_ceiling(ceiling: Duration) => life.ceiling;
    }

    /// How often a session's use is recorded (default: 1 % of the idle timeout; less than the
    /// idle timeout). A request within it of the last use recorded writes nothing, which is
    /// what most requests cost: one read; on Redis, one that changes the session writes its
    /// changes alone. The last-seen time listings show, the client
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
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    pub fn last_seen_interval(mut self, every: Duration) -> Self {
        self.life.seen_every = Some(every);
        self
    }

    /// How each session's client address is read (default: the TCP peer,
    /// [`ClientIp::peer`](crate::client_ip::ClientIp::peer)); behind reverse proxies, give the
    /// same [`ClientIp`](crate::client_ip::ClientIp) the rate limiter uses, so a client cannot
    /// write its own address into the listing. `None` keeps no address. The address is recorded
    /// with the session's writes (its creation, a login, any change, the atomic helpers), and
    /// after a load that records the use
    /// ([`last_seen_interval`](Self::last_seen_interval)): a client that moved and only reads
    /// costs one save then, at most once per interval.
    ///
    /// ```
    /// use redis_guard::client_ip::ClientIp;
    /// use redis_guard::session::{MemorySessionStore, SessionLayer};
    ///
    /// let behind_proxy = SessionLayer::builder(MemorySessionStore::new())
    ///     .client_ip(Some(ClientIp::trusted_proxies(["10.0.0.0/8"])?))
    ///     .build();
    /// let no_addresses = SessionLayer::builder(MemorySessionStore::new())
    ///     .client_ip(None)
    ///     .build();
    /// # let _ = (behind_proxy, no_addresses);
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    pub fn client_ip(mut self, ip: Option<crate::client_ip::ClientIp>) -> Self {
        self.metadata.ip = ip;
        self
    }

    /// Writes the layer's own answers: `build` gets the [`Rejection`] (the store unavailable
    /// under [`FailurePolicy::Closed`]) and returns the response, in place of the default
    /// `application/problem+json` one ([`Rejection::response`]). The layer adds
    /// `Retry-After: 1` where the answer has none, and puts the rejection in its extensions.
    ///
    /// ```
    /// use redis_guard::session::{MemorySessionStore, Rejection, SessionLayer};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = SessionLayer::builder(MemorySessionStore::new()) // RedisSessionStore in production
    ///     .response(|rejection: &Rejection| {
    ///         http::Response::builder()
    ///             .status(rejection.status())
    ///             .header("content-type", "text/html")
    ///             .body("<h1>Back in a moment</h1>".into())
    ///             .unwrap_or_default()
    ///     })
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn response<F>(mut self, build: F) -> Self
    where
        F: Fn(&Rejection) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.response = Some(Respond::new(build));
        self
    }

    /// Checks the settings and builds the layer.
    ///
    /// # Errors
    ///
    /// Cookie attributes that do not work together, a transport header name that is not
    /// valid, lifetimes that cannot work (zero, over
    /// 10 years, idle longer than absolute), a per-user cap outside 1..=1024, or store settings
    /// that cannot work (e.g. a zero Redis timeout).
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
    pub fn build(self) -> Result<SessionLayer, ConfigError> {
        self.transport
            .check_cookie()
            .map_err(|e| e.within("session cookie"))?;
        let transport = self
            .transport
            .resolve()
            .map_err(|e| e.within("session transport"))?;
        self.store.check().map_err(|e| e.within("session store"))?;
        for (what, d, setting) in [
            (
                "idle timeout",
                self.life.idle,
                "SessionLayerBuilder::idle_timeout",
            ),
            (
                "absolute lifetime",
                self.life.max,
                "SessionLayerBuilder::max_lifetime",
            ),
            (
                "lifetime ceiling",
                self.life.ceiling,
                "SessionLayerBuilder::lifetime_ceiling",
            ),
        ] {
            let duration = ConfigErrorKind::Duration;
            if d.is_zero() {
                return lifetimes(
                    duration,
                    format!("{what} {d:?} must be positive"),
                    setting,
                    d,
                );
            }
            if d > MAX_LIFETIME {
                let message = format!("{what} {d:?} is longer than 10 years ({MAX_LIFETIME:?})");
                return lifetimes(duration, message, setting, d);
            }
        }
        if self.life.idle > self.life.max {
            return lifetimes(
                ConfigErrorKind::Duration,
                format!(
                    "idle timeout {:?} is longer than the absolute lifetime {:?}",
                    self.life.idle, self.life.max
                ),
                "SessionLayerBuilder::idle_timeout",
                self.life.idle,
            );
        }
        if let Some(every) = self.life.seen_every
            && every >= self.life.idle
        {
            return lifetimes(
                ConfigErrorKind::Duration,
                format!(
                    "last-seen interval {every:?} is not shorter than the idle timeout {:?}",
                    self.life.idle
                ),
                "SessionLayerBuilder::last_seen_interval",
                every,
            );
        }
        if self.life.per_user == 0 || self.life.per_user > MAX_SESSIONS_PER_USER {
            return lifetimes(
                ConfigErrorKind::Range,
                format!(
                    "max sessions per user {} is not within 1..={MAX_SESSIONS_PER_USER}",
                    self.life.per_user
                ),
                "SessionLayerBuilder::max_sessions_per_user",
                self.life.per_user,
            );
        }
        Ok(SessionLayer {
            shared: Arc::new(Shared {
                #[cfg(feature = "metrics")]
                store: Arc::new(super::metered::Metered(self.store)),
                #[cfg(not(feature = "metrics"))]
                store: self.store,
                life: self.life,
                cookie: self.transport.cookie,
                transport,
                failure: self.failure,
                expose_user: self.expose_user,
                metadata: self.metadata,
                response: self.response,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::MemorySessionStore;

    fn build(
        f: impl FnOnce(SessionLayerBuilder) -> SessionLayerBuilder,
    ) -> Result<SessionLayer, ConfigError> {
        f(SessionLayer::builder(MemorySessionStore::new())).build()
    }

    /// Lifetimes that overflow the store's clock, or make no sense, fail at
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

    /// A bad setting is named, with its value, for callers that branch.
    #[test]
    fn errors_name_the_setting_and_its_value() {
        type Set = fn(SessionLayerBuilder) -> SessionLayerBuilder;
        let cases: [(Set, _, _, _); 4] = [
            (
                |b| b.idle_timeout(Duration::ZERO),
                ConfigErrorKind::Duration,
                "SessionLayerBuilder::idle_timeout",
                "0ns",
            ),
            (
                |b| b.max_sessions_per_user(0),
                ConfigErrorKind::Range,
                "SessionLayerBuilder::max_sessions_per_user",
                "0",
            ),
            (
                |b| b.transport(Transport::cookie().path("app")),
                ConfigErrorKind::Cookie,
                "Transport::path",
                "app",
            ),
            (
                |b| b.transport(Transport::header("Cookie")),
                ConfigErrorKind::Transport,
                "Transport::header",
                "cookie",
            ),
        ];
        for (set, kind, setting, value) in cases {
            let err = build(set).unwrap_err();
            assert_eq!(err.kind(), kind, "{err}");
            assert_eq!(err.setting(), Some(setting), "{err}");
            assert_eq!(err.value(), Some(value), "{err}");
            assert!(err.to_string().contains(value), "{err}");
        }
        let err = build(|b| b.max_sessions_per_user(0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "session lifetimes: max sessions per user 0 is not within 1..=1024"
        );
    }

    /// The cookie's name and attributes are set on the one transport
    /// setter; a header transport with cookie attributes refuses to build, a bad cookie still
    /// fails as a cookie problem.
    #[tokio::test]
    async fn the_transport_carries_the_cookie_attributes() {
        use http::{Request, Response, header::SET_COOKIE};
        use tower::{Layer, ServiceExt, service_fn};

        use crate::session::Session;

        let layer = build(|b| {
            b.transport(
                Transport::cookie()
                    .with_cookie_name("sid")
                    .path("/app")
                    .persistent(Duration::from_secs(60)),
            )
        })
        .unwrap();
        let svc = layer.layer(service_fn(|req: Request<String>| async move {
            let session = req.extensions().get::<Session>().cloned().unwrap();
            session.insert("k", &1).await.unwrap();
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }));
        let res = svc.oneshot(Request::new(String::new())).await.unwrap();
        let set = res.headers()[SET_COOKIE].to_str().unwrap();
        assert!(set.starts_with("sid="), "{set}");
        assert!(set.contains("; Path=/app;"), "{set}");
        assert!(set.contains("; Max-Age=60"), "{set}");

        let err = build(|b| b.transport(Transport::bearer().secure(false))).unwrap_err();
        assert_eq!(err.kind(), ConfigErrorKind::Transport, "{err}");
        let err = build(|b| b.transport(Transport::cookie().path("app"))).unwrap_err();
        assert_eq!(err.kind(), ConfigErrorKind::Cookie, "{err}");
    }
}
