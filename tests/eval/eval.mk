# The tests of evictd-eval (server/eval/, built by server/eval/eval.mk):
# tests/eval/test_eval*.c, run by `make check` and, sanitized, by `make
# asan`. `make valgrind-eval` runs its CLI over generated traces under
# valgrind memcheck; `make bench-eval` prints its figures for T = 4096
# (tests/bench/eval.sh).

BUILD_ALL  += $(B)/eval_gentrace $(B)/eval_runstat
TEST_PROGS += $(B)/test_eval $(B)/test_eval_input

# The tests link the evaluator's objects (the CLI runs in process) and a
# shared harness; test_eval runs the binary too, to measure its memory.
EVAL_TEST_DEPS := tests/eval/harness.c tests/eval/harness.h \
                  tests/eval/npy_write.h tests/unit/check_main.h \
                  $(EVAL_OBJ) $(B)/evictd-core.a $(B)/evictd-common.a \
                  $(EVAL_HDR)

$(B)/test_eval $(B)/test_eval_input: $(B)/test_%: tests/eval/test_%.c \
                                     $(EVAL_TEST_DEPS) | $(B)/evictd-eval
	$(CC) $(CFLAGS) -Iserver/eval $(PKG_CFLAGS) \
	  -DEVD_EVAL_BIN='"$(abspath $(B)/evictd-eval)"' -o $@ $< \
	  tests/eval/harness.c $(EVAL_OBJ) $(B)/evictd-core.a \
	  $(B)/evictd-common.a $(LDFLAGS) \
	  $(PKG_LIBS) $(CHECK_LIBS)

# For the benchmark and the valgrind run: a synthetic trace generator, and
# a timer that reports a child's peak RSS.
$(B)/eval_gentrace: tests/eval/gentrace.c tests/eval/npy_write.h | $(B)/obj
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lm

$(B)/eval_runstat: tests/eval/runstat.c | $(B)/obj
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

.PHONY: bench-eval valgrind-eval
bench-eval: $(B)/evictd-eval $(B)/eval_gentrace $(B)/eval_runstat
	tests/bench/eval.sh $(B)/evictd-eval $(B)/eval_gentrace $(B)/eval_runstat

valgrind-eval: $(B)/evictd-eval $(B)/eval_gentrace
	@deploy/deps.sh bench
	tests/eval/valgrind.sh $(B)/evictd-eval $(B)/eval_gentrace

# `make valgrind` covers the evaluator too.
valgrind: valgrind-eval
