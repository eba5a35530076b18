//! [`CacheTags`]: the tags a handler puts on its response.

/// Tags of a response, set by the handler as a response extension; the layer records them with
/// the entry, and [`CacheLayer::invalidate_tag`](super::CacheLayer::invalidate_tag) voids every
/// entry that carries one. (A handler that cannot set extensions sends the header
/// `x-cache-tags: a, b` instead; the layer strips it.)
///
/// ```
/// # #[cfg(feature = "axum")] {
/// use axum::response::IntoResponse;
/// use redis_guard::cache::CacheTags;
///
/// async fn profile() -> impl IntoResponse {
///     (CacheTags::new(["user:42", "profiles"]), "the profile of user 42")
/// }
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheTags(pub(crate) Vec<String>);

impl CacheTags {
    /// These tags.
    pub fn new<T: Into<String>>(tags: impl IntoIterator<Item = T>) -> Self {
        Self(tags.into_iter().map(Into::into).collect())
    }

    /// The tags.
    #[must_use]
    pub fn tags(&self) -> &[String] {
        &self.0
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponseParts for CacheTags {
    type Error = std::convert::Infallible;

    fn into_response_parts(
        self,
        mut res: axum::response::ResponseParts,
    ) -> Result<axum::response::ResponseParts, Self::Error> {
        res.extensions_mut().insert(self);
        Ok(res)
    }
}
