#!/usr/bin/env bash
# Profiles the app side of one benchmark variant: runs the harness on it for 12 s and samples its
# process with `perf record --call-graph dwarf` for 4 s in the middle, then prints the hottest
# symbols (self time, and with their callees) of redis-guard, redis-rs, hyper and the allocator.
#
#   scripts/profile.sh redis            # any variant of `bench --help`
#   PERF_DATA=/tmp/x.data scripts/profile.sh sessions-read
#
# Needs `perf` (Debian: linux-perf) and what the harness needs (redis-server, wrk). Build first:
# cargo build --release -p redis-guard-bench --bin bench
set -eu
variant=${1:?usage: scripts/profile.sh <variant>}
data=${PERF_DATA:-target/profile-$variant.data}
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "perf is missing: apt-get install linux-perf" >&2; exit 1; }
[ -x target/release/bench ] || { echo "build first: cargo build --release -p redis-guard-bench --bin bench" >&2; exit 1; }
target/release/bench --duration 12s --rounds 1 --only "$variant" >"target/profile-$variant.txt" 2>&1 &
bench=$!
for _ in $(seq 1 120); do
  pgrep -P "$bench" -x wrk >/dev/null && break
  sleep 0.5
done
sleep 2
perf record -F 299 --call-graph dwarf,16384 -p "$bench" -o "$data" -- sleep 4 >/dev/null 2>&1
wait "$bench"
grep -E '^\| `' "target/profile-$variant.txt" || true
report() { perf report -i "$data" "$@" --sort symbol --stdio 2>/dev/null | grep -E '^ +[0-9]' | cut -c1-150; }
echo "== self time, top 15"
report --no-children | head -15 || true
echo "== with callees: redis-guard, redis-rs, hyper writes, malloc/free"
report --children | grep -E 'redis_guard|redis::|combine::stream|writev|libc_malloc|libc_free' | head -25  || true
