/* The C client's side of tests/bench/client.sh: decode iterations against
 * a running daemon, one step request (1 sequence) or one batch of N steps
 * (N sequences) per iteration, timed over repetitions of --seconds each
 * after every window of 512 is filled (so each step evicts) and 100
 * iterations of warm-up. Prints
 * "rep us_per_iter=X allocs_per_iter=Y send_us=S recv_us=Z" per repetition
 * (--iters N:
 * N iterations per repetition instead, for callgrind). --work W does W us
 * of busy work per iteration besides the request, as an engine decodes:
 * after the answer, or with --async between evd_client_batch_send and
 * evd_client_batch_recv (send_us, recv_us: the time each took). With
 * --raw the
 * same requests go over a plain socket, written by hand and answers read
 * to their Content-Length without parsing: the floor under any client on
 * this machine. With --parse it
 * times the parsing of one 256-item batch answer by jansson and by the
 * client's own reader (deploy/clients/c/reader.h, answer.c), which is why
 * the client has one. Not a test: it prints figures. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../deploy/clients/c/reader.h"

/* Every allocation of the process, libcurl's and GnuTLS's included: the
 * executable's malloc wins over libc's for every library. (Not under
 * AddressSanitizer, which has its own.) */
static unsigned long allocs;
#ifndef __SANITIZE_ADDRESS__
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
void *malloc(size_t n) {
  allocs++;
  return __libc_malloc(n);
}
void *calloc(size_t n, size_t m) {
  allocs++;
  return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
  allocs++;
  return __libc_realloc(p, n);
}
#endif

static double now(void);

/* W microseconds of work that is not the client's (a spin on the clock). */
static void work(double us) {
  double end = now() + us * 1e-6;

  while (now() < end)
    ;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(evd_client_t *c, const char *what) {
  fprintf(stderr, "bench_client: %s: %s\n", what,
          c != NULL ? evd_client_error(c)->message : "");
  exit(1);
}

/* The answer the daemon gives a 256-step batch in steady state. */
static char *batch_answer(size_t n, size_t *len) {
  char *b = malloc(n * 96 + 32);
  size_t i, k = 0;

  k += (size_t)sprintf(b + k, "{\"results\":[");
  for (i = 0; i < n; i++)
    k += (size_t)sprintf(b + k,
                         "%s{\"victims\":[%zu],\"slots\":[%zu],\"size\":512,"
                         "\"newest\":%zu}",
                         i ? "," : "", 100000 + i, i % 513, 100512 + i);
  k += (size_t)sprintf(b + k, "]}");
  *len = k;
  return b;
}

/* The floor: one keep-alive socket, the same requests and bodies, answers
 * read whole and not parsed. */
static int raw_fd = -1;
static char raw_buf[1 << 20], raw_req[1 << 20];

static void raw_connect(const char *url) {
  const char *colon = strrchr(url, ':');
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int one = 1;

  if (colon == NULL || strncmp(url, "http://127.0.0.1:", 17) != 0)
    die(NULL, "--raw needs http://127.0.0.1:PORT");
  sa.sin_port = htons((uint16_t)atoi(colon + 1));
  raw_fd = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(raw_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(raw_fd, (struct sockaddr *)&sa, sizeof sa) != 0)
    die(NULL, "--raw: connect");
}

static void raw_exchange(const char *path, const char *body, size_t blen) {
  size_t got = 0, n = (size_t)snprintf(
                      raw_req, sizeof raw_req,
                      "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/json\r\nContent-Length: "
                      "%zu\r\n\r\n%s",
                      path, blen, body);

  if (write(raw_fd, raw_req, n) != (ssize_t)n)
    die(NULL, "--raw: write");
  for (;;) {
    ssize_t r = read(raw_fd, raw_buf + got, sizeof raw_buf - 1 - got);
    char *end, *cl;
    if (r <= 0)
      die(NULL, "--raw: read");
    got += (size_t)r;
    raw_buf[got] = '\0';
    if ((end = strstr(raw_buf, "\r\n\r\n")) != NULL &&
        (cl = strcasestr(raw_buf, "content-length:")) != NULL &&
        got >= (size_t)(end - raw_buf) + 4 + strtoul(cl + 15, NULL, 10))
      break;
  }
  if (strncmp(raw_buf, "HTTP/1.1 200", 12) != 0 ||
      strstr(raw_buf, "\"error\"") != NULL)
    die(NULL, raw_buf);
}

static void raw_iterate(char (*ids)[32], size_t n, uint32_t p) {
  static char body[1 << 20];
  char path[128];
  size_t k = 0, i;

  if (n == 1) {
    snprintf(path, sizeof path, "/session/%s/step", ids[0]);
    k = (size_t)snprintf(body, sizeof body, "{\"pos\":%u}", p);
    raw_exchange(path, body, k);
    return;
  }
  k += (size_t)snprintf(body, sizeof body, "{\"steps\":[");
  for (i = 0; i < n; i++)
    k += (size_t)snprintf(body + k, sizeof body - k,
                          "%s{\"session\":\"%s\",\"pos\":%u}", i ? "," : "",
                          ids[i], p);
  k += (size_t)snprintf(body + k, sizeof body - k, "]}");
  raw_exchange("/step", body, k);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void parse_bench(int reps) {
  static evd_batch_result_t out[256];
  evd__arena_t arena = {0};
  double tj[16], tc[16];
  size_t len;
  char *body = batch_answer(256, &len);
  int r, k, iters = 200;

  if (reps > 16)
    reps = 16;
  for (r = 0; r < reps; r++) {
    double t0 = now();
    for (k = 0; k < iters; k++) {
      json_error_t e;
      json_t *j = json_loadb(body, len, 0, &e);
      if (j == NULL || json_array_size(json_object_get(j, "results")) != 256)
        die(NULL, "jansson");
      json_decref(j);
    }
    tj[r] = (now() - t0) / iters * 1e6;
    t0 = now();
    for (k = 0; k < iters * 10; k++) {
      evd__reader_t rd;
      if (evd__arena_fit(&arena, len))
        die(NULL, "out of memory");
      evd__reader_init(&rd, body, len, &arena);
      if (evd__read_batch(&rd, out, 256) || out[255].answer.newest != 100767)
        die(NULL, rd.why);
    }
    tc[r] = (now() - t0) / (iters * 10) * 1e6;
  }
  qsort(tj, (size_t)reps, sizeof *tj, cmp_double);
  qsort(tc, (size_t)reps, sizeof *tc, cmp_double);
  printf("parse bytes=%zu jansson_us=%.1f client_us=%.2f\n", len,
         tj[reps / 2], tc[reps / 2]);
  evd__arena_free(&arena);
  free(body);
}

int main(int argc, char **argv) {
  const char *url = NULL, *prefix = "c";
  double seconds = 1, work_us = 0, recv_s = 0, send_s = 0;
  size_t n = 1, i;
  long iters_wanted = 0;
  int reps = 5, r;
  bool raw = false, async = false;
  evd_step_t *steps;
  evd_batch_result_t *out;
  uint32_t *pos;
  char (*ids)[32];
  evd_client_opts_t o = {0};
  evd_client_t *c;
  char err[256];
  uint32_t p = 1;

  for (r = 1; r < argc; r++) {
    if (strcmp(argv[r], "--parse") == 0) {
      parse_bench(reps);
      return 0;
    } else if (strcmp(argv[r], "--raw") == 0)
      raw = true;
    else if (r + 1 < argc && strcmp(argv[r], "--url") == 0)
      url = argv[++r];
    else if (r + 1 < argc && strcmp(argv[r], "--sessions") == 0)
      n = strtoul(argv[++r], NULL, 10);
    else if (r + 1 < argc && strcmp(argv[r], "--seconds") == 0)
      seconds = atof(argv[++r]);
    else if (r + 1 < argc && strcmp(argv[r], "--reps") == 0)
      reps = atoi(argv[++r]);
    else if (r + 1 < argc && strcmp(argv[r], "--prefix") == 0)
      prefix = argv[++r];
    else if (r + 1 < argc && strcmp(argv[r], "--iters") == 0)
      iters_wanted = atol(argv[++r]);
    else if (r + 1 < argc && strcmp(argv[r], "--work") == 0)
      work_us = atof(argv[++r]);
    else if (strcmp(argv[r], "--async") == 0)
      async = true;
    else {
      fprintf(stderr, "usage: bench_client --url URL [--sessions N] "
                      "[--seconds S | --iters N] [--reps R] [--prefix P] "
                      "[--work US [--async]] [--raw] | --parse\n");
      return 2;
    }
  }
  if (url == NULL || n == 0)
    return 2;
  o.url = url;
  if (evd_client_new(&c, &o, err, sizeof err) != 0)
    die(NULL, err);
  steps = calloc(n, sizeof *steps);
  out = calloc(n, sizeof *out);
  pos = calloc(n, sizeof *pos);
  ids = calloc(n, sizeof *ids);
  for (i = 0; i < n; i++) {
    snprintf(ids[i], sizeof ids[i], "%s%zu", prefix, i);
    steps[i].session = ids[i];
    steps[i].positions = &pos[i];
    steps[i].n_positions = 1;
  }
  /* One iteration: every sequence steps its next position. */
#define ITERATE()                                                              \
  do {                                                                         \
    for (i = 0; i < n; i++)                                                    \
      pos[i] = p;                                                              \
    p++;                                                                       \
    if (raw) {                                                                 \
      raw_iterate(ids, n, p - 1);                                              \
      work(work_us);                                                           \
    } else if (async) {                                                        \
      double t_recv, t_send = now();                                           \
      if (evd_client_batch_send(c, steps, n) != 0)                             \
        die(c, "batch_send");                                                  \
      send_s += now() - t_send;                                                \
      work(work_us);                                                           \
      t_recv = now();                                                          \
      if (evd_client_batch_recv(c, out) != 0)                                  \
        die(c, "batch_recv");                                                  \
      recv_s += now() - t_recv;                                                \
      for (i = 0; i < n; i++)                                                  \
        if (out[i].rc != 0)                                                    \
          die(NULL, out[i].error.message);                                     \
    } else if (n == 1) {                                                       \
      if (evd_client_step(c, &steps[0], &out[0].answer) != 0)                  \
        die(c, "step");                                                        \
      work(work_us);                                                           \
    } else {                                                                   \
      if (evd_client_batch(c, steps, n, out) != 0)                             \
        die(c, "batch");                                                       \
      for (i = 0; i < n; i++)                                                  \
        if (out[i].rc != 0)                                                    \
          die(NULL, out[i].error.message);                                     \
      work(work_us);                                                           \
    }                                                                          \
  } while (0)
  /* Prefill: positions 1..599 in every window of 512 (32 sessions per
   * request), so that every step evicts; then a short warm-up. */
  {
    static uint32_t fill[599];
    evd_step_t one;
    for (i = 0; i < 599; i++)
      fill[i] = (uint32_t)i + 1;
    for (i = 0; i < n; i++) {
      one = steps[i];
      one.positions = fill;
      one.n_positions = 599;
      if (evd_client_step(c, &one, NULL) != 0)
        die(c, "prefill");
    }
    p = 600;
  }
  if (raw)
    raw_connect(url);
  while (p < 700)
    ITERATE();
  for (r = 0; r < reps; r++) {
    unsigned long iters = 0, a0 = allocs;
    double t0 = now(), t;
    recv_s = send_s = 0;
    do {
      ITERATE();
      iters++;
      t = now() - t0;
    } while (iters_wanted > 0 ? (long)iters < iters_wanted : t < seconds);
    printf("rep us_per_iter=%.2f allocs_per_iter=%.1f send_us=%.2f "
           "recv_us=%.2f\n",
           t / iters * 1e6, (double)(allocs - a0) / iters,
           send_s / iters * 1e6, recv_s / iters * 1e6);
  }
  if (!raw && out[0].answer.victims.n != 1)
    die(NULL, "the window did not evict");
  evd_client_free(c);
  free(steps);
  free(out);
  free(pos);
  free(ids);
  return 0;
}
