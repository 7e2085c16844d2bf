/* What the lanes' two sides share (lanes.h): a lane's thread (lane.c),
 * which runs its jobs on its own link, and the caller's side (lanes.c),
 * which queues them and takes the outcomes back. Internal to common/. */
#ifndef EVICTD_LLAMA_LANES_INT_H
#define EVICTD_LLAMA_LANES_INT_H

#include <pthread.h>

#include "common/lanes.h"

/* A lane's part of one lanes_submit: queued, then run (it stays at the
 * head of its lane's queue while it runs, so the head is the oldest thing
 * a lane has in hand). */
typedef struct job_s {
  lane_item_t *items;     /* linked through next */
  double since;           /* submitted */
  struct job_s *next;
} job_t;

typedef struct lane_s {
  lanes_t *L;
  uint32_t index;
  link_t link;            /* the thread's */
  link_t direct;          /* the caller's (lanes_direct), made on use */
  bool has_direct;
  const char *url;
  char name[160];
  pthread_t thread;
  bool started;           /* the thread runs */
  bool warm;              /* started by lanes_start: it connects first */
  pthread_cond_t go;
  /* under the mutex */
  job_t *head, *tail;     /* the job run now first, then those queued */
  uint32_t in_flight;     /* items */
  uint32_t n_steps;       /* of them, steps (not deletes) */
  bool late;              /* a lanes_wait gave up on it; until it answers */
  bool unreachable;       /* its last job met no daemon */
  link_counts_t n;        /* its link's counters, published per job */
  evd_client_stats_t cs;
  /* the thread's scratch: a job's items as arrays */
  evd_step_t *steps;
  evd_batch_result_t *res;
  lane_item_t **it;
  size_t cap_steps, cap_res, cap_it;
} lane_t;

struct lanes_s {
  link_opts_t o;
  uint32_t n_seq;
  evd_client_pool_t *ring;  /* a pool of instances: its routing only */
  size_t n_inst;
  char **urls;
  lane_t *lane;             /* max(n_inst, n_seq) of them, then one more:
                               the deletes' behind a proxy */
  size_t n_lane;            /* the ones steps are routed to */
  size_t n_all;             /* n_lane + 1 */
  pthread_mutex_t mu;
  pthread_cond_t done;      /* an item is done, or the caller is woken */
  bool woken;
  bool stopping;
  bool per_session;         /* the URL refused batches: a lane per seq
                               (set once by a lane, read atomically) */
  lane_item_t *done_head;   /* done, not yet collected */
  job_t *free_jobs;
  lane_item_t *bitems;      /* lanes_batch's items */
  size_t cap_bitems;
};

/* A lane's thread (lane.c): runs the jobs queued to it, one at a time, on
 * its own link, and hands each job's items back (done_head, the done
 * condition); returns once the lanes stop and its queue is empty. arg:
 * its lane_t. */
void *lane_main(void *arg);

#endif
