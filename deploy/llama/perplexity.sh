#!/usr/bin/env bash
# The perplexity figures of deploy/llama/README.md (make perplexity; not
# part of CI): the tiny model of deploy/model on held-out text longer than
# its training context, decoded by evictd-llama perplexity against a real
# daemon, in both position modes. Writes OUT/perplexity.md (the tables) and
# OUT/perplexity-original.svg, OUT/perplexity-cache.svg (budget SVG_BUDGET).
#
#   deploy/llama/perplexity.sh EVICTD EVICTD_LLAMA MODEL.gguf OUT_DIR
set -euo pipefail
evictd=${1:?usage: perplexity.sh EVICTD EVICTD_LLAMA MODEL.gguf OUT_DIR}
engine=${2:?}
model=${3:?}
out=${4:?}
text=${PPL_TEXT:-/usr/share/common-licenses/Apache-2.0}
tokens=${PPL_TOKENS:-4096}
budgets=${PPL_BUDGETS:-64,128,256,512,1024}
svg_budget=${SVG_BUDGET:-64}

tmp=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

"$evictd" --listen 127.0.0.1:0 2>"$tmp/evictd.log" &
pid=$!
addr=""
for _ in $(seq 200); do
  addr=$(sed -n '/listening on /{s/.*listening on \([^ ]*\).*/\1/p;q}' \
         "$tmp/evictd.log")
  [ -n "$addr" ] && break
  sleep 0.05
done
[ -n "$addr" ] || { cat "$tmp/evictd.log" >&2; exit 1; }

mkdir -p "$out"
{
  echo "<!-- written by make perplexity (deploy/llama/perplexity.sh) -->"
  for mode in original cache; do
    echo
    echo "### --positions $mode"
    echo
    echo '```'
    echo "evictd-llama perplexity -m $(basename "$model") --budgets $budgets" \
         "-n $tokens --positions $mode $(basename "$text")"
    echo '```'
    echo
    "$engine" perplexity -m "$model" --evictd "http://$addr" \
      --budgets "$budgets" -n "$tokens" --positions "$mode" \
      --svg "$out/perplexity-$mode.svg" --svg-budget "$svg_budget" "$text" \
      2> >(grep -v 'training context overflow' >&2)
  done
} > "$tmp/perplexity.md"
mv "$tmp/perplexity.md" "$out/perplexity.md"
echo "wrote $out/perplexity.md, $out/perplexity-original.svg," \
     "$out/perplexity-cache.svg"
