#!/usr/bin/env bash
# Core benchmark: wall clock of the ring against the naive window (medians,
# interleaved rounds), then instructions per step+evict under callgrind,
# which counts instructions rather than seconds and so is stable on a busy
# machine. Usage: core.sh [path/to/bench_window]
set -euo pipefail
bin=${1:-build/bench_window}
steps=${STEPS:-10000000}
naive_steps=${NAIVE_STEPS:-1000000}
"$bin" --steps "$steps"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# count VARIANT STEPS FUNCTION...: instructions executed inside FUNCTIONs
count() {
  local variant=$1 n=$2 toggles=()
  shift 2
  for f in "$@"; do toggles+=("--toggle-collect=$f"); done
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "${toggles[@]}" \
    "$bin" --only "$variant" --steps "$n" --rounds 1 >/dev/null 2>"$tmp/cg.log" \
    || { cat "$tmp/cg.log" >&2; exit 1; }
  awk -v n="$n" '/^(summary|totals):/ {printf "%.1f", $2 / n; exit}' "$tmp/cg.out"
}
sep_fn=$(count ring "$steps" evd_window_step evd_window_evict)
sep_loop=$(count ring "$steps" ring_loop)
adv_fn=$(count advance "$steps" evd_window_advance)
adv_loop=$(count advance "$steps" advance_loop)
st_fn=$(count steps "$steps" evd_window_steps)
st_loop=$(count steps "$steps" steps_loop)
naive_loop=$(count naive "$naive_steps" naive_loop)

echo "core: instructions per step+evict at budget 512 (callgrind; policy" \
  "functions alone, and the whole benchmark loop around them)"
printf '  %-26s %8s %8s\n' "" "policy" "loop"
printf '  %-26s %8s %8s\n' "ring: step() + evict()" "$sep_fn" "$sep_loop"
printf '  %-26s %8s %8s\n' "ring: advance() (fused)" "$adv_fn" "$adv_loop"
printf '  %-26s %8s %8s\n' "ring: steps(), 1 position" "$st_fn" "$st_loop"
printf '  %-26s %8s %8s\n' "naive shifting array" "-" "$naive_loop"
awk -v a="$adv_loop" -v s="$sep_loop" -v n="$naive_loop" 'BEGIN {
  printf "  ratio naive/step+evict: %.1fx   naive/advance: %.1fx (whole loops)\n", n / s, n / a }'
