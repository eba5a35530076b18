//! Property test of the demo apps' settings: generated values of their environment variables
//! must each either start the app or stop it with a configuration error that names a variable
//! set — never a panic, never a hang.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// How long an app may take to start or to refuse its settings.
const START: Duration = Duration::from_secs(30);

/// A value as an operator might write one, right or wrong: counts at and past every integer
/// width, quotas with odd periods, durations, text.
fn value() -> impl Strategy<Value = String> {
    let unit = prop::sample::select(vec![
        "", "s", "ms", "m", "h", "d", "second", "minute", "hour", "day", "10s", "0s",
    ]);
    prop_oneof![
        (0u32..2_100).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            "0",
            "1",
            "-1",
            " 7 ",
            "4294967295",
            "4294967296",
            "18446744073709551616",
            "1e3",
            "0x10",
            "1000000",
            "1000001",
            "0/minute",
            "5/minute",
            "120/minute",
            "4294967295/1s",
            "1/3650d",
            "1/18446744073709551615s",
            "5/minute,10/hour",
            "/",
            "%",
        ])
        .prop_map(str::to_owned),
        (any::<u32>(), unit).prop_map(|(n, unit)| format!("{n}/{unit}")),
        "[ -~]{0,24}",
    ]
}

/// Starts `bin` (with `BIND=127.0.0.1:0`) `cases` times, each with generated values for some
/// of `names` (the others unset) and `fixed` as they are. Fails when a start panics, hangs, or
/// refuses its settings without naming one of the variables set.
pub fn no_setting_reaches_a_panic(
    bin: &str,
    names: &'static [&'static str],
    fixed: &[(&str, &str)],
    cases: u32,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        // Each shrink step starts a process: a few are enough to show a small input.
        max_shrink_iters: 32,
        ..Config::default()
    });
    let settings = prop::collection::vec(prop::option::of(value()), names.len());
    let outcome = runner.run(&settings, |values| {
        let set: Vec<(&str, String)> = names
            .iter()
            .zip(values)
            .filter_map(|(name, v)| Some((*name, v?)))
            .collect();
        start(bin, &set, fixed).map_err(|e| TestCaseError::fail(format!("{set:?}: {e}")))
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

/// One start: `Ok` once it listens (then it is killed), or when it exits refusing a setting.
fn start(bin: &str, set: &[(&str, String)], fixed: &[(&str, &str)]) -> Result<(), String> {
    let mut child = Command::new(bin)
        .env_clear()
        .env("BIND", "127.0.0.1:0")
        .envs(fixed.iter().copied())
        .envs(set.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line);
        drop(tx.send(read.map(|_| line)));
    });
    let first_line = rx.recv_timeout(START);
    if matches!(&first_line, Ok(Ok(line)) if line.contains("listening on")) {
        drop(child.kill());
        drop(child.wait());
        return Ok(());
    }
    if first_line.is_err() {
        drop(child.kill());
    }
    let status = child.wait().map_err(|e| format!("wait: {e}"))?;
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        drop(err.read_to_string(&mut stderr));
    }
    if first_line.is_err() {
        return Err(format!(
            "neither listening nor exited in {START:?}: {stderr}"
        ));
    }
    // `settings::main_of` exits with 2 on a configuration error; a panic is 101.
    if status.code() != Some(2) {
        return Err(format!("exited with {status}: {stderr}"));
    }
    if !set.iter().any(|(name, _)| stderr.contains(name)) {
        return Err(format!("the error names no variable set: {stderr}"));
    }
    Ok(())
}
