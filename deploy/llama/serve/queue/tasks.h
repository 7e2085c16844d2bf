/* evictd-llama serve's queue: how a completion request (a task) goes from
 * an HTTP connection's thread to the engine thread and how what the engine
 * makes of it comes back. The HTTP side submits a task, then takes its
 * news (events: bytes of a choice, the end of a choice) until it is done,
 * or cancels it when its client goes away; the engine admits tasks into
 * free sequences, emits their events and finishes them. One mutex guards
 * the queue, every task's shared part and the queue's counts; the
 * engine's figures are the board's (stats.h). */
#ifndef EVICTD_LLAMA_TASKS_H
#define EVICTD_LLAMA_TASKS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "common/link.h"
#include "llama.h"

/* Why a choice ended. */
typedef enum {
  FIN_EOS,     /* an end-of-generation token */
  FIN_LIMIT,   /* the length asked for */
  FIN_STOP     /* one of the stop strings (not part of the text) */
} finish_t;

typedef enum {
  EV_TEXT,
  EV_END,
  EV_TOKEN,  /* a token drawn (want.tokens or n_probs): its bytes are a
                token_ev_t with its candidates */
  EV_PROGRESS /* want.progress: the prompt's positions computed so far
                 (tokens), once when it starts (those a conversation held)
                 and after each pass of it */
} ev_kind_t;

/* The most candidates a request may ask for per token (n_probs,
 * top_logprobs). */
#define SERVE_PROBS_MAX 100

/* A drawn token as an EV_TOKEN event's bytes: its id, its probability,
 * and the n most likely candidates (llama-server's n_probs), most likely
 * first. */
typedef struct token_ev_s {
  int32_t id;
  float p;
  uint32_t n;
  struct {
    int32_t id;
    float p;
  } top[];
} token_ev_t;

typedef struct event_s {
  ev_kind_t kind;
  uint32_t choice;
  size_t off, len;        /* EV_TEXT: bytes at news.text.data + off (UTF-8) */
  finish_t finish;        /* EV_END */
  uint32_t tokens;        /* the tokens the choice generated: so far
                             (EV_TEXT), in all (EV_END) */
  uint32_t stop;          /* EV_END with FIN_STOP: which of want.stop */
} event_t;

/* Events and their bytes. The HTTP side takes a task's by swapping its
 * own (emptied) news for them, so nothing is copied. */
typedef struct news_s {
  event_t *ev;
  size_t n_ev, cap_ev;
  evd_buf_t text;
} news_t;

void news_clear(news_t *n);
void news_free(news_t *n);

/* What a task asks for (set before tq_submit, read-only afterwards). */
typedef struct want_s {
  uint32_t n_predict;     /* tokens per choice at most */
  uint32_t n;             /* choices: the prompt decoded once, then forked */
  double temp, top_p;
  uint64_t seed;          /* choice i draws with seed + i */
  char **stop;            /* stop strings (the task owns them) */
  uint32_t n_stop;
  bool ignore_eos;        /* llama-server's: end tokens are never drawn */
  /* llama-server's sampler chain (common's, upstream/sampler.h), one per
   * choice (seed + i), made and checked on the HTTP side; NULL: greedy or
   * the plain temperature draw of common/sampler.c. The task owns them. */
  struct up_sampler_s **samplers;
  llama_token *preserved; /* tokens shown as their text (tool-call markers) */
  uint32_t n_preserved;
  uint32_t n_probs;       /* candidates reported per token (0: none) */
  bool tokens;            /* each drawn token reported (EV_TOKEN) */
  bool cache_prompt;      /* llama-server's: continue a parked sequence
                             that the prompt extends (true by default) */
  bool progress;          /* llama-server's return_progress: EV_PROGRESS */
} want_t;

typedef enum { TASK_QUEUED, TASK_RUNNING, TASK_DONE } task_state_t;

typedef struct task_s {
  struct task_s *next;    /* the queue */
  want_t want;
  llama_token *prompt;    /* the task owns it: the tokens of positions
                             base..n_prompt-1 */
  uint32_t n_prompt;      /* positions of the prompt, the BOS included */
  uint32_t base;          /* 0, or for a continuation by id (cont), the
                             positions the conversation computed already */
  char cont[136];         /* the session of the conversation this task
                             continues by id (the Responses API's
                             previous_response_id), or "" */
  /* What the engine tells of the task's first choice when it ends (under
   * the queue's lock): the conversation it leaves parked, if any. */
  char conv[136];         /* its session ("" when none is kept) */
  uint32_t conv_n;        /* the positions it computed */
  uint64_t conv_gen;      /* its generation: the conversation as this
                             task left it (another request that continues
                             it makes a new one) */
  int32_t conv_next;      /* the token drawn last and never decoded, that
                             the answer shows (-1: none, or an end token):
                             a continuation by id decodes it first */
  uint64_t cont_gen;      /* with cont: the generation it continues */
  uint32_t cached;        /* prompt positions a conversation already held */
  uint8_t cache_from;     /* where they came from (cache_from_t) */
  double t_start, t_prompt, t_end; /* when it was taken in, its prompt
                                      done, it ended (clock_now; the
                                      engine's, read once it is done):
                                      timings */
  char id[64];            /* PREFIX-K; its sessions: ID, or ID~I for
                             choice I (a continued conversation keeps its
                             own) */
  bool whole;             /* set before it is queued: its HTTP side takes
                             the news once done (a whole answer), so an
                             event does not wake it, only the end */
  /* under the queue's lock */
  task_state_t state;
  bool cancel;            /* its client went away */
  bool failed;
  fault_t fault;          /* when failed */
  int refs;               /* the HTTP side's, and the queue's or engine's */
  news_t news;
  pthread_cond_t cv;      /* news (unless whole), or done */
} task_t;

/* The queue's own counts, for GET /metrics (under its lock). */
typedef struct tq_counts_s {
  uint64_t requests;      /* submitted */
  uint64_t rejected;      /* refused at submit: queue full, stopping */
  uint64_t ok, failed, cancelled;
  uint32_t queued, running;
} tq_counts_t;

typedef struct tq_s {
  pthread_mutex_t mu;
  pthread_cond_t work;    /* the engine waits on it */
  task_t *head, *tail;
  uint32_t max_queued;
  uint64_t counter;       /* task ids: PREFIX-K */
  char prefix[48];
  bool stopping;
  tq_counts_t counts;
} tq_t;

enum { TQ_FULL = -1, TQ_STOPPING = -2 };

/* A queue of at most max_queued waiting tasks, whose ids are
 * PREFIX-1, PREFIX-2, ... */
void tq_init(tq_t *q, uint32_t max_queued, const char *prefix);
void tq_destroy(tq_t *q);

/* ---- the HTTP side ------------------------------------------------------ */

/* A task with one reference (the caller's); NULL when out of memory. */
task_t *task_new(void);

/* Drops the caller's reference; the last one frees the task. */
void tq_release(tq_t *q, task_t *t);

/* Queues t (its id is set here): 0, TQ_FULL or TQ_STOPPING (503). */
int tq_submit(tq_t *q, task_t *t);

/* Moves t's news into *into (emptied first) and returns t's state; waits
 * up to wait_ms for some when there is none and t is not done (for t's
 * end when t->whole). */
task_state_t tq_take(tq_t *q, task_t *t, news_t *into, int wait_ms);

/* The client went away: a queued task leaves the queue at once (it has no
 * session yet), a running one ends at the engine's next iteration. */
void tq_cancel(tq_t *q, task_t *t);

/* A copy of the queue's counts. */
void tq_counts(tq_t *q, tq_counts_t *out);

/* ---- the engine --------------------------------------------------------- */

/* Waits (when idle) for a task to queue or the server to stop, or until
 * clock_now() reaches `until` (0: no limit); then the first queued task
 * if it needs at most `room` sequences, else NULL. The task returned is
 * running, its queue reference now the engine's. *stop is set once the
 * server stops (no task then). */
task_t *tq_admit(tq_t *q, uint32_t room, bool idle, double until,
                 bool *stop);

/* Whether t's client went away. */
bool tq_cancelled(tq_t *q, const task_t *t);

/* t's first choice left its conversation parked in session, n positions
 * computed (for previous_response_id). */
void tq_conv(tq_t *q, task_t *t, const char *session, uint32_t n,
             uint64_t gen, int32_t next);

/* Where the prompt positions a request kept came from: nothing, a
 * conversation parked in its slot, one saved to host memory, one found in
 * --cache-dir at start, a checkpoint (timings' cache_kind: the number). */
typedef enum {
  CACHE_NONE,
  CACHE_CONV,
  CACHE_SAVED,
  CACHE_DISK,
  CACHE_CKPT
} cache_from_t;

/* The prompt positions a continued conversation held for t (usage's
 * cached_tokens), and where they came from. */
void tq_cached(tq_t *q, task_t *t, uint32_t n, cache_from_t from);

/* With want.progress: the prompt's first n positions are computed (an
 * EV_PROGRESS event). */
void tq_progress(tq_t *q, task_t *t, uint32_t n);

/* A drawn token of choice i of t (EV_TOKEN). */
void tq_token(tq_t *q, task_t *t, uint32_t i, const token_ev_t *tok);

/* Events of choice i of t. */
void tq_text(tq_t *q, task_t *t, uint32_t i, const char *s, size_t n,
             uint32_t tokens);
void tq_end(tq_t *q, task_t *t, uint32_t i, finish_t why, uint32_t tokens,
            uint32_t stop);

/* t is done (failed when f is not NULL); drops the engine's reference. */
void tq_finish(tq_t *q, task_t *t, const fault_t *f);

/* The server stops: tq_admit says so from now on. */
void tq_stop(tq_t *q);

/* Refuses every queued task (f) at shutdown. */
void tq_drain(tq_t *q, const fault_t *f);

#endif
