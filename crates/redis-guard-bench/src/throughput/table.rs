//! From runs to the table: medians over rounds, ratios to `bare` in the same round.

use std::fmt::Write as _;
use std::time::Duration;

use super::redis_stats::CommandStats;
use super::run::{BenchReport, VariantRuns};
use super::variant::Variant;

/// One row of the table: medians over the rounds of one variant.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The variant.
    pub variant: Variant,
    /// Median requests per second.
    pub requests_per_sec: f64,
    /// Lowest and highest requests per second over the rounds.
    pub requests_per_sec_range: (f64, f64),
    /// Median over rounds of (this variant's req/s ÷ `bare`'s req/s in the same round); `None`
    /// when `bare` was not run.
    pub ratio: Option<f64>,
    /// Median p50 latency.
    pub p50: Duration,
    /// Median p99 latency.
    pub p99: Duration,
    /// Median Redis commands per request that the app sent (commands run inside its scripts
    /// not counted); `None` for variants without Redis.
    pub commands_per_request: Option<f64>,
    /// Median Redis CPU microseconds per request: `usec` of `INFO commandstats` over the
    /// commands the app sent (a script's own `usec` includes what it runs); `None` without Redis.
    pub redis_usec_per_request: Option<f64>,
    /// Median Redis process CPU (user + sys: commands, network I/O, housekeeping) microseconds
    /// per request; `None` without Redis.
    pub redis_process_usec_per_request: Option<f64>,
    /// Mean `MEMORY USAGE` of the keys the last run left; `None` without Redis or keys.
    pub bytes_per_key: Option<u64>,
    /// Non-2xx responses over every round.
    pub non_2xx: u64,
    /// Requests over every round.
    pub requests: u64,
    /// Per command over every round: `(name, calls per request, µs per call, share run inside
    /// scripts)`.
    pub commands: Vec<(String, f64, f64, f64)>,
}

/// The median (the mean of the two middle values for an even count); 0 for no values.
#[must_use]
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        f64::midpoint(v[mid - 1], v[mid])
    }
}

fn median_duration(values: impl IntoIterator<Item = Duration>) -> Duration {
    Duration::from_secs_f64(median(values.into_iter().map(|d| d.as_secs_f64())))
}

impl BenchReport {
    /// The table's rows, in [`Variant::ALL`] order.
    #[must_use]
    pub fn rows(&self) -> Vec<Row> {
        let bare = self.variants.iter().find(|v| v.variant == Variant::Bare);
        self.variants.iter().map(|v| row(v, bare)).collect()
    }

    /// The row of `variant`, if it ran.
    #[must_use]
    pub fn row(&self, variant: Variant) -> Option<Row> {
        self.rows().into_iter().find(|r| r.variant == variant)
    }
}

fn row(v: &VariantRuns, bare: Option<&VariantRuns>) -> Row {
    let rates = || v.runs.iter().map(|m| m.wrk.requests_per_sec);
    let ratio = bare.map(|bare| {
        median(v.runs.iter().filter_map(|m| {
            let reference = bare.runs.iter().find(|b| b.round == m.round)?;
            (reference.wrk.requests_per_sec > 0.0)
                .then(|| m.wrk.requests_per_sec / reference.wrk.requests_per_sec)
        }))
    });
    let per_request = |f: fn((f64, f64)) -> f64| -> Option<f64> {
        let values: Vec<f64> = v
            .runs
            .iter()
            .filter_map(|m| {
                let stats = m.redis.as_ref()?;
                let census = m.census.clone().unwrap_or_default();
                (m.wrk.requests > 0)
                    .then(|| f(census.top_level_totals(stats)) / m.wrk.requests as f64)
            })
            .collect();
        (!values.is_empty()).then(|| median(values))
    };
    let process: Vec<f64> = v
        .runs
        .iter()
        .filter_map(|m| Some(m.redis_process_usec? as f64 / m.wrk.requests.max(1) as f64))
        .collect();
    let census = v
        .runs
        .last()
        .and_then(|m| m.census.clone())
        .unwrap_or_default();
    let requests: u64 = v.runs.iter().map(|m| m.wrk.requests).sum();
    let mut all = CommandStats::new();
    for stats in v.runs.iter().filter_map(|m| m.redis.as_ref()) {
        for (name, s) in stats {
            let e = all.entry(name.clone()).or_default();
            e.calls += s.calls;
            e.usec += s.usec;
        }
    }
    let mut commands: Vec<(String, f64, f64, f64)> = all
        .into_iter()
        .filter(|(_, s)| s.calls > 0)
        .map(|(name, s)| {
            let nested = 1.0 - census.top_level_share(&name);
            (
                name,
                s.calls as f64 / requests.max(1) as f64,
                s.usec as f64 / s.calls as f64,
                nested,
            )
        })
        .collect();
    commands.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Row {
        variant: v.variant,
        requests_per_sec: median(rates()),
        requests_per_sec_range: (
            rates().fold(f64::INFINITY, f64::min),
            rates().fold(0.0, f64::max),
        ),
        ratio,
        p50: median_duration(v.runs.iter().map(|m| m.wrk.p50)),
        p99: median_duration(v.runs.iter().map(|m| m.wrk.p99)),
        commands_per_request: per_request(|(calls, _)| calls),
        redis_usec_per_request: per_request(|(_, usec)| usec),
        redis_process_usec_per_request: (!process.is_empty()).then(|| median(process)),
        bytes_per_key: v
            .keys
            .as_ref()
            .and_then(super::redis_stats::KeyBytes::per_key),
        non_2xx: v.runs.iter().map(|m| m.wrk.non_2xx).sum(),
        requests,
        commands,
    }
}

/// `136.2k`, or the whole number below 10,000.
#[must_use]
pub fn format_rate(r: f64) -> String {
    if r >= 10_000.0 {
        format!("{:.1}k", r / 1000.0)
    } else {
        format!("{r:.0}")
    }
}

/// `420 µs`, `1.52 ms`, `2.10 s`.
#[must_use]
pub fn format_latency(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn or_dash<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| "—".to_owned(), f)
}

/// The Markdown table of `rows`.
#[must_use]
pub fn markdown_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| variant | req/s | × bare | p50 | p99 | Redis cmds/req | Redis CPU µs/req | bytes/key |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} |",
            r.variant,
            format_rate(r.requests_per_sec),
            or_dash(r.ratio, |x| format!("{x:.2}")),
            format_latency(r.p50),
            format_latency(r.p99),
            or_dash(r.commands_per_request, |x| format!("{x:.2}")),
            or_dash(r.redis_usec_per_request, |x| format!("{x:.2}")),
            or_dash(r.bytes_per_key, |x| format!("{x} B")),
        );
    }
    out
}

/// One bullet per Redis variant: each command's calls per request and µs per call, the
/// non-2xx count, and the keys left with their bytes.
#[must_use]
pub fn markdown_notes(report: &BenchReport) -> String {
    let mut out = String::new();
    for (r, runs) in report.rows().iter().zip(&report.variants) {
        let mut parts = Vec::new();
        if !r.commands.is_empty() {
            let commands: Vec<String> = r
                .commands
                .iter()
                .map(|(name, per_req, usec, nested)| {
                    let inside = if *nested >= 0.999 {
                        " (inside scripts)".to_owned()
                    } else if *nested > 0.001 {
                        format!(" ({:.0} % inside scripts)", nested * 100.0)
                    } else {
                        String::new()
                    };
                    format!(
                        "`{}` {per_req:.3}/req at {usec:.2} µs{inside}",
                        name.to_uppercase()
                    )
                })
                .collect();
            parts.push(commands.join(", "));
        }
        if let Some(cpu) = r.redis_process_usec_per_request {
            parts.push(format!(
                "Redis process CPU (user + sys, network I/O included) {cpu:.2} µs/req"
            ));
        }
        if runs.keys.as_ref().is_some_and(|k| k.keys.is_empty()) {
            parts.push("no key left (expired before the scan)".to_owned());
        } else if let Some(keys) = &runs.keys {
            let listed: Vec<String> = keys
                .keys
                .iter()
                .take(3)
                .map(|(k, b)| format!("`{k}` {b} B"))
                .collect();
            let more = keys.keys.len().saturating_sub(3);
            parts.push(format!(
                "{} key(s) left: {}{}",
                keys.keys.len(),
                listed.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        if r.non_2xx > 0 {
            parts.push(format!(
                "{} of {} responses not 2xx{}",
                r.non_2xx,
                r.requests,
                if r.variant.expects_denials() {
                    " (expected: 429s)"
                } else {
                    " (unexpected)"
                }
            ));
        }
        if !parts.is_empty() {
            let _ = writeln!(out, "- `{}`: {}.", r.variant, parts.join("; "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert!((median([3.0, 1.0, 2.0]) - 2.0).abs() < f64::EPSILON);
        assert!((median([4.0, 1.0, 2.0, 3.0]) - 2.5).abs() < f64::EPSILON);
        assert!(median([]).abs() < f64::EPSILON);
    }

    #[test]
    fn formats() {
        assert_eq!(format_rate(136_246.8), "136.2k");
        assert_eq!(format_rate(9_876.4), "9876");
        assert_eq!(format_latency(Duration::from_micros(420)), "420 µs");
        assert_eq!(format_latency(Duration::from_micros(1520)), "1.52 ms");
    }
}
