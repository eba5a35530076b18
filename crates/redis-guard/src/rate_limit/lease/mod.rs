//! What an admitted request holds until its response ends: the [`Lease`] of each concurrency
//! rule ([`Rule::concurrency`](crate::rate_limit::Rule::concurrency), `concurrency.rs`), the
//! cost it settles on what the response reports ([`ActualCost`], [`CostReport`],
//! `actual_cost.rs`), both carried by the request's `Holding` to the end of its response body
//! (`holding.rs`) and given back to the limiter through its receipt (`receipt.rs`).

mod actual_cost;
mod concurrency;
mod holding;
mod receipt;

pub use actual_cost::{ActualCost, CostReport};
pub use concurrency::Lease;
pub(crate) use holding::Holding;
pub(crate) use receipt::{Place, Receipt, request_id};
