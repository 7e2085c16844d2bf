/* Counters and histograms for GET /metrics (Prometheus text format 0.0.4).
 * Updating one is an add to a plain field: the daemon has one thread. */
#ifndef EVICTD_METRICS_H
#define EVICTD_METRICS_H

#include <stdint.h>

#include "api.h"
#include "buf.h"
#include "histogram.h"

/* Statuses the daemon answers with, as histogram/counter columns. */
#define EVD_METRICS_NSTATUS 13
/* Latency histogram buckets (upper bounds in seconds), +Inf implied. */
#define EVD_METRICS_NBUCKETS EVD_HISTOGRAM_NBUCKETS

struct evd_journal_s;

typedef struct evd_metrics_s {
  uint64_t requests[EVD_R_COUNT][EVD_METRICS_NSTATUS];
  evd_histogram_t latency[EVD_R_COUNT];
  uint64_t steps;            /* positions stepped */
  uint64_t victims;          /* positions evicted, by steps and evicts */
  uint64_t replays;          /* retries answered from the record */
  uint64_t replays_unavailable; /* retries whose record was let go */
  uint64_t replay_pool_bytes;  /* the pool's size, when written out */
  uint64_t replay_let_go;      /* records let go from it, ever */
  uint64_t commits;          /* commits, alone or in a step */
  uint64_t dropped;          /* drafts dropped by commits */
  uint64_t truncates, removed; /* truncations and positions they removed */
  uint64_t forks;
  uint64_t adopt_created, adopt_resent, adopt_replaced, adopt_refused;
  uint64_t diverged;         /* changes refused 409 diverged */
  uint64_t created, deleted, reaped;
  uint64_t connections;      /* open now */
  uint64_t connections_total;
  uint64_t connections_cut;  /* by --conn-timeout */
  /* Persistence on: the journal whose figures are exported (read when
   * written out, as the replay pool's are; borrowed), else NULL. */
  const struct evd_journal_s *journal;
} evd_metrics_t;

/* Counts one answered request with its handling time. */
void evd_metrics_request(evd_metrics_t *m, evd_route_t route, int status,
                         double seconds);

/* Appends the exposition text, with `sessions` live sessions. */
void evd_metrics_write(const evd_metrics_t *m, uint32_t sessions,
                       evd_buf_t *out);

#endif
