/* evictd-llama serve's board: the engine's figures (iterations, passes,
 * tokens, the evictd instances', the slots', the conversations'), written
 * by the engine thread and read by GET /metrics, /slots, /props and
 * /health under a lock of its own, apart from the queue's. */
#ifndef EVICTD_LLAMA_SERVE_STATS_H
#define EVICTD_LLAMA_SERVE_STATS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/link.h"
#include "histogram.h"

/* The most evictd instances whose states /metrics and /health show. */
#define SERVE_LANES_MAX 32

/* An evictd instance as the engine sees it. */
typedef struct lane_state_s {
  char name[160];         /* host:port (the pool's ring name), or the URL */
  bool up;                /* answering within --timeout-ms */
  bool late;              /* the engine stopped waiting on it */
  uint32_t waiting;       /* sequences sitting out for its answers */
} lane_state_t;

/* What conversations saved, reused and dropped (engine/park.c). */
typedef struct conv_counts_s {
  uint64_t hits, misses;      /* requests that continued one, or not */
  uint64_t no_back;           /* misses a cache that can go back would
                                 have continued by going back (lm.h's
                                 rewind) */
  uint64_t reused, prefilled; /* prompt tokens kept, and decoded */
  uint64_t saved, restored, dropped;
  uint64_t packed;            /* sequences whose cells were packed */
  uint32_t parked;            /* slots holding one now */
  uint32_t stored;            /* saved ones held now */
  uint64_t stored_bytes;
  uint64_t ck_made, ck_hits;  /* checkpoints kept, and continued from */
  uint64_t disk_hits;         /* requests that continued one found in
                                 --cache-dir at start */
  uint64_t ck_dropped;
  uint32_t ck_held;           /* held now, and their bytes */
  uint64_t ck_bytes;
  uint64_t written;           /* parked ones given to --cache-dir */
  uint64_t disk_writes, disk_bytes, disk_errors; /* its files written */
  uint32_t disk_pending;      /* writes waiting */
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

/* The engine's figures for GET /metrics and GET /slots. */
typedef struct stats_s {
  uint64_t tokens;        /* generated */
  uint64_t iterations, steps;
  uint64_t ahead;         /* steps sent before the pass they precede */
  uint64_t connections, resends; /* the evictd client's */
  link_counts_t link;     /* re-homes, creates, a proxy's 502s */
  bool per_session;       /* evictd's URL refused batches (421) */
  double evictd_s, decode_s, total_s;
  evd_histogram_t evictd_rtt; /* one evictd request per iteration */
  uint32_t sequences;      /* decoding now */
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

typedef struct board_s {
  pthread_mutex_t mu;
  stats_t stats;
} board_t;

void board_init(board_t *b);
void board_destroy(board_t *b);

/* A copy of the figures. */
void board_copy(board_t *b, stats_t *out);

/* The same for a scrape of /metrics: the rates' bucket is emptied. */
void board_scrape(board_t *b, stats_t *out);

/* The sequences decoding now (a choice took or left its slot). */
void board_sequences(board_t *b, uint32_t n);

/* The evictd instances' states (n of them, at most SERVE_LANES_MAX) and
 * the conversations' counts. */
void board_lanes(board_t *b, const lane_state_t *st, size_t n,
                 const conv_counts_t *cc);

/* The slots' states (n of them, at most SERVE_SLOTS_MAX) and the window
 * of the engine's sessions. */
void board_slots(board_t *b, const slot_state_t *st, uint32_t n,
                 uint32_t budget, uint32_t sinks, uint32_t lookahead);

/* Adds one pass's figures for llama-server's families. */
void board_pass(board_t *b, const pass_counts_t *p);

/* Adds tokens drawn (a task about to finish: its iteration's so far, so
 * that /metrics counts them before its client has the answer). */
void board_tokens(board_t *b, uint64_t tokens);

/* Adds one iteration's figures. */
void board_count(board_t *b, uint64_t tokens, uint64_t steps, uint64_t ahead,
                 double evictd_s,
                 double decode_s, double total_s,
                 const evd_client_stats_t *cs, const link_counts_t *lc,
                 bool per_session);

#endif
