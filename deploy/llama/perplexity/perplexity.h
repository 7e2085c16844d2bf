/* evictd-llama perplexity: the negative log-likelihood of each token of a
 * text decoded token by token with full attention and with evictd's window
 * and sinks policies at several budgets (perplexity.c runs it, summary.c
 * prints the table, the JSON and the SVG). */
#ifndef EVICTD_LLAMA_PERPLEXITY_H
#define EVICTD_LLAMA_PERPLEXITY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/posmap.h"

#define PPL_MAX_BUDGETS 32

/* One policy's run: full attention (budget 0), or a window of `budget`
 * positions with `sinks` pinned. */
typedef struct ppl_policy_s {
  char name[16];        /* "full", "window", "sinks" */
  uint32_t budget;      /* 0: full attention */
  uint32_t sinks;
  double *nll;          /* nll[i]: the token at position i + 1 (nats) */
  double mean;          /* mean of nll */
  double ppl_in, ppl_beyond; /* perplexity of the tokens at positions up
                           to the training context and past it (NAN when
                           there are none, or the model does not say) */
  double *trail;        /* trail[i]: exp(mean nll over the trailing window
                           ending at token i), once the window is full */
  int64_t over;         /* first position whose trailing perplexity is
                           above twice full attention's there, or -1 */
} ppl_policy_t;

typedef struct ppl_run_s {
  const char *model, *file;
  pos_mode_t positions;
  uint32_t n_tokens;    /* scored: positions 1..n_tokens */
  uint32_t trail_w;     /* trailing window of the running perplexity */
  uint32_t sinks;
  int32_t n_ctx_train;   /* the model's training context (GGUF) */
  uint32_t n_budgets;
  uint32_t budgets[PPL_MAX_BUDGETS];
  uint32_t n_pol;       /* 1 + 2 * n_budgets: full, then window and sinks
                           of each budget */
  ppl_policy_t *pol;
  double seconds;
} ppl_run_t;

/* The command: evictd-llama perplexity FILE [options]. Returns the exit
 * status (0, 1 failure, 2 usage). */
int perplexity_main(int argc, char **argv);

/* summary.c: the trailing perplexities and crossings (after the run), the
 * table, the JSON and the SVG (at budget b). The writers return 0 or -1
 * (errno set by stdio). */
void ppl_summarize(ppl_run_t *r);
void ppl_table(const ppl_run_t *r, FILE *f);
int ppl_json(const ppl_run_t *r, FILE *f);
int ppl_svg(const ppl_run_t *r, uint32_t budget, FILE *f);

#endif
