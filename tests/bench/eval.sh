#!/usr/bin/env bash
# evictd-eval benchmark (`make bench-eval`, part of `make bench`): wall time
# and peak RSS of a retained-attention run over synthetic T = 4096 traces
# (recency-heavy attention with a sink column: eval_gentrace), [T, T]
# float32 and [8, T, T] float16, beside the file size and `cat FILE >
# /dev/null`, the floor of reading it. Page cache warm (the file was just
# written and is read once before timing); medians of EVAL_RUNS runs.
# Usage: eval.sh path/to/evictd-eval path/to/eval_gentrace path/to/eval_runstat
set -euo pipefail
bin=$(realpath "$1")
gen=$2
runstat=$3
T=${EVAL_T:-4096}
runs=${EVAL_RUNS:-5}
budgets=32,64,128,256,512,1024
tmp=$(mktemp -d "${TMPDIR:-/tmp}/evictd-eval-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# measure CMD...: "median-seconds peak-RSS-KiB" over $runs runs.
measure() { "$runstat" "$runs" "$@"; }

echo "evictd-eval: T = $T traces, budgets $budgets, window and sinks 4;"
echo "  medians of $runs runs, page cache warm ($(nproc) CPUs)"
printf '  %-22s %9s %8s %8s %9s %10s %12s\n' trace "file MiB" "cat s" \
  "eval s" "eval/cat" "eval MiB/s" "peak RSS KiB"
for spec in "0 f4" "8 f2"; do
  read -r H dt <<<"$spec"
  f="$tmp/trace-$H-$dt.npy"
  "$gen" "$f" "$T" "$H" "$dt"
  size=$(stat -c %s "$f")
  cat "$f" >/dev/null
  read -r cat_s _ < <(measure sh -c 'cat "$1" >/dev/null' sh "$f")
  read -r eval_s rss < <(measure "$bin" "$f" --budgets "$budgets" --sinks 0,4)
  if [ "$H" = 0 ]; then shape="[$T, $T] <$dt"; else shape="[$H, $T, $T] <$dt"; fi
  awk -v s="$shape" -v b="$size" -v c="$cat_s" -v e="$eval_s" -v r="$rss" 'BEGIN {
    printf "  %-22s %9.1f %8.3f %8.3f %8.1fx %10.0f %12d\n", s, b / 1048576,
      c, e, (c > 0 ? e / c : 0), b / 1048576 / e, r }'
done
read -r _ floor < <(measure "$bin" --help)
echo "  peak RSS of evictd-eval --help, the process floor: $floor KiB"
echo "  retained mass on the [8, $T, $T] trace:"
(cd "$tmp" && "$bin" trace-8-f2.npy --budgets "$budgets" --sinks 0,4) |
  sed 's/^/    /'
