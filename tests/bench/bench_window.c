/* Benchmark of the policy core: step + evict at budget 512, the ring buffer
 * beside a naive array-shifting window, in one run. Prints figures; asserts
 * nothing about speed (see `make bench`). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "window.h"

#define BUDGET 512u

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Kept out of line so that callgrind can count exactly this loop
 * (--toggle-collect=ring_loop). Returns a checksum of the victims so that
 * nothing is optimised away. */
__attribute__((noinline)) uint64_t ring_loop(evd_window_t *w, uint32_t steps) {
  uint64_t sum = 0;
  uint32_t p, slot, v[2], n;

  for (p = 1; p <= steps; p++) {
    if (evd_window_step(w, p, NULL, 0, &slot) != 0)
      abort();
    if (evd_window_evict(w, BUDGET, v, 2, &n) != 0)
      abort();
    sum += slot + (n ? v[0] : 0);
  }
  return sum;
}

/* The same work through the fused call the daemon uses. */
__attribute__((noinline)) uint64_t advance_loop(evd_window_t *w,
                                                uint32_t steps) {
  uint64_t sum = 0;
  uint32_t p, slot, victim = 0;

  for (p = 1; p <= steps; p++) {
    int r = evd_window_advance(w, p, &slot, &victim);
    if (r < 0)
      abort();
    sum += slot + victim;
  }
  return sum;
}

/* The same work as the daemon calls it for a one-position step request:
 * evd_window_steps, which checks the request and then advances. */
__attribute__((noinline)) uint64_t steps_loop(evd_window_t *w,
                                              uint32_t steps) {
  uint64_t sum = 0;
  uint32_t p, slot, victim = 0, nv;

  for (p = 1; p <= steps; p++) {
    if (evd_window_steps(w, &p, 1, 0, &slot, &victim, &nv) != 0)
      abort();
    sum += slot + (nv ? victim : 0);
  }
  return sum;
}

/* The obvious alternative: positions in a plain array, oldest first, and
 * every eviction shifts the survivors down by one. */
typedef struct {
  uint32_t n, pos[BUDGET + 1];
} naive_t;

__attribute__((noinline)) uint64_t naive_loop(naive_t *w, uint32_t steps) {
  uint64_t sum = 0;
  uint32_t p;

  for (p = 1; p <= steps; p++) {
    w->pos[w->n++] = p;
    if (w->n > BUDGET) {
      sum += w->pos[0];
      memmove(w->pos, w->pos + 1, (w->n - 1) * sizeof(uint32_t));
      w->n--;
    }
    sum += w->n;
  }
  return sum;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One timed run of variant v over `steps` steps; adds its checksum. */
static double run(int v, uint32_t steps, uint64_t *sum) {
  double t0, t;

  if (v == 3) {
    naive_t *nw = calloc(1, sizeof *nw);
    if (nw == NULL)
      abort();
    nw->n = 1; /* position 0, like the ring's start state */
    t0 = now_s();
    *sum += naive_loop(nw, steps);
    t = now_s() - t0;
    free(nw);
  } else {
    evd_window_t *w;
    if (evd_window_new(&w, BUDGET, 0, 1, NULL) != 0)
      abort();
    t0 = now_s();
    *sum += v == 0   ? ring_loop(w, steps)
            : v == 1 ? advance_loop(w, steps)
                     : steps_loop(w, steps);
    t = now_s() - t0;
    evd_window_free(w);
  }
  return t;
}

int main(int argc, char **argv) {
  static const char *const names[4] = {"ring", "advance", "steps", "naive"};
  static const char *const labels[4] = {
      "ring: step() + evict()", "ring: advance() (fused)",
      "ring: steps(), 1 position", "naive shifting array"};
  uint32_t steps = 10000000u;
  int rounds = 5, only = -1, i, v;
  double t[4][16], med[4];
  uint64_t sum = 0;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      i++;
      for (v = 0; v < 4; v++)
        if (strcmp(argv[i], names[v]) == 0)
          only = v;
      if (only < 0)
        return 2;
    } else {
      fprintf(stderr, "usage: %s [--steps N] [--rounds R] "
                      "[--only ring|advance|steps|naive]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1 || rounds > 16)
    rounds = 5;
  if (only >= 0) { /* one run of one variant, for callgrind */
    run(only, steps, &sum);
    printf("checksum %" PRIu64 "\n", sum);
    return 0;
  }
  /* Interleave the variants round by round, so that a noisy neighbour
   * slows all of them alike; then compare medians. */
  for (i = 0; i < rounds; i++)
    for (v = 0; v < 4; v++)
      t[v][i] = run(v, steps, &sum);
  printf("core: step+evict at budget %u, %" PRIu32 " steps, median of %d "
         "rounds (checksum %" PRIu64 ")\n", BUDGET, steps, rounds, sum % 1000);
  for (v = 0; v < 4; v++) {
    qsort(t[v], (size_t)rounds, sizeof(double), cmp_double);
    med[v] = t[v][rounds / 2];
    printf("  %-26s %8.2f ns/step  %8.1f Msteps/s\n", labels[v],
           med[v] / steps * 1e9, steps / med[v] / 1e6);
  }
  printf("  ratio naive/step+evict: %.1fx   naive/advance: %.1fx   "
         "naive/steps: %.1fx\n", med[3] / med[0], med[3] / med[1],
         med[3] / med[2]);
  return 0;
}
