//! The algorithms that decide, and their Lua scripts.
//!
//! Every algorithm exists twice with the same integer arithmetic: as Lua run inside Redis (one
//! script call decides and records for all rules of a request, clock from Redis `TIME`) and as
//! Rust for the [`MemoryLimiter`](crate::rate_limit::MemoryLimiter). Time is counted in whole
//! microseconds on both sides.

mod concurrency;
mod custom;
mod fixed_window;
mod gcra;
pub(crate) mod script;
mod sliding_counter;
mod sliding_log;
mod token_bucket;

mod kind;
mod rule_state;
mod state;
mod step;

pub(crate) use concurrency::{release as release_lease, renew as renew_lease};
pub use custom::CustomAlgorithm;
pub use kind::Algorithm;
pub use rule_state::RuleState;
pub(crate) use state::{Commit, Params, State, Step, ceil_ms, idiv, narrow};
pub(crate) use step::{Refunded, charge, refund, standing_reset, step};
