#!/usr/bin/env bash
# Where the daemon's time goes under the benchmark loads: the single-step
# load of single.sh, then the batch load of batch.sh, PROFILE_SECONDS each
# (default 10), after a prefill and an unprofiled warm-up.
#   PROFILE_TOOL=callgrind (default): instructions in user space, which hold
#     on a busy machine; system calls and the kernel are not counted, and a
#     `rep stos`/`rep movs` counts once per iteration (memset looks dearer
#     than it is). Prints instructions per request and the top functions.
#   PROFILE_TOOL=perf: cpu-clock samples with call graphs, kernel included
#     (hardware counters are not needed). Prints the split by library and
#     the top symbols.
# The raw files stay in PROFILE_OUT (default build/profile).
# Usage: profile.sh path/to/evictd
set -euo pipefail
bin=${1:?usage: profile.sh path/to/evictd}
. "$(dirname "$0")/lib.sh"
seconds=${PROFILE_SECONDS:-10}
tool=${PROFILE_TOOL:-callgrind}
out=${PROFILE_OUT:-build/profile}
top=${PROFILE_TOP:-25}
mkdir -p "$out"

# wrk_load SECONDS BASE SCRIPT CONNS ARGS...: the load, checked.
wrk_load() {
  local secs=$1 base=$2 script=$3 conns=$4
  shift 4
  run_tracked "${pin_load[@]}" wrk -t1 -c"$conns" -d"${secs}s" --timeout 30s \
    -s "$script" "http://127.0.0.1:$evictd_port" -- "$base" "$@" >"$tmp/wrk.log" 2>&1
  check_wrk "$name" "$tmp/wrk.log"
}

# profile NAME SCRIPT CONNS ID... -- ARGS...
profile() {
  local name=$1 script=$2 conns=$3 ids=() requests total perf_pid
  shift 3
  while [ "$1" != -- ]; do ids+=("$1"); shift; done
  shift
  evictd_wrap=()
  [ "$tool" = callgrind ] &&
    evictd_wrap=(valgrind --tool=callgrind --instr-atstart=no
      --callgrind-out-file="$out/callgrind.$name" --log-file="$tmp/vg.$name")
  start_evictd "$bin" --budget 512
  prefill "$evictd_port" "${ids[@]}"
  wrk_load 2 1000 "$script" "$conns" "$@" # warm-up, not profiled
  echo ""
  if [ "$tool" = callgrind ]; then
    callgrind_control -i on "$evictd_pid" >/dev/null 2>&1
    wrk_load "$seconds" 100000000 "$script" "$conns" "$@"
    callgrind_control -i off "$evictd_pid" >/dev/null 2>&1
    stop "$evictd_pid"
    requests=$(field requests "$(grep '^RESULT ' "$tmp/wrk.log")")
    # "totals", not "summary", which counts from the program's start. The
    # requests in flight when wrk stopped ran but were not counted: at most
    # CONNS of thousands.
    total=$(awk '/^totals:/ { print $2; exit }' "$out/callgrind.$name")
    echo "== $name: $requests requests answered 200 under callgrind," \
      "$(awk -v t="$total" -v n="$requests" 'BEGIN { printf "%.0f", t / n }')" \
      "instructions each; $out/callgrind.$name"
    echo "-- inclusive (the function and all it calls), top $top"
    callgrind_annotate --inclusive=yes "$out/callgrind.$name" 2>/dev/null |
      sed -n '/^Ir/,$p' | sed -n "3,$((top + 2))p"
    echo "-- exclusive (the function's own instructions), top $top"
    callgrind_annotate "$out/callgrind.$name" 2>/dev/null |
      sed -n '/^Ir/,$p' | sed -n "3,$((top + 2))p"
  else
    perf record -F 2000 -e cpu-clock -g -p "$evictd_pid" -o "$out/perf.$name" \
      2>"$tmp/perf.log" &
    perf_pid=$!
    started+=("$perf_pid")
    sleep 0.5
    wrk_load "$seconds" 100000000 "$script" "$conns" "$@"
    stop "$perf_pid" # TERM: perf writes its file and exits
    stop "$evictd_pid"
    echo "== $name: $(field rps "$(grep '^RESULT ' "$tmp/wrk.log")") req/s" \
      "under perf; $out/perf.$name"
    echo "-- by library"
    perf report -i "$out/perf.$name" --no-children --sort dso --stdio -g none \
      2>/dev/null | grep '%' | sed -n '1,10p'
    echo "-- self, top $top"
    perf report -i "$out/perf.$name" --no-children --sort dso,symbol --stdio \
      -g none 2>/dev/null | grep '%' | sed -n "1,${top}p"
    echo "-- with callees, top $top"
    perf report -i "$out/perf.$name" --children --sort dso,symbol --stdio \
      -g none 2>/dev/null | grep '%' | sed -n "1,${top}p"
  fi
}

echo "profile: evictd under $tool, ${seconds}s of each load; $pinning"
profile single "$bench_dir/wrk_step.lua" 32 t1s{0..63} -- evictd
ids=()
for ((g = 0; g < 8; g++)); do ids+=("t1g${g}s"{0..255}); done
profile batch "$bench_dir/wrk_batch.lua" 4 "${ids[@]}" -- 8
