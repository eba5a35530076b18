//! Where a request's rate-limit key comes from.
//!
//! A [`KeyExtractor`] looks at the request head and returns the [`Key`] its rule counts against.
//! Closures `Fn(&http::request::Parts) -> Option<Key>` are extractors; the built-in ones cover the
//! peer IP ([`ClientIp`](crate::client_ip::ClientIp)), a header ([`HeaderKey`], e.g. an API key), a typed value the
//! application put into the request extensions ([`ExtensionKey`], e.g. the user id) and one
//! key for everybody ([`Global`]). [`KeyExtractorExt`] combines two extractors: both keys as one
//! ([`And`]), or the second when the first has none ([`Or`]).
//!
//! The key itself never reaches Redis: key names carry a digest of it (see [`Key::digest`]), so a
//! phone number, an e-mail address or an API key is never visible in `KEYS`, `MONITOR` or a dump.

mod compose;
mod digest;
mod error;
mod extension;
mod extractor;
mod global;
mod header;

pub use compose::{And, KeyExtractorExt, Or};
pub(crate) use digest::Inline;
pub use digest::Key;
pub use error::KeyError;
pub use extension::ExtensionKey;
pub use extractor::KeyExtractor;
pub use global::Global;
pub use header::HeaderKey;
