/* evictd-llama generate's run: its state and its decode phases
 * (decode.c), and speculative decoding over them (speculate.c). The
 * command (generate.c) stands above both; decode.c calls neither. */
#ifndef EVICTD_LLAMA_GENERATE_DECODE_H
#define EVICTD_LLAMA_GENERATE_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/dump.h"
#include "common/lanes.h"
#include "common/link.h"
#include "common/lm.h"
#include "common/posmap.h"
#include "common/sampler.h"
#include "common/seq.h"
#include "generate/generate.h"

/* ---- the run's state ----------------------------------------------------- */

/* One sample: a sequence and its tokens. */
typedef struct sample_s {
  seq_t s;              /* the session, the target's cache map */
  posmap_t dmap;        /* what the draft's cache holds */
  llama_token *hist;    /* the token at each position; hist[n] is pending */
  llama_token *alt;     /* the runner-up where a token was sampled */
  size_t cap, alt_cap;
  uint32_t n;           /* positions below n are computed (or evicted) */
  uint32_t printed;     /* tokens streamed to stdout so far */
  sampler_t smp;
  bool done;            /* reached an end-of-generation token */
} sample_t;

/* Time per decode iteration, for --stats and the benchmark. */
typedef struct times_s {
  double *total, *evictd, *decode, *remove;
  size_t n, cap;
} times_t;

typedef struct gen_s {
  const gen_opts_t *o;
  lm_t target, draft;
  bool has_draft;
  lanes_t *lanes;       /* evictd: one instance, or a pool's lanes */
  dump_t dumpf;
  dump_t *dump;         /* &dumpf with --dump, else NULL */
  seq_trace_t trace;    /* dump_remove, with --dump */
  sample_t *samples;
  uint32_t n_samples;
  uint32_t n_prompt;    /* prompt tokens, BOS included (positions 0..) */
  uint32_t budget, sinks, lookahead;
  bool stream;          /* tokens go to stdout as they become final */
  /* per-iteration request memory, sized once */
  evd_step_t *steps;
  evd_batch_result_t *results;
  uint32_t *pos;
  uint32_t *idx;
  seq_t **sq;           /* the sequence of each step */
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

/* ---- decode.c: helpers, then the phases; each returns 0 or 1 (the
 * message printed) ------------------------------------------------------ */

/* Prints "evictd-llama: " and the message on stderr; returns 1. */
int gen_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints a fault's sentence; returns 1. */
int gen_fault(const fault_t *f);

/* The link s's session's changes go through: the engine's own to the
 * instance the session lives on (common/lanes.h); NULL (told) when out of
 * memory. */
link_t *gen_link(gen_t *g, const sample_t *s);

/* Grows a sample's history to hold `need` positions; 0 or -1. */
int gen_reserve(sample_t *s, uint32_t need);

/* Tokens decided so far (the pending one included). */
uint32_t gen_decided(const gen_t *g, const sample_t *s);

/* Writes the final tokens not yet written, below position `upto` and
 * within the requested length. */
void gen_stream(gen_t *g, sample_t *s, uint32_t upto);

/* Adds absolute position p of s to lm's batch (recorded for --dump). */
int gen_put(gen_t *g, lm_t *lm, sample_t *s, uint32_t p, bool output);

/* Follows an answer (common/seq.c) into the target's cache, and the
 * victims and removed positions into the draft's: `added` positions came
 * with the request. */
int gen_follow(gen_t *g, sample_t *s, const evd_answer_t *a, size_t added);

/* Sends one step of s, following no answer yet. */
int gen_step(gen_t *g, sample_t *s, const uint32_t *pos, size_t n,
             bool tentative, bool commit, uint32_t commit_at,
             evd_answer_t *a);

/* One llama_decode of lm's batch (recorded for --dump). */
int gen_pass(gen_t *g, lm_t *lm);

/* Counts one iteration's times; 0 or 1. */
int gen_times(gen_t *g, double total, double evd, double dec, double rm);

int gen_prefill(gen_t *g);
int gen_fork_and_start(gen_t *g);
int gen_iterate(gen_t *g, bool *more);
int gen_rewind(gen_t *g, sample_t *s);

#endif
