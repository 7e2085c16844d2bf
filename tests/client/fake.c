/* The fake daemon and the lossy relay of the C client's tests (fake.h):
 * one thread each, one connection at a time, which is all one client
 * uses. */
#include "fake.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_SEEN 256

struct fake_s {
  const fk_rule_t *rules;
  size_t nrules;
  int lfd;
  char url[64];
  pthread_t thread;
  pthread_mutex_t lock;
  volatile bool stop;
  char *seen[MAX_SEEN]; /* request lines */
  char *bodies[MAX_SEEN]; /* and their bodies */
  int nseen, conns;
};

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Waits up to ms for fd to be readable while the owner has not asked to
 * stop: 1 readable, 0 not yet, -1 stop. */
static int wait_in(int fd, int ms, volatile bool *stop) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int waited;

  for (waited = 0; waited < ms; waited += 20) {
    if (*stop)
      return -1;
    if (poll(&p, 1, 20) > 0)
      return 1;
  }
  return 0;
}

/* The length of the HTTP message at the start of buf (head and
 * Content-Length body), or 0 while it is incomplete. */
static size_t message_len(const char *buf, size_t len) {
  const char *end = memmem(buf, len, "\r\n\r\n", 4), *p;
  size_t head, body = 0;

  if (end == NULL)
    return 0;
  head = (size_t)(end - buf) + 4;
  for (p = buf; p < end; p++) {
    if ((p == buf || p[-1] == '\n') &&
        strncasecmp(p, "content-length:", 15) == 0)
      body = strtoul(p + 15, NULL, 10);
  }
  return len >= head + body ? head + body : 0;
}

/* Reads one request from fd into buf: its length, 0 on EOF, -1 on stop. */
static long read_request(fake_t *f, int fd, char *buf, size_t cap,
                         size_t *have) {
  size_t n;

  for (;;) {
    ssize_t r;
    if ((n = message_len(buf, *have)) > 0)
      return (long)n;
    if (wait_in(fd, 60000, &f->stop) < 0)
      return -1;
    r = recv(fd, buf + *have, cap - *have - 1, 0);
    if (r <= 0)
      return 0;
    *have += (size_t)r;
    buf[*have] = '\0';
  }
}

static void serve(fake_t *f, int fd) {
  static char buf[1 << 20];
  size_t have = 0;
  long n;

  while ((n = read_request(f, fd, buf, sizeof buf, &have)) > 0) {
    const fk_rule_t *rule;
    char head[256];
    int k;

    pthread_mutex_lock(&f->lock);
    k = f->nseen;
    if (f->nseen < MAX_SEEN) {
      const char *body = memmem(buf, (size_t)n, "\r\n\r\n", 4);
      f->bodies[f->nseen] =
          body != NULL ? strndup(body + 4, (size_t)(buf + n - body - 4))
                       : strdup("");
      f->seen[f->nseen++] = strndup(buf, strcspn(buf, "\r"));
    }
    pthread_mutex_unlock(&f->lock);
    rule = &f->rules[(size_t)k < f->nrules ? (size_t)k : f->nrules - 1];
    memmove(buf, buf + n, have - (size_t)n);
    have -= (size_t)n;
    switch (rule->action) {
    case FK_ANSWER:
    case FK_PARTIAL: {
      size_t blen = strlen(rule->body);
      snprintf(head, sizeof head,
               "HTTP/1.1 %d Fake\r\nContent-Type: application/json\r\n"
               "Content-Length: %zu\r\n\r\n",
               rule->status, blen);
      if (write_all(fd, head, strlen(head)) ||
          write_all(fd, rule->body,
                    rule->action == FK_PARTIAL ? blen / 2 : blen))
        return;
      if (rule->action == FK_PARTIAL)
        return;
      break;
    }
    case FK_CLOSE:
      return;
    case FK_SILENT:
      while (wait_in(fd, 100, &f->stop) >= 0) {
        char sink[4096];
        if (recv(fd, sink, sizeof sink, MSG_DONTWAIT) == 0)
          return;
      }
      return;
    }
  }
}

static void *fake_main(void *arg) {
  fake_t *f = arg;

  while (wait_in(f->lfd, 1000000, &f->stop) >= 0) {
    int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    pthread_mutex_lock(&f->lock);
    f->conns++;
    pthread_mutex_unlock(&f->lock);
    serve(f, fd);
    close(fd);
  }
  return NULL;
}

fake_t *fake_start(const fk_rule_t *rules, size_t n) {
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  fake_t *f = calloc(1, sizeof *f);

  if (f == NULL || n == 0)
    goto fail;
  f->rules = rules;
  f->nrules = n;
  pthread_mutex_init(&f->lock, NULL);
  f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) ||
      listen(f->lfd, 16) ||
      getsockname(f->lfd, (struct sockaddr *)&sa, &len))
    goto fail;
  snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d", ntohs(sa.sin_port));
  if (pthread_create(&f->thread, NULL, fake_main, f) != 0)
    goto fail;
  return f;
fail:
  if (f != NULL && f->lfd > 0)
    close(f->lfd);
  free(f);
  return NULL;
}

const char *fake_url(const fake_t *f) {
  return f->url;
}

int fake_requests(fake_t *f, const char *needle) {
  int i, n = 0;

  pthread_mutex_lock(&f->lock);
  for (i = 0; i < f->nseen; i++)
    n += needle == NULL || strstr(f->seen[i], needle) != NULL;
  pthread_mutex_unlock(&f->lock);
  return n;
}

const char *fake_body(fake_t *f, int k) {
  const char *b;

  pthread_mutex_lock(&f->lock);
  b = k >= 0 && k < f->nseen ? f->bodies[k] : NULL;
  pthread_mutex_unlock(&f->lock);
  return b;
}

int fake_connections(fake_t *f) {
  int n;

  pthread_mutex_lock(&f->lock);
  n = f->conns;
  pthread_mutex_unlock(&f->lock);
  return n;
}

void fake_stop(fake_t *f) {
  int i;

  f->stop = true;
  pthread_join(f->thread, NULL);
  close(f->lfd);
  for (i = 0; i < f->nseen; i++) {
    free(f->seen[i]);
    free(f->bodies[i]);
  }
  pthread_mutex_destroy(&f->lock);
  free(f);
}

/* ---- the relay ---------------------------------------------------------- */

struct relay_s {
  int lfd;
  char path[108], daemon_path[108];
  pthread_t thread;
  pthread_mutex_t lock;
  volatile bool stop;
  void (*lost)(void *);
  void *lost_arg;
  bool hold;
  char *lost_body;
};

static int unix_addr(struct sockaddr_un *sa, const char *path) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (strlen(path) >= sizeof sa->sun_path)
    return -1;
  strcpy(sa->sun_path, path);
  return 0;
}

/* Keeps the daemon's whole answer (reading on from what `buf` has). */
static void keep_answer(relay_t *r, int dfd, char *buf, size_t have,
                        size_t cap) {
  size_t n;
  const char *body;

  while ((n = message_len(buf, have)) == 0 && have < cap - 1 &&
         wait_in(dfd, 2000, &r->stop) > 0) {
    ssize_t got = recv(dfd, buf + have, cap - have - 1, 0);
    if (got <= 0)
      break;
    have += (size_t)got;
  }
  buf[have] = '\0';
  body = strstr(buf, "\r\n\r\n");
  pthread_mutex_lock(&r->lock);
  free(r->lost_body);
  r->lost_body = strdup(body != NULL ? body + 4 : buf);
  pthread_mutex_unlock(&r->lock);
}

/* Says nothing on the client's connection until the client closes it
 * (or the relay stops), reading and dropping whatever it sends. */
static void wait_closed(relay_t *r, int cfd) {
  char sink[4096];

  while (wait_in(cfd, 100, &r->stop) >= 0) {
    ssize_t n = recv(cfd, sink, sizeof sink, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
      return;
  }
}

/* Forwards bytes both ways until either side closes, or an answer is to
 * be lost. */
static void pump(relay_t *r, int cfd, int dfd) {
  static char buf[1 << 20];

  for (;;) {
    struct pollfd p[2] = {{.fd = cfd, .events = POLLIN},
                          {.fd = dfd, .events = POLLIN}};
    int i;

    if (r->stop || poll(p, 2, 50) < 0)
      return;
    for (i = 0; i < 2; i++) {
      ssize_t n;
      void (*lost)(void *);
      bool hold;
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      n = recv(p[i].fd, buf, sizeof buf - 1, 0);
      if (n <= 0)
        return;
      pthread_mutex_lock(&r->lock);
      lost = i == 1 ? r->lost : NULL;
      hold = i == 1 && r->hold;
      if (i == 1)
        r->lost = NULL, r->hold = false;
      pthread_mutex_unlock(&r->lock);
      if (hold) {
        keep_answer(r, dfd, buf, (size_t)n, sizeof buf);
        wait_closed(r, cfd);
        return;
      }
      if (lost != NULL) {
        keep_answer(r, dfd, buf, (size_t)n, sizeof buf);
        lost(r->lost_arg);
        return; /* both connections close: the client never sees it */
      }
      if (write_all(p[1 - i].fd, buf, (size_t)n))
        return;
    }
  }
}

static void *relay_main(void *arg) {
  relay_t *r = arg;
  struct sockaddr_un sa;

  unix_addr(&sa, r->daemon_path);
  while (wait_in(r->lfd, 1000000, &r->stop) >= 0) {
    int cfd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC), dfd;
    if (cfd < 0)
      continue;
    dfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (dfd >= 0 && connect(dfd, (struct sockaddr *)&sa, sizeof sa) == 0)
      pump(r, cfd, dfd);
    if (dfd >= 0)
      close(dfd);
    close(cfd);
  }
  return NULL;
}

relay_t *relay_start(const char *path, const char *daemon_path) {
  struct sockaddr_un sa;
  relay_t *r = calloc(1, sizeof *r);

  if (r == NULL || unix_addr(&sa, path) ||
      strlen(daemon_path) >= sizeof r->daemon_path)
    goto fail;
  strcpy(r->path, path);
  strcpy(r->daemon_path, daemon_path);
  pthread_mutex_init(&r->lock, NULL);
  unlink(path);
  r->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&sa, sizeof sa) ||
      listen(r->lfd, 16))
    goto fail;
  if (pthread_create(&r->thread, NULL, relay_main, r) != 0)
    goto fail;
  return r;
fail:
  if (r != NULL && r->lfd > 0)
    close(r->lfd);
  free(r);
  return NULL;
}

void relay_lose_next(relay_t *r, void (*lost)(void *), void *arg) {
  pthread_mutex_lock(&r->lock);
  r->lost = lost;
  r->lost_arg = arg;
  pthread_mutex_unlock(&r->lock);
}

void relay_hold_next(relay_t *r) {
  pthread_mutex_lock(&r->lock);
  r->hold = true;
  pthread_mutex_unlock(&r->lock);
}

const char *relay_lost_body(relay_t *r) {
  const char *b;

  pthread_mutex_lock(&r->lock);
  b = r->lost_body;
  pthread_mutex_unlock(&r->lock);
  return b;
}

void relay_stop(relay_t *r) {
  r->stop = true;
  pthread_join(r->thread, NULL);
  close(r->lfd);
  unlink(r->path);
  free(r->lost_body);
  pthread_mutex_destroy(&r->lock);
  free(r);
}
