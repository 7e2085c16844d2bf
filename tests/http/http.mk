# The HTTP tests: the real daemon ($(B)/evictd, passed in as EVICTD_BIN) on
# an ephemeral port, spoken to over raw sockets. The program links no daemon
# code: it only knows the wire.
HTTP_TEST_SRC := $(sort $(wildcard tests/http/*.c))
HTTP_TEST_HDR := $(wildcard tests/http/*.h)

$(B)/test_http: $(HTTP_TEST_SRC) $(HTTP_TEST_HDR) | $(B)/obj
	$(CC) $(CFLAGS) $(PKG_CFLAGS) \
	  -DEVD_VECTORS_DIR='"$(abspath proto/vectors)"' \
	  -o $@ $(HTTP_TEST_SRC) $(LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS)

TEST_PROGS += $(B)/test_http
