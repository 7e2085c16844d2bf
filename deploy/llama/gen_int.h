/* What gen.c (set-up and the whole run) and loop.c (the decode phases)
 * share: the run's state and a few helpers. */
#ifndef EVICTD_LLAMA_GEN_INT_H
#define EVICTD_LLAMA_GEN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dump.h"
#include "cli.h"
#include "evictd/client.h"
#include "gen.h"
#include "lm.h"
#include "posmap.h"

typedef struct seq_s {
  int32_t id;           /* llama.cpp sequence id */
  char session[160];    /* evictd session id */
  llama_token *hist;    /* the token at each position; hist[n] is pending */
  llama_token *alt;     /* the runner-up where a token was sampled */
  uint32_t cap;
  uint32_t n;           /* positions below n are computed (or evicted) */
  uint32_t held;        /* positions evictd holds, and llama.cpp's cache */
  uint32_t printed;     /* tokens streamed to stdout so far */
  uint64_t rng;
  bool done;            /* reached an end-of-generation token */
  bool created;         /* this run created the session (deleted if the
                           run fails) */
  posmap_t map, dmap;   /* what the target's / the draft's cache holds, and
                           the position llama.cpp knows each by */
} seq_t;

/* Time per decode iteration, for --stats and the benchmark. */
typedef struct times_s {
  double *total, *evictd, *decode, *remove;
  size_t n, cap;
} times_t;

typedef struct gen_s {
  const gen_opts_t *o;
  lm_t target, draft;
  bool has_draft;
  evd_client_t *ev;
  dump_t dumpf;
  dump_t *dump;         /* &dumpf with --dump, else NULL */
  seq_t *seqs;
  uint32_t n_seqs;
  uint32_t n_prompt;    /* prompt tokens, BOS included (positions 0..) */
  uint32_t budget, sinks, lookahead;
  bool stream;          /* tokens go to stdout as they become final */
  /* per-iteration request memory, sized once */
  evd_step_t *steps;
  evd_batch_result_t *results;
  uint32_t *pos;
  uint32_t *idx;
  uint32_t *abs[2];     /* the absolute position of each token of the
                           target's [0] and the draft's [1] batch */
  /* speculative state (one sequence) */
  uint32_t draft_next;  /* the draft cache has computed positions below */
  bool commit_due;
  uint32_t commit_at;   /* newest accepted position, to commit next */
  uint32_t drafts_to;   /* the newest tentative position sent */
  times_t times;
  uint64_t accepted, drafted;
} gen_t;

/* Prints "evictd-llama: " and the message on stderr; returns 1. */
#define gen_fail(...) cli_say(1, "evictd-llama", NULL, __VA_ARGS__)

/* The last client error, as a sentence about `what` (e.g. "the step"), of
 * `session` when not NULL; returns 1. */
int gen_evd_fail(gen_t *g, const char *what, const char *session);

double gen_now(void);

/* Grows a sequence's history to hold `need` positions; 0 or -1. */
int gen_seq_reserve(seq_t *s, uint32_t need);

/* Tokens decided so far (the pending one included). */
uint32_t gen_decided(const gen_t *g, const seq_t *s);

/* Writes the final tokens not yet written, below position `upto` and
 * within the requested length. */
void gen_stream(gen_t *g, seq_t *s, uint32_t upto);

/* The decode phases (loop.c); each returns 0 or 1 (the message printed). */
int gen_prefill(gen_t *g);
int gen_fork_and_start(gen_t *g);
int gen_iterate(gen_t *g, bool *more);
int gen_speculate(gen_t *g, bool *more);
int gen_rewind(gen_t *g, seq_t *s);
int gen_settle(gen_t *g);

#endif
