# evictd container image: a Debian build stage that compiles the daemon, and
# a slim runtime stage holding only the binary and the shared libraries it
# links (libuv, libmicrohttpd, jansson, GnuTLS), run as an unprivileged user.
#
#   podman build --isolation=chroot --format docker -t evictd .   (or docker build)
#   docker run --rm -p 8090:8090 evictd
#
# The HEALTHCHECK probes 127.0.0.1:8090, the port of the default CMD; if you
# pass another --listen, override it too (docker run --health-cmd ...).

FROM debian:bookworm AS build
WORKDIR /src
# The package list lives in deploy/deps.sh (group "build"), the same one the
# Makefile uses on a developer machine; copying it alone first keeps this
# layer cached across source changes.
COPY deploy/deps.sh deploy/deps.sh
RUN deploy/deps.sh build && rm -rf /var/lib/apt/lists/*
COPY Makefile ./
COPY include include
COPY server server
RUN make B=/out /out/evictd && strip --strip-unneeded /out/evictd

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libuv1 libmicrohttpd12 libjansson4 libgnutls30 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 evictd \
 && useradd --system --uid 10001 --gid evictd --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin evictd \
 && install -d -o evictd -g evictd -m 0700 /var/lib/evictd \
 && install -d -o evictd -g evictd -m 0755 /run/evictd
COPY --from=build /out/evictd /usr/local/bin/evictd
# Numeric, so that Kubernetes can verify runAsNonRoot without /etc/passwd.
USER 10001:10001
# For --state-dir /var/lib/evictd: mount a volume here (owned by 10001, so a
# fresh named volume is writable; the root file system can stay read-only).
# Likewise /run/evictd for --listen unix:/run/evictd/evictd.sock, the socket
# volume shared with the engine (deploy/compose.yaml, kubernetes.yaml).
WORKDIR /var/lib/evictd
EXPOSE 8090
HEALTHCHECK --interval=10s --timeout=6s --start-period=5s --retries=3 \
  CMD ["evictd", "--probe", "http://127.0.0.1:8090/healthz"]
ENTRYPOINT ["evictd"]
CMD ["--listen", "0.0.0.0:8090"]
