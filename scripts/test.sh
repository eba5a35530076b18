#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, and every test against real Redis processes that
# the tests start themselves (no Redis needs to be running). Installs redis-server when it is
# missing and this user can (root with apt-get, or passwordless sudo); otherwise says what to do.
# The same for wrk, which the benchmark harness's smoke test drives.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n== %s\n' "$*"; }

apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && command -v apt-get >/dev/null 2>&1; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    return 1
  fi
}

if [ -z "${REDIS_SERVER_BIN:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
  say "redis-server is missing: installing it"
  if ! apt_install redis-server; then
    cat >&2 <<'MSG'
The tests start their own redis-server processes, and redis-server is not installed.
Install it, then run this script again:
  Debian/Ubuntu:  sudo apt-get install redis-server
  Fedora:         sudo dnf install redis
  macOS:          brew install redis
or set REDIS_SERVER_BIN to a redis-server binary (Redis 6.2 or newer).
MSG
    exit 1
  fi
fi
if [ -z "${REDIS_SERVER_BIN:-}" ]; then
  # A redis-server started by the package (on 6379) is not used: each test starts its own.
  say "using $(redis-server --version)"
fi

# The benchmark harness (crates/redis-guard-bench) drives load with wrk; its smoke test runs here.
if ! command -v wrk >/dev/null 2>&1; then
  say "wrk is missing: installing it"
  if ! apt_install wrk; then
    cat >&2 <<'MSG'
The benchmark harness's smoke test drives load with wrk, and wrk is not installed.
Install it, then run this script again:
  Debian/Ubuntu:  sudo apt-get install wrk
  Fedora:         sudo dnf install wrk
  macOS:          brew install wrk
MSG
    exit 1
  fi
fi

# The end-to-end browser tests drive a headless Chromium through chromedriver.
need_browser=
if [ -z "${CHROME_BIN:-}" ] && ! command -v chromium >/dev/null 2>&1 \
  && ! command -v chromium-browser >/dev/null 2>&1; then
  need_browser=1
fi
if [ -z "${CHROMEDRIVER_BIN:-}" ] && ! command -v chromedriver >/dev/null 2>&1; then
  need_browser=1
fi
if [ -n "$need_browser" ]; then
  say "chromium or chromedriver is missing: installing them"
  if ! apt_install chromium chromium-driver; then
    cat >&2 <<'MSG'
The browser tests drive a headless Chromium through chromedriver, and one of them is not installed.
Install both, then run this script again:
  Debian:  sudo apt-get install chromium chromium-driver
or set CHROME_BIN to a Chromium binary and CHROMEDRIVER_BIN to the matching chromedriver.
MSG
    exit 1
  fi
fi

for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    say "installing the $component component"
    rustup component add "$component" || {
      echo "cargo $component is missing: run 'rustup component add $component'" >&2
      exit 1
    }
  fi
done

say "cargo fmt --check"
cargo fmt --all -- --check

say "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings

say "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

say "cargo test"
cargo test --workspace --all-features
