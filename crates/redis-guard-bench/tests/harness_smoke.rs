//! The benchmark harness end to end, tiny: `bare`, `memory` and `redis` for one second each,
//! and `--scripts` with three calls per script and batch, so the `bench` command cannot rot.
//! Sanity bounds only, nothing timed: a slow machine passes.
//!
//! Needs `wrk` (`scripts/test.sh` installs it) and `redis-server`.

use std::time::Duration;

use redis_guard_bench::throughput::scripts::{self, BATCHES, Script};
use redis_guard_bench::throughput::{self, Options, ScriptsOptions, Variant, page};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_measures_bare_memory_and_redis() {
    let out = std::env::temp_dir().join(format!("redis-guard-bench-smoke-{}", std::process::id()));
    let options = Options {
        duration: Duration::from_secs(1),
        rounds: 1,
        connections: 4,
        variants: vec![Variant::Bare, Variant::Memory, Variant::Redis],
        out: Some(out.join("benchmarks")),
    };
    let report = throughput::run(&options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let rows = report.rows();
    let table = throughput::markdown_table(&rows);
    println!("{table}\n{}", throughput::markdown_notes(&report));

    assert_eq!(rows.len(), 3, "{table}");
    for row in &rows {
        assert!(row.requests_per_sec > 0.0, "{table}");
        assert!(row.requests > 0, "{table}");
        assert_eq!(row.non_2xx, 0, "high quotas admit everything: {table}");
        assert!(row.ratio.is_some_and(|r| r > 0.0), "{table}");
        assert!(row.p50 <= row.p99, "{table}");
    }
    let bare = &rows[0];
    assert!(
        (bare.ratio.unwrap_or_default() - 1.0).abs() < 1e-9,
        "{table}"
    );
    assert_eq!(bare.commands_per_request, None, "bare never calls Redis");
    let redis = &rows[2];
    assert_eq!(redis.variant, Variant::Redis);
    // At most one script call per decision (concurrent decisions share calls); the script's own
    // commands are not counted twice.
    let commands = redis.commands_per_request.unwrap_or_default();
    assert!(commands > 0.0 && commands < 1.5, "{table}");
    assert!(
        redis.redis_usec_per_request.is_some_and(|us| us > 0.0),
        "{table}"
    );
    assert!(
        redis.commands.iter().any(|(name, ..)| name == "evalsha"),
        "{table}"
    );
    // No bytes/key assertion: a high-quota GCRA key expires microseconds after its last use,
    // so the scan after the run may or may not catch it.

    let (md, svg) = page::write(&report, options.out.as_deref().unwrap_or(&out))
        .unwrap_or_else(|e| panic!("{e}"));
    let md = std::fs::read_to_string(md).unwrap_or_default();
    assert!(
        md.contains("| `redis` |") && md.contains("## Profile"),
        "{md}"
    );
    let svg = std::fs::read_to_string(svg).unwrap_or_default();
    assert!(svg.starts_with("<svg") && svg.contains(">redis<"), "{svg}");
    let _ = std::fs::remove_dir_all(&out);
}

/// Not a tokio test: the scripts mode runs a single-threaded runtime of its own.
#[test]
fn scripts_mode_measures_every_script_at_every_batch() {
    let out = std::env::temp_dir().join(format!(
        "redis-guard-bench-scripts-smoke-{}",
        std::process::id()
    ));
    let options = ScriptsOptions {
        calls: 3,
        out: Some(out.join("benchmarks")),
    };
    let report = scripts::run(&options).unwrap_or_else(|e| panic!("{e}"));
    let table = scripts::markdown_table(&report);
    println!("{table}");

    assert_eq!(
        report.runs.len(),
        Script::ALL.len() * BATCHES.len(),
        "{table}"
    );
    for run in &report.runs {
        // One EVALSHA per batch for the reference; the limiter's checks of a batch go as at
        // most three calls (the first two at once, each alone, the rest together).
        if run.script == Script::Reference {
            assert_eq!(run.calls, 3, "{table}");
        } else {
            assert!(
                (3..=3 * run.batch.min(3) as u64).contains(&run.calls),
                "{table}"
            );
        }
        assert_eq!(run.decisions, 3 * run.batch as u64, "{table}");
        assert!(run.usec > 0, "{table}");
        let ratio = report.ratio(run).unwrap_or_default();
        assert!(ratio > 0.0, "{table}");
        if run.script == Script::Reference {
            assert!((ratio - 1.0).abs() < 1e-9, "{table}");
        }
    }
    assert!(
        table.contains("| `reference-gcra` | 64 | 3 |") && table.contains("| `gcra` | 1 | 3 |"),
        "{table}"
    );

    let md = page::write_scripts(&report, options.out.as_deref().unwrap_or(&out))
        .unwrap_or_else(|e| panic!("{e}"));
    let md = std::fs::read_to_string(md).unwrap_or_default();
    assert!(
        md.contains(page::SCRIPTS_BEGIN)
            && md.contains("| `fixed-window` | 1 | 3 |")
            && md.contains("--scripts --calls 3")
            && md.contains("## Profile"),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[tokio::test(flavor = "current_thread")]
async fn the_scripts_mode_inside_a_runtime_is_an_error_not_a_panic() {
    let err = scripts::run(&ScriptsOptions::default()).unwrap_err();
    assert!(err.contains("inside"), "{err}");
}

/// The reference is a real GCRA: a burst of 3 at 1/s admits three requests at once, denies the
/// fourth, and leaves the TAT to expire when the burst is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_script_is_a_gcra() {
    let redis = tokio::task::spawn_blocking(redis_guard_testkit::RedisServer::start)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    let client = redis::Client::open(redis.url()).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let script = redis::Script::new(scripts::REFERENCE_GCRA);
    // Interval 1 s, tolerance 2 s (burst 3). One key thrice in one call, then once more, then
    // a fresh key beside it: decisions in one call are made in order, each as alone.
    let mut call = async |keys: &[&str]| -> Vec<i64> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        invocation
            .arg(1_000_000)
            .arg(2_000_000)
            .invoke_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(call(&["a", "a", "a"]).await, [1, 1, 1]);
    assert_eq!(call(&["a", "b"]).await, [0, 1]);
    let ttl: i64 = redis::cmd("PTTL")
        .arg("a")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The TAT (three intervals after the first decision) less the time since: at most 3 s.
    assert!((1..=3_000).contains(&ttl), "PTTL a = {ttl}");
}
