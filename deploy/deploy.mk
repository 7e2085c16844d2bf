# Deployment targets: `make install` (PREFIX, DESTDIR), `make uninstall`,
# `make image-test` (container images built and run with podman, the
# sidecar pair started from compose.yaml and kubernetes.yaml; root) and
# `make lint-deploy` (manifests, unit, man page, install; part of `make check`).

PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
# systemd reads units from /usr/local/lib/systemd/system too, so the unit
# follows PREFIX by default; packagers set UNITDIR=/lib/systemd/system.
UNITDIR ?= $(PREFIX)/lib/systemd/system

.PHONY: install uninstall image-test lint-deploy

# Double-colon, so that other parts (clients) can install their own files.
# The unit and the man page name the binary by its default path; sed points
# them at BINDIR and UNITDIR.
install:: $(B)/evictd $(B)/evictd-eval
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(UNITDIR)
	install -m 0755 $(B)/evictd $(DESTDIR)$(BINDIR)/evictd
	install -m 0755 $(B)/evictd-eval $(DESTDIR)$(BINDIR)/evictd-eval
	sed -e 's#/usr/local/lib/systemd/system#$(UNITDIR)#g' \
	    -e 's#/usr/local/bin/evictd#$(BINDIR)/evictd#g' deploy/evictd.8 \
	  >$(DESTDIR)$(MANDIR)/man8/evictd.8.tmp
	chmod 0644 $(DESTDIR)$(MANDIR)/man8/evictd.8.tmp
	mv -f $(DESTDIR)$(MANDIR)/man8/evictd.8.tmp $(DESTDIR)$(MANDIR)/man8/evictd.8
	sed -e 's#/usr/local/bin/evictd#$(BINDIR)/evictd#g' deploy/evictd.service \
	  >$(DESTDIR)$(UNITDIR)/evictd.service.tmp
	chmod 0644 $(DESTDIR)$(UNITDIR)/evictd.service.tmp
	mv -f $(DESTDIR)$(UNITDIR)/evictd.service.tmp $(DESTDIR)$(UNITDIR)/evictd.service

uninstall::
	rm -f $(DESTDIR)$(BINDIR)/evictd $(DESTDIR)$(BINDIR)/evictd-eval \
	  $(DESTDIR)$(MANDIR)/man8/evictd.8 \
	  $(DESTDIR)$(UNITDIR)/evictd.service

# The evictd image alone, then the pair (deploy/llama/image/image.mk).
image-test:
	deploy/image-test.sh
	@$(MAKE) --no-print-directory pair-test

lint-deploy: $(B)/evictd
	@deploy/deps.sh lint
	@MAKE="$(MAKE)" deploy/lint.sh $(B)

test-more:: lint-deploy
