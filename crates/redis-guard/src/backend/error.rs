//! The one error type of the Redis side, shared by every layer.

use std::time::Duration;

/// Why a call to the store failed. [`LimiterError`](crate::rate_limit::LimiterError) and
/// [`SessionError`](crate::session::SessionError) carry it as their `Backend` variant.
///
/// Errors are classified by what Redis says they are ([`redis::RedisError::kind`] and
/// [`code`](redis::RedisError::code)), never by their text: our scripts raise errors whose
/// code starts with `RG_` (e.g. `RG_ARITY`), and a script that fails in Lua (a custom algorithm
/// that does not compile) answers `ERR`.
///
/// ```
/// use redis_guard::backend::BackendError;
/// let e = BackendError::Timeout(std::time::Duration::from_millis(100));
/// assert_eq!(e.code(), None);
/// assert!(e.is_unavailable());
/// ```
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// Redis could not be reached, or refused the command for a reason of its own (connection
    /// refused or dropped, cluster down, out of memory, a key of the wrong type, …).
    #[error("redis error")]
    Redis(#[source] redis::RedisError),
    /// Redis did not answer within the configured timeout.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// A script reported an error: one of ours (code `RG_…`), or a Lua error (code `ERR`), e.g.
    /// a custom algorithm that does not compile or breaks its contract.
    #[error("script error {code}: {message}")]
    Script {
        /// The error code (the first word of the error reply), e.g. `RG_ALGORITHM`.
        code: String,
        /// The rest of the reply.
        message: String,
        /// Redis' error.
        #[source]
        source: redis::RedisError,
    },
    /// Redis answered something the caller does not understand.
    #[error("unexpected reply from redis: {0}")]
    BadReply(String),
    /// The call was not made: Redis failed several calls in a row, and the backend's circuit
    /// [`Breaker`](super::Breaker) lets no call through until its cool-down ends. Answered at
    /// once, without touching the network; [`is_unavailable`](Self::is_unavailable) is `true`.
    #[error(
        "redis circuit breaker is open: redis failed repeatedly, so it is not called until a probe finds it back"
    )]
    CircuitOpen,
    /// The call was not made: the value has no JSON form (the value cache's `set` and `add`:
    /// a map whose keys are not strings, a `Serialize` impl that fails).
    #[error("the value cannot be stored: it has no JSON form")]
    Encode(#[source] std::sync::Arc<serde_json::Error>),
}

impl BackendError {
    /// Classifies an error from running a script: codes of ours (`RG_…`) and Lua errors (`ERR`)
    /// are [`BackendError::Script`], everything else [`BackendError::Redis`].
    #[cfg(any(
        feature = "rate-limit",
        feature = "session",
        feature = "cache",
        feature = "idempotency"
    ))]
    pub(crate) fn from_script(e: redis::RedisError) -> Self {
        match e.code() {
            Some(code) if code.starts_with("RG_") || code == "ERR" => Self::Script {
                code: code.to_owned(),
                message: e.detail().unwrap_or_default().to_owned(),
                source: e,
            },
            _ => Self::Redis(e),
        }
    }

    /// The error code of a [`BackendError::Script`] (`RG_…` for our scripts' own errors).
    #[must_use]
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Script { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether the store could not be used at all (unreachable, too slow, or given up on by the
    /// circuit breaker), as opposed to a store that answered with an error.
    #[must_use]
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Timeout(_) | Self::CircuitOpen => true,
            Self::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_unrecoverable_error()
            }
            Self::Script { .. } | Self::BadReply(_) | Self::Encode(_) => false,
        }
    }
}
