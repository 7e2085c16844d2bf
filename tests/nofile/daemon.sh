#!/usr/bin/env bash
# The daemon under a low descriptor limit (issue 32), what test-low-nofile
# runs the harnesses in: with its defaults at nofile 1024:1024 it warns
# before it says where it listens, serves, and stops cleanly; a soft limit
# below what --max-conns needs is lifted, up to the hard one, silently.
# Usage: daemon.sh path/to/evictd
set -euo pipefail
bin=${1:?usage: daemon.sh path/to/evictd}
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "low-nofile: $*"; sed 's/^/  | /' "$tmp/log"; exit 1; }

# run SOFT:HARD FLAG...: the daemon under that limit (prlimit execs it, so
# $! is its pid) until its address line; asks /healthz, then SIGTERM, and
# wants exit status 0. Its log stays in $tmp/log.
run() {
  local limit=$1 addr='' rc=0
  shift
  prlimit --nofile="$limit" "$bin" --listen 127.0.0.1:0 "$@" 2>"$tmp/log" &
  pid=$!
  for _ in $(seq 200); do
    addr=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$tmp/log")
    [ -n "$addr" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$addr" ] || fail "nofile $limit $*: the daemon did not start"
  "$bin" --probe "http://$addr/healthz" >/dev/null ||
    fail "nofile $limit $*: /healthz did not answer"
  kill -TERM "$pid"
  wait "$pid" || rc=$?
  pid=
  [ "$rc" -eq 0 ] || fail "nofile $limit $*: exit status $rc after SIGTERM"
}

# The defaults (--max-conns 4096 wants 4160) under 1024: the warning is the
# first line, the address the second.
run 1024:1024
sed -n 1p "$tmp/log" | grep -q ' warn descriptor limit 1024: serving at most 960 connections$' ||
  fail "nofile 1024:1024: the first line is not the descriptor warning"
sed -n 2p "$tmp/log" | grep -q ' listening on ' ||
  fail "nofile 1024:1024: the second line is not the address"

# --max-conns 960 wants 1024: a soft limit of 256 is lifted to it, no warning.
run 256:1024 --max-conns 960
! grep -q 'descriptor limit' "$tmp/log" ||
  fail "nofile 256:1024 --max-conns 960: warned though the hard limit is enough"

echo "low-nofile: at nofile 1024 the daemon warns first, then listens and serves; a low soft limit is lifted silently"
