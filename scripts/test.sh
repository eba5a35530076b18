#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, and every test against real Redis processes that
# the tests start themselves (no Redis needs to be running). Installs redis-server when it is
# missing and this user can (root with apt-get, or passwordless sudo); otherwise says what to do.
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
