# Shared by the HTTP benchmark sections (sourced, not run): a scratch
# directory, the daemon and its peers started on loopback and pinned to
# their cores, and a trap that stops every process this script started,
# by pid, however the script ends.
# shellcheck shell=bash disable=SC2034
# (SC2034: the variables set here are read by the scripts that source it.)

BENCH_SECONDS=${BENCH_SECONDS:-10} # length of every measured run
BENCH_WARMUP=${BENCH_WARMUP:-2}    # seconds of the same load before it

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/evictd-bench.XXXXXX")
started=()     # pids to stop on exit, oldest first
evictd_wrap=() # a command to run the daemon under (profile.sh: valgrind)

cleanup() {
  local i pid
  trap - EXIT INT TERM
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do
    pid=${started[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    # Give it a moment to finish cleanly, then insist.
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
# Any command that fails unexpectedly fails the run, loudly.
set -E
trap 'die "${BASH_SOURCE[0]##*/} line $LINENO: \"$BASH_COMMAND\" failed"' ERR
trap 'echo "interrupted" >&2; exit 130' INT
trap 'echo "terminated" >&2; exit 143' TERM

die() {
  echo "" >&2
  echo "!!! BENCHMARK FAILED: $*" >&2
  echo "" >&2
  exit 1
}

# Pinning: the server under test on CPU 0, the load generator on CPU 1,
# when the machine has two CPUs and taskset is allowed to use them.
if [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ] && taskset -c 0 true 2>/dev/null &&
   taskset -c 1 true 2>/dev/null; then
  pin_server=(taskset -c 0)
  pin_load=(taskset -c 1)
  pinning="server on CPU 0, load generator on CPU 1"
else
  pin_server=()
  pin_load=()
  pinning="not pinned (taskset not allowed or fewer than 2 CPUs)"
fi

# Runs a foreground tool in the background and waits for it, so that the
# trap can stop it when the script is interrupted.
run_tracked() {
  local rc=0
  "$@" &
  started+=($!)
  wait $! || rc=$?
  unset 'started[${#started[@]}-1]'
  return $rc
}

# CPU time (user + system, clock ticks, all threads) a process has used.
cpu_ticks() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) ||
    die "process $1, a server under test, is gone: it crashed or was killed"
  awk '{ print $14 + $15 }' <<<"$stat"
}
hz=$(getconf CLK_TCK)

# CPU seconds used by the waited-for children of this shell (the load
# generators). `times` runs here, not in a subshell, whose children would
# be its own.
children_cpu() {
  times >"$tmp/times"
  awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/)
    print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$tmp/times"
}

# start_evictd BIN [FLAG...]: starts the daemon on an ephemeral loopback
# port (under the command in the array evictd_wrap, if set, such as
# valgrind); sets evictd_pid and evictd_port.
start_evictd() {
  local bin=$1 log="$tmp/evictd.log" addr=""
  shift
  "${pin_server[@]}" "${evictd_wrap[@]}" "$bin" \
    --listen 127.0.0.1:0 "$@" 2>"$log" &
  evictd_pid=$!
  started+=("$evictd_pid")
  for _ in $(seq 600); do
    addr=$(sed -n '/listening on /{s/.*listening on \([^ ]*\).*/\1/p;q}' "$log")
    [ -n "$addr" ] && break
    kill -0 "$evictd_pid" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$addr" ] || { cat "$log" >&2; die "evictd did not start"; }
  evictd_port=${addr##*:}
}

# Peers cannot bind port 0 and report it, so they get a random high port
# below the ephemeral range, and another one if that is taken.
random_port() {
  echo $((20000 + RANDOM % 12000))
}

# start_nginx: the HTTP floor, one worker, keep-alive, every POST answered
# with the same 27-byte body; sets nginx_pid (the master), nginx_worker and
# nginx_port.
start_nginx() {
  local attempt conf="$tmp/nginx.conf"
  for attempt in 1 2 3 4 5; do
    nginx_port=$(random_port)
    sed -e "s|@TMP@|$tmp|g" -e "s|@PORT@|$nginx_port|g" \
      "$bench_dir/nginx.conf.in" >"$conf"
    : >"$tmp/nginx-error.log"
    "${pin_server[@]}" nginx -p "$tmp" -c "$conf" -e "$tmp/nginx-error.log" \
      2>"$tmp/nginx-stderr.log" &
    nginx_pid=$!
    started+=("$nginx_pid")
    for _ in $(seq 100); do
      nginx_worker=$(pgrep -P "$nginx_pid" | sed -n 1p || true)
      [ -n "$nginx_worker" ] && http_probe "$nginx_port" >/dev/null 2>&1 && return 0
      kill -0 "$nginx_pid" 2>/dev/null || break
      sleep 0.05
    done
    cat "$tmp/nginx-stderr.log" >>"$tmp/nginx-error.log"
    grep -q "Address already in use" "$tmp/nginx-error.log" || break
    echo "nginx: port $nginx_port taken, trying another (attempt $attempt)" >&2
  done
  cat "$tmp/nginx-error.log" >&2
  die "nginx did not start"
}

# start_redis: redis-server on loopback without persistence; sets
# redis_pid and redis_port.
start_redis() {
  local attempt
  for attempt in 1 2 3 4 5; do
    redis_port=$(random_port)
    "${pin_server[@]}" redis-server --bind 127.0.0.1 --port "$redis_port" \
      --save "" --appendonly no --daemonize no --dir "$tmp" \
      --logfile "$tmp/redis.log" &
    redis_pid=$!
    started+=("$redis_pid")
    for _ in $(seq 100); do
      [ "$(redis-cli -p "$redis_port" PING 2>/dev/null)" = PONG ] && return 0
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.05
    done
    grep -q "Address already in use" "$tmp/redis.log" 2>/dev/null || break
    echo "redis: port $redis_port taken, trying another (attempt $attempt)" >&2
  done
  cat "$tmp/redis.log" >&2 2>/dev/null || true
  die "redis-server did not start"
}

# stop PID: stops one process this script started, now rather than at exit.
stop() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  for i in "${!started[@]}"; do
    [ "${started[i]}" = "$pid" ] && unset 'started[i]'
  done
  started=("${started[@]}")
}

# http_probe PORT [METHOD PATH [BODY]]: one request on a fresh connection
# (bash's /dev/tcp, so no curl is needed); prints the raw response.
http_probe() {
  local port=$1 method=${2:-POST} path=${3:-/} body=${4:-}
  exec 9<>"/dev/tcp/127.0.0.1/$port" || return 1
  printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "$method" "$path" "${#body}" "$body" >&9
  cat <&9
  exec 9<&-
}

# prefill PORT ID...: steps each session through positions 1..600 (32 per
# batch request), so that its window is full and every later step evicts
# one position: the steady state the benchmarks measure.
prefill() {
  local port=$1 positions items="" n=0 reply
  shift
  positions=$(seq -s, 1 600)
  while [ $# -gt 0 ]; do
    items+="${items:+,}{\"session\":\"$1\",\"positions\":[$positions]}"
    n=$((n + 1))
    shift
    if [ $n = 32 ] || [ $# = 0 ]; then
      reply=$(http_probe "$port" POST /step "{\"steps\":[$items]}")
      [[ $reply == "HTTP/1.1 200 "* && $reply != *'"error"'* ]] ||
        die "prefill: ${reply:0:300}"
      items="" n=0
    fi
  done
}

# run_wrk NAME PID SCRIPT CONNS URL ARGS...: a warm-up, then the measured
# run of wrk with a Lua SCRIPT that prints a "RESULT k=v ..." line; PID is
# the serving process whose CPU time is measured. Sets w_rps, w_p50, w_p99
# (microseconds), w_cpu (percent of one CPU used by PID) and w_load (by wrk).
run_wrk() {
  local name=$1 pid=$2 script=$3 conns=$4 url=$5 t0 t1 c0 c1 line
  shift 5
  local log="$tmp/wrk-$name.log"
  # The warm-up's positions lie above the prefill's and below those of the
  # measured run (the first argument after "--" is where they start).
  run_tracked "${pin_load[@]}" wrk -t1 -c"$conns" -d"${BENCH_WARMUP}s" \
    --timeout 10s -s "$script" "$url" -- 1000 "$@" >"$log.warmup" 2>&1 ||
    { cat "$log.warmup" >&2; die "$name: wrk warm-up failed"; }
  check_wrk "$name (warm-up)" "$log.warmup"
  t0=$(cpu_ticks "$pid")
  children_cpu >"$tmp/c0"
  run_tracked "${pin_load[@]}" wrk -t1 -c"$conns" -d"${BENCH_SECONDS}s" \
    --timeout 10s --latency -s "$script" "$url" -- 100000000 "$@" \
    >"$log" 2>&1 || { cat "$log" >&2; die "$name: wrk failed"; }
  t1=$(cpu_ticks "$pid")
  children_cpu >"$tmp/c1"
  c0=$(cat "$tmp/c0") c1=$(cat "$tmp/c1")
  check_wrk "$name" "$log"
  line=$(grep '^RESULT ' "$log")
  w_rps=$(field rps "$line")
  w_p50=$(field p50_us "$line")
  w_p99=$(field p99_us "$line")
  w_cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v s="$(field seconds "$line")" \
    'BEGIN { printf "%.0f", 100 * (b - a) / hz / s }')
  w_load=$(awk -v a="$c0" -v b="$c1" -v s="$(field seconds "$line")" \
    'BEGIN { printf "%.0f", 100 * (b - a) / s }')
}

# A run with any answer but 200, or any socket error or timeout, is a
# failed run: say so loudly, show wrk's output, exit nonzero.
check_wrk() {
  local name=$1 log=$2 line
  local status items errors requests
  line=$(grep '^RESULT ' "$log") || { cat "$log" >&2; die "$name: wrk printed no result"; }
  status=$(field bad_status "$line") items=$(field bad_items "$line")
  errors=$(field errors "$line") requests=$(field requests "$line")
  if [ "$status" != 0 ] || [ "$items" != 0 ] || [ "$errors" != 0 ] ||
     [ "$requests" = 0 ]; then
    cat "$log" >&2
    die "$name: of $requests requests, $status were answered with a status" \
      "other than 200, $items were batch answers with an error or a missing" \
      "result, and $errors met socket errors or timeouts"
  fi
}

# field KEY "RESULT k=v ...": the value of KEY.
field() {
  tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"
}

# run_redis NAME CONNS PIPELINE KEYS: a warm-up of KEYS x 700 EVALs (each
# key then holds its full window), then the measured run sized from the
# warm-up's rate to last about BENCH_SECONDS. Every EVAL is checked to have
# run: no error replies, and the per-key counters add up to the requests
# sent. Sets r_rps, r_p50, r_p99 (microseconds), r_cpu and r_load.
run_redis() {
  local name=$1 conns=$2 pipe=$3 keys=$4 warm n t0 t1 csv sum short errs out
  local script
  # One line without the comments, so that redis-benchmark's CSV line is one.
  script=$(sed -e 's/--.*$//' "$bench_dir/redis_step.lua" | tr '\n' ' ')
  redis-cli -p "$redis_port" FLUSHALL >/dev/null
  redis-cli -p "$redis_port" CONFIG RESETSTAT >/dev/null
  # (whole pipelines of every connection, as below)
  warm=$(((keys * 700 / (conns * pipe) + 1) * conns * pipe))
  redis_bench "$name (warm-up)" "$conns" "$pipe" "$keys" "$warm" "$script"
  csv=$(cat "$tmp/redis-bench.csv")
  # Size the measured run from the warm-up's rate, at least 10,000 EVALs,
  # in whole pipelines of every connection: redis-benchmark rounds a last
  # partial pipeline up, and the count below must be exact.
  n=$(awk -v r="$(csv_col 6 "$csv")" -v s="$BENCH_SECONDS" -v q=$((conns * pipe)) \
    'BEGIN { n = r * s; if (n < 10000) n = 10000; print q * int(n / q + 1) }')
  t0=$(cpu_ticks "$redis_pid")
  children_cpu >"$tmp/c0"
  redis_bench "$name" "$conns" "$pipe" "$keys" "$n" "$script"
  csv=$(cat "$tmp/redis-bench.csv")
  t1=$(cpu_ticks "$redis_pid")
  children_cpu >"$tmp/c1"
  r_rps=$(csv_col 6 "$csv")
  r_p50=$(awk -v v="$(csv_col 3 "$csv")" 'BEGIN { printf "%.0f", v * 1000 }')
  r_p99=$(awk -v v="$(csv_col 1 "$csv")" 'BEGIN { printf "%.0f", v * 1000 }')
  r_cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v n="$n" -v r="$r_rps" \
    'BEGIN { printf "%.0f", 100 * (b - a) / hz / (n / r) }')
  r_load=$(awk -v a="$(cat "$tmp/c0")" -v b="$(cat "$tmp/c1")" -v n="$n" -v r="$r_rps" \
    'BEGIN { printf "%.0f", 100 * (b - a) / (n / r) }')
  errs=$(redis-cli -p "$redis_port" INFO stats | tr -d '\r' |
    sed -n 's/^total_error_replies://p')
  # The steps all counters add up to, and the shortest list (each should
  # be at its budget: the steady state).
  out=$(redis-cli -p "$redis_port" EVAL "local s, m = 0, nil
    for _, k in ipairs(redis.call('KEYS', '*#pos')) do
      s = s + tonumber(redis.call('GET', k))
      local n = redis.call('LLEN', string.sub(k, 1, -5))
      if m == nil or n < m then m = n end
    end
    return {s, m}" 0)
  read -r sum short <<<"${out//$'\n'/ }"
  [ "$errs" = 0 ] || die "$name: Redis answered $errs EVALs with an error"
  [ "$sum" = $((warm + n)) ] ||
    die "$name: Redis ran $sum steps, but $((warm + n)) EVALs were sent"
  [ "$short" = 512 ] ||
    echo "  (note: a Redis list holds $short positions, below the budget)" >&2
}

# redis_bench NAME CONNS PIPELINE KEYS N SCRIPT: writes redis-benchmark's
# CSV data line to $tmp/redis-bench.csv (a file, not a pipe, so that the
# shell waits for redis-benchmark itself and counts its CPU time).
redis_bench() {
  local name=$1 conns=$2 pipe=$3 keys=$4 n=$5 script=$6 log
  log="$tmp/redis-bench.log"
  run_tracked "${pin_load[@]}" redis-benchmark -h 127.0.0.1 -p "$redis_port" \
    -c "$conns" -P "$pipe" -n "$n" -r "$keys" --csv \
    EVAL "$script" 1 "s:__rand_int__" 512 >"$log" 2>&1 ||
    { cat "$log" >&2; die "$name: redis-benchmark failed"; }
  grep -v '^"test"' "$log" | grep '^"' | tail -n 1 >"$tmp/redis-bench.csv" || true
  if [ ! -s "$tmp/redis-bench.csv" ]; then
    cat "$log" >&2
    die "$name: redis-benchmark printed no result"
  fi
}

# csv_col N LINE: column N of redis-benchmark's CSV line, counted from the
# end (0 = max latency, 1 = p99, 3 = p50, 6 = req/s) because the first
# column, the command, may hold commas and quotes.
csv_col() {
  awk -F'","' -v n="$1" '{ v = $(NF - n); gsub(/"/, "", v); print v }' <<<"$2"
}

# ratio A B: A / B to two places ("-" when B is not a positive number).
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'
}

# per_cpu RATE PERCENT: RATE per CPU-second of a process that used PERCENT
# of one CPU.
per_cpu() {
  awk -v r="$1" -v c="$2" 'BEGIN { if (c > 0) printf "%.0f", r * 100 / c; else print 0 }'
}

# verdict A OP B: "met" or "NOT met" for the comparison A OP B (OP is >= or <=).
verdict() {
  awk -v a="$1" -v op="$2" -v b="$3" 'BEGIN {
    ok = (op == ">=") ? (a >= b) : (a <= b); print ok ? "met" : "NOT met" }'
}
