# The HTTP benchmarks of `make bench` (sections 1-3; section 4 is core.sh):
# evictd beside nginx and Redis, each started and stopped by its script.
# `make bench-http` runs them all; bench-single, bench-batch, bench-memory,
# bench-restart and bench-client (the C client beside the Python one) run
# one. BENCH_SECONDS=2 BENCH_WARMUP=1 makes a quick run.
# `make bench-profile` shows where the daemon's time goes under the same
# loads (callgrind; PROFILE_TOOL=perf for cpu-clock samples with the kernel).

BUILD_ALL += $(B)/bench_memory $(B)/bench_api $(B)/bench_memcopy \
  $(B)/bench_client

$(B)/bench_memory: tests/bench/bench_memory.c | $(B)/obj
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

$(B)/bench_memcopy: tests/bench/bench_memcopy.c | $(B)/obj
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

# The C client beside the Python one (client.sh); it links the client's
# static library and, to time it beside the client's parser, jansson.
$(B)/bench_client: tests/bench/bench_client.c $(B)/libevictd-client.a \
                   $(CLIENT_HDR)
	$(CC) $(CFLAGS) $(CLIENT_CFLAGS) -o $@ $< $(B)/libevictd-client.a \
	  $(LDFLAGS) $(CLIENT_LIBS) $(shell pkg-config --libs jansson 2>/dev/null)

$(B)/bench_api: tests/bench/bench_api.c $(B)/evictd-daemon.a
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(B)/evictd-daemon.a \
	  $(LDFLAGS) $(PKG_LIBS)

.PHONY: bench-http bench-single bench-batch bench-memory bench-restart \
        bench-profile bench-http-build bench-client

# The packages first: the binaries cannot be built without them.
bench-http-build:
	@deploy/deps.sh build bench
	@$(MAKE) --no-print-directory $(B)/evictd $(B)/bench_memory $(B)/bench_api \
	  $(B)/bench_memcopy $(B)/bench_client $(B)/pool_probe

bench-http: bench-http-build
	tests/bench/api.sh $(B)/bench_api
	tests/bench/single.sh $(B)/evictd
	tests/bench/batch.sh $(B)/evictd
	tests/bench/memory.sh $(B)/evictd $(B)/bench_memory
	tests/bench/durable.sh $(B)/evictd
	tests/bench/restart.sh $(B)/evictd $(B)/bench_memory $(B)/bench_memcopy
	tests/bench/client.sh $(B)/evictd $(B)/bench_client
	tests/bench/pool.sh $(B)/evictd $(B)/pool_probe
	@$(MAKE) --no-print-directory bench-eval
	@$(MAKE) --no-print-directory bench-llama

bench-single: bench-http-build
	tests/bench/single.sh $(B)/evictd

bench-batch: bench-http-build
	tests/bench/batch.sh $(B)/evictd

bench-memory: bench-http-build
	tests/bench/memory.sh $(B)/evictd $(B)/bench_memory

# RESTART_SESSIONS=100000 makes a quick run (default 1,000,000).
bench-restart: bench-http-build
	tests/bench/restart.sh $(B)/evictd $(B)/bench_memory $(B)/bench_memcopy

# CLIENT_ROUNDS=N, CLIENT_SECONDS=S: rounds and their length.
bench-client: bench-http-build
	tests/bench/client.sh $(B)/evictd $(B)/bench_client

# A 3-instance pool beside one instance (POOL_SECONDS, POOL_SIZES).
.PHONY: bench-pool
bench-pool: bench-http-build
	tests/bench/pool.sh $(B)/evictd $(B)/pool_probe

bench-profile: bench-http-build
	PROFILE_OUT=$(B)/profile tests/bench/profile.sh $(B)/evictd
