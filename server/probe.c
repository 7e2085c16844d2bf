/* `evictd --probe URL`: one blocking GET with a deadline, over TLS (GnuTLS,
 * the certificate unverified, as Kubernetes' HTTPS probes do) for https://
 * URLs. It runs instead of the daemon, so plain blocking sockets with
 * poll() are fine here. */
#include "probe.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for `events` on fd until the deadline. Returns 0 or -1. */
static int wait_fd(int fd, short events, long long deadline) {
  struct pollfd p = {.fd = fd, .events = events};
  long long left = deadline - now_ms();

  if (left <= 0)
    return -1;
  return poll(&p, 1, (int)left) == 1 ? 0 : -1;
}

/* Non-blocking connect with a deadline. Returns the socket or -1. */
static int dial(const struct sockaddr *sa, socklen_t len, int family,
                long long deadline) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), err;
  socklen_t el = sizeof err;

  if (fd < 0)
    return -1;
  if (connect(fd, sa, len) == 0)
    return fd;
  if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
    return fd;
  close(fd);
  return -1;
}

static int connect_url(const char *url, char *host_hdr, size_t hlen,
                       const char **path, int *tls, long long deadline) {
  char host[256], port[8] = "80";
  const char *p, *end;
  struct addrinfo hints, *res, *ai;
  int fd = -1;

  if (strncmp(url, "unix:", 5) == 0) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(url + 5) >= sizeof sa.sun_path)
      return -1;
    strcpy(sa.sun_path, url + 5);
    snprintf(host_hdr, hlen, "localhost");
    *path = "/healthz";
    return dial((struct sockaddr *)&sa, sizeof sa, AF_UNIX, deadline);
  }
  *tls = strncmp(url, "https://", 8) == 0;
  if (*tls)
    strcpy(port, "443");
  else if (strncmp(url, "http://", 7) != 0)
    return -1;
  p = url + (*tls ? 8 : 7);
  end = p + strcspn(p, "/");
  *path = *end ? end : "/healthz";
  snprintf(host_hdr, hlen, "%.*s", (int)(end - p), p);
  if (*p == '[') { /* [v6]:port */
    const char *rb = memchr(p, ']', (size_t)(end - p));
    if (rb == NULL)
      return -1;
    snprintf(host, sizeof host, "%.*s", (int)(rb - p - 1), p + 1);
    if (rb[1] == ':')
      snprintf(port, sizeof port, "%.*s", (int)(end - rb - 2), rb + 2);
  } else {
    const char *colon = memchr(p, ':', (size_t)(end - p));
    snprintf(host, sizeof host, "%.*s",
             (int)((colon ? colon : end) - p), p);
    if (colon != NULL)
      snprintf(port, sizeof port, "%.*s", (int)(end - colon - 1), colon + 1);
  }
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  if (getaddrinfo(host, port, &hints, &res) != 0)
    return -1;
  for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
    fd = dial(ai->ai_addr, ai->ai_addrlen, ai->ai_family, deadline);
  freeaddrinfo(res);
  return fd;
}

/* The transport under the request: the socket, or a TLS session on it. */
typedef struct {
  int fd;
  gnutls_session_t tls;
  long long deadline;
} link_t;

/* Sends or receives at most n bytes; > 0, or -1 at an error or the
 * deadline. */
static ssize_t link_io(link_t *l, int send_it, void *buf, size_t n) {
  for (;;) {
    ssize_t r;
    short ev = send_it ? POLLOUT : POLLIN;
    if (l->tls != NULL) {
      r = send_it ? gnutls_record_send(l->tls, buf, n)
                  : gnutls_record_recv(l->tls, buf, n);
      if (r > 0)
        return r;
      if (r != GNUTLS_E_AGAIN && r != GNUTLS_E_INTERRUPTED)
        return -1;
      ev = gnutls_record_get_direction(l->tls) ? POLLOUT : POLLIN;
    } else {
      r = send_it ? send(l->fd, buf, n, MSG_NOSIGNAL) : recv(l->fd, buf, n, 0);
      if (r > 0)
        return r;
      if (r == 0 || (errno != EAGAIN && errno != EINTR))
        return -1;
    }
    if (wait_fd(l->fd, ev, l->deadline) != 0)
      return -1;
  }
}

/* A TLS client session over fd with SNI for host; 0, or -1 at an error. */
static int tls_start(link_t *l, gnutls_certificate_credentials_t cred,
                     const char *host) {
  int r;

  if (gnutls_init(&l->tls, GNUTLS_CLIENT | GNUTLS_NONBLOCK) < 0)
    return -1;
  if (gnutls_set_default_priority(l->tls) < 0 ||
      gnutls_credentials_set(l->tls, GNUTLS_CRD_CERTIFICATE, cred) < 0)
    return -1;
  if (host[0] != '\0' && host[0] != '[')
    gnutls_server_name_set(l->tls, GNUTLS_NAME_DNS, host, strlen(host));
  gnutls_transport_set_int(l->tls, l->fd);
  gnutls_handshake_set_timeout(l->tls, GNUTLS_DEFAULT_HANDSHAKE_TIMEOUT);
  while ((r = gnutls_handshake(l->tls)) < 0) {
    if (gnutls_error_is_fatal(r) ||
        wait_fd(l->fd, gnutls_record_get_direction(l->tls) ? POLLOUT : POLLIN,
                l->deadline) != 0)
      return -1;
  }
  return 0;
}

int evd_probe(const char *url, int timeout_ms) {
  link_t l = {.deadline = now_ms() + timeout_ms};
  gnutls_certificate_credentials_t cred = NULL;
  char host[300], name[300], req[512], resp[64];
  const char *path = "/healthz";
  size_t sent = 0, got = 0;
  int len, status, tls = 0, ok = 0;

  if (strncmp(url, "unix:", 5) != 0 && strncmp(url, "http://", 7) != 0 &&
      strncmp(url, "https://", 8) != 0) {
    fprintf(stderr, "evictd: probe: '%s' is not a URL: --probe takes "
            "http://HOST:PORT/healthz, https://... or unix:/path (e.g. "
            "http://%s/healthz)\n", url, url);
    return 2;
  }
  l.fd = connect_url(url, host, sizeof host, &path, &tls, l.deadline);
  if (l.fd < 0) {
    fprintf(stderr, "evictd: probe: cannot connect to %s\n", url);
    return 1;
  }
  if (tls) {
    /* SNI takes the host without its port. */
    snprintf(name, sizeof name, "%s", host);
    if (name[0] != '[')
      name[strcspn(name, ":")] = '\0';
    if (gnutls_certificate_allocate_credentials(&cred) < 0 ||
        tls_start(&l, cred, name) != 0) {
      fprintf(stderr, "evictd: probe: TLS handshake with %s failed\n", url);
      goto done;
    }
  }
  len = snprintf(req, sizeof req,
                 "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                 path, host);
  while (len > 0 && sent < (size_t)len) {
    ssize_t n = link_io(&l, 1, req + sent, (size_t)len - sent);
    if (n <= 0)
      break;
    sent += (size_t)n;
  }
  while (sent == (size_t)len && got < sizeof resp - 1 &&
         memchr(resp, '\n', got) == NULL) {
    ssize_t n = link_io(&l, 0, resp + got, sizeof resp - 1 - got);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  resp[got] = '\0';
  if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1)
    fprintf(stderr, "evictd: probe: no HTTP answer from %s\n", url);
  else if (status != 200)
    fprintf(stderr, "evictd: probe: %s answered %d\n", url, status);
  else
    ok = 1;
done:
  if (l.tls != NULL)
    gnutls_deinit(l.tls);
  if (cred != NULL)
    gnutls_certificate_free_credentials(cred);
  close(l.fd);
  return ok ? 0 : 1;
}
