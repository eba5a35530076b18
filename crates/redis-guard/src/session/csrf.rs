//! CSRF protection with the synchronizer-token pattern: a random token kept in the session,
//! echoed by the page in a form field or a request header, and checked on every unsafe request.
//! See [OWASP's CSRF cheat sheet](https://cheatsheetseries.owasp.org/cheatsheets/Cross-Site_Request_Forgery_Prevention_Cheat_Sheet.html#synchronizer-token-pattern).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::store::CSRF_FIELD;
use super::{Session, SessionError};
/// Random bytes in a token (256 bits).
const TOKEN_BYTES: usize = 32;

/// A fresh token: 256 bits from the OS CSPRNG, base64url without padding (43 characters).
fn new_token() -> Result<String, SessionError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| SessionError::Random(e.to_string()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// Whether `a` and `b` are equal, in time that depends on their length only (the length of a
/// token is public; its bytes are not).
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

impl Session {
    /// This session's CSRF token, created on first use: put it in a hidden form field or hand it
    /// to scripts that send it in a header, then check it with
    /// [`verify_csrf`](Self::verify_csrf) (or, with the `axum` feature, the `CsrfHeader` / `CsrfForm`
    /// extractors).
    ///
    /// The token is 256 bits from the OS CSPRNG, base64url, kept in a reserved field of the
    /// session. It stays the same until the session's privileges change:
    /// [`cycle_id`](Self::cycle_id) and [`set_user`](Self::set_user) drop it, so a token seen
    /// before a login is refused after it, and the next call draws a new one (in the request
    /// that logged in, it is written with the login's own save: no round trip of its own). It
    /// is created with [`ensure`](Self::ensure)'s atomic step: concurrent first requests of one
    /// session all get the one token that is stored. On a session not stored yet the token is
    /// stored with it after the handler (the response sets the cookie).
    ///
    /// ```
    /// use redis_guard::session::{Session, SessionError};
    ///
    /// async fn form(session: Session) -> Result<String, SessionError> {
    ///     let token = session.csrf_token().await?;
    ///     Ok(format!(
    ///         r#"<form method="post"><input type="hidden" name="csrf_token" value="{token}">…</form>"#
    ///     ))
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// [`SessionError::Destroyed`] after [`destroy`](Self::destroy); no randomness; a store
    /// error.
    pub async fn csrf_token(&self) -> Result<String, SessionError> {
        self.ensure_raw(CSRF_FIELD, new_token).await
    }

    /// Checks a CSRF token from the request against this session's, in constant time. Never
    /// writes: a refused request changes nothing in the store.
    ///
    /// ```
    /// use redis_guard::session::{Session, SessionError};
    ///
    /// async fn transfer(session: Session, token_from_form: String) -> Result<&'static str, SessionError> {
    ///     session.verify_csrf(&token_from_form).await?; // `403` when it does not match
    ///     Ok("done")
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// [`SessionError::CsrfMissing`] for an empty token; [`SessionError::CsrfMismatch`] when it
    /// is not this session's (or the session has none: it was never handed out); a store
    /// error while loading. The first two are `403` responses.
    pub async fn verify_csrf(&self, token: &str) -> Result<(), SessionError> {
        if token.is_empty() {
            return Err(SessionError::CsrfMissing);
        }
        let expected = self.peek_raw(CSRF_FIELD).await?;
        match expected {
            Some(expected) if same_bytes(expected.as_bytes(), token.as_bytes()) => Ok(()),
            _ => Err(SessionError::CsrfMismatch),
        }
    }
}

#[cfg(feature = "axum")]
pub use extract::{CsrfConfig, CsrfForm, CsrfHeader, CsrfRejection};

#[cfg(feature = "axum")]
mod extract {
    use axum::body::Bytes;
    use axum::extract::{FromRequest, FromRequestParts, Request};
    use axum::response::{IntoResponse, Response};
    use http::{HeaderName, Method, StatusCode, header, request::Parts};
    use serde::de::DeserializeOwned;

    use crate::session::{Session, SessionError};

    /// Where the CSRF extractors look for the token. Defaults: the `x-csrf-token` header for
    /// [`CsrfHeader`], the `csrf_token` form field for [`CsrfForm`]. To change them, put a
    /// config in the request extensions (`axum::Extension`); without one the defaults apply.
    ///
    /// ```
    /// use axum::{Extension, Router, routing::post};
    /// use http::HeaderName;
    /// use redis_guard::session::{CsrfConfig, CsrfHeader, MemorySessionStore, SessionLayer};
    ///
    /// async fn save(_: CsrfHeader) -> &'static str {
    ///     "saved"
    /// }
    ///
    /// let csrf = CsrfConfig::new()
    ///     .header(HeaderName::from_static("x-xsrf-token"))
    ///     .field("_csrf");
    /// let app: Router = Router::new()
    ///     .route("/save", post(save))
    ///     .layer(Extension(csrf))
    ///     .layer(SessionLayer::new(MemorySessionStore::new())?);
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct CsrfConfig {
        header: HeaderName,
        field: String,
    }

    impl Default for CsrfConfig {
        fn default() -> Self {
            Self {
                header: HeaderName::from_static("x-csrf-token"),
                field: "csrf_token".to_owned(),
            }
        }
    }

    impl CsrfConfig {
        /// The defaults: header `x-csrf-token`, form field `csrf_token`.
        #[must_use]
        pub fn new() -> Self {
            Self::default()
        }

        /// The header [`CsrfHeader`] reads.
        #[must_use]
        pub fn header(mut self, name: HeaderName) -> Self {
            self.header = name;
            self
        }

        /// The form field [`CsrfForm`] reads (and removes before deserializing the form).
        #[must_use]
        pub fn field(mut self, name: impl Into<String>) -> Self {
            self.field = name.into();
            self
        }

        /// The header [`CsrfHeader`] reads.
        #[must_use]
        pub fn header_name(&self) -> &HeaderName {
            &self.header
        }

        /// The form field [`CsrfForm`] reads.
        #[must_use]
        pub fn field_name(&self) -> &str {
            &self.field
        }

        fn of(extensions: &http::Extensions) -> Self {
            extensions.get::<Self>().cloned().unwrap_or_default()
        }
    }

    /// Why a CSRF extractor refused a request. Every refusal is answered before the handler
    /// runs and writes nothing to the session store.
    #[derive(Debug)]
    #[non_exhaustive]
    pub enum CsrfRejection {
        /// No token in the request: `403`.
        Missing,
        /// A token that is not this session's (wrong, from another session, or the session has
        /// none): `403`.
        Mismatch,
        /// [`CsrfForm`]: the body is not a readable urlencoded form. The status says why:
        /// `415` (another content type), `413` (too large), `400` (malformed), `422` (the
        /// fields do not make the requested type).
        BadForm(StatusCode),
        /// The session could not be read: a store error (`503`, as [`SessionError`] answers).
        Session(SessionError),
        /// No [`SessionLayer`](crate::session::SessionLayer) on the route: a configuration
        /// error, `500`.
        NoSessionLayer,
        /// A safe method (`GET`, `HEAD`, `OPTIONS`, `TRACE`) on a route with a CSRF
        /// extractor: `403`, whatever token it carries. Safe requests must change nothing, so
        /// a handler that serves them takes no CSRF extractor.
        SafeMethod(Method),
    }

    impl From<SessionError> for CsrfRejection {
        fn from(e: SessionError) -> Self {
            match e {
                SessionError::CsrfMissing => Self::Missing,
                SessionError::CsrfMismatch => Self::Mismatch,
                other => Self::Session(other),
            }
        }
    }

    impl IntoResponse for CsrfRejection {
        fn into_response(self) -> Response {
            match self {
                Self::Missing => (StatusCode::FORBIDDEN, "missing CSRF token").into_response(),
                Self::Mismatch => (StatusCode::FORBIDDEN, "CSRF token mismatch").into_response(),
                Self::BadForm(status) => (status, "unreadable form").into_response(),
                Self::SafeMethod(method) => {
                    tracing::debug!(%method, "CSRF extractor refused a safe method");
                    let body = format!(
                        "a CSRF-protected route refuses the safe method {method}: send POST, PUT, PATCH or DELETE"
                    );
                    (StatusCode::FORBIDDEN, body).into_response()
                }
                Self::Session(e) => e.into_response(),
                Self::NoSessionLayer => {
                    tracing::error!("CSRF extractor used on a route without SessionLayer");
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "the session layer is not installed on this route",
                    )
                        .into_response()
                }
            }
        }
    }

    /// Safe methods (RFC 9110 §9.2.1): a handler that runs on them must change nothing, so
    /// it has no use for a CSRF extractor. One used there is refused, never passed: a route
    /// that answers `GET` through a state-changing handler would otherwise be a CSRF hole.
    fn is_safe(method: &Method) -> bool {
        matches!(
            *method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        )
    }

    fn session_of(extensions: &http::Extensions) -> Result<Session, CsrfRejection> {
        extensions
            .get::<Session>()
            .cloned()
            .ok_or(CsrfRejection::NoSessionLayer)
    }

    /// An extractor that lets a request through only if it carries this session's CSRF token in
    /// the `x-csrf-token` header (see [`CsrfConfig`] to change it). Anything else is refused with
    /// `403` before the handler runs; nothing is written. For pages that send the token from
    /// JavaScript (`fetch` with the header).
    ///
    /// Safe methods (`GET`, `HEAD`, `OPTIONS`, `TRACE`) are refused too
    /// ([`CsrfRejection::SafeMethod`], `403`), token or not: a handler that serves them must
    /// change nothing, so it takes no CSRF extractor. Route `GET` to another handler.
    ///
    /// ```
    /// use axum::{Router, routing::{get, post}};
    /// use redis_guard::session::{CsrfHeader, MemorySessionStore, Session, SessionError, SessionLayer};
    ///
    /// async fn token(session: Session) -> Result<String, SessionError> {
    ///     session.csrf_token().await
    /// }
    ///
    /// async fn delete_account(_: CsrfHeader, session: Session) -> Result<&'static str, SessionError> {
    ///     session.destroy().await?;
    ///     Ok("deleted")
    /// }
    ///
    /// let app: Router = Router::new()
    ///     .route("/csrf", get(token))
    ///     .route("/account/delete", post(delete_account))
    ///     .layer(SessionLayer::new(MemorySessionStore::new())?);
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    #[derive(Clone, Copy, Debug)]
    #[non_exhaustive]
    pub struct CsrfHeader;

    impl<S: Send + Sync> FromRequestParts<S> for CsrfHeader {
        type Rejection = CsrfRejection;

        async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
            if is_safe(&parts.method) {
                return Err(CsrfRejection::SafeMethod(parts.method.clone()));
            }
            let session = session_of(&parts.extensions)?;
            let config = CsrfConfig::of(&parts.extensions);
            let token = match parts.headers.get(&config.header) {
                None => "",
                // A value that is not text cannot be a token.
                Some(v) => v.to_str().map_err(|_| CsrfRejection::Mismatch)?,
            };
            session.verify_csrf(token).await?;
            Ok(Self)
        }
    }

    /// A urlencoded form (`application/x-www-form-urlencoded`) whose `csrf_token` field (see
    /// [`CsrfConfig`] to change it) must be this session's CSRF token. The token field is removed
    /// before the rest deserializes into `T`, so `T` need not declare it. For HTML forms.
    ///
    /// The form is the request body only: unlike `axum::Form`, the query string is never read
    /// (a token or field in the URL counts for nothing), and safe methods (`GET`, `HEAD`,
    /// `OPTIONS`, `TRACE`) are refused with `403` ([`CsrfRejection::SafeMethod`]): serve the page
    /// that shows the form from another handler. Otherwise: another content type is `415`, a
    /// body over axum's `DefaultBodyLimit` `413`, a malformed body `400`, a missing or wrong
    /// token `403` (checked before the fields are deserialized), fields that do not make a `T`
    /// `422`. A refused request writes nothing.
    ///
    /// ```
    /// use axum::{Router, routing::{get, post}, response::Html};
    /// use redis_guard::session::{CsrfForm, MemorySessionStore, Session, SessionError, SessionLayer};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Profile {
    ///     name: String,
    /// }
    ///
    /// async fn show(session: Session) -> Result<Html<String>, SessionError> {
    ///     let token = session.csrf_token().await?;
    ///     Ok(Html(format!(
    ///         r#"<form method="post"><input type="hidden" name="csrf_token" value="{token}">
    ///            <input name="name"><button>Save</button></form>"#
    ///     )))
    /// }
    ///
    /// async fn save(session: Session, CsrfForm(profile): CsrfForm<Profile>) -> Result<&'static str, SessionError> {
    ///     session.insert("name", &profile.name).await?;
    ///     Ok("saved")
    /// }
    ///
    /// let app: Router = Router::new()
    ///     .route("/profile", get(show).post(save))
    ///     .layer(SessionLayer::new(MemorySessionStore::new())?);
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    #[derive(Clone, Copy, Debug)]
    pub struct CsrfForm<T>(pub T);

    fn is_form(headers: &http::HeaderMap) -> bool {
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|mime| {
                mime.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
    }

    impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for CsrfForm<T> {
        type Rejection = CsrfRejection;

        async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
            if is_safe(req.method()) {
                return Err(CsrfRejection::SafeMethod(req.method().clone()));
            }
            let session = session_of(req.extensions())?;
            if !is_form(req.headers()) {
                return Err(CsrfRejection::BadForm(StatusCode::UNSUPPORTED_MEDIA_TYPE));
            }
            let field = CsrfConfig::of(req.extensions()).field;
            let body = Bytes::from_request(req, state)
                .await
                .map_err(|e| CsrfRejection::BadForm(e.status()))?;
            let mut pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(&body)
                .map_err(|_| CsrfRejection::BadForm(StatusCode::BAD_REQUEST))?;
            let token = pairs
                .iter()
                .find(|(k, _)| *k == field)
                .map(|(_, v)| v.as_str())
                .unwrap_or_default();
            session.verify_csrf(token).await?;
            pairs.retain(|(k, _)| *k != field);
            serde_urlencoded::to_string(&pairs)
                .ok()
                .and_then(|rest| serde_urlencoded::from_str(&rest).ok())
                .map(Self)
                .ok_or(CsrfRejection::BadForm(StatusCode::UNPROCESSABLE_ENTITY))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_256_random_bits_in_base64url() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert_eq!(URL_SAFE_NO_PAD.decode(&a).unwrap().len(), TOKEN_BYTES);
    }

    #[test]
    fn same_bytes_compares_whole_values() {
        assert!(same_bytes(b"abc", b"abc"));
        assert!(!same_bytes(b"abc", b"abd"));
        assert!(!same_bytes(b"abc", b"ab"));
        assert!(!same_bytes(b"", b"a"));
        assert!(same_bytes(b"", b""));
    }
}
