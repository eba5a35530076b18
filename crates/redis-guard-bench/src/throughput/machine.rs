//! The machine a run was measured on, gathered by the harness for the docs page.

use std::process::Command;

/// Where and with what a run was measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    /// Logical CPUs available to the process (`nproc`).
    pub cpus: usize,
    /// `model name` from `/proc/cpuinfo`, or `unknown`.
    pub cpu_model: String,
    /// The kernel (`/proc/sys/kernel/osrelease`), or `unknown`.
    pub kernel: String,
    /// `redis_version` of the standalone server.
    pub redis_version: String,
    /// `rustc --version`.
    pub rustc: String,
    /// `wrk -v`'s first line.
    pub wrk: String,
    /// `git describe --always --dirty` of the working tree, if git answers.
    pub commit: Option<String>,
    /// When the run finished, RFC 3339, UTC, to the second.
    pub date: String,
}

impl Machine {
    /// Gathers what the process can see; `redis_version` and `wrk` come from the caller.
    #[must_use]
    pub fn gather(redis_version: String, wrk: String) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned());
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
        Self {
            cpus: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
            cpu_model,
            kernel,
            redis_version,
            rustc: first_line(&rustc, &["--version"]).unwrap_or_else(|| "unknown".to_owned()),
            wrk,
            commit: first_line("git", &["describe", "--always", "--dirty"]),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        }
    }
}

/// The first line a program prints on success.
fn first_line(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}
