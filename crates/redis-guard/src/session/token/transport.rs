//! [`Transport`]: how the session id travels, as the user sets it, and its checks.

use http::HeaderName;
use http::header::{AUTHORIZATION, COOKIE, SET_COOKIE};

use super::wire::{TokenHeader, Wire};
use crate::session::cookie::CookieConfig;
use crate::{ConfigError, ConfigErrorKind};

/// The response header that carries a new token unless
/// [`response_header`](Transport::response_header) names another.
pub(super) const DEFAULT_TOKEN_HEADER: &str = "session-token";

/// How the session id travels between client and server, and the cookie's name and attributes;
/// set it with [`SessionLayerBuilder::transport`].
///
/// - [`Transport::cookie`] (the default): a cookie, as browsers want it; its name and
///   attributes are set with the cookie methods below ([`secure`](Self::secure),
///   [`same_site`](Self::same_site), [`persistent`](Self::persistent), …).
/// - [`Transport::bearer`]: the client sends `Authorization: Bearer <token>`; a new token comes
///   back in the `session-token` response header.
/// - [`Transport::header`]: the client sends the bare token in a header you name.
///
/// A token is the session id itself (43 characters of base64url, the same as a cookie value); the
/// store holds only its SHA-256. The response header carries it when the session is created and
/// after [`Session::cycle_id`], on a response marked `Cache-Control: no-store`; after
/// [`Session::destroy`] nothing is sent and the token no longer works. A header-token layer never
/// sets a cookie, and a cookie layer never sends a token header. A browser app that reads the token
/// from JavaScript across origins needs its CORS layer to expose the response header.
///
/// **Tokens and cookies do not mix**: a session remembers the transport that created it, and a
/// layer treats a session of the other transport as unknown (no change, no delete, no new token for
/// it): a cookie id sent as a bearer token, or a token planted as a cookie, starts no session.
/// (Finding that out is the ordinary load, which may restart the session's idle timer, as any
/// holder of the id can do over the right transport.) Two layers, one per transport, can share a
/// store: the cookie for the web pages, the header for the API.
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
///
/// [`SessionLayerBuilder::transport`]: crate::session::SessionLayerBuilder::transport
/// [`Session::cycle_id`]: crate::session::Session::cycle_id
/// [`Session::destroy`]: crate::session::Session::destroy
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Transport {
    mode: Mode,
    response: Option<String>,
    /// The cookie's name and attributes (its methods are in `cookie.rs`); left at the defaults
    /// on the header transports.
    pub(in crate::session) cookie: CookieConfig,
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
        Ok(Wire::Header(TokenHeader::new(request, bearer, response)))
    }
}
