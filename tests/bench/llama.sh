#!/usr/bin/env bash
# evictd's share of a llama.cpp decode iteration (make bench-llama, part of
# make bench when llama.cpp is at hand): evictd-llama decodes with the tiny
# model of deploy/model and with a random-weight model of about 100M
# parameters in the same architecture, at 1 and 16 concurrent sequences,
# against a real daemon, and reports per iteration the median time in all,
# in evictd's round trip (a step, or one batch for 16 sequences), in
# llama_decode and in removing the victims from llama.cpp's cache, and
# evictd's share of the iterations' time. Each line is the median of
# BENCH_RUNS runs (default 3) of one configuration. Then what --positions
# cache (streaming-llm's positions) costs against original positions, at
# budget 128 and 1024 with 4 sinks, one sequence, every iteration evicting
# (the prompt is longer than the budget): llama.cpp re-rotates the whole
# cache's keys at each llama_decode after a llama_memory_seq_add.
#
#   tests/bench/llama.sh EVICTD EVICTD_LLAMA MODELS_DIR
set -euo pipefail
evictd=${1:?usage: llama.sh EVICTD EVICTD_LLAMA MODELS_DIR}
engine=${2:?}
models=${3:?}
# shellcheck source=tests/bench/lib.sh
source "$(dirname "$0")/lib.sh"
runs=${BENCH_RUNS:-3}

start_evictd "$evictd" --max-sessions 100000
url="http://127.0.0.1:$evictd_port"
prompt=$(head -c 64 /usr/share/common-licenses/Apache-2.0)

echo "== evictd's share of a llama.cpp decode iteration ($pinning)"
echo "   per iteration, medians of $runs runs; budget 128, 64-byte prompt"
printf '%-26s %6s %12s %12s %12s %10s %9s\n' model sequences "iteration us" \
  "evictd us" "decode us" "remove us" "evictd %"

# One configuration: model file, sequences, tokens per sequence, label,
# then any further evictd-llama arguments (budget 128 unless given).
measure() {
  local model=$1 seqs=$2 n=$3 label=$4 i line
  local extra=("${@:5}")
  local tot=() evd=() dec=() rem=() share=()
  for ((i = 0; i < runs; i++)); do
    local args=(generate -m "$model" --evictd "$url" --budget 128
                -n "$n" -p "$prompt" --stats --session "bench-$seqs-$i-$$"
                "${extra[@]}")
    [ "$seqs" -gt 1 ] && args+=(--parallel "$seqs" --temp 0.8 --seed "$i")
    line=$("${pin_load[@]}" "$engine" "${args[@]}" 2>&1 >/dev/null |
           grep 'decode iterations') || die "evictd-llama failed on $model"
    # "... median A us in all, B us evictd, C us llama_decode, D us
    # removing; evictd E% ..."
    read -r a b c d e < <(sed -E 's/.*median ([0-9.]+) us in all, ([0-9.]+) us evictd, ([0-9.]+) us llama_decode, ([0-9.]+) us removing; evictd ([0-9.]+)%.*/\1 \2 \3 \4 \5/' <<<"$line")
    tot+=("$a") evd+=("$b") dec+=("$c") rem+=("$d") share+=("$e")
  done
  med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
  printf '%-26s %6s %12.1f %12.1f %12.1f %10.1f %8.2f%%\n' "$label" "$seqs" \
    "$(med "${tot[@]}")" "$(med "${evd[@]}")" "$(med "${dec[@]}")" \
    "$(med "${rem[@]}")" "$(med "${share[@]}")"
}

measure "$models/evictd-lm.gguf" 1 400 "tiny (0.8M parameters)"
measure "$models/evictd-lm.gguf" 16 200 "tiny (0.8M parameters)"
measure "$models/random-100M.gguf" 1 40 "random ~100M parameters"
measure "$models/random-100M.gguf" 16 20 "random ~100M parameters"

echo
echo "== what cache positions cost (--positions cache against original)"
echo "   one sequence, sinks 4, lookahead 64, a prompt longer than the budget"
printf '%-26s %6s %12s %12s %12s %10s %9s\n' "model, budget, positions" \
  sequences "iteration us" "evictd us" "decode us" "remove us" "evictd %"
for budget in 128 1024; do
  prompt=$(head -c $((budget + 76)) /usr/share/common-licenses/Apache-2.0)
  for pos in original cache; do
    measure "$models/evictd-lm.gguf" 1 300 "tiny $budget $pos" \
      --budget "$budget" --sinks 4 --lookahead 64 --positions "$pos"
  done
  for pos in original cache; do
    measure "$models/random-100M.gguf" 1 30 "100M $budget $pos" \
      --budget "$budget" --sinks 4 --lookahead 64 --positions "$pos"
  done
done
