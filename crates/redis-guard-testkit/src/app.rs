//! Example binaries under test: start one on a free port and learn where it listens.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running app binary; killed on drop.
#[derive(Debug)]
pub struct RunningApp {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The line it printed when it started listening (it may name more addresses).
    pub line: String,
    _child: Child,
}

/// Starts `bin` with a clean environment plus `BIND=127.0.0.1:0` and `env`, and waits for the
/// line it prints on stdout when it listens (`… listening on http://<addr> …`).
///
/// # Panics
///
/// When the binary does not start, exits, or prints no address within 30 seconds.
pub async fn spawn(bin: &str, env: &[(&str, &str)]) -> RunningApp {
    let mut child = Command::new(bin)
        .env_clear()
        .env("BIND", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let Some(stdout) = child.stdout.take() else {
        panic!("{bin}: no stdout");
    };
    let mut lines = BufReader::new(stdout).lines();
    let line = match tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        Ok(Ok(None)) => panic!("{bin} exited before listening"),
        Ok(Err(e)) => panic!("{bin}: reading stdout: {e}"),
        Err(_) => panic!("{bin} printed nothing within 30 s"),
    };
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{bin}: no address in {line:?}"));
    RunningApp {
        addr,
        line,
        _child: child,
    }
}
