# The Check suites of the daemon modules (no sockets): the session table, the
# response buffer and the API driven through evd_api_handle. Each links the
# daemon library, so they run under `make asan` with everything else.

UNIT_DAEMON_TESTS := $(B)/test_session $(B)/test_buf $(B)/test_api $(B)/test_pages $(B)/test_replay
TEST_PROGS += $(UNIT_DAEMON_TESTS)

$(UNIT_DAEMON_TESTS): $(B)/test_%: tests/unit/test_%.c $(B)/evictd-daemon.a $(HEADERS)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(B)/evictd-daemon.a \
	  $(LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS)

# Allocation failures: the daemon's calls to malloc, realloc and calloc go
# through the test's wrappers, which fail the one it names.
TEST_PROGS += $(B)/test_oom
$(B)/test_oom: tests/unit/test_oom.c $(B)/evictd-daemon.a $(HEADERS)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(B)/evictd-daemon.a \
	  -Wl,--wrap=malloc,--wrap=realloc,--wrap=calloc \
	  $(LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS)
