/* The HTTP tests' client: connecting, writing requests, and a response
 * parser strict enough that a framing mistake by the daemon shows up as a
 * failed read rather than as a confusing later test failure. */
#include "client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- connecting --------------------------------------------------------- */

static int connect_unix(const char *path) {
  struct sockaddr_un sa;
  int fd;

  if (strlen(path) >= sizeof sa.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

static int connect_inet(const char *addr) {
  char host[256];
  const char *h = addr, *port;
  size_t hlen;
  struct addrinfo hints, *res, *ai;
  int fd = -1, e = ECONNREFUSED;

  if (addr[0] == '[') {
    const char *end = strchr(addr, ']');
    if (end == NULL || end[1] != ':')
      goto bad;
    h = addr + 1;
    hlen = (size_t)(end - h);
    port = end + 2;
  } else {
    const char *colon = strrchr(addr, ':');
    if (colon == NULL)
      goto bad;
    hlen = (size_t)(colon - addr);
    port = colon + 1;
  }
  if (hlen == 0 || hlen >= sizeof host)
    goto bad;
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  if (getaddrinfo(host, port, &hints, &res) != 0)
    goto bad;
  for (ai = res; ai != NULL; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                ai->ai_protocol);
    if (fd < 0) {
      e = errno;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      /* Requests often go out in two writes (head, then body): without
       * this, Nagle's algorithm holds the second one back until the
       * daemon's delayed ACK, some 40 ms per request. */
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      break;
    }
    e = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0)
    errno = e;
  return fd;
bad:
  errno = EINVAL;
  return -1;
}

int hc_connect(hc_conn_t *c, const char *addr, int timeout_s) {
  int fd;

  memset(c, 0, sizeof *c);
  c->fd = -1;
  if (strncmp(addr, "unix:", 5) == 0)
    fd = connect_unix(addr + 5);
  else
    fd = connect_inet(addr);
  if (fd < 0)
    return -1;
  if (timeout_s > 0) {
    struct timeval tv = {.tv_sec = timeout_s, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  c->fd = fd;
  return 0;
}

void hc_close(hc_conn_t *c) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  free(c->rbuf);
  c->rbuf = NULL;
  c->rlen = c->rcap = 0;
}

/* ---- writing ------------------------------------------------------------ */

int hc_write_all(hc_conn_t *c, const void *buf, size_t n) {
  const char *p = buf;

  while (n > 0) {
    /* MSG_NOSIGNAL: a daemon that hung up must fail the test, not kill it. */
    ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int hc_send(hc_conn_t *c, const char *method, const char *path,
            const char *extra_headers, const char *body, size_t len,
            size_t chunk) {
  char head[4096];
  int n;

  if (chunk > 0)
    n = snprintf(head, sizeof head,
                 "%s %s HTTP/1.1\r\nHost: evictd.test\r\n%s"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 method, path, extra_headers ? extra_headers : "");
  else if (body != NULL)
    n = snprintf(head, sizeof head,
                 "%s %s HTTP/1.1\r\nHost: evictd.test\r\n%s"
                 "Content-Length: %zu\r\n\r\n",
                 method, path, extra_headers ? extra_headers : "", len);
  else
    n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: evictd.test\r\n%s\r\n",
                 method, path, extra_headers ? extra_headers : "");
  if (n < 0 || (size_t)n >= sizeof head) {
    errno = E2BIG;
    return -1;
  }
  if (hc_write_all(c, head, (size_t)n) != 0)
    return -1;
  if (chunk == 0)
    return body != NULL && len > 0 ? hc_write_all(c, body, len) : 0;
  while (len > 0) {
    size_t k = len < chunk ? len : chunk;
    char size_line[32];
    n = snprintf(size_line, sizeof size_line, "%zx\r\n", k);
    if (hc_write_all(c, size_line, (size_t)n) != 0 ||
        hc_write_all(c, body, k) != 0 || hc_write_all(c, "\r\n", 2) != 0)
      return -1;
    body += k;
    len -= k;
  }
  return hc_write_all(c, "0\r\n\r\n", 5);
}

/* ---- reading ------------------------------------------------------------ */

/* Reads more bytes into rbuf. Returns the count, 0 on EOF, -1 on error. */
static ssize_t fill(hc_conn_t *c) {
  ssize_t n;

  if (c->rcap - c->rlen < 4096) {
    size_t cap = c->rcap ? c->rcap * 2 : 8192;
    char *p = realloc(c->rbuf, cap);
    if (p == NULL)
      return -1;
    c->rbuf = p;
    c->rcap = cap;
  }
  do
    n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
  while (n < 0 && errno == EINTR);
  if (n == 0)
    c->peer_closed = 1;
  if (n > 0)
    c->rlen += (size_t)n;
  return n;
}

/* Drops the first n buffered bytes. */
static void consume(hc_conn_t *c, size_t n) {
  memmove(c->rbuf, c->rbuf + n, c->rlen - n);
  c->rlen -= n;
}

/* Ensures a CRLF-terminated line is buffered; returns its length without
 * the CRLF, or -1 when the connection ended first. */
static ssize_t need_line(hc_conn_t *c) {
  for (;;) {
    char *eol = c->rlen > 0 ? memmem(c->rbuf, c->rlen, "\r\n", 2) : NULL;
    if (eol != NULL)
      return eol - c->rbuf;
    if (fill(c) <= 0)
      return -1;
  }
}

/* Ensures n bytes are buffered. Returns 0 or -1. */
static int need_bytes(hc_conn_t *c, size_t n) {
  while (c->rlen < n)
    if (fill(c) <= 0)
      return -1;
  return 0;
}

static int add_body(hc_response_t *r, const char *p, size_t n) {
  char *b = realloc(r->body, r->body_len + n + 1);

  if (b == NULL)
    return -1;
  memcpy(b + r->body_len, p, n);
  r->body = b;
  r->body_len += n;
  r->body[r->body_len] = '\0';
  return 0;
}

/* Parses "Name: value" into r->headers. */
static int add_header(hc_response_t *r, const char *line, size_t n) {
  const char *colon = memchr(line, ':', n), *v, *end = line + n;
  hc_header_t *h;

  if (colon == NULL || colon == line)
    return -1;
  h = realloc(r->headers, (r->nheaders + 1) * sizeof *h);
  if (h == NULL)
    return -1;
  r->headers = h;
  for (v = colon + 1; v < end && (*v == ' ' || *v == '\t'); v++)
    ;
  while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
    end--;
  h[r->nheaders].name = strndup(line, (size_t)(colon - line));
  h[r->nheaders].value = strndup(v, (size_t)(end - v));
  r->nheaders++;
  return h[r->nheaders - 1].name && h[r->nheaders - 1].value ? 0 : -1;
}

static int read_chunked(hc_conn_t *c, hc_response_t *r) {
  for (;;) {
    ssize_t n = need_line(c);
    unsigned long size;
    char *end;
    if (n < 0)
      return -1;
    errno = 0;
    size = strtoul(c->rbuf, &end, 16);
    if (end == c->rbuf || errno != 0 || (*end != ';' && *end != '\r'))
      return -1;
    consume(c, (size_t)n + 2);
    if (size == 0)
      break;
    if (need_bytes(c, size + 2) != 0 || memcmp(c->rbuf + size, "\r\n", 2))
      return -1;
    if (add_body(r, c->rbuf, size) != 0)
      return -1;
    consume(c, size + 2);
  }
  for (;;) { /* trailers, up to the empty line */
    ssize_t n = need_line(c);
    if (n < 0)
      return -1;
    consume(c, (size_t)n + 2);
    if (n == 0)
      return 0;
  }
}

int hc_read_response(hc_conn_t *c, int head, hc_response_t *r) {
  const char *te, *cl, *conn;
  char line[128];
  ssize_t n;
  int minor;

  memset(r, 0, sizeof *r);
  if (add_body(r, "", 0) != 0)
    return -1;
  n = need_line(c);
  if (n < 0)
    goto fail;
  snprintf(line, sizeof line, "%.*s", (int)n, c->rbuf);
  if (sscanf(line, "HTTP/1.%d %3d", &minor, &r->status) != 2 ||
      r->status < 100)
    goto fail;
  consume(c, (size_t)n + 2);
  while ((n = need_line(c)) > 0) {
    if (add_header(r, c->rbuf, (size_t)n) != 0)
      goto fail;
    consume(c, (size_t)n + 2);
  }
  if (n < 0)
    goto fail;
  consume(c, 2);
  te = hc_header(r, "Transfer-Encoding");
  cl = hc_header(r, "Content-Length");
  conn = hc_header(r, "Connection");
  r->conn_close = conn != NULL && strcasecmp(conn, "close") == 0;
  r->has_length = cl != NULL;
  if (head || r->status == 204 || r->status == 304 || r->status < 200) {
    /* No body, whatever the headers announce. */
  } else if (te != NULL && strcasecmp(te, "chunked") == 0) {
    r->chunked = 1;
    if (read_chunked(c, r) != 0)
      goto fail;
  } else if (cl != NULL) {
    char *end;
    unsigned long long len = strtoull(cl, &end, 10);
    if (end == cl || *end != '\0' || need_bytes(c, (size_t)len) != 0 ||
        add_body(r, c->rbuf, (size_t)len) != 0)
      goto fail;
    consume(c, (size_t)len);
  } else { /* delimited by the end of the connection */
    ssize_t got;
    while ((got = fill(c)) > 0)
      ;
    if (got < 0 || add_body(r, c->rbuf, c->rlen) != 0)
      goto fail;
    consume(c, c->rlen);
  }
  c->responses++;
  return 0;
fail:
  hc_response_free(r);
  return -1;
}

int hc_request(hc_conn_t *c, const char *method, const char *path,
               const char *body, hc_response_t *r) {
  memset(r, 0, sizeof *r);
  if (hc_send(c, method, path, NULL, body, body ? strlen(body) : 0, 0) != 0)
    return -1;
  return hc_read_response(c, strcmp(method, "HEAD") == 0, r);
}

const char *hc_header(const hc_response_t *r, const char *name) {
  size_t i;

  for (i = 0; i < r->nheaders; i++)
    if (strcasecmp(r->headers[i].name, name) == 0)
      return r->headers[i].value;
  return NULL;
}

size_t hc_header_count(const hc_response_t *r, const char *name) {
  size_t i, n = 0;

  for (i = 0; i < r->nheaders; i++)
    n += strcasecmp(r->headers[i].name, name) == 0;
  return n;
}

void hc_response_free(hc_response_t *r) {
  size_t i;

  for (i = 0; i < r->nheaders; i++) {
    free(r->headers[i].name);
    free(r->headers[i].value);
  }
  free(r->headers);
  free(r->body);
  memset(r, 0, sizeof *r);
}

int hc_wait_closed(hc_conn_t *c, int timeout_ms) {
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  char byte;
  ssize_t n;
  int rc;

  if (c->rlen > 0)
    return -1;
  do
    rc = poll(&p, 1, timeout_ms);
  while (rc < 0 && errno == EINTR);
  if (rc == 0)
    return 0;
  n = recv(c->fd, &byte, 1, 0);
  if (n == 0 || (n < 0 && errno == ECONNRESET)) {
    c->peer_closed = 1;
    return 1;
  }
  return -1;
}
