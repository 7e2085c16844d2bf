# Scale-out: three daemons behind a real nginx running deploy/nginx-shard.conf.
# pool_test.py: the pool clients route as that nginx does.
# nginx comes from deps.sh's "proxy" group.
.PHONY: test-shard
test-shard: $(B)/evictd
	@deploy/deps.sh test proxy
	tests/shard/shard_test.py $(B)/evictd
	PYTHONDONTWRITEBYTECODE=1 tests/shard/pool_test.py $(B)/evictd

test-more:: test-shard
