#!/usr/bin/env bash
# Installs the Debian packages a make target needs, when they are missing.
# Usage: deploy/deps.sh GROUP...   (groups: see the case below)
# As root it runs apt-get non-interactively; otherwise it prints the exact
# command to run and fails, so that nothing half-builds.
set -euo pipefail

want=()
for group in "$@"; do
  case "$group" in
    build) want+=(gcc make pkg-config libuv1-dev libmicrohttpd-dev libjansson-dev libgnutls28-dev libcurl4-gnutls-dev) ;;
    test)  want+=(check python3 python3-yaml util-linux) ;;
    bench) want+=(valgrind nginx redis-server redis-tools wrk util-linux procps) ;;
    fuzz)  want+=(clang libclang-rt-14-dev) ;;
    image) want+=(podman runc debootstrap) ;;
    # The sidecar pair (deploy/pair-test.sh): kube play's pause image needs
    # catatonit; nsenter (util-linux) reaches a pod's own network.
    pair)  want+=(podman-compose catatonit util-linux python3-yaml) ;;
    lint)  want+=(yamllint shellcheck systemd groff-base man-db) ;;
    proxy) want+=(nginx curl) ;;
    tls)   want+=(openssl curl ca-certificates) ;;
    metrics) want+=(prometheus curl) ;;
    faults) want+=(fiu-utils libfiu-dev) ;;
    e2e)   want+=(python3-torch python3-numpy libopenblas0-pthread) ;;
    # llama.cpp's build (evictd-llama) and its gguf-py (numpy, PyYAML).
    llama) want+=(cmake g++ python3-numpy python3-yaml) ;;
    # llama.cpp's own server tests (tests/llamacpp/llama_suite): Debian's
    # pytest and the suite's requirements.txt (requests, aiohttp,
    # prometheus-client; not openai, which Debian lacks) and imports (its
    # conftest.py's filelock, its utils.py's wget).
    llamasuite) want+=(python3-pytest python3-requests python3-aiohttp
                       python3-prometheus-client python3-filelock
                       python3-wget) ;;
    # Node.js and npm: Debian's (18) unless some node and npm are already
    # on PATH (another vendor's nodejs package conflicts with Debian's npm).
    node)  command -v node >/dev/null && command -v npm >/dev/null ||
             want+=(nodejs npm) ;;
    # The web UI's browser test (tests/llamacpp/browser): Debian's chromium,
    # driven by the pinned playwright-core, and a font for its screenshots.
    browser) want+=(chromium fonts-dejavu-core) ;;
    # llama.cpp's source arrives as a git bundle (deploy/llama/llama-source.sh).
    git)   want+=(git ca-certificates) ;;
    *) echo "deps.sh: unknown group '$group'" >&2; exit 2 ;;
  esac
done

missing=()
for pkg in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "evictd needs these Debian packages: ${missing[*]}" >&2
  echo "run as root:  $cmd" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
for attempt in 1 2 3; do
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
       --no-install-recommends "${missing[@]}" >/tmp/evictd-apt.log 2>&1; then
    exit 0
  fi
  echo "apt-get failed (attempt $attempt), see /tmp/evictd-apt.log" >&2
  sleep $((attempt * 5))
done
tail -n 20 /tmp/evictd-apt.log >&2
exit 1
