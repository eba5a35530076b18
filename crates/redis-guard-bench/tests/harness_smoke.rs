//! The benchmark harness end to end, tiny: `bare`, `memory` and `redis` for one second each,
//! so the `bench` command cannot rot. Sanity bounds only, nothing timed: a slow machine passes.
//!
//! Needs `wrk` (`scripts/test.sh` installs it) and `redis-server`.

use std::time::Duration;

use redis_guard_bench::throughput::{self, Options, Variant, page};

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
