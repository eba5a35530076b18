//! `profile`: callgrind instructions per request of the in-memory stacks, in process, no sockets.
//!
//! ```sh
//! cargo build --release -p redis-guard-bench --bin profile
//! target/release/profile --callgrind            # every stack, 10000 and 20000 requests each
//! target/release/profile --stack memory --requests 1000   # one stack, no valgrind
//! # redis-guard's default features (`metrics` on, no recorder) against the same tree without:
//! cargo run --release -p redis-guard-bench --features guard-default-features --bin profile -- \
//!     --callgrind --only bare,default-features
//! ```
//!
//! Needs `valgrind` on `PATH` for `--callgrind`. The callgrind files stay in `--dir`
//! (default `target/callgrind`) for `callgrind_annotate`.

use std::path::PathBuf;
use std::process::ExitCode;

use redis_guard_bench::profile::{self, DEFAULT_REQUESTS, Stack};

const USAGE: &str = "\
Instructions per request of the in-memory stacks under callgrind, in process.

USAGE:
    profile --callgrind [--requests <N>] [--only <S,...>] [--dir <DIR>]
    profile --stack <S> [--requests <N>]

OPTIONS:
    --callgrind        run every stack (or --only) under valgrind --tool=callgrind with N and 2N
                       requests; print instructions per request ((2N run - N run) / N)
    --stack <S>        send N requests through stack S once (what --callgrind runs)
    --requests <N>     requests per run [default: 10000]
    --only <S,...>     with --callgrind: these stacks only
    --dir <DIR>        with --callgrind: where the callgrind files go [default: target/callgrind]
    -h, --help         this text

STACKS: bare, governor, memory, memory-no-headers, abusive; starting a redis-server: redis-abusive,
        incr-expire, redis, fixed-window, redis-uncoalesced, and the same with 64 requests in
        flight: incr-expire-64, redis-64, fixed-window-64, redis-uncoalesced-64; redis-leased
        (the redis stack with its rule leased, one Redis call per lease); sessions-read,
        sessions-modify, tower-sessions-read, tower-sessions-modify; cache-hit, hand-cache,
        tower-http-cache (the first request fills, every other one is a hit read from Redis), and
        cache-hit-64, hand-cache-64, sessions-read-64, tower-sessions-read-64 with 64 in flight;
        default-features (the memory stack in a binary built with --features guard-default-features:
        redis-guard's default features, metrics on, no recorder)
";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("profile: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let mut requests = DEFAULT_REQUESTS;
    let mut stack = None;
    let mut stacks: Vec<Stack> = Stack::ALL
        .into_iter()
        .filter(|s| *s != Stack::DefaultFeatures || cfg!(feature = "guard-default-features"))
        .collect();
    let mut callgrind = false;
    let mut dir = PathBuf::from("target/callgrind");
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--callgrind" => callgrind = true,
            "--stack" => stack = Some(value()?.parse::<Stack>()?),
            "--requests" => {
                let v = value()?;
                requests = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--requests {v:?}: a whole number above 0"))?;
            }
            "--only" => {
                stacks = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            "--dir" => dir = PathBuf::from(value()?),
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    match (stack, callgrind) {
        (Some(stack), false) => profile::drive(stack, requests),
        (None, true) => {
            let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
            let counts = profile::count(&exe, &stacks, requests, &dir)?;
            println!(
                "callgrind instructions/request, {requests} and {} requests per stack:\n",
                2 * requests
            );
            print!("{}", profile::markdown_table(&counts));
            Ok(())
        }
        _ => Err(format!("give --callgrind or --stack\n\n{USAGE}")),
    }
}
