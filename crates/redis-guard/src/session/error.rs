//! The errors of the session layer.

use crate::backend::BackendError;

/// What can go wrong with a session. Handlers can match on it; with the `axum` feature it is also
/// a response (`400` for bad keys and values, `403` for a failed CSRF check, `503` when the
/// store is unavailable), an `application/problem+json` document that names the status only:
/// the error's text, which can describe internals, goes to the log, never to the client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The store failed: unreachable, too slow, or an answer that makes no sense.
    #[error("session store error")]
    Backend(#[from] BackendError),
    /// An earlier store failure in this request made the session unavailable.
    #[error("the session store is unavailable")]
    Unavailable,
    /// Keys starting with `$` are reserved for the session's metadata.
    #[error("session key `{0}` is reserved: keys starting with `$` hold the session's metadata")]
    ReservedKey(String),
    /// A key must be 1 to 256 bytes.
    #[error("invalid session key {0:?}: keys must be 1 to 256 bytes")]
    InvalidKey(String),
    /// A user id must be 1 to 256 bytes (it is stored in the session and, digested, names the
    /// user's index).
    #[error("invalid user id ({0} bytes): a user id must be 1 to 256 bytes")]
    InvalidUser(usize),
    /// A value could not be serialized.
    #[error("cannot serialize the value for session key `{key}`")]
    Serialize {
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A stored value does not deserialize into the requested type.
    #[error("session key `{key}` does not hold the requested type")]
    Deserialize {
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// `increment` on a field that does not hold an integer.
    #[error("session key `{0}` does not hold an integer")]
    NotAnInteger(String),
    /// The session was destroyed earlier in this request.
    #[error("the session was destroyed")]
    Destroyed,
    /// The operating system could not provide randomness for a new id.
    #[error("no randomness for a session id: {0}")]
    Random(String),
    /// A session's own idle timeout or absolute lifetime must be more than zero.
    #[error("a session's own {0} must be more than zero")]
    InvalidLifetime(&'static str),
    /// The request carries no CSRF token ([`Session::verify_csrf`](super::Session::verify_csrf)
    /// was given an empty one). A client error: `403`.
    #[error("missing CSRF token")]
    CsrfMissing,
    /// The request's CSRF token is not this session's (wrong, from another session, or the
    /// session has none). A client error: `403`.
    #[error("CSRF token mismatch")]
    CsrfMismatch,
}

impl SessionError {
    /// Whether the error comes from the store (rather than from the caller's keys or values).
    #[must_use]
    pub fn is_store_error(&self) -> bool {
        matches!(self, Self::Backend(_) | Self::Unavailable)
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for SessionError {
    fn into_response(self) -> axum::response::Response {
        use http::StatusCode;
        let status = if self.is_store_error() || matches!(self, Self::Random(_)) {
            tracing::warn!(error = %self, "session store unavailable");
            StatusCode::SERVICE_UNAVAILABLE
        } else if matches!(self, Self::CsrfMissing | Self::CsrfMismatch) {
            tracing::debug!(error = %self, "request refused: CSRF check failed");
            StatusCode::FORBIDDEN
        } else if matches!(self, Self::Destroyed) {
            StatusCode::UNAUTHORIZED
        } else if matches!(self, Self::Deserialize { .. } | Self::NotAnInteger(_)) {
            tracing::error!(error = %self, "stored session value has another type");
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            tracing::debug!(error = %self, "bad session key or value");
            StatusCode::BAD_REQUEST
        };
        // The detail went to the log above; the client learns the status only.
        crate::problem::problem(status, "", &[])
            .map(axum::body::Body::from)
            .into_response()
    }
}
