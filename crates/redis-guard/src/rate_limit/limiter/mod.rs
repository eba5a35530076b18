//! What a [`Limiter`] is and what it offers: the sealed interface a layer drives, one request's
//! rules decided all or nothing (`interface.rs`); the user operations called on a limiter
//! outside a layer (`direct.rs`); and what they read and steer per rule and key, with the
//! [`Bans`] a rule can carry (`operations.rs`), in the key's override record (`overrides.rs`).

mod direct;
mod interface;
pub(crate) mod live;
pub(crate) mod operations;
pub(crate) mod overrides;

pub(crate) use crate::rate_limit::Check;
pub(crate) use interface::{
    BoxFuture, Engine, Held, LimiterFuture, Pending, PlainStates, PlainStore, Settling, chargeable,
    count_failure_of, no_checks, settling,
};
pub use interface::{Limiter, LimiterError};
pub use operations::{Bans, Inspection};
