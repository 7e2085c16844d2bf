# Scale-out: three daemons behind a real nginx running deploy/nginx-shard.conf.
# nginx comes from deps.sh's "bench" group, the only one that has it so far.
.PHONY: test-shard
test-shard: $(B)/evictd
	@deploy/deps.sh test bench
	tests/shard/shard_test.py $(B)/evictd

test-more:: test-shard
