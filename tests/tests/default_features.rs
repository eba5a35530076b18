//! An app built as a user builds it, with redis-guard's default features: `ClientIp::peer()`
//! under `axum::serve(.., into_make_service_with_connect_info::<SocketAddr>())` limits by the
//! client's address over real HTTP (`200`, then `429`), never a `500` for a missing peer address.
//!
//! The app (`tests/apps/default-features`) is copied to a temporary directory, its
//! `redis-guard` path dependency pointed at the crate's absolute path, the workspace's
//! `Cargo.lock` copied so the versions match, and built there with `cargo build --offline`: the
//! workspace's own builds turn every feature on, so they cannot show what the defaults do. The
//! target directory is the one the copied rate-limit example builds in
//! (`CARGO_TARGET_TMPDIR/example-copy`): both resolve the same features, so their dependencies
//! are built once. The source is rewritten only when it changed, so a warm build is a
//! freshness check.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TESTS: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn client_ip_peer_limits_on_default_features_over_real_http() {
    let app_dir = Path::new(TESTS).join("apps/default-features");
    let crate_dir = Path::new(TESTS)
        .join("../crates/redis-guard")
        .canonicalize()
        .expect("crates/redis-guard");
    let copy = copy_app(&app_dir, &crate_dir);
    let binary = build(&copy);

    let app = App::start(&binary);
    for n in 1..=5 {
        let res = get(app.addr, "/");
        assert!(res.starts_with("HTTP/1.1 200 "), "request {n}: {res}");
        assert!(res.ends_with("hello\n"), "request {n}: {res}");
        assert!(header(&res, "ratelimit").is_some(), "request {n}: {res}");
    }
    let res = get(app.addr, "/");
    assert!(res.starts_with("HTTP/1.1 429 "), "request 6: {res}");
    assert!(header(&res, "retry-after").is_some(), "request 6: {res}");
}

/// Copies `Cargo.toml` (path dependency made absolute), `src/` and the workspace's `Cargo.lock`
/// out of the workspace, writing only what changed; returns the copy's directory.
fn copy_app(app_dir: &Path, crate_dir: &Path) -> PathBuf {
    // One directory per checkout: two worktrees never share a copy.
    let tag = TESTS
        .bytes()
        .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
    let copy = std::env::temp_dir().join(format!("redis-guard-default-features-{tag:016x}"));
    let manifest = std::fs::read_to_string(app_dir.join("Cargo.toml")).expect("Cargo.toml");
    let relative = r#"path = "../../../crates/redis-guard""#;
    assert!(manifest.contains(relative), "the app depends on {relative}");
    let absolute = format!("path = {:?}", crate_dir.display().to_string());
    write_if_changed(
        &copy.join("Cargo.toml"),
        &manifest.replace(relative, &absolute),
    );
    let lock = std::fs::read_to_string(Path::new(TESTS).join("../Cargo.lock"))
        .expect("the workspace Cargo.lock");
    write_if_changed(&copy.join("Cargo.lock"), &lock);
    let main = std::fs::read_to_string(app_dir.join("src/main.rs")).expect("src/main.rs");
    write_if_changed(&copy.join("src/main.rs"), &main);
    copy
}

fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the copy");
    std::fs::write(path, text).expect("write the copy");
}

/// `cargo build --offline` in `copy`; returns the binary.
fn build(copy: &Path) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("example-copy");
    // `CARGO` is the cargo running this test; else the one on PATH.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(&cargo)
        .args(["build", "--offline", "--quiet", "--target-dir"])
        .arg(&target)
        // As the workspace's dev profile, and as the copied example builds: the same flags, so
        // the dependencies both build are shared.
        .env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only")
        .current_dir(copy)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cargo:?} (put cargo on PATH): {e}"));
    assert!(
        status.success(),
        "cargo build of the copy in {}: {status}",
        copy.display()
    );
    target.join("debug").join(format!(
        "default-features-app{}",
        std::env::consts::EXE_SUFFIX
    ))
}

/// The app's process, killed on drop.
struct App {
    child: Child,
    addr: SocketAddr,
}

impl App {
    /// Starts `binary` and reads the address it listens on from its first line.
    fn start(binary: &Path) -> Self {
        let mut child = Command::new(binary)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut app = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a first line within 30 s");
        let addr = line
            .split("http://")
            .nth(1)
            .map(str::trim)
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        app.addr = addr.parse().expect("a socket address");
        app
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `GET` over a fresh connection; the whole response as text.
fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut res = String::new();
    stream.read_to_string(&mut res).expect("a response");
    res
}

/// The value of the header `name` (lower case) in a response's head.
fn header(res: &str, name: &str) -> Option<String> {
    let head = res.split("\r\n\r\n").next()?;
    head.lines().skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}
