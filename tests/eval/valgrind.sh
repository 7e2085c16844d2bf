#!/usr/bin/env bash
# evictd-eval under valgrind memcheck (`make valgrind-eval`, part of
# `make valgrind`): a float32 [T, T] and a float16 [H, T, T] trace with every
# output, refused files and arguments, and --help. Any memory error or leak
# fails the run, with valgrind's report printed.
# Usage: valgrind.sh path/to/evictd-eval path/to/eval_gentrace
set -euo pipefail
bin=$1
gen=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/evictd-eval-vg.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$gen" "$tmp/t2.npy" 300 0 f4
"$gen" "$tmp/t3.npy" 96 4 f2
printf '\x93NUMPX\x01\x00' >"$tmp/magic.npy"
head -c 1000 "$tmp/t2.npy" >"$tmp/short.npy"

runs=0
# vg STATUS ARGS...: the run must exit STATUS with a clean valgrind report.
vg() {
  local want=$1 rc=0
  shift
  runs=$((runs + 1))
  valgrind --quiet --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "valgrind-eval: evictd-eval $* exited $rc, want $want" >&2
    cat "$tmp/err" >&2
    exit 1
  fi
}
vg 0 "$tmp/t2.npy" --budgets 2,8,32,64,299,300,1000 --sinks 0,1 --svg "$tmp/a.svg"
vg 0 "$tmp/t2.npy" --budgets 8,32 --json
vg 0 "$tmp/t3.npy" --budgets 8,16,95,96 --sinks 0,4 --json --svg "$tmp/b.svg"
vg 2 "$tmp/magic.npy"
vg 2 "$tmp/short.npy"
vg 2 "$tmp/missing.npy"
vg 2 "$tmp/t2.npy" --budgets 4 --sinks 4
vg 2 "$tmp/t2.npy" --svg /nonexistent-dir/x.svg
vg 0 --help
echo "valgrind-eval: $runs runs of evictd-eval under memcheck, no errors, no leaks"
