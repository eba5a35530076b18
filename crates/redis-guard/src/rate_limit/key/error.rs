//! Why an extractor found no key.

/// Why no key could be taken from a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The request does not carry what the extractor looks for (no header, no user). The layer's
    /// [`MissingKey`](crate::rate_limit::MissingKey) policy decides what happens.
    #[error("the request has no rate-limit key")]
    Missing,
    /// The server is set up wrongly, e.g. axum is served without `into_make_service_with_connect_info`.
    /// The layer answers `500` and logs the message once.
    #[error("rate-limit key extractor is misconfigured: {0}")]
    Misconfigured(&'static str),
}
