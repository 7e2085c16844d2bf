#!/usr/bin/env bash
# Starts the daemon, drives a few requests, and checks GET /metrics: the
# exposition passes `promtool check metrics` and the counters say what the
# requests did. Usage: lint.sh path/to/evictd
set -euo pipefail
bin=${1:?usage: lint.sh path/to/evictd}
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

"$bin" --listen 127.0.0.1:0 2>"$tmp/log" &
pid=$!
for _ in $(seq 100); do
  addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$tmp/log")
  [ -n "$addr" ] && break
  sleep 0.05
done
[ -n "$addr" ] || { echo "metrics: daemon did not start"; cat "$tmp/log"; exit 1; }
url="http://$addr"
c() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

[ "$(c -XPUT "$url/session/m1" -d '{"budget":2,"lookahead":3}')" = 201 ]
[ "$(c -XPOST "$url/session/m1/step" -d '{"positions":[1,2,3]}')" = 200 ]
[ "$(c -XPOST "$url/session/m1/step" -d '{"positions":[1,2,3]}')" = 200 ] # replay
[ "$(c -XPOST "$url/session/m1/step" -d '{"pos":2}')" = 409 ]
[ "$(c -XPOST "$url/session/m1/evict" -d '{"budget":1}')" = 200 ]
[ "$(c -XPOST "$url/session/m1/step" -d '{"positions":[4,5,6],"tentative":true}')" = 200 ]
[ "$(c -XPOST "$url/session/m1/fork" -d '{"into":"m2"}')" = 201 ]
[ "$(c -XPOST "$url/session/m1/commit" -d '{"newest":4}')" = 200 ] # drops 5, 6
[ "$(c -XPOST "$url/session/m1/truncate" -d '{"from":4}')" = 200 ] # removes 4
[ "$(c -XPOST "$url/session/m2/truncate" -d '{"from":9}')" = 200 ] # nothing
[ "$(c -XDELETE "$url/session/m1")" = 204 ]
[ "$(c -XDELETE "$url/session/m2")" = 204 ]
[ "$(c "$url/nowhere")" = 404 ]
curl -s "$url/metrics" >"$tmp/metrics"

promtool check metrics <"$tmp/metrics"
expect() { # expect 'series' value
  got=$(awk -v s="$1" '$1 == s {print $2}' "$tmp/metrics")
  [ "$got" = "$2" ] || { echo "metrics: $1 is '$got', expected $2"; exit 1; }
}
expect 'evictd_steps_total' 6         # 3 positions, then 3 drafts
expect 'evictd_victims_total' 3      # 0,1 by the steps, 2 by the evict
expect 'evictd_replays_total' 1
expect 'evictd_sessions_created_total' 2 # m1, and m2 by the fork
expect 'evictd_sessions_deleted_total' 2
expect 'evictd_sessions' 0
expect 'evictd_forks_total' 1
expect 'evictd_commits_total' 1
expect 'evictd_dropped_positions_total' 2
expect 'evictd_truncates_total' 2
expect 'evictd_removed_positions_total' 1
expect 'evictd_requests_total{route="step",code="200"}' 3
expect 'evictd_requests_total{route="step",code="409"}' 1
expect 'evictd_requests_total{route="fork",code="201"}' 1
expect 'evictd_requests_total{route="commit",code="200"}' 1
expect 'evictd_requests_total{route="truncate",code="200"}' 2
expect 'evictd_requests_total{route="none",code="404"}' 1
expect 'evictd_request_duration_seconds_count{route="step"}' 4
grep -q '^process_resident_memory_bytes [1-9]' "$tmp/metrics" ||
  { echo "metrics: no resident memory figure"; exit 1; }
echo "metrics: promtool clean, counters match"
