#!/usr/bin/env bash
# `make soak`: evictd under full-speed churn for SECONDS after a warm-up:
# 10,000 session slots created, stepped (single positions, several at once,
# batches) and deleted over several keep-alive connections by soak_load,
# which checks every answer. Prints requests/s, p99 latency, errors (must
# be 0) and VmRSS after the warm-up and at the end (growth must stay within
# SOAK_MAX_GROWTH percent, default 2). The daemon must then stop cleanly.
# Usage: soak.sh path/to/evictd path/to/soak_load SECONDS
# Environment: SOAK_WARMUP (s, default 20), SOAK_CONNS (8), SOAK_SESSIONS
# (10000), SOAK_MAX_GROWTH (2; SOAK_SMOKE=1 judges errors only), SOAK_ARGS
# (more daemon flags, e.g. "--state-dir /tmp/x --fsync everysec").
set -euo pipefail
bin=${1:?usage: soak.sh path/to/evictd path/to/soak_load SECONDS}
driver=${2:?usage: soak.sh path/to/evictd path/to/soak_load SECONDS}
seconds=${3:?usage: soak.sh path/to/evictd path/to/soak_load SECONDS}
. "$(dirname "$0")/../bench/lib.sh"

warmup=${SOAK_WARMUP:-20}
conns=${SOAK_CONNS:-8}
sessions=${SOAK_SESSIONS:-10000}
growth=${SOAK_MAX_GROWTH:-2}
[ -z "${SOAK_SMOKE:-}" ] || growth=-1
read -r -a extra <<<"${SOAK_ARGS:-}"

echo "soak: $sessions session slots in churn over $conns keep-alive" \
  "connections, ${seconds}s after ${warmup}s warm-up${SOAK_ARGS:+, evictd $SOAK_ARGS};" \
  "$pinning"
start_evictd "$bin" --budget 512 "${extra[@]}"
rc=0
run_tracked "${pin_load[@]}" "$driver" "$evictd_port" "$evictd_pid" "$seconds" \
  "$warmup" "$conns" "$sessions" "$growth" || rc=$?
kill -0 "$evictd_pid" 2>/dev/null || { cat "$tmp/evictd.log" >&2; die "evictd died during the soak"; }
kill -TERM "$evictd_pid"
code=0
wait "$evictd_pid" || code=$?
started=()
if grep -E ' (warn|error) ' "$tmp/evictd.log" >&2; then
  echo "  (the daemon's warnings and errors above)" >&2
fi
[ "$code" = 0 ] || die "evictd exited with status $code after SIGTERM"
[ "$rc" = 0 ] || die "soak: errors or memory growth, see above"
echo "  soak passed"
