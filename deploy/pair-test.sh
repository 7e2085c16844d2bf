#!/usr/bin/env bash
# `make pair-test`: starts deploy/kubernetes.yaml (podman kube play) and
# deploy/compose.yaml (Debian's podman-compose) exactly as written, and for
# each: waits for both containers' probes as the file writes them, checks
# the containers' users, read-only roots and capabilities, completes a
# prompt through the engine (POST /v1/chat/completions, then POST
# /completion), gets the web UI's page (GET /) and reads evictd's /metrics
# over its socket (from the host, through the shared volume) to see the
# steps, evictions and deleted session; then streams the same completion,
# SIGKILLs evictd's process midway (frozen with SIGSTOP first, when the
# engine is asked whether it still decodes: a stream that had ended is run
# again, longer), and checks that the restart policy of
# the file brought evictd back with its state volume (the request's session
# restored, not created again) and that the stream went on to the end with
# the text of the uninterrupted run.
# Builds the evictd image and the engine image first (deploy/llama/image/
# build-image.sh; `make pair-test` makes the GGUF before). Run as root
# from the repository; every pod, container and volume is removed on exit.
# Environment: PROMPT, N (tokens to predict at first), KILL_AFTER (pieces
# streamed before the SIGKILL), PAIR (kube, compose or both: the default).
set -euo pipefail
cd "$(dirname "$0")/.."
b=${B:-build}
prompt=${PROMPT:-Licensed under the Apache License}
n=${N:-1200}
# Early: the engine decodes the tiny model at hundreds of tokens a second
# and a client reads behind it. Whether the kill landed mid-generation is
# checked (evictd is frozen first, then the engine asked): if not, the
# stream is run again, 4x as long.
kill_after=${KILL_AFTER:-10}
pair=${PAIR:-both}
fail() { echo "pair-test: FAIL $*" >&2; exit 1; }
say() { echo "pair-test: $*"; }
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }

deploy/deps.sh image pair test

# The image names as the two files write them (they must agree).
read -r engine_image evictd_image < <(/usr/bin/python3 - <<'PY'
import sys, yaml
pod = [d for d in yaml.safe_load_all(open("deploy/kubernetes.yaml"))
       if d["kind"] == "Deployment"][0]["spec"]["template"]["spec"]
k = {c["name"]: c["image"] for c in pod["containers"]}
c = {n: s["image"] for n, s in
     yaml.safe_load(open("deploy/compose.yaml"))["services"].items()}
if k != c:
    sys.exit(f"pair-test: the files name other images: {k} and {c}")
print(k["engine"], k["evictd"])
PY
)

tmp=$(mktemp -d /tmp/evictd-pair-test.XXXXXX)
# This sandbox refuses podman's default rlimits (../shared/container/
# README.md); containers.conf lowers them for every container podman
# creates here, kube play's and podman-compose's alike, without a flag in
# either file.
cat >"$tmp/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF=$tmp/containers.conf
# -p: the project name the file gives (name:), which podman-compose 1.0.3
# ignores (it would take the directory's, "deploy").
project=$(/usr/bin/python3 -c 'import yaml; print(yaml.safe_load(open("deploy/compose.yaml"))["name"])')
compose() { podman-compose -p "$project" -f deploy/compose.yaml "$@"; }
volumes=()
teardown() {
  podman kube down deploy/kubernetes.yaml >/dev/null 2>&1 || true
  compose down -v >/dev/null 2>&1 || true
  # podman-compose 1.0.3 leaves its network behind.
  podman network rm -f "${project}_default" >/dev/null 2>&1 || true
  for v in ${volumes[@]+"${volumes[@]}"}; do podman volume rm -f "$v" >/dev/null 2>&1 || true; done
}
cleanup() { teardown; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building $engine_image and $evictd_image"
# The engine's first: build-image.sh makes the Debian base images both
# builds start from when the machine has none (no registry here).
B=$b deploy/llama/image/build-image.sh "$engine_image" "$b/llama/evictd-lm.gguf" \
  >"$tmp/build-engine.log" 2>&1 || { tail -n 30 "$tmp/build-engine.log"; fail "engine image"; }
podman build --isolation=chroot --format docker -t "$evictd_image" . \
  >"$tmp/build-evictd.log" 2>&1 || { tail -n 30 "$tmp/build-evictd.log"; fail "podman build $evictd_image"; }
grep '^engine-image: built' "$tmp/build-engine.log" | sed 's/^/pair-test: /'
# The engine needs `evictd-llama serve` (issue 17, point 1).
# (output captured first: `cmd | grep -q` can fail cmd with SIGPIPE under
# pipefail when grep stops reading early)
help=$(podman run --rm --entrypoint evictd-llama "$engine_image" --help 2>&1 || true)
grep -qE '(^|[^a-z])serve([^a-z]|$)' <<<"$help" ||
  fail "$engine_image: evictd-llama has no serve command (build it from a tree with evictd-llama serve)"
podman image inspect --format '{{.Size}}' "$engine_image" |
  awk '{ printf "pair-test: engine image %.1f MB\n", $1 / 1000000 }'

metric() { # NAME FILE: the sample's value (0 when absent)
  awk -v m="$1" '$1 == m { v = $2 } END { print v + 0 }' "$2"
}
mount_of() { # CONTAINER DIR: the host side of its mount on DIR
  podman inspect --format "{{range .Mounts}}{{if eq .Destination \"$2\"}}{{.Source}}{{end}}{{end}}" "$1"
}

# The conversations the engine at $1 keeps (parked in a slot or saved in
# --cache-ram), each holding its evictd session, from its /metrics.
kept() {
  client get "$1/metrics" >"$tmp/ek" || fail "engine /metrics at $1"
  echo $(( $(metric evictd_llama_conversations_parked "$tmp/ek") +
           $(metric evictd_llama_conversations_saved "$tmp/ek") ))
}

# An uninterrupted completion of $4 tokens (the reference, in
# $tmp/ref.json; "cache_prompt": false, so nothing of it is kept), and
# what evictd counted meanwhile. $1 label, $2 engine URL, $3 evictd's
# socket.
reference() {
  local label=$1 url=$2 sock=$3 n=$4 steps victims ref_n ref_stop k
  client metrics "unix:$sock" >"$tmp/m0" || fail "$label: evictd /metrics over $sock"
  client complete "$url" "$prompt" "$n" >"$tmp/ref.json" || fail "$label: completion"
  client metrics "unix:$sock" >"$tmp/m1"
  read -r ref_n ref_stop < <(/usr/bin/python3 -c '
import json, sys; a = json.load(open(sys.argv[1]))
print(a["tokens_predicted"], a["stop_type"])' "$tmp/ref.json")
  steps=$(( $(metric evictd_steps_total "$tmp/m1") - $(metric evictd_steps_total "$tmp/m0") ))
  victims=$(( $(metric evictd_victims_total "$tmp/m1") - $(metric evictd_victims_total "$tmp/m0") ))
  [ "$ref_n" -gt 512 ] || fail "$label: only $ref_n tokens ($ref_stop): too few to evict at budget 512"
  [ "$steps" -ge "$ref_n" ] || fail "$label: evictd counted $steps steps for $ref_n tokens"
  [ "$victims" -gt 0 ] || fail "$label: evictd evicted nothing in $ref_n tokens"
  k=$(kept "$url")
  [ "$(metric evictd_sessions "$tmp/m1")" = "$k" ] ||
    fail "$label: evictd holds $(metric evictd_sessions "$tmp/m1") sessions, the engine keeps $k conversations: the request's session was not deleted"
  say "$label: $ref_n tokens ($ref_stop); evictd: $steps steps, $victims victims, session deleted"
}

# The reference's completion streamed, evictd (container $3) frozen after
# $kill_after pieces, the engine asked whether the request still decodes
# (frozen, evictd answers no step, so the engine cannot finish
# meanwhile), then SIGKILLed: the kill lands mid-generation whatever the
# machine's speed, or the client says it did not (return 1: the caller
# runs a longer stream). The restart policy brings evictd back; the stream
# must go on to the end with the reference's text.
stream_killed() {
  local label=$1 url=$2 evictd=$3 n=$4 pid cpid newpid=0 t0
  pid=$(podman inspect --format '{{.State.Pid}}' "$evictd")
  [ "$pid" -gt 0 ] || fail "$label: evictd not running"
  rm -f "$tmp/killed"
  client stream "$url" "$prompt" "$n" --kill-after "$kill_after" \
    --stop "kill -STOP $pid" \
    --kill "kill -KILL $pid && touch $tmp/killed" >"$tmp/stream.json" 2>"$tmp/stream.err" &
  cpid=$!
  t0=$(date +%s)
  until [ -e "$tmp/killed" ]; do
    kill -0 "$cpid" 2>/dev/null || break
    [ $(( $(date +%s) - t0 )) -lt 60 ] || fail "$label: no kill after 60 s"
    sleep 0.05
  done
  # The file's restart policy brings evictd back (podman runs it from the
  # container's exit, as the kubelet or dockerd would).
  t0=$(date +%s)
  while [ -e "$tmp/killed" ]; do
    newpid=$(podman inspect --format '{{.State.Pid}}' "$evictd" 2>/dev/null || echo 0)
    [ "$newpid" -gt 0 ] && [ "$newpid" != "$pid" ] && break
    [ $(( $(date +%s) - t0 )) -lt 20 ] || fail "$label: evictd was not restarted within 20 s of its SIGKILL"
    sleep 0.1
  done
  wait "$cpid" || { cat "$tmp/stream.err" >&2; fail "$label: the streamed completion"; }
  say "$label: evictd SIGKILLed (pid $pid) after $kill_after pieces, restarted by the restart policy (pid $newpid)"
  /usr/bin/python3 - "$tmp/ref.json" "$tmp/stream.json" "$label" <<'PY' || fail "$label: the stream differs from the uninterrupted run"
import json, sys
ref, got, label = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
last = got["last"]
problems = []
if got["content"] != ref["content"]:
    i = next((i for i, (a, b) in enumerate(zip(got["content"], ref["content"])) if a != b),
             min(len(got["content"]), len(ref["content"])))
    problems.append(f"text differs from byte {i}: {got['content'][i:i+40]!r} vs {ref['content'][i:i+40]!r}")
for k in ("tokens_predicted", "stop_type"):
    if last.get(k) != ref.get(k):
        problems.append(f"{k} {last.get(k)!r}, uninterrupted {ref.get(k)!r}")
if got["landed"] and got["after_kill"] < 1:
    problems.append("no piece after the kill")
for p in problems:
    print(f"pair-test: {label}: {p}", file=sys.stderr)
print(f"pair-test: {label}: stream equal to the uninterrupted run "
      f"({got['pieces']} pieces, {got['after_kill']} after the kill, "
      f"longest wait {got['gap']} s)")
sys.exit(1 if problems else 0)
PY
  /usr/bin/python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["landed"] else 1)' "$tmp/stream.json"
}

# One run against a started pair. $1 label, $2 engine container, $3 evictd
# container, $4 engine URL as the client sees it; client() runs
# deploy/pair-client.py where that URL is reachable.
exercise() {
  local label=$1 engine=$2 evictd=$3 url=$4 k
  local sock pid t0

  # The shared socket volume, reached from the host.
  [ -n "$(mount_of "$evictd" /run/evictd)" ] || fail "$label: evictd has no volume on /run/evictd"
  [ "$(mount_of "$evictd" /run/evictd)" = "$(mount_of "$engine" /run/evictd)" ] ||
    fail "$label: engine and evictd do not share the /run/evictd volume"
  [ -n "$(mount_of "$evictd" /var/lib/evictd)" ] || fail "$label: evictd has no state volume"
  sock=$(mount_of "$evictd" /run/evictd)/evictd.sock

  # Ready: the engine's /health is 200 once the model is loaded and evictd
  # answers (both started at once: this waits for both).
  t0=$(date +%s)
  until client get "$url/health" >"$tmp/health" 2>/dev/null; do
    [ $(( $(date +%s) - t0 )) -lt 90 ] || {
      podman logs --tail 20 "$engine" >&2; podman logs --tail 20 "$evictd" >&2
      fail "$label: engine /health not 200 after 90 s: $(cat "$tmp/health")"; }
    sleep 0.5
  done
  say "$label: ready in $(( $(date +%s) - t0 )) s"
  # The probes as the file writes them (podman turns the liveness probe,
  # or compose's healthcheck, into the container's health check).
  for c in "$engine" "$evictd"; do
    podman healthcheck run "$c" >/dev/null || fail "$label: health check of $c fails"
  done
  # Who runs, and with what.
  for c in "$engine" "$evictd"; do
    [ "$(podman exec "$c" id -u)" = 10001 ] || fail "$label: $c does not run as 10001"
    if podman exec "$c" sh -c ': >/probe-write' 2>/dev/null; then
      fail "$label: $c has a writable root"
    fi
    podman exec "$c" grep -q '^CapBnd:[[:space:]]*0*$' /proc/1/status ||
      fail "$label: $c keeps capabilities: $(podman exec "$c" grep CapBnd /proc/1/status)"
  done

  # A chat through OpenAI's API: the chat template's prompt, decoded; the
  # conversation is kept for its next turn (serve's default), its evictd
  # session with it, and nothing else is left.
  client chat "$url" "$prompt" 300 >"$tmp/chat.json" || fail "$label: POST /v1/chat/completions"
  /usr/bin/python3 - "$tmp/chat.json" "$label" <<'PY' || fail "$label: the chat's answer"
import json, sys
a, label = json.load(open(sys.argv[1])), sys.argv[2]
c = a["choices"][0]
assert a["object"] == "chat.completion" and c["message"]["role"] == "assistant", a
assert c["message"]["content"] and c["finish_reason"] in ("stop", "length"), a
assert a["usage"]["completion_tokens"] > 0, a
print(f"pair-test: {label}: /v1/chat/completions: {a['usage']['completion_tokens']} "
      f"tokens ({c['finish_reason']}) after a {a['usage']['prompt_tokens']}-token prompt")
PY
  # llama.cpp's web UI, which the image carries (make ui's pack).
  local page
  page=$(client page "$url") || fail "$label: no web UI at $url/"
  say "$label: the web UI at /: $page"
  client metrics "unix:$sock" >"$tmp/mc" || fail "$label: evictd /metrics over $sock"
  k=$(kept "$url")
  [ "$k" -ge 1 ] || fail "$label: the engine kept no conversation after the chat"
  [ "$(metric evictd_sessions "$tmp/mc")" = "$k" ] ||
    fail "$label: evictd holds $(metric evictd_sessions "$tmp/mc") sessions, the engine keeps $k conversations"
  say "$label: the chat's conversation kept, its evictd session with it"

  # An uninterrupted completion, then the same streamed with evictd killed
  # midway; a kill that came after the engine had finished (a loaded
  # machine, a fast one) is seen and the pair is run again, 4x as long.
  local try n=$n
  for try in 1 2 3; do
    reference "$label" "$url" "$sock" "$n"
    stream_killed "$label" "$url" "$evictd" "$n" && break
    [ "$try" -lt 3 ] || fail "$label: $try streams of up to $n tokens ended before evictd was killed"
    say "$label: the stream of $n tokens ended before evictd was stopped: again with $(( n * 4 ))"
    n=$(( n * 4 ))
  done
  # The restarted evictd loaded the request's session from its state
  # volume, went on stepping it, and deleted it at the end: it created none.
  logs=$(podman logs "$evictd" 2>&1)
  grep -Eq 'state: [1-9][0-9]* sessions? from ' <<<"$logs" ||
    { podman logs --tail 20 "$evictd" >&2; fail "$label: the restarted evictd loaded no session from its state volume"; }
  client metrics "unix:$sock" >"$tmp/m2" || fail "$label: evictd /metrics after the restart"
  [ "$(metric evictd_sessions_created_total "$tmp/m2")" = 0 ] ||
    fail "$label: the restarted evictd created a session (the restored one was not used)"
  [ "$(metric evictd_sessions_deleted_total "$tmp/m2")" = 1 ] ||
    fail "$label: the restarted evictd deleted $(metric evictd_sessions_deleted_total "$tmp/m2") sessions, want 1"
  client get "$url/metrics" >"$tmp/em" || fail "$label: engine /metrics"
  [ "$(metric evictd_llama_requests_total "$tmp/em")" -ge 2 ] ||
    fail "$label: engine counted $(metric evictd_llama_requests_total "$tmp/em") requests"
  say "$label: the restarted evictd created no session and deleted the restored one;" \
      "the engine waited $(metric evictd_llama_evictd_seconds_total "$tmp/em") s on evictd in all"
}

teardown
if [ "$pair" = both ] || [ "$pair" = kube ]; then
  say "kube: podman kube play deploy/kubernetes.yaml"
  t=$(date +%s)
  podman kube play deploy/kubernetes.yaml >"$tmp/play.log" 2>&1 ||
    { cat "$tmp/play.log"; fail "podman kube play"; }
  pod=$(podman pod ps --filter label=app.kubernetes.io/name=evictd-llama --format '{{.Name}}' | head -n 1)
  [ -n "$pod" ] || fail "kube: no pod"
  for v in $(podman pod inspect --format '{{range .Containers}}{{.Name}} {{end}}' "$pod"); do
    read -r -a more < <(podman inspect --format '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}' "$v")
    volumes+=(${more[@]+"${more[@]}"})
  done
  # The engine's port is the pod's own (no hostPort, as in a cluster): the
  # client joins the pod's network namespace, where it is 127.0.0.1:8080.
  netpid=$(podman inspect --format '{{.State.Pid}}' "$(podman pod inspect --format '{{.InfraContainerID}}' "$pod")")
  client() { nsenter --net="/proc/$netpid/ns/net" /usr/bin/python3 deploy/pair-client.py "$@"; }
  exercise kube "$pod-engine" "$pod-evictd" http://127.0.0.1:8080
  teardown
  say "kube: ok in $(( $(date +%s) - t )) s"
fi
if [ "$pair" = both ] || [ "$pair" = compose ]; then
  say "compose: podman-compose -f deploy/compose.yaml up -d"
  t=$(date +%s)
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  EVICTD_LLAMA_PORT=$port compose up -d --no-build >"$tmp/up.log" 2>&1 ||
    { cat "$tmp/up.log"; fail "podman-compose up"; }
  # The published port, on the host's loopback.
  client() { /usr/bin/python3 deploy/pair-client.py "$@"; }
  service() {
    podman ps -a --filter "label=com.docker.compose.project=$project" \
      --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | head -n 1
  }
  exercise compose "$(service engine)" "$(service evictd)" "http://127.0.0.1:$port"
  teardown
  say "compose: ok in $(( $(date +%s) - t )) s"
fi
say "ok in $(elapsed)"
