//! The session cookie: how it is named, what attributes it carries, the `Set-Cookie` that sends it.

use std::time::Duration;

use super::Transport;
use super::id::SessionId;
use crate::{ConfigError, ConfigErrorKind};

/// The `SameSite` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SameSite {
    /// Sent on same-site requests and top-level cross-site navigations (the default).
    Lax,
    /// Sent only on same-site requests.
    Strict,
    /// Sent on every request; requires `Secure`.
    None,
}

/// The default name of a `Secure` cookie with `Path=/` and no `Domain`.
const HOST_NAME: &str = "__Host-id";
/// The default name otherwise.
const PLAIN_NAME: &str = "id";

/// The session cookie's name and attributes, set through [`Transport`]'s cookie methods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CookieConfig {
    /// `None`: the default, [`HOST_NAME`] or [`PLAIN_NAME`] depending on the attributes.
    name: Option<String>,
    secure: bool,
    http_only: bool,
    same_site: SameSite,
    path: String,
    domain: Option<String>,
    max_age: Option<Duration>,
}

impl Default for CookieConfig {
    fn default() -> Self {
        Self {
            name: None,
            secure: true,
            http_only: true,
            same_site: SameSite::Lax,
            path: "/".to_owned(),
            domain: None,
            max_age: None,
        }
    }
}

/// The cookie's name and attributes, on the cookie transport (a header transport with any of
/// them set refuses to build).
///
/// Defaults: name `__Host-id` (`id` when `Secure` is off or a `Domain` or a `Path` other than
/// `/` is set: browsers refuse a `__Host-` cookie with any of those), `HttpOnly`, `Secure`,
/// `SameSite=Lax`, `Path=/`, no `Domain`, and no `Max-Age` (a browser-session cookie; the
/// server-side lifetimes still apply).
///
/// ```
/// use redis_guard::session::{SameSite, Transport};
/// use std::time::Duration;
///
/// let cookie = Transport::cookie()
///     .host_prefixed() // `__Host-id`: the browser refuses it unless Secure, Path=/, no Domain
///     .same_site(SameSite::Strict)
///     .persistent(Duration::from_secs(24 * 3600));
/// assert_eq!(cookie.cookie_name(), Some("__Host-id"));
///
/// // Plain-HTTP development on a host other than localhost: no Secure, so no `__Host-` prefix.
/// assert_eq!(Transport::cookie().secure(false).cookie_name(), Some("id"));
/// ```
///
/// The `__Host-` prefix is what stops a sibling subdomain (`evil.example.com`, or any subdomain
/// an attacker can run script on) from planting its own session id for `example.com` or
/// shadowing ours: browsers only accept a `__Host-` cookie that is `Secure`, has `Path=/` and no
/// `Domain`, i.e. set by this very host over HTTPS. Browsers treat `http://localhost` and
/// `http://127.0.0.1` as secure, so it works in local development too. A name set with
/// [`with_cookie_name`](Self::with_cookie_name) that starts with `__Host-` is checked when the
/// layer is built.
impl Transport {
    /// The cookie's name (a token: letters, digits and ``!#$%&'*+-.^_`|~``).
    pub fn with_cookie_name(mut self, name: impl Into<String>) -> Self {
        self.cookie.name = Some(name.into());
        self
    }

    /// Names the cookie `__Host-<name>` (browsers then insist on `Secure`, `Path=/` and no
    /// `Domain`, so a sibling subdomain cannot plant or overwrite it).
    pub fn host_prefixed(mut self) -> Self {
        let c = &mut self.cookie;
        let name = c.name.take().unwrap_or_else(|| PLAIN_NAME.to_owned());
        c.name = Some(if name.starts_with("__Host-") {
            name
        } else {
            format!("__Host-{name}")
        });
        c.secure = true;
        c.path = "/".to_owned();
        c.domain = None;
        self
    }

    setters! {
        /// The cookie's `Secure` (default `true`). Turn it off only for plain-HTTP development
        /// on a host other than `localhost`; browsers treat `http://localhost` as secure.
        pub fn secure(secure: bool) => cookie.secure;

        /// The cookie's `SameSite` (default [`SameSite::Lax`]).
        pub fn same_site(same_site: SameSite) => cookie.same_site;

        /// The cookie's `HttpOnly` (default `true`: scripts cannot read the id).
        pub fn http_only(http_only: bool) => cookie.http_only;
    }

    /// The cookie's `Path` (default `/`).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.cookie.path = path.into();
        self
    }

    /// The cookie's `Domain` (default none: the cookie goes to this host only).
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.cookie.domain = Some(domain.into());
        self
    }

    /// A persistent cookie with this `Max-Age` (default: a browser-session cookie).
    pub fn persistent(mut self, max_age: Duration) -> Self {
        self.cookie.max_age = Some(max_age);
        self
    }
}

impl CookieConfig {
    /// The cookie's name.
    pub(crate) fn name(&self) -> &str {
        match &self.name {
            Some(name) => name,
            None if self.secure && self.path == "/" && self.domain.is_none() => HOST_NAME,
            None => PLAIN_NAME,
        }
    }

    /// Checks the combination: a [`ConfigError`] of kind [`Cookie`](ConfigErrorKind::Cookie)
    /// naming the bad attribute and its setter; the layer builder calls it.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |message: String, setting, value: &dyn std::fmt::Display| {
            Err(ConfigError::new(ConfigErrorKind::Cookie, message)
                .with_setting(setting)
                .with_value(value))
        };
        let token = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        let name = self.name();
        if !token(name) {
            return bad(
                format!("invalid cookie name {name:?}"),
                "Transport::with_cookie_name",
                &name,
            );
        }
        let attr_ok =
            |s: &str| !s.is_empty() && s.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b';');
        if !attr_ok(&self.path) || !self.path.starts_with('/') {
            return bad(
                format!("invalid cookie path {:?}", self.path),
                "Transport::path",
                &self.path,
            );
        }
        if let Some(d) = &self.domain
            && !attr_ok(d)
        {
            return bad(
                format!("invalid cookie domain {d:?}"),
                "Transport::domain",
                d,
            );
        }
        if name.starts_with("__Host-")
            && (!self.secure || self.path != "/" || self.domain.is_some())
        {
            return bad(
                format!(
                    "the `__Host-` cookie {name:?} must be Secure, with Path=/ and no Domain \
                     (secure: {}, path: {:?}, domain: {:?})",
                    self.secure, self.path, self.domain
                ),
                "Transport::with_cookie_name",
                &name,
            );
        }
        if name.starts_with("__Secure-") && !self.secure {
            return bad(
                "a `__Secure-` cookie must be Secure".to_owned(),
                "Transport::secure",
                &self.secure,
            );
        }
        if self.same_site == SameSite::None && !self.secure {
            return bad(
                "SameSite=None requires Secure".to_owned(),
                "Transport::secure",
                &self.secure,
            );
        }
        Ok(())
    }

    fn attributes(&self, out: &mut String) {
        out.push_str("; Path=");
        out.push_str(&self.path);
        if let Some(d) = &self.domain {
            out.push_str("; Domain=");
            out.push_str(d);
        }
        if self.http_only {
            out.push_str("; HttpOnly");
        }
        if self.secure {
            out.push_str("; Secure");
        }
        out.push_str(match self.same_site {
            SameSite::Lax => "; SameSite=Lax",
            SameSite::Strict => "; SameSite=Strict",
            SameSite::None => "; SameSite=None",
        });
    }

    /// `Set-Cookie` for `id`; `own_age` (the session's own lifetime left) takes the place of
    /// the configured `Max-Age`.
    pub(crate) fn set_cookie(&self, id: &SessionId, own_age: Option<Duration>) -> String {
        let mut s = format!("{}={}", self.name(), id.encode());
        self.attributes(&mut s);
        if let Some(age) = own_age.or(self.max_age) {
            // At least a second: `Max-Age=0` would delete the cookie at once.
            s.push_str(&format!("; Max-Age={}", age.as_secs().max(1)));
        }
        s
    }

    /// `Set-Cookie` that removes the cookie: same name, `Path` and `Domain`, expired.
    pub(crate) fn removal_cookie(&self) -> String {
        let mut s = format!("{}=", self.name());
        self.attributes(&mut s);
        s.push_str("; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_attributes() {
        let id = SessionId::generate().unwrap();
        let c = Transport::cookie().cookie;
        assert_eq!(
            c.set_cookie(&id, None),
            format!(
                "__Host-id={}; Path=/; HttpOnly; Secure; SameSite=Lax",
                id.encode()
            )
        );
        assert_eq!(
            c.removal_cookie(),
            "__Host-id=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
        );
        assert!(c.validate().is_ok());
    }

    /// With `Secure` (the default) the cookie is `__Host-id`, which a sibling
    /// subdomain cannot plant or overwrite.
    #[test]
    fn secure_cookies_default_to_the_host_prefix() {
        assert_eq!(Transport::cookie().cookie.name(), "__Host-id");
        assert_eq!(Transport::cookie().secure(false).cookie.name(), "id");
        assert_eq!(
            Transport::cookie().with_cookie_name("sid").cookie.name(),
            "sid"
        );
        for bad in [
            Transport::cookie()
                .with_cookie_name("__Host-sid")
                .domain("example.com"),
            Transport::cookie()
                .with_cookie_name("__Host-sid")
                .secure(false),
            Transport::cookie()
                .with_cookie_name("__Host-sid")
                .path("/app"),
        ] {
            assert!(
                bad.check_cookie()
                    .unwrap_err()
                    .to_string()
                    .contains("__Host-"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(
            Transport::cookie()
                .with_cookie_name("bad name")
                .check_cookie()
                .unwrap_err()
                .to_string()
                .contains("bad name")
        );
        assert!(
            Transport::cookie()
                .host_prefixed()
                .domain("x.com")
                .check_cookie()
                .is_err()
        );
        assert!(
            Transport::cookie()
                .secure(false)
                .same_site(SameSite::None)
                .check_cookie()
                .is_err()
        );
        assert!(Transport::cookie().path("no-slash").check_cookie().is_err());
    }
}
