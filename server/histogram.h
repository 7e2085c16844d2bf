/* A latency histogram with fixed buckets, as GET /metrics exports them: a
 * plain struct that any module may keep its own figures in (the journal's
 * fsync times, the API's request times) without depending on metrics. */
#ifndef EVICTD_HISTOGRAM_H
#define EVICTD_HISTOGRAM_H

#include <stdint.h>

/* Buckets (upper bounds in seconds, evd_histogram_bounds), +Inf implied. */
#define EVD_HISTOGRAM_NBUCKETS 14

typedef struct evd_histogram_s {
  uint64_t bucket[EVD_HISTOGRAM_NBUCKETS + 1]; /* last one is +Inf */
  uint64_t count;
  double sum;
} evd_histogram_t;

/* The buckets' upper bounds, ascending (histogram.c). */
extern const double evd_histogram_bounds[EVD_HISTOGRAM_NBUCKETS];

/* Adds one observation. Inline: every answered request passes here. */
static inline void evd_histogram_observe(evd_histogram_t *h,
                                         double seconds) {
  int i = 0;

  while (i < EVD_HISTOGRAM_NBUCKETS && seconds > evd_histogram_bounds[i])
    i++;
  h->bucket[i]++;
  h->count++;
  h->sum += seconds;
}

#endif
