//! [`MemoryLimiter`]: the same algorithms and decisions as Redis, in this process. Its table
//! (`table.rs`, sharded) names entries by a keyed hash of the rule and the key; what a
//! request's receipt gives back when its response ends is in `settle.rs`.

mod limiter;
mod settle;
mod table;

pub use limiter::MemoryLimiter;
pub(crate) use settle::InMemory;
