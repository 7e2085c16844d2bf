/* What serve's engine (engine.c) and its planning of steps (steps.c)
 * share: a choice's state and the engine's. Internal to serve/. */
#ifndef EVICTD_LLAMA_SERVE_ENGINE_INT_H
#define EVICTD_LLAMA_SERVE_ENGINE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sampler.h"
#include "common/seq.h"
#include "serve/engine.h"
#include "serve/text.h"

/* One sequence: a choice of a task. */
typedef struct choice_s {
  seq_t s;                /* id: the slot's index */
  task_t *task;           /* NULL: the slot is free */
  uint32_t index;         /* the choice's number in its task */
  llama_token *hist;      /* the token at each position; hist[n] pending */
  size_t cap;
  uint32_t n;             /* positions below n are computed */
  uint32_t chunk;         /* positions this iteration's step adds */
  int32_t out;            /* its row of logits in the pass, or -1 */
  uint32_t tokens;        /* generated */
  sampler_t smp;
  text_t text;
  bool forked;            /* a choice past the first has its prompt */
  bool failed;            /* its step was refused: its task fails */
  fault_t fault;
  /* The next iteration's step, sent before this iteration's pass: */
  bool ahead;             /* answered: the outcome below is the step of
                             ahead_cnt positions from ahead_first */
  uint32_t ahead_first, ahead_cnt;
  bool ahead_failed;      /* refused (the sentence in fault) */
  evd_answer_t got;       /* else its answer, the lists in got_buf */
  uint32_t *got_buf;
  size_t got_cap;
} choice_t;

/* One batch of steps: the items, whose they are, their positions. */
typedef struct stepset_s {
  evd_step_t *steps;
  evd_batch_result_t *results;
  choice_t **who;
  seq_t **sq;
  uint32_t *pos;
} stepset_t;

struct engine_s {
  const serve_opts_t *o;
  lm_t *lm;
  tq_t *q;
  link_t link;
  evd_session_cfg_t cfg;
  uint32_t budget, sinks, lookahead;
  choice_t *slot;         /* --parallel of them */
  uint32_t n_slot, used;
  stepset_t now;          /* the steps sent at the iteration's start */
  stepset_t next;         /* the next iteration's, sent before the pass */
  choice_t **early;       /* the choices whose step went ahead */
  bool pipeline;          /* steps go ahead (EVICTD_LLAMA_PIPELINE=off:
                             not, for benchmarks' before and after) */
  uint64_t tokens;        /* this iteration's */
  pthread_t thread;
};

/* The steps of this iteration for every choice that decodes: those whose
 * step went ahead in the last iteration (answered: *n_early of them, in
 * e->early), the others in e->now (returned: how many). */
size_t steps_now(engine_t *e, size_t *n_early);

/* The next iteration's steps, in e->next, before this iteration's pass:
 * of every choice that steps now and surely goes on (not at its length,
 * not a first choice whose prompt ends now and whose task forks it: the
 * fork copies the session as the prompt left it). Returns how many (none
 * when e->pipeline is off). */
size_t steps_ahead(engine_t *e);

/* Keeps item j of e->next, once answered, for its choice until the next
 * iteration (the client's answer memory is gone by then). 0, or -1 when
 * out of memory. */
int steps_keep(engine_t *e, size_t j);

#endif
