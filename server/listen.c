/* Parsing --listen and opening the socket it names. */
#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "error.h"

#define BACKLOG 4096

static int fail_syntax(char *name, size_t len, const char *why) {
  snprintf(name, len, "%s", why);
  return EVD_EINVAL;
}

/* Returns 1 when something accepts connections on the Unix socket path. */
static int unix_in_use(const struct sockaddr_un *sa) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), live;

  if (fd < 0)
    return 1; /* cannot tell: do not touch the file */
  live = connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0 ||
         errno != ECONNREFUSED;
  close(fd);
  return live;
}

static int open_unix(const char *path, int *fd, char *name, size_t len) {
  struct sockaddr_un sa;
  struct stat st;
  int s;

  if (path[0] != '/' || strlen(path) >= sizeof sa.sun_path)
    return fail_syntax(name, len, "a unix: address needs an absolute path "
                                  "shorter than 108 bytes");
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      errno = EEXIST;
      return EVD_EIO;
    }
    if (unix_in_use(&sa)) {
      errno = EADDRINUSE;
      return EVD_EIO;
    }
    unlink(path); /* a socket left behind by a process that is gone */
  }
  s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0)
    return EVD_EIO;
  if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(s, BACKLOG) != 0) {
    int e = errno;
    close(s);
    errno = e;
    return EVD_EIO;
  }
  snprintf(name, len, "unix:%s", path);
  *fd = s;
  return 0;
}

static void format_bound(int s, char *name, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char host[INET6_ADDRSTRLEN];

  if (getsockname(s, (struct sockaddr *)&ss, &sl) != 0) {
    snprintf(name, len, "?");
    return;
  }
  if (ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    snprintf(name, len, "[%s]:%u", host, ntohs(a->sin6_port));
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    snprintf(name, len, "%s:%u", host, ntohs(a->sin_port));
  }
}

int evd_listen_open(const char *addr, int *fd, char *name, size_t len) {
  char host[256], port[8];
  const char *colon, *h = addr;
  size_t hlen;
  struct addrinfo hints, *res, *ai;
  int s = -1, err = 0, one = 1;
  char *end;
  long p;

  if (strncmp(addr, "unix:", 5) == 0)
    return open_unix(addr + 5, fd, name, len);
  if (strstr(addr, "://") != NULL)
    return fail_syntax(name, len, "an address, not a URL: host:port (e.g. "
                                  "127.0.0.1:8090), [ipv6]:port or "
                                  "unix:/path");
  if (addr[0] == '[') { /* [v6]:port */
    const char *close_br = strchr(addr, ']');
    if (close_br == NULL || close_br[1] != ':')
      return fail_syntax(name, len, "expected [ipv6-address]:port");
    h = addr + 1;
    hlen = (size_t)(close_br - h);
    colon = close_br + 1;
  } else {
    colon = strrchr(addr, ':');
    if (colon == NULL)
      return fail_syntax(name, len, "expected host:port, [ipv6]:port or "
                                    "unix:/path");
    hlen = (size_t)(colon - addr);
  }
  if (hlen == 0)
    return fail_syntax(name, len, "the host part is empty: 0.0.0.0:PORT "
                                  "listens on every IPv4 address, [::]:PORT "
                                  "on every IPv6 one, 127.0.0.1:PORT on "
                                  "loopback only");
  if (hlen >= sizeof host)
    return fail_syntax(name, len, "the host part is too long");
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  errno = 0;
  p = strtol(colon + 1, &end, 10);
  if (colon[1] == '\0' || *end != '\0' || errno != 0 || p < 0 || p > 65535)
    return fail_syntax(name, len, "the port must be a number from 0 to 65535");
  snprintf(port, sizeof port, "%ld", p);

  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  err = getaddrinfo(host, port, &hints, &res);
  if (err != 0) {
    snprintf(name, len, "cannot resolve %s: %s", host, gai_strerror(err));
    return EVD_EINVAL;
  }
  for (ai = res; ai != NULL; ai = ai->ai_next) {
    s = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               ai->ai_protocol);
    if (s < 0) {
      err = errno;
      continue;
    }
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && listen(s, BACKLOG) == 0)
      break;
    err = errno;
    close(s);
    s = -1;
  }
  freeaddrinfo(res);
  if (s < 0) {
    errno = err;
    return EVD_EIO;
  }
  format_bound(s, name, len);
  *fd = s;
  return 0;
}

void evd_listen_cleanup(const char *addr) {
  if (strncmp(addr, "unix:", 5) == 0)
    unlink(addr + 5);
}
