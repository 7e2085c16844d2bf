# The documents against the code: OpenAPI error codes and paths, every
# flag in README.md and evictd(8), and the tables that point into the code
# (routes.py: the daemon's and serve's routes, each with its file and
# function; deploy/llama's layout).
.PHONY: test-docs
test-docs: $(B)/evictd
	python3 tests/docs/check.py $(B)/evictd
	python3 tests/docs/routes.py

test-more:: test-docs
