/* evictd-llama's lanes to evictd: a lane is a thread with a link (a
 * client) of its own, so that a daemon instance that is down or hung holds
 * up only the sequences whose sessions live on it. The lanes are the
 * instances of a pool given as a list of URLs (a session routed as nginx's
 * `hash $evictd_session consistent` routes it, so that both ways of
 * reaching a pool put it on the same instance), one daemon, or, behind a
 * proxy that refuses batches (nginx in front of a pool answers POST /step
 * 421), one per sequence: its steps one per request, concurrently with
 * the others'. The caller, one thread (the engine), submits steps; each
 * lane sends its part as one batch and the caller takes the outcomes that
 * are done, waiting on the lanes that are on time and not on the late
 * ones. */
#ifndef EVICTD_LLAMA_LANES_H
#define EVICTD_LLAMA_LANES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/link.h"
#include "common/seq.h"

/* What an item asks of its lane. */
typedef enum {
  ITEM_STEP,    /* send step (the outcome, rc and answer or error, is
                   judged by the caller: seq_verdict) */
  ITEM_SETTLE,  /* re-home sq for `cause` and send step again (seq_item):
                   the outcome is final */
  ITEM_DELETE,  /* delete the session named in step.session (a copy the
                   item holds): fire and forget */
  ITEM_TRUNCATE /* truncate sq's session from `from` (seq_change: judged
                   and re-homed there, sq's newest recorded): the outcome,
                   its answer's `removed`, is final */
} item_kind_t;

/* One request of one sequence through its lane. The caller owns it (one
 * per sequence: a sequence has one request in flight at most) and must
 * not touch it, nor the sequence it names, between lanes_submit and the
 * moment lanes_collect hands it back. */
typedef struct lane_item_s {
  /* set by the caller */
  item_kind_t kind;
  seq_t *sq;              /* the sequence (ITEM_STEP reads nothing of it;
                             ITEM_SETTLE reads and updates it) */
  evd_step_t step;        /* its positions in pos, expect_newest set */
  uint32_t lane;          /* lanes_route's */
  int cause;              /* ITEM_SETTLE: why (link_cause_t) */
  uint32_t from;          /* ITEM_TRUNCATE: the first position removed */
  void *who;              /* the caller's */
  uint32_t *pos;          /* room for the step's positions (lane_item_pos) */
  size_t pos_cap;
  char session[SEQ_ID_MAX + 1]; /* ITEM_DELETE's session */
  /* the outcome, once handed back */
  int rc;                 /* 0: answer; else the client's code (EAPI: the
                             daemon refused it, code its error), or
                             LINK_EFAULT (fault) */
  char code[48];          /* the daemon's error code when rc is EAPI */
  evd_answer_t answer;    /* rc 0: the lists in buf */
  fault_t fault;          /* rc != 0: the failure as a sentence */
  uint32_t *buf;
  size_t buf_cap;
  /* the lanes' own */
  bool busy;              /* submitted and not yet handed back */
  double since;           /* when it was submitted */
  struct lane_item_s *next;
} lane_item_t;

/* Room for n positions in it->pos; 0, or -1 when out of memory. */
int lane_item_pos(lane_item_t *it, size_t n);

/* Frees what an item holds (not the item). */
void lane_item_free(lane_item_t *it);

typedef struct lanes_s lanes_t;

/* One lane's state, for /metrics and /health. */
typedef struct lane_info_s {
  char name[160];         /* the instance ("host:port", the proxy's URL) */
  bool up;                /* no request in flight longer than timeout_ms,
                             and the last one reached the daemon */
  bool late;              /* a wait gave up on it: not waited for again
                             until it answers */
  bool started;           /* has sent something */
  uint32_t in_flight;     /* items submitted and not handed back */
  double oldest;          /* seconds the oldest of them has been out */
  link_counts_t n;        /* its link's counters */
  evd_client_stats_t cs;  /* its client's */
} lane_info_t;

/* Makes the lanes of o->url, which may be a comma-separated list of the
 * instances of a pool (in the order of nginx's upstream block: each
 * instance's ring name is its URL's host:port, or the unix: URL): one
 * lane per instance; else one, becoming n_seq (one per sequence) once the
 * URL refuses batches with 421. No thread starts before its lane has
 * something to send. 0, or -1 with f set. */
int lanes_new(lanes_t **out, const link_opts_t *o, uint32_t n_seq,
              fault_t *f);

/* Stops the threads, each once it has sent what it has in hand (the
 * sessions' deletes), and frees the lanes; true. Threads still blocked
 * two seconds later (on a daemon that does not answer) are left to the
 * process's end: then nothing is freed, the items they hold must not be
 * either, and it returns false. Items are never handed back. */
bool lanes_free(lanes_t *L);

/* The number of instances (1 but for a pool) and whether it is a pool. */
size_t lanes_instances(const lanes_t *L);

/* The lane of session, whose sequence is seq (0..n_seq-1). */
uint32_t lanes_route(const lanes_t *L, const char *session, uint32_t seq);

/* Whether lane i is up (see lane_info_t); whether it is up and not late
 * (a new session is best put there). */
bool lanes_up(lanes_t *L, uint32_t i);
bool lanes_ok(lanes_t *L, uint32_t i);

/* The links' settings (whether changes carry expect_newest, whether
 * sessions are re-homed: EVICTD_LLAMA_REHOME), the same on every lane.
 * Only those flags may be read. */
const link_t *lanes_flags(const lanes_t *L);

/* Whether steps go one per request (the URL refused batches). */
bool lanes_per_session(const lanes_t *L);

/* A link of the caller's to instance i's URL, for its rare requests that
 * must be answered before it goes on (a fork, a create, a probe): made
 * on first use, used by the caller's thread only. NULL when out of
 * memory (f set). */
link_t *lanes_direct(lanes_t *L, uint32_t i, fault_t *f);

/* Submits items[0..n), each with its lane set: each lane gets its part as
 * one job (one batch, or one request per step), queued behind what it
 * has in hand. Items must not be busy. */
void lanes_submit(lanes_t *L, lane_item_t *const *items, size_t n);

/* Hands back the items that are done, at most max into out: their count.
 * Never waits. */
size_t lanes_collect(lanes_t *L, lane_item_t **out, size_t max);

/* Waits until every lane that has steps out has answered them, for
 * `grace` seconds at most (or until `until`, clock_now's, if sooner);
 * the lanes that did not are late, and no later wait waits for them
 * until they answer. A lane that is late holds up its own sequences
 * alone. */
void lanes_wait(lanes_t *L, double grace, double until);

/* Waits until some item is done, or `until` passes. */
void lanes_idle(lanes_t *L, double until);

/* Wakes the caller's lanes_wait or lanes_idle (new work came). */
void lanes_wake(lanes_t *L);

/* Starts each instance's lane now (its thread, which connects to its
 * instance), so that the first request does not wait for either. */
void lanes_start(lanes_t *L);

/* Deletes session (whose sequence is seq) through its lane, behind what
 * the lane has in hand, without waiting: the lanes keep what they need.
 * A failure is told on stderr (the session is then left to the daemon's
 * --idle-ttl). */
void lanes_delete(lanes_t *L, const char *session, uint32_t seq);

/* seq_batch through the lanes, for a command that waits for every
 * answer (generate, perplexity): each lane's part sent at once, every
 * outcome waited for, judged and re-homed as seq_batch does; res[i] is
 * item i's (link_item turns a failure into a sentence; answers and errors
 * valid until the next call). 0 when every item has an outcome; the
 * client's code with f set when an instance could not be reached. Not to
 * be mixed with lanes_submit's own use of the lanes. */
int lanes_batch(lanes_t *L, seq_t *const *sq, evd_step_t *steps, size_t n,
                evd_batch_result_t *res, fault_t *f);

/* Lane i's state; false when there is no lane i. */
bool lanes_info(lanes_t *L, uint32_t i, lane_info_t *out);

/* The lanes' links' and clients' counters, summed. */
void lanes_counts(lanes_t *L, link_counts_t *n, evd_client_stats_t *cs);

#endif
