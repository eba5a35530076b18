//! `bench`: every variant against the same route, alternating, one table (design §7, issue 9).
//!
//! ```sh
//! cargo run --release -p redis-guard-bench --bin bench -- --duration 5s --rounds 3 --out docs/benchmarks
//! ```
//!
//! `--help` lists the options and variants. Needs `wrk` and `redis-server` on `PATH`.

use std::process::ExitCode;

use redis_guard_bench::throughput::{self, Command, Options, page};

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(Command::Run(options)) => options,
        Ok(Command::Help) => {
            print!("{}", throughput::usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match throughput::run(&options).await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}\n", options.command_line());
    println!("{}", throughput::markdown_table(&report.rows()));
    print!("{}", throughput::markdown_notes(&report));
    if let Some(base) = &options.out {
        match page::write(&report, base) {
            Ok((md, svg)) => eprintln!("wrote {} and {}", md.display(), svg.display()),
            Err(e) => {
                eprintln!("bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
