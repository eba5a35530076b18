//! This example works when copied out of the repository, as a user would start from it: its
//! source is copied to a temporary directory, its `redis-guard` path dependency pointed at the crate's
//! absolute path (the only change), the workspace's `Cargo.lock` copied so the versions match,
//! and it is built there with `cargo build --offline`, then run on a free port and asked over
//! real HTTP: the sixth request of a minute is a `429` with `Retry-After`.
//!
//! Only std: this test builds nothing but itself. The build's target directory is its own
//! (`CARGO_TARGET_TMPDIR/example-copy`): the `cargo test` running this test may hold the
//! workspace's, and the copy's dependencies are built with other features anyway. Warm, the
//! build is a freshness check; the source is rewritten only when it changed, so the binary is
//! rebuilt only then. Outside the repository (a user's copy) there is nothing to compare with
//! and the test says so.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const EXAMPLE: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn a_copy_outside_the_workspace_builds_and_limits() {
    let example = Path::new(EXAMPLE);
    let repo = example.join("../..");
    let crate_dir = repo.join("crates/redis-guard");
    if !crate_dir.join("Cargo.toml").is_file() {
        eprintln!("not inside the redis-guard repository: nothing to check");
        return;
    }
    let crate_dir = crate_dir.canonicalize().expect("crates/redis-guard");
    let copy = copy_example(example, &repo, &crate_dir);
    let binary = build(&copy);

    let app = App::start(&binary);
    for n in 1..=5 {
        let res = get(app.addr, "/");
        assert!(res.starts_with("HTTP/1.1 200 "), "request {n}: {res}");
    }
    let res = get(app.addr, "/");
    assert!(res.starts_with("HTTP/1.1 429 "), "request 6: {res}");
    let retry_after = header(&res, "retry-after").expect("Retry-After on the 429");
    let secs: u64 = retry_after.parse().expect("Retry-After in whole seconds");
    assert!((1..=12).contains(&secs), "Retry-After: {secs}");
}

/// Copies `Cargo.toml` (path dependency made absolute), `src/` and the workspace's `Cargo.lock`
/// to a directory outside the workspace, writing only what changed; returns that directory.
fn copy_example(example: &Path, repo: &Path, crate_dir: &Path) -> PathBuf {
    // One directory per checkout: two worktrees never share a copy.
    let tag = EXAMPLE
        .bytes()
        .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
    let copy = std::env::temp_dir().join(format!("redis-guard-example-copy-{tag:016x}"));
    let manifest = std::fs::read_to_string(example.join("Cargo.toml")).expect("Cargo.toml");
    let relative = r#"path = "../../crates/redis-guard""#;
    assert!(
        manifest.contains(relative),
        "the example depends on {relative}"
    );
    let absolute = format!("path = {:?}", crate_dir.display().to_string());
    write_if_changed(
        &copy.join("Cargo.toml"),
        &manifest.replace(relative, &absolute),
    );
    let lock = std::fs::read_to_string(repo.join("Cargo.lock")).expect("the workspace Cargo.lock");
    write_if_changed(&copy.join("Cargo.lock"), &lock);
    for entry in std::fs::read_dir(example.join("src")).expect("src/") {
        let path = entry.expect("src/ entry").path();
        let text = std::fs::read_to_string(&path).expect("a source file");
        write_if_changed(
            &copy.join("src").join(path.file_name().expect("a name")),
            &text,
        );
    }
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
        // As the workspace's own dev profile: line tables for backtraces, no full debug info
        // (a faster build; the copy is its own workspace and does not read ours).
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
        "example-rate-limit{}",
        std::env::consts::EXE_SUFFIX
    ))
}

/// The example's process, killed on drop.
struct App {
    child: Child,
    addr: SocketAddr,
}

impl App {
    /// Starts `binary` on a free port and reads the address from its first line.
    fn start(binary: &Path) -> Self {
        let mut child = Command::new(binary)
            .env("BIND", "127.0.0.1:0")
            .env_remove("REDIS_URL")
            .env_remove("RATE_LIMIT")
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
        assert!(line.contains("backend: memory"), "{line}");
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
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
