#!/usr/bin/env bash
# Runs the HTTP caching test suite of cache-tests.fyi against CacheLayer as a reverse proxy's
# cache (the bench crate's cache-proxy binary: builder defaults plus the Vary headers the
# suite's origin uses), and counts the required tests passed as the suite's site counts them.
#
#   scripts/cache-tests.sh <suite checkout> [memory|redis] [results.json]
#
# The suite is not part of this repository: clone it and run `npm i` in it first. Needs node,
# npm, and `redis-server` on PATH for `redis` (started here on a free port, no persistence).
# Prints the count and the failing required tests; writes the suite's JSON results to the
# third argument when given. Not run by CI or scripts/test.sh.
set -euo pipefail

suite=${1:?usage: scripts/cache-tests.sh <suite checkout> [memory|redis] [results.json]}
store_kind=${2:-memory}
out=${3:-}
suite=$(cd "$suite" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$suite/node_modules" ] || { echo "run 'npm i' in $suite first" >&2; exit 2; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build --workspace --all-features --bin cache-proxy)
proxy_bin=$CARGO_TARGET_DIR/debug/cache-proxy

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on port $1" >&2
    return 1
}

origin_port=$(free_port)
# The suite's server reads its settings from npm's environment.
export npm_config_protocol=http npm_config_port=$origin_port npm_config_pidfile=$work/origin.pid
(cd "$suite" && exec node test-engine/server/server.mjs) >"$work/origin.log" 2>&1 &
pids+=($!)
wait_port "$origin_port"

case $store_kind in
    memory) store=memory ;;
    redis)
        redis_port=$(free_port)
        redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
            >"$work/redis.log" 2>&1 &
        pids+=($!)
        wait_port "$redis_port"
        store=redis://127.0.0.1:$redis_port
        ;;
    *) echo "unknown store $store_kind (memory or redis)" >&2; exit 2 ;;
esac

proxy_port=$(free_port)
"$proxy_bin" --listen "127.0.0.1:$proxy_port" --origin "http://127.0.0.1:$origin_port" \
    --store "$store" >"$work/proxy.log" 2>&1 &
pids+=($!)
wait_port "$proxy_port"

results=${out:-$work/results.json}
(cd "$suite" && npm_config_base="http://127.0.0.1:$proxy_port" npm_config_id='' npm_package_config_id='' \
    node --no-warnings test-engine/cli.mjs) >"$results"

# Counted as the site does: a test of kind `required` (or no kind) that the runner ran (not
# browser-only), whose result, dependencies honoured, is a pass.
cat >"$work/count.mjs" <<'EOF'
import fs from 'fs'
const [suite, file, label] = process.argv.slice(2)
const tests = (await import(`${suite}/tests/index.mjs`)).default
const { determineTestResult, resultTypes } = await import(`${suite}/test-engine/lib/results.mjs`)
const results = JSON.parse(fs.readFileSync(file, 'utf8'))
let total = 0
let passed = 0
const failing = []
for (const suiteDef of tests) {
  for (const test of suiteDef.tests) {
    if (test.kind !== 'required' && test.kind !== undefined) continue
    if (test.browser_only === true) continue
    total++
    const result = determineTestResult(tests, test.id, results)
    if (result === resultTypes.pass) passed++
    else failing.push(`${result[2]} ${test.id}: ${test.name}`)
  }
}
console.log(`${label}: ${passed} of ${total} required tests passed`)
for (const line of failing) console.log(`  ${line}`)
EOF
node "$work/count.mjs" "$suite" "$results" "CacheLayer ($store_kind)"
