//! Driving load with `wrk` and reading its report.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// What to tell someone without `wrk`.
pub const INSTALL_HINT: &str = "`wrk` was not found on PATH. The benchmark harness drives load \
     with it: install it (Debian/Ubuntu: `sudo apt-get install wrk`; Fedora: `sudo dnf install wrk`; \
     macOS: `brew install wrk`), or run `scripts/test.sh`, which installs it when it can";

/// How long past the requested duration `wrk` may run before it is killed.
const GRACE: Duration = Duration::from_secs(30);

/// One `wrk` run, as reported by `wrk --latency`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WrkReport {
    /// Requests completed (`N requests in …`).
    pub requests: u64,
    /// Throughput (`Requests/sec:`).
    pub requests_per_sec: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th-percentile latency.
    pub p99: Duration,
    /// Responses that were not 2xx or 3xx (`Non-2xx or 3xx responses:`; 0 when absent).
    pub non_2xx: u64,
    /// Socket errors of every kind (`Socket errors:`; 0 when absent).
    pub socket_errors: u64,
}

/// The `wrk` version line (`wrk 4.2.0 [epoll] …`), or [`INSTALL_HINT`] as the error.
///
/// # Errors
///
/// `wrk` is not installed, or cannot be run.
pub async fn version() -> Result<String, String> {
    // `wrk -v` prints its version and exits with status 1: only the output matters.
    let output = Command::new("wrk")
        .arg("-v")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| spawn_error(&e, "`wrk -v`"))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    Ok(text
        .lines()
        .find(|l| l.starts_with("wrk"))
        .unwrap_or("wrk (version unknown)")
        .trim()
        .to_owned())
}

/// Runs `wrk -t2 -c<connections> -d<duration> --latency http://<addr>/` with the extra request
/// `headers` (`"Name: value"`) and parses its report.
///
/// # Errors
///
/// `wrk` is missing, failed, ran far past `duration`, or printed something unparsable.
pub async fn run(
    addr: SocketAddr,
    connections: u32,
    duration: Duration,
    headers: &[String],
) -> Result<WrkReport, String> {
    let threads = connections.clamp(1, 2);
    let mut command = Command::new("wrk");
    command
        .arg(format!("-t{threads}"))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{}s", duration.as_secs().max(1)))
        .arg("--latency");
    for header in headers {
        command.arg("-H").arg(header);
    }
    command
        .arg(format!("http://{addr}/"))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(duration + GRACE, command.output())
        .await
        .map_err(|_| format!("wrk ran more than {GRACE:?} past its {duration:?}"))?
        .map_err(|e| spawn_error(&e, "wrk"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "wrk exited with {}: {}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse(&stdout)
}

/// Parses the report of `wrk --latency`.
///
/// # Errors
///
/// A line the report always has is missing or malformed; the message quotes the report.
pub fn parse(report: &str) -> Result<WrkReport, String> {
    let missing = |what: &str| format!("no {what} in wrk's report:\n{report}");
    let mut requests = None;
    let mut requests_per_sec = None;
    let mut p50 = None;
    let mut p99 = None;
    let mut non_2xx = 0;
    let mut socket_errors = 0;
    for line in report.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("50%"), Some(latency)) => p50 = Some(parse_latency(latency)?),
            (Some("99%"), Some(latency)) => p99 = Some(parse_latency(latency)?),
            (Some("Requests/sec:"), Some(rate)) => {
                requests_per_sec = Some(
                    rate.parse::<f64>()
                        .map_err(|e| format!("Requests/sec {rate:?}: {e}"))?,
                );
            }
            (Some(n), Some("requests")) => {
                requests = Some(
                    n.parse::<u64>()
                        .map_err(|e| format!("request count {n:?}: {e}"))?,
                );
            }
            _ => {}
        }
        if let Some(n) = line.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = n
                .trim()
                .parse()
                .map_err(|e| format!("non-2xx count {n:?}: {e}"))?;
        }
        if let Some(errors) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            socket_errors = errors
                .split(',')
                .filter_map(|part| part.split_whitespace().nth(1))
                .filter_map(|n| n.parse::<u64>().ok())
                .sum();
        }
    }
    Ok(WrkReport {
        requests: requests.ok_or_else(|| missing("request count"))?,
        requests_per_sec: requests_per_sec.ok_or_else(|| missing("Requests/sec"))?,
        p50: p50.ok_or_else(|| missing("50% latency"))?,
        p99: p99.ok_or_else(|| missing("99% latency"))?,
        non_2xx,
        socket_errors,
    })
}

/// `215.00us`, `1.23ms`, `2.00s`, `1.50m` as wrk prints them.
fn parse_latency(s: &str) -> Result<Duration, String> {
    let split = s
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(|| format!("latency {s:?} has no unit"))?;
    let (number, unit) = s.split_at(split);
    let value: f64 = number.parse().map_err(|e| format!("latency {s:?}: {e}"))?;
    let seconds_per_unit = match unit {
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("latency {s:?}: unknown unit {unit:?}")),
    };
    Duration::try_from_secs_f64(value * seconds_per_unit).map_err(|e| format!("latency {s:?}: {e}"))
}

/// Why running `what` failed: the install hint when `wrk` is not there.
fn spawn_error(e: &std::io::Error, what: &str) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        INSTALL_HINT.to_owned()
    } else {
        format!("running {what}: {e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "Running 5s test @ http://127.0.0.1:40000/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   470.12us  301.40us  12.34ms   90.12%
    Req/Sec    68.50k     3.21k   75.00k    70.00%
  Latency Distribution
     50%  420.00us
     75%  560.00us
     90%  710.00us
     99%    1.52ms
  681234 requests in 5.00s, 83.16MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 681233
Requests/sec: 136246.80
Transfer/sec:     16.63MB
";

    #[test]
    fn parses_a_full_report() {
        let r = parse(REPORT).unwrap();
        assert_eq!(r.requests, 681_234);
        assert!((r.requests_per_sec - 136_246.80).abs() < 1e-6);
        assert_eq!(r.p50, Duration::from_micros(420));
        assert_eq!(r.p99, Duration::from_micros(1520));
        assert_eq!(r.non_2xx, 681_233);
        assert_eq!(r.socket_errors, 3);
    }

    #[test]
    fn a_clean_run_has_no_errors_or_denials() {
        let clean: String = REPORT
            .lines()
            .filter(|l| !l.contains("Socket errors") && !l.contains("Non-2xx"))
            .map(|l| format!("{l}\n"))
            .collect();
        let r = parse(&clean).unwrap();
        assert_eq!((r.non_2xx, r.socket_errors), (0, 0));
    }

    #[test]
    fn a_truncated_report_is_an_error() {
        let err = parse("Running 5s test @ http://127.0.0.1:1/\n").unwrap_err();
        assert!(err.contains("request count"), "{err}");
    }

    #[test]
    fn latency_units() {
        assert_eq!(parse_latency("2.00s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_latency("1.50m").unwrap(), Duration::from_secs(90));
        assert!(parse_latency("3.0x").is_err());
    }
}
