#!/usr/bin/env bash
# Runs the HTTP test program, then the persistence tests (restart and
# damaged files, tests/durability), with every daemon they start under
# valgrind memcheck, and reports any memory error or definite leak in any of
# them. The tests start whatever $EVICTD_BIN (or their argument) names, so
# that is a two-line wrapper that execs valgrind on the real binary; each
# daemon writes its own valgrind log. A daemon with an error exits 99,
# which fails the test that started it as well.
# Usage: run.sh path/to/evictd path/to/test_http WORKDIR
set -euo pipefail
bin=$(realpath "${1:?usage: run.sh path/to/evictd path/to/test_http WORKDIR}")
tests=$(realpath "${2:?usage: run.sh path/to/evictd path/to/test_http WORKDIR}")
work=${3:?usage: run.sh path/to/evictd path/to/test_http WORKDIR}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work/logs"
work=$(realpath "$work")
cat >"$work/evictd" <<WRAP
#!/bin/sh
exec valgrind --leak-check=full --errors-for-leak-kinds=definite \\
  --error-exitcode=99 --child-silent-after-fork=yes \\
  --log-file="$work/logs/evictd.%p.log" "$bin" "\$@"
WRAP
chmod +x "$work/evictd"

echo "valgrind: $(valgrind --version), memcheck --leak-check=full," \
  "errors and definite leaks fail; logs in $work/logs"
rc=0 failed=()
# Start-up under valgrind takes a second or two: the harness waits longer
# (EVICTD_TEST_SLOW), and so do Check's per-test deadlines.
EVICTD_BIN="$work/evictd" EVICTD_TEST_SLOW=5 CK_TIMEOUT_MULTIPLIER=5 \
  "$tests" || { rc=1; failed+=(test_http); }
durability=$(dirname "$0")/../durability
for t in restart_test.py files_test.py; do
  echo "== $t under valgrind"
  "$durability/$t" "$work/evictd" || { rc=1; failed+=("$t"); }
done

runs=0 bad=0 errors=0 leaked=0 killed=0
for log in "$work"/logs/evictd.*.log; do
  [ -e "$log" ] || continue
  runs=$((runs + 1))
  e=$(sed -n 's/.*ERROR SUMMARY: \([0-9,]*\) errors.*/\1/p' "$log" | tr -d , | tail -n 1)
  l=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$log" | tr -d , | tail -n 1)
  if [ -z "$e" ]; then
    # No summary: a test killed the daemon (SIGKILL, as the crash and
    # torn-file tests do) before valgrind could write one.
    killed=$((killed + 1))
    continue
  fi
  errors=$((errors + e))
  leaked=$((leaked + ${l:-0}))
  if [ "$e" != 0 ] || [ "${l:-0}" != 0 ]; then
    bad=$((bad + 1))
    echo "---- ${log##*/}: $e errors, ${l:-0} bytes definitely lost"
    # The command line, then each error with its stack.
    grep -m1 'Command:' "$log" || true
    sed -n '/^==[0-9]*== [A-Z].*\(Invalid\|uninitialised\|definitely lost\|Mismatched\|overlap\|Syscall param\)/,/^==[0-9]*== $/p' "$log" | head -n 80
  fi
done
echo "valgrind: $runs daemon runs ($killed of them killed by the tests, so" \
  "without a summary), $errors errors, $leaked bytes definitely" \
  "lost in $bad of them; tests $([ $rc = 0 ] && echo passed || echo "FAILED: ${failed[*]}")"
[ "$runs" -gt 0 ] || { echo "no daemon ran under valgrind" >&2; exit 1; }
[ "$bad" = 0 ] && [ "$rc" = 0 ]
