#!/usr/bin/env bash
# State on disk and restarts in `make bench`: RESTART_SESSIONS (default
# 1,000,000) sessions of budget 512, each filled by one 600-position step
# (a prefill longer than the budget), then a decode step, with --state-dir;
# then SIGTERM (the final snapshot: its time, against Kubernetes' 30 s
# grace period, and its size against the rings' bytes, target 1.1x), and
# restarts on the directory (until the daemon listens), against the time to
# read the directory once with cat > /dev/null in the same run (target 4x;
# medians of three of each). Beside them, the floor under any restart that
# holds its state in its own memory: copying the snapshot into fresh memory
# (bench_memcopy), which cat does not pay.
# Usage: restart.sh path/to/evictd path/to/bench_memory path/to/bench_memcopy
set -euo pipefail
usage="usage: restart.sh path/to/evictd path/to/bench_memory path/to/bench_memcopy"
bin=${1:?$usage}
driver=${2:?$usage}
memcopy=${3:?$usage}
. "$(dirname "$0")/lib.sh"
sessions=${RESTART_SESSIONS:-1000000}
state="$tmp/state"

now() { date +%s.%N; }
echo "restart: $sessions sessions at budget 512, each filled by a" \
  "600-position step, state directory in $tmp" \
  "($(df -PT "$tmp" | awk 'NR == 2 { print $2 }')), --fsync everysec; $pinning"
start_evictd "$bin" --budget 512 --max-sessions $((sessions + 1000)) \
  --state-dir "$state" --compact-after $((1 << 40))
t0=$(now)
run_tracked "${pin_load[@]}" "$driver" "$evictd_port" "$evictd_pid" \
  "$sessions" 512 600 >"$tmp/restart.out" || die "restart: the driver failed"
t1=$(now)
rss=$(awk '/^VmRSS/ { print $2 * 1024 }' "/proc/$evictd_pid/status")
# SIGTERM: the final snapshot, then exit.
kill -TERM "$evictd_pid"
ts=$(now)
while kill -0 "$evictd_pid" 2>/dev/null; do sleep 0.01; done
te=$(now)
wait "$evictd_pid" 2>/dev/null || true
snap=$(stat -c %s "$state/snapshot")
dir=$(du -sb "$state" | awk '{ print $1 }')
# The floor: reading the directory once, warm as the restart will find it.
# Both are timed three times, and the medians compared: the machine is
# shared, and a first touch of fresh memory is sometimes slow here.
median() { sort -g | sed -n 2p; }
minus() { awk -v b="$1" -v a="$2" 'BEGIN { printf "%.4f\n", b - a }'; }
cat "$state"/* >/dev/null
tcat=$(for _ in 1 2 3; do
  a=$(now); cat "$state"/* >/dev/null; b=$(now); minus "$b" "$a"
done | median)
# The floor of a restart into the daemon's own memory: the snapshot copied
# into as many fresh bytes, their pages readied first (medians of 3).
mapfile -t mc < <("$memcopy" "$state/snapshot" 3)
tmc=$(printf '%s\n' "${mc[@]}" | awk '{ print $1 }' | median)
tmp_pop=$(printf '%s\n' "${mc[@]}" | awk '{ print $2 }' | median)
trs=() tls=()
for round in 1 2 3; do
  a=$(now)
  start_evictd "$bin" --budget 512 --max-sessions $((sessions + 1000)) \
    --state-dir "$state" --compact-after $((1 << 40))
  b=$(now)
  trs+=("$(minus "$b" "$a")")
  loaded=$(sed -n 's/.*state: \([0-9]*\) sessions\? from.*/\1/p' "$tmp/evictd.log")
  tls+=("$(sed -n 's/.*state: [0-9]* sessions\? from .* in \([0-9.]*\) s .*/\1/p' \
    "$tmp/evictd.log")")
  reply=$(http_probe "$evictd_port" GET /session/m0000000)
  [[ $reply == "HTTP/1.1 200 "* && $reply == *'"newest":601'* ]] ||
    die "restart: a session did not come back: ${reply:0:300}"
  [ "$loaded" = "$sessions" ] || die "restart: $loaded of $sessions sessions loaded"
  rss2=$(awk '/^VmRSS/ { print $2 * 1024 }' "/proc/$evictd_pid/status")
  # Killed, not stopped: another final snapshot would only rewrite the same.
  kill -KILL "$evictd_pid"
  wait "$evictd_pid" 2>/dev/null || true
  started=()
done
tr=$(printf '%s\n' "${trs[@]}" | median)
tl=$(printf '%s\n' "${tls[@]}" | median)

awk -v n="$sessions" -v t0="$t0" -v t1="$t1" -v ts="$ts" -v te="$te" \
    -v snap="$snap" -v dir="$dir" -v tcat="$tcat" -v tr="$tr" \
    -v trs="${trs[*]}" -v tl="$tl" -v rss="$rss" \
    -v rss2="$rss2" -v tmc="$tmc" -v tpop="$tmp_pop" 'BEGIN {
  ring = 4 * 513
  printf "  %-44s %12s %10s\n", "", "value", "target"
  printf "  %-44s %10.1f s\n", "load (PUT, 600-position step, decode step)", t1 - t0
  printf "  %-44s %10.0f B\n", "resident memory per session", rss / n
  printf "  %-44s %10.0f B\n", "  after a restart", rss2 / n
  printf "  %-44s %10.2f s %10s\n", "SIGTERM: final snapshot and exit", te - ts, "< 30 s"
  printf "  %-44s %10.2f x %10s\n", "snapshot bytes / rings bytes", snap / (ring * n), "<= 1.1x"
  printf "  %-44s %10.1f MB\n", "state directory", dir / 1e6
  printf "  %-44s %10.3f s\n", "cat the directory > /dev/null (median of 3)", tcat
  printf "  %-44s %10.3f s\n", "snapshot copied into fresh memory (median)", tmc
  printf "  %-44s %10.3f s\n", "  of which readying the fresh pages", tpop
  printf "  %-44s %10.3f s   (runs: %s)\n", "restart until listening (median of 3)", tr, trs
  printf "  %-44s %10.3f s\n", "  of which loading (the log line, median)", tl
  printf "  %-44s %10.1f x %10s\n", "restart / cat", tr / tcat, "<= 4x"
  printf "  %-44s %10.1f x\n", "  the floor: fresh-memory copy / cat", tmc / tcat
  printf "  %-44s %10.1f x\n", "restart / fresh-memory copy", tr / tmc
}'
