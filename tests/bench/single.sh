#!/usr/bin/env bash
# Section 1 of `make bench`: single steps, POST /session/{id}/step with one
# position, 64 sessions round-robin at budget 512, 32 connections. evictd
# beside the HTTP floor (nginx answering a fixed body) and beside the same
# step as a Redis EVAL, each started here and stopped on exit.
# Usage: single.sh path/to/evictd   (BENCH_SECONDS, BENCH_WARMUP: lengths)
set -euo pipefail
bin=${1:?usage: single.sh path/to/evictd}
. "$(dirname "$0")/lib.sh"

echo "single steps: wrk -t1 -c32, ${BENCH_SECONDS}s after ${BENCH_WARMUP}s warm-up," \
  "64 sessions round-robin, budget 512; $pinning"

start_evictd "$bin" --budget 512
prefill "$evictd_port" t1s{0..63}
run_wrk evictd "$evictd_pid" "$bench_dir/wrk_step.lua" 32 \
  "http://127.0.0.1:$evictd_port" evictd
e_rps=$w_rps e_p50=$w_p50 e_p99=$w_p99 e_cpu=$w_cpu e_load=$w_load
# The windows really are full: the measured run stepped at budget 512.
reply=$(http_probe "$evictd_port" GET /session/t1s0)
[[ $reply == *'"size":512,'* ]] ||
  die "evictd: session t1s0 is not at its budget after the run: ${reply:0:300}"
stop "$evictd_pid"

start_nginx
reply=$(http_probe "$nginx_port" POST /session/t1s0/step '{"pos":1}')
body=${reply#*$'\r\n\r\n'}
if [ "${#body}" != 27 ] || ! grep -qi '^content-length: 27' <<<"$reply"; then
  die "nginx floor: the answer is not the fixed 27-byte body: $reply"
fi
run_wrk nginx "$nginx_worker" "$bench_dir/wrk_step.lua" 32 \
  "http://127.0.0.1:$nginx_port" floor
n_rps=$w_rps n_p50=$w_p50 n_p99=$w_p99 n_cpu=$w_cpu n_load=$w_load
stop "$nginx_pid"

start_redis
run_redis "redis EVAL" 32 1 64
stop "$redis_pid"

# Besides req/s: the CPU the server and the load generator used (percent of
# one CPU; a server well below 100% was starved by other work or by its
# load generator) and the requests per CPU-second of the server, which
# moves less than req/s when the machine is shared.
row() {
  awk -v n="$1" -v r="$2" -v p50="$3" -v p99="$4" -v c="$5" -v l="$6" 'BEGIN {
    printf "  %-26s %9.0f %8d %8d %7d%% %7d%% %10.0f\n", n, r, p50, p99, c, l,
      (c > 0 ? r * 100 / c : 0) }'
}
printf '  %-26s %9s %8s %8s %8s %8s %10s\n' "" "req/s" "p50 us" "p99 us" \
  "server" "load" "req/CPU-s"
row "evictd" "$e_rps" "$e_p50" "$e_p99" "$e_cpu" "$e_load"
row "nginx return 200 (floor)" "$n_rps" "$n_p50" "$n_p99" "$n_cpu" "$n_load"
row "redis EVAL, unpipelined" "$r_rps" "$r_p50" "$r_p99" "$r_cpu" "$r_load"
echo "  evictd/nginx: $(ratio "$e_rps" "$n_rps") req/s," \
  "$(ratio "$e_p99" "$n_p99") p99 latency," \
  "$(ratio "$(per_cpu "$e_rps" "$e_cpu")" "$(per_cpu "$n_rps" "$n_cpu")") req/CPU-s" \
  "   evictd/redis: $(ratio "$e_rps" "$r_rps") req/s," \
  "$(ratio "$(per_cpu "$e_rps" "$e_cpu")" "$(per_cpu "$r_rps" "$r_cpu")") req/CPU-s"
echo "  targets (issue 4): req/s >= nginx's: $(verdict "$e_rps" '>=' "$n_rps");" \
  "p99 <= nginx's: $(verdict "$e_p99" '<=' "$n_p99");" \
  "req/s >= redis's: $(verdict "$e_rps" '>=' "$r_rps")"
