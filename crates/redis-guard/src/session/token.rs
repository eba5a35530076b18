//! How the session id travels: in the cookie (the default), or as a token in a request header
//! (`Authorization: Bearer <id>` or a header of your choice) for API and mobile clients.

use http::header::{AUTHORIZATION, CACHE_CONTROL, COOKIE, SET_COOKIE};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::cookie::CookieConfig;
use super::cookie_header::{self, ReadCookie};
use super::id::SessionId;
use super::state::CookieAction;
use super::store::{Changes, Record};
use crate::{ConfigError, ConfigErrorKind};

/// The reserved field that records which transport created a session: absent (or `cookie`) for
/// cookie sessions, `header` for token sessions.
pub(crate) const VIA_FIELD: &str = "$via";
/// [`VIA_FIELD`]'s value for a session created by a header-token layer.
const VIA_HEADER: &str = "header";
/// [`VIA_FIELD`]'s value a cookie session may carry (cookie layers write none).
const VIA_COOKIE: &str = "cookie";

/// The response header that carries a new token unless
/// [`response_header`](Transport::response_header) names another.
pub(crate) const DEFAULT_TOKEN_HEADER: &str = "session-token";

/// How the session id travels between client and server, and the cookie's name and attributes;
/// set it with [`SessionLayerBuilder::transport`](super::SessionLayerBuilder::transport).
///
/// - [`Transport::cookie`] (the default): a cookie, as browsers want it; its name and
///   attributes are set with the cookie methods below ([`secure`](Self::secure),
///   [`same_site`](Self::same_site), [`persistent`](Self::persistent), …).
/// - [`Transport::bearer`]: the client sends `Authorization: Bearer <token>`; a new token comes
///   back in the `session-token` response header.
/// - [`Transport::header`]: the client sends the bare token in a header you name.
///
/// A token is the session id itself (43 characters of base64url, the same as a cookie value);
/// the store holds only its SHA-256. The response header carries it when the session is created
/// and after [`Session::cycle_id`](super::Session::cycle_id), on a response marked
/// `Cache-Control: no-store`; after [`Session::destroy`](super::Session::destroy) nothing is
/// sent and the token no longer works. A header-token layer never sets a cookie, and a cookie
/// layer never sends a token header. A browser app that reads the token from JavaScript across
/// origins needs its CORS layer to expose the response header.
///
/// **Tokens and cookies do not mix**: a session remembers the transport that created it, and a
/// layer treats a session of the other transport as unknown (no change, no delete, no new
/// token for it): a cookie id sent as a bearer token, or a token planted as a cookie, starts no
/// session. (Finding that out is the ordinary load, which may restart the session's idle timer,
/// as any holder of the id can do over the right transport.) Two layers, one per transport, can share a store: the cookie for the web pages, the
/// header for the API.
///
/// ```
/// use redis_guard::session::{MemorySessionStore, SessionLayer, Transport};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemorySessionStore::new();
/// // Pages: the cookie (the default).
/// let pages = SessionLayer::new(store.clone())?;
/// // API: `Authorization: Bearer <token>`, new tokens in `session-token`.
/// let api = SessionLayer::builder(store.clone())
///     .transport(Transport::bearer())
///     .build()?;
/// // Or a header of your own, both ways.
/// let mobile = SessionLayer::builder(store)
///     .transport(Transport::header("x-session-token").response_header("x-session-token"))
///     .build()?;
/// # let _ = (pages, api, mobile); Ok(()) }
/// ```
///
/// **Malformed tokens count as no token.** A missing `Authorization` header, another scheme
/// (`Basic …`), `Bearer` with nothing after it, a value that is not exactly a session id (bad
/// base64url, wrong length, non-UTF-8 bytes), or the header sent twice: the request has no
/// session, so the handler sees an empty one and decides (typically `401`); the store is never
/// asked and nothing is written. The scheme is matched case-insensitively (RFC 9110 §11.1). An
/// unknown token is never adopted: a session started by that request gets a fresh token.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Transport {
    mode: Mode,
    response: Option<String>,
    /// The cookie's name and attributes (its methods are in `cookie.rs`); left at the defaults
    /// on the header transports.
    pub(super) cookie: CookieConfig,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    Cookie,
    Bearer,
    Header(String),
}

impl Default for Transport {
    /// [`Transport::cookie`].
    fn default() -> Self {
        Self::cookie()
    }
}

impl Transport {
    /// The session cookie (the default), with the defaults the cookie methods below change:
    /// name `__Host-id`, `HttpOnly`, `Secure`, `SameSite=Lax`, `Path=/`, no `Domain`, no
    /// `Max-Age`.
    ///
    /// ```
    /// use redis_guard::session::Transport;
    ///
    /// assert_eq!(Transport::default(), Transport::cookie());
    /// ```
    pub fn cookie() -> Self {
        Self::with_mode(Mode::Cookie)
    }

    /// `Authorization: Bearer <token>` in requests (RFC 6750 §2.1); new tokens in the
    /// `session-token` response header.
    ///
    /// ```
    /// use redis_guard::session::Transport;
    ///
    /// let api = Transport::bearer();
    /// assert_eq!(api.request_header(), Some("authorization"));
    /// assert_eq!(api.token_header(), Some("session-token"));
    /// ```
    pub fn bearer() -> Self {
        Self::with_mode(Mode::Bearer)
    }

    /// The bare token in the request header `name`; new tokens in the `session-token`
    /// response header unless [`response_header`](Self::response_header) says otherwise. The
    /// name is checked when the layer is built.
    ///
    /// ```
    /// use redis_guard::session::Transport;
    ///
    /// let t = Transport::header("X-Session-Token").response_header("x-session-token");
    /// assert_eq!(t.request_header(), Some("x-session-token"));
    /// assert_eq!(t.token_header(), Some("x-session-token"));
    /// ```
    pub fn header(name: impl Into<String>) -> Self {
        Self::with_mode(Mode::Header(name.into().to_ascii_lowercase()))
    }

    fn with_mode(mode: Mode) -> Self {
        Self {
            mode,
            response: None,
            cookie: CookieConfig::default(),
        }
    }

    /// The response header that carries a new token (default `session-token`). Only
    /// for the header transports: on [`Transport::cookie`] the layer refuses to build.
    pub fn response_header(mut self, name: impl Into<String>) -> Self {
        self.response = Some(name.into().to_ascii_lowercase());
        self
    }

    /// The cookie's name; `None` for the header transports.
    ///
    /// ```
    /// use redis_guard::session::Transport;
    ///
    /// assert_eq!(Transport::cookie().cookie_name(), Some("__Host-id"));
    /// assert_eq!(Transport::bearer().cookie_name(), None);
    /// ```
    #[must_use]
    pub fn cookie_name(&self) -> Option<&str> {
        matches!(self.mode, Mode::Cookie).then(|| self.cookie.name())
    }

    /// The request header the token is read from; `None` for the cookie.
    #[must_use]
    pub fn request_header(&self) -> Option<&str> {
        match &self.mode {
            Mode::Cookie => None,
            Mode::Bearer => Some(AUTHORIZATION.as_str()),
            Mode::Header(name) => Some(name),
        }
    }

    /// The response header a new token is sent in; `None` for the cookie.
    #[must_use]
    pub fn token_header(&self) -> Option<&str> {
        match self.mode {
            Mode::Cookie => None,
            Mode::Bearer | Mode::Header(_) => {
                Some(self.response.as_deref().unwrap_or(DEFAULT_TOKEN_HEADER))
            }
        }
    }

    /// Checks the cookie's attributes, on the cookie transport; the layer builder calls it.
    pub(crate) fn check_cookie(&self) -> Result<(), ConfigError> {
        match self.mode {
            Mode::Cookie => self.cookie.validate(),
            Mode::Bearer | Mode::Header(_) => Ok(()),
        }
    }

    /// Checks the names and turns them into what requests use; the layer builder calls it.
    pub(crate) fn resolve(&self) -> Result<Wire, ConfigError> {
        let bad = |message: String, setting, value: &str| {
            ConfigError::new(ConfigErrorKind::Transport, message)
                .with_setting(setting)
                .with_value(value)
        };
        let name = |what: &str, s: &str| {
            let setting = if what == "request" {
                "Transport::header"
            } else {
                "Transport::response_header"
            };
            let header = HeaderName::from_bytes(s.as_bytes())
                .map_err(|_| bad(format!("invalid {what} header name {s:?}"), setting, s))?;
            if header == COOKIE || header == SET_COOKIE {
                return Err(bad(
                    format!(
                        "the {what} header {s:?} cannot carry a session token: use Transport::cookie"
                    ),
                    setting,
                    s,
                ));
            }
            Ok(header)
        };
        let (request, bearer) = match &self.mode {
            Mode::Cookie => {
                return match &self.response {
                    None => Ok(Wire::Cookie),
                    Some(r) => Err(bad(
                        format!(
                            "response header {r:?} set on the cookie transport; it applies to Transport::bearer and Transport::header only"
                        ),
                        "Transport::response_header",
                        r,
                    )),
                };
            }
            Mode::Bearer => (AUTHORIZATION, true),
            Mode::Header(n) => (name("request", n)?, false),
        };
        if self.cookie != CookieConfig::default() {
            return Err(bad(
                format!(
                    "cookie attributes set on the header transport {:?}; they apply to Transport::cookie only",
                    request.as_str()
                ),
                "Transport::cookie",
                request.as_str(),
            ));
        }
        let response = name(
            "response",
            self.token_header().unwrap_or(DEFAULT_TOKEN_HEADER),
        )?;
        Ok(Wire::Header(TokenHeader {
            request,
            bearer,
            response,
        }))
    }
}

/// A layer's transport, checked: what requests read and responses write.
#[derive(Debug)]
pub(crate) enum Wire {
    Cookie,
    Header(TokenHeader),
}

/// The header transport's names.
#[derive(Debug)]
pub(crate) struct TokenHeader {
    request: HeaderName,
    /// `Authorization: Bearer <token>` rather than the bare token.
    bearer: bool,
    response: HeaderName,
}

impl Wire {
    /// The session ids the request offers over this transport.
    pub(crate) fn read(&self, headers: &HeaderMap, cookie: &CookieConfig) -> ReadCookie {
        match self {
            Self::Cookie => cookie_header::read(headers, cookie.name()),
            Self::Header(h) => h.read(headers),
        }
    }

    /// Whether a stored session belongs to this transport: header sessions carry
    /// `$via = header`, cookie sessions no `$via` (those stored before it existed included).
    pub(crate) fn accepts(&self, record: &Record) -> bool {
        let via = record.get(VIA_FIELD);
        match self {
            Self::Cookie => via.is_none_or(|v| v == VIA_COOKIE),
            Self::Header(_) => via == Some(VIA_HEADER),
        }
    }

    /// The fields a new session is created with: a header layer records its transport. Cookie
    /// sessions stay as they were before transports existed (no extra field).
    pub(crate) fn stamp(&self, mut changes: Changes) -> Changes {
        if let Self::Header(_) = self {
            changes
                .set
                .insert(VIA_FIELD.to_owned(), VIA_HEADER.to_owned());
        }
        changes
    }
}

impl TokenHeader {
    /// The request header the token comes in.
    pub(crate) fn request_header(&self) -> &HeaderName {
        &self.request
    }

    fn read(&self, headers: &HeaderMap) -> ReadCookie {
        let mut values = headers.get_all(&self.request).iter();
        let Some(value) = values.next() else {
            return ReadCookie::Absent;
        };
        if values.next().is_some() {
            // Two credentials: which one the client meant is a guess, so neither counts.
            tracing::debug!(header = %self.request, "session: token header sent twice; ignored");
            return ReadCookie::Malformed;
        }
        let mut token = value.as_bytes().trim_ascii();
        if self.bearer {
            let Some(rest) = strip_bearer(token) else {
                tracing::debug!("session: authorization is not a bearer token; ignored");
                return ReadCookie::Malformed;
            };
            token = rest;
        }
        match std::str::from_utf8(token).ok().and_then(SessionId::parse) {
            Some(id) => ReadCookie::Ids(vec![id]),
            None => {
                tracing::debug!(len = token.len(), "session: malformed token ignored");
                ReadCookie::Malformed
            }
        }
    }

    /// Puts a new token on the response; the token is a credential, so no cache may keep it.
    pub(crate) fn respond(&self, headers: &mut HeaderMap, action: &CookieAction) {
        let CookieAction::Set(id) = action else {
            // Keep: the client's token stays good. Remove: the store no longer knows it.
            return;
        };
        if let Ok(v) = HeaderValue::from_str(&id.encode()) {
            headers.insert(self.response.clone(), v);
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
    }
}

/// The credentials of `Bearer <credentials>`: the scheme in any case, then one or more spaces.
fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer";
    let (scheme, rest) = value.split_at_checked(SCHEME.len())?;
    if !scheme.eq_ignore_ascii_case(SCHEME) || rest.first() != Some(&b' ') {
        return None;
    }
    let rest = rest.trim_ascii_start();
    (!rest.is_empty()).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(t: &Transport) -> TokenHeader {
        match t.resolve() {
            Ok(Wire::Header(h)) => h,
            other => panic!("{other:?}"),
        }
    }

    fn read(t: &Transport, name: &str, values: &[&[u8]]) -> Option<SessionId> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        match wire(t).read(&h) {
            ReadCookie::Ids(mut ids) => {
                assert_eq!(ids.len(), 1);
                ids.pop()
            }
            ReadCookie::Absent | ReadCookie::Malformed => None,
        }
    }

    /// Issue 12, item 5: a well-formed bearer token is read; everything else is no token.
    #[test]
    fn bearer_tokens_are_read_strictly() {
        let id = SessionId::generate().unwrap();
        let token = id.encode();
        let bearer = Transport::bearer();
        for good in [
            format!("Bearer {token}"),
            format!("bearer  {token}"),
            format!("BEARER {token} "),
        ] {
            assert_eq!(
                read(&bearer, "authorization", &[good.as_bytes()]),
                Some(id.clone()),
                "{good}"
            );
        }
        let other = SessionId::generate().unwrap().encode();
        for bad in [
            token.clone(),
            "Bearer".to_owned(),
            "Bearer ".to_owned(),
            format!("Bearer{token}"),
            format!("Basic {token}"),
            format!("Bearer {}", &token[..42]),
            format!("Bearer {token}A"),
            format!("Bearer {}+", &token[..42]),
            format!("Bearer {token}="),
            format!("Bearer {token} {other}"),
            format!("Bearer \"{token}\""),
        ] {
            assert_eq!(
                read(&bearer, "authorization", &[bad.as_bytes()]),
                None,
                "{bad}"
            );
        }
        let non_utf8 = [b"Bearer ".as_slice(), &[0xff; 43]].concat();
        assert_eq!(read(&bearer, "authorization", &[&non_utf8]), None);
        let twice = format!("Bearer {token}");
        assert_eq!(
            read(
                &bearer,
                "authorization",
                &[twice.as_bytes(), twice.as_bytes()]
            ),
            None
        );
        assert_eq!(read(&bearer, "x-other", &[twice.as_bytes()]), None);
    }

    #[test]
    fn named_headers_carry_the_bare_token() {
        let id = SessionId::generate().unwrap();
        let t = Transport::header("X-Session-Token");
        let token = id.encode();
        assert_eq!(read(&t, "x-session-token", &[token.as_bytes()]), Some(id));
        let bearer = format!("Bearer {token}");
        assert_eq!(read(&t, "x-session-token", &[bearer.as_bytes()]), None);
        assert_eq!(read(&t, "authorization", &[bearer.as_bytes()]), None);
    }

    #[test]
    fn names_are_checked_when_built() {
        assert!(matches!(Transport::cookie().resolve(), Ok(Wire::Cookie)));
        for (bad, says) in [
            (Transport::header("bad name"), "bad name"),
            (Transport::header("Cookie"), "cookie"),
            (
                Transport::bearer().response_header("set-cookie"),
                "set-cookie",
            ),
            (Transport::bearer().response_header(""), "\"\""),
            (Transport::cookie().response_header("x-token"), "x-token"),
            (Transport::bearer().secure(false), "cookie attributes"),
            (
                Transport::header("x-token").with_cookie_name("sid"),
                "x-token",
            ),
        ] {
            let err = bad.resolve().unwrap_err();
            assert_eq!(err.kind(), crate::ConfigErrorKind::Transport);
            assert!(err.to_string().contains(says), "{err}");
        }
        let h = wire(&Transport::header("x-token").response_header("X-New-Token"));
        assert_eq!(h.response, "x-new-token");
        assert!(!h.bearer);
    }

    #[test]
    fn sessions_remember_their_transport() {
        let cookie = Transport::cookie().resolve().unwrap();
        let header = Transport::bearer().resolve().unwrap();
        let created = |w: &Wire| Record {
            fields: w.stamp(Changes::default()).set.into_iter().collect(),
            ..Record::default()
        };
        let (by_cookie, by_header) = (created(&cookie), created(&header));
        assert_eq!(
            by_cookie,
            Record::default(),
            "cookie sessions are unchanged"
        );
        assert!(cookie.accepts(&by_cookie) && !cookie.accepts(&by_header));
        assert!(header.accepts(&by_header) && !header.accepts(&by_cookie));
        let explicit = Record {
            fields: [(VIA_FIELD.to_owned(), VIA_COOKIE.to_owned())].into(),
            ..Record::default()
        };
        assert!(cookie.accepts(&explicit) && !header.accepts(&explicit));
    }

    #[test]
    fn a_new_token_is_never_cached() {
        let h = wire(&Transport::bearer());
        let id = SessionId::generate().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=60"),
        );
        h.respond(&mut headers, &CookieAction::Keep);
        h.respond(&mut headers, &CookieAction::Remove);
        assert_eq!(headers.len(), 1);
        h.respond(&mut headers, &CookieAction::Set(id.clone()));
        assert_eq!(headers[DEFAULT_TOKEN_HEADER], id.encode().as_str());
        assert_eq!(headers[CACHE_CONTROL], "no-store");
        assert!(!headers.contains_key(SET_COOKIE));
    }
}
