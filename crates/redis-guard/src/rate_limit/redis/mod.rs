//! [`RedisLimiter`]: every replica's decisions in one Redis (or a Cluster). An evaluation runs one
//! script call per hash slot (`evaluation.rs`, its reply read by `script_reply.rs`); a fixed window
//! goes without Lua, its transactions coalesced (`fixed_window_plain.rs`, `fixed_window_batch.rs`);
//! denials are cached in process (`denials.rs`), and the digests of recent keys (`digests.rs`); what a request's receipt gives back when its
//! response ends runs the refund, charge and renewal scripts (`give_back.rs`); hot keys lease
//! blocks of their quota (`hot_lease/`); an operator's operations on one key run the operations
//! script (`key_operations.rs`).

mod denials;
mod digests;
mod evaluation;
mod fixed_window_batch;
mod fixed_window_plain;
mod give_back;
mod hot_lease;
mod key_operations;
mod limiter;
mod live;
mod plain;
mod script_reply;

pub(crate) use give_back::OnRedis;
pub use limiter::RedisLimiter;
#[cfg(test)]
pub(crate) use script_reply::parse_reply;
