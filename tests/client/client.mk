# The C client's Check suite: the library ($(B)/libevictd-client.a) against
# the real daemon ($(B)/evictd, started through tests/http/daemon.c) and a
# fake one (fake.c) that loses answers on cue. Run by `make check` and, with
# the sanitizers, by `make asan`.
CLIENT_TEST_SRC := $(sort $(wildcard tests/client/*.c)) tests/http/daemon.c
CLIENT_TEST_HDR := $(wildcard tests/client/*.h) tests/http/daemon.h \
                   tests/unit/check_main.h

$(B)/test_client: $(CLIENT_TEST_SRC) $(CLIENT_TEST_HDR) $(B)/libevictd-client.a
	$(CC) $(CFLAGS) $(PKG_CFLAGS) $(CLIENT_CFLAGS) \
	  -DEVD_VECTORS_DIR='"$(abspath proto/vectors)"' \
	  -o $@ $(CLIENT_TEST_SRC) $(B)/libevictd-client.a \
	  $(LDFLAGS) $(CLIENT_LIBS) $(shell pkg-config --libs jansson 2>/dev/null) \
	  $(CHECK_LIBS)

TEST_PROGS += $(B)/test_client

# The C client's tests alone: `make test-client` (CK_RUN_SUITE / CK_RUN_CASE
# pick a suite or case, tests/README.md).
.PHONY: test-client
test-client: $(B)/test_client $(B)/evictd
	$(B)/test_client
