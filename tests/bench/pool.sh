#!/usr/bin/env bash
# `make bench-pool` (and part of `make bench`): a pool of 3 instances beside
# one instance, the same batches: every iteration steps every session once,
# one pool batch per iteration. The C client's evd_client_pool (3 parts sent
# at once: the caller's and 2 worker threads'; with one instance a plain
# batch), then the Python client's EvictdPool (tests/bench/bench_pool.py).
# Session-steps/s, each point POOL_SECONDS long (default 2). Nothing is
# pinned: the instances share the machine's cores with the client, so on a
# 2-core machine a pool cannot scale much.
# Usage: pool.sh path/to/evictd path/to/pool_probe   (POOL_SECONDS,
# POOL_SIZES: batch sizes, default "64 256")
set -euo pipefail
bin=${1:?usage: pool.sh path/to/evictd path/to/pool_probe}
probe=${2:?usage: pool.sh path/to/evictd path/to/pool_probe}
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
seconds=${POOL_SECONDS:-2}
sizes=${POOL_SIZES:-64 256}

# start_one NAME: an evictd of its own log; appends its URL to urls.
urls=()
start_one() {
  local log="$tmp/$1.log" addr="" pid
  "$bin" --listen 127.0.0.1:0 --budget 64 2>"$log" &
  pid=$!
  started+=("$pid")
  for _ in $(seq 200); do
    addr=$(sed -n '/listening on /{s/.*listening on \([^ ]*\).*/\1/p;q}' "$log")
    [ -n "$addr" ] && break
    sleep 0.05
  done
  [ -n "$addr" ] || { cat "$log" >&2; die "evictd $1 did not start"; }
  urls+=("http://$addr")
}
for i in 0 1 2 3; do start_one "evictd$i"; done
one=("${urls[0]}") three=("${urls[@]:1:3}")

echo "pool: session-steps/s, one pool batch per iteration, budget 64," \
  "${seconds}s per point, $(nproc) CPUs, not pinned"
printf '  %-30s %14s %14s %10s\n' "client, sessions per batch" "1 instance" \
  "3-instance pool" "pool/one"
# row LABEL CMD...: CMD run against one instance, then the three.
row() {
  local label=$1 a b
  shift
  a=$("$@" "${one[@]}" | awk '{ print $2 }')
  b=$("$@" "${three[@]}" | awk '{ print $2 }')
  printf '  %-30s %14.0f %14.0f %10s\n' "$label" "$a" "$b" "$(ratio "$b" "$a")"
}
for n in $sizes; do
  row "C (evd_client_pool), $n" "$probe" bench "$n" "$seconds"
  row "Python (EvictdPool), $n" python3 "$bench_dir/bench_pool.py" "$n" "$seconds"
done
