//! [`Shared`]: the settings every request of one layer reads.

use std::sync::Arc;

use super::FailurePolicy;
use super::cookie::CookieConfig;
use super::store::{Lifetimes, SessionStore};
use super::token::Wire;

/// Settings shared by every request of a layer.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) life: Lifetimes,
    pub(crate) cookie: CookieConfig,
    /// How the session id travels: the cookie, or a token header.
    pub(crate) transport: Wire,
    pub(crate) failure: FailurePolicy,
    pub(crate) expose_user: bool,
}
