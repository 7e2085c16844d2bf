/* The API's own cost per request, without HTTP: a decode step, the same
 * step carrying the newest it expects (expect_newest), a batch of 8 decode
 * steps (one per session), a speculative iteration (commit + 4 drafts),
 * and a fork at budget 512, each through evd_api_handle as the transport
 * calls it. Prints medians of
 * interleaved rounds; `--only NAME` runs one variant once, for callgrind
 * (api.sh). Asserts nothing about speed. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"

#define BUDGET 512u

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static evd_buf_t out;

static int call(evd_api_t *api, int method, const char *path,
                const char *body) {
  evd_request_t r = {.method = method, .path = path,
                     .path_len = strlen(path), .body = body,
                     .body_len = body != NULL ? strlen(body) : 0};
  evd_reply_t reply;

  evd_api_handle(api, &r, &out, &reply);
  return reply.status;
}

static void must(int status, int want, const char *what) {
  if (status != want) {
    fprintf(stderr, "bench_api: %s: %d %.*s\n", what, status, (int)out.len,
            out.data);
    exit(1);
  }
}

/* A session with a full window at budget 512 (positions 1..600 stepped). */
static void fill(evd_api_t *api, const char *id, const char *config) {
  char path[64], body[4096];
  size_t n;
  uint32_t p;

  snprintf(path, sizeof path, "/session/%s", id);
  must(call(api, EVD_M_PUT, path, config), 201, "PUT");
  snprintf(path, sizeof path, "/session/%s/step", id);
  n = (size_t)snprintf(body, sizeof body, "{\"positions\":[1");
  for (p = 2; p <= 600; p++)
    n += (size_t)snprintf(body + n, sizeof body - n, ",%u", p);
  snprintf(body + n, sizeof body - n, "]}");
  must(call(api, EVD_M_POST, path, body), 200, "fill");
}

__attribute__((noinline)) void step_loop(evd_api_t *api, uint32_t n,
                                         uint32_t *next) {
  char body[32];
  uint32_t i;

  for (i = 0; i < n; i++) {
    snprintf(body, sizeof body, "{\"pos\":%u}", (*next)++);
    must(call(api, EVD_M_POST, "/session/d/step", body), 200, "step");
  }
}

/* The decode step of an engine that says what it holds: the session's
 * newest is the position before. */
__attribute__((noinline)) void expect_loop(evd_api_t *api, uint32_t n,
                                           uint32_t *next) {
  char body[64];
  uint32_t i;

  for (i = 0; i < n; i++) {
    snprintf(body, sizeof body, "{\"pos\":%u,\"expect_newest\":%u}", *next,
             *next - 1);
    (*next)++;
    must(call(api, EVD_M_POST, "/session/e/step", body), 200, "expect");
  }
}

/* A batch of BATCH decode steps, one for each of the sessions b0.. */
#define BATCH 8
__attribute__((noinline)) void batch_loop(evd_api_t *api, uint32_t n,
                                          uint32_t *next) {
  char body[BATCH * 40 + 16];
  uint32_t i, k;
  size_t len;

  for (i = 0; i < n; i++) {
    len = (size_t)snprintf(body, sizeof body, "{\"steps\":[");
    for (k = 0; k < BATCH; k++)
      len += (size_t)snprintf(body + len, sizeof body - len,
                              "%s{\"session\":\"b%u\",\"pos\":%u}",
                              k > 0 ? "," : "", k, *next);
    snprintf(body + len, sizeof body - len, "]}");
    (*next)++;
    must(call(api, EVD_M_POST, "/step", body), 200, "batch");
  }
}

__attribute__((noinline)) void spec_loop(evd_api_t *api, uint32_t n,
                                         uint32_t *c) {
  char body[128];
  uint32_t i;

  for (i = 0; i < n; i++) {
    /* Accept the previous drafts' first two, draft the next four. */
    snprintf(body, sizeof body,
             "{\"commit\":%u,\"positions\":[%u,%u,%u,%u],\"tentative\":true}",
             *c + 2, *c + 3, *c + 4, *c + 5, *c + 6);
    must(call(api, EVD_M_POST, "/session/s/step", body), 200, "spec");
    *c += 2;
  }
}

__attribute__((noinline)) void fork_loop(evd_api_t *api, uint32_t n,
                                         uint32_t *next) {
  char body[64];
  uint32_t i;

  for (i = 0; i < n; i++) {
    snprintf(body, sizeof body, "{\"into\":\"f%u\"}", (*next)++);
    must(call(api, EVD_M_POST, "/session/d/fork", body), 201, "fork");
  }
}

/* Deletes the forks made so far (not timed: memory stays bounded). */
static void drop_forks(evd_api_t *api, uint32_t from, uint32_t to) {
  char path[64];

  for (; from < to; from++) {
    snprintf(path, sizeof path, "/session/f%u", from);
    must(call(api, EVD_M_DELETE, path, NULL), 204, "delete");
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  static const char *const names[5] = {"step", "spec", "fork", "expect",
                                       "batch"};
  static const char *const labels[5] = {
      "decode step {\"pos\":P}", "commit + 4 drafts", "fork (budget 512)",
      "step + expect_newest", "batch of 8 decode steps"};
  uint32_t n = 200000, nfork = 20000, next = 601, enext = 601, bnext = 601;
  uint32_t c, forks = 0;
  int rounds = 5, only = -1, i, v;
  double t[5][16], med[5];
  evd_config_t cfg;
  evd_api_t *api;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
      n = (uint32_t)strtoul(argv[++i], NULL, 10);
      nfork = n / 10 > 0 ? n / 10 : 1;
    } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      i++;
      for (v = 0; v < 5; v++)
        if (strcmp(argv[i], names[v]) == 0)
          only = v;
      if (only < 0)
        return 2;
    } else {
      fprintf(stderr, "usage: %s [--n N] [--rounds R] "
                      "[--only step|spec|fork|expect|batch]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1 || rounds > 16)
    rounds = 5;
  evd_config_defaults(&cfg);
  cfg.budget = BUDGET;
  if (evd_api_new(&api, &cfg) != 0)
    return 1;
  evd_buf_init(&out);
  fill(api, "d", "{\"budget\":512}");
  fill(api, "s", "{\"budget\":512,\"lookahead\":5}");
  fill(api, "e", "{\"budget\":512}");
  for (v = 0; v < BATCH; v++) {
    char id[16];
    snprintf(id, sizeof id, "b%d", v);
    fill(api, id, "{\"budget\":512}");
  }
  c = 600; /* the spec session's committed newest; no drafts yet */
  must(call(api, EVD_M_POST, "/session/s/step",
            "{\"positions\":[601,602,603,604],\"tentative\":true}"),
       200, "first drafts");
  c = 600 - 2 + 2; /* spec_loop commits c + 2 = 602 first */
  if (only >= 0) { /* one run of one variant, for callgrind */
    if (only == 0)
      step_loop(api, n, &next);
    else if (only == 1)
      spec_loop(api, n, &c);
    else if (only == 2)
      fork_loop(api, nfork, &forks);
    else if (only == 3)
      expect_loop(api, n, &enext);
    else
      batch_loop(api, n / BATCH, &bnext);
    printf("done\n");
  } else {
    /* Interleaved rounds, medians: a noisy neighbour slows all alike. */
    for (i = 0; i < rounds; i++) {
      double t0 = now_s();
      step_loop(api, n, &next);
      t[0][i] = (now_s() - t0) / n;
      t0 = now_s();
      spec_loop(api, n, &c);
      t[1][i] = (now_s() - t0) / n;
      t0 = now_s();
      fork_loop(api, nfork, &forks);
      t[2][i] = (now_s() - t0) / nfork;
      drop_forks(api, forks - nfork, forks);
      t0 = now_s();
      expect_loop(api, n, &enext);
      t[3][i] = (now_s() - t0) / n;
      t0 = now_s();
      batch_loop(api, n / BATCH, &bnext);
      t[4][i] = (now_s() - t0) / (n / BATCH);
    }
    printf("api: cost per request through evd_api_handle (no HTTP), median "
           "of %d rounds\n", rounds);
    for (v = 0; v < 5; v++) {
      qsort(t[v], (size_t)rounds, sizeof(double), cmp_double);
      med[v] = t[v][rounds / 2];
      printf("  %-26s %9.0f ns  %6.2fx a decode step\n", labels[v],
             med[v] * 1e9, med[v] / med[0]);
    }
  }
  evd_buf_free(&out);
  evd_api_free(api);
  return 0;
}
