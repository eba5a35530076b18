//! Starting a helper process (`redis-server`, chromedriver) in a private temporary directory.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

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

/// One child process (a cluster node, a sentinel) on a port, with its directory: killed and the
/// directory removed on drop.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) child: Child,
    pub(crate) port: u16,
    pub(crate) dir: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
