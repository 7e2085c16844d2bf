#!/usr/bin/env bash
# `make image-test`: builds the container image from the top-level Dockerfile
# with podman (see ../shared/container/README.md), runs it, replays a test
# vector over HTTP, checks the built-in health probe, the image metadata and
# size, and that SIGTERM stops it cleanly. Run as root from the repository;
# the container is removed on every exit path.
# Environment: IMAGE (tag, default evictd:test), VECTORS (files to replay,
# default proto/vectors/gaps.json), IMAGE_MAX_MB (size limit, default 90).
set -euo pipefail
cd "$(dirname "$0")/.."
image=${IMAGE:-evictd:test}
vectors=${VECTORS:-proto/vectors/gaps.json}
max_mb=${IMAGE_MAX_MB:-90}
base=../shared/container/base-image.sh
pod() { podman --runtime runc "$@"; }
fail() { echo "image-test: FAIL $*" >&2; exit 1; }

deploy/deps.sh image test
if ! podman image exists docker.io/library/debian:bookworm-slim ||
   ! podman image exists docker.io/library/debian:bookworm; then
  # bash, not the file's own mode: CI's copy of ../shared is read-only.
  [ -f "$base" ] || fail "no base images and no $base (../shared beside the repository)"
  bash "$base"
fi

tmp=$(mktemp -d /tmp/evictd-image-test.XXXXXX)
cid=
vol=evictd-image-test-$$
cleanup() {
  if [ -n "$cid" ]; then
    pod stop -t 5 "$cid" >/dev/null 2>&1 || true
    pod rm -f "$cid" >/dev/null 2>&1 || true
  fi
  podman volume rm -f "$vol" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "image-test: building $image"
# Docker format keeps HEALTHCHECK (OCI drops it); the image id, not the tag,
# is what runs below, so a concurrent build of the same tag cannot swap it.
podman build --isolation=chroot --format docker -t "$image" --iidfile "$tmp/iid" . \
  >"$tmp/build.log" 2>&1 || { tail -n 30 "$tmp/build.log"; fail "podman build"; }
iid=$(cat "$tmp/iid")

# Metadata first: it needs no running container.
inspect() { podman image inspect --format "$1" "$iid"; }
want_hc='["CMD","evictd","--probe","http://127.0.0.1:8090/healthz"]'
[ "$(inspect '{{json .Config.Healthcheck.Test}}')" = "$want_hc" ] ||
  fail "HEALTHCHECK is $(inspect '{{json .Config.Healthcheck}}'), want test $want_hc"
[ "$(inspect '{{json .Config.Entrypoint}}')" = '["evictd"]' ] || fail "ENTRYPOINT"
[ "$(inspect '{{json .Config.Cmd}}')" = '["--listen","0.0.0.0:8090"]' ] || fail "CMD"
inspect '{{json .Config.ExposedPorts}}' | grep -q '"8090/tcp"' || fail "EXPOSE 8090"
user=$(inspect '{{.Config.User}}')
case "$user" in ''|0|0:*|root|root:*) fail "image runs as root (USER '$user')" ;; esac
size=$(inspect '{{.Size}}')
size_mb=$(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1000000 }')

# Run it as deploy/kubernetes.yaml and compose.yaml do: read-only root, no
# capabilities, no privilege gain, and a volume on /var/lib/evictd for
# --state-dir. A free loopback port is the daemon's own pick: port 0, read
# back from its log. Automatic health checks need systemd timers, absent
# here; the check itself is run by hand below.
podman volume create "$vol" >/dev/null
cid=$(pod run -d --network=host --ulimit nofile=1024:1024 --ulimit nproc=1000:1000 \
        --read-only --cap-drop=ALL --security-opt no-new-privileges \
        -v "$vol:/var/lib/evictd" --health-interval=disable \
        "$iid" --listen 127.0.0.1:0 --state-dir /var/lib/evictd 2>"$tmp/run.err") ||
  { cat "$tmp/run.err"; fail "podman run"; }
# The address of the n-th start of the container ($1 = 1, 2, ...).
address() {
  local a=
  for _ in $(seq 100); do
    a=$(pod logs "$cid" 2>&1 | sed -n 's/.*listening on \([^ ]*\).*/\1/p' | sed -n "$1p")
    [ -n "$a" ] && break
    [ "$(pod inspect --format '{{.State.Running}}' "$cid")" = true ] || break
    sleep 0.1
  done
  [ -n "$a" ] || { pod logs "$cid" 2>&1 | tail -n 20 >&2; fail "daemon did not start"; }
  echo "$a"
}
stop() {
  pod stop -t 10 "$cid" >/dev/null 2>"$tmp/stop.err" || { cat "$tmp/stop.err"; fail "podman stop"; }
  code=$(pod inspect --format '{{.State.ExitCode}}' "$cid")
  [ "$code" = 0 ] || { pod logs "$cid" 2>&1 | tail -n 20; fail "exit status $code after SIGTERM"; }
}
addr=$(address 1)
echo "image-test: container ${cid:0:12} listening on $addr"

deploy/replay-vector.py "http://$addr" $vectors || fail "vector replay"

pod exec "$cid" evictd --probe "http://$addr/healthz" ||
  fail "evictd --probe inside the container"
# The probe must be able to fail, or the HEALTHCHECK proves nothing: a path
# that answers 404 must count as unhealthy.
if pod exec "$cid" evictd --probe "http://$addr/no-such-path" 2>/dev/null; then
  fail "evictd --probe succeeded on a 404"
fi
[ "$(pod exec "$cid" id -u)" != 0 ] || fail "process runs as root"
# Only runtime libraries: no headers, no toolchain.
dev=$(pod exec "$cid" dpkg-query -W -f '${Package}\n' | grep -E -- '-dev$|^(gcc|cpp|make|binutils)(-[0-9]+)?$' || true)
[ -z "$dev" ] || fail "build packages in the runtime image: $(echo $dev)"

# A session survives a stop and start of the container in its volume.
json() { python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)[sys.argv[1]]))' "$1"; }
http() { python3 - "$@" <<'PY'
import http.client, sys
method, url, body = sys.argv[1], sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else None)
host, path = url.split("/", 1)
c = http.client.HTTPConnection(host, timeout=10)
c.request(method, "/" + path, body=body)
r = c.getresponse()
sys.stdout.write(r.read().decode())
sys.exit(0 if r.status < 300 else 1)
PY
}
http PUT "$addr/session/kept" '{"budget":4,"sinks":1}' >/dev/null || fail "PUT"
http POST "$addr/session/kept/step" '{"positions":[3,5,8,13,21]}' >/dev/null || fail "step"
before=$(http GET "$addr/session/kept" | json kept)
stop
pod start "$cid" >/dev/null 2>"$tmp/start.err" || { cat "$tmp/start.err"; fail "podman start"; }
addr=$(address 2)
after=$(http GET "$addr/session/kept" | json kept) || fail "session lost across a restart"
[ "$after" = "$before" ] || fail "session kept $after after a restart, $before before"
echo "image-test: session in the state volume survived a restart: kept $after"
stop

echo "image-test: image $image is $size_mb MB (limit $max_mb MB)"
awk -v s="$size_mb" -v m="$max_mb" 'BEGIN { exit !(s <= m) }' ||
  fail "image is $size_mb MB, above $max_mb MB"
echo "image-test: ok (healthcheck present, probe ok, vector replayed, state kept, clean stop)"
