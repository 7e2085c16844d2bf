# The documents against the code: OpenAPI error codes and paths, and every
# flag in README.md and evictd(8).
.PHONY: test-docs
test-docs: $(B)/evictd
	python3 tests/docs/check.py $(B)/evictd

test-more:: test-docs
