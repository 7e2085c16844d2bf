# The HTTP tests: the real daemon ($(B)/evictd, passed in as EVICTD_BIN) on
# an ephemeral port, spoken to over raw sockets. The program only knows the
# wire: the one piece of daemon code it links is the wire's error table
# (apierr.o, with the buffer it writes to), which says each code's status.
HTTP_TEST_SRC := $(sort $(wildcard tests/http/*.c))
HTTP_TEST_HDR := $(wildcard tests/http/*.h tests/unit/*.h)
HTTP_TEST_OBJ := $(B)/obj/apierr.o $(B)/obj/buf.o

$(B)/test_http: $(HTTP_TEST_SRC) $(HTTP_TEST_HDR) $(HTTP_TEST_OBJ) | $(B)/obj
	$(CC) $(CFLAGS) $(PKG_CFLAGS) \
	  -DEVD_VECTORS_DIR='"$(abspath proto/vectors)"' \
	  -o $@ $(HTTP_TEST_SRC) $(HTTP_TEST_OBJ) $(LDFLAGS) $(PKG_LIBS) \
	  $(CHECK_LIBS)

TEST_PROGS += $(B)/test_http
