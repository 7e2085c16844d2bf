#!/usr/bin/env bash
# `make trace`: dumps the attention of deploy/model's transformer over held-out
# text (dump.py) for T = 4096 and T = 1024, and replays the window and
# streaming-llm (sinks 4) over it with evictd-eval, head-averaged and per
# layer-head. Tables, JSON and traces go to OUT (build/trace), the SVG of the
# T = 4096 head-averaged trace to deploy/trace/retained-attention.svg.
# Usage: run.sh path/to/evictd-eval [OUT]
set -euo pipefail
eval_bin=$(realpath "$1")
out=${2:-build/trace}
here=$(dirname "$0")
budgets=32,64,128,256,512,1024
svg=$here/retained-attention.svg

for T in 4096 1024; do
  dir=$out/T$T
  /usr/bin/python3 "$here/dump.py" --T "$T" --out "$dir"
  for kind in mean heads; do
    "$eval_bin" "$dir/attn-$kind.npy" --budgets "$budgets" --sinks 0,4 \
      > "$dir/$kind.txt"
    "$eval_bin" "$dir/attn-$kind.npy" --budgets "$budgets" --sinks 0,4 \
      --json > "$dir/$kind.json"
  done
done
# The SVG names the trace by its file name only, so it does not depend on
# where the build directory is.
"$eval_bin" "$out/T4096/attn-mean.npy" --budgets "$budgets" --sinks 0,4 \
  --svg "$svg" > /dev/null

echo
for T in 4096 1024; do
  for kind in mean heads; do
    cat "$out/T$T/$kind.txt"
  done
done
echo
echo "trace: tables and traces in $out/T4096 and $out/T1024 (*.txt, *.json," \
  "sinks.json), SVG $svg"
