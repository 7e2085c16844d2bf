# Scale-out: three daemons behind a real nginx running deploy/nginx-shard.conf.
# pool_test.py: the pool clients (both Python ones, and the C client's
# through pool_probe) route as that nginx does. resize_test.py: the pool
# grows, loses an instance's state and shrinks under 16 re-homing engines
# (tests/support/resize.py; with evictd-llama serve:
# tests/llamacpp/test_pool.py).
# nginx comes from deps.sh's "proxy" group.
BUILD_ALL += $(B)/pool_probe

$(B)/pool_probe: tests/shard/pool_probe.c $(B)/libevictd-client.a $(CLIENT_HDR)
	$(CC) $(CFLAGS) $(CLIENT_CFLAGS) -o $@ $< $(B)/libevictd-client.a \
	  $(LDFLAGS) $(CLIENT_LIBS)

.PHONY: test-shard
test-shard: $(B)/evictd $(B)/pool_probe
	@deploy/deps.sh test proxy
	tests/shard/shard_test.py $(B)/evictd
	PYTHONDONTWRITEBYTECODE=1 POOL_PROBE=$(abspath $(B)/pool_probe) \
	  tests/shard/pool_test.py $(B)/evictd && \
	PYTHONDONTWRITEBYTECODE=1 tests/shard/resize_test.py $(B)/evictd

test-more:: test-shard
