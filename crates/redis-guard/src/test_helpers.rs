//! Helpers for the crate's unit tests, in one named place (as tower-http's
//! `src/test_helpers.rs`).

use http::request::Parts;

/// The head of a `method` request to `uri`, without a body.
pub(crate) fn request_head<M>(method: M, uri: &str) -> Parts
where
    http::Method: TryFrom<M>,
    <http::Method as TryFrom<M>>::Error: Into<http::Error>,
{
    http::Request::builder()
        .method(method)
        .uri(uri)
        .body(())
        .unwrap()
        .into_parts()
        .0
}
