//! [`SessionMark`]: what the session layer tells the response cache about a request, so that
//! no cache entry is ever made of a page that depends on someone's session.
//!
//! The session layer's `Session` in the request's extensions holds one (a cache inside the
//! layer reads it there), and the layer puts the same one in the response's (a cache outside
//! it reads it there). Both `cache` and `session` build this module; each alone uses its half.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a request carried a session credential, and whether its handler used the session.
/// Clones share the flag: the handler's use shows at response time.
#[derive(Clone, Debug, Default)]
pub(crate) struct SessionMark(Arc<Flags>);

#[derive(Debug, Default)]
struct Flags {
    carried: bool,
    touched: AtomicBool,
}

#[cfg_attr(not(feature = "session"), allow(dead_code))]
impl SessionMark {
    /// A mark for a request that `carried` a session cookie or token (well-formed or not).
    pub(crate) fn new(carried: bool) -> Self {
        Self(Arc::new(Flags {
            carried,
            touched: AtomicBool::new(false),
        }))
    }

    /// The handler loaded, read or changed the session.
    pub(crate) fn touch(&self) {
        self.0.touched.store(true, Ordering::Release);
    }

    /// The request carried a session credential.
    pub(crate) fn carried(&self) -> bool {
        self.0.carried
    }

    /// The handler used the session (so far).
    pub(crate) fn touched(&self) -> bool {
        self.0.touched.load(Ordering::Acquire)
    }

    /// The response may depend on a session.
    pub(crate) fn personal(&self) -> bool {
        self.carried() || self.touched()
    }
}
