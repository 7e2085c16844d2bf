#!/usr/bin/env bash
# Durable mode in `make bench`: the single-step load of single.sh (wrk -c32,
# 64 sessions round-robin, budget 512, one position per POST) against
# evictd without persistence and with --state-dir in each --fsync mode, side
# by side: req/s, p50, p99, the server's CPU, and req/s as a ratio to no
# persistence. With --fsync always every answer waits for its fdatasync,
# shared by the requests that arrived meanwhile (group commit): the fsyncs
# per second and requests per fsync come from the daemon's /metrics.
# Usage: durable.sh path/to/evictd   (BENCH_SECONDS, BENCH_WARMUP: lengths)
set -euo pipefail
bin=${1:?usage: durable.sh path/to/evictd}
. "$(dirname "$0")/lib.sh"

echo "durable: wrk -t1 -c32, ${BENCH_SECONDS}s after ${BENCH_WARMUP}s warm-up," \
  "64 sessions round-robin, budget 512, one position per request; state" \
  "directory in $tmp ($(df -PT "$tmp" | awk 'NR == 2 { print $2 }')); $pinning"

# metric PORT NAME: a sample's value from GET /metrics (0 when absent).
metric() {
  http_probe "$1" GET /metrics | tr -d '\r' |
    awk -v n="$2" '$1 == n { v = $2 } END { print v + 0 }'
}

printf '  %-24s %9s %8s %8s %7s %8s %12s\n' "" "req/s" "p50 us" "p99 us" \
  "server" "vs none" "req/fsync"
base=""
for mode in none no everysec always; do
  if [ "$mode" = none ]; then
    start_evictd "$bin" --budget 512
  else
    start_evictd "$bin" --budget 512 --state-dir "$tmp/state-$mode" \
      --fsync "$mode"
  fi
  prefill "$evictd_port" t1s{0..63}
  f0=$(metric "$evictd_port" evictd_journal_fsync_seconds_count)
  run_wrk "durable-$mode" "$evictd_pid" "$bench_dir/wrk_step.lua" 32 \
    "http://127.0.0.1:$evictd_port" evictd
  f1=$(metric "$evictd_port" evictd_journal_fsync_seconds_count)
  stop "$evictd_pid"
  [ -n "$base" ] || base=$w_rps
  name="--fsync $mode"
  [ "$mode" != none ] || name="no --state-dir"
  awk -v n="$name" -v r="$w_rps" -v p50="$w_p50" -v p99="$w_p99" -v c="$w_cpu" \
    -v b="$base" -v f="$((f1 - f0))" -v s="$BENCH_SECONDS" 'BEGIN {
    per = (f > 0) ? sprintf("%.1f", r * s / f) : "-"
    printf "  %-24s %9.0f %8d %8d %6d%% %7.2fx %12s\n", n, r, p50, p99, c,
      r / b, per }'
done
echo "  (req/fsync: requests answered per fdatasync during the run, from" \
  "evictd_journal_fsync_seconds_count; everysec syncs once a second)"
