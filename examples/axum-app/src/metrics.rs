//! `GET /metrics`: every `metrics`-facade metric of this process (redis-guard's per-rule
//! counters and decision latency, the breaker state, the session counters) in the Prometheus
//! text exposition format, rendered by `metrics-exporter-prometheus` and served by this app's own
//! router (the exporter's HTTP listener is compiled out).
//!
//! The recorder is process-global and must be installed before any layer is built: a metric
//! registered before it exists goes nowhere, for good.

use std::time::Duration;

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::config::Store;

/// The Prometheus text format, version 0.0.4.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often histogram samples are folded into their buckets. Without this upkeep the exporter
/// keeps every raw sample recorded between two scrapes (no scrape: memory grows for ever).
const UPKEEP: Duration = Duration::from_secs(5);

/// Buckets of the `…_seconds` histograms, in seconds: from an in-process decision (a few µs)
/// through a Redis round trip (sub-millisecond on loopback) to a call that waits for the
/// timeout. Buckets rather than the exporter's default summary: they add up across replicas.
const SECONDS_BUCKETS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 1.0,
];

/// Installs the global Prometheus recorder and returns the `/metrics` route. Also starts the
/// histogram upkeep on the current Tokio runtime, and records
/// `axum_app_info{backend="memory"|"redis"|"cluster"} 1` so a dashboard (the page's panel
/// among them) knows whether there is a Redis and so a breaker to show.
///
/// # Errors
///
/// Another recorder is already installed.
pub(crate) fn install(store: &Store) -> Result<Router, String> {
    let backend = match store {
        Store::Memory => "memory",
        Store::Redis(_) => "redis",
        Store::Cluster(_) => "cluster",
        Store::Sentinel { .. } => "sentinel",
    };
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS_BUCKETS)
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    ::metrics::gauge!("axum_app_info", "backend" => backend).set(1.0);
    tokio::spawn(upkeep(handle.clone()));
    Ok(Router::new().route("/metrics", get(move || render(handle.clone()))))
}

async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(UPKEEP);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

async fn render(handle: PrometheusHandle) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, TEXT_FORMAT), (CACHE_CONTROL, "no-store")],
        handle.render(),
    )
}
