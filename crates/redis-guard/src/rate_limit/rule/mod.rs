//! What a rule is: a [`Rule`] names a [`Quota`] and says how it is counted; a [`Check`] applies
//! one to a key. What every limiter decides by is in `verdict.rs`; the settings only a layer
//! reads (mode, failure policy, [`Route`], costs and quotas taken from each request, looked up
//! by `quota_lookup.rs`) are in `in_layer.rs`; waiting instead of denying is `throttle.rs`.

mod check;
mod in_layer;
mod live;
mod quota;
pub(crate) mod quota_lookup;
mod reserve;
mod route;
mod throttle;
mod verdict;

pub use check::Check;
pub(crate) use in_layer::{QuotaFrom, Shared};
pub use quota::Quota;
pub use route::Route;
pub use verdict::Rule;
