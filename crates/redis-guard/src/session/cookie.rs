//! The session cookie: how it is named, what attributes it carries, how it is read.

use std::time::Duration;

use http::HeaderMap;
use http::header::COOKIE;

use super::id::SessionId;

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

/// The session cookie's name and attributes.
///
/// Defaults: name `id`, `HttpOnly`, `Secure`, `SameSite=Lax`, `Path=/`, no `Domain`, and no
/// `Max-Age` (a browser-session cookie; the server-side lifetimes still apply).
///
/// ```
/// use redis_guard::session::{CookieConfig, SameSite};
/// use std::time::Duration;
///
/// let cookie = CookieConfig::default()
///     .host_prefixed() // `__Host-id`: the browser refuses it unless Secure, Path=/, no Domain
///     .same_site(SameSite::Strict)
///     .persistent(Duration::from_secs(24 * 3600));
/// assert_eq!(cookie.get_name(), "__Host-id");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CookieConfig {
    name: String,
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
            name: "id".to_owned(),
            secure: true,
            http_only: true,
            same_site: SameSite::Lax,
            path: "/".to_owned(),
            domain: None,
            max_age: None,
        }
    }
}

impl CookieConfig {
    /// The cookie's name (a token: letters, digits and ``!#$%&'*+-.^_`|~``).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Names the cookie `__Host-<name>` (browsers then insist on `Secure`, `Path=/` and no
    /// `Domain`, so a sibling subdomain cannot plant or overwrite it).
    #[must_use]
    pub fn host_prefixed(mut self) -> Self {
        if !self.name.starts_with("__Host-") {
            self.name = format!("__Host-{}", self.name);
        }
        self.secure = true;
        self.path = "/".to_owned();
        self.domain = None;
        self
    }

    /// `Secure` (default `true`). Turn it off only for plain-HTTP development on a host other than
    /// `localhost`; browsers treat `http://localhost` as secure.
    #[must_use]
    pub fn secure(mut self, secure: bool) -> Self {
        self.secure = secure;
        self
    }

    /// `SameSite` (default [`SameSite::Lax`]).
    #[must_use]
    pub fn same_site(mut self, same_site: SameSite) -> Self {
        self.same_site = same_site;
        self
    }

    /// `Path` (default `/`).
    #[must_use]
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// `Domain` (default none: the cookie goes to this host only).
    #[must_use]
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = Some(domain.into());
        self
    }

    /// A persistent cookie with this `Max-Age` (default: a browser-session cookie).
    #[must_use]
    pub fn persistent(mut self, max_age: Duration) -> Self {
        self.max_age = Some(max_age);
        self
    }

    /// `HttpOnly` (default `true`: scripts cannot read the id).
    #[must_use]
    pub fn http_only(mut self, http_only: bool) -> Self {
        self.http_only = http_only;
        self
    }

    /// The cookie's name.
    #[must_use]
    pub fn get_name(&self) -> &str {
        &self.name
    }

    /// Checks the combination; the layer builder calls it.
    ///
    /// # Errors
    ///
    /// A message naming the bad attribute.
    pub fn validate(&self) -> Result<(), String> {
        let token = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        if !token(&self.name) {
            return Err(format!("invalid cookie name {:?}", self.name));
        }
        let attr_ok =
            |s: &str| !s.is_empty() && s.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b';');
        if !attr_ok(&self.path) || !self.path.starts_with('/') {
            return Err(format!("invalid cookie path {:?}", self.path));
        }
        if let Some(d) = &self.domain
            && !attr_ok(d)
        {
            return Err(format!("invalid cookie domain {d:?}"));
        }
        if self.name.starts_with("__Host-")
            && (!self.secure || self.path != "/" || self.domain.is_some())
        {
            return Err("a `__Host-` cookie must be Secure, with Path=/ and no Domain".to_owned());
        }
        if self.name.starts_with("__Secure-") && !self.secure {
            return Err("a `__Secure-` cookie must be Secure".to_owned());
        }
        if self.same_site == SameSite::None && !self.secure {
            return Err("SameSite=None requires Secure".to_owned());
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

    /// `Set-Cookie` for `id`.
    pub(crate) fn set_cookie(&self, id: &SessionId) -> String {
        let mut s = format!("{}={}", self.name, id.encode());
        self.attributes(&mut s);
        if let Some(age) = self.max_age {
            s.push_str(&format!("; Max-Age={}", age.as_secs()));
        }
        s
    }

    /// `Set-Cookie` that removes the cookie: same name, `Path` and `Domain`, expired.
    pub(crate) fn removal_cookie(&self) -> String {
        let mut s = format!("{}=", self.name);
        self.attributes(&mut s);
        s.push_str("; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT");
        s
    }

    /// The session id in the request's `Cookie` headers: the first value of a cookie with our
    /// name that is a well-formed id. Malformed values (empty, too long, not base64url) are
    /// ignored, with a debug log, and never reach the store.
    pub(crate) fn read(&self, headers: &HeaderMap) -> ReadCookie {
        let mut seen = false;
        for header in headers.get_all(COOKIE) {
            let Ok(header) = header.to_str() else {
                tracing::debug!("session: Cookie header is not visible ASCII; ignored");
                continue;
            };
            for pair in header.split(';') {
                let Some((name, value)) = pair.trim().split_once('=') else {
                    continue;
                };
                if name.trim() != self.name {
                    continue;
                }
                seen = true;
                let value = value.trim().trim_matches('"');
                if let Some(id) = SessionId::parse(value) {
                    return ReadCookie::Id(id);
                }
                tracing::debug!(
                    len = value.len(),
                    "session: malformed session cookie ignored"
                );
            }
        }
        if seen {
            ReadCookie::Malformed
        } else {
            ReadCookie::Absent
        }
    }
}

/// What the request's cookies hold.
#[derive(Debug)]
pub(crate) enum ReadCookie {
    Absent,
    Malformed,
    Id(SessionId),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(COOKIE, http::HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn default_attributes() {
        let id = SessionId::generate().unwrap();
        let c = CookieConfig::default();
        assert_eq!(
            c.set_cookie(&id),
            format!("id={}; Path=/; HttpOnly; Secure; SameSite=Lax", id.encode())
        );
        assert_eq!(
            c.removal_cookie(),
            "id=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
        );
        assert!(c.validate().is_ok());
    }

    #[test]
    fn reads_the_first_valid_id_and_ignores_garbage() {
        let c = CookieConfig::default();
        let id = SessionId::generate().unwrap().encode();
        let other = SessionId::generate().unwrap().encode();
        let long = "a".repeat(5000);
        let both = format!("x=1; id=; id={id}; id={other}");
        match c.read(&headers(&[both.as_bytes()])) {
            ReadCookie::Id(got) => assert_eq!(got.encode(), id),
            r => panic!("{r:?}"),
        }
        for bad in [
            b"id=".as_slice(),
            long.as_bytes(),
            b"id=not base64!",
            b"id=\xff\xfe",
            b"ID=x",
        ] {
            let bad_cookie = [b"id=".as_slice(), bad].concat();
            assert!(!matches!(
                c.read(&headers(&[&bad_cookie])),
                ReadCookie::Id(_)
            ));
        }
        assert!(matches!(c.read(&headers(&[])), ReadCookie::Absent));
        assert!(matches!(
            c.read(&headers(&[b"other=1"])),
            ReadCookie::Absent
        ));
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(
            CookieConfig::default()
                .name("bad name")
                .validate()
                .unwrap_err()
                .contains("bad name")
        );
        assert!(
            CookieConfig::default()
                .host_prefixed()
                .domain("x.com")
                .validate()
                .is_err()
        );
        assert!(
            CookieConfig::default()
                .secure(false)
                .same_site(SameSite::None)
                .validate()
                .is_err()
        );
        assert!(CookieConfig::default().path("no-slash").validate().is_err());
    }
}
