//! `bench --scripts`: what one script call and one decision cost Redis, with no HTTP and no
//! load generator in the way.
//!
//! [`run`] starts an idle `redis-server` of its own and, for each [`Script`] and each batch of
//! [`BATCHES`], makes [`ScriptsOptions::calls`] script calls that carry `batch` decisions each,
//! one call at a time, every decision on a key of its own. Around them it resets and reads
//! `INFO commandstats`: the `usec` of `cmdstat_evalsha` (which includes the commands the script
//! runs) divided by its calls, and by the decisions. Beside redis-guard's own scripts it runs
//! [a minimal GCRA](REFERENCE_GCRA) written here, the floor a decision script can reach, so
//! every figure also reads as a ratio to it at the same batch.
//!
//! redis-guard's scripts are driven through the real [`RedisLimiter::check`], so they are sent
//! exactly as the limiter sends them: a limiter with [`RedisLimiter::batch_size`]`(batch)`,
//! `batch` checks started together on a single-threaded runtime. They all queue before the
//! limiter's coalescing task runs, so it sends them as one `EVALSHA` of `batch` entries; the
//! table's decisions-per-call column shows that it did.

use std::fmt::Write as _;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis_guard::rate_limit::{Algorithm, Key, Quota, RedisLimiter, Rule};
use redis_guard_testkit::RedisServer;

use super::machine::Machine;
use super::options::ScriptsOptions;
use super::redis_stats::RedisNodes;
use super::variant::{HIGH_QUOTA_PER_SECOND, open};

/// The decisions one call carries, in the order they are measured.
pub const BATCHES: [usize; 3] = [1, 8, 64];

/// The reference: a minimal GCRA decision per key (`TIME`, `GET`, arithmetic, `SET … PX`).
pub const REFERENCE_GCRA: &str = include_str!("reference_gcra.lua");

/// A script `--scripts` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Script {
    /// [`REFERENCE_GCRA`], called with `EVALSHA` through redis-rs.
    Reference,
    /// redis-guard's lean GCRA script (`gcra_plain.lua`), as `RedisLimiter` sends it for a rule
    /// set that is all GCRA.
    Gcra,
    /// redis-guard's general evaluation script (`evaluate.lua`), as `RedisLimiter` sends it for
    /// one `Algorithm::FixedWindow` rule that needs a script (here: one built
    /// `with_overrides`; without, one fixed-window rule takes no script on Redis >= 7).
    FixedWindow,
}

impl Script {
    /// Every script, in the order the table lists them.
    pub const ALL: [Self; 3] = [Self::Reference, Self::Gcra, Self::FixedWindow];

    /// The name in the table.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Reference => "reference-gcra",
            Self::Gcra => "gcra",
            Self::FixedWindow => "fixed-window",
        }
    }

    /// One line on what the script is, for the docs page.
    #[must_use]
    pub fn description(self) -> &'static str {
        match self {
            Self::Reference => {
                "the harness's minimal GCRA (`src/throughput/reference_gcra.lua`): per key `GET` \
                 the TAT, compare, `SET … PX`; one `TIME` per call; the reply is one integer per key"
            }
            Self::Gcra => {
                "redis-guard's lean GCRA script (`gcra_plain.lua`), sent by `RedisLimiter::check` for \
                 one GCRA rule: the rule's numbers once per call, one integer per decision"
            }
            Self::FixedWindow => {
                "redis-guard's general script (`evaluate.lua`), sent by `RedisLimiter::check` for \
                 one `Algorithm::FixedWindow` rule built `with_overrides` (without, one fixed-window \
                 rule is a `MULTI` of `INCRBY` and `PEXPIRE … NX` on Redis >= 7, no script)"
            }
        }
    }
}

/// What Redis counted for one script at one batch size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptRun {
    /// The script.
    pub script: Script,
    /// The decisions each call was meant to carry.
    pub batch: usize,
    /// `EVALSHA` calls Redis counted.
    pub calls: u64,
    /// Decisions made over those calls.
    pub decisions: u64,
    /// Redis CPU in those calls (`usec` of `cmdstat_evalsha`), µs.
    pub usec: u64,
}

impl ScriptRun {
    /// Redis CPU µs per call.
    #[must_use]
    pub fn usec_per_call(&self) -> f64 {
        per(self.usec, self.calls)
    }

    /// Redis CPU µs per decision.
    #[must_use]
    pub fn usec_per_decision(&self) -> f64 {
        per(self.usec, self.decisions)
    }

    /// Decisions per call: [`batch`](Self::batch) when every call carried a full batch.
    #[must_use]
    pub fn decisions_per_call(&self) -> f64 {
        per(self.decisions, self.calls)
    }
}

#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn per(n: u64, d: u64) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

/// Everything one `--scripts` run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptsReport {
    /// How it was run.
    pub options: ScriptsOptions,
    /// Where.
    pub machine: Machine,
    /// Per script, then per batch, in [`Script::ALL`] and [`BATCHES`] order.
    pub runs: Vec<ScriptRun>,
}

impl ScriptsReport {
    /// `run`'s µs per decision divided by the reference's at the same batch, if it was measured.
    #[must_use]
    pub fn ratio(&self, run: &ScriptRun) -> Option<f64> {
        let reference = self
            .runs
            .iter()
            .find(|r| r.script == Script::Reference && r.batch == run.batch)?
            .usec_per_decision();
        (reference > 0.0).then(|| run.usec_per_decision() / reference)
    }
}

/// The table: script, batch, calls, decisions per call, Redis µs per call and per decision,
/// × reference at the same batch.
#[must_use]
pub fn markdown_table(report: &ScriptsReport) -> String {
    let mut s = String::from(
        "| script | batch | calls | decisions/call | Redis µs/call | Redis µs/decision | × reference |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for run in &report.runs {
        let ratio = report
            .ratio(run)
            .map_or_else(|| "—".to_owned(), |r| format!("{r:.2}"));
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {:.2} | {:.2} | {:.2} | {ratio} |",
            run.script.name(),
            run.batch,
            run.calls,
            run.decisions_per_call(),
            run.usec_per_call(),
            run.usec_per_decision(),
        );
    }
    s
}

/// Starts an idle `redis-server` and measures every [`Script`] at every batch of [`BATCHES`].
/// Blocks: it runs on a single-threaded runtime of its own (see the module docs for why), so
/// call it outside any tokio runtime (from `main`, a `#[test]` or a `std::thread`).
///
/// # Errors
///
/// Called inside a tokio runtime; `redis-server` is missing or fails, a decision fails or is
/// denied, or Redis answers something unexpected (the message names the script and batch).
pub fn run(options: &ScriptsOptions) -> Result<ScriptsReport, String> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(
            "scripts::run runs a tokio runtime of its own, so it cannot be called from \
                    inside one (spawn_blocking's threads count as inside): call it from main or \
                    from a std::thread"
                .to_owned(),
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a single-threaded tokio runtime: {e}"))?;
    let redis = RedisServer::start().map_err(|e| e.to_string())?;
    let report = runtime.block_on(async {
        let nodes = RedisNodes::connect(&[redis.port()]).await?;
        let machine = Machine::gather(nodes.version().await?, "none (no load generator)".into());
        let mut runs = Vec::with_capacity(Script::ALL.len() * BATCHES.len());
        for script in Script::ALL {
            for batch in BATCHES {
                let run = measure(script, batch, options.calls, &redis.url(), &nodes)
                    .await
                    .map_err(|e| format!("{} at batch {batch}: {e}", script.name()))?;
                eprintln!(
                    "{:<15} batch {batch:>2}: {:>8.2} µs/call {:>7.2} µs/decision ({:.2} decisions/call)",
                    script.name(),
                    run.usec_per_call(),
                    run.usec_per_decision(),
                    run.decisions_per_call(),
                );
                runs.push(run);
            }
        }
        Ok::<_, String>(ScriptsReport {
            options: options.clone(),
            machine,
            runs,
        })
    })?;
    drop(redis);
    Ok(report)
}

/// `calls` calls of `script`, each carrying `batch` decisions, on a flushed Redis; the counts of
/// `cmdstat_evalsha` over them (after one call that loads the script).
async fn measure(
    script: Script,
    batch: usize,
    calls: u64,
    redis_url: &str,
    nodes: &RedisNodes,
) -> Result<ScriptRun, String> {
    nodes.flush().await?;
    let mut driver = Driver::new(script, batch, redis_url).await?;
    driver.call().await?;
    nodes.reset_stats().await?;
    for _ in 0..calls {
        driver.call().await?;
    }
    let stats = nodes.command_stats().await?;
    let evalsha = stats.get("evalsha").copied().unwrap_or_default();
    let run = ScriptRun {
        script,
        batch,
        calls: evalsha.calls,
        decisions: calls * batch as u64,
        usec: evalsha.usec,
    };
    // The reference takes its batch in one call; the limiter's coalescer makes up to three
    // (see `Driver::call`).
    let most = if script == Script::Reference {
        calls
    } else {
        calls * batch.min(3) as u64
    };
    if run.calls < calls || run.calls > most {
        eprintln!(
            "warning: {} at batch {batch}: {calls} calls of {batch} decisions made, Redis counted \
             {} EVALSHA calls",
            script.name(),
            run.calls
        );
    }
    Ok(run)
}

/// Makes one call of a script carrying a batch of decisions.
enum Driver {
    Reference {
        script: redis::Script,
        conn: MultiplexedConnection,
        keys: Vec<String>,
    },
    Limiter {
        // Boxed: a rule is several times the size of the reference's fields.
        limiter: RedisLimiter,
        rule: Box<Rule>,
        keys: Vec<Key>,
    },
}

impl Driver {
    async fn new(script: Script, batch: usize, redis_url: &str) -> Result<Self, String> {
        let high = Quota::per_second(HIGH_QUOTA_PER_SECOND);
        let algorithm = match script {
            Script::Reference => {
                let client = redis::Client::open(redis_url).map_err(|e| e.to_string())?;
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| format!("connecting to {redis_url}: {e}"))?;
                return Ok(Self::Reference {
                    script: redis::Script::new(REFERENCE_GCRA),
                    conn,
                    keys: (0..batch).map(|i| format!("reference:{i}")).collect(),
                });
            }
            Script::Gcra => Algorithm::Gcra,
            Script::FixedWindow => Algorithm::FixedWindow,
        };
        let rule = Rule::new("scripts", high).with_algorithm(algorithm);
        // A fixed window of one rule takes no script on Redis >= 7: an override record to read
        // keeps it on the script this table measures.
        let rule = match script {
            Script::FixedWindow => rule.with_overrides(),
            _ => rule,
        };
        Ok(Self::Limiter {
            limiter: RedisLimiter::new(open(redis_url).await?).batch_size(batch),
            rule: Box::new(rule),
            keys: (0..batch)
                .map(|i| Key::from(format!("client-{i}")))
                .collect(),
        })
    }

    /// One script call: `batch` decisions, each on its own key; every one must be admitted.
    async fn call(&mut self) -> Result<(), String> {
        match self {
            Self::Reference { script, conn, keys } => {
                let mut invocation = script.prepare_invoke();
                for key in keys.iter() {
                    invocation.key(key);
                }
                // The high quota's emission interval (1 µs) and a burst of a second's worth.
                let interval = 1_000_000 / u64::from(HIGH_QUOTA_PER_SECOND);
                invocation.arg(interval).arg(1_000_000 - interval);
                let reply: Vec<i64> = invocation
                    .invoke_async(conn)
                    .await
                    .map_err(|e| format!("EVALSHA: {e}"))?;
                if reply.len() != keys.len() || reply.iter().any(|&admitted| admitted != 1) {
                    return Err(format!(
                        "the reference script answered {reply:?} for {} keys; expected all 1",
                        keys.len()
                    ));
                }
            }
            Self::Limiter {
                limiter,
                rule,
                keys,
            } => {
                // Polled together in this task: the coalescer sends the first two checks at
                // once, each alone (two calls may be out at a time), and the others of the
                // batch together when one of those answers: a batch of 8 is three calls.
                let decisions =
                    join_all(keys.iter().map(|key| limiter.check(rule, key.clone()))).await;
                for decision in decisions {
                    let decision = decision.map_err(|e| format!("RedisLimiter::check: {e}"))?;
                    if !decision.allowed {
                        return Err("a decision under a quota of 1,000,000/s was denied".into());
                    }
                }
            }
        }
        Ok(())
    }
}
