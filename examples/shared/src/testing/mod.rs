//! Helpers of the demo apps' end-to-end tests (feature `testing`).

pub mod route_fuzz;
pub mod settings_fuzz;
pub mod slow_loris;
pub mod tls;
