# Every unit test (tests/unit, no sockets): one Check program per module,
# each run by `make test-check-programs` (so by `make check`, and sanitized
# by `make asan`). The other Check programs (tests/http, tests/client,
# tests/eval) are built beside their harnesses, in their own fragments.
# All of them get their main() from check_main.h; tests/README.md maps
# sources to tests and says how to run one suite or case.

UNIT_HDR := $(wildcard tests/unit/*.h) $(HEADERS)

# A program may span several files: tests/unit/test_X.c holds its suite and
# main(), and the files listed as its further prerequisites below add tests
# (and shared helpers) to it. Each rule compiles every .c among its
# prerequisites into the one program.

# The policy core alone: no I/O, no libraries but Check's.
TEST_PROGS += $(B)/test_window
$(B)/test_window: tests/unit/test_window.c $(B)/evictd-core.a $(UNIT_HDR)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $(filter %.c,$^) $(B)/evictd-core.a \
	  $(LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS)
# test_window: the vectors (test_window.c), the edge cases, the engine
# operations and ring primitives, the randomized model checks, windows
# built in a given state.
$(B)/test_window: tests/unit/test_window_edges.c \
  tests/unit/test_window_engine.c tests/unit/test_window_model.c \
  tests/unit/test_window_state.c

# The daemon modules, each linking the daemon library: the session table,
# the response buffer, the API driven through evd_api_handle, pages, replay
# records, the fast path against the general one, and the state files
# (test_state: record.c, journal.c and snapshot.c).
UNIT_DAEMON_TESTS := $(B)/test_session $(B)/test_buf $(B)/test_api \
  $(B)/test_pages $(B)/test_replay $(B)/test_fastpath $(B)/test_state
TEST_PROGS += $(UNIT_DAEMON_TESTS)

$(UNIT_DAEMON_TESTS): $(B)/test_%: tests/unit/test_%.c $(B)/evictd-daemon.a $(UNIT_HDR)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $(filter %.c,$^) \
	  $(B)/evictd-daemon.a $(LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS)

# test_api: the fake client (api_harness.c), then the routes and
# PUT/GET/DELETE (test_api.c), step and batch, the vectors, the engine
# workflows, adopt and expect_newest, the idle reaper.
UNIT_API_SRC := tests/unit/api_harness.c tests/unit/test_api_step.c \
  tests/unit/test_api_vectors.c tests/unit/test_api_engine.c \
  tests/unit/test_api_adopt.c tests/unit/test_api_reaper.c
$(B)/test_api: $(UNIT_API_SRC)

# test_session: the table's cases (test_session.c), and its randomized run
# against plain arrays.
$(B)/test_session: tests/unit/test_session_model.c

# Allocation failures: the daemon's calls to malloc, realloc and calloc go
# through the test's wrappers, which fail the one it names.
TEST_PROGS += $(B)/test_oom
$(B)/test_oom: tests/unit/test_oom.c $(B)/evictd-daemon.a $(UNIT_HDR)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(B)/evictd-daemon.a \
	  -Wl,--wrap=malloc,--wrap=realloc,--wrap=calloc \
	  $(LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS)

# evictd-llama's position map (deploy/llama/common/posmap.c has no llama.cpp in
# it), against a model of the cache.
TEST_PROGS += $(B)/test_posmap
$(B)/test_posmap: tests/unit/test_posmap.c deploy/llama/common/posmap.c \
                  deploy/llama/common/posmap.h $(UNIT_HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ tests/unit/test_posmap.c deploy/llama/common/posmap.c \
	  $(LDFLAGS) $(CHECK_LIBS)
