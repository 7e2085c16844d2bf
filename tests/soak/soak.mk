# `make soak`: evictd under churn for SOAK_SECONDS (default 240) after a
# 20 s warm-up, at most 5 minutes in all: errors must be 0 and resident
# memory must grow by at most 2 % (tests/soak/soak.sh says more). A 20 s
# smoke version runs in `make check` and judges errors only: memory in a
# short run is noise, and nothing here is timed.
BUILD_ALL += $(B)/soak_load

$(B)/soak_load: tests/soak/soak_load.c | $(B)/obj
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

SOAK_SECONDS ?= 240

.PHONY: soak test-soak-smoke
soak: $(B)/evictd $(B)/soak_load
	tests/soak/soak.sh $(B)/evictd $(B)/soak_load $(SOAK_SECONDS)

test-soak-smoke: $(B)/evictd $(B)/soak_load
	SOAK_SMOKE=1 SOAK_WARMUP=5 tests/soak/soak.sh $(B)/evictd $(B)/soak_load 15

test-more:: test-soak-smoke
