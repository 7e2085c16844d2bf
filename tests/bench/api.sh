#!/usr/bin/env bash
# Section 5 of `make bench`: the API's own cost per request without HTTP
# (bench_api): a decode step (plain, and carrying expect_newest), a batch
# of 8 decode steps, a speculative iteration (commit + 4 drafts) and a fork
# at budget 512, in
# nanoseconds (medians) and in instructions under callgrind, which a busy
# machine does not disturb. API_CALLGRIND_ONLY=1 skips the timed rounds.
# Usage: api.sh path/to/bench_api   (API_N: requests per round)
set -euo pipefail
bin=${1:-build/bench_api}
n=${API_N:-200000}
[ -n "${API_CALLGRIND_ONLY:-}" ] || "$bin" --n "$n"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# count VARIANT N REQUESTS FUNCTION: runs VARIANT with --n N, which makes
# REQUESTS requests inside FUNCTION (forks are a tenth of N, batches an
# eighth), and prints the instructions per request spent there.
count() {
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
    --toggle-collect="$4" "$bin" --only "$1" --n "$2" \
    >/dev/null 2>"$tmp/cg.log" || { cat "$tmp/cg.log" >&2; exit 1; }
  awk -v n="$3" '/^(summary|totals):/ {printf "%.0f", $2 / n; exit}' \
    "$tmp/cg.out"
}
k=20000
step=$(count step "$k" "$k" step_loop)
expect=$(count expect "$k" "$k" expect_loop)
batch=$(count batch "$k" "$((k / 8))" batch_loop)
spec=$(count spec "$k" "$k" spec_loop)
fork=$(count fork "$((10 * k))" "$k" fork_loop)
echo "api: instructions per request (callgrind, the request's formatting" \
  "included)"
printf '  %-26s %9s  %6s\n' "decode step {\"pos\":P}" "$step" "1.00x"
printf '  %-26s %9s  %6s\n' "step + expect_newest" "$expect" \
  "$(awk -v a="$expect" -v b="$step" 'BEGIN { printf "%.2fx", a / b }')"
printf '  %-26s %9s  %6s\n' "batch of 8 decode steps" "$batch" \
  "$(awk -v a="$batch" -v b="$step" 'BEGIN { printf "%.2fx", a / b }')"
printf '  %-26s %9s  %6s\n' "commit + 4 drafts" "$spec" \
  "$(awk -v a="$spec" -v b="$step" 'BEGIN { printf "%.2fx", a / b }')"
printf '  %-26s %9s  %6s\n' "fork (budget 512)" "$fork" \
  "$(awk -v a="$fork" -v b="$step" 'BEGIN { printf "%.2fx", a / b }')"
