//! Throughput side by side: every variant against the same route, the same Redis, the same
//! machine, alternating.
//!
//! [`run`] starts a private `redis-server` (and a 3-master cluster when `redis-cluster` is
//! selected), serves each [`Variant`] on its own loopback port, then for each round runs every
//! variant once under `wrk -t2 -c<connections> -d<duration> --latency`. Around every run it
//! flushes Redis (`FLUSHALL`), creates a fresh session for the session variants, resets
//! `INFO commandstats` (`CONFIG RESETSTAT`), and afterwards reads the command statistics and the
//! `MEMORY USAGE` of the keys left. [`BenchReport::rows`] turns the runs into medians and ratios
//! to `bare` in the same round; [`markdown_table`], [`chart::svg`] and [`page::write`] render
//! them. The `bench` binary is the command line; `bench --scripts` runs [`scripts`] instead.

pub mod chart;
mod machine;
mod options;
pub mod page;
mod redis_stats;
mod run;
pub mod scripts;
mod table;
mod variant;
pub mod wrk;

pub use machine::Machine;
pub use options::{Command, DEFAULT_CALLS, Options, ScriptsOptions, usage};
pub use redis_stats::{
    CommandStat, CommandStats, KeyBytes, RedisNodes, parse_commandstats, totals,
};
pub use run::{BenchReport, Measurement, VariantRuns, run};
pub use table::{Row, format_latency, format_rate, markdown_notes, markdown_table, median};
pub use variant::{
    BB8_POOL_SIZE, HIGH_QUOTA_PER_SECOND, RedisUse, Variant, ok_route, serve_with_peer,
};
pub(crate) use variant::{backend, by_name};
pub use wrk::WrkReport;
