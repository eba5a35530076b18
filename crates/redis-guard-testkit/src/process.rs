//! Starting a helper process (`redis-server`, chromedriver) in a private temporary directory.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::server::install_provider;
use crate::tls::TestTls;

/// A fresh, empty directory `$TMPDIR/redis-guard-{kind}-{pid}-{n}-{port}` (with `n` unique in
/// this process). A directory left there by an earlier process with the same pid is removed
/// first, so nothing of it (a Redis Cluster's `nodes.conf`, a browser profile) is reused.
pub(crate) fn fresh_dir(kind: &str, port: u16) -> io::Result<PathBuf> {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-guard-{kind}-{}-{}-{port}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Starts `command` with stdin closed and stdout and stderr both written to `dir/output`, where
/// a failure message can read what the process reported before it logged anything. Removes `dir`
/// if it cannot start; an [`io::ErrorKind::NotFound`] error means the binary is missing.
pub(crate) fn spawn_in(command: &mut Command, dir: &Path, output: &str) -> io::Result<Child> {
    let spawned = File::create(dir.join(output))
        .and_then(|out| Ok((out.try_clone()?, out)))
        .and_then(|(stdout, stderr)| {
            command
                .stdin(Stdio::null())
                .stdout(stdout)
                .stderr(stderr)
                .spawn()
        });
    if spawned.is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
    spawned
}

/// The shell around a watched process: `$1` is its directory, the rest its command line. The
/// process runs with stdin closed; a second shell reads the watchdog's own stdin, a pipe whose
/// other end only the test process holds, and kills the process (`SIGKILL`) when the pipe
/// closes: when the test drops its end, or when the test process exits, however it exits. The
/// watchdog itself exits with the process, so a process that dies on its own (a taken port) is
/// seen exiting. The directory is removed when the pipe closed it, kept (for its logs) when the
/// process died on its own.
const WATCHDOG: &str = r#"d=$1; shift
exec 3<&0
"$@" </dev/null 3<&- &
r=$!
(read _ <&3; kill -9 "$r" 2>/dev/null; exit 0) &
w=$!
exec 3<&-
wait "$r"; s=$?
kill "$w" 2>/dev/null
if wait "$w"; then rm -rf "$d"; fi
exit "$s""#;

/// A process started by [`spawn_watched`]: dropping [`stop`](Self::stop)'s pipe kills it.
#[derive(Debug)]
pub(crate) struct Watched {
    /// The watchdog shell (it exits when the process does).
    pub(crate) child: Child,
    /// Held open while the process should run.
    pipe: Option<ChildStdin>,
}

impl Watched {
    /// Kills the process (`SIGKILL`) and waits for it to exit. Stopping a stopped process does
    /// nothing.
    pub(crate) fn stop(&mut self) {
        drop(self.pipe.take());
        let _ = self.child.wait();
    }

    /// Closes the pipe without waiting: the process is killed soon after. [`stop`](Self::stop)
    /// then only waits.
    pub(crate) fn signal_stop(&mut self) {
        drop(self.pipe.take());
    }
}

/// Starts `command` as [`spawn_in`] does, under a watchdog shell that kills it once the
/// returned [`Watched`] is stopped or dropped *or this process exits*: for processes that may
/// outlive every owner in this process (clusters started ahead, in a static, which is never
/// dropped).
pub(crate) fn spawn_watched(command: &Command, dir: &Path, output: &str) -> io::Result<Watched> {
    let mut shell = Command::new("sh");
    shell
        .arg("-c")
        .arg(WATCHDOG)
        .arg("redis-guard-watchdog")
        .arg(dir)
        .arg(command.get_program())
        .args(command.get_args());
    let out = File::create(dir.join(output)).and_then(|out| Ok((out.try_clone()?, out)));
    let spawned = out.and_then(|(stdout, stderr)| {
        shell
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
    });
    match spawned {
        Ok(mut child) => {
            let pipe = child.stdin.take();
            Ok(Watched { child, pipe })
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(dir);
            Err(e)
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One child process (a cluster node, a sentinel) on a port, with its directory, under a
/// watchdog ([`spawn_watched`]): killed and the directory removed on drop, or when this process
/// exits.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) process: Watched,
    pub(crate) port: u16,
    pub(crate) dir: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.process.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `bin` names an existing file, as a path or on `PATH`.
pub(crate) fn installed(bin: &str) -> bool {
    if bin.contains('/') {
        return Path::new(bin).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(bin).is_file()))
}

/// How many times a synchronous call to a node is made before its I/O error is returned.
const SYNC_ATTEMPTS: usize = 3;

/// Runs `op` on a new synchronous connection to the node on `127.0.0.1:port` (over TLS with the
/// certificates of `tls`, when given), and again (each time on a new connection) when
/// connecting or `op` fails with an I/O error, up to [`SYNC_ATTEMPTS`] times in all.
///
/// The sockets of a synchronous connection have timeouts, and Linux does not restart a read on
/// such a socket after a signal handler ran, whatever `SA_RESTART` says: once a test spawned a
/// child process through tokio (which then handles `SIGCHLD`), any child exiting can fail a
/// read with `EINTR`, and the reply of the interrupted call is lost. So `op` should be safe to
/// repeat (a read, or a write that sets what it sets).
pub(crate) fn on_node<T>(
    port: u16,
    tls: Option<&TestTls>,
    mut op: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
) -> redis::RedisResult<T> {
    retry_io(|| connect_once(port, tls).and_then(|mut conn| op(&mut conn)))
}

/// A synchronous connection to the node on `127.0.0.1:port`, over TLS with the certificates of
/// `tls` when given (see [`on_node`] for why and when it is made again).
pub(crate) fn connect_sync(
    port: u16,
    tls: Option<&TestTls>,
) -> redis::RedisResult<redis::Connection> {
    retry_io(|| connect_once(port, tls))
}

fn retry_io<T>(mut call: impl FnMut() -> redis::RedisResult<T>) -> redis::RedisResult<T> {
    let mut attempt = 1;
    loop {
        match call() {
            Err(e) if e.is_io_error() && attempt < SYNC_ATTEMPTS => attempt += 1,
            done => return done,
        }
    }
}

/// 500 ms to connect (the handshake included) and 2 s for each later read and write.
fn connect_once(port: u16, tls: Option<&TestTls>) -> redis::RedisResult<redis::Connection> {
    let conn = node_client(port, tls)?.get_connection_with_timeout(Duration::from_millis(500))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    conn.set_write_timeout(Some(Duration::from_secs(2)))?;
    Ok(conn)
}

/// A client for the node on `127.0.0.1:port`: `redis://`, or `rediss://` trusting the
/// authority of `tls` and presenting its client certificate.
pub(crate) fn node_client(port: u16, tls: Option<&TestTls>) -> redis::RedisResult<redis::Client> {
    match tls {
        Some(tls) => {
            install_provider();
            redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}/"), tls.certificates())
        }
        None => redis::Client::open(format!("redis://127.0.0.1:{port}/")),
    }
}
