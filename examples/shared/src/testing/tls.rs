//! The apps' `REDIS_TLS_CA` under test: a TLS-only Redis with its certificate authority in a
//! file, and the check that a bad file stops an app at start.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis_guard_testkit::{RedisServer, TestTls};

/// A TLS-only `redis-server` with certificates made for it, and its certificate authority's PEM
/// in a file: what an app's `REDIS_URL` and `REDIS_TLS_CA` name. The server does not ask for a
/// client certificate (the apps present none). The file is removed on drop.
#[derive(Debug)]
pub struct TlsRedis {
    /// The server: [`url`](RedisServer::url) is `rediss://127.0.0.1:<port>/`.
    pub server: RedisServer,
    /// The path of the file holding the authority's PEM.
    pub ca_file: String,
    dir: PathBuf,
}

impl TlsRedis {
    /// Makes the certificates, starts the server and writes the file.
    ///
    /// # Panics
    ///
    /// When the server cannot be started or the file written.
    #[must_use]
    pub fn start() -> Self {
        let tls = TestTls::generate().unwrap_or_else(|e| panic!("{e}"));
        let server = RedisServer::start_tls(&tls, "no").unwrap_or_else(|e| panic!("{e}"));
        let dir = fresh_dir();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &tls.ca_pem).expect("write the CA");
        Self {
            server,
            ca_file: ca.display().to_string(),
            dir,
        }
    }

    /// Every key the server holds, sorted: what an app wrote there.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached.
    pub async fn keys(&self) -> Vec<String> {
        redis_guard_testkit::inspect::scan_keys(&mut self.server.connect().await)
            .await
            .expect("SCAN")
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `bin` with `REDIS_URL=url` and `REDIS_TLS_CA` naming a file that does not exist, then
/// one that holds no certificate, and asserts that it stops each time with exit code 2 and a
/// message that names the variable, the path and what is wrong.
///
/// # Panics
///
/// When the app starts anyway, or its message or exit code is another.
pub async fn assert_a_bad_redis_tls_ca_stops_the_app(bin: &str, url: &str) {
    let dir = fresh_dir();
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").expect("write");
    for (path, expect) in [
        (dir.join("missing.pem"), "cannot read the file"),
        (garbage, "holds no certificate"),
    ] {
        let shown = path.display().to_string();
        let out = tokio::process::Command::new(bin)
            .env_clear()
            .env("BIND", "127.0.0.1:0")
            .env("REDIS_URL", url)
            .env("REDIS_TLS_CA", &path)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .unwrap_or_else(|_| panic!("REDIS_TLS_CA={shown} was accepted"))
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("REDIS_TLS_CA={shown:?}")) && stderr.contains(expect),
            "{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A new empty directory for this process' files.
fn fresh_dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "example-redis-tls-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    dir
}
