/* `evictd --probe URL`: one blocking GET with a deadline. It runs instead of
 * the daemon, so plain blocking sockets with poll() are fine here. */
#include "evictd/probe.h"

#include <errno.h>
#include <fcntl.h>
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
                       const char **path, long long deadline) {
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
  if (strncmp(url, "http://", 7) != 0)
    return -1;
  p = url + 7;
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

int evd_probe(const char *url, int timeout_ms) {
  long long deadline = now_ms() + timeout_ms;
  char host[300], req[512], resp[64];
  const char *path = "/healthz";
  size_t sent = 0, got = 0;
  int fd, len, status;

  fd = connect_url(url, host, sizeof host, &path, deadline);
  if (fd < 0) {
    fprintf(stderr, "evictd: probe: cannot connect to %s\n", url);
    return 1;
  }
  len = snprintf(req, sizeof req,
                 "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                 path, host);
  while (len > 0 && sent < (size_t)len) {
    ssize_t n = send(fd, req + sent, (size_t)len - sent, MSG_NOSIGNAL);
    if (n > 0)
      sent += (size_t)n;
    else if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLOUT, deadline) == 0)
      continue;
    else
      break;
  }
  while (sent == (size_t)len && got < sizeof resp - 1 &&
         memchr(resp, '\n', got) == NULL) {
    ssize_t n = recv(fd, resp + got, sizeof resp - 1 - got, 0);
    if (n > 0)
      got += (size_t)n;
    else if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLIN, deadline) == 0)
      continue;
    else
      break;
  }
  close(fd);
  resp[got] = '\0';
  if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1) {
    fprintf(stderr, "evictd: probe: no HTTP answer from %s\n", url);
    return 1;
  }
  if (status != 200) {
    fprintf(stderr, "evictd: probe: %s answered %d\n", url, status);
    return 1;
  }
  return 0;
}
