#!/usr/bin/env bash
# `make engine-image`: builds deploy/llama/image/Dockerfile with podman (see
# ../shared/container/README.md) and tags it. Run from the repository top,
# after `make gguf` (make does both).
#   deploy/llama/image/build-image.sh TAG MODEL.gguf [IIDFILE]
# Where llama.cpp comes from, as for `make evictd-llama`: LLAMA_CPP_SRC (a
# source tree, or a tarball), else the pinned npm package's source
# (deploy/llama/llama-source.sh, cached in $B/llama/npm). It goes in as the
# build context `llamacpp`; the model as the context `models`, staged in
# $B/image/models (B defaults to build); the web UI's pack as `ui`.
set -euo pipefail
tag=${1:?usage: build-image.sh TAG MODEL.gguf [IIDFILE]}
model=${2:?usage: build-image.sh TAG MODEL.gguf [IIDFILE]}
iidfile=${3:-}
b=${B:-build}
say() { echo "engine-image: $*" >&2; }

src=${LLAMA_CPP_SRC:-}
args=()
if [ -z "$src" ]; then
  src=$(deploy/llama/llama-source.sh "$b/llama/npm")
fi
if [ -d "$src" ]; then
  [ -f "$src/include/llama.h" ] || { say "$src is not a llama.cpp source tree (no include/llama.h)"; exit 1; }
  context=$src
elif [ -f "$src" ]; then
  context=$(dirname "$src")
  args+=(--build-arg "LLAMA_CPP_TARBALL=$(basename "$src")")
else
  # pkg-config (an installed libllama) cannot go into an image.
  say "LLAMA_CPP_SRC=$src: the image builds llama.cpp itself and needs a source tree or tarball"
  exit 1
fi

# Only the model in the `models` context (a hard link when possible: the
# build reads the file, whatever its name or time).
stage=$b/image/models
mkdir -p "$stage"
if ! cmp -s "$model" "$stage/evictd-lm.gguf"; then
  rm -f "$stage/evictd-lm.gguf"
  ln "$model" "$stage/evictd-lm.gguf" 2>/dev/null || cp "$model" "$stage/evictd-lm.gguf"
fi

# llama.cpp's web UI, packed (make ui, which make gguf's evictd-llama
# ran): the context `ui`, staged in $B/image/ui. The build has no npm.
pack=${UI_PACK:-$b/ui/ui.pack}
[ -f "$pack" ] || { say "no $pack: run make ui first"; exit 1; }
uistage=$b/image/ui
mkdir -p "$uistage"
if ! cmp -s "$pack" "$uistage/ui.pack"; then
  rm -f "$uistage/ui.pack"
  ln "$pack" "$uistage/ui.pack" 2>/dev/null || cp "$pack" "$uistage/ui.pack"
fi

deploy/deps.sh image
if ! podman image exists docker.io/library/debian:bookworm-slim ||
   ! podman image exists docker.io/library/debian:bookworm; then
  base=../shared/container/base-image.sh
  [ -f "$base" ] || { say "no base images and no $base"; exit 1; }
  bash "$base"
fi
[ -n "$iidfile" ] && args+=(--iidfile "$iidfile")
say "building $tag (llama.cpp from $src)"
start=$(date +%s)
# Docker format keeps HEALTHCHECK (OCI drops it).
podman build --isolation=chroot --format docker -f deploy/llama/image/Dockerfile \
  --build-context "llamacpp=$context" --build-context "models=$stage" \
  --build-context "ui=$uistage" "${args[@]}" -t "$tag" .
say "built $tag in $(( $(date +%s) - start )) s"
