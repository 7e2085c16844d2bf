/* The C client's pool (evd_client_pool_*) driven from the command line, for
 * tests/shard/pool_test.py (which checks it against a real nginx) and the
 * pool benchmark (tests/bench/pool.sh).
 *   pool_probe route URL...   ids on stdin: prints each one's instance
 *   pool_probe batch URL...   "id pos" lines on stdin, one pool batch: prints
 *                             "rc code newest message" per item
 *   pool_probe bench SESSIONS SECONDS URL...   creates SESSIONS sessions,
 *                             then steps them all, one pool batch per
 *                             iteration: prints "steps_per_s N iters N" */
#include "evictd/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int bench(evd_client_pool_t *p, size_t sessions, double seconds) {
  char (*ids)[48] = calloc(sessions, sizeof *ids);
  evd_step_t *steps = calloc(sessions, sizeof *steps);
  evd_batch_result_t *out = calloc(sessions, sizeof *out);
  uint32_t pos = 1;
  int rc = 1;
  if (!ids || !steps || !out)
    goto done;
  evd_session_cfg_t cfg = {64, -1, -1, -1};
  for (size_t i = 0; i < sessions; i++) {
    snprintf(ids[i], sizeof ids[i], "b%zu-%zu", sessions, i);
    rc = evd_client_create(
        evd_client_pool_client(p, evd_client_pool_instance(p, ids[i])), ids[i],
        &cfg, NULL);
    if (rc != 0) {
      fprintf(stderr, "pool_probe: create %s: %s\n", ids[i],
              evd_client_strerror(rc));
      rc = 1;
      goto done;
    }
    steps[i] = (evd_step_t){.session = ids[i], .positions = &pos,
                            .n_positions = 1};
  }
  rc = 1;
  unsigned long iters = 0;
  double t0 = now(), t;
  do {
    if (evd_client_pool_batch(p, steps, sessions, out) != 0)
      goto done;
    for (size_t i = 0; i < sessions; i++)
      if (out[i].rc != 0) {
        fprintf(stderr, "pool_probe: %s: %s\n", ids[i], out[i].error.message);
        goto done;
      }
    pos++;
    iters++;
  } while ((t = now()) - t0 < seconds);
  printf("steps_per_s %.0f iters %lu\n", iters * sessions / (t - t0), iters);
  rc = 0;
done:
  free(ids);
  free(steps);
  free(out);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: pool_probe route|batch URL... | bench N S URL...\n");
    return 2;
  }
  int first = strcmp(argv[1], "bench") == 0 ? 4 : 2;
  if (argc <= first)
    return 2;
  char err[256];
  evd_client_pool_t *p;
  evd_client_opts_t opts = {.timeout_ms = 3000};
  if (evd_client_pool_new(&p, (const char *const *)argv + first, NULL,
                          (size_t)(argc - first), &opts, err, sizeof err) != 0) {
    fprintf(stderr, "pool_probe: %s\n", err);
    return 1;
  }
  int rc = 0;
  char line[512];
  if (first == 4) {
    rc = bench(p, strtoul(argv[2], NULL, 10), atof(argv[3]));
  } else if (strcmp(argv[1], "route") == 0) {
    while (fgets(line, sizeof line, stdin)) {
      line[strcspn(line, "\n")] = '\0';
      printf("%d\n", evd_client_pool_instance(p, line));
    }
  } else {
    size_t n = 0, cap = 4096;
    char (*ids)[160] = calloc(cap, sizeof *ids);
    uint32_t *pos = calloc(cap, sizeof *pos);
    evd_step_t *steps = calloc(cap, sizeof *steps);
    evd_batch_result_t *out = calloc(cap, sizeof *out);
    while (n < cap && fgets(line, sizeof line, stdin) &&
           sscanf(line, "%159s %u", ids[n], &pos[n]) == 2) {
      steps[n] = (evd_step_t){.session = ids[n], .positions = &pos[n],
                              .n_positions = 1};
      n++;
    }
    rc = evd_client_pool_batch(p, steps, n, out);
    for (size_t i = 0; rc == 0 && i < n; i++)
      printf("%d %s %u %s\n", out[i].rc,
             out[i].rc ? out[i].error.code : "ok",
             out[i].rc ? 0 : out[i].answer.newest,
             out[i].rc ? out[i].error.message : "-");
    free(ids);
    free(pos);
    free(steps);
    free(out);
  }
  evd_client_pool_free(p);
  return rc ? 1 : 0;
}
