//! What the demo apps share (`examples/axum-app`, `examples/hyper-app`, `examples/tonic-app`):
//! an ordinary crate they depend on, not part of redis-guard.
//!
//! - [`settings`]: reading the environment, every error naming the variable and its value.
//! - [`login`]: login throttling, three rules in one all-or-nothing decision.
//! - [`csrf`]: cross-site and non-JSON writes refused before any handler runs.
//! - [`serve`]: the accept loop, with a timeout on everything a client controls.
//! - `testing` (feature `testing`, for the apps' tests): the route fuzzer and slow clients.

pub mod csrf;
pub mod login;
pub mod serve;
pub mod settings;
#[cfg(feature = "testing")]
pub mod testing;
