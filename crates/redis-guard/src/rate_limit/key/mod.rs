//! Where a request's rate-limit key comes from: the [`KeyExtractor`] trait and the built-in
//! extractors, their combinators ([`KeyExtractorExt`]), and the [`Key`] itself, which reaches
//! Redis only as its digest ([`Key::digest`]).

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
