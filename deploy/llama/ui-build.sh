#!/usr/bin/env bash
# `make ui`: llama.cpp's own web UI, the chat page llama-server answers `/`
# with, built from the same pinned tree the engine builds (its tools/ui:
# SvelteKit, a static single-page bundle) with packages from the npm
# registry alone (`npm ci` of its package-lock.json, install scripts off),
# as llama.cpp's LLAMA_BUILD_UI does; then packed (ui-pack.mjs) into the
# one file serve embeds. Cached: built again only when the tree changes.
#   deploy/llama/ui-build.sh LLAMA_TREE OUT_DIR   (OUT_DIR/ui.pack)
set -euo pipefail
tree=${1:?usage: ui-build.sh LLAMA_TREE OUT_DIR}
out=${2:?usage: ui-build.sh LLAMA_TREE OUT_DIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
say() { echo "ui: $*" >&2; }
ui=$tree/tools/ui
[ -f "$ui/package-lock.json" ] || {
  say "$tree has no tools/ui/package-lock.json: not a llama.cpp tree with its UI"
  exit 1
}
here=$(cd "$(dirname "$0")" && pwd)
# What the pack is made of: the UI's files and the packer.
key=$( (cd "$ui" && find . -path ./node_modules -prune -o -path ./dist \
          -prune -o -type f -print0 | sort -z | xargs -0 sha256sum
        sha256sum <"$here/ui-pack.mjs") | sha256sum | cut -c1-16)
if [ -f "$out/ui.pack" ] && [ "$(cat "$out/key" 2>/dev/null)" = "$key" ]; then
  exit 0
fi
"$here/../deps.sh" node
# vite 7, which the UI builds with, wants Node.js 20.19 or later; where
# the node on PATH is older (Debian bookworm's is 18), the build uses
# Node.js's own binary from the npm registry (node-linux-ARCH, pinned).
NODE_PIN=22.21.1
new_enough() {
  node -e 'const [a, b] = process.versions.node.split(".").map(Number);
           process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'
}
if ! new_enough; then
  case $(uname -m) in
    x86_64) arch=x64 ;; aarch64) arch=arm64 ;;
    *) say "no Node.js 20.19 or later for $(uname -m)"; exit 1 ;;
  esac
  nodedir=$(dirname "$out")/node-$NODE_PIN
  if [ ! -x "$nodedir/package/bin/node" ]; then
    say "node $(node --version) is too old for the UI's build;" \
        "fetching node-linux-$arch@$NODE_PIN from the npm registry"
    rm -rf "$nodedir" && mkdir -p "$nodedir"
    (cd "$nodedir" &&
     npm pack --silent "node-linux-$arch@$NODE_PIN" >/dev/null &&
     tar -xzf node-linux-*.tgz && rm -f node-linux-*.tgz)
  fi
  PATH=$nodedir/package/bin:$PATH
  new_enough || { say "$nodedir has no usable node"; exit 1; }
fi
start=$(date +%s)
say "building llama.cpp's web UI from $ui into $out (npm ci, vite build: minutes)"
rm -rf "$out/src" "$out/dist" "$out/ui.pack" "$out/key"
mkdir -p "$out/src"
(cd "$ui" && tar --exclude=./node_modules --exclude=./dist \
   --exclude=./.svelte-kit -cf - .) | (cd "$out/src" && tar -xf -)
(cd "$out/src" &&
 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2 &&
 LLAMA_UI_OUT_DIR="$out/dist" npm run --silent build >"$out/build.log" 2>&1) || {
  say "the UI's build failed; its log: $out/build.log"
  tail -n 30 "$out/build.log" >&2 || true
  exit 1
}
node "$here/ui-pack.mjs" "$out/dist" "$out/ui.pack.tmp" >&2
mv "$out/ui.pack.tmp" "$out/ui.pack"
echo "$key" >"$out/key"
# node_modules is ~700 MB and needed no more.
rm -rf "$out/src/node_modules"
say "built in $(( $(date +%s) - start )) s"
