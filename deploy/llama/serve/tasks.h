/* evictd-llama serve's queue: how a completion request (a task) goes from
 * an HTTP connection's thread to the engine thread and how what the engine
 * makes of it comes back. The HTTP side submits a task, then takes its
 * news (events: bytes of a choice, the end of a choice) until it is done,
 * or cancels it when its client goes away; the engine admits tasks into
 * free sequences, emits their events and finishes them. One mutex guards
 * the queue, every task's shared part and the server's counters. */
#ifndef EVICTD_LLAMA_TASKS_H
#define EVICTD_LLAMA_TASKS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "common/link.h"
#include "histogram.h"
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
  /* llama-server's sampler chain (common's, serve/upstream.h), one per
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

/* The most evictd instances whose states /metrics and /health show. */
#define SERVE_LANES_MAX 32

/* An evictd instance as the engine sees it. */
typedef struct lane_state_s {
  char name[160];         /* host:port (the pool's ring name), or the URL */
  bool up;                /* answering within --timeout-ms */
  bool late;              /* the engine stopped waiting on it */
  uint32_t waiting;       /* sequences sitting out for its answers */
} lane_state_t;

/* What conversations saved, reused and dropped (serve/convs.c). */
typedef struct conv_counts_s {
  uint64_t hits, misses;      /* requests that continued one, or not */
  uint64_t reused, prefilled; /* prompt tokens kept, and decoded */
  uint64_t saved, restored, dropped;
  uint64_t packed;            /* sequences whose cells were packed */
  uint32_t parked;            /* slots holding one now */
  uint32_t stored;            /* saved ones held now */
  uint64_t stored_bytes;
} conv_counts_t;

/* The most slots GET /slots shows (--parallel's upper bound). */
#define SERVE_SLOTS_MAX 256

/* What a slot is doing. */
typedef enum {
  SLOT_FREE,        /* nothing: its cells empty */
  SLOT_PROCESSING,  /* a task's choice decodes in it */
  SLOT_PARKED,      /* it holds a conversation no request decodes */
  SLOT_LEAVING      /* its task ended with a step out: parked or given
                       back when the step comes back */
} slot_use_t;

/* A slot as the engine last published it, for GET /slots. */
typedef struct slot_state_s {
  slot_use_t use;
  char session[136];      /* its evictd session ("" when free) */
  char task[64];          /* the task decoding in it ("" when none) */
  uint32_t choice;        /* that task's choice */
  uint32_t n;             /* positions computed */
  uint32_t held;          /* positions the session's window holds */
  uint32_t budget, sinks, lookahead; /* the session's window */
  uint32_t n_prompt;      /* the task's prompt positions */
  uint32_t cached;        /* of those, what a conversation held already */
  uint32_t tokens;        /* generated so far */
  uint32_t n_predict;     /* at most */
} slot_state_t;

/* llama-server's own figures (its /metrics' llamacpp: families): tokens,
 * and the time their iterations took, counted per pass. */
typedef struct pass_counts_s {
  uint64_t prompt_tokens; /* prompt positions decoded */
  double prompt_s;        /* the iterations whose pass held some */
  uint64_t gen_steps;     /* generated tokens decoded (one per choice per
                             pass: the first is drawn from the prompt's
                             logits and costs no step of its own) */
  double gen_s;           /* each such choice's iteration time, summed */
  uint64_t busy;          /* slots a task held, summed over passes */
  uint32_t n_max;         /* the most positions a sequence computed */
} pass_counts_t;

/* The server's counters for GET /metrics, under the queue's lock. */
typedef struct stats_s {
  uint64_t requests;      /* submitted */
  uint64_t rejected;      /* refused at submit: queue full, stopping */
  uint64_t ok, failed, cancelled;
  uint64_t tokens;        /* generated */
  uint64_t iterations, steps;
  uint64_t ahead;         /* steps sent before the pass they precede */
  uint64_t connections, resends; /* the evictd client's */
  link_counts_t link;     /* re-homes, creates, a proxy's 502s */
  bool per_session;       /* evictd's URL refused batches (421) */
  double evictd_s, decode_s, total_s;
  evd_histogram_t evictd_rtt; /* one evictd request per iteration */
  uint32_t queued, running, sequences;
  lane_state_t lanes[SERVE_LANES_MAX]; /* evictd's instances */
  uint32_t n_lanes;
  conv_counts_t convs;
  pass_counts_t pass;     /* since the start */
  pass_counts_t bucket;   /* since the last scrape of /metrics (its
                             rates: llama-server's buckets) */
  slot_state_t slots[SERVE_SLOTS_MAX]; /* GET /slots */
  uint32_t n_slots;
  uint32_t budget, sinks, lookahead; /* the engine's sessions' window */
} stats_t;

typedef struct tq_s {
  pthread_mutex_t mu;
  pthread_cond_t work;    /* the engine waits on it */
  task_t *head, *tail;
  uint32_t max_queued;
  uint64_t counter;       /* task ids: PREFIX-K */
  char prefix[48];
  bool stopping;
  stats_t stats;
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

/* A copy of the counters. */
void tq_stats(tq_t *q, stats_t *out);

/* The same for a scrape of /metrics: the rates' bucket is emptied. */
void tq_scrape(tq_t *q, stats_t *out);

/* ---- the engine --------------------------------------------------------- */

/* Waits (when idle) for a task to queue or the server to stop; then the
 * first queued task if it needs at most `room` sequences, else NULL. The
 * task returned is running, its queue reference now the engine's. *stop
 * is set once the server stops (no task then). */
task_t *tq_admit(tq_t *q, uint32_t room, bool idle, bool *stop);

/* Whether t's client went away. */
bool tq_cancelled(tq_t *q, const task_t *t);

/* t's first choice left its conversation parked in session, n positions
 * computed (for previous_response_id). */
void tq_conv(tq_t *q, task_t *t, const char *session, uint32_t n,
             uint64_t gen, int32_t next);

/* The prompt positions a continued conversation held for t (usage's
 * cached_tokens). */
void tq_cached(tq_t *q, task_t *t, uint32_t n);

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

/* The sequences decoding now (a choice took or left its slot). */
void tq_sequences(tq_t *q, uint32_t n);

/* The evictd instances' states (n of them, at most SERVE_LANES_MAX) and
 * the conversations' counts. */
void tq_lanes(tq_t *q, const lane_state_t *st, size_t n,
              const conv_counts_t *cc);

/* The slots' states (n of them, at most SERVE_SLOTS_MAX) and the window
 * of the engine's sessions. */
void tq_slots(tq_t *q, const slot_state_t *st, uint32_t n, uint32_t budget,
              uint32_t sinks, uint32_t lookahead);

/* Adds one pass's figures for llama-server's families. */
void tq_pass(tq_t *q, const pass_counts_t *p);

/* Adds tokens drawn (a task about to finish: its iteration's so far, so
 * that /metrics counts them before its client has the answer). */
void tq_tokens(tq_t *q, uint64_t tokens);

/* Adds one iteration's figures. */
void tq_count(tq_t *q, uint64_t tokens, uint64_t steps, uint64_t ahead,
              double evictd_s,
              double decode_s, double total_s,
              const evd_client_stats_t *cs, const link_counts_t *lc,
              bool per_session);

#endif
