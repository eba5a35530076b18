//! The command line of the `bench` binary.

use std::path::PathBuf;
use std::time::Duration;

use super::variant::Variant;

/// The usage text of `bench --help`.
const USAGE: &str = "\
Runs every variant against the same `GET /` route, alternating, and prints one table.

USAGE:
    cargo run --release -p redis-guard-bench --bin bench -- [OPTIONS]
    cargo run --release -p redis-guard-bench --bin bench -- --scripts [--calls <N>] [--out <PATH>]

OPTIONS:
    --duration <D>       length of each wrk run, whole seconds (e.g. 5s, 1m) [default: 5s]
    --rounds <N>         rounds; each runs every variant once, in order [default: 3]
    --connections <N>    wrk connections (wrk -c; threads: -t2) [default: 64]
    --only <V,...>       only these variants (comma separated)
    --out <PATH>         write <PATH>.md (the page's generated section) and <PATH>.svg
    --scripts            no wrk: Redis CPU per script call and per decision of each script at
                         batches of 1, 8 and 64 decisions, beside a minimal reference GCRA, on an
                         idle redis-server (with --out, into <PATH>.md's scripts section)
    --calls <N>          with --scripts: calls per script and batch [default: 5000]
    -h, --help           this text

VARIANTS:
    ";

/// How a benchmark run is configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Length of each `wrk` run (whole seconds).
    pub duration: Duration,
    /// Rounds; each round runs every selected variant once, in [`Variant::ALL`] order.
    pub rounds: usize,
    /// `wrk -c`.
    pub connections: u32,
    /// The variants to run, in [`Variant::ALL`] order.
    pub variants: Vec<Variant>,
    /// Where to write `<out>.md` and `<out>.svg`, if anywhere.
    pub out: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(5),
            rounds: 3,
            connections: 64,
            variants: Variant::ALL.to_vec(),
            out: None,
        }
    }
}

/// How a `--scripts` run is configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptsOptions {
    /// Script calls per script and batch size.
    pub calls: u64,
    /// Where to write the scripts section of `<out>.md`, if anywhere.
    pub out: Option<PathBuf>,
}

/// Script calls per script and batch size of `--scripts`, unless `--calls` says otherwise.
pub const DEFAULT_CALLS: u64 = 5_000;

impl Default for ScriptsOptions {
    fn default() -> Self {
        Self {
            calls: DEFAULT_CALLS,
            out: None,
        }
    }
}

impl ScriptsOptions {
    /// The command that reproduces this run.
    #[must_use]
    pub fn command_line(&self) -> String {
        let mut line = format!(
            "cargo run --release -p redis-guard-bench --bin bench -- --scripts --calls {}",
            self.calls
        );
        if let Some(out) = &self.out {
            line.push_str(&format!(" --out {}", out.display()));
        }
        line
    }
}

/// What the command line asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Run the benchmark.
    Run(Options),
    /// Measure the scripts (`--scripts`).
    Scripts(ScriptsOptions),
    /// Print [`usage`] and exit.
    Help,
}

/// The usage text with the list of variants.
#[must_use]
pub fn usage() -> String {
    let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
    format!("{USAGE}{}\n", names.join(", "))
}

impl Options {
    /// Parses the arguments after the program name.
    ///
    /// # Errors
    ///
    /// An unknown flag, a missing or invalid value; the message names it.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
        let mut options = Self::default();
        let mut args = args.into_iter();
        let (mut scripts, mut calls) = (false, None);
        // The last flag given that only a wrk run reads: refused with --scripts.
        let mut wrk_flag = None;
        while let Some(flag) = args.next() {
            let (flag, inline) = match flag.split_once('=') {
                Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
                None => (flag, None),
            };
            if flag == "-h" || flag == "--help" {
                return Ok(Command::Help);
            }
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{flag} needs a value"))
            };
            if matches!(
                flag.as_str(),
                "--duration" | "--rounds" | "--connections" | "--only"
            ) {
                wrk_flag = Some(flag.clone());
            }
            match flag.as_str() {
                "--scripts" => {
                    if let Some(v) = inline {
                        return Err(format!("--scripts takes no value (got {v:?})"));
                    }
                    scripts = true;
                }
                "--calls" => calls = Some(positive(&flag, &value()?)?),
                "--duration" => {
                    let v = value()?;
                    let d = humantime::parse_duration(&v)
                        .map_err(|e| format!("--duration {v:?}: {e}"))?;
                    if d.as_secs() == 0 || d.subsec_nanos() != 0 {
                        return Err(format!(
                            "--duration {v:?}: wrk takes whole seconds, at least 1s"
                        ));
                    }
                    options.duration = d;
                }
                "--rounds" => options.rounds = positive(&flag, &value()?)?,
                "--connections" => {
                    let n: u32 = positive(&flag, &value()?)?;
                    options.connections = n;
                }
                "--only" => {
                    let v = value()?;
                    let chosen = v
                        .split(',')
                        .filter(|s| !s.trim().is_empty())
                        .map(str::parse)
                        .collect::<Result<Vec<Variant>, _>>()?;
                    if chosen.is_empty() {
                        return Err("--only needs at least one variant".to_owned());
                    }
                    options.variants = Variant::ALL
                        .into_iter()
                        .filter(|v| chosen.contains(v))
                        .collect();
                }
                "--out" => options.out = Some(PathBuf::from(value()?)),
                other => return Err(format!("unknown argument {other:?}; see --help")),
            }
        }
        if scripts {
            if let Some(flag) = wrk_flag {
                return Err(format!(
                    "{flag} configures the wrk run; --scripts runs no wrk (it takes --calls and --out)"
                ));
            }
            return Ok(Command::Scripts(ScriptsOptions {
                calls: calls.unwrap_or(DEFAULT_CALLS),
                out: options.out,
            }));
        }
        if calls.is_some() {
            return Err("--calls applies to --scripts only".to_owned());
        }
        Ok(Command::Run(options))
    }

    /// The command that reproduces this run.
    #[must_use]
    pub fn command_line(&self) -> String {
        let mut line = format!(
            "cargo run --release -p redis-guard-bench --bin bench -- --duration {}s --rounds {} --connections {}",
            self.duration.as_secs(),
            self.rounds,
            self.connections
        );
        if self.variants != Variant::ALL {
            let names: Vec<&str> = self.variants.iter().map(|v| v.name()).collect();
            line.push_str(&format!(" --only {}", names.join(",")));
        }
        if let Some(out) = &self.out {
            line.push_str(&format!(" --out {}", out.display()));
        }
        line
    }
}

fn positive<T: std::str::FromStr + PartialOrd + Default>(flag: &str, v: &str) -> Result<T, String> {
    match v.parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err(format!("{flag} {v:?}: expected a positive whole number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        Options::parse(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn defaults_and_flags() {
        assert_eq!(parse(&[]).unwrap(), Command::Run(Options::default()));
        let Command::Run(o) = parse(&[
            "--duration",
            "2s",
            "--rounds=1",
            "--connections",
            "4",
            "--only",
            "redis,bare",
            "--out",
            "docs/benchmarks",
        ])
        .unwrap() else {
            panic!("not a run")
        };
        assert_eq!(o.duration, Duration::from_secs(2));
        assert_eq!((o.rounds, o.connections), (1, 4));
        // Always in table order, whatever the order given.
        assert_eq!(o.variants, [Variant::Bare, Variant::Redis]);
        assert_eq!(
            o.command_line(),
            "cargo run --release -p redis-guard-bench --bin bench -- --duration 2s --rounds 1 \
             --connections 4 --only bare,redis --out docs/benchmarks"
        );
    }

    #[test]
    fn bad_values_name_themselves() {
        assert!(parse(&["--rounds", "0"]).unwrap_err().contains("--rounds"));
        assert!(
            parse(&["--duration", "1500ms"])
                .unwrap_err()
                .contains("whole seconds")
        );
        assert!(parse(&["--only", "nope"]).unwrap_err().contains("nope"));
        assert!(parse(&["--wat"]).unwrap_err().contains("--wat"));
        assert!(parse(&["--out"]).unwrap_err().contains("needs a value"));
        assert_eq!(parse(&["-h"]).unwrap(), Command::Help);
        assert!(parse(&["--calls", "5"]).unwrap_err().contains("--scripts"));
        assert!(
            parse(&["--scripts", "--rounds", "2"])
                .unwrap_err()
                .contains("--rounds")
        );
        assert!(
            parse(&["--scripts", "--calls", "0"])
                .unwrap_err()
                .contains("--calls")
        );
        assert!(parse(&["--scripts=yes"]).unwrap_err().contains("no value"));
    }

    #[test]
    fn scripts_mode() {
        assert_eq!(
            parse(&["--scripts"]).unwrap(),
            Command::Scripts(ScriptsOptions::default())
        );
        let Command::Scripts(o) =
            parse(&["--calls=20", "--scripts", "--out", "docs/benchmarks"]).unwrap()
        else {
            panic!("not a scripts run")
        };
        assert_eq!(o.calls, 20);
        assert_eq!(
            o.command_line(),
            "cargo run --release -p redis-guard-bench --bin bench -- --scripts --calls 20 \
             --out docs/benchmarks"
        );
    }
}
