//! [`SessionUser`]: the logged-in user, exposed to the layers after the session's.

/// The logged-in user of the current session, put into the request extensions by a
/// [`SessionLayer`](super::SessionLayer) built with
/// [`expose_user`](super::SessionLayerBuilder::expose_user): key a rate limit on it.
///
/// ```
/// use redis_guard::rate_limit::{ClientIp, ExtensionKey, Key, KeyExtractorExt};
/// use redis_guard::session::SessionUser;
///
/// // Per user when logged in, per client IP otherwise.
/// let key = SessionUser::key().or(ClientIp::peer());
/// # let _ = key;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionUser(pub String);

#[cfg(feature = "rate-limit")]
impl SessionUser {
    /// A rate-limit key extractor for the session's user (missing when logged out).
    #[must_use]
    pub fn key() -> crate::rate_limit::ExtensionKey<Self, fn(&Self) -> crate::rate_limit::Key> {
        fn to_key(user: &SessionUser) -> crate::rate_limit::Key {
            crate::rate_limit::Key::pair(
                &crate::rate_limit::Key::from("user"),
                &crate::rate_limit::Key::from(user.0.as_str()),
            )
        }
        crate::rate_limit::ExtensionKey::new(to_key as fn(&Self) -> crate::rate_limit::Key)
    }
}
