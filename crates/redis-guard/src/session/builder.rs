//! [`SessionLayerBuilder`]: the layer's settings, checked by `build`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::cookie::CookieConfig;
use super::layer::{MAX_LIFETIME, MAX_SESSIONS_PER_USER, SessionConfigError};
use super::shared::Shared;
use super::store::{Lifetimes, SessionStore};
use super::{FailurePolicy, SessionLayer};

/// Builds a [`SessionLayer`]; [`build`](Self::build) checks the settings.
#[must_use]
pub struct SessionLayerBuilder {
    store: Arc<dyn SessionStore>,
    life: Lifetimes,
    cookie: CookieConfig,
    failure: FailurePolicy,
    expose_user: bool,
}

impl SessionLayerBuilder {
    pub(crate) fn new(store: Arc<dyn SessionStore>) -> Self {
        Self {
            store,
            life: Lifetimes::default(),
            cookie: CookieConfig::default(),
            failure: FailurePolicy::default(),
            expose_user: false,
        }
    }

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

    /// What to do when the store fails (default [`FailurePolicy::Closed`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure = policy;
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
        Ok(SessionLayer::from_shared(Shared {
            store: self.store,
            life: self.life,
            cookie: self.cookie,
            failure: self.failure,
            expose_user: self.expose_user,
        }))
    }
}

impl fmt::Debug for SessionLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLayerBuilder")
            .field("store", &self.store)
            .field("life", &self.life)
            .field("cookie", &self.cookie)
            .field("failure", &self.failure)
            .field("expose_user", &self.expose_user)
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
