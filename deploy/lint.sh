#!/usr/bin/env bash
# `make lint-deploy`: syntax and consistency checks of deploy/ that need no
# cluster, container engine or systemd instance: yamllint on the YAML files,
# the manifests' invariants (check-manifests.py), shellcheck on the
# deployment scripts, the man page against
# `evictd --help`, and `make install` into a temporary DESTDIR whose unit
# passes `systemd-analyze verify` and a minimum sandboxing score, and whose
# C client (header, libraries, evictd-client.pc) builds and runs a program.
# Usage: deploy/lint.sh BUILD_DIR   (run from the repository top by make)
set -euo pipefail
b=${1:?usage: deploy/lint.sh BUILD_DIR}
bin=$b/evictd
make=${MAKE:-make}
tmp=$(mktemp -d /tmp/evictd-lint.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "lint-deploy: FAIL $*" >&2; exit 1; }

# Commented-out optional blocks (persistence, token) sit at the indentation
# they will have when enabled, which the comments-indentation rule dislikes.
yamllint -s -d '{extends: default, rules: {comments-indentation: disable}}' \
  deploy/*.yaml
# yamllint depends on python3-yaml, so the system python has the parser.
/usr/bin/python3 deploy/check-manifests.py
# The deployment and container scripts: shellcheck's warnings and errors
# (its style notes are left alone).
shellcheck -S warning deploy/*.sh deploy/llama/image/*.sh

# The man page documents exactly the flags and variables of --help.
"$bin" --help >"$tmp/help"
sed -n 's/^  --\([a-z-]*\).*/\1/p' "$tmp/help" | sort >"$tmp/help.flags"
grep -o 'env EVICTD_[A-Z_]*' "$tmp/help" | cut -d' ' -f2 | sort >"$tmp/help.env"
# An option is a `.TP` item of OPTIONS whose tag starts with \-\-flag.
awk '/^\.SH /{s=$2} s=="OPTIONS" && t {print} {t=/^\.TP/}' deploy/evictd.8 |
  sed -n 's/^\.BI* \\-\\-\([a-z\\-]*\).*/\1/p' | sed 's/\\-/-/g' | sort >"$tmp/man.flags"
awk '/^\.SH /{s=$2} s=="ENVIRONMENT" && t {print $2} {t=/^\.TP/}' deploy/evictd.8 |
  sort >"$tmp/man.env"
diff -u --label 'evictd --help' --label deploy/evictd.8 "$tmp/help.flags" "$tmp/man.flags" ||
  fail "flags in evictd --help and OPTIONS of deploy/evictd.8 differ (above)"
diff -u --label 'evictd --help' --label deploy/evictd.8 "$tmp/help.env" "$tmp/man.env" ||
  fail "variables in evictd --help and ENVIRONMENT of deploy/evictd.8 differ (above)"
if command -v groff >/dev/null; then
  groff -man -ww -z deploy/evictd.8 2>"$tmp/groff" && [ ! -s "$tmp/groff" ] ||
    { cat "$tmp/groff"; fail "groff warnings in deploy/evictd.8"; }
else
  echo "lint-deploy: groff not installed, roff warnings not checked"
fi

# make install into a DESTDIR, at the default PREFIX and at another one.
for prefix in /usr/local /opt/evictd; do
  dest=$tmp/dest$(echo "$prefix" | tr / _)
  "$make" --no-print-directory -s install B="$b" DESTDIR="$dest" PREFIX="$prefix"
  for f in "bin/evictd 755" "bin/evictd-eval 755" "share/man/man8/evictd.8 644" \
           "lib/systemd/system/evictd.service 644"; do
    set -- $f
    [ -f "$dest$prefix/$1" ] || fail "make install PREFIX=$prefix: no $prefix/$1"
    [ "$(stat -c %a "$dest$prefix/$1")" = "$2" ] ||
      fail "make install: $prefix/$1 has mode $(stat -c %a "$dest$prefix/$1"), want $2"
  done
  unit=$dest$prefix/lib/systemd/system/evictd.service
  grep -q "^ExecStart=$prefix/bin/evictd " "$unit" ||
    fail "installed unit does not run $prefix/bin/evictd"
  "$dest$prefix/bin/evictd" --version >/dev/null || fail "installed binary does not run"
  "$dest$prefix/bin/evictd-eval" --help >/dev/null || fail "installed evictd-eval does not run"
  # The C client: header, libraries (the soname's links too) and its .pc;
  # a program built with `pkg-config --cflags --libs evictd-client` against
  # this DESTDIR (PKG_CONFIG_SYSROOT_DIR) links to the installed library
  # and runs.
  for f in "include/evictd/client.h 644" "lib/libevictd-client.a 644" \
           "lib/pkgconfig/evictd-client.pc 644"; do
    set -- $f
    [ -f "$dest$prefix/$1" ] || fail "make install PREFIX=$prefix: no $prefix/$1"
    [ "$(stat -c %a "$dest$prefix/$1")" = "$2" ] ||
      fail "make install: $prefix/$1 has mode $(stat -c %a "$dest$prefix/$1"), want $2"
  done
  so=$(readlink "$dest$prefix/lib/libevictd-client.so") &&
    [ "$so" = libevictd-client.so.0 ] && real=$(readlink "$dest$prefix/lib/$so") &&
    [ -f "$dest$prefix/lib/$real" ] && [ "$(stat -c %a "$dest$prefix/lib/$real")" = 755 ] ||
    fail "make install: libevictd-client.so does not lead to the library through libevictd-client.so.0"
  grep -qx "prefix=$prefix" "$dest$prefix/lib/pkgconfig/evictd-client.pc" ||
    fail "evictd-client.pc does not say prefix=$prefix"
  cat >"$tmp/use-client.c" <<'EOF'
#include <evictd/client.h>
#include <stdio.h>
int main(void) {
  evd_client_opts_t o = {.url = "unix:/nonexistent/evictd.sock", .timeout_ms = 2000};
  evd_client_t *c;
  char err[256];
  int rc = evd_client_new(&c, &o, err, sizeof err);
  if (rc != 0) { fprintf(stderr, "%s\n", err); return 1; }
  rc = evd_client_health(c); /* nothing listens there */
  evd_client_free(c);
  return rc == EVD_CLIENT_ECONNECT ? 0 : 1;
}
EOF
  flags=$(PKG_CONFIG_PATH="$dest$prefix/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest" \
    pkg-config --cflags --libs evictd-client) || fail "pkg-config evictd-client"
  # shellcheck disable=SC2086
  ${CC:-cc} -o "$tmp/use-client" "$tmp/use-client.c" $flags ||
    fail "a program does not build with pkg-config --cflags --libs evictd-client"
  LD_LIBRARY_PATH="$dest$prefix/lib" "$tmp/use-client" ||
    fail "a program linked with the installed C client does not run"
  # (not ldd | grep -q: grep leaving early can fail ldd with SIGPIPE, and
  # so the pipeline under pipefail)
  libs=$(LD_LIBRARY_PATH="$dest$prefix/lib" ldd "$tmp/use-client")
  grep -q "libevictd-client.so.0 => $dest$prefix/lib/" <<<"$libs" ||
    fail "the program did not load the installed libevictd-client.so.0"
  # verify checks that ExecStart is executable, so the copy it reads points
  # into DESTDIR; with man(1) present it also finds evictd(8) there.
  mkdir -p "$dest/verify"
  sed "s#^ExecStart=$prefix/#ExecStart=$dest$prefix/#" "$unit" >"$dest/verify/evictd.service"
  man=no
  command -v man >/dev/null && man=yes
  MANPATH=$dest$prefix/share/man systemd-analyze verify --man=$man "$dest/verify/evictd.service" ||
    fail "systemd-analyze verify $unit"
  "$make" --no-print-directory -s uninstall DESTDIR="$dest" PREFIX="$prefix"
  [ -z "$(find "$dest$prefix" -type f)" ] || fail "make uninstall left files behind"
done

# The sandbox must stay tight: systemd rates the unit's exposure from 0
# (locked down) to 10; the unit is at 1.1 now, and 1.5 catches a regression.
systemd-analyze security --offline=true --threshold=15 "$dest/verify/evictd.service" \
  >"$tmp/security" || { tail -n 3 "$tmp/security"; fail "systemd-analyze security above 1.5"; }
echo "lint-deploy: ok (yamllint, manifests, shellcheck, man page, install, unit $(
  sed -n 's/.*exposure level for evictd.service: \([0-9.]*\).*/\1/p' "$tmp/security"))"
