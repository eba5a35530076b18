//! Running the variants round-robin against their own Redis.

use std::net::SocketAddr;

use redis_guard_testkit::{RedisCluster, RedisServer, http};
use tokio::task::JoinHandle;

use super::machine::Machine;
use super::options::Options;
use super::redis_stats::{Census, CommandStats, KeyBytes, RedisNodes};
use super::variant::{RedisUse, SETUP_TIMEOUT, Variant, serve_with_peer};
use super::wrk::{self, WrkReport};

/// One measured `wrk` run of one variant.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// The round it belongs to (0-based).
    pub round: usize,
    /// What `wrk` reported.
    pub wrk: WrkReport,
    /// `INFO commandstats` over the run (summed over the nodes), for variants that use Redis.
    pub redis: Option<CommandStats>,
    /// Redis's process CPU (user + sys, every node) over the run, microseconds.
    pub redis_process_usec: Option<u64>,
    /// What the app sends and what runs inside its scripts, watched on a few requests right
    /// after the run.
    pub census: Option<Census>,
}

/// Every run of one variant.
#[derive(Clone, Debug, PartialEq)]
pub struct VariantRuns {
    /// The variant.
    pub variant: Variant,
    /// One per round, in order.
    pub runs: Vec<Measurement>,
    /// The keys its last run left in Redis, for variants that use Redis.
    pub keys: Option<KeyBytes>,
}

/// Everything one benchmark run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchReport {
    /// How it was run.
    pub options: Options,
    /// Where.
    pub machine: Machine,
    /// Per variant, in [`Variant::ALL`] order.
    pub variants: Vec<VariantRuns>,
}

/// A variant's app, being served.
struct Served {
    variant: Variant,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

/// Starts Redis (and the cluster when a variant needs it), serves every selected variant, and
/// runs them round-robin — A B C … A B C … — for `options.rounds` rounds. Before each run:
/// `FLUSHALL`, a fresh session for the session variants, `CONFIG RESETSTAT`; after it:
/// `INFO commandstats` and `MEMORY USAGE` of the keys left. Progress goes to stderr.
///
/// # Errors
///
/// `wrk` or `redis-server` is missing (the message says how to install it), or any step failed
/// (the message names the variant and round).
pub async fn run(options: &Options) -> Result<BenchReport, String> {
    let wrk_version = wrk::version().await?;
    let redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let needs_cluster = options
        .variants
        .iter()
        .any(|v| v.redis_use() == RedisUse::Cluster);
    let cluster = if needs_cluster {
        eprintln!("starting a 3-master Redis Cluster…");
        Some(
            tokio::task::spawn_blocking(RedisCluster::start)
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };

    let standalone = RedisNodes::connect(&[redis.port()]).await?;
    let cluster_nodes = match &cluster {
        Some(c) => Some(RedisNodes::connect(&c.ports()).await?),
        None => None,
    };
    let cluster_urls = cluster.as_ref().map(RedisCluster::urls);
    let machine = Machine::gather(standalone.version().await?, wrk_version);

    let mut served = Vec::with_capacity(options.variants.len());
    for &variant in &options.variants {
        let app = variant
            .app(&redis.url(), cluster_urls.as_deref())
            .await
            .map_err(|e| format!("{variant}: {e}"))?;
        let (addr, task) = serve_with_peer(app).await?;
        served.push(Served {
            variant,
            addr,
            task,
        });
    }

    let mut results: Vec<VariantRuns> = options
        .variants
        .iter()
        .map(|&variant| VariantRuns {
            variant,
            runs: Vec::with_capacity(options.rounds),
            keys: None,
        })
        .collect();
    let outcome = async {
        for round in 0..options.rounds {
            for (app, result) in served.iter().zip(&mut results) {
                let nodes = match app.variant.redis_use() {
                    RedisUse::None => None,
                    RedisUse::Standalone => Some(&standalone),
                    RedisUse::Cluster => cluster_nodes.as_ref(),
                };
                let (measurement, keys) = measure(app, nodes, round, options)
                    .await
                    .map_err(|e| format!("{} (round {}): {e}", app.variant, round + 1))?;
                eprintln!(
                    "round {}/{} {:<22} {:>10.0} req/s  p50 {:>9?}  p99 {:>9?}",
                    round + 1,
                    options.rounds,
                    app.variant.name(),
                    measurement.wrk.requests_per_sec,
                    measurement.wrk.p50,
                    measurement.wrk.p99,
                );
                result.runs.push(measurement);
                if keys.is_some() {
                    result.keys = keys;
                }
            }
        }
        Ok::<_, String>(())
    }
    .await;
    for app in &served {
        app.task.abort();
    }
    outcome?;
    drop((redis, cluster));
    Ok(BenchReport {
        options: options.clone(),
        machine,
        variants: results,
    })
}

/// One run of one variant.
async fn measure(
    app: &Served,
    nodes: Option<&RedisNodes>,
    round: usize,
    options: &Options,
) -> Result<(Measurement, Option<KeyBytes>), String> {
    if let Some(nodes) = nodes {
        nodes.flush().await?;
    }
    let headers = if app.variant.needs_session() {
        vec![format!("Cookie: {}", start_session(app.addr).await?)]
    } else {
        Vec::new()
    };
    let cpu_before = match nodes {
        Some(nodes) => {
            nodes.reset_stats().await?;
            Some(nodes.process_cpu_usec().await?)
        }
        None => None,
    };
    let report = wrk::run(app.addr, options.connections, options.duration, &headers).await?;
    if report.socket_errors > 0 {
        eprintln!(
            "warning: {}: wrk reported {} socket errors",
            app.variant, report.socket_errors
        );
    }
    if report.non_2xx > 0 && !app.variant.expects_denials() {
        eprintln!(
            "warning: {}: {} responses were not 2xx",
            app.variant, report.non_2xx
        );
    }
    let (mut redis, mut redis_process_usec, mut census, mut keys) = (None, None, None, None);
    if let (Some(nodes), Some(before)) = (nodes, cpu_before) {
        redis_process_usec = Some(nodes.process_cpu_usec().await?.saturating_sub(before));
        redis = Some(nodes.command_stats().await?);
        census = Some(nodes.census(|| census_requests(app.addr, &headers)).await?);
        keys = Some(nodes.key_bytes().await?);
    }
    Ok((
        Measurement {
            round,
            wrk: report,
            redis,
            redis_process_usec,
            census,
        },
        keys,
    ))
}

/// Requests sent while [`RedisNodes::census`] watches.
const CENSUS_REQUESTS: u64 = 4;

/// `GET /` [`CENSUS_REQUESTS`] times with the run's headers (`"Name: value"`), one connection
/// each; any status is fine (the abusive variant answers 429).
async fn census_requests(addr: SocketAddr, headers: &[String]) -> Result<u64, String> {
    let pairs: Vec<(&str, &[u8])> = headers
        .iter()
        .filter_map(|h| h.split_once(": "))
        .map(|(name, value)| (name, value.as_bytes()))
        .collect();
    for _ in 0..CENSUS_REQUESTS {
        tokio::time::timeout(SETUP_TIMEOUT, http::request(addr, "GET", "/", &pairs, b""))
            .await
            .map_err(|_| format!("GET / took more than {SETUP_TIMEOUT:?}"))?
            .map_err(|e| format!("GET /: {e}"))?;
    }
    Ok(CENSUS_REQUESTS)
}

/// `POST /start` on a session variant; returns the `Cookie` header value that carries the new
/// session (`name=value; …`).
async fn start_session(addr: SocketAddr) -> Result<String, String> {
    let response = tokio::time::timeout(
        SETUP_TIMEOUT,
        http::request(addr, "POST", "/start", &[], b""),
    )
    .await
    .map_err(|_| format!("POST /start took more than {SETUP_TIMEOUT:?}"))?
    .map_err(|e| format!("POST /start: {e}"))?;
    if !(200..300).contains(&response.status) {
        return Err(format!(
            "POST /start: status {}, body {:?}",
            response.status,
            response.text()
        ));
    }
    crate::session_race::echo_cookies(&response)
        .ok_or_else(|| "POST /start set no cookie".to_owned())
}
