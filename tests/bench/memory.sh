#!/usr/bin/env bash
# Section 3 of `make bench`: resident memory per session at budget 512, as
# the daemon's VmRSS difference between no sessions and BENCH_SESSIONS
# (default 100,000) live ones: once they are created (PUT), once every
# window is full (one step of 512 positions each), and in the steady state
# (one more single-position step each, which replaces the big request's
# replay record), with the time each phase took.
# Usage: memory.sh path/to/evictd path/to/bench_memory
set -euo pipefail
bin=${1:?usage: memory.sh path/to/evictd path/to/bench_memory}
driver=${2:?usage: memory.sh path/to/evictd path/to/bench_memory}
. "$(dirname "$0")/lib.sh"
sessions=${BENCH_SESSIONS:-100000}
ring=2052   # the design card: (512 + 1) slots of 4 bytes
target=2180 # the issue's target: the ring + 128 bytes

echo "memory: $sessions sessions at budget 512 over one keep-alive" \
  "connection, 16 requests deep; $pinning"
start_evictd "$bin" --budget 512 --max-sessions $((sessions + 1000))
run_tracked "${pin_load[@]}" "$driver" "$evictd_port" "$evictd_pid" "$sessions" 512 \
  >"$tmp/memory.out" || die "memory: the driver failed"
out=$(cat "$tmp/memory.out")
val() { sed -n "s/^$1 //p" <<<"$out"; }
stop "$evictd_pid"

awk -v n="$(val sessions)" -v r0="$(val rss_before)" -v r1="$(val rss_created)" \
  -v r2="$(val rss_filled)" -v r3="$(val rss_steady)" -v tc="$(val create_seconds)" \
  -v tf="$(val fill_seconds)" -v ts="$(val step_seconds)" \
  -v ring="$ring" -v target="$target" 'BEGIN {
  printf "  %-46s %10s %9s\n", "RSS over the empty daemon, per session", "bytes", "time"
  printf "  %-46s %10.0f %8.2fs  %8.0f sessions/s\n",
    "1. created by PUT (window holds position 0)", (r1 - r0) / n, tc, n / tc
  printf "  %-46s %10.0f %8.2fs  %8.0f positions/s\n",
    "2. filled: one step of 512 positions each", (r2 - r0) / n, tf, n * 512 / tf
  printf "  %-46s %10.0f %8.2fs  %8.0f steps/s\n",
    "3. steady: then one single-position step each", (r3 - r0) / n, ts, n / ts
  printf "  %-46s %10d\n", "design card: the ring, (512 + 1) x 4", ring
  printf "  %-46s %10d\n", "target: the ring + 128", target
  printf "  RSS %.1f MiB empty, %.1f / %.1f / %.1f MiB after 1 / 2 / 3;" \
    " steady/ring %.2fx, steady/target %.2fx\n", r0 / 1048576, r1 / 1048576,
    r2 / 1048576, r3 / 1048576, (r3 - r0) / n / ring, (r3 - r0) / n / target
}'
steady=$(awk -v r0="$(val rss_before)" -v r3="$(val rss_steady)" -v n="$(val sessions)" \
  'BEGIN { printf "%.0f", (r3 - r0) / n }')
echo "  target (issue 4): steady bytes/session <= $target: $(verdict "$steady" '<=' "$target")"

# The same at lookahead 16 (--lookahead as the sessions' default): the ring
# grows by 16 slots; the header must not grow with it.
la=16
start_evictd "$bin" --budget 512 --lookahead "$la" --max-sessions $((sessions + 1000))
run_tracked "${pin_load[@]}" "$driver" "$evictd_port" "$evictd_pid" "$sessions" 512 \
  >"$tmp/memory-la.out" || die "memory: the driver failed (lookahead $la)"
stop "$evictd_pid"
out=$(cat "$tmp/memory-la.out")
ring_la=$((4 * (512 + la)))
steady_la=$(awk -v r0="$(val rss_before)" -v r3="$(val rss_steady)" -v n="$(val sessions)" \
  'BEGIN { printf "%.0f", (r3 - r0) / n }')
echo "  lookahead $la: steady $steady_la bytes/session; ring 4 x (512 + $la) =" \
  "$ring_la; target ring + 128 = $((ring_la + 128)):" \
  "$(verdict "$steady_la" '<=' "$((ring_la + 128))")"
