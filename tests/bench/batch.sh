#!/usr/bin/env bash
# Section 2 of `make bench`: batches, POST /step with 256 items stepping 256
# different sessions (budget 512), beside the same step as a Redis EVAL
# pipelined 64 deep; then the speculative-decoding loop: 256 items, each a
# commit of the previous iteration's drafts and 4 new tentative ones
# (lookahead 4), in session-iterations/s beside the plain steps. Each server
# is started here and stopped on exit.
# Usage: batch.sh path/to/evictd   (BENCH_SECONDS, BENCH_WARMUP: lengths;
# BATCH_CONNS: wrk connections, default 4)
set -euo pipefail
bin=${1:?usage: batch.sh path/to/evictd}
. "$(dirname "$0")/lib.sh"
conns=${BATCH_CONNS:-4}
groups=$((2 * conns)) # 256-session groups: one per request in flight, and spare

echo "batch: wrk -t1 -c$conns, 256 steps of 256 sessions per POST /step" \
  "($((groups * 256)) sessions), budget 512, ${BENCH_SECONDS}s after" \
  "${BENCH_WARMUP}s warm-up; redis-benchmark -c 32 -P 64, 256 keys; $pinning"

start_evictd "$bin" --budget 512
ids=()
for ((g = 0; g < groups; g++)); do ids+=("t1g${g}s"{0..255}); done
prefill "$evictd_port" "${ids[@]}"
run_wrk evictd-batch "$evictd_pid" "$bench_dir/wrk_batch.lua" "$conns" \
  "http://127.0.0.1:$evictd_port" "$groups"
e_rps=$w_rps e_p50=$w_p50 e_p99=$w_p99 e_cpu=$w_cpu e_load=$w_load
stop "$evictd_pid"

start_evictd "$bin" --budget 512 --lookahead 4
prefill "$evictd_port" "${ids[@]}"
run_wrk evictd-spec "$evictd_pid" "$bench_dir/wrk_spec.lua" "$conns" \
  "http://127.0.0.1:$evictd_port" "$groups"
s_rps=$w_rps s_p50=$w_p50 s_p99=$w_p99 s_cpu=$w_cpu s_load=$w_load
stop "$evictd_pid"

start_redis
run_redis "redis EVAL -P 64" 32 64 256
stop "$redis_pid"

e_steps=$(awk -v r="$e_rps" 'BEGIN { printf "%.0f", r * 256 }')
s_iters=$(awk -v r="$s_rps" 'BEGIN { printf "%.0f", r * 256 }')
row() {
  awk -v n="$1" -v s="$2" -v r="$3" -v p50="$4" -v p99="$5" -v c="$6" -v l="$7" 'BEGIN {
    printf "  %-28s %11.0f %8.0f %8d %8d %7d%% %7d%% %12.0f\n", n, s, r, p50, p99,
      c, l, (c > 0 ? s * 100 / c : 0) }'
}
printf '  %-28s %11s %8s %8s %8s %8s %8s %12s\n' "" "steps/s" "req/s" "p50 us" \
  "p99 us" "server" "load" "steps/CPU-s"
row "evictd POST /step x256" "$e_steps" "$e_rps" "$e_p50" "$e_p99" "$e_cpu" "$e_load"
row "evictd commit+4 drafts x256" "$s_iters" "$s_rps" "$s_p50" "$s_p99" "$s_cpu" \
  "$s_load"
row "redis EVAL -P 64" "$r_rps" "$r_rps" "$r_p50" "$r_p99" "$r_cpu" "$r_load"
echo "  evictd/redis: $(ratio "$e_steps" "$r_rps") session-steps/s," \
  "$(ratio "$(per_cpu "$e_steps" "$e_cpu")" "$(per_cpu "$r_rps" "$r_cpu")") steps/CPU-s"
echo "  speculative/plain: $(ratio "$s_iters" "$e_steps") session-iterations/s" \
  "per session-step/s (an iteration commits 2 drafts, drops 2, drafts 4)"
echo "  target (issue 4): session-steps/s >= 10x redis's:" \
  "$(verdict "$e_steps" '>=' "$(awk -v r="$r_rps" 'BEGIN { print 10 * r }')")"
