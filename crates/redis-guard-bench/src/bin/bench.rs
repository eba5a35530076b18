//! `bench`: every variant against the same route, alternating, one table;
//! `--scripts`: Redis CPU per script call and per decision.
//!
//! ```sh
//! cargo run --release -p redis-guard-bench --bin bench -- --duration 5s --rounds 3 --out docs/benchmarks
//! cargo run --release -p redis-guard-bench --bin bench -- --scripts --out docs/benchmarks
//! ```
//!
//! `--help` lists the options and variants. Needs `redis-server` on `PATH`, and `wrk` but for
//! `--scripts`.

use std::process::ExitCode;

use redis_guard_bench::throughput::{self, Command, Options, ScriptsOptions, page, scripts};

fn main() -> ExitCode {
    let result = match Options::parse(std::env::args().skip(1)) {
        Ok(Command::Run(options)) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a tokio runtime: {e}"))
            .and_then(|runtime| runtime.block_on(wrk_run(&options))),
        // Not inside a runtime: the scripts mode runs its own single-threaded one.
        Ok(Command::Scripts(options)) => scripts_run(&options),
        Ok(Command::Help) => {
            print!("{}", throughput::usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn wrk_run(options: &Options) -> Result<(), String> {
    let report = throughput::run(options).await?;
    println!("{}\n", options.command_line());
    println!("{}", throughput::markdown_table(&report.rows()));
    print!("{}", throughput::markdown_notes(&report));
    if let Some(base) = &options.out {
        let (md, svg) = page::write(&report, base)?;
        eprintln!("wrote {} and {}", md.display(), svg.display());
    }
    Ok(())
}

fn scripts_run(options: &ScriptsOptions) -> Result<(), String> {
    let report = scripts::run(options)?;
    println!("{}\n", options.command_line());
    print!("{}", scripts::markdown_table(&report));
    if let Some(base) = &options.out {
        let md = page::write_scripts(&report, base)?;
        eprintln!("wrote {}", md.display());
    }
    Ok(())
}
