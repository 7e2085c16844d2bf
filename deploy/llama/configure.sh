#!/usr/bin/env bash
# Finds (or builds) the llama.cpp that evictd-llama links, checks that its
# llama.h has the calls evictd-llama makes, and writes OUTDIR/config.mk.
#
#   deploy/llama/configure.sh OUTDIR
#
# Where llama.cpp comes from:
#   LLAMA_CPP_SRC=DIR         a llama.cpp source tree (built here, cached)
#   LLAMA_CPP_SRC=FILE.tar.gz a tarball of one (extracted here, cached)
#   LLAMA_CPP_SRC=pkg-config  an installed libllama (pkg-config llama)
#   (unset)                   the pinned npm package's source (llama.cpp.pin,
#                             fetched by llama-source.sh into OUTDIR/npm)
# The build is CPU-only, shared libraries, no tools, and lands in
# OUTDIR/build; a second run with the same source reuses it.
#
# llama.cpp's own `common` library (chat templates, tool-call parsing,
# JSON schema to grammar, llama-server's sampler chain), which
# deploy/llama/serve/upstream/*.cpp wrap, is built beside it as a static
# library in OUTDIR/common, from the same tree. llama.cpp installs neither
# its headers nor a static copy, so with LLAMA_CPP_SRC=pkg-config it comes
# from LLAMA_COMMON_SRC (a tree or tarball; default the pinned npm source),
# whose llama.h must be the installed one.
set -euo pipefail
out=${1:?usage: configure.sh OUTDIR}
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)

say() { echo "evictd-llama: $*" >&2; }

# Extracts a tarball of a llama.cpp tree into OUTDIR/src once per content
# (its sha256 names the copy) and prints the tree's path.
extract() {
  local sum
  sum=$(sha256sum "$1" | cut -c1-16)
  if [ "$(cat "$out/src.sha" 2>/dev/null)" != "$sum" ]; then
    say "extracting $1"
    rm -rf "$out/src" "$out/build" "$out/common" "$out/src.sha"
    mkdir -p "$out/src"
    tar -xzf "$1" -C "$out/src"
    echo "$sum" >"$out/src.sha"
  fi
  dirname "$(dirname "$(ls -d "$out"/src/*/include/llama.h | head -n 1)")"
}

src=${LLAMA_CPP_SRC:-}
if [ -z "$src" ]; then
  src=$("$repo/deploy/llama/llama-source.sh" "$out/npm")
fi

tree= version= cflags= libs= gguf_py=
if [ "$src" = pkg-config ]; then
  pkg-config --exists llama 2>/dev/null || {
    say "LLAMA_CPP_SRC=pkg-config, but pkg-config finds no llama.pc"
    say "(set PKG_CONFIG_PATH to where llama.cpp's install put it)"
    exit 1; }
elif [ -n "$src" ] && [ -f "$src" ]; then
  tree=$(extract "$src")
  version=$(basename "$src" .tar.gz)
elif [ -n "$src" ] && [ -d "$src" ]; then
  tree=$(cd "$src" && pwd)
  version="source tree $tree"
elif [ -n "$src" ]; then
  say "LLAMA_CPP_SRC=$src is neither a directory nor a file"
  exit 1
fi

# The calls evictd-llama makes, each of which the header must declare.
needed=(llama_memory_seq_rm llama_memory_seq_cp llama_memory_seq_pos_min
        llama_memory_seq_pos_max llama_model_is_recurrent
        llama_model_is_hybrid llama_model_n_swa llama_get_memory llama_model_load_from_file llama_init_from_model
        llama_batch_init llama_decode llama_get_logits_ith llama_tokenize
        llama_token_to_piece llama_vocab_is_eog LLAMA_FLASH_ATTN_TYPE_DISABLED
        kv_unified)
check_header() {
  local header=$1 missing=()
  [ -f "$header" ] || { say "no llama.h at $header"; exit 1; }
  for name in "${needed[@]}"; do
    grep -q "\\b$name\\b" "$header" || missing+=("$name")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "$header does not declare ${missing[*]}"
    case " ${missing[*]} " in
      *" llama_memory_seq_rm "*)
        say "that llama.cpp predates its memory API (llama_memory_seq_rm"
        say "replaced llama_kv_self_seq_rm in mid-2025); use a newer one,"
        say "e.g. the pinned one (leave LLAMA_CPP_SRC unset)" ;;
    esac
    exit 1
  fi
}

# What both builds are told: CPU only, nothing that fetches (no OpenSSL, no
# llguidance, whose build runs cargo against crates.io; curl is gone from
# llama.cpp), no tools, tests, examples or server.
cmake_flags=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF
  -DLLAMA_OPENSSL=OFF -DLLAMA_LLGUIDANCE=OFF)

need_tools() {
  for tool in cmake g++; do
    command -v "$tool" >/dev/null || { say "building llama.cpp needs $tool (deploy/deps.sh llama)"; exit 1; }
  done
}

# llama.cpp's common library from tree $1 into OUTDIR/common, as static
# archives: a CMake build of its own, because llama.cpp gives common no type
# of its own (it follows BUILD_SHARED_LIBS, which the main build sets).
# Static, evictd-llama takes only the objects it calls (the chat templates,
# their parsers, the sampler, the schema converter) and ships nothing more
# beside libllama; common's C++ interface has no ABI to keep in step with a
# shared copy. OPTIMIZE_DEPENDENCIES keeps CMake from first building a
# static libllama and libggml that nothing links (and so common-base, its
# build information, is named as a target of its own); LLAMA_SUBPROCESS
# (the server's tools) is left out. $2 is "fresh" for a tree that never
# changes (an extracted tarball): then a finished build is reused as is.
common_libs=
build_common() {
  local ctree=$1 dir="$out/common"
  common_libs="$dir/common/libllama-common.a $dir/common/libllama-common-base.a"
  if [ "$(cat "$out/common.src" 2>/dev/null)" != "$ctree" ]; then
    rm -rf "$dir" "$out/common.src"
  fi
  local have=yes lib
  for lib in $common_libs; do [ -f "$lib" ] || have=; done
  if [ -n "$have" ] && [ "${2:-}" = fresh ]; then
    return 0
  fi
  need_tools
  [ -n "$have" ] || say "building llama.cpp's common library from $ctree into $dir"
  local start
  start=$(date +%s)
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S "$ctree" -B "$dir" "${cmake_flags[@]}" -DBUILD_SHARED_LIBS=OFF \
      -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_OPTIMIZE_DEPENDENCIES=ON \
      -DLLAMA_BUILD_COMMON=ON -DLLAMA_SUBPROCESS=OFF \
      >"$out/common-cmake.log" 2>&1 || { tail -n 30 "$out/common-cmake.log" >&2; exit 1; }
  fi
  cmake --build "$dir" --target llama-common llama-common-base -j "$(nproc)" \
    >"$out/common-build.log" 2>&1 || { tail -n 30 "$out/common-build.log" >&2; exit 1; }
  echo "$ctree" >"$out/common.src"
  [ -n "$have" ] || say "llama.cpp's common library built in $(( $(date +%s) - start )) s"
}

if [ -n "$tree" ]; then
  check_header "$tree/include/llama.h"
  lib="$out/build/bin/libllama.so"
  # A build of another source is of no use (and CMake refuses its cache).
  if [ "$(cat "$out/build.src" 2>/dev/null)" != "$tree" ]; then
    rm -rf "$out/build" "$out/build.src"
  fi
  if [ ! -f "$lib" ]; then
    need_tools
    say "building llama.cpp from $tree into $out/build (a few minutes on 2 cores)"
    start=$(date +%s)
    cmake -S "$tree" -B "$out/build" "${cmake_flags[@]}" \
      -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_COMMON=OFF \
      >"$out/cmake.log" 2>&1 || { tail -n 30 "$out/cmake.log" >&2; exit 1; }
    cmake --build "$out/build" --target llama -j "$(nproc)" \
      >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log" >&2; exit 1; }
    echo "$tree" >"$out/build.src"
    say "llama.cpp built in $(( $(date +%s) - start )) s"
  elif [ "$version" != "$(basename "$src" .tar.gz)" ]; then
    # A tree of the user's may have changed since (a git pull): bring the
    # build up to date, which costs nothing when it is. (An extracted
    # tarball never changes.)
    cmake --build "$out/build" --target llama -j "$(nproc)" \
      >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log" >&2; exit 1; }
  fi
  # The same for common: a tarball's is built once (also where an older
  # configure built libllama alone), a tree's brought up to date.
  fresh=
  [ "$version" = "$(basename "$src" .tar.gz)" ] && fresh=fresh
  build_common "$tree" $fresh
  cflags="-I$tree/include -I$tree/ggml/include"
  common_inc="$tree/common"
  libs="-L$out/build/bin -Wl,-rpath,$out/build/bin -lllama -lggml -lggml-base"
  gguf_py="$tree/gguf-py"
else
  # LLAMA_CPP_SRC=pkg-config: gguf-py then comes from GGUF_PY, or Python's own gguf package.
  inc=$(pkg-config --variable=includedir llama)
  check_header "$inc/llama.h"
  cflags=$(pkg-config --cflags llama)
  # libllama and its own dependencies (libggml, libggml-cpu) are found
  # through its directory, at link and at run time, wherever the install
  # put them: an old-style DT_RPATH, which (unlike DT_RUNPATH) also serves
  # the libraries' own lookups.
  libdir=$(pkg-config --variable=libdir llama)
  libs="$(pkg-config --libs llama) -Wl,-rpath-link,$libdir"
  libs="$libs -Wl,--disable-new-dtags,-rpath,$libdir"
  version="installed libllama $(pkg-config --modversion llama)"
  gguf_py=${GGUF_PY:-}
  # common, from a source of the same llama.cpp: its llama.h must be the
  # installed one, else common would call a libllama it was not built for.
  csrc=${LLAMA_COMMON_SRC:-}
  [ -n "$csrc" ] || csrc=$("$repo/deploy/llama/llama-source.sh" "$out/npm")
  if [ -f "$csrc" ]; then
    ctree=$(extract "$csrc") cfresh=fresh
  elif [ -d "$csrc" ]; then
    ctree=$(cd "$csrc" && pwd) cfresh=
  else
    say "LLAMA_COMMON_SRC=$csrc is neither a directory nor a file"
    exit 1
  fi
  if ! cmp -s "$ctree/include/llama.h" "$inc/llama.h"; then
    say "the installed libllama's llama.h ($inc/llama.h) is not the one of"
    say "$ctree, from which llama.cpp's common library would be built:"
    say "set LLAMA_COMMON_SRC to the source of the installed llama.cpp"
    exit 1
  fi
  build_common "$ctree" $cfresh
  common_inc="$ctree/common"
fi

cat >"$out/config.mk.tmp" <<EOF
# Written by deploy/llama/configure.sh; do not edit.
LLAMA_CFLAGS := $cflags
LLAMA_LIBS := $libs
LLAMA_CPP_VERSION := $version
GGUF_PY := $gguf_py
LLAMA_TREE := $tree
# llama.cpp's common library (deploy/llama/serve/upstream/*.cpp alone
# includes its headers): its folder, as a system one so that its own
# warnings do not fail our -Werror, and its static archives.
LLAMA_COMMON_CXXFLAGS := -isystem $common_inc
# Its memory classes' headers (common/mem.cpp alone), the same way.
LLAMA_SRC_CXXFLAGS := -isystem ${common_inc%/common}/src
LLAMA_COMMON_LIBS := $common_libs
EOF
# Replaced only when it changes, so that what depends on it (evictd-llama's
# objects, the GGUF files) is not rebuilt by every make.
if cmp -s "$out/config.mk.tmp" "$out/config.mk"; then
  rm -f "$out/config.mk.tmp"
else
  mv "$out/config.mk.tmp" "$out/config.mk"
fi
