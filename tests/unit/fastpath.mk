# The fast path of step and batch bodies against the general path.
TEST_PROGS += $(B)/test_fastpath

$(B)/test_fastpath: tests/unit/test_fastpath.c $(B)/evictd-daemon.a
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $^ $(LDFLAGS) $(PKG_LIBS) $(CHECK_LIBS)
