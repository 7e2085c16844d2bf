# Persistence under --state-dir, tested against the real daemon over HTTP
# (Python 3, standard library only): restarts lose nothing in any --fsync
# mode, kill -9 under load loses no acknowledged change and half-applies
# nothing, torn / damaged / foreign files and a second daemon are handled,
# and a state directory of the previous release (fixtures/v1, made by
# make_v1_fixture.py from the old binary; not run here) loads intact.
# `make check` runs the short forms (3 kill -9 rounds); `make test-crash`
# the long one (10 rounds, CRASH_ROUNDS to change). `make bench-durable`
# prints the throughput of each --fsync mode (also part of bench-http).
DURABILITY_BIN = $(abspath $(B)/evictd)
CRASH_ROUNDS ?= 10

.PHONY: test-durability test-crash bench-durable

test-durability: $(B)/evictd
	@deploy/deps.sh test
	@rc=0; \
	tests/durability/restart_test.py $(DURABILITY_BIN) || rc=1; \
	tests/durability/files_test.py $(DURABILITY_BIN) || rc=1; \
	tests/durability/compat_test.py $(DURABILITY_BIN) || rc=1; \
	tests/durability/crash_test.py --rounds 3 $(DURABILITY_BIN) || rc=1; \
	exit $$rc

test-crash: $(B)/evictd
	@deploy/deps.sh test
	tests/durability/crash_test.py --rounds $(CRASH_ROUNDS) $(DURABILITY_BIN)

bench-durable: bench-http-build
	tests/bench/durable.sh $(B)/evictd

test-more:: test-durability
