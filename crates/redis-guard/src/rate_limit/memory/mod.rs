//! [`MemoryLimiter`]: the same algorithms and decisions as Redis, in this process, over its
//! table (`table.rs`); what a request's receipt gives back when its response ends: `settle.rs`.

mod limiter;
mod settle;
mod table;

pub use limiter::MemoryLimiter;
pub(crate) use settle::InMemory;
