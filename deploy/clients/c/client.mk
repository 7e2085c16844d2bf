# The C client library (include/evictd/client.h, deploy/clients/c/):
# $(B)/libevictd-client.a and $(B)/libevictd-client.so (soname
# libevictd-client.so.0), both from -fPIC objects of their own, and
# evictd-client.pc. It links libcurl (Debian's GnuTLS flavour), not the
# daemon; `make install` puts the header, both libraries and the .pc under
# PREFIX.

CLIENT_SRC := $(sort $(wildcard deploy/clients/c/*.c))
CLIENT_HDR := include/evictd/client.h $(wildcard deploy/clients/c/*.h)
CLIENT_OBJ := $(CLIENT_SRC:deploy/clients/c/%.c=$(B)/client/%.o)
CLIENT_SO  := libevictd-client.so
CLIENT_SONAME := $(CLIENT_SO).0
CLIENT_REAL := $(CLIENT_SO).$(VERSION)
CLIENT_CFLAGS = $(shell pkg-config --cflags libcurl 2>/dev/null)
CLIENT_LIBS   = $(shell pkg-config --libs libcurl 2>/dev/null) -pthread
CLIENT_LIB := $(B)/libevictd-client.a $(B)/$(CLIENT_SO)

BUILD_ALL += $(CLIENT_LIB) $(B)/evictd-client.pc

$(B)/client/%.o: deploy/clients/c/%.c $(CLIENT_HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC $(CLIENT_CFLAGS) -c -o $@ $<

# Its list of members is this file's: a member added is rebuilt in.
$(B)/libevictd-client.a: $(CLIENT_OBJ) deploy/clients/c/client.mk
	rm -f $@ && ar rcs $@ $(filter %.o,$^)

# The real file, then the soname's and the linker's names pointing at it.
$(B)/$(CLIENT_SO): $(CLIENT_OBJ) deploy/clients/c/libevictd-client.map
	$(CC) -shared -Wl,-soname,$(CLIENT_SONAME) \
	  -Wl,--version-script=deploy/clients/c/libevictd-client.map \
	  -o $(B)/$(CLIENT_REAL) $(CLIENT_OBJ) $(LDFLAGS) $(CLIENT_LIBS)
	ln -sf $(CLIENT_REAL) $(B)/$(CLIENT_SONAME)
	ln -sf $(CLIENT_SONAME) $@

# evictd-client.pc for PREFIX (the build's copy and the installed one).
CLIENT_PC = sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
  deploy/clients/c/evictd-client.pc.in

$(B)/evictd-client.pc: deploy/clients/c/evictd-client.pc.in
	@mkdir -p $(@D)
	$(CLIENT_PC) >$@

PREFIX ?= /usr/local
CLIENT_LIBDIR = $(DESTDIR)$(PREFIX)/lib
CLIENT_INCDIR = $(DESTDIR)$(PREFIX)/include/evictd

install:: $(CLIENT_LIB)
	install -d $(CLIENT_INCDIR) $(CLIENT_LIBDIR)/pkgconfig
	install -m 0644 include/evictd/client.h $(CLIENT_INCDIR)/client.h
	install -m 0644 $(B)/libevictd-client.a $(CLIENT_LIBDIR)/libevictd-client.a
	install -m 0755 $(B)/$(CLIENT_REAL) $(CLIENT_LIBDIR)/$(CLIENT_REAL)
	ln -sf $(CLIENT_REAL) $(CLIENT_LIBDIR)/$(CLIENT_SONAME)
	ln -sf $(CLIENT_SONAME) $(CLIENT_LIBDIR)/$(CLIENT_SO)
	$(CLIENT_PC) >$(CLIENT_LIBDIR)/pkgconfig/evictd-client.pc.tmp
	chmod 0644 $(CLIENT_LIBDIR)/pkgconfig/evictd-client.pc.tmp
	mv -f $(CLIENT_LIBDIR)/pkgconfig/evictd-client.pc.tmp \
	  $(CLIENT_LIBDIR)/pkgconfig/evictd-client.pc

uninstall::
	rm -f $(CLIENT_INCDIR)/client.h $(CLIENT_LIBDIR)/libevictd-client.a \
	  $(CLIENT_LIBDIR)/$(CLIENT_REAL) $(CLIENT_LIBDIR)/$(CLIENT_SONAME) \
	  $(CLIENT_LIBDIR)/$(CLIENT_SO) $(CLIENT_LIBDIR)/pkgconfig/evictd-client.pc
