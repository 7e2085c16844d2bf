#!/usr/bin/env bash
# Builds llama.cpp's own server, llama-server, from the source tree
# evictd-llama was configured with (config.mk's LLAMA_TREE), with the same
# ggml flags as libllama's build (CPU, GGML_NATIVE off), for `make
# bench-serve` to run beside evictd-llama serve. Cached: a second run with
# the same tree does nothing. Prints the binary's path.
#
#   tests/bench/llama-server.sh CONFIG.mk OUTDIR
set -euo pipefail
config=${1:?usage: llama-server.sh CONFIG.mk OUTDIR}
out=${2:?usage: llama-server.sh CONFIG.mk OUTDIR}
say() { echo "llama-server: $*" >&2; }

tree=$(sed -n 's/^LLAMA_TREE := //p' "$config")
if [ -z "$tree" ] || [ ! -f "$tree/tools/server/CMakeLists.txt" ]; then
  say "evictd-llama was not built from a llama.cpp source tree with"
  say "tools/server ($config names '${tree:-none}'); bench-serve needs one:"
  say "leave LLAMA_CPP_SRC unset (the pinned npm source) or name a tree"
  exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$out/build/bin/llama-server
if [ -x "$bin" ] && [ "$(cat "$out/build.src" 2>/dev/null)" = "$tree" ]; then
  echo "$bin"
  exit 0
fi
rm -rf "$out/build" "$out/build.src"
say "building llama-server from $tree (about 15 min on 2 cores, once)"
start=$(date +%s)
cmake -S "$tree" -B "$out/build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF \
  -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_OPENSSL=OFF >"$out/cmake.log" 2>&1 ||
  { tail -n 30 "$out/cmake.log" >&2; exit 1; }
cmake --build "$out/build" --target llama-server -j "$(nproc)" \
  >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log" >&2; exit 1; }
echo "$tree" >"$out/build.src"
say "built in $(( $(date +%s) - start )) s"
echo "$bin"
