//! [`MemoryLimiter`]: the same algorithms and decisions as Redis, in this process. Its table
//! (`table.rs`) names entries by a digest of the rule and the key (`entry_ids.rs`); what a
//! request's receipt gives back when its response ends is in `settle.rs`.

mod entry_ids;
mod limiter;
mod live;
mod settle;
mod table;

pub use limiter::MemoryLimiter;
pub(crate) use settle::InMemory;
