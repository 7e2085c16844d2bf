# GET /metrics: promtool lint and counter checks against a real daemon.
.PHONY: test-metrics
test-metrics: $(B)/evictd
	@deploy/deps.sh metrics
	tests/metrics/lint.sh $(B)/evictd

test-more:: test-metrics
