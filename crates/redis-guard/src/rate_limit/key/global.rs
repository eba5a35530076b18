//! [`Global`]: one key for every request.

use http::request::Parts;

use super::digest::Key;
use super::error::KeyError;
use super::extractor::KeyExtractor;

/// One key for every request: a global limit on a route (protecting a fragile upstream).
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _: &Parts) -> Result<Key, KeyError> {
        Ok(Key::from("global"))
    }
}
