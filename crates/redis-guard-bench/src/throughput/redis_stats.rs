//! What Redis did during a run: `INFO commandstats` deltas and `MEMORY USAGE` of the keys left.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Commands the harness itself sends between `CONFIG RESETSTAT` and `INFO`, left out of the
/// figures (Redis ≥ 7 names subcommands `config|resetstat`).
const HARNESS_COMMANDS: [&str; 3] = ["info", "config|resetstat", "config"];

/// Keys a run may leave at most before the harness calls it a bug (a run leaves a handful).
const MAX_KEYS: usize = 100_000;

/// Calls and CPU time of one command, from `INFO commandstats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandStat {
    /// `calls=`.
    pub calls: u64,
    /// `usec=`: CPU time Redis spent in the command, microseconds.
    pub usec: u64,
}

/// Per command name (lower case, as Redis reports it: `evalsha`, `config|resetstat`).
pub type CommandStats = BTreeMap<String, CommandStat>;

/// Total calls and CPU microseconds over every command.
#[must_use]
pub fn totals(stats: &CommandStats) -> CommandStat {
    stats
        .values()
        .fold(CommandStat::default(), |acc, s| CommandStat {
            calls: acc.calls + s.calls,
            usec: acc.usec + s.usec,
        })
}

/// Parses the `# Commandstats` section of `INFO`, without the commands the harness sends.
#[must_use]
pub fn parse_commandstats(info: &str) -> CommandStats {
    let mut stats = CommandStats::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if HARNESS_COMMANDS.contains(&name) {
            continue;
        }
        let field = |key: &str| {
            fields
                .split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let entry = stats.entry(name.to_owned()).or_default();
        entry.calls += field("calls");
        entry.usec += field("usec");
    }
    stats
}

/// What `MONITOR` saw while a few requests were served: how many commands of each name the
/// app sent itself (top level) and how many ran inside its scripts (`[0 lua]`).
///
/// `INFO commandstats` counts both kinds alike, and a script's own `usec` already includes the
/// commands it runs; the census tells them apart so the figures count each microsecond once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Requests served while watching.
    pub requests: u64,
    /// Commands the app sent, by lower-case name (`evalsha`, `script`).
    pub top_level: BTreeMap<String, u64>,
    /// Commands run inside scripts, by lower-case name.
    pub nested: BTreeMap<String, u64>,
}

/// The marker the harness `ECHO`es to know `MONITOR` has shown everything before it.
const CENSUS_MARK: &str = "redis-guard-bench-census-end";
/// How long the census waits for its marker.
const CENSUS_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of `MONITOR` read at most per node (a census sends a handful of requests).
const CENSUS_MAX_LINES: usize = 100_000;

impl Census {
    /// The share of `INFO commandstats` entry `name` (`script|load` counts as `script`) that the
    /// app sent itself: 1 for a command the census did not see (a one-off such as the first
    /// `SCRIPT LOAD` or the first-hit `EXPIRE`).
    #[must_use]
    pub fn top_level_share(&self, name: &str) -> f64 {
        let base = name.split('|').next().unwrap_or(name);
        let top = self.top_level.get(base).copied().unwrap_or(0);
        let nested = self.nested.get(base).copied().unwrap_or(0);
        if top + nested == 0 {
            1.0
        } else {
            top as f64 / (top + nested) as f64
        }
    }

    /// `stats` without what ran inside scripts: each entry's calls and µs scaled by its
    /// [top-level share](Self::top_level_share).
    #[must_use]
    pub fn top_level_totals(&self, stats: &CommandStats) -> (f64, f64) {
        stats.iter().fold((0.0, 0.0), |(calls, usec), (name, s)| {
            let share = self.top_level_share(name);
            (calls + s.calls as f64 * share, usec + s.usec as f64 * share)
        })
    }

    fn record(&mut self, line: &str) {
        // +1700000000.123456 [0 127.0.0.1:60866] "evalsha" "…" …   or   … [0 lua] "get" "k"
        let Some(rest) = line.strip_prefix('+') else {
            return;
        };
        let Some((source, command)) = rest.split_once("] ") else {
            return;
        };
        let nested = source.ends_with(" lua");
        let Some(name) = command.split('"').nth(1).map(str::to_lowercase) else {
            return;
        };
        if name == "echo" {
            return;
        }
        let map = if nested {
            &mut self.nested
        } else {
            &mut self.top_level
        };
        *map.entry(name).or_default() += 1;
    }
}

/// The keys a run left, and their `MEMORY USAGE … SAMPLES 0` in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyBytes {
    /// `(key, bytes)`, sorted by key.
    pub keys: Vec<(String, u64)>,
}

impl KeyBytes {
    /// Mean bytes per key, if there is any key.
    #[must_use]
    pub fn per_key(&self) -> Option<u64> {
        let n = u64::try_from(self.keys.len()).ok().filter(|n| *n > 0)?;
        Some(self.keys.iter().map(|(_, b)| b).sum::<u64>() / n)
    }
}

/// The Redis nodes one variant uses (one server, or every master of the cluster), with a
/// connection of the harness's own to each.
#[derive(Clone)]
pub struct RedisNodes {
    ports: Vec<u16>,
    conns: Vec<MultiplexedConnection>,
}

impl std::fmt::Debug for RedisNodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisNodes")
            .field("nodes", &self.conns.len())
            .finish()
    }
}

impl RedisNodes {
    /// Connects to the servers on `127.0.0.1:<port>` for every port.
    ///
    /// # Errors
    ///
    /// A server cannot be reached.
    pub async fn connect(ports: &[u16]) -> Result<Self, String> {
        let mut conns = Vec::with_capacity(ports.len());
        for port in ports {
            let url = format!("redis://127.0.0.1:{port}/");
            let client = redis::Client::open(url.as_str()).map_err(|e| format!("{url}: {e}"))?;
            conns.push(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| format!("connecting to {url}: {e}"))?,
            );
        }
        Ok(Self {
            ports: ports.to_vec(),
            conns,
        })
    }

    /// `INFO <section>` of every node, in node order.
    async fn info(&self, section: &str) -> Result<Vec<String>, String> {
        let mut out = Vec::with_capacity(self.conns.len());
        for conn in &self.conns {
            let info: String = redis::cmd("INFO")
                .arg(section)
                .query_async(&mut conn.clone())
                .await
                .map_err(|e| format!("INFO {section}: {e}"))?;
            out.push(info);
        }
        Ok(out)
    }

    /// Redis's own CPU time so far (`used_cpu_user` + `used_cpu_sys` of `INFO cpu`), summed
    /// over the nodes, in microseconds: commands, network I/O and housekeeping.
    ///
    /// # Errors
    ///
    /// A node failed the command.
    pub async fn process_cpu_usec(&self) -> Result<u64, String> {
        let mut total = 0.0;
        for info in self.info("cpu").await? {
            total += info
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.trim().split_once(':')?;
                    (k == "used_cpu_user" || k == "used_cpu_sys").then(|| v.parse::<f64>().ok())?
                })
                .sum::<f64>();
        }
        // Whole microseconds; a run uses far less than u64::MAX of them.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok((total * 1e6).round() as u64)
    }

    /// Watches every node with `MONITOR` while `requests` runs (it returns how many requests it
    /// made), then sorts what the nodes ran into top-level and in-script commands.
    ///
    /// # Errors
    ///
    /// A node cannot be watched, `requests` failed, or the nodes' output did not end within a
    /// few seconds.
    pub async fn census<F, Fut>(&self, requests: F) -> Result<Census, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<u64, String>>,
    {
        let mut monitors = Vec::with_capacity(self.ports.len());
        for port in &self.ports {
            let mut stream = TcpStream::connect(("127.0.0.1", *port))
                .await
                .map_err(|e| format!("MONITOR on port {port}: {e}"))?;
            stream
                .write_all(b"MONITOR\r\n")
                .await
                .map_err(|e| format!("MONITOR: {e}"))?;
            let mut reader = BufReader::new(stream);
            let mut ok = String::new();
            reader
                .read_line(&mut ok)
                .await
                .map_err(|e| format!("MONITOR: {e}"))?;
            if ok.trim() != "+OK" {
                return Err(format!("MONITOR answered {ok:?}"));
            }
            monitors.push(reader);
        }
        let mut census = Census {
            requests: requests().await?,
            ..Census::default()
        };
        // Redis shows a node's commands to MONITOR in the order it ran them: once the marker
        // arrives, every command of the requests has been seen.
        for (conn, reader) in self.conns.iter().zip(&mut monitors) {
            redis::cmd("ECHO")
                .arg(CENSUS_MARK)
                .exec_async(&mut conn.clone())
                .await
                .map_err(|e| format!("ECHO: {e}"))?;
            let read = async {
                let mut line = String::new();
                for _ in 0..CENSUS_MAX_LINES {
                    line.clear();
                    if reader
                        .read_line(&mut line)
                        .await
                        .map_err(|e| e.to_string())?
                        == 0
                    {
                        return Err("MONITOR connection closed".to_owned());
                    }
                    if line.contains(CENSUS_MARK) {
                        return Ok(());
                    }
                    census.record(line.trim_end());
                }
                Err(format!("more than {CENSUS_MAX_LINES} MONITOR lines"))
            };
            tokio::time::timeout(CENSUS_TIMEOUT, read)
                .await
                .map_err(|_| {
                    format!("MONITOR did not show the marker within {CENSUS_TIMEOUT:?}")
                })??;
        }
        Ok(census)
    }

    /// Runs `cmd` on every node.
    async fn each(&self, cmd: &redis::Cmd) -> Result<(), String> {
        for conn in &self.conns {
            cmd.exec_async(&mut conn.clone())
                .await
                .map_err(|e| format!("{:?}: {e}", cmd.args_iter().next()))?;
        }
        Ok(())
    }

    /// `FLUSHALL` on every node: each run starts with no keys.
    ///
    /// # Errors
    ///
    /// A node failed the command.
    pub async fn flush(&self) -> Result<(), String> {
        self.each(&redis::cmd("FLUSHALL")).await
    }

    /// `CONFIG RESETSTAT` on every node: `INFO commandstats` counts from here.
    ///
    /// # Errors
    ///
    /// A node failed the command.
    pub async fn reset_stats(&self) -> Result<(), String> {
        self.each(redis::cmd("CONFIG").arg("RESETSTAT")).await
    }

    /// `INFO commandstats`, summed over the nodes.
    ///
    /// # Errors
    ///
    /// A node failed the command.
    pub async fn command_stats(&self) -> Result<CommandStats, String> {
        let mut sum = CommandStats::new();
        for info in self.info("commandstats").await? {
            for (name, stat) in parse_commandstats(&info) {
                let entry = sum.entry(name).or_default();
                entry.calls += stat.calls;
                entry.usec += stat.usec;
            }
        }
        Ok(sum)
    }

    /// Every key on the nodes with its `MEMORY USAGE <key> SAMPLES 0`.
    ///
    /// # Errors
    ///
    /// A node failed a command, or holds more keys than a run can leave.
    pub async fn key_bytes(&self) -> Result<KeyBytes, String> {
        let mut keys = Vec::new();
        for conn in &self.conns {
            let mut conn = conn.clone();
            let names = redis_guard_testkit::inspect::scan_keys(&mut conn)
                .await
                .map_err(|e| format!("SCAN: {e}"))?;
            if names.len() > MAX_KEYS {
                return Err(format!("{} keys: more than a run can leave", names.len()));
            }
            for key in names {
                let bytes = redis_guard_testkit::inspect::memory_usage(&mut conn, &key)
                    .await
                    .map_err(|e| format!("MEMORY USAGE {key}: {e}"))?;
                if let Some(bytes) = bytes {
                    keys.push((key, bytes));
                }
            }
        }
        keys.sort();
        Ok(KeyBytes { keys })
    }

    /// `redis_version` from `INFO server` of the first node.
    ///
    /// # Errors
    ///
    /// The node failed the command.
    pub async fn version(&self) -> Result<String, String> {
        let Some(conn) = self.conns.first() else {
            return Ok("unknown".to_owned());
        };
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn.clone())
            .await
            .map_err(|e| format!("INFO server: {e}"))?;
        Ok(info
            .lines()
            .find_map(|l| l.trim().strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_without_the_harness_own_commands() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=10,usec=104,usec_per_call=10.40,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_info:calls=1,usec=20,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_script|load:calls=2,usec=300,usec_per_call=150.00,rejected_calls=0,failed_calls=0\r\n";
        let stats = parse_commandstats(info);
        assert_eq!(stats.len(), 2, "{stats:?}");
        assert_eq!(
            stats["evalsha"],
            CommandStat {
                calls: 10,
                usec: 104
            }
        );
        assert_eq!(
            stats["script|load"],
            CommandStat {
                calls: 2,
                usec: 300
            }
        );
        assert_eq!(
            totals(&stats),
            CommandStat {
                calls: 12,
                usec: 404
            }
        );
    }

    #[test]
    fn census_separates_script_commands() {
        let mut census = Census::default();
        for line in [
            r#"+1700000000.1 [0 127.0.0.1:6000] "EVALSHA" "abc" "1" "k""#,
            r#"+1700000000.2 [0 lua] "GET" "k""#,
            r#"+1700000000.3 [0 lua] "SET" "k" "1""#,
            r#"+1700000000.4 [0 127.0.0.1:6000] "SET" "other" "1""#,
            r#"+1700000000.5 [0 127.0.0.1:6001] "ECHO" "mark""#,
        ] {
            census.record(line);
        }
        assert_eq!(census.top_level.len(), 2, "{census:?}");
        assert!((census.top_level_share("evalsha") - 1.0).abs() < 1e-9);
        assert!(census.top_level_share("get").abs() < 1e-9);
        assert!((census.top_level_share("set") - 0.5).abs() < 1e-9);
        assert!((census.top_level_share("script|load") - 1.0).abs() < 1e-9);
        let stats: CommandStats = [
            (
                "evalsha".to_owned(),
                CommandStat {
                    calls: 10,
                    usec: 100,
                },
            ),
            ("get".to_owned(), CommandStat { calls: 10, usec: 3 }),
        ]
        .into_iter()
        .collect();
        let (calls, usec) = census.top_level_totals(&stats);
        assert!((calls - 10.0).abs() < 1e-9 && (usec - 100.0).abs() < 1e-9);
    }

    #[test]
    fn bytes_per_key_is_the_mean() {
        let kb = KeyBytes {
            keys: vec![("a".into(), 100), ("b".into(), 120)],
        };
        assert_eq!(kb.per_key(), Some(110));
        assert_eq!(KeyBytes::default().per_key(), None);
    }
}
