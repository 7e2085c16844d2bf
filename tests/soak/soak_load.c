/* Soak load for evictd: full-speed churn over a fixed number of session
 * slots from several keep-alive connections, every answer checked, with
 * latency, request rate and the daemon's resident memory reported.
 *
 * Each connection owns the slots i with i % conns == its number, so that
 * nobody else touches its sessions and it always knows the answer to
 * expect. A slot holds one session at a time: created (PUT, or a step that
 * creates it), stepped for a random number of requests (single positions,
 * several at once, batches over several of the connection's sessions, now
 * and then a GET or an evict), then deleted; its next session gets a new
 * id. One request per connection is in flight at a time.
 *
 * Usage: soak_load PORT PID SECONDS WARMUP [CONNS [SESSIONS [MAX_GROWTH]]]
 * PID is the daemon's, for VmRSS (/proc/PID/status), read once the warm-up
 * is over and again at the end. MAX_GROWTH (percent, default 2; negative:
 * do not judge memory) bounds the growth between the two. Exits 0 when no
 * answer was unexpected and memory stayed within the bound, else 1. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define OUT_CAP 16384
#define IN_CAP 262144
#define MAX_CONNS 256
#define BATCH_MAX 32
/* Latency buckets of 10 us up to 2 s; slower answers land in the last. */
#define LAT_STEP_US 10
#define LAT_BUCKETS 200000

enum kind { K_PUT, K_CREATE_STEP, K_STEP, K_BATCH, K_GET, K_EVICT, K_DELETE };
static const char *const kind_name[] = {"PUT", "create-step", "step",
                                        "batch", "GET", "evict", "DELETE"};

typedef struct {
  uint32_t gen;    /* the id is soak-<slot>-<gen> */
  uint32_t newest; /* the newest position it holds */
  uint32_t budget;
  uint32_t left; /* requests until it is deleted */
  int live;
} slot_t;

typedef struct {
  int fd;
  char out[OUT_CAP];
  size_t out_len, out_off;
  char in[IN_CAP];
  size_t in_len;
  uint32_t *slots; /* the slots this connection owns */
  size_t nslots, cursor;
  /* The request in flight. */
  enum kind kind;
  int want_status;
  uint32_t want_newest; /* checked in a step's answer */
  uint32_t batch[BATCH_MAX], nbatch;
  struct timespec t0;
} conn_t;

static slot_t *slots;
static uint32_t nsessions, nconns;
static conn_t *conns;
static int ep;
static struct sockaddr_in addr;
static uint64_t lat[7][LAT_BUCKETS]; /* per kind of request */
static uint64_t requests, per_kind[7], batch_items, created, deleted, errors;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n) {
  /* xorshift64*: plenty for picking actions. */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 2685821657736338717ull) >> 33) % n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void error_at(const conn_t *c, const char *what, const char *detail) {
  errors++;
  if (errors <= 20)
    fprintf(stderr, "soak_load: %s: %s%s%.300s\n", kind_name[c->kind], what,
            detail ? ": " : "", detail ? detail : "");
  else if (errors == 21)
    fprintf(stderr, "soak_load: (further errors not shown)\n");
}

static long rss_kb(int pid) {
  char path[64], line[256];
  long kb = -1;
  FILE *f;

  snprintf(path, sizeof path, "/proc/%d/status", pid);
  f = fopen(path, "r");
  if (f == NULL)
    return -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %ld", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

/* ---- connections -------------------------------------------------------- */

static void conn_open(conn_t *c) {
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT};
  int one = 1;

  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    perror("soak_load: connect");
    exit(1);
  }
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(c->fd, F_SETFL, O_NONBLOCK);
  ev.data.ptr = c;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
    perror("soak_load: epoll_ctl");
    exit(1);
  }
  c->in_len = 0;
}

/* After a broken connection: the sessions the lost request touched are in
 * an unknown state, so their slots move on to fresh ids. */
static void conn_reset(conn_t *c) {
  uint32_t i;

  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  for (i = 0; i < c->nbatch; i++) {
    slots[c->batch[i]].live = 0;
    slots[c->batch[i]].gen++;
  }
  conn_open(c);
}

/* ---- requests ----------------------------------------------------------- */

static int id_of(char *buf, size_t len, uint32_t s) {
  return snprintf(buf, len, "soak-%u-%u", s, slots[s].gen);
}

static void put_request(conn_t *c, const char *method, const char *path,
                        const char *body, size_t blen) {
  int n = snprintf(c->out, OUT_CAP,
                   "%s %s HTTP/1.1\r\nHost: evictd\r\nContent-Type: "
                   "application/json\r\nContent-Length: %zu\r\n\r\n",
                   method, path, blen);
  if (n < 0 || (size_t)n + blen > OUT_CAP) {
    fprintf(stderr, "soak_load: request too large\n");
    exit(1);
  }
  memcpy(c->out + n, body, blen);
  c->out_len = (size_t)n + blen;
  c->out_off = 0;
}

/* Appends positions above the slot's newest to body; returns the length. */
static size_t add_positions(char *body, size_t at, size_t cap, slot_t *s,
                            uint32_t n) {
  uint32_t i;

  for (i = 0; i < n; i++) {
    s->newest += 1 + rnd(3);
    at += (size_t)snprintf(body + at, cap - at, "%s%u", i ? "," : "",
                           s->newest);
  }
  return at;
}

static void new_request(conn_t *c) {
  char path[128], body[OUT_CAP - 512], id[64];
  uint32_t si = c->slots[c->cursor], r = rnd(100), i, n;
  slot_t *s = &slots[si];
  size_t len = 0;

  c->cursor = (c->cursor + 1) % c->nslots;
  c->nbatch = 1;
  c->batch[0] = si;
  id_of(id, sizeof id, si);
  if (!s->live) {
    static const uint32_t budgets[] = {8, 16, 32, 64, 128, 256, 512};
    s->budget = budgets[rnd(7)];
    s->newest = 0;
    s->left = 5 + rnd(60);
    s->live = 1;
    created++;
    if (r < 50) {
      c->kind = K_PUT;
      c->want_status = 201;
      snprintf(path, sizeof path, "/session/%s", id);
      len = (size_t)snprintf(body, sizeof body, "{\"budget\":%u,\"sinks\":%u}",
                             s->budget, rnd(4));
      put_request(c, "PUT", path, body, len);
    } else {
      c->kind = K_CREATE_STEP;
      c->want_status = 200;
      snprintf(path, sizeof path, "/session/%s/step", id);
      len = (size_t)snprintf(body, sizeof body, "{\"budget\":%u,\"sinks\":%u,"
                             "\"pos\":", s->budget, rnd(4));
      len = add_positions(body, len, sizeof body, s, 1);
      body[len++] = '}';
      c->want_newest = s->newest;
      put_request(c, "POST", path, body, len);
    }
    return;
  }
  if (s->left-- == 0) {
    c->kind = K_DELETE;
    c->want_status = 204;
    snprintf(path, sizeof path, "/session/%s", id);
    s->live = 0;
    s->gen++;
    deleted++;
    put_request(c, "DELETE", path, "", 0);
    return;
  }
  c->want_status = 200;
  if (r < 75) {
    c->kind = K_STEP;
    snprintf(path, sizeof path, "/session/%s/step", id);
    n = r < 65 ? 1 : 2 + rnd(15);
    len = (size_t)snprintf(body, sizeof body, n == 1 ? "{\"pos\":"
                                                     : "{\"positions\":[");
    len = add_positions(body, len, sizeof body, s, n);
    len += (size_t)snprintf(body + len, sizeof body - len, n == 1 ? "}" : "]}");
    c->want_newest = s->newest;
    put_request(c, "POST", path, body, len);
  } else if (r < 90) {
    /* A batch over this and the next live sessions of the connection. */
    c->kind = K_BATCH;
    n = 8 + rnd(BATCH_MAX - 7);
    len = (size_t)snprintf(body, sizeof body, "{\"steps\":[");
    for (i = 0, c->nbatch = 0; c->nbatch < n && i < c->nslots; i++) {
      uint32_t sj = c->slots[(c->cursor + c->nslots - 1 + i) % c->nslots];
      if (!slots[sj].live)
        continue;
      id_of(id, sizeof id, sj);
      len += (size_t)snprintf(body + len, sizeof body - len,
                              "%s{\"session\":\"%s\",\"positions\":[",
                              c->nbatch ? "," : "", id);
      len = add_positions(body, len, sizeof body, &slots[sj], 1 + rnd(4));
      len += (size_t)snprintf(body + len, sizeof body - len, "]}");
      c->batch[c->nbatch++] = sj;
    }
    len += (size_t)snprintf(body + len, sizeof body - len, "]}");
    batch_items += c->nbatch;
    put_request(c, "POST", "/step", body, len);
  } else if (r < 97) {
    c->kind = K_GET;
    snprintf(path, sizeof path, "/session/%s", id);
    put_request(c, "GET", path, "", 0);
  } else {
    c->kind = K_EVICT;
    snprintf(path, sizeof path, "/session/%s/evict", id);
    len = (size_t)snprintf(body, sizeof body, "{\"budget\":%u}",
                           1 + s->budget / 2 + rnd(s->budget / 2 + 1));
    put_request(c, "POST", path, body, len);
  }
}

/* ---- answers ------------------------------------------------------------ */

/* Length of a whole response at the front of c->in, or 0 if incomplete.
 * Sets *status and *body. */
static size_t parse(conn_t *c, int *status, const char **body, size_t *blen,
                    int *closing) {
  char *end, *p;
  size_t hlen, clen = 0;

  c->in[c->in_len] = '\0';
  end = strstr(c->in, "\r\n\r\n");
  if (end == NULL)
    return 0;
  hlen = (size_t)(end - c->in) + 4;
  if (sscanf(c->in, "HTTP/1.1 %d", status) != 1)
    *status = -1;
  *closing = 0;
  for (p = strstr(c->in, "\r\n"); p != NULL && p < end;
       p = strstr(p + 2, "\r\n")) {
    if (strncasecmp(p + 2, "Content-Length:", 15) == 0)
      clen = strtoul(p + 17, NULL, 10);
    else if (strncasecmp(p + 2, "Connection: close", 17) == 0)
      *closing = 1;
  }
  if (c->in_len < hlen + clen)
    return 0;
  *body = c->in + hlen;
  *blen = clen;
  return hlen + clen;
}

static void record_latency(const conn_t *c) {
  struct timespec t;
  uint64_t us;

  clock_gettime(CLOCK_MONOTONIC, &t);
  us = (uint64_t)(t.tv_sec - c->t0.tv_sec) * 1000000u +
       (uint64_t)(t.tv_nsec - c->t0.tv_nsec) / 1000u;
  us /= LAT_STEP_US;
  lat[c->kind][us < LAT_BUCKETS ? us : LAT_BUCKETS - 1]++;
}

static void check(conn_t *c, int status, const char *body, size_t blen) {
  char want[48], copy[512];
  size_t n = blen < sizeof copy - 1 ? blen : sizeof copy - 1;

  memcpy(copy, body, n);
  copy[n] = '\0';
  if (status != c->want_status) {
    char what[64];
    snprintf(what, sizeof what, "status %d, expected %d", status,
             c->want_status);
    error_at(c, what, copy);
    for (uint32_t i = 0; i < c->nbatch; i++) { /* states now unknown */
      slots[c->batch[i]].live = 0;
      slots[c->batch[i]].gen++;
    }
    return;
  }
  if (c->kind == K_STEP || c->kind == K_CREATE_STEP) {
    snprintf(want, sizeof want, "\"newest\":%u}", c->want_newest);
    if (blen < strlen(want) ||
        memcmp(body + blen - strlen(want), want, strlen(want)) != 0) {
      error_at(c, "wrong answer", copy);
      slots[c->batch[0]].live = 0;
      slots[c->batch[0]].gen++;
    }
  } else if (c->kind == K_BATCH) {
    if (memmem(body, blen, "\"error\"", 7) != NULL) {
      uint32_t i;
      error_at(c, "an item failed", copy);
      for (i = 0; i < c->nbatch; i++) {
        slots[c->batch[i]].live = 0;
        slots[c->batch[i]].gen++;
      }
    }
  }
}

/* Runs the load until `until`; the last call (`final`) then waits for the
 * answers still due, so that the counts add up. */
static void run(double until, int final) {
  struct epoll_event evs[MAX_CONNS];
  uint32_t i;

  for (i = 0; i < nconns; i++)
    if (conns[i].out_len == 0 && conns[i].in_len == 0) {
      new_request(&conns[i]);
      clock_gettime(CLOCK_MONOTONIC, &conns[i].t0);
    }
  while (now_s() < until) {
    int n = epoll_wait(ep, evs, MAX_CONNS, 100), k;
    for (k = 0; k < n; k++) {
      conn_t *c = evs[k].data.ptr;
      ssize_t r;
      if (c->out_off < c->out_len && (evs[k].events & EPOLLOUT)) {
        r = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                 MSG_NOSIGNAL);
        if (r > 0)
          c->out_off += (size_t)r;
        else if (r < 0 && errno != EAGAIN && errno != EINTR) {
          error_at(c, "send failed", strerror(errno));
          conn_reset(c);
          new_request(c);
          clock_gettime(CLOCK_MONOTONIC, &c->t0);
          continue;
        }
      }
      if (!(evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        continue;
      r = recv(c->fd, c->in + c->in_len, IN_CAP - 1 - c->in_len, 0);
      if (r < 0 && (errno == EAGAIN || errno == EINTR))
        continue;
      if (r <= 0) {
        error_at(c, "connection closed", r < 0 ? strerror(errno) : NULL);
        conn_reset(c);
        new_request(c);
        clock_gettime(CLOCK_MONOTONIC, &c->t0);
        continue;
      }
      c->in_len += (size_t)r;
      {
        int status, closing;
        const char *body;
        size_t blen, used = parse(c, &status, &body, &blen, &closing);
        if (used == 0) {
          if (c->in_len >= IN_CAP - 1) {
            error_at(c, "answer too large", NULL);
            conn_reset(c);
            new_request(c);
            clock_gettime(CLOCK_MONOTONIC, &c->t0);
          }
          continue;
        }
        record_latency(c);
        requests++;
        per_kind[c->kind]++;
        check(c, status, body, blen);
        if (used != c->in_len)
          error_at(c, "bytes after the answer", NULL);
        c->in_len = 0;
        c->nbatch = 0;
        if (closing) {
          error_at(c, "the daemon closed the connection", NULL);
          conn_reset(c);
        }
        if (!final || now_s() < until) {
          new_request(c);
          clock_gettime(CLOCK_MONOTONIC, &c->t0);
        } else {
          c->out_len = c->out_off = 0;
        }
      }
    }
  }
  for (; final;) {
    int busy = 0, n, k;
    for (i = 0; i < nconns; i++)
      busy += conns[i].out_len != 0;
    if (!busy)
      break;
    n = epoll_wait(ep, evs, MAX_CONNS, 30000);
    if (n <= 0) {
      fprintf(stderr, "soak_load: answers missing after 30 s\n");
      errors++;
      break;
    }
    for (k = 0; k < n; k++) {
      conn_t *c = evs[k].data.ptr;
      int status, closing;
      const char *body;
      size_t blen, used;
      ssize_t r;
      if (c->out_len == 0)
        continue;
      if (c->out_off < c->out_len) {
        r = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                 MSG_NOSIGNAL);
        if (r > 0)
          c->out_off += (size_t)r;
      }
      r = recv(c->fd, c->in + c->in_len, IN_CAP - 1 - c->in_len, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        error_at(c, "connection closed", NULL);
        c->out_len = 0;
        continue;
      }
      if (r > 0)
        c->in_len += (size_t)r;
      used = parse(c, &status, &body, &blen, &closing);
      if (used == 0)
        continue;
      record_latency(c);
      requests++;
      per_kind[c->kind]++;
      check(c, status, body, blen);
      c->in_len = 0;
      c->out_len = c->out_off = 0;
    }
  }
}

/* The session count in GET /metrics, over a connection of its own. */
static long metric_sessions(void) {
  static char buf[1 << 20];
  const char req[] = "GET /metrics HTTP/1.1\r\nHost: evictd\r\n"
                     "Connection: close\r\n\r\n";
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  size_t len = 0;
  ssize_t r;
  char *p;

  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1))
    return -1;
  while ((r = recv(fd, buf + len, sizeof buf - 1 - len, 0)) > 0)
    len += (size_t)r;
  close(fd);
  buf[len] = '\0';
  p = strstr(buf, "\nevictd_sessions ");
  return p != NULL ? strtol(p + 17, NULL, 10) : -1;
}

/* The q-quantile of the latencies of the kinds in mask (bit per kind), in
 * microseconds (the upper edge of its 10 us bucket). */
static double percentile(double q, unsigned mask) {
  uint64_t total = 0, seen = 0, n;
  size_t i;
  int k;

  for (k = 0; k < 7; k++)
    for (i = 0; mask & (1u << k) && i < LAT_BUCKETS; i++)
      total += lat[k][i];
  for (i = 0; i < LAT_BUCKETS; i++) {
    for (k = 0, n = 0; k < 7; k++)
      n += mask & (1u << k) ? lat[k][i] : 0;
    seen += n;
    if (total > 0 && (double)seen >= q * (double)total)
      return (double)((i + 1) * LAT_STEP_US);
  }
  return 0;
}

int main(int argc, char **argv) {
  double seconds, warmup, max_growth = 2.0, t0, t1;
  long rss0, rss1, rss_max = 0, live_daemon, timeline[10] = {0};
  uint64_t live = 0, req0, i;
  int pid;

  if (argc < 5) {
    fprintf(stderr, "usage: soak_load PORT PID SECONDS WARMUP [CONNS "
                    "[SESSIONS [MAX_GROWTH]]]\n");
    return 2;
  }
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)atoi(argv[1]));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  pid = atoi(argv[2]);
  seconds = atof(argv[3]);
  warmup = atof(argv[4]);
  nconns = argc > 5 ? (uint32_t)atoi(argv[5]) : 8;
  nsessions = argc > 6 ? (uint32_t)atoi(argv[6]) : 10000;
  if (argc > 7)
    max_growth = atof(argv[7]);
  if (nconns < 1 || nconns > MAX_CONNS || nsessions < nconns * BATCH_MAX) {
    fprintf(stderr, "soak_load: 1..%d connections, at least %d sessions "
                    "per connection\n", MAX_CONNS, BATCH_MAX);
    return 2;
  }
  rng_state ^= (uint64_t)getpid() << 17 ^ (uint64_t)time(NULL);
  slots = calloc(nsessions, sizeof *slots);
  conns = calloc(nconns, sizeof *conns);
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (slots == NULL || conns == NULL || ep < 0) {
    fprintf(stderr, "soak_load: out of memory\n");
    return 1;
  }
  for (i = 0; i < nconns; i++) {
    conn_t *c = &conns[i];
    c->slots = calloc(nsessions / nconns + 1, sizeof *c->slots);
    if (c->slots == NULL)
      return 1;
    conn_open(c);
  }
  for (i = 0; i < nsessions; i++) {
    conn_t *c = &conns[i % nconns];
    c->slots[c->nslots++] = (uint32_t)i;
  }

  t0 = now_s();
  run(t0 + warmup, 0);
  rss0 = rss_kb(pid);
  req0 = requests;
  memset(lat, 0, sizeof lat);
  memset(per_kind, 0, sizeof per_kind);
  batch_items = 0;
  t0 = now_s();
  /* Sample memory each second, to report the peak too. */
  for (t1 = t0; t1 < t0 + seconds;) {
    double next = t1 + 1 < t0 + seconds ? t1 + 1 : t0 + seconds;
    long kb;
    run(next, next >= t0 + seconds);
    kb = rss_kb(pid);
    if (kb > rss_max)
      rss_max = kb;
    t1 = now_s();
    timeline[(int)(10 * (t1 - t0) / seconds) < 10
                 ? (int)(10 * (t1 - t0) / seconds) : 9] = kb;
  }
  rss1 = rss_kb(pid);
  for (i = 0; i < nsessions; i++)
    live += slots[i].live;
  live_daemon = metric_sessions();

  printf("  requests      %llu in %.0f s: %.0f requests/s (batches %llu "
         "with %llu items, steps %llu, PUT %llu, create-steps %llu, "
         "GET %llu, evict %llu, DELETE %llu)\n",
         (unsigned long long)(requests - req0), t1 - t0,
         (double)(requests - req0) / (t1 - t0),
         (unsigned long long)per_kind[K_BATCH],
         (unsigned long long)batch_items, (unsigned long long)per_kind[K_STEP],
         (unsigned long long)per_kind[K_PUT],
         (unsigned long long)per_kind[K_CREATE_STEP],
         (unsigned long long)per_kind[K_GET],
         (unsigned long long)per_kind[K_EVICT],
         (unsigned long long)per_kind[K_DELETE]);
  printf("  churn         %llu sessions created, %llu deleted (warm-up "
         "included); %llu live at the end, the daemon says %ld\n",
         (unsigned long long)created, (unsigned long long)deleted,
         (unsigned long long)live, live_daemon);
  printf("  latency       p50 %.0f us, p99 %.0f us, p99.9 %.0f us (p99 of "
         "single steps %.0f us, of batches %.0f us)\n",
         percentile(0.5, 0x7f), percentile(0.99, 0x7f),
         percentile(0.999, 0x7f), percentile(0.99, 1u << K_STEP),
         percentile(0.99, 1u << K_BATCH));
  if (live_daemon != (long)live) {
    fprintf(stderr, "soak_load: the daemon holds %ld sessions, the load "
                    "left %llu\n", live_daemon, (unsigned long long)live);
    errors++;
  }
  printf("  errors        %llu\n", (unsigned long long)errors);
  if (rss0 <= 0 || rss1 <= 0) {
    printf("  memory        cannot read /proc/%d/status\n", pid);
    return 1;
  }
  printf("  memory        VmRSS %ld kB after warm-up, %ld kB at end (peak "
         "%ld kB): growth %+.2f %%%s\n",
         rss0, rss1, rss_max, 100.0 * (double)(rss1 - rss0) / (double)rss0,
         max_growth < 0 ? " (not judged)" : "");
  printf("  VmRSS (kB) at each tenth of the run:");
  for (i = 0; i < 10; i++)
    printf(" %ld", timeline[i]);
  printf("\n");
  if (errors > 0)
    return 1;
  if (max_growth >= 0 &&
      100.0 * (double)(rss1 - rss0) / (double)rss0 > max_growth) {
    fprintf(stderr, "soak_load: memory grew by more than %.1f %%\n",
            max_growth);
    return 1;
  }
  return 0;
}
