# evictd build. `make` builds everything, `make check` runs every test,
# `make asan` runs them under AddressSanitizer + UBSan, `make bench` prints
# the benchmarks, `make run` starts the daemon on its defaults.
# Missing Debian packages are installed by deploy/deps.sh (as root) first.
# Parts of the build live next to what they build, in *.mk fragments
# included at the end.

CC      ?= cc
B       ?= build
OPT     ?= -O2
SAN     ?=
PKGS    := libuv libmicrohttpd jansson gnutls
CFLAGS  ?=
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g $(OPT) $(SAN) -Iinclude -iquote server
LDFLAGS += $(SAN)
VERSION := 0.1.0

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm
# FIU=1: the fault tests' build, with libfiu's injection points (fault.h).
ifeq ($(FIU),1)
CFLAGS   += -DEVD_FIU
PKG_LIBS += -lfiu
endif
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)

# The policy core: no I/O, no libraries.
CORE_SRC := server/window.c server/window_state.c server/error.c
# The daemon: everything in server/ but main.c goes into a library that the
# tests and the fuzz harness link too.
DAEMON_SRC := $(filter-out $(CORE_SRC) server/main.c,$(wildcard server/*.c))
CORE_OBJ   := $(CORE_SRC:server/%.c=$(B)/obj/%.o)
DAEMON_OBJ := $(DAEMON_SRC:server/%.c=$(B)/obj/%.o)
HEADERS    := $(wildcard include/evictd/*.h server/*.h)
# The daemon's modules that evictd-eval and evictd-llama build in too (one
# archive, linked by each): the buffer with its JSON string writer and
# UTF-8 check, the histograms and the Prometheus text, the SVG charts, the
# listening socket (--listen's rules: a Unix socket in use is refused),
# SipHash (serve's digests of the conversations' older tokens).
COMMON_SRC := server/buf.c server/histogram.c server/prom.c server/chart.c \
              server/listen.c server/siphash.c
COMMON_OBJ := $(COMMON_SRC:server/%.c=$(B)/obj/%.o)
COMMON_HDR := $(COMMON_SRC:.c=.h) server/error.h

# The Check programs run by `make check` (test-check-programs); the
# fragments append to it (the unit tests' rules are in tests/unit/unit.mk).
TEST_PROGS :=
BUILD_ALL  := $(B)/evictd $(B)/evictd-core.a $(B)/bench_window

.PHONY: all deps deps-test check test-check-programs test-vectors test-more \
        asan bench run clean
.DEFAULT_GOAL := all

# Fragments: each may append to TEST_PROGS / BUILD_ALL and add targets, and
# hook extra checks into test-more (a double-colon rule). Included before
# the rules below, which list those variables as prerequisites.
test-more::
	@true
-include $(sort $(wildcard tests/*/*.mk deploy/*.mk deploy/*/*.mk deploy/*/*/*.mk server/*/*.mk))

# `all` builds the test programs too, so it needs the test packages (Check)
# as well; they are installed before anything is built, also under -j.
all:
	@deploy/deps.sh build test
	@$(MAKE) --no-print-directory build-all

.PHONY: build-all
build-all: $(BUILD_ALL) $(TEST_PROGS)

deps:
	@deploy/deps.sh build

deps-test:
	@deploy/deps.sh build test

$(B)/obj/%.o: server/%.c $(HEADERS) | $(B)/obj
	$(CC) $(CFLAGS) -DEVD_VERSION='"$(VERSION)"' $(PKG_CFLAGS) -c -o $@ $<

$(B)/obj:
	@mkdir -p $@

# An archive depends on the Makefile too: a member added to its list may be
# older than the archive (an object another archive already had).
$(B)/evictd-core.a: $(CORE_OBJ) Makefile
	rm -f $@ && ar rcs $@ $(filter %.o,$^)

$(B)/evictd-daemon.a: $(DAEMON_OBJ) $(CORE_OBJ) Makefile
	rm -f $@ && ar rcs $@ $(filter %.o,$^)

$(B)/evictd-common.a: $(COMMON_OBJ) Makefile
	rm -f $@ && ar rcs $@ $(filter %.o,$^)

$(B)/evictd: $(B)/obj/main.o $(B)/evictd-daemon.a
	$(CC) -o $@ $^ $(LDFLAGS) $(PKG_LIBS)

$(B)/bench_window: tests/bench/bench_window.c $(B)/evictd-core.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS)

# Every test program runs with the daemon binary at hand.
export EVICTD_BIN = $(abspath $(B)/evictd)
# Every Python suite and bench imports tests/support, the Python client
# and the reference model by name: this one path, set here so that each
# fragment's python3 has it (tests/README.md: by hand, the same).
export PYTHONPATH := $(abspath tests):$(abspath deploy/clients/python):$(abspath deploy/model)

check: deps-test
	@$(MAKE) --no-print-directory build-all
	@$(MAKE) --no-print-directory test-vectors test-check-programs test-more

test-vectors:
	python3 proto/vectors/gen.py --check

# Every Check program of TEST_PROGS, one after the other.
test-check-programs: $(TEST_PROGS) $(B)/evictd
	@set -e; for t in $(TEST_PROGS); do echo "== $$t"; $$t; done

asan: deps-test
	@$(MAKE) --no-print-directory B=build/asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  build-all test-check-programs test-durability

bench: deps-test
	@deploy/deps.sh bench
	@$(MAKE) --no-print-directory build-all
	tests/bench/core.sh $(B)/bench_window
	@$(MAKE) --no-print-directory bench-http

run: deps
	@$(MAKE) --no-print-directory $(B)/evictd
	$(B)/evictd

clean:
	rm -rf build

