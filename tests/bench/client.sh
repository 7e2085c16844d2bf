#!/usr/bin/env bash
# `make bench-client` (and part of `make bench`): the C client's round trip
# per decode iteration beside the Python client's (deploy/clients/python,
# EvictdClient), against one daemon started here: 1 sequence (one step
# request per iteration) and 256 sequences (one batch request of 256
# steps), every window of 512 full so that each step evicts, beside the
# floor: the same requests over a plain socket, written by hand, answers
# read whole and not parsed. Rounds alternate the three; each figure is
# the median of the rounds.
# Then the asynchronous batch beside the synchronous one, with W us of
# other work per iteration, and what parsing one 256-item batch answer
# costs with jansson and with the client's own reader.
# Usage: client.sh path/to/evictd path/to/bench_client
#   (CLIENT_ROUNDS, default 5; CLIENT_SECONDS per round, default 1)
set -euo pipefail
bin=${1:?usage: client.sh path/to/evictd path/to/bench_client}
cbench=${2:?usage: client.sh path/to/evictd path/to/bench_client}
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
rounds=${CLIENT_ROUNDS:-5}
seconds=${CLIENT_SECONDS:-1}

echo "clients: round trip per decode iteration, C client" \
  "(libevictd-client, libcurl) and Python client (evictd_client.py," \
  "$(python3 -c 'import sys; print("Python %d.%d" % sys.version_info[:2])')), one daemon," \
  "budget 512, medians of $rounds rounds of ${seconds}s; $pinning"

start_evictd "$bin" --budget 512
url="http://127.0.0.1:$evictd_port"
# run NAME ROUND CMD...: one round; appends its us/iteration to $tmp/NAME
# (and the C client's allocations per iteration to $tmp/NAME.allocs).
run() {
  local name=$1 round=$2 line
  shift 2
  line=$(run_tracked "${pin_load[@]}" "$@" --url "$url" --reps 1 \
    --seconds "$seconds" --prefix "$name-$round-" | grep '^rep ') ||
    die "$name: the client failed"
  field us_per_iter "$line" >>"$tmp/$name"
  field allocs_per_iter "$line" >>"$tmp/$name.allocs"
}
for ((r = 1; r <= rounds; r++)); do
  run c1 "$r" "$cbench" --sessions 1
  run py1 "$r" python3 "$bench_dir/bench_client.py" --sessions 1
  run raw1 "$r" "$cbench" --sessions 1 --raw
  run c256 "$r" "$cbench" --sessions 256
  run py256 "$r" python3 "$bench_dir/bench_client.py" --sessions 256
  run raw256 "$r" "$cbench" --sessions 256 --raw
done
median() {
  sort -g "$1" | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}
c1=$(median "$tmp/c1") py1=$(median "$tmp/py1")
c256=$(median "$tmp/c256") py256=$(median "$tmp/py256")
raw1=$(median "$tmp/raw1") raw256=$(median "$tmp/raw256")
printf '  %-34s %9s %9s %9s %10s %9s\n' "us per iteration" "C client" \
  "Python" "Python/C" "raw socket" "C/raw"
printf '  %-34s %9.1f %9.1f %9s %10.1f %9s\n' "1 sequence (one step)" "$c1" \
  "$py1" "$(ratio "$py1" "$c1")" "$raw1" "$(ratio "$c1" "$raw1")"
printf '  %-34s %9.1f %9.1f %9s %10.1f %9s\n' \
  "256 sequences (one batch of 256)" "$c256" "$py256" \
  "$(ratio "$py256" "$c256")" "$raw256" "$(ratio "$c256" "$raw256")"
echo "  C client: $(median "$tmp/c1.allocs") and $(median "$tmp/c256.allocs")" \
  "allocations per iteration (libcurl's: the client's own buffers only grow)"
# The asynchronous batch: W us of other work per iteration (an engine's
# llama_decode), after a synchronous batch's answer, or between
# evd_client_batch_send and evd_client_batch_recv; the round trip hides
# behind the work as far as the daemon has a core of its own.
# (CLIENT_WORK: the W values, default "0 100 200".)
for ((r = 1; r <= rounds; r++)); do
  for w in ${CLIENT_WORK:-0 100 200}; do
    for mode in sync async; do
      line=$(run_tracked "${pin_load[@]}" "$cbench" --url "$url" --reps 1 \
        --seconds "$seconds" --prefix "w$mode-$w-$r-" --sessions 256 \
        --work "$w" $([ $mode = async ] && echo --async) | grep '^rep ') ||
        die "$mode W=$w: the client failed"
      field us_per_iter "$line" >>"$tmp/$mode$w"
      field recv_us "$line" >>"$tmp/$mode$w.recv"
      field send_us "$line" >>"$tmp/$mode$w.send"
    done
  done
done
echo "  asynchronous batch of 256 (evd_client_batch_send, then W us of other" \
  "work, then evd_client_batch_recv) against evd_client_batch then W us:"
printf '  %-10s %14s %15s %9s %9s %14s\n' "work W us" "sync us/iter" \
  "async us/iter" "send us" "recv us" "saved us/iter"
for w in ${CLIENT_WORK:-0 100 200}; do
  s=$(median "$tmp/sync$w") a=$(median "$tmp/async$w")
  printf '  %-10s %14.1f %15.1f %9.1f %9.1f %14.1f\n' "$w" "$s" "$a" \
    "$(median "$tmp/async$w.send")" "$(median "$tmp/async$w.recv")" \
    "$(awk -v s="$s" -v a="$a" 'BEGIN { print s - a }')"
done
line=$("$cbench" --parse)
echo "  parsing one 256-item batch answer ($(field bytes "$line") bytes):" \
  "jansson $(field jansson_us "$line") us, the client's parser" \
  "$(field client_us "$line") us ($(ratio "$(field jansson_us "$line")" \
  "$(field client_us "$line")"))"
