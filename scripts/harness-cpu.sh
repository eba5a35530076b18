#!/usr/bin/env bash
# Where the CPU of one benchmark variant goes, per request, process by process: runs the harness
# on it alone and, for a window in the middle of the `wrk` run, counts with `perf stat` the CPU
# time (user and kernel), context switches and system calls of the app (the `bench` process),
# its `redis-server` and `wrk`. Requests are counted as `wrk`'s writes in the window (one
# request a write: `wrk` does not pipeline), so every figure is per request actually served.
#
#   scripts/harness-cpu.sh cache-hit          # any variant of `bench --help`
#   BENCH=/tmp/other-bench WINDOW=8 scripts/harness-cpu.sh hand-cache
#   TOP=40 scripts/harness-cpu.sh redis  # also where the app's CPU goes: the TOP functions
#
# With TOP set, `perf record` samples the app (4,999 times a CPU-second) in the same window and
# prints its CPU per request by binary (the app, libc, the kernel) and its TOP functions, in
# nanoseconds per request. The sampling slows the app by a fifth or so: compare two variants
# run the same way, function by function, not with figures taken without TOP.
#
# Run two variants alternately, several times each: on a shared machine the CPU the three
# processes get moves from run to run, and so does the batching (of `wrk`'s reads, of Redis's
# replies), hence the cost per request. Needs `perf` (Debian: linux-perf, run as root or with
# perf_event_paranoid ≤ 0) and what the harness needs (redis-server, wrk). Build first:
# cargo build --release -p redis-guard-bench --bin bench
set -eu
variant=${1:?usage: scripts/harness-cpu.sh <variant>}
window=${WINDOW:-5}
cd "$(dirname "$0")/.."
bench=${BENCH:-target/release/bench}
command -v perf >/dev/null || { echo "perf is missing: apt-get install linux-perf" >&2; exit 1; }
[ -x "$bench" ] || { echo "build first: cargo build --release -p redis-guard-bench --bin bench" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$bench" --duration "$((window + 4))s" --rounds 1 --only "$variant" >"$out/bench.txt" 2>&1 &
app=$!
wrk=
for _ in $(seq 1 600); do
  # The load run, not the version check the harness runs first.
  wrk=$(pgrep -P "$app" -f '^wrk -t' || true)
  [ -n "$wrk" ] && break
  sleep 0.05
done
[ -n "$wrk" ] || { echo "wrk did not start; the harness said:" >&2; cat "$out/bench.txt" >&2; exit 1; }
redis=$(pgrep -P "$app" -x redis-server | head -1 || true)
sleep 1

# utime and stime of a process, in clock ticks (fields 14 and 15 of /proc/<pid>/stat).
ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
events=task-clock,context-switches,raw_syscalls:sys_enter
declare -A before
for name in app redis wrk; do
  pid=${!name}
  [ -n "$pid" ] || continue
  before[$name]=$(ticks "$pid")
  extra=
  [ "$name" = wrk ] && extra=,syscalls:sys_enter_write
  perf stat -x, -e "$events$extra" -p "$pid" -o "$out/$name.csv" -- sleep "$window" 2>/dev/null &
done
hz_record=4999
if [ -n "${TOP:-}" ]; then
  perf record -q -F "$hz_record" -p "$app" -o "$out/app.data" -- sleep "$window" >/dev/null 2>&1 &
fi
sleep "$window"
declare -A after
for name in app redis wrk; do
  pid=${!name}
  [ -n "$pid" ] && after[$name]=$(ticks "$pid")
done
wait "$app" || true
sleep 0.2

# The value of event $2 in perf's CSV output $1.
count() { awk -F, -v e="$2" '$3 == e { print $1 }' "$1"; }
requests=$(count "$out/wrk.csv" syscalls:sys_enter_write)
[ -n "$requests" ] && [ "$requests" -gt 0 ] || { echo "no requests counted" >&2; exit 1; }
hz=$(getconf CLK_TCK)
grep -E '^\| `' "$out/bench.txt" || true
echo "$requests requests in the ${window} s window"
printf '%-6s %9s %9s %9s %8s %8s\n' process 'µs/req' 'user µs' 'sys µs' 'cs/req' 'sys/req'
for name in app redis wrk; do
  [ -f "$out/$name.csv" ] || continue
  read -r u0 s0 <<<"${before[$name]}"
  read -r u1 s1 <<<"${after[$name]}"
  awk -v name="$name" -v n="$requests" -v hz="$hz" \
    -v ms="$(count "$out/$name.csv" task-clock)" \
    -v cs="$(count "$out/$name.csv" context-switches)" \
    -v sc="$(count "$out/$name.csv" raw_syscalls:sys_enter)" \
    -v u="$((u1 - u0))" -v s="$((s1 - s0))" \
    'BEGIN { printf "%-6s %9.2f %9.2f %9.2f %8.3f %8.2f\n", name, ms * 1000 / n,
             u * 1e6 / hz / n, s * 1e6 / hz / n, cs / n, sc / n }'
done

if [ -n "${TOP:-}" ]; then
  [ -s "$out/app.data" ] || { echo "perf record wrote nothing" >&2; exit 1; }
  # Samples a row, as ns a request: each sample stands for 1/hz_record s of CPU.
  per_request() { awk -v n="$requests" -v hz="$hz_record" '
    { samples = $1; $1 = ""; sub(/^ +/, ""); printf "%9.0f  %s\n", samples * 1e9 / hz / n, substr($0, 1, 150) }'; }
  echo
  echo "app, ns a request, by binary:"
  perf report -i "$out/app.data" --no-children --sort dso --stdio -F sample,dso 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | sort -rn | per_request
  echo
  echo "app, ns a request, its $TOP costliest functions:"
  perf report -i "$out/app.data" --no-children --sort symbol --stdio -F sample,symbol 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | sort -rn | head -n "$TOP" | per_request
fi
