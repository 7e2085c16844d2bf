# evictd build. `make` builds everything, `make check` runs every test,
# `make asan` runs them under AddressSanitizer + UBSan, `make bench` prints
# the benchmarks, `make run` starts the daemon on its defaults.
# Missing Debian packages are installed by deploy/deps.sh (as root) first.

CC      ?= cc
B       ?= build
OPT     ?= -O2
SAN     ?=
PKGS    := libuv libmicrohttpd jansson
CFLAGS  ?=
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g $(OPT) $(SAN) -Iinclude
LDFLAGS += $(SAN)

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)

CORE_SRC := server/window.c server/error.c
CORE_OBJ := $(CORE_SRC:server/%.c=$(B)/obj/%.o)

.PHONY: all deps deps-test check test-unit test-vectors asan bench run clean

all: deps $(B)/evictd-core.a $(B)/test_window $(B)/bench_window

deps:
	@deploy/deps.sh build

deps-test:
	@deploy/deps.sh build test

$(B)/obj/%.o: server/%.c $(wildcard include/evictd/*.h) | $(B)/obj
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -c -o $@ $<

$(B)/obj:
	@mkdir -p $@

$(B)/evictd-core.a: $(CORE_OBJ)
	rm -f $@ && ar rcs $@ $^

$(B)/test_window: tests/unit/test_window.c $(B)/evictd-core.a
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $^ $(LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS)

$(B)/bench_window: tests/bench/bench_window.c $(B)/evictd-core.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS)

check: deps-test
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory test-vectors test-unit

test-vectors:
	python3 proto/vectors/gen.py --check

test-unit: $(B)/test_window
	$(B)/test_window

asan: deps-test
	@$(MAKE) --no-print-directory B=build/asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  all test-unit

bench: deps
	@deploy/deps.sh bench
	@$(MAKE) --no-print-directory all
	tests/bench/core.sh $(B)/bench_window

clean:
	rm -rf build
