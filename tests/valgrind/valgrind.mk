# `make valgrind`: the HTTP tests (tests/http), then the restart and
# damaged-file tests of tests/durability, with every daemon they start under
# valgrind memcheck; any memory error or definite leak fails, with its
# stack printed. Takes a few minutes; not part of `make check`.
.PHONY: valgrind
valgrind: $(B)/evictd $(B)/test_http
	@deploy/deps.sh bench test
	tests/valgrind/run.sh $(B)/evictd $(B)/test_http $(B)/valgrind
