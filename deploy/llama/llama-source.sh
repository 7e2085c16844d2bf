#!/usr/bin/env bash
# Fetches the pinned llama.cpp source from the npm registry (llama.cpp.pin)
# and prints the path of a tarball of it, made once and cached in OUTDIR:
#
#   deploy/llama/llama-source.sh OUTDIR    ->  OUTDIR/llama.cpp-80fb11ac.tar.gz
#
# `npm pack` downloads the package tarball alone (no dependencies, no install
# scripts: its own would fetch or build binaries we do not want). Its sha512
# must equal the pinned npm integrity, and the git bundle inside must hold
# the pinned commit; then `git archive` of that commit is the tarball. Any
# failure is fatal: a build that wants llama.cpp and cannot have it fails.
set -euo pipefail
out=${1:?usage: llama-source.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/llama.cpp.pin"
say() { echo "llama-source: $*" >&2; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
tarball=$out/llama.cpp-${commit:0:8}.tar.gz
stamp="$package@$version $integrity $commit"
if [ -f "$tarball" ] && [ "$(cat "$tarball.pin" 2>/dev/null)" = "$stamp" ]; then
  echo "$tarball"
  exit 0
fi

"$here/../deps.sh" node git
tmp=$(mktemp -d "$out/fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

say "fetching $package@$version from the npm registry"
(cd "$tmp" && npm pack "$package@$version" --silent --no-audit --no-fund \
   >/dev/null) || { say "npm pack $package@$version failed (is the npm registry reachable?)"; exit 1; }
set -- "$tmp"/*.tgz
[ $# = 1 ] && [ -f "$1" ] || { say "npm pack wrote no package tarball"; exit 1; }
got=$(node -e 'const c = require("crypto"), fs = require("fs");
  process.stdout.write("sha512-" + c.createHash("sha512")
    .update(fs.readFileSync(process.argv[1])).digest("base64"));' "$1")
if [ "$got" != "$integrity" ]; then
  say "$package@$version from the registry has integrity $got,"
  say "not the pinned $integrity: refusing it"
  exit 1
fi

tar -xzf "$1" -C "$tmp" package/llama/gitRelease.bundle
git clone --quiet --bare "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.git"
head=$(git --git-dir="$tmp/llama.git" rev-parse --verify "$commit^{commit}" 2>/dev/null) ||
  { say "the bundle of $package@$version does not hold commit $commit"; exit 1; }
git --git-dir="$tmp/llama.git" archive --format=tar \
  --prefix="llama.cpp-${commit:0:8}/" "$head" | gzip -n >"$tmp/src.tar.gz"
mv "$tmp/src.tar.gz" "$tarball"
echo "$stamp" >"$tarball.pin"
say "llama.cpp ${commit:0:8} from $package@$version: $tarball"
echo "$tarball"
